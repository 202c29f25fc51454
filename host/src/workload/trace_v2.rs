//! `[workload.trace_v2]`: requests from a TraceV2 trace (spec
//! `workload-head.md` §2.4), the workload source of `blis replay`.
//!
//! The trace is read once, before the run, into a compact per-row table
//! (about 40 bytes a row; a TraceV2 file need not be sorted — observe
//! writes completion order — so it cannot be streamed in arrival order).
//!
//! * **Tokens**: a row's prompt is its group's prefix (fixed by the first
//!   row of the group with `prefix_length` > 0; blis content segments,
//!   seeded from the run seed and the group name) followed by `n` fresh
//!   tokens, `n = server_input_tokens` when > 0 and the row has no prefix
//!   group, else `input_tokens`; the output is `output_tokens` (a row with
//!   0 output tokens, or an empty prompt, is replayed with 1: blis requests
//!   compute at least one token — counted in a note).
//! * **Injection time**: `send_time_us` if > 0, else `arrival_time_us`.
//!   Send times are rebased (spec quirk 1, blis's decision): the minimum
//!   over rows with a send time of `send − arrival` is subtracted, so an
//!   observe trace (epoch send times) starts near 0 and a generated one
//!   (send = arrival) is unchanged.
//! * **Session mode** `fixed` (default): every row at its injection time.
//!   `closed-loop`: round 0 of each session at its injection time, round
//!   k+1 at round k's completion + think time, unless past `horizon_us`;
//!   rounds must be exactly 0, 1, 2, … per session; a round
//!   that is not completed ends its session.
//! * **Think time** (closed-loop): `think_time_dist`, or `think_time_ms`;
//!   else the recorded `think_time_us` of rounds 1… when any of the
//!   session's is nonzero; else the gap before the round — blis's decision
//!   on quirk 10: measured from the previous round's recorded end
//!   (`last_chunk_time_us`, same time base as the send) when it has one,
//!   so the gap does not include its service time; the raw arrival gap
//!   otherwise; clamped at 0.
//! * **Context growth**: with the header's `session_context_growth:
//!   accumulate`, a session keeps one growing prompt (round 0's prompt,
//!   then each round's output actually generated and the next round's `n`
//!   new tokens); a round's prompt is the whole buffer, a view of it that
//!   shares its storage (`crate::prompt`). Memory: one segment log per
//!   active session, two segments per round (linear in rounds), freed when
//!   the session ends and its last round is done. In fixed mode too (blis's
//!   decision; the reference injects a fixed-mode row with only its new
//!   tokens, so a run's own trace replayed fixed lost every round's
//!   context): a round's prompt is its session's buffer plus the previous
//!   round's *recorded* output and its new tokens, at its recorded time —
//!   a run's own trace replays to the same per-request results.
//! * **Horizon** (blis's decision on quirk 20): `horizon_us` if set; else
//!   none — the trace bounds the run (every row, and at most its recorded
//!   rounds per session), so it runs until every request finished. The
//!   reference's default, 2 × the largest injection time (600 s when 0),
//!   cuts off the tail of any trace whose last requests take longer than
//!   the trace is long; give it as `--horizon` to reproduce it.
//!
//! * **Adapter and model**: a row's `adapter` and `model` columns (empty:
//!   the base model, the default model) become `Request::adapter` and
//!   `Request::model`, indices into the names in order of first mention
//!   (`Workload::adapter_names`, `Workload::model_names`); a closed-loop
//!   follow-up round takes its own row's.
//!
//! Every blis request is noted in a shared [`ReplayLedger`] (blis id →
//! trace `request_id`, or a follow-up), which the SimResult writer reads.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::Distribution;
use serde::{Deserialize, Serialize};

use super::generator::prefix_seed;
use super::sampler::MAX_TOKENS;
use super::WorkloadError;
use crate::engine::{Tick, NEVER};
use crate::request::{OptIdx, Request, Segment, SegmentLog, SloClass};
use crate::trace_v2::{
    read_header, SessionContextGrowth, TraceHeader, TraceReader, TraceRecord, TraceV2Error,
};

/// `session_mode` of `[workload.trace_v2]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionMode {
    /// Every row at its injection time.
    #[default]
    Fixed,
    /// Session rounds after round 0 follow completions plus think time.
    ClosedLoop,
}

/// `[workload.trace_v2]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceV2Spec {
    /// Header YAML, relative to the run file's folder.
    pub header: String,
    /// Data CSV, relative to the run file's folder.
    pub data: String,
    /// `fixed` (default) or `closed-loop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_mode: Option<SessionMode>,
    /// Constant think time, ms (closed-loop only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_time_ms: Option<f64>,
    /// Think-time distribution: `lognormal:mu=M,sigma=S[,min=T][,max=T]` or
    /// `constant:value=T` (T in us, ms or s; bare = ms); closed-loop only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_time_dist: Option<String>,
}

/// Follow-up marker in [`ReplayLedger::ids`].
pub const FOLLOW_UP: u64 = u64::MAX;

/// What replay injected, for the SimResult array and the replayed trace.
#[derive(Debug, Default)]
pub struct ReplayLedger {
    /// blis request id → trace `request_id` ([`FOLLOW_UP`] for closed-loop
    /// follow-up rounds).
    pub ids: Vec<u64>,
    /// blis request id of a closed-loop follow-up round → the `request_id`
    /// of its row in the trace (for the replayed trace's rows).
    pub follow_ups: HashMap<u64, u64>,
    /// Trace `request_id` → `model`, for rows that name one.
    pub models: HashMap<u64, String>,
    /// The trace's header.
    pub header: Option<TraceHeader>,
}

/// The ledger, shared between the source and the writers.
pub type SharedLedger = Arc<Mutex<ReplayLedger>>;

/// A think-time sampler (spec §4.6).
#[derive(Clone, Debug)]
pub enum ThinkTime {
    Constant(u64),
    LogNormal {
        dist: rand_distr::LogNormal<f64>,
        min: Option<f64>,
        max: Option<f64>,
    },
}

/// Longest think time between session rounds, µs (a day): the flag, a
/// distribution's bounds and median, and the `think_time_us` column.
pub const MAX_THINK_US: f64 = 8.64e10;

fn parse_duration_us(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e6)
    } else {
        (s, 1e3)
    };
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0 && v * mult <= MAX_THINK_US).then_some(v * mult)
}

impl ThinkTime {
    /// Parse a `--think-time-dist` string.
    pub fn parse(s: &str) -> Result<ThinkTime, String> {
        let (kind, rest) = s.split_once(':').ok_or_else(|| {
            format!(
                "\"{s}\": expected `lognormal:mu=M,sigma=S[,min=T][,max=T]` or `constant:value=T`"
            )
        })?;
        let mut kv: Vec<(&str, &str)> = Vec::new();
        for part in rest.split(',') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("\"{part}\" in \"{s}\" is not key=value"))?;
            let k = k.trim();
            if kv.iter().any(|(x, _)| *x == k) {
                return Err(format!("key {k} appears twice in \"{s}\""));
            }
            kv.push((k, v.trim()));
        }
        let get = |k: &str| kv.iter().find(|(x, _)| *x == k).map(|(_, v)| *v);
        let allowed: &[&str] = match kind.trim() {
            "constant" => &["value"],
            "lognormal" => &["mu", "sigma", "min", "max"],
            other => {
                return Err(format!(
                    "unknown think-time distribution \"{other}\" (lognormal or constant)"
                ))
            }
        };
        if let Some((k, _)) = kv.iter().find(|(k, _)| !allowed.contains(k)) {
            return Err(format!(
                "unknown key {k} in \"{s}\" (accepted: {})",
                allowed.join(", ")
            ));
        }
        let dur = |k: &str| -> Result<Option<f64>, String> {
            get(k)
                .map(|v| {
                    parse_duration_us(v).ok_or_else(|| {
                        format!(
                            "{k}={v}: not a duration from 0 to a day (a number with us, ms or s; bare = ms)"
                        )
                    })
                })
                .transpose()
        };
        if kind.trim() == "constant" {
            let v = dur("value")?.ok_or_else(|| format!("\"{s}\": constant needs value=T"))?;
            return Ok(ThinkTime::Constant(v.round() as u64));
        }
        let num = |k: &str| -> Result<f64, String> {
            let v = get(k).ok_or_else(|| format!("\"{s}\": lognormal needs {k}"))?;
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("{k}={v} is not a number"))
        };
        let mu = num("mu")?;
        let sigma = num("sigma")?;
        if !(sigma > 0.0 && sigma <= 10.0) {
            return Err(format!("sigma={sigma}: must be > 0 and at most 10"));
        }
        // The median think time is e^mu seconds.
        let max_mu = (MAX_THINK_US / 1e6).ln();
        if mu > max_mu {
            return Err(format!(
                "mu={mu}: the median think time e^mu s must be at most a day (mu ≤ {max_mu:.2})"
            ));
        }
        let dist = rand_distr::LogNormal::new(mu + 1e6f64.ln(), sigma)
            .map_err(|e| format!("\"{s}\": {e}"))?;
        Ok(ThinkTime::LogNormal {
            dist,
            min: dur("min")?,
            max: dur("max")?,
        })
    }

    fn sample(&self, rng: &mut ChaCha8Rng) -> u64 {
        match self {
            ThinkTime::Constant(v) => *v,
            ThinkTime::LogNormal { dist, min, max } => {
                let mut x = dist.sample(rng);
                if let Some(m) = min {
                    x = x.max(*m);
                }
                if let Some(m) = max {
                    x = x.min(*m);
                }
                x.round().min(MAX_THINK_US) as u64
            }
        }
    }
}

const NO_IDX: u32 = u32::MAX;

/// One injected row.
#[derive(Clone, Copy, Debug)]
struct Row {
    inject: Tick,
    trace_id: u64,
    n: u32,
    output: u32,
    prefix: u32,
    tenant: u32,
    client: u32,
    session: u32,
    round: u32,
    file_idx: u32,
    slo: SloClass,
    /// The row has a send time (its injection is rebased, quirk 1).
    sent: bool,
    /// Index into the adapter names (`NO_IDX`: the base model).
    adapter: u32,
    /// Index into the model names (`NO_IDX`: the default model).
    model: u32,
    /// The row has image, audio or video tokens (in the padding: the row
    /// stays 56 bytes).
    multimodal: bool,
}

/// A follow-up round's lengths and think time (closed-loop).
#[derive(Clone, Copy, Debug)]
struct RoundSpec {
    /// Its own tokens, and [`MULTIMODAL`] when the row has image, audio or
    /// video tokens (token counts stay below 2³⁰, and the arena keeps 24
    /// bytes a round).
    n: u32,
    output: u32,
    adapter: u32,
    model: u32,
    /// Recorded think time or gap, µs (when no flag overrides).
    think: u64,
    /// The round's row's `request_id`.
    trace_id: u64,
}

/// A closed-loop session.
#[derive(Clone, Copy, Debug)]
struct SessionPlan {
    /// Index of round 1 in the arena.
    first: u32,
    /// Follow-up rounds (max_rounds − 1).
    follow_ups: u32,
    prefix: u32,
    tenant: u32,
    client: u32,
    slo: SloClass,
    file_idx: u32,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    at: Tick,
    seq: u64,
    session: u32,
    round: u32,
    /// The output actually generated by the previous round (accumulate).
    prev_out: (u64, u32),
}

/// The TraceV2 workload source.
#[derive(Debug)]
pub struct TraceV2Replay {
    rows: Vec<Row>,
    next: usize,
    prefixes: Vec<Segment>,
    sessions: Vec<SessionPlan>,
    rounds: Vec<RoundSpec>,
    pending: BinaryHeap<Reverse<Pending>>,
    seq: u64,
    /// Accumulate buffers of active sessions: each round's prompt is a view
    /// of its session's log (the rounds share it, see `crate::prompt`).
    buffers: HashMap<u32, SegmentLog>,
    closed_loop: bool,
    accumulate: bool,
    /// Fixed mode with accumulate: per session, its last round in the file
    /// (its buffer is freed after it) …
    last_round: Vec<u32>,
    /// … and the output seed and length of its latest round.
    last_out: HashMap<u32, (u64, u32)>,
    think: Option<ThinkTime>,
    session_horizon: Tick,
    seed: u64,
    ledger: SharedLedger,
    /// Whether the ledger records trace ids ([`TraceV2Replay::ledger`]).
    keep_ids: AtomicBool,
    /// Rows whose prompt or output was raised to 1 token.
    pub raised: u64,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const DOMAIN_ROW: u64 = 0x7472_7632_726f_7701;
const DOMAIN_OUT: u64 = 0x7472_7632_6f75_7402;
const DOMAIN_THINK: u64 = 0x7472_7632_7468_6b03;

fn seg_seed(seed: u64, domain: u64, a: u64, b: u64) -> u64 {
    mix(mix(mix(seed ^ domain) ^ a) ^ b)
}

fn v2err(e: TraceV2Error) -> WorkloadError {
    match e {
        TraceV2Error::Row {
            file,
            line,
            message,
        } => WorkloadError::Trace {
            file,
            line,
            message,
        },
        TraceV2Error::Header { file, message } | TraceV2Error::Io { file, message } => {
            WorkloadError::File { file, message }
        }
    }
}

/// A row as read, before sorting.
struct Raw {
    line: u64,
    trace_id: u64,
    arrival: i64,
    send: i64,
    last_chunk: i64,
    think: u64,
    n: u32,
    output: u32,
    prefix: u32,
    tenant: u32,
    client: u32,
    session: u32,
    round: u64,
    slo: SloClass,
    adapter: u32,
    model: u32,
    multimodal: bool,
}

/// The multimodal bit of [`RoundSpec::n`].
const MULTIMODAL: u32 = 1 << 31;

/// When a row is injected (quirk 1): its send time rebased by `offset`
/// when it has one, else its arrival time.
fn injection(arrival: i64, send: i64, offset: i64) -> i64 {
    if send > 0 {
        send - offset
    } else {
        arrival
    }
}

impl Raw {
    /// The injected row, its send time rebased by `offset`.
    fn row(&self, file_idx: usize, offset: i64) -> Row {
        Row {
            inject: injection(self.arrival, self.send, offset),
            trace_id: self.trace_id,
            n: self.n,
            output: self.output,
            prefix: self.prefix,
            tenant: self.tenant,
            client: self.client,
            session: self.session,
            round: self.round.min(u64::from(u32::MAX - 1)) as u32,
            file_idx: file_idx as u32,
            slo: self.slo,
            sent: self.send > 0,
            adapter: self.adapter,
            model: self.model,
            multimodal: self.multimodal,
        }
    }
}

/// One kind of name in a trace, each numbered in order of first mention.
#[derive(Default)]
struct Interned {
    names: Vec<String>,
    index: HashMap<String, u32>,
    /// The last name asked for and its number.
    last: Option<(String, u32)>,
}

impl Interned {
    fn get(&mut self, name: &str) -> u32 {
        // Most rows repeat the name of the row before.
        if let Some(&(ref last, i)) = self.last.as_ref() {
            if last == name {
                return i;
            }
        }
        let i = self.lookup(name);
        match &mut self.last {
            Some((last, j)) => {
                last.clear();
                last.push_str(name);
                *j = i;
            }
            None => self.last = Some((name.to_string(), i)),
        }
        i
    }

    fn lookup(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), i);
        i
    }
}

/// The names a trace mentions, and the prefix groups' lengths.
#[derive(Default)]
struct Names {
    tenants: Interned,
    clients: Interned,
    groups: Interned,
    /// Tokens of each prefix group (from the first row that gives one).
    group_len: Vec<u32>,
    sessions: Interned,
    adapters: Interned,
    model_names: Interned,
    /// Trace `request_id` → `model`, for rows that name one.
    models: HashMap<u64, String>,
}

impl Names {
    /// Check one record and number its names; `raised` counts outputs of 0
    /// raised to 1.
    fn raw(&mut self, rec: &TraceRecord, line: u64, raised: &mut u64) -> Result<Raw, String> {
        let max = u64::from(MAX_TOKENS);
        let slo = SloClass::parse(&rec.slo_class).ok_or_else(|| {
            format!(
                "column slo_class: unknown class \"{}\" (accepted: critical, standard, batch, sheddable, background, or empty)",
                crate::text::clean(&rec.slo_class, 100)
            )
        })?;
        let tenant = self.tenants.get(if rec.tenant_id.is_empty() {
            super::trace::DEFAULT_TENANT
        } else {
            &rec.tenant_id
        });
        let client = self.clients.get(&rec.client_id);
        let prefix = if rec.prefix_group.is_empty() {
            NO_IDX
        } else {
            let g = self.groups.get(&rec.prefix_group);
            if g as usize == self.group_len.len() {
                self.group_len.push(0);
            }
            if self.group_len[g as usize] == 0 && rec.prefix_length > 0 {
                if rec.prefix_length > max {
                    return Err(format!(
                        "column prefix_length: {} exceeds {max}",
                        rec.prefix_length
                    ));
                }
                self.group_len[g as usize] = rec.prefix_length as u32;
            }
            g
        };
        let n = if rec.server_input_tokens > 0 && rec.prefix_group.is_empty() {
            rec.server_input_tokens
        } else {
            rec.input_tokens
        };
        for (col, v) in [("input_tokens", n), ("output_tokens", rec.output_tokens)] {
            if v > max {
                return Err(format!("column {col}: {v} exceeds {max}"));
            }
        }
        if rec.think_time_us as f64 > MAX_THINK_US {
            return Err(format!(
                "column think_time_us: {} exceeds a day ({MAX_THINK_US:e} µs)",
                rec.think_time_us
            ));
        }
        let session = if rec.session_id.is_empty() {
            NO_IDX
        } else {
            self.sessions.get(&rec.session_id)
        };
        let model = if rec.model.is_empty() {
            NO_IDX
        } else {
            self.models.insert(rec.request_id, rec.model.clone());
            self.model_names.get(&rec.model)
        };
        let adapter = if rec.adapter.is_empty() {
            NO_IDX
        } else {
            self.adapters.get(&rec.adapter)
        };
        let mut output = rec.output_tokens as u32;
        if output == 0 {
            output = 1;
            *raised += 1;
        }
        Ok(Raw {
            line,
            trace_id: rec.request_id,
            arrival: rec.arrival_time_us,
            send: rec.send_time_us,
            last_chunk: rec.last_chunk_time_us,
            think: rec.think_time_us,
            n: n as u32,
            output,
            prefix,
            tenant,
            client,
            session,
            round: rec.round_index,
            slo,
            adapter,
            model,
            multimodal: rec.image_tokens + rec.audio_tokens + rec.video_tokens > 0,
        })
    }
}

/// Closed-loop mode: each session's round 0 joins `rows`; its later
/// rounds become a plan and the round specs in the arena. Errors give a
/// line and a message.
fn group_sessions(
    raws: &[Raw],
    sessions: &Interned,
    offset: i64,
    rows: &mut Vec<Row>,
) -> Result<(Vec<SessionPlan>, Vec<RoundSpec>), (u64, String)> {
    let mut plans: Vec<SessionPlan> = Vec::new();
    let mut arena: Vec<RoundSpec> = Vec::new();
    // Group each session's rows, in order of first appearance.
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); sessions.names.len()];
    for (i, r) in raws.iter().enumerate() {
        if r.session == NO_IDX {
            rows.push(r.row(i, offset));
        } else {
            members[r.session as usize].push(i as u32);
        }
    }
    for (s, m) in members.iter_mut().enumerate() {
        m.sort_by_key(|&i| (raws[i as usize].round, i));
        for (k, &i) in m.iter().enumerate() {
            let r = &raws[i as usize];
            if r.round != k as u64 {
                return Err((
                    r.line,
                    format!(
                        "column round_index: session \"{}\" has rounds {} — in closed-loop mode a session's rounds must be exactly 0, 1, 2, … (round {k} expected)",
                        sessions.names[s],
                        m.iter()
                            .map(|&j| raws[j as usize].round.to_string())
                            .collect::<Vec<_>>()
                            .join(", "),
                    ),
                ));
            }
        }
        let r0 = &raws[m[0] as usize];
        let mut row0 = r0.row(m[0] as usize, offset);
        row0.session = plans.len() as u32;
        rows.push(row0);
        let recorded = m[1..].iter().any(|&i| raws[i as usize].think > 0);
        let first = arena.len() as u32;
        for w in m.windows(2) {
            let (p, c) = (&raws[w[0] as usize], &raws[w[1] as usize]);
            let think = if recorded {
                c.think
            } else if p.last_chunk > 0 && c.send > 0 {
                (c.send - p.last_chunk).max(0) as u64
            } else if p.last_chunk > 0 && p.send <= 0 {
                (c.arrival - p.last_chunk).max(0) as u64
            } else {
                (c.arrival - p.arrival).max(0) as u64
            };
            arena.push(RoundSpec {
                n: c.n | if c.multimodal { MULTIMODAL } else { 0 },
                output: c.output,
                adapter: c.adapter,
                model: c.model,
                think,
                trace_id: c.trace_id,
            });
        }
        plans.push(SessionPlan {
            first,
            follow_ups: (m.len() - 1) as u32,
            prefix: r0.prefix,
            tenant: r0.tenant,
            client: r0.client,
            slo: r0.slo,
            file_idx: m[0],
        });
    }
    Ok((plans, arena))
}

/// What [`TraceV2Replay::open`] returns besides the source.
pub(crate) struct Opened {
    pub replay: TraceV2Replay,
    pub tenants: Vec<String>,
    pub clients: Vec<String>,
    pub prefix_names: Vec<(u64, String)>,
    /// Adapter names of the `adapter` column, in order of first mention.
    pub adapters: Vec<String>,
    /// Model names of the `model` column, in order of first mention.
    pub models: Vec<String>,
}

/// The think time between closed-loop session rounds (`think_time_ms` or
/// `think_time_dist`; neither in fixed mode).
fn think_time(spec: &TraceV2Spec, closed_loop: bool) -> Result<Option<ThinkTime>, WorkloadError> {
    let cfg = |m: String| WorkloadError::Config(format!("trace_v2: {m}"));
    if !closed_loop && (spec.think_time_ms.is_some() || spec.think_time_dist.is_some()) {
        let k = if spec.think_time_ms.is_some() {
            "think_time_ms"
        } else {
            "think_time_dist"
        };
        return Err(cfg(format!(
            "{k} is set but session_mode is fixed: think times apply only with session_mode = \"closed-loop\""
        )));
    }
    Ok(match (spec.think_time_ms, &spec.think_time_dist) {
        (Some(_), Some(_)) => {
            return Err(cfg(
                "think_time_ms and think_time_dist are both set; give one".into(),
            ))
        }
        (Some(ms), None) => {
            if !(ms.is_finite() && ms >= 0.0 && ms * 1e3 <= MAX_THINK_US) {
                return Err(cfg(format!(
                    "think_time_ms (--think-time-ms) = {}: must be a number of ms from 0 to {} (a day)",
                    crate::config::bounds::short_number(ms),
                    MAX_THINK_US / 1e3
                )));
            }
            Some(ThinkTime::Constant((ms * 1e3).round() as u64))
        }
        (None, Some(d)) => Some(
            ThinkTime::parse(d)
                .map_err(|e| cfg(format!("think_time_dist (--think-time-dist): {e}")))?,
        ),
        (None, None) => None,
    })
}

/// The data file read row by row: fixed mode turns each row into its
/// injected form at once, closed loop keeps the rows as read to group the
/// sessions afterwards.
struct ReadRows {
    file: String,
    names: Names,
    raised: u64,
    rows: Vec<Row>,
    raws: Vec<Raw>,
    /// Smallest send − arrival over rows that have a send time (quirk 1).
    offset: Option<i64>,
    /// Rows whose injection time may be negative: (line, arrival, send).
    suspects: Vec<(u64, i64, i64)>,
}

/// The trace `request_id`s read so far, to refuse a duplicate. A file
/// whose ids increase (blis and `observe` write the row index) needs no
/// memory for it: only after an id at or below the one before are the ids
/// read so far indexed (id → row position), and every later one with them.
#[derive(Default)]
struct SeenIds {
    last: Option<u64>,
    index: Option<HashMap<u64, usize>>,
}

impl SeenIds {
    /// Note the next row's `id` (`earlier`: the ids of the rows before it,
    /// in order, asked for once); the position of an earlier row with the
    /// same id.
    fn insert(&mut self, id: u64, earlier: impl FnOnce() -> Vec<u64>) -> Option<usize> {
        if self.index.is_none() && self.last.is_none_or(|l| id > l) {
            self.last = Some(id);
            return None;
        }
        let index = self.index.get_or_insert_with(|| {
            earlier()
                .into_iter()
                .enumerate()
                .map(|(k, id)| (id, k))
                .collect()
        });
        let pos = index.len();
        match index.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => Some(*e.get()),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(pos);
                None
            }
        }
    }
}

/// The line of the `k`th row (0-based) of a TraceV2 data file: for the
/// message about a duplicate id, so the row table need not keep lines.
fn nth_row_line(path: &Path, k: usize) -> u64 {
    let Ok(mut reader) = TraceReader::open(path) else {
        return 0;
    };
    let mut rec = TraceRecord::default();
    let mut seen = 0;
    while let Ok(Some(line)) = reader.read_into(&mut rec) {
        if seen == k {
            return line;
        }
        seen += 1;
    }
    0
}

fn read_rows(
    spec: &TraceV2Spec,
    base_dir: &Path,
    closed_loop: bool,
) -> Result<ReadRows, WorkloadError> {
    let mut reader = TraceReader::open(&base_dir.join(&spec.data)).map_err(v2err)?;
    let file = reader.file().to_string();
    let row_err = |line: u64, message: String| WorkloadError::Trace {
        file: file.clone(),
        line,
        message,
    };
    let mut rec = TraceRecord::default();
    let mut names = Names::default();
    let mut raised = 0u64;
    // Fixed mode turns each row into its injected form at once; closed
    // loop keeps the rows as read to group the sessions afterwards.
    let mut rows: Vec<Row> = Vec::new();
    let mut raws: Vec<Raw> = Vec::new();
    // Reserve for the most rows the file can hold (a row is at least
    // about 48 bytes): a large table is then mapped on its own, with
    // small pages (see `with_small_pages`), and only what is written
    // is ever touched.
    let most = std::fs::metadata(base_dir.join(&spec.data)).map_or(0, |m| m.len() / 48);
    let most = most.min(1 << 26) as usize;
    // Smallest send − arrival over rows that have a send time (quirk 1).
    let mut offset: Option<i64> = None;
    // Rows whose injection time may be negative: (line, arrival, send).
    let mut suspects: Vec<(u64, i64, i64)> = Vec::new();
    let mut ids = SeenIds::default();
    crate::alloc::with_small_pages(|| {
        // Address space only; a refusal just leaves the table to grow.
        let _ = if closed_loop {
            raws.try_reserve(most)
        } else {
            rows.try_reserve(most)
        };
        while let Some(line) = reader.read_into(&mut rec).map_err(v2err)? {
            let earlier = || -> Vec<u64> {
                if closed_loop {
                    raws.iter().map(|r| r.trace_id).collect()
                } else {
                    rows.iter().map(|r| r.trace_id).collect()
                }
            };
            if let Some(k) = ids.insert(rec.request_id, earlier) {
                let first = if closed_loop {
                    raws[k].line
                } else {
                    nth_row_line(&base_dir.join(&spec.data), k)
                };
                return Err(row_err(line, format!(
                    "request_id {} is already the id of line {first}: every row of a trace is one request with its own id (a file appended to itself?)",
                    rec.request_id
                )));
            }
            if rec.input_tokens == 0 && rec.server_input_tokens == 0 && rec.output_tokens == 0 {
                return Err(row_err(line, "input_tokens = output_tokens = 0: no server produces a request without a prompt or an answer; fix or drop the row".into()));
            }
            let raw = names
                .raw(&rec, line, &mut raised)
                .map_err(|m| row_err(line, m))?;
            if raw.send > 0 {
                let d = raw.send.saturating_sub(raw.arrival);
                offset = Some(offset.map_or(d, |o| o.min(d)));
            }
            if raw.arrival < 0 || raw.send < 0 {
                suspects.push((line, raw.arrival, raw.send));
            }
            if closed_loop {
                raws.push(raw);
            } else {
                let i = rows.len();
                rows.push(raw.row(i, 0));
            }
        }
        Ok::<(), WorkloadError>(())
    })?;
    Ok(ReadRows {
        file,
        names,
        raised,
        rows,
        raws,
        offset,
        suspects,
    })
}

impl TraceV2Replay {
    /// Read and check the trace. `base_dir` resolves relative paths;
    /// `horizon` is the run's `horizon_us`.
    pub(crate) fn open(
        spec: &TraceV2Spec,
        seed: u64,
        base_dir: &Path,
        horizon: Option<Tick>,
    ) -> Result<Opened, WorkloadError> {
        let mode = spec.session_mode.unwrap_or_default();
        let closed_loop = mode == SessionMode::ClosedLoop;
        let think = think_time(spec, closed_loop)?;
        let header = read_header(&base_dir.join(&spec.header)).map_err(v2err)?;
        let accumulate = header.session_context_growth == Some(SessionContextGrowth::Accumulate);
        let read = read_rows(spec, base_dir, closed_loop)?;
        let (file, names, mut raised) = (read.file, read.names, read.raised);
        let (mut rows, mut raws) = (read.rows, read.raws);
        let row_err = |line: u64, message: String| WorkloadError::Trace {
            file: file.clone(),
            line,
            message,
        };
        let (offset, suspects) = (read.offset, read.suspects);
        let count = rows.len() + raws.len();
        if count >= NO_IDX as usize {
            return Err(WorkloadError::File {
                file,
                message: format!("{count} rows: more than a replay holds"),
            });
        }
        let prefixes: Vec<Segment> = names
            .groups
            .names
            .iter()
            .zip(&names.group_len)
            .map(|(g, &len)| Segment {
                seed: prefix_seed(seed, g),
                len,
            })
            .collect();
        let offset = offset.unwrap_or(0).max(0);
        if let Some((line, t)) = suspects
            .iter()
            .map(|&(line, a, sd)| (line, injection(a, sd, offset)))
            .find(|&(_, t)| t < 0)
        {
            return Err(row_err(
                line,
                format!(
                    "the injection time is negative ({t} µs): arrival_time_us and send_time_us must be ≥ 0"
                ),
            ));
        }
        // A row with no tokens at all (no prompt and no prefix) gets one.
        let empty = |n: u32, prefix: u32| {
            n == 0 && (prefix == NO_IDX || prefixes[prefix as usize].len == 0)
        };
        for r in &mut rows {
            if r.sent {
                r.inject -= offset;
            }
            if empty(r.n, r.prefix) {
                r.n = 1;
                raised += 1;
            }
        }
        for r in &mut raws {
            if empty(r.n, r.prefix) {
                r.n = 1;
                raised += 1;
            }
        }
        let (plans, arena) = if closed_loop {
            group_sessions(&raws, &names.sessions, offset, &mut rows)
                .map_err(|(l, m)| row_err(l, m))?
        } else {
            (Vec::new(), Vec::new())
        };
        drop(raws);
        if !rows.is_sorted_by_key(|r| (r.inject, r.file_idx)) {
            rows.sort_by_key(|r| (r.inject, r.file_idx));
        }
        let session_horizon = horizon.unwrap_or(NEVER);
        let Names {
            tenants,
            clients,
            groups,
            models,
            adapters,
            model_names,
            ..
        } = names;
        let mut tenants = tenants.names;
        let prefix_names = groups
            .names
            .iter()
            .zip(&prefixes)
            .map(|(g, s)| (s.seed, g.clone()))
            .collect();
        if tenants.is_empty() {
            tenants.push(super::trace::DEFAULT_TENANT.to_string());
        }
        let ledger = Arc::new(Mutex::new(ReplayLedger {
            ids: Vec::new(),
            follow_ups: HashMap::new(),
            models,
            header: Some(header),
        }));
        let mut last_round: Vec<u32> = Vec::new();
        if accumulate && !closed_loop {
            for r in rows.iter().filter(|r| r.session != NO_IDX) {
                let s = r.session as usize;
                if s >= last_round.len() {
                    last_round.resize(s + 1, 0);
                }
                last_round[s] = last_round[s].max(r.round);
            }
        }
        Ok(Opened {
            replay: TraceV2Replay {
                rows,
                next: 0,
                prefixes,
                sessions: plans,
                rounds: arena,
                pending: BinaryHeap::new(),
                seq: 0,
                buffers: HashMap::new(),
                closed_loop,
                accumulate,
                last_round,
                last_out: HashMap::new(),
                think,
                session_horizon,
                seed,
                ledger,
                keep_ids: AtomicBool::new(false),
                raised,
            },
            tenants,
            clients: clients.names,
            prefix_names,
            adapters: adapters.names,
            models: model_names.names,
        })
    }

    /// Bound follow-ups by the run's `horizon_us` instead of the trace's rule.
    pub(crate) fn set_session_horizon(&mut self, h: Tick) {
        self.session_horizon = h;
    }

    /// Rows in the file (the most requests the replay yields).
    pub fn total_rows(&self) -> u64 {
        self.rows.len() as u64 + self.rounds.len() as u64
    }

    /// The ledger the writers read. Asking for it turns on the recording
    /// of trace ids (a replay that writes no per-request output keeps none),
    /// so ask before the first request is taken: the ids are indexed by
    /// request id.
    pub fn ledger(&self) -> SharedLedger {
        if !self.keep_ids.swap(true, Relaxed) {
            debug_assert!(
                self.next == 0 && self.seq == 0,
                "the ledger was asked for after the replay started"
            );
            if let Ok(mut l) = self.ledger.lock() {
                let n = self.rows.len() + self.rounds.len();
                crate::alloc::with_small_pages(|| l.ids.reserve(n));
            }
        }
        Arc::clone(&self.ledger)
    }

    /// Rows injected from the file (closed-loop follow-ups not included).
    pub fn injected_rows(&self) -> u64 {
        self.rows.len() as u64
    }

    /// Closed-loop sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    pub(crate) fn peek_time(&self) -> Option<Tick> {
        let a = self.rows.get(self.next).map(|r| r.inject);
        let b = self.pending.peek().map(|p| p.0.at);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn note(&self, trace_id: u64) {
        if !self.keep_ids.load(Relaxed) {
            return;
        }
        if let Ok(mut l) = self.ledger.lock() {
            l.ids.push(trace_id);
        }
    }

    fn note_follow_up(&self, trace_id: u64) {
        if !self.keep_ids.load(Relaxed) {
            return;
        }
        if let Ok(mut l) = self.ledger.lock() {
            let blis_id = l.ids.len() as u64;
            l.ids.push(FOLLOW_UP);
            l.follow_ups.insert(blis_id, trace_id);
        }
    }

    pub(crate) fn pop_into(&mut self, req: &mut Request) -> bool {
        let row_t = self.rows.get(self.next).map(|r| r.inject);
        let fu_t = self.pending.peek().map(|p| p.0.at);
        // A follow-up goes first when it is due no later than the next row.
        let take_follow_up = match (row_t, fu_t) {
            (Some(a), Some(b)) => b <= a,
            (None, Some(_)) => true,
            (_, None) => false,
        };
        if take_follow_up {
            let Reverse(p) = self.pending.pop().expect("peeked");
            let plan = self.sessions[p.session as usize];
            let trace_id = self.rounds[(plan.first + p.round - 1) as usize].trace_id;
            self.emit_follow_up(p, req);
            self.note_follow_up(trace_id);
            return true;
        }
        let Some(&row) = self.rows.get(self.next) else {
            return false;
        };
        self.next += 1;
        req.arrival = row.inject;
        req.prompt.clear();
        let mut len = 0u32;
        if row.prefix != NO_IDX {
            let p = self.prefixes[row.prefix as usize];
            if p.len > 0 {
                req.prompt.push(p);
                len += p.len;
            }
        }
        if row.n > 0 {
            req.prompt.push(Segment {
                seed: seg_seed(self.seed, DOMAIN_ROW, u64::from(row.file_idx), 0),
                len: row.n,
            });
        }
        req.input_len = len + row.n;
        req.output_len = row.output;
        req.output_seed = seg_seed(self.seed, DOMAIN_OUT, u64::from(row.file_idx), 0);
        req.client = row.client;
        req.tenant = row.tenant;
        req.slo_class = row.slo;
        req.adapter = (row.adapter != NO_IDX).then_some(row.adapter).into();
        req.model = (row.model != NO_IDX).then_some(row.model).into();
        req.multimodal = row.multimodal;
        let in_session = row.session != NO_IDX;
        req.session = in_session.then_some((row.session, row.round));
        // Content past the prefix is this row's alone unless a later round
        // of its session may repeat it.
        req.private_from = OptIdx::from(if in_session { None } else { Some(len) });
        if self.closed_loop && in_session && self.accumulate {
            let log = SegmentLog::from_slice(&req.prompt);
            log.view_into(&mut req.prompt);
            self.buffers.insert(row.session, log);
        } else if in_session && self.accumulate {
            self.accumulate_fixed(&row, req);
        }
        self.note(row.trace_id);
        true
    }

    /// Fixed mode with accumulate: a session's round carries the context
    /// before it — the session's buffer (round 0's prompt), each earlier
    /// round's recorded output, then this round's new tokens — as in the
    /// run that wrote the trace.
    fn accumulate_fixed(&mut self, row: &Row, req: &mut Request) {
        let sid = row.session;
        match (self.buffers.get_mut(&sid), self.last_out.get(&sid)) {
            (Some(buf), Some(&(seed, len))) => {
                if len > 0 {
                    buf.push(Segment { seed, len });
                }
                // The row's new tokens (its prefix is already in the buffer).
                if let Some(&fresh) = req.prompt.last().filter(|_| row.n > 0) {
                    buf.push(fresh);
                }
                buf.view_into(&mut req.prompt);
            }
            _ => {
                let log = SegmentLog::from_slice(&req.prompt);
                log.view_into(&mut req.prompt);
                self.buffers.insert(sid, log);
            }
        }
        let total: u64 = req.prompt.iter().map(|s| u64::from(s.len)).sum();
        req.input_len = total.clamp(1, u64::from(MAX_TOKENS) * 2) as u32;
        if self
            .last_round
            .get(sid as usize)
            .is_some_and(|&l| row.round >= l)
        {
            self.buffers.remove(&sid);
            self.last_out.remove(&sid);
        } else {
            self.last_out.insert(sid, (req.output_seed, row.output));
        }
    }

    fn emit_follow_up(&mut self, p: Pending, req: &mut Request) {
        let plan = self.sessions[p.session as usize];
        let mut spec = self.rounds[(plan.first + p.round - 1) as usize];
        req.multimodal = spec.n & MULTIMODAL != 0;
        spec.n &= !MULTIMODAL;
        let fresh = Segment {
            seed: seg_seed(
                self.seed,
                DOMAIN_ROW,
                u64::from(plan.file_idx) | (1 << 40),
                (u64::from(p.session) << 32) | u64::from(p.round),
            ),
            len: spec.n,
        };
        req.prompt.clear();
        if self.accumulate {
            let buf = self.buffers.entry(p.session).or_default();
            if p.prev_out.1 > 0 {
                buf.push(Segment {
                    seed: p.prev_out.0,
                    len: p.prev_out.1,
                });
            }
            if fresh.len > 0 {
                buf.push(fresh);
            }
            buf.view_into(&mut req.prompt);
        } else {
            if plan.prefix != NO_IDX {
                let s = self.prefixes[plan.prefix as usize];
                if s.len > 0 {
                    req.prompt.push(s);
                }
            }
            if fresh.len > 0 {
                req.prompt.push(fresh);
            }
        }
        let total: u64 = req.prompt.iter().map(|s| u64::from(s.len)).sum();
        req.input_len = total.clamp(1, u64::from(MAX_TOKENS) * 2) as u32;
        if req.prompt.is_empty() {
            req.prompt.push(fresh);
            req.prompt[0].len = 1;
        }
        req.arrival = p.at;
        req.output_len = spec.output;
        req.output_seed = seg_seed(
            self.seed,
            DOMAIN_OUT,
            u64::from(plan.file_idx) | (1 << 40),
            (u64::from(p.session) << 32) | u64::from(p.round),
        );
        req.client = plan.client;
        req.tenant = plan.tenant;
        req.slo_class = plan.slo;
        req.adapter = (spec.adapter != NO_IDX).then_some(spec.adapter).into();
        req.model = (spec.model != NO_IDX).then_some(spec.model).into();
        req.session = Some((p.session, p.round));
        req.private_from = OptIdx::NONE;
    }

    /// A request ended at `at` (`completed` false: rejected or dropped).
    pub(crate) fn on_finished(&mut self, req: &Request, at: Tick, completed: bool) {
        if !self.closed_loop {
            return;
        }
        let Some((sid, round)) = req.session else {
            return;
        };
        let Some(&plan) = self.sessions.get(sid as usize) else {
            return;
        };
        let next = round + 1;
        if !completed || next > plan.follow_ups {
            self.buffers.remove(&sid);
            return;
        }
        let spec = self.rounds[(plan.first + next - 1) as usize];
        let think = match &self.think {
            Some(t) => {
                let mut rng = ChaCha8Rng::seed_from_u64(seg_seed(
                    self.seed,
                    DOMAIN_THINK,
                    u64::from(sid),
                    u64::from(next),
                ));
                t.sample(&mut rng)
            }
            None => spec.think,
        };
        let t = at.saturating_add(think.min(i64::MAX as u64) as Tick);
        if t > self.session_horizon {
            self.buffers.remove(&sid);
            return;
        }
        // The output the client actually saw (a forced completion emits fewer).
        let seen = if req.generated > 0 && req.generated < req.output_len {
            req.generated
        } else {
            req.output_len
        };
        self.pending.push(Reverse(Pending {
            at: t,
            seq: self.seq,
            session: sid,
            round: next,
            prev_out: (req.output_seed, seen),
        }));
        self.seq += 1;
    }
}

#[cfg(test)]
mod seen_ids_tests {
    use super::SeenIds;

    /// Increasing ids keep no index; after a step back a duplicate of any
    /// earlier id is found, with that row's position.
    #[test]
    fn duplicates_are_found_with_memory_only_after_a_step_back() {
        let mut s = SeenIds::default();
        let asked = std::cell::Cell::new(0);
        let ids = [3u64, 7, 9];
        for (k, &id) in ids.iter().enumerate() {
            let earlier = || {
                asked.set(asked.get() + 1);
                ids[..k].to_vec()
            };
            assert_eq!(s.insert(id, earlier), None);
        }
        assert!(s.index.is_none() && asked.get() == 0);
        assert_eq!(
            s.insert(5, || ids.to_vec()),
            None,
            "a step back, no duplicate"
        );
        assert_eq!(s.insert(8, || unreachable!()), None);
        assert_eq!(s.insert(7, || unreachable!()), Some(1));
        assert_eq!(s.insert(8, || unreachable!()), Some(4));
    }
}

//! Synthetic clients merged lazily in arrival order, and multi-turn sessions.
//!
//! Each client owns one ChaCha stream seeded from (run seed, client id) and
//! keeps only its *next* arrival time; the generator keeps a binary heap of
//! those (one entry per client) plus a heap of session rounds waiting for
//! their arrival time. A request's content is drawn when it is popped. Memory
//! is therefore O(clients + active sessions), independent of how many
//! requests the run yields.
//!
//! Partitioned randomness: a client's stream depends only on the run seed,
//! its id and its own parameters, and its draws happen in a fixed per-client
//! order (inter-arrival time, then content), so adding, removing or changing
//! another client never changes its requests. Session rounds after the first
//! draw from a stream keyed by (client stream seed, session index in the
//! client, round), so their content does not depend on when the cluster
//! happens to finish the previous round.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::config::{ContextGrowth, SessionSpec};
use super::sampler::{ArrivalSampler, LengthSampler};
use crate::engine::Tick;
use crate::request::{mix64, OptIdx, Prompt, Request, Segment, SegmentLog, SloClass};

const DOMAIN_CLIENT: u64 = 0x636c_6965_6e74_0001;
const DOMAIN_PREFIX: u64 = 0x7072_6566_6978_0002;
const DOMAIN_SESSION: u64 = 0x7365_7373_696f_0003;
const DOMAIN_TRACE: u64 = 0x7472_6163_6500_0004;
const DOMAIN_SPREAD: u64 = 0x7370_7265_6164_0005;
const DOMAIN_ADAPTER: u64 = 0x6164_6170_7400_0006;

/// Arrivals later than this (µs, about 146,000 years) end a client's stream.
const MAX_TIME_US: f64 = crate::engine::TIME_LIMIT as f64;
/// A session whose next prompt would exceed this many tokens ends instead.
const MAX_CONTEXT_TOKENS: u64 = (u32::MAX / 2) as u64;

/// FNV-1a 64 of a name, for seeding (stable across platforms and releases).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Seed of a client's stream: a function of the run seed and the client id only.
pub(crate) fn client_seed(run_seed: u64, id: &str) -> u64 {
    mix64(mix64(run_seed ^ DOMAIN_CLIENT) ^ fnv1a(id))
}

/// Content seed of a prefix group's shared prefix.
pub(crate) fn prefix_seed(run_seed: u64, group: &str) -> u64 {
    mix64(mix64(run_seed ^ DOMAIN_PREFIX) ^ fnv1a(group))
}

/// Seed of the stream a trace replay draws its content seeds from.
pub(crate) fn trace_seed(run_seed: u64) -> u64 {
    mix64(run_seed ^ DOMAIN_TRACE)
}

fn round_rng(client_seed: u64, session_index: u64, round: u32) -> ChaCha8Rng {
    let s = mix64(mix64(mix64(client_seed ^ DOMAIN_SESSION) ^ session_index) ^ u64::from(round));
    ChaCha8Rng::seed_from_u64(s)
}

/// Everything a client needs, resolved and validated by `Workload::new`.
#[derive(Clone, Debug)]
pub(crate) struct ClientPlan {
    pub seed: u64,
    pub arrival: ArrivalSampler,
    pub input: LengthSampler,
    pub output: LengthSampler,
    pub prefix: Option<Segment>,
    pub tenant: u32,
    pub slo: SloClass,
    /// Disjoint, sorted activity windows `[start, end)` in ticks; empty = always.
    pub windows: Vec<(Tick, Tick)>,
    pub session: Option<SessionSpec>,
    /// How many arrivals the client makes, and whether its arrival process
    /// decides when.
    pub schedule: Schedule,
    /// The LoRA adapter of its requests.
    pub adapter: AdapterPick,
    /// The model its requests ask for (`None`: the run's default model).
    pub model: Option<u32>,
    /// `multimodal`: the share of its requests with multimodal input
    /// (drawn last, so a client without it draws exactly what it always
    /// did).
    pub multimodal: Option<f64>,
}

/// Whether a request has multimodal input: with probability `share`.
fn draw_multimodal<R: Rng>(plan: &ClientPlan, rng: &mut R) -> bool {
    match plan.multimodal {
        Some(share) => rng.random::<f64>() < share,
        None => false,
    }
}

/// How a client's requests get their LoRA adapter.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) enum AdapterPick {
    /// The base model.
    #[default]
    Base,
    /// Always this adapter.
    One(u32),
    /// Drawn per request (per session): `ids[k]` with probability
    /// `cdf[k] − cdf[k−1]`.
    Mix { ids: Vec<u32>, cdf: Vec<f64> },
}

impl AdapterPick {
    /// Zipf popularity over `ids` (the `k`-th, 1-based, ∝ `1/k^s`).
    pub(crate) fn zipf(ids: Vec<u32>, s: f64) -> AdapterPick {
        let w: Vec<f64> = (1..=ids.len()).map(|k| (k as f64).powf(-s)).collect();
        let total: f64 = w.iter().sum();
        let mut acc = 0.0;
        let cdf = w
            .iter()
            .map(|x| {
                acc += x / total;
                acc
            })
            .collect();
        AdapterPick::Mix { ids, cdf }
    }
}

/// How many arrivals a client makes and when.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Schedule {
    /// The arrival process, inside the client's windows, without end.
    #[default]
    Unlimited,
    /// The arrival process, inside the client's windows, for at most this
    /// many arrivals.
    AtMost(u64),
    /// Exactly `count` arrivals in `[start, start + span)`: `count + 1`
    /// exponential gaps are scaled to add up to `span` and the arrivals are
    /// their first `count` partial sums (floored to a tick), i.e. a Poisson
    /// process conditioned on its count. The arrival process and windows are
    /// not used. This is inference-perf's constant-load timer.
    Spread { start: Tick, span: Tick, count: u64 },
}

/// State of a [`Schedule::Spread`]: the position in `[0, 1)` of the last
/// arrival and how many are left. The `count` arrivals are the order
/// statistics of `count` uniform draws (equivalently, partial sums of
/// `count + 1` exponential gaps normalised to the span), generated in order
/// in O(1) time and memory each: the next of k remaining points after `x`
/// is `x + (1 − x)·(1 − U^(1/k))`.
#[derive(Debug)]
struct SpreadState {
    position: f64,
    remaining: u64,
    /// Its own stream (the content stream draws only at emission).
    rng: ChaCha8Rng,
}

impl SpreadState {
    fn new(client_seed: u64, count: u64) -> Self {
        SpreadState {
            position: 0.0,
            remaining: count,
            rng: ChaCha8Rng::seed_from_u64(mix64(client_seed ^ DOMAIN_SPREAD)),
        }
    }

    /// The next position in `[0, 1)`.
    fn next(&mut self) -> f64 {
        // u in (0, 1]: u^(1/k) is then in (0, 1].
        let u = 1.0 - self.rng.random::<f64>();
        let k = self.remaining as f64;
        self.position += (1.0 - self.position) * (1.0 - u.powf(1.0 / k));
        self.remaining -= 1;
        self.position
    }
}

#[derive(Debug)]
struct ClientGen {
    plan: ClientPlan,
    rng: ChaCha8Rng,
    /// Continuous time of the pending arrival, µs.
    clock: f64,
    /// The pending arrival, rounded to a tick.
    next: Tick,
    /// First window whose end is after `next`.
    window: usize,
    sessions_started: u64,
    /// Arrivals produced so far (for [`Schedule`] limits).
    arrivals: u64,
    /// Boxed: only spread clients pay for its stream.
    spread: Option<Box<SpreadState>>,
    /// The adapter draws of an `adapter_mix` client (their own stream, so
    /// adding a mix changes nothing else of the client's requests).
    adapter_rng: Option<Box<ChaCha8Rng>>,
}

impl ClientGen {
    fn new(plan: ClientPlan) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(plan.seed);
        let spread = match plan.schedule {
            Schedule::Spread { count, .. } => Some(Box::new(SpreadState::new(plan.seed, count))),
            _ => None,
        };
        let adapter_rng = match plan.adapter {
            AdapterPick::Mix { .. } => Some(Box::new(ChaCha8Rng::seed_from_u64(mix64(
                plan.seed ^ DOMAIN_ADAPTER,
            )))),
            _ => None,
        };
        ClientGen {
            adapter_rng,
            plan,
            rng,
            clock: 0.0,
            next: 0,
            window: 0,
            sessions_started: 0,
            arrivals: 0,
            spread,
        }
    }

    /// The adapter of the client's next new request (or session).
    fn draw_adapter(&mut self) -> Option<u32> {
        match &self.plan.adapter {
            AdapterPick::Base => None,
            AdapterPick::One(a) => Some(*a),
            AdapterPick::Mix { ids, cdf } => {
                let rng = self.adapter_rng.as_mut().expect("mix stream");
                let u: f64 = rng.random();
                let k = cdf.partition_point(|&c| c <= u).min(ids.len() - 1);
                Some(ids[k])
            }
        }
    }

    /// Moves to the next arrival allowed by the client's schedule.
    /// Returns false when the client will never produce another arrival.
    fn advance(&mut self) -> bool {
        match self.plan.schedule {
            Schedule::Unlimited => {}
            Schedule::AtMost(n) if self.arrivals < n => {}
            Schedule::AtMost(_) => return false,
            Schedule::Spread { start, span, count } => {
                if self.arrivals >= count {
                    return false;
                }
                let st = self.spread.as_mut().expect("spread state");
                let frac = st.next();
                let offset = ((span as f64 * frac).floor() as Tick).clamp(0, span - 1);
                self.next = start + offset;
                self.arrivals += 1;
                return true;
            }
        }
        if self.advance_process() {
            self.arrivals += 1;
            true
        } else {
            false
        }
    }

    /// Moves to the next arrival of the arrival process that lies inside an
    /// activity window. A client is idle outside its windows: an arrival that
    /// would fall in a gap is dropped and the process restarts at the next
    /// window's start.
    fn advance_process(&mut self) -> bool {
        loop {
            self.clock += self.plan.arrival.sample(&mut self.rng);
            if self.clock.is_nan() || self.clock >= MAX_TIME_US {
                return false;
            }
            let t = self.clock.round() as Tick;
            let w = &self.plan.windows;
            if w.is_empty() {
                self.next = t;
                return true;
            }
            while self.window < w.len() && t >= w[self.window].1 {
                self.window += 1;
            }
            if self.window == w.len() {
                return false;
            }
            if t >= w[self.window].0 {
                self.next = t;
                return true;
            }
            // Idle until the window opens; the arrival process restarts
            // there (bounded work however long the gap).
            self.clock = w[self.window].0 as f64;
        }
    }
}

/// Draws a request's lengths and content seeds from `rng` and writes them.
fn fill<R: Rng>(plan: &ClientPlan, rng: &mut R, req: &mut Request) {
    let input = plan.input.sample(rng);
    let output = plan.output.sample(rng);
    let unique = rng.next_u64();
    req.output_seed = rng.next_u64();
    req.output_len = output;
    req.prompt.clear();
    let mut len = 0;
    if let Some(p) = plan.prefix {
        req.prompt.push(p);
        len += p.len;
    }
    req.prompt.push(Segment {
        seed: unique,
        len: input,
    });
    req.input_len = len + input;
    req.multimodal = draw_multimodal(plan, rng);
}

/// A session round waiting for its arrival time.
#[derive(Debug)]
struct PendingRound {
    at: Tick,
    seq: u64,
    client: u32,
    session: u32,
    round: u32,
    /// A view of the session's log (accumulate), else its own segments.
    prompt: Prompt,
    input_len: u32,
    output_len: u32,
    output_seed: u64,
    /// The session's adapter (every round runs with it).
    adapter: Option<u32>,
    multimodal: bool,
}

impl PartialEq for PendingRound {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for PendingRound {}
impl PartialOrd for PendingRound {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for PendingRound {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// A session whose next round has not been scheduled yet.
#[derive(Debug)]
struct ActiveSession {
    client: u32,
    /// Index of the session among its client's sessions (keys its streams).
    index: u64,
    /// Accumulate: the session's context (its last round's prompt so far),
    /// of which each round's prompt is a view.
    context: Option<SegmentLog>,
}

/// Sizes of the generator's internal structures (for memory tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Entries in the next-arrival heap (at most one per client).
    pub client_heap: usize,
    /// Allocated capacity of that heap.
    pub client_heap_capacity: usize,
    /// Session rounds waiting for their arrival time.
    pub pending_rounds: usize,
    /// Sessions whose next round is not yet scheduled.
    pub active_sessions: usize,
}

/// The merged stream of all synthetic clients.
#[derive(Debug)]
pub(crate) struct Generator {
    clients: Vec<ClientGen>,
    /// Next arrival of each client that has one: (time, client index).
    ready: BinaryHeap<Reverse<(Tick, u32)>>,
    rounds: BinaryHeap<Reverse<PendingRound>>,
    sessions: HashMap<u32, ActiveSession>,
    next_session: u32,
    round_seq: u64,
}

impl Generator {
    pub(crate) fn new(plans: Vec<ClientPlan>) -> Self {
        let mut clients: Vec<ClientGen> = plans.into_iter().map(ClientGen::new).collect();
        let mut ready = BinaryHeap::with_capacity(clients.len());
        for (i, c) in clients.iter_mut().enumerate() {
            if c.advance() {
                ready.push(Reverse((c.next, i as u32)));
            }
        }
        Generator {
            clients,
            ready,
            rounds: BinaryHeap::new(),
            sessions: HashMap::new(),
            next_session: 0,
            round_seq: 0,
        }
    }

    pub(crate) fn footprint(&self) -> Footprint {
        Footprint {
            client_heap: self.ready.len(),
            client_heap_capacity: self.ready.capacity(),
            pending_rounds: self.rounds.len(),
            active_sessions: self.sessions.len(),
        }
    }

    /// Arrival time of the next request (new arrivals win ties over session rounds).
    pub(crate) fn peek_time(&self) -> Option<Tick> {
        let c = self.ready.peek().map(|r| r.0 .0);
        let r = self.rounds.peek().map(|r| r.0.at);
        match (c, r) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Writes the next request's identity and content (all but `id`).
    pub(crate) fn pop_into(&mut self, req: &mut Request) -> bool {
        let c = self.ready.peek().map(|r| r.0 .0);
        let r = self.rounds.peek().map(|r| r.0.at);
        let from_client = match (c, r) {
            (Some(a), Some(b)) => a <= b,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return false,
        };
        if from_client {
            let Reverse((at, ci)) = self.ready.pop().expect("peeked");
            self.emit_new(ci, at, req);
            let cl = &mut self.clients[ci as usize];
            if cl.advance() {
                self.ready.push(Reverse((cl.next, ci)));
            }
        } else {
            let Reverse(round) = self.rounds.pop().expect("peeked");
            let cl = &self.clients[round.client as usize];
            req.arrival = round.at;
            req.input_len = round.input_len;
            req.output_len = round.output_len;
            req.output_seed = round.output_seed;
            req.prompt.assign(&round.prompt);
            req.client = round.client;
            req.tenant = cl.plan.tenant;
            req.slo_class = cl.plan.slo;
            req.session = Some((round.session, round.round));
            req.private_from = OptIdx::NONE;
            req.adapter = round.adapter.into();
            req.model = cl.plan.model.into();
            req.multimodal = round.multimodal;
        }
        true
    }

    /// A new arrival of client `ci` (a plain request or a session's round 0).
    fn emit_new(&mut self, ci: u32, at: Tick, req: &mut Request) {
        let cl = &mut self.clients[ci as usize];
        req.arrival = at;
        req.client = ci;
        req.tenant = cl.plan.tenant;
        req.slo_class = cl.plan.slo;
        req.adapter = cl.draw_adapter().into();
        req.model = cl.plan.model.into();
        match cl.plan.session {
            None => {
                fill(&cl.plan, &mut cl.rng, req);
                req.session = None;
                // After the shared prefix, a fresh random segment and the
                // output: no other request repeats them (no session round
                // follows this one).
                req.private_from = OptIdx::some(cl.plan.prefix.map_or(0, |p| p.len));
            }
            Some(spec) => {
                let index = cl.sessions_started;
                cl.sessions_started += 1;
                let sid = self.next_session;
                self.next_session = self.next_session.wrapping_add(1);
                let mut rng = round_rng(cl.plan.seed, index, 0);
                fill(&cl.plan, &mut rng, req);
                req.session = Some((sid, 0));
                req.private_from = OptIdx::NONE; // later rounds may repeat it
                if spec.max_rounds > 1 {
                    // Accumulate: later rounds extend this prompt; keep it
                    // in the session's log, the prompt a view of it.
                    let context = (spec.context_growth == ContextGrowth::Accumulate).then(|| {
                        let log = SegmentLog::from_slice(&req.prompt);
                        log.view_into(&mut req.prompt);
                        log
                    });
                    self.sessions.insert(
                        sid,
                        ActiveSession {
                            client: ci,
                            index,
                            context,
                        },
                    );
                }
            }
        }
    }

    /// Schedules the next round of `req`'s session, or ends the session.
    pub(crate) fn on_finished(&mut self, req: &Request, at: Tick, completed: bool) {
        let Some((sid, round)) = req.session else {
            return;
        };
        let Some(active) = self.sessions.get_mut(&sid) else {
            return;
        };
        let cl = &self.clients[active.client as usize];
        let spec = cl.plan.session.expect("session client");
        let next = round + 1;
        if !completed || next >= spec.max_rounds {
            self.sessions.remove(&sid);
            return;
        }
        let mut rng = round_rng(cl.plan.seed, active.index, next);
        let input = cl.plan.input.sample(&mut rng);
        let output_len = cl.plan.output.sample(&mut rng);
        let unique = rng.next_u64();
        let output_seed = rng.next_u64();
        let fresh = Segment {
            seed: unique,
            len: input,
        };
        let mut prompt = Prompt::new();
        let total = match spec.context_growth {
            ContextGrowth::Accumulate => {
                // What the client saw: the whole output, or the part emitted
                // before a forced completion.
                let seen = if req.generated > 0 && req.generated < req.output_len {
                    req.generated
                } else {
                    req.output_len
                };
                // The finished round's prompt (its segments add up to
                // `input_len`), the output seen and the new tokens.
                let total = u64::from(req.input_len) + u64::from(seen) + u64::from(input);
                if total <= MAX_CONTEXT_TOKENS {
                    let log = match &mut active.context {
                        // The log ends with the finished round's prompt (a
                        // session has one round in flight at a time).
                        Some(log) if log.is_viewed_by(&req.prompt) => log,
                        c => c.insert(SegmentLog::from_slice(&req.prompt)),
                    };
                    log.push(Segment {
                        seed: req.output_seed,
                        len: seen,
                    });
                    log.push(fresh);
                    log.view_into(&mut prompt);
                }
                total
            }
            ContextGrowth::None => {
                if let Some(p) = cl.plan.prefix {
                    prompt.push(p);
                }
                prompt.push(fresh);
                prompt.iter().map(|s| u64::from(s.len)).sum()
            }
        };
        if total > MAX_CONTEXT_TOKENS {
            self.sessions.remove(&sid);
            return;
        }
        let multimodal = draw_multimodal(&cl.plan, &mut rng);
        let pending = PendingRound {
            at: at.saturating_add(spec.think_time_us.min(i64::MAX as u64) as Tick),
            seq: self.round_seq,
            client: active.client,
            session: sid,
            round: next,
            prompt,
            input_len: total as u32,
            output_len,
            output_seed,
            adapter: req.adapter.get(),
            multimodal,
        };
        self.round_seq += 1;
        self.rounds.push(Reverse(pending));
        if next + 1 >= spec.max_rounds {
            // The last round is scheduled: nothing more to remember.
            self.sessions.remove(&sid);
        }
    }
}

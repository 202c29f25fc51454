//! `blis observe` (spec `workload-head.md` §2.5–2.6): drive a real
//! OpenAI-compatible server (vLLM, llm-d, llama.cpp…) with a blis workload
//! and record what it did as a TraceV2 in mode `real`, to replay and
//! calibrate against.
//!
//! The requests come from the same generator as `blis run` (a run file's
//! `[workload]`, a reference workload spec, or the workload flags), paced
//! on the wall clock by [`dispatch`]; [`prompt`] turns their token
//! segments into text, [`client`] does one HTTP exchange (blocking `ureq`,
//! one worker thread per request in flight: no async runtime, and nothing
//! of this module is compiled into `blis` without the `observe` feature),
//! [`kv_metrics`] reads vLLM's prefix-cache counters, [`summary`] makes the
//! JSON printed on stdout.
//!
//! Everything written goes through [`crate::output`] (the trace through
//! [`crate::trace_v2::TraceV2Writer`]): checked against the inputs and each
//! other before the first request, renamed into place at the end — also
//! after Ctrl-C, which stops dispatching, waits `--drain-timeout` for the
//! requests in flight, writes what was recorded and exits 130.

mod client;
mod dispatch;
mod kv_metrics;
mod prompt;
mod summary;

use std::collections::HashMap;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use client::ApiFormat;
use client::{Call, Client, Outcome, Status};
use dispatch::{Finished, Pacing, Settings};

use crate::session::{self, Base, Error as Failure, Overrides};

/// Bad input (nothing ran).
fn usage(message: impl Into<String>) -> Failure {
    Failure::input(message)
}
use crate::config::{RunFile, Source};
use crate::output::PendingOutput;
use crate::request::{mix64, Request, SloClass};
use crate::trace_v2::{
    KvMetricsSource, NetworkInfo, ObservedKvMetrics, ServerInfo, TraceColumns, TraceHeader,
    TraceMode, TraceRecord, TraceStatus, TraceV2Writer,
};
use crate::workload::Workload;

/// What `blis observe` sends and records (its flags, as the command line
/// gives them).
#[derive(Debug, Clone)]
pub struct ObserveArgs {
    /// TOML run file whose `[workload]` (and `seed`, `horizon_us`) give the
    /// requests (default: the built-in scenario's workload).
    pub run_file: Option<PathBuf>,
    /// Server base URL, e.g. `http://127.0.0.1:8000` (a trailing `/v1` is accepted).
    pub server_url: String,
    /// Model name sent in every request body.
    pub model: String,
    /// `completions` (POST /v1/completions) or `chat` (POST /v1/chat/completions).
    pub api_format: ApiFormat,
    /// Bearer token sent as `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// TraceV2 header file to write (YAML).
    pub trace_header: PathBuf,
    /// TraceV2 data file to write (CSV).
    pub trace_data: PathBuf,
    /// A reference workload-spec YAML (v1/v2) instead of the run file's `[workload]`.
    pub workload_spec: Option<PathBuf>,
    /// Workload preset: chatbot, contentgen, summarization, multidoc.
    pub workload: Option<String>,
    /// Aggregate request rate, req/s (`workload.aggregate_rate`).
    pub rate: Option<f64>,
    /// Closed-loop virtual users: each sends its next request when the
    /// previous one finished plus `--think-time-ms` (arrival times unused).
    pub concurrency: Option<usize>,
    /// Think time of `--concurrency` users, ms.
    pub think_time_ms: Option<f64>,
    /// Requests to send (`workload.num_requests`; 0 = the workload's own).
    pub num_requests: Option<u64>,
    /// No request scheduled later than this offset is sent, µs (`horizon_us`).
    pub horizon: Option<i64>,
    /// Seed of the workload generator (default: the run file's).
    pub seed: Option<u64>,
    /// Mean prompt length, tokens (`workload.prompt_tokens`).
    pub prompt_tokens: Option<u32>,
    /// Mean output length, tokens (`workload.output_tokens`).
    pub output_tokens: Option<u32>,
    /// Set any run-file key: `section.key=value` (repeatable).
    pub sets: Vec<String>,
    /// Most requests in flight at once.
    pub max_concurrency: usize,
    /// The first N dispatches are sent but not recorded (recorded ids start at N).
    pub warmup_requests: u64,
    /// Before measuring, send unrecorded 256-word requests (max_tokens 64,
    /// 4 at a time) for this many seconds.
    pub prewarm_duration: f64,
    /// Send every request non-streaming (wins over `--record-itl`).
    pub no_streaming: bool,
    /// Drop `min_tokens`; `max_tokens` 2³¹−1 (completions) or absent (chat).
    pub unconstrained_output: bool,
    /// HTTP timeout, s, of each phase of a request (connect, send, each
    /// wait for data) and of a `/metrics` scrape: over it, a `timeout` row.
    pub timeout: f64,
    /// Deadline, s, of a whole request from its send: a response still
    /// arriving then is cut off as a `timeout` row.
    pub request_timeout: f64,
    /// Stream every request and write every chunk's time to the ITL CSV.
    pub record_itl: bool,
    /// ITL CSV path (default: the trace data path with `.itl.csv` for `.csv`).
    pub itl_output: Option<PathBuf>,
    /// Read vLLM's prefix-cache counters from `/metrics` before and after.
    pub scrape_kv_metrics: bool,
    /// Metrics URL (default `<server-url>/metrics`).
    pub kv_metrics_url: Option<String>,
    /// vLLM commit, recorded verbatim in `observed_kv_metrics`.
    pub vllm_commit: Option<String>,
    /// Server type recorded in the header.
    pub server_type: String,
    /// Network round-trip time, ms: recorded in the header only.
    pub rtt_ms: f64,
    /// After Ctrl-C, how long to wait for requests in flight, s.
    pub drain_timeout: f64,
    /// Never show a progress bar.
    pub quiet: bool,
}

/// One recorded request: its trace row and, with `--record-itl`, every
/// chunk's time.
pub struct Row {
    pub rec: TraceRecord,
    pub chunks: Vec<i64>,
}

/// The vLLM priority of a class: `maxPri − priority` with the default SLO
/// priority map (critical 0, standard 1, batch 5, sheddable 6, background 7;
/// lower = sooner).
pub fn vllm_priority(c: SloClass) -> u64 {
    let max = SloClass::ALL
        .iter()
        .map(|c| c.priority())
        .max()
        .unwrap_or(3)
        .max(3);
    (max - c.priority()) as u64
}

/// The ITL CSV path for a data path: `x.csv` → `x.itl.csv`, else `x.itl.csv` appended.
fn default_itl_path(data: &Path) -> PathBuf {
    let s = data.as_os_str().to_string_lossy();
    match s.strip_suffix(".csv") {
        Some(stem) => PathBuf::from(format!("{stem}.itl.csv")),
        None => PathBuf::from(format!("{s}.itl.csv")),
    }
}

/// RFC 3339 UTC of a Unix time in µs (seconds precision).
fn rfc3339(epoch_us: i64) -> String {
    let secs = epoch_us.div_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// A UUID v4 string from `bits`.
fn uuid_v4(bits: u128) -> String {
    let b = (bits & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        (b >> 96) as u32,
        (b >> 80) as u16,
        (b >> 64) as u16,
        (b >> 48) as u16,
        b & 0xffff_ffff_ffff
    )
}

/// The run file (or the spec) and the flags, as `blis run` would load them.
/// A loaded run: the run file, its source, and the inputs outputs may not overwrite.
type Loaded = (RunFile, Source, Vec<(String, PathBuf)>);

fn load(args: &ObserveArgs) -> Result<Loaded, Failure> {
    let mut inputs = Vec::new();
    let mut source = match &args.run_file {
        Some(p) => {
            inputs.push(("the run file".to_string(), p.clone()));
            Source::read(p).map_err(usage)?
        }
        None => Source::builtin(),
    };
    if let Some(spec) = &args.workload_spec {
        inputs.push(("--workload-spec".to_string(), spec.clone()));
        let text = crate::input::read_to_string(spec).map_err(|e| {
            usage(format!(
                "--workload-spec {}: cannot read it: {e}",
                spec.display()
            ))
        })?;
        let (toml_text, notes) = crate::workload::convert_workload_spec(&text)
            .map_err(|e| usage(format!("--workload-spec {}: {e}", spec.display())))?;
        for n in notes {
            eprintln!("note: {}: {n}", spec.display());
        }
        let converted: toml::Table = toml_text.parse().map_err(|e: toml::de::Error| {
            usage(format!("--workload-spec {}: {e}", spec.display()))
        })?;
        let mut table: toml::Table = source
            .text
            .parse()
            .map_err(|e: toml::de::Error| usage(format!("{}: {e}", source.name)))?;
        if let Some(w) = converted.get("workload") {
            table.insert("workload".into(), w.clone());
        }
        source = Source {
            name: format!("{} with --workload-spec {}", source.name, spec.display()),
            base_dir: source.base_dir,
            text: toml::to_string(&table).map_err(|e| usage(e.to_string()))?,
        };
    }
    let overrides = Overrides {
        seed: args.seed,
        rate: args.rate,
        num_requests: args.num_requests.filter(|&n| n > 0),
        horizon: args.horizon,
        workload: args.workload.clone(),
        prompt_tokens: args.prompt_tokens,
        output_tokens: args.output_tokens,
        sets: args.sets.clone(),
        ..Overrides::default()
    };
    let (run, source) =
        session::load_run(&Base::Text(source), &overrides, |n| eprintln!("note: {n}"))?;
    Ok((run, source, inputs))
}

/// The longest wait a flag of seconds takes: a day (past it a value cannot
/// be meant, and a duration of 10^20 s does not exist).
const MAX_FLAG_SECONDS: f64 = 86_400.0;

/// A flag of seconds in (0, a day] (`zero_ok`: [0, a day]).
fn seconds_flag(flag: &str, v: f64, zero_ok: bool) -> Result<(), Failure> {
    let low_ok = if zero_ok { v >= 0.0 } else { v > 0.0 };
    if v.is_finite() && low_ok && v <= MAX_FLAG_SECONDS {
        return Ok(());
    }
    Err(usage(format!(
        "{flag} {}: give a number of seconds {} and at most {MAX_FLAG_SECONDS} (a day)",
        crate::config::bounds::short_number(v),
        if zero_ok { "≥ 0" } else { "> 0" }
    )))
}

fn check_args(args: &ObserveArgs) -> Result<(), Failure> {
    seconds_flag("--timeout", args.timeout, false)?;
    seconds_flag("--request-timeout", args.request_timeout, false)?;
    seconds_flag("--prewarm-duration", args.prewarm_duration, true)?;
    seconds_flag("--drain-timeout", args.drain_timeout, true)?;
    let rtt = args.rtt_ms;
    if !crate::trace_v2::rtt_ms_ok(rtt) {
        return Err(usage(format!(
            "--rtt-ms {}: give the network round-trip time in ms, from 0 to {}",
            crate::config::bounds::short_number(rtt),
            crate::trace_v2::MAX_RTT_MS
        )));
    }
    if args.max_concurrency == 0 {
        return Err(usage("--max-concurrency 0: give at least 1"));
    }
    if args.concurrency == Some(0) {
        return Err(usage("--concurrency 0: give at least 1 virtual user"));
    }
    if let Some(t) = args.think_time_ms {
        if args.concurrency.is_none() {
            return Err(usage(
                "--think-time-ms is the think time of --concurrency users: give --concurrency N too \
                 (session think times of a run file come from its [workload] clients)",
            ));
        }
        if !(t.is_finite() && t >= 0.0) {
            return Err(usage(format!(
                "--think-time-ms {t}: give a number of ms ≥ 0"
            )));
        }
    }
    if args.concurrency.is_some() && args.rate.is_some() {
        return Err(usage(
            "--concurrency and --rate are both given: closed-loop users send as fast as the server answers; give one of them",
        ));
    }
    let url = args.server_url.trim();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(usage(format!(
            "--server-url {url}: give an http:// or https:// URL, e.g. http://127.0.0.1:8000"
        )));
    }
    #[cfg(not(feature = "observe-tls"))]
    if url.starts_with("https://") {
        return Err(usage(
            "--server-url: this blis was built without TLS (feature observe-tls); use an http:// URL",
        ));
    }
    Ok(())
}

/// Run `blis observe`: the summary JSON for stdout.
pub fn observe_command(args: &ObserveArgs) -> Result<Option<String>, Failure> {
    crate::alloc::small_pages_from_now_on();
    check_args(args)?;
    let (run, source, inputs) = load(args)?;
    let itl_path = check_outputs(args, &inputs)?;
    let mut workload = Workload::new(&run.workload, run.seed, &source.base_dir)
        .map_err(|e| usage(format!("{}: [workload]: {e}", source.name)))?;
    let prefixes = crate::workload::client_prefix_groups(&run.workload)
        .map_err(|e| usage(format!("{}: [workload]: {e}", source.name)))?;
    let horizon = run.horizon_us.filter(|&h| h > 0);
    if workload.planned_requests().is_none() && horizon.is_none() {
        return Err(usage(format!(
            "{}: the workload has no bound: give --num-requests N or --horizon µs (observe sends real requests)",
            source.name
        )));
    }
    let timeout = client::Timeouts {
        phase: Duration::from_secs_f64(args.timeout),
        request: Duration::from_secs_f64(args.request_timeout),
    };
    let pool = args.concurrency.unwrap_or(args.max_concurrency);
    let client = Arc::new(Client::new(
        &args.server_url,
        &args.model,
        args.api_format,
        args.api_key.clone(),
        timeout,
        pool.min(1024),
    ));
    // Ctrl-C: stop dispatching, drain, write every recorded request.
    let _graceful = crate::output::GracefulStop::begin();
    let tpw = tokens_per_word(&client);
    eprintln!(
        "observe: {} ({:?}), {tpw:.3} tokens per word",
        client.endpoint(),
        args.api_format
    );
    if args.prewarm_duration > 0.0 {
        prewarm(&client, Duration::from_secs_f64(args.prewarm_duration));
    }
    let metrics_url = args
        .kv_metrics_url
        .clone()
        .unwrap_or_else(|| format!("{}/metrics", client.base()));
    let before = args
        .scrape_kv_metrics
        .then(|| client.get_text(&metrics_url));
    let keep_chunks = itl_path.is_some();
    let (ended, rows) = observe_workload(
        args,
        &mut workload,
        &client,
        Observing {
            tpw,
            keep_chunks,
            horizon,
            prefixes: &prefixes,
        },
    );
    let observed_kv = before.and_then(|before| {
        let after = client.get_text(&metrics_url);
        observed_kv_metrics(args, &metrics_url, before, after)
    });
    let header = trace_header(args, &run, observed_kv);
    write_outputs(args, &header, &rows, itl_path.as_deref())?;

    let mut summary = summary::summarize(&rows, ended.wall_us, keep_chunks);
    summary["dispatched"] = ended.dispatched.into();
    summary["warm_up_requests"] = args.warmup_requests.into();
    summary["tokens_per_word"] = tpw.into();
    let text = serde_json::to_string_pretty(&summary).map_err(|e| Failure::run(e.to_string()))?;
    eprintln!(
        "observe: {} dispatched, {} recorded ({} ok), {:.3} s; trace in {} and {}",
        ended.dispatched,
        rows.len(),
        summary["ok"],
        ended.wall_us as f64 / 1e6,
        args.trace_header.display(),
        args.trace_data.display()
    );
    if ended.interrupted {
        eprintln!("{text}");
        return Err(Failure::interrupted(format!(
            "interrupted: dispatching stopped; {} requests written, of which {} were still in flight after the drain (--drain-timeout {} s) and are `incomplete` rows",
            rows.len(),
            ended.abandoned.len(),
            args.drain_timeout
        )));
    }
    Ok(Some(text))
}

/// The ITL file's path (with `--record-itl` and streaming), and every
/// output checked against the inputs.
fn check_outputs(
    args: &ObserveArgs,
    inputs: &[(String, PathBuf)],
) -> Result<Option<PathBuf>, Failure> {
    let itl_path = args
        .record_itl
        .then(|| {
            args.itl_output
                .clone()
                .unwrap_or_else(|| default_itl_path(&args.trace_data))
        })
        .filter(|_| !args.no_streaming);
    if args.itl_output.is_some() && itl_path.is_none() {
        eprintln!("note: --itl-output is ignored without --record-itl (or with --no-streaming)");
    }
    let mut outputs: Vec<(&str, PathBuf)> = vec![
        ("--trace-header", args.trace_header.clone()),
        ("--trace-data", args.trace_data.clone()),
    ];
    if let Some(p) = &itl_path {
        outputs.push(("--itl-output", p.clone()));
    }
    let errors = crate::output::check_paths(&outputs, inputs);
    if !errors.is_empty() {
        return Err(usage(errors.join("\n")));
    }
    Ok(itl_path)
}

/// Tokens per word, from one calibration request (1 if it fails).
fn tokens_per_word(client: &Client) -> f64 {
    let calib = client.send(&Call {
        prompt: prompt::calibration_prompt(),
        stream: false,
        max_tokens: Some(1),
        min_tokens: None,
        priority: None,
        x_request_id: uuid_v4(entropy(0)),
        tenant: String::new(),
        slo_class: String::new(),
        slo_ttft_ms: None,
        keep_chunks: false,
    });
    if calib.status == Status::Ok {
        prompt::tokens_per_word(Some(calib.prompt_tokens))
    } else {
        eprintln!(
            "warning: the calibration request to {} failed ({}); using 1 token per word",
            client.endpoint(),
            calib.error_message
        );
        1.0
    }
}

/// What [`observe_workload`] needs besides the flags.
struct Observing<'a> {
    tpw: f64,
    keep_chunks: bool,
    horizon: Option<i64>,
    prefixes: &'a [Option<(String, u32)>],
}

/// Send the workload's requests and record each one that finishes past the
/// warm-up.
fn observe_workload(
    args: &ObserveArgs,
    workload: &mut Workload,
    client: &Arc<Client>,
    o: Observing,
) -> (dispatch::Ended, Vec<Row>) {
    let unconstrained = args.unconstrained_output;
    let format = args.api_format;
    let warmup = args.warmup_requests;
    let tenants: Vec<String> = workload.tenant_names().to_vec();
    let clients: Vec<String> = workload.client_names().to_vec();
    let mut text = String::new();
    let salt = entropy(1);
    let make_call = |index: u64, req: &Request| {
        prompt::prompt_text(req, o.tpw, &mut text);
        let out = u64::from(req.output_len);
        let planned = if out == 0 { 2048 } else { out };
        let (max_tokens, min_tokens) = if unconstrained {
            let max = match format {
                ApiFormat::Completions => Some((1u64 << 31) - 1),
                ApiFormat::Chat => None,
            };
            (max, None)
        } else {
            (Some(planned), Some(planned))
        };
        Call {
            prompt: text.clone(),
            stream: !args.no_streaming,
            max_tokens,
            min_tokens,
            priority: Some(vllm_priority(req.slo_class)),
            x_request_id: request_uuid(salt, index),
            tenant: tenants
                .get(req.tenant as usize)
                .cloned()
                .unwrap_or_default(),
            slo_class: req.slo_class.name().to_string(),
            slo_ttft_ms: None,
            keep_chunks: o.keep_chunks,
        }
    };
    let bar = (!args.quiet && std::io::stderr().is_terminal()).then(|| {
        let b = indicatif::ProgressBar::new(workload.planned_requests().unwrap_or(0));
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {pos}/{len} requests finished, {msg} [{elapsed}]",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let mut rows: Vec<Row> = Vec::new();
    let mut finished_count = 0u64;
    let mut failed = 0u64;
    // session → completion offset (µs) of its latest round.
    let mut session_done: HashMap<u32, i64> = HashMap::new();
    let settings = Settings {
        pacing: match args.concurrency {
            Some(users) => Pacing::Users {
                users,
                think_us: (args.think_time_ms.unwrap_or(0.0) * 1000.0).round() as i64,
            },
            None => Pacing::Arrivals {
                max: args.max_concurrency,
            },
        },
        horizon_us: o.horizon,
        drain: Duration::from_secs_f64(args.drain_timeout),
    };
    let streaming_default = !args.no_streaming;
    let mut finish = |f: Finished| {
        finished_count += 1;
        if f.outcome.status != Status::Ok {
            failed += 1;
        }
        if let Some(b) = &bar {
            b.set_position(finished_count);
            b.set_message(format!("{failed} failed"));
        }
        let think = match f.request.session {
            Some((s, r)) if r > 0 => session_done
                .get(&s)
                .map_or(0, |&done| (f.scheduled_us - done).max(0) as u64),
            _ => 0,
        };
        if let Some((s, _)) = f.request.session {
            session_done.insert(s, f.finished_us);
        }
        if f.index < warmup {
            return;
        }
        rows.push(record(
            &f,
            streaming_default,
            think,
            request_uuid(salt, f.index),
            &clients,
            &tenants,
            o.prefixes,
        ));
    };
    let ended = dispatch::run(
        workload,
        Arc::clone(client),
        &settings,
        make_call,
        &mut finish,
    );
    // Requests still in flight after the drain: `incomplete` rows.
    for (index, request, scheduled_us) in &ended.abandoned {
        finish(Finished {
            index: *index,
            request: request.clone(),
            scheduled_us: *scheduled_us,
            finished_us: ended.wall_us,
            outcome: Outcome::cancelled(
                "cancelled: still in flight when observe was interrupted (after the drain)",
            ),
        });
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    (ended, rows)
}

/// `--scrape-kv-metrics`: the KV metrics observed between the scrapes
/// before and after the run (a warning and none when either failed).
fn observed_kv_metrics(
    args: &ObserveArgs,
    metrics_url: &str,
    before: Result<String, String>,
    after: Result<String, String>,
) -> Option<ObservedKvMetrics> {
    let kv = match (before, after) {
        (Ok(b), Ok(a)) => kv_metrics::observe(&b, &a),
        (Err(e), _) | (_, Err(e)) => Err(format!("cannot read {metrics_url}: {e}")),
    };
    match kv {
        Ok(k) => Some(ObservedKvMetrics {
            source: match k.source {
                kv_metrics::KvSource::Tiered => KvMetricsSource::Tiered,
                kv_metrics::KvSource::GpuPrefixCacheFallback => {
                    KvMetricsSource::GpuPrefixCacheFallback
                }
            },
            hit_rate: k.hit_rate,
            block_hits: k.block_hits,
            block_queries: k.block_queries,
            read_time_total: k.read_time_total,
            write_time_total: k.write_time_total,
            vllm_commit: args.vllm_commit.clone(),
        }),
        Err(e) => {
            eprintln!("warning: --scrape-kv-metrics: no observed_kv_metrics in the header: {e}");
            None
        }
    }
}

/// The trace's header (mode `real`).
fn trace_header(
    args: &ObserveArgs,
    run: &RunFile,
    observed_kv: Option<ObservedKvMetrics>,
) -> TraceHeader {
    let mut header = TraceHeader::new(TraceMode::Real);
    header.time_unit = "us".to_string();
    header.created_at = Some(rfc3339(client::epoch_us()));
    header.warm_up_requests = args.warmup_requests;
    header.workload_seed = Some(run.seed as i64);
    header.workload_spec = args
        .workload_spec
        .as_ref()
        .map(|p| p.display().to_string())
        .or_else(|| args.workload.as_ref().map(|w| format!("preset:{w}")));
    header.server = Some(ServerInfo {
        server_type: args.server_type.clone(),
        model: args.model.clone(),
        ..ServerInfo::default()
    });
    header.network = Some(NetworkInfo {
        measured_rtt_ms: args.rtt_ms,
    });
    header.observed_kv_metrics = observed_kv;
    header
}

/// The `x-request-id` of dispatch `index`.
fn request_uuid(salt: u128, index: u64) -> String {
    let (a, b) = ((salt >> 64) as u64, salt as u64);
    uuid_v4(u128::from(mix64(a ^ index)) << 64 | u128::from(mix64(b ^ index)))
}

/// Some entropy for request ids: the clock, the process, a stream number.
fn entropy(stream: u64) -> u128 {
    let t = client::epoch_us() as u64;
    let p = u64::from(std::process::id());
    let a = mix64(t ^ mix64(p) ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let b = mix64(a ^ 0x5851_f42d_4c95_7f2d);
    u128::from(a) << 64 | u128::from(b)
}

/// The trace row of a finished request.
fn record(
    f: &Finished,
    streaming: bool,
    think_time_us: u64,
    x_request_id: String,
    clients: &[String],
    tenants: &[String],
    prefixes: &[Option<(String, u32)>],
) -> Row {
    let r = &f.request;
    let o = &f.outcome;
    let (group, prefix_len) = prefixes
        .get(r.client as usize)
        .and_then(|p| p.as_ref())
        .map_or((String::new(), 0), |(g, l)| (g.clone(), u64::from(*l)));
    let (session_id, round) = match r.session {
        Some((s, k)) => (format!("session_{s}"), u64::from(k)),
        None => (String::new(), 0),
    };
    let rec = TraceRecord {
        request_id: f.index,
        client_id: clients.get(r.client as usize).cloned().unwrap_or_default(),
        tenant_id: tenants.get(r.tenant as usize).cloned().unwrap_or_default(),
        slo_class: r.slo_class.name().to_string(),
        vllm_priority: vllm_priority(r.slo_class),
        session_id,
        round_index: round,
        prefix_group: group,
        prefix_length: prefix_len,
        streaming,
        input_tokens: u64::from(r.input_len).saturating_sub(prefix_len),
        output_tokens: o.completion_tokens,
        server_input_tokens: o.prompt_tokens,
        arrival_time_us: f.scheduled_us,
        send_time_us: o.send_us,
        first_chunk_time_us: o.first_chunk_us,
        last_chunk_time_us: o.last_chunk_us,
        num_chunks: o.num_chunks,
        status: match o.status {
            Status::Ok => TraceStatus::Ok,
            Status::Error => TraceStatus::Error,
            Status::Timeout => TraceStatus::Timeout,
            Status::Cancelled => TraceStatus::Incomplete,
        },
        error_message: o.error_message.replace(['\n', '\r'], " "),
        finish_reason: o.finish_reason.clone(),
        x_request_id,
        think_time_us,
        ..TraceRecord::default()
    };
    Row {
        rec,
        chunks: if o.status == Status::Ok {
            o.chunks.clone()
        } else {
            Vec::new()
        },
    }
}

/// Unrecorded 256-word requests, 4 at a time, for `d`.
fn prewarm(client: &Arc<Client>, d: Duration) {
    eprintln!("observe: prewarming for {:.1} s", d.as_secs_f64());
    let until = std::time::Instant::now() + d;
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let c = Arc::clone(client);
            std::thread::spawn(move || {
                let mut n = 0u64;
                while std::time::Instant::now() < until && !crate::output::stop_requested() {
                    c.send(&Call {
                        prompt: prompt::prewarm_prompt(),
                        stream: false,
                        max_tokens: Some(64),
                        min_tokens: None,
                        priority: None,
                        x_request_id: uuid_v4(entropy(100 + i * 1_000_000 + n)),
                        tenant: String::new(),
                        slo_class: String::new(),
                        slo_ttft_ms: None,
                        keep_chunks: false,
                    });
                    n += 1;
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
}

fn io_failure(path: &Path, e: impl std::fmt::Display) -> Failure {
    Failure::run(format!("cannot write {}: {e}", path.display()))
}

/// The trace (header, data) and the ITL CSV, each renamed into place.
fn write_outputs(
    args: &ObserveArgs,
    header: &TraceHeader,
    rows: &[Row],
    itl: Option<&Path>,
) -> Result<(), Failure> {
    let columns = TraceColumns::needed_by(rows.iter().map(|r| &r.rec), true);
    let mut w = TraceV2Writer::create(&args.trace_header, &args.trace_data, columns)
        .map_err(|e| Failure::run(e.to_string()))?;
    for r in rows {
        w.write(&r.rec).map_err(|e| Failure::run(e.to_string()))?;
    }
    let itl_pending = match itl {
        Some(p) => {
            let (file, pending) = PendingOutput::create(p).map_err(|e| io_failure(p, e))?;
            let mut out = BufWriter::new(file);
            let mut write = || -> std::io::Result<()> {
                writeln!(out, "request_id,chunk_index,timestamp_us")?;
                for r in rows.iter().filter(|r| r.rec.status == TraceStatus::Ok) {
                    for (k, t) in r.chunks.iter().enumerate() {
                        writeln!(out, "{},{k},{t}", r.rec.request_id)?;
                    }
                }
                out.flush()
            };
            write().map_err(|e| io_failure(p, e))?;
            Some(pending)
        }
        None => None,
    };
    w.finish(header).map_err(|e| Failure::run(e.to_string()))?;
    if let Some(p) = itl_pending {
        let path = p.path().to_path_buf();
        p.commit().map_err(|e| io_failure(&path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_priorities_invert_the_slo_map() {
        let p: Vec<u64> = SloClass::ALL.iter().map(|&c| vllm_priority(c)).collect();
        assert_eq!(p, [0, 1, 5, 6, 7]);
    }

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        // 2024-02-29T12:34:56Z = 1709210096 s.
        assert_eq!(rfc3339(1_709_210_096_000_000), "2024-02-29T12:34:56Z");
    }

    #[test]
    fn uuids_are_version_4() {
        let u = uuid_v4(u128::MAX);
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"), "{u}");
        assert_eq!(uuid_v4(0), "00000000-0000-4000-8000-000000000000");
    }

    #[test]
    fn itl_path_follows_the_data_path() {
        assert_eq!(
            default_itl_path(Path::new("a/t.csv")),
            PathBuf::from("a/t.itl.csv")
        );
        assert_eq!(default_itl_path(Path::new("t")), PathBuf::from("t.itl.csv"));
    }
}

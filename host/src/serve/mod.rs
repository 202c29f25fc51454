//! `blis serve` (feature `serve`; Boundary: clients over HTTP): the run
//! file's instances as vLLM look-alike servers on real sockets, with
//! blis's engine behind them in wall-clock time.
//!
//! * `engine.rs` — the engine thread: one synchronous [`Cluster`] stepped
//!   up to `--speed` × the wall time since the start; it delivers each
//!   stream's tokens when the simulated engine produces them and measures
//!   how late each delivery is.
//! * `http.rs` — axum servers (tokio): OpenAI-compatible completions and
//!   chat completions (streamed and not), `/v1/models`, `/health`,
//!   `/ready`, `/metrics`; vLLM's error bodies.
//! * `prompt.rs` — request text → simulated prompt tokens and prefix
//!   blocks; `metrics.rs` — `/metrics` in vLLM's names.
//!
//! One port per instance (a request there runs on that instance: no
//! admission, no routing, as on a vLLM server) and, with `--gateway`, one
//! more port applying the run file's own admission, flow control and
//! routing. The async runtime lives here only: the simulation core stays
//! synchronous and deterministic, and the wall clock drives it from
//! outside. Ctrl-C (or `--duration`) stops the servers, ends the run and
//! prints its report.

mod engine;
mod faults;
mod http;
mod listener;
mod metrics;
mod prompt;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::config::{self, Source};
use crate::metrics::report;
use crate::output::GracefulStop;
use crate::plugins::Registry;
use crate::session::Error;
use crate::workload::Workload;
use faults::{FaultState, Injector};

/// What `blis serve` is asked.
#[derive(Clone, Debug)]
pub struct ServeArgs {
    /// The run file (`None`: the built-in scenario).
    pub run_file: Option<PathBuf>,
    /// Address to listen on.
    pub host: String,
    /// First instance's port (instance i on `port + i`); 0: any free port.
    pub port: u16,
    /// The gateway's port, if any (0: any free port).
    pub gateway: Option<u16>,
    /// Simulated time per wall time.
    pub speed: f64,
    /// Stop after this many wall seconds (default: at Ctrl-C).
    pub duration: Option<f64>,
    /// Requests in the servers at once past which a new one is refused
    /// with 503.
    pub max_requests: u64,
    /// Open connections (all ports together) past which a new one is
    /// answered 503 and closed.
    pub max_connections: usize,
    /// Where to write every `/metrics` answer's time and gauges (JSON
    /// lines, at the end), if anywhere.
    pub metrics_log: Option<PathBuf>,
}

/// The fastest and slowest `--speed`.
const SPEED_RANGE: (f64, f64) = (1e-3, 1e4);

fn check(args: &ServeArgs) -> Result<(), Error> {
    let (lo, hi) = SPEED_RANGE;
    if !(args.speed.is_finite() && (lo..=hi).contains(&args.speed)) {
        return Err(Error::input(format!(
            "--speed {}: give a factor from {lo} to {hi} (1 = real time; 10 runs ten times faster than real time)",
            crate::config::bounds::short_number(args.speed)
        )));
    }
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0 && d <= 86_400.0 * 30.0) {
            return Err(Error::input(format!(
                "--duration {}: give a number of seconds > 0 and at most 30 days",
                crate::config::bounds::short_number(d)
            )));
        }
    }
    if !(1..=MAX_CONNECTIONS).contains(&args.max_connections) {
        return Err(Error::input(format!(
            "--max-connections {}: give a number from 1 to {MAX_CONNECTIONS} (open connections, all ports together, past which a new one is answered 503)",
            args.max_connections
        )));
    }
    if let Some(log) = &args.metrics_log {
        let inputs: Vec<(String, PathBuf)> = args
            .run_file
            .iter()
            .map(|p| ("the run file".to_string(), p.clone()))
            .collect();
        let problems = crate::output::check_paths(&[("--metrics-log", log.clone())], &inputs);
        if !problems.is_empty() {
            return Err(Error::input(problems.join("\n")));
        }
    }
    if args.max_requests == 0 {
        return Err(Error::input(
            "--max-requests 0: give at least 1 (requests in the servers at once past which a new one is answered 503)",
        ));
    }
    Ok(())
}

/// The most `--max-connections` allows (each open connection holds a file
/// descriptor and a few KiB).
const MAX_CONNECTIONS: usize = 1 << 20;

/// Run the servers until Ctrl-C or `--duration`; the run's report.
pub fn serve(args: &ServeArgs) -> Result<String, Error> {
    check(args)?;
    let source = match &args.run_file {
        Some(p) => Source::read(p).map_err(Error::input)?,
        None => Source::builtin(),
    };
    let run = config::parse(&source).map_err(Error::input)?;
    let tokenize = match run.serve.as_ref().and_then(|s| s.tokenizer.as_ref()) {
        Some(p) => prompt::Tokenize::load(&source.base_dir.join(p))
            .map_err(|e| Error::input(format!("{}: {e}", source.name)))?,
        None => prompt::Tokenize::Words,
    };
    // The cluster (plugins, writers) stays on the thread that builds it.
    let (tx, rx) = std::sync::mpsc::channel();
    type Ready = (usize, Vec<String>, Arc<FaultState>);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<Ready, Error>>();
    let speed = args.speed;
    let (run2, source2) = (run.clone(), source.clone());
    let engine = std::thread::Builder::new()
        .name("blis-engine".into())
        .spawn(move || {
            let cluster = match build_cluster(&run2, &source2) {
                Ok(c) => c,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return None;
                }
            };
            let adapters = cluster.adapter_names().to_vec();
            let n = cluster.instance_count();
            let state = Arc::new(FaultState::new(n));
            let faults = run2
                .serve
                .as_ref()
                .map(|s| s.faults.clone())
                .unwrap_or_default();
            let injector = Injector::new(faults, Arc::clone(&state), n);
            let _ = ready_tx.send(Ok((n, adapters, state)));
            Some(report_of(engine::run(cluster, speed, rx, injector), speed))
        })
        .map_err(|e| Error::run(format!("cannot start the engine thread: {e}")))?;
    let (n, adapters, fault_state) = match ready_rx.recv() {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            let _ = engine.join();
            return Err(e);
        }
        Err(_) => return Err(Error::run("the engine thread ended before it was ready")),
    };
    let shared = Arc::new(http::Shared {
        commands: Mutex::new(tx.clone()),
        model: run.model.name.clone(),
        adapters,
        unloaded: Mutex::new(Default::default()),
        block_size: run.instance.block_size,
        tokenize,
        max_model_len: run.instance.max_model_len,
        refused: AtomicU64::new(0),
        in_flight: AtomicU64::new(0),
        max_requests: args.max_requests,
        full: AtomicU64::new(0),
        disconnected: AtomicU64::new(0),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        next_id: AtomicU64::new(0),
        metrics_log: args.metrics_log.as_ref().map(|_| Mutex::new(Vec::new())),
        faults: fault_state,
        seed: run.seed,
        sent_to: (0..n).map(|_| AtomicU64::new(0)).collect(),
        faulted: AtomicU64::new(0),
    });
    let graceful = GracefulStop::begin();
    let refused_connections = Arc::new(AtomicU64::new(0));
    let served = listen(args, n, &shared, &graceful, &refused_connections);
    let _ = tx.send(engine::Command::Stop);
    drop(tx);
    let report = engine
        .join()
        .ok()
        .flatten()
        .ok_or_else(|| Error::run("the engine thread panicked"))?;
    served?;
    let mut report = report?;
    write_metrics_log(args, &shared)?;
    let count = |a: &AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    if let Some(section) = report.get_mut("serve").and_then(|v| v.as_object_mut()) {
        section.insert("refused_requests".into(), count(&shared.refused).into());
        section.insert("refused_full".into(), count(&shared.full).into());
        section.insert(
            "refused_connections".into(),
            count(&refused_connections).into(),
        );
        section.insert("faulted_requests".into(), count(&shared.faulted).into());
        section.insert(
            "disconnected_streams".into(),
            count(&shared.disconnected).into(),
        );
    }
    serde_json::to_string_pretty(&report).map_err(|e| Error::run(e.to_string()))
}

/// `--metrics-log`: the `/metrics` answers, one JSON line each, written
/// atomically.
fn write_metrics_log(args: &ServeArgs, shared: &http::Shared) -> Result<(), Error> {
    let (Some(path), Some(log)) = (&args.metrics_log, &shared.metrics_log) else {
        return Ok(());
    };
    let lines = log.lock().map(|l| l.clone()).unwrap_or_default();
    if lines.len() >= http::METRICS_LOG_CAP {
        eprintln!(
            "note: --metrics-log kept the first {} /metrics answers only",
            http::METRICS_LOG_CAP
        );
    }
    let mut text = lines.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    crate::output::write_atomic(path, text.as_bytes())
        .map_err(|e| Error::run(format!("--metrics-log: {e}")))
}

/// The report of a finished serve run (built on the engine thread: the
/// outcome holds the run's writers).
fn report_of(finished: engine::Finished, speed: f64) -> Result<serde_json::Value, Error> {
    let mut outcome = finished.outcome.map_err(|e| Error::run(e.to_string()))?;
    let mut report = report::build(&mut outcome, None);
    if let Some(map) = report.as_object_mut() {
        map.insert("serve".into(), timing_section(&finished.timing, speed));
    }
    Ok(report)
}

/// The run file's cluster with an external workload.
fn build_cluster(run: &crate::config::RunFile, source: &Source) -> Result<Cluster, Error> {
    let mut registry = Registry::standard();
    let built = config::build(run, &source.base_dir, &mut registry, false)
        .map_err(|m| Error::input(format!("{}: {m}", source.name)))?;
    for n in built
        .notes
        .iter()
        .filter(|n| n.as_str() != config::build::SERVE_FAULTS_NOTE)
    {
        eprintln!("note: {n}");
    }
    let mut setup = built.setup;
    let w = &setup.workload;
    setup.workload = Workload::external(
        w.tenant_names().to_vec(),
        w.client_names().to_vec(),
        w.adapter_names().to_vec(),
        w.model_names().to_vec(),
    );
    Ok(Cluster::new(setup))
}

/// Bind every server, serve until stopped.
fn listen(
    args: &ServeArgs,
    instances: usize,
    shared: &Arc<http::Shared>,
    graceful: &GracefulStop,
    refused: &Arc<AtomicU64>,
) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::run(format!("cannot start the HTTP runtime: {e}")))?;
    rt.block_on(async {
        let mut endpoints: Vec<(String, Option<u32>, u16)> = (0..instances)
            .map(|i| {
                let port = if args.port == 0 {
                    0
                } else {
                    args.port.saturating_add(i as u16)
                };
                (format!("instance {i}"), Some(i as u32), port)
            })
            .collect();
        if let Some(g) = args.gateway {
            endpoints.push(("gateway".into(), None, g));
        }
        let mut tasks = Vec::new();
        let permits = Arc::new(tokio::sync::Semaphore::new(args.max_connections));
        for (name, instance, port) in endpoints {
            let l = tokio::net::TcpListener::bind((args.host.as_str(), port))
                .await
                .map_err(|e| {
                    Error::input(format!(
                        "{name}: cannot listen on {}:{port}: {e} (give another --port / --gateway, or 0 for any free port)",
                        args.host
                    ))
                })?;
            let addr: SocketAddr = l
                .local_addr()
                .map_err(|e| Error::run(e.to_string()))?;
            eprintln!("serve: {name} at http://{addr}");
            let app = http::router(http::Endpoint {
                shared: Arc::clone(shared),
                instance,
            });
            let capped = listener::Capped {
                down: instance.map(|i| (Arc::clone(&shared.faults), i)),
                inner: l,
                permits: Arc::clone(&permits),
                cap: args.max_connections,
                refused: Arc::clone(refused),
            };
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(capped, app).await;
            }));
        }
        eprintln!("serve: ready ({} instance(s), speed {}×); Ctrl-C stops and prints the report", instances, args.speed);
        let until = args.duration.map(|d| Instant::now() + Duration::from_secs_f64(d));
        while !graceful.stopping() && until.is_none_or(|u| Instant::now() < u) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for t in tasks {
            t.abort();
        }
        Ok(())
    })
}

/// The report's `serve` section: how late tokens were handed to their
/// streams against their simulated time, in wall milliseconds.
fn timing_section(t: &engine::Timing, speed: f64) -> serde_json::Value {
    let mut late: Vec<f64> = t.lateness_us.iter().map(|us| us / speed / 1e3).collect();
    late.sort_by(f64::total_cmp);
    let pct = |p: f64| -> Option<f64> {
        if late.is_empty() {
            return None;
        }
        let k = ((late.len() - 1) as f64 * p).round() as usize;
        Some(late[k])
    };
    serde_json::json!({
        "speed": speed,
        "tokens_delivered": t.tokens,
        "deliveries": late.len(),
        "cancelled_requests": t.cancelled,
        "lost_requests": t.lost,
        "delivery_lateness_ms": {
            "p50": pct(0.5),
            "p99": pct(0.99),
            "max": late.last(),
        },
    })
}

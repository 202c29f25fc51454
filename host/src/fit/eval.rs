//! The simulator in the loop: each measured deployment's run file parsed
//! once, then run in-process with candidate coefficients, many at a time on
//! threads, its report read for the measured metrics.
//!
//! An evaluation writes the coefficients into the parsed [`RunFile`]'s
//! `[model]` (`alpha`, `beta`) and builds and runs it exactly as `blis run`
//! would, without output files. Building is a small part of a run: the
//! trace or generator and the cluster must be fresh for every run anyway.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::params::Coefficients;
use super::traces::{self, TraceArg};
use crate::cluster::Cluster;
use crate::config::{self, RunFile, Source};
use crate::instance::latency::{LatencyModel, StepVariant};
use crate::metrics::report;
use crate::plugins::Registry;

/// One measured deployment: a run file of the table, parsed once.
pub struct Experiment {
    /// The run file as the table writes it.
    pub name: String,
    pub path: PathBuf,
    /// The line of the first table row naming it (0 for a trace).
    pub line: u64,
    /// Where it comes from, for messages: `TABLE, line N` or `--trace SPEC`.
    pub origin: String,
    run: RunFile,
    base_dir: PathBuf,
    /// Model name, GPU and TP as the run resolved them.
    pub model: String,
    pub hardware: String,
    pub tp: u32,
    /// The model config file, when the run file names one.
    pub model_config: Option<PathBuf>,
    /// The latency model's name and coefficients as the run file gives them.
    pub latency_model: &'static str,
    /// `model.moe_expert_load` and `model.geometry` (trained-physics).
    pub variant: StepVariant,
    pub start: Coefficients,
    /// Requests the run plans (a guess at its cost, to start long runs first).
    pub planned: u64,
    /// A `--trace` experiment: the RTT (µs) added to the replay's TTFT and
    /// E2E (its simulations collect every trace request's latencies).
    pub trace: Option<f64>,
}

/// What one simulation gives: the report, and for a trace experiment the
/// replayed requests' latencies.
pub struct Sim {
    pub report: Value,
    pub requests: std::collections::HashMap<u64, traces::Simulated>,
}

impl Experiment {
    /// Read, parse and build `path` once (checking it and reading its
    /// starting coefficients). Errors name the table's line.
    pub fn load(name: &str, path: &Path, line: u64, table: &str) -> Result<Experiment, String> {
        let at = |m: String| format!("{table}, line {line} (run file {name}): {m}");
        let source = Source::read(path).map_err(at)?;
        let run = config::parse(&source).map_err(at)?;
        let origin = format!("{table}, line {line}");
        Self::from_run(name, path, line, origin, (run, source), None, &at)
    }

    /// A `--trace` experiment: the run file with its `[workload]` replaced
    /// by the trace (as `blis replay` builds it), parsed and built once.
    pub fn load_trace(arg: &TraceArg, rtt_us: f64) -> Result<Experiment, String> {
        let (run, source) = traces::replay_source(arg)?;
        let at = |m: String| format!("--trace {}: {m}", arg.spec);
        Self::from_run(
            &arg.run_file.display().to_string(),
            &arg.run_file,
            0,
            format!("--trace {}", arg.spec),
            (run, source),
            Some(rtt_us),
            &at,
        )
    }

    fn from_run(
        name: &str,
        path: &Path,
        line: u64,
        origin: String,
        (mut run, source): (RunFile, Source),
        trace: Option<f64>,
        at: &dyn Fn(String) -> String,
    ) -> Result<Experiment, String> {
        let mut registry = Registry::standard();
        let built = config::build(&run, &source.base_dir, &mut registry, false).map_err(at)?;
        let planned = built.setup.workload.planned_requests().unwrap_or(u64::MAX);
        let labels = &built.setup.labels;
        let (model, hardware, tp) = (labels.model.clone(), labels.gpu.clone(), labels.tp);
        let latency: &LatencyModel = built
            .setup
            .instances
            .first()
            .map(|i| i.latency_model())
            .ok_or_else(|| at("the run has no instance at the start".into()))?;
        let latency_model = latency.name();
        let variant = StepVariant::parse(
            run.model.moe_expert_load.as_deref(),
            run.model.geometry.as_deref(),
        )
        .map_err(|e| at(e.to_string()))?;
        // Keep the run file's beta length: trained-physics reads 7–8 betas
        // differently from 9–11.
        let beta = latency.beta().map(|b| {
            let n = run
                .model
                .beta
                .as_ref()
                .map_or(b.len(), Vec::len)
                .min(b.len());
            b[..n].to_vec()
        });
        let start = Coefficients {
            alpha: *latency.alpha(),
            beta,
        };
        // The coefficients come from the fit from now on.
        run.model.calibration = None;
        let model_config = run
            .model
            .config_path
            .as_ref()
            .map(|p| config_path(&source.base_dir, p));
        Ok(Experiment {
            name: name.to_string(),
            path: path.to_path_buf(),
            line,
            origin,
            run,
            base_dir: source.base_dir,
            model,
            hardware,
            tp,
            model_config,
            latency_model,
            variant,
            start,
            planned,
            trace,
        })
    }

    /// Run the deployment with `c` and return its JSON report.
    pub fn simulate(&self, c: &Coefficients) -> Result<Value, String> {
        self.simulate_with(c, 0, None).map(|s| s.report)
    }

    /// The run file's seed moved on by `replica` (`--sim-seeds`: replica 0
    /// is the run file itself).
    pub fn seed(&self, replica: u32) -> u64 {
        self.run.seed.wrapping_add(u64::from(replica))
    }

    /// [`Experiment::simulate`] at workload seed [`Experiment::seed`]`(replica)`,
    /// stopped (an error) once `cancel` is set.
    pub fn simulate_with(
        &self,
        c: &Coefficients,
        replica: u32,
        cancel: Option<&Arc<AtomicBool>>,
    ) -> Result<Sim, String> {
        let mut run = self.run.clone();
        run.seed = self.seed(replica);
        run.model.alpha = Some(c.alpha);
        run.model.beta = c.beta.clone();
        let mut registry = Registry::standard();
        let mut built = config::build(&run, &self.base_dir, &mut registry, false)?;
        let fitness = built.fitness_weights.clone();
        let requests: traces::Requests = Arc::default();
        if self.trace.is_some() {
            let ledger = built
                .setup
                .workload
                .replay_ledger()
                .ok_or("a --trace experiment without a trace workload")?;
            built.setup.collector.sinks.push(Box::new(traces::Collect {
                ledger,
                out: Arc::clone(&requests),
            }));
        }
        let mut cluster = Cluster::new(built.setup);
        if let Some(flag) = cancel {
            cluster = cluster.cancel_on(Arc::clone(flag));
        }
        let mut outcome = cluster.run(|_, _| {}).map_err(|e| e.to_string())?;
        if let Some(e) = &outcome.workload_error {
            return Err(format!("the workload stopped early: {e}"));
        }
        let report = report::build(&mut outcome, fitness.as_ref());
        drop(outcome);
        let requests = Arc::try_unwrap(requests)
            .ok()
            .and_then(|m| m.into_inner().ok())
            .unwrap_or_default();
        Ok(Sim { report, requests })
    }
}

fn config_path(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// One simulation: an experiment, its seed replica, the coefficients.
pub type Job<'a> = (usize, u32, &'a Coefficients);

/// Run every `(experiment, replica, coefficients)` job on up to `jobs` threads,
/// the longest planned runs first; results in job order. Once `cancel` is
/// set, running simulations stop and the others do not start (errors).
pub fn run_all(
    experiments: &[Experiment],
    jobs_list: &[Job],
    jobs: usize,
    cancel: Option<&Arc<AtomicBool>>,
) -> Vec<Result<Sim, String>> {
    let n = jobs_list.len();
    let results: Mutex<Vec<Option<Result<Sim, String>>>> =
        Mutex::new((0..n).map(|_| None).collect());
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(experiments[jobs_list[i].0].planned));
    let next = AtomicUsize::new(0);
    let threads = jobs.clamp(1, n.max(1));
    let work = || loop {
        let k = next.fetch_add(1, Ordering::Relaxed);
        if k >= n {
            break;
        }
        let i = order[k];
        let (e, replica, c) = jobs_list[i];
        let r = if cancel.is_some_and(|f| f.load(Ordering::Relaxed)) {
            Err(crate::cluster::RunError::Cancelled.to_string())
        } else {
            experiments[e].simulate_with(c, replica, cancel)
        };
        if let Ok(mut v) = results.lock() {
            v[i] = Some(r);
        }
    };
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(work);
            }
        });
    }
    results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("the run did not finish".into())))
        .collect()
}

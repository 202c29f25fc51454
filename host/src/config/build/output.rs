//! `[output]`: per-request results, the decision trace, fitness weights,
//! report windows (per-stage statistics), exact or sketched percentiles.

use std::path::Path;

use super::{one_of, Problems};
use crate::cluster::TraceWriter;
use crate::config::{outputs, OutputSection, RunFile};
use crate::engine::Tick;
use crate::metrics::fitness::KEYS as FITNESS_KEYS;
use crate::metrics::population::PercentileMode;
use crate::metrics::stages::StageRecorder;
use crate::metrics::Collector;
use crate::output::PendingOutput;
use crate::workload::{Window, Workload};

/// What `[output]` resolved to.
pub(super) struct CheckedOutput {
    /// A decision trace is written.
    trace: bool,
    /// `output.windows`, checked.
    windows: Option<Vec<(Tick, Tick)>>,
    /// `output.percentiles`.
    percentiles: PercentileMode,
}

pub(super) fn check(out: &OutputSection, problems: &mut Problems) -> Option<CheckedOutput> {
    let trace = match (out.trace_level.as_deref(), &out.trace_path) {
        (None, Some(_)) | (Some("decisions"), Some(_)) => true,
        (None | Some("none"), None) => false,
        (Some("none"), Some(_)) => {
            problems.error(
                "output.trace_path is set but output.trace_level = \"none\"; remove one of them",
            );
            false
        }
        (Some("decisions"), None) => {
            problems.error("output.trace_level = \"decisions\" needs output.trace_path (where to write the trace)");
            false
        }
        (Some(s), _) => {
            problems.error(one_of("output.trace_level", s, &["none", "decisions"]));
            false
        }
    };
    for (k, w) in &out.fitness_weights {
        if !FITNESS_KEYS.contains(&k.as_str()) {
            problems.error(format!(
                "output.fitness_weights: unknown metric '{k}'; accepted: {}",
                FITNESS_KEYS.join(", ")
            ));
        }
        if !(w.is_finite() && *w >= 0.0) {
            problems.error(format!(
                "output.fitness_weights.{k} = {w}: must be a finite number ≥ 0"
            ));
        }
    }
    let windows = out
        .windows
        .as_ref()
        .and_then(|ws| check_windows(ws, problems));
    let percentiles = match out.percentiles.as_deref() {
        None => PercentileMode::Exact,
        Some(s) => PercentileMode::parse(s).unwrap_or_else(|| {
            problems.error(one_of("output.percentiles", s, &PercentileMode::NAMES));
            PercentileMode::Exact
        }),
    };
    Some(CheckedOutput {
        trace,
        windows,
        percentiles,
    })
}

/// `output.windows`: non-empty, each `start_us < end_us`, in order, disjoint.
fn check_windows(ws: &[Window], problems: &mut Problems) -> Option<Vec<(Tick, Tick)>> {
    if ws.is_empty() {
        problems.error(
            "output.windows is empty: give at least one { start_us, end_us } or remove the key",
        );
        return None;
    }
    let mut v: Vec<(Tick, Tick)> = Vec::with_capacity(ws.len());
    for (i, w) in ws.iter().enumerate() {
        if w.start_us >= w.end_us || w.end_us > i64::MAX as u64 {
            problems.error(format!(
                "output.windows[{i}]: [{}, {}) is empty or out of range (need start_us < end_us)",
                w.start_us, w.end_us
            ));
            return None;
        }
        let (start, end) = (w.start_us as Tick, w.end_us as Tick);
        if let Some(&(_, prev_end)) = v.last() {
            if start < prev_end {
                problems.error(format!(
                    "output.windows[{i}] starts at {start} µs, before the previous window ends ({prev_end} µs): windows must be in order and must not overlap"
                ));
                return None;
            }
        }
        v.push((start, end));
    }
    Some(v)
}

impl CheckedOutput {
    /// The metrics collector, with the results file and the trace opened
    /// when `open_outputs` (not for `blis validate`): as temporary files,
    /// renamed into place by committing the returned [`PendingOutput`]s
    /// once the run succeeded (see [`crate::output`]).
    pub(super) fn create(
        self,
        run: &RunFile,
        base_dir: &Path,
        open_outputs: bool,
        instances: usize,
        workload: &Workload,
    ) -> Result<(Collector, Option<TraceWriter>, Vec<PendingOutput>), String> {
        let mut collector = Collector::new(
            instances,
            workload.tenant_names().to_vec(),
            workload.client_names().to_vec(),
        );
        collector.set_percentiles(self.percentiles);
        collector.stages = match &self.windows {
            Some(w) => StageRecorder::for_windows(w),
            None => match workload.client_stages() {
                Some(n) => StageRecorder::for_client_stages(n),
                None => StageRecorder::for_stages(workload.stages()),
            },
        };
        collector.client = workload
            .client_model()
            .zip(workload.client_timeout_us())
            .map(|((name, ts), timeout)| {
                crate::metrics::client::ClientRecorder::new(name.clone(), *ts, timeout)
            });
        if !open_outputs {
            return Ok((collector, None, Vec::new()));
        }
        let opened = outputs::open(run, base_dir, self.trace)?;
        collector.results = opened.results;
        collector.sinks = trace_sinks(run, base_dir, workload)?;
        Ok((collector, opened.trace, opened.pending))
    }
}

/// The TraceV2 export (`output.trace_v2`) and the SimResult array
/// (`output.sim_results_path`), as per-request sinks of the collector.
fn trace_sinks(
    run: &RunFile,
    base_dir: &Path,
    workload: &Workload,
) -> Result<Vec<Box<dyn crate::metrics::RequestSink>>, String> {
    use crate::metrics::trace_export::{SimResults, TraceExport};
    let mut sinks: Vec<Box<dyn crate::metrics::RequestSink>> = Vec::new();
    // Asked for only by a sink that needs it: a replay keeps its trace ids
    // only then.
    if let Some(p) = &run.output.trace_v2 {
        let ledger = workload.replay_ledger();
        let w = &run.workload;
        let clients = w.clients.as_deref().unwrap_or(&[]);
        let (sessions, accumulate) = match &ledger {
            Some(_) => (
                workload.replay_counts().is_some_and(|c| c.1 > 0)
                    || w.trace_v2.as_ref().is_some_and(|t| {
                        t.session_mode != Some(crate::workload::SessionMode::ClosedLoop)
                    }),
                false,
            ),
            None => (
                clients.iter().any(|c| c.session.is_some())
                    || w.inference_perf.is_some()
                    || w.trace.is_some(),
                clients.iter().any(|c| {
                    c.session.is_some_and(|s| {
                        s.context_growth == crate::workload::ContextGrowth::Accumulate
                    })
                }),
            ),
        };
        let export = TraceExport::create(
            &crate::config::resolve(base_dir, p),
            run.seed,
            workload.prefix_group_names().clone(),
            sessions,
            accumulate,
            ledger,
            workload.adapter_names().to_vec(),
            workload.model_names().to_vec(),
        )?;
        sinks.push(Box::new(export));
    }
    if let Some(p) = &run.output.sim_results_path {
        let Some(l) = workload.replay_ledger() else {
            return Err("output.sim_results_path needs a [workload.trace_v2] workload (SimResult entries are keyed by trace request_id)".into());
        };
        sinks.push(Box::new(SimResults::create(
            &crate::config::resolve(base_dir, p),
            l,
        )?));
    }
    Ok(sinks)
}

//! `[output]`: per-request results, the decision trace, fitness weights.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use super::{one_of, resolve, Problems};
use crate::cluster::TraceWriter;
use crate::config::OutputSection;
use crate::metrics::fitness::KEYS as FITNESS_KEYS;
use crate::metrics::{Collector, ResultsWriter};
use crate::workload::Workload;

/// What `[output]` resolved to.
pub(super) struct CheckedOutput {
    /// A decision trace is written.
    trace: bool,
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
    Some(CheckedOutput { trace })
}

impl CheckedOutput {
    /// The metrics collector, with the results file and the trace opened
    /// when `open_outputs` (not for `blis validate`).
    pub(super) fn create(
        self,
        out: &OutputSection,
        base_dir: &Path,
        open_outputs: bool,
        instances: usize,
        workload: &Workload,
    ) -> Result<(Collector, Option<TraceWriter>), String> {
        let mut collector = Collector::new(
            instances,
            workload.tenant_names().to_vec(),
            workload.client_names().to_vec(),
        );
        let mut trace = None;
        if open_outputs {
            if let Some(p) = &out.results_path {
                let p = resolve(base_dir, p);
                let f = File::create(&p)
                    .map_err(|e| format!("cannot create results file {}: {e}", p.display()))?;
                collector.results = Some(ResultsWriter::new(Box::new(BufWriter::new(f))));
            }
            if self.trace {
                let p = resolve(base_dir, out.trace_path.as_ref().expect("checked"));
                let f = File::create(&p)
                    .map_err(|e| format!("cannot create trace file {}: {e}", p.display()))?;
                trace = Some(TraceWriter::new(
                    Box::new(BufWriter::new(f)),
                    out.counterfactual_k.unwrap_or(3) as usize,
                ));
            }
        }
        Ok((collector, trace))
    }
}

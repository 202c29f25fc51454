//! `[workload]`: the request stream, and whether the run ends.

use std::path::Path;

use super::Problems;
use crate::config::RunFile;
use crate::workload::Workload;

pub(super) fn check(run: &RunFile, base_dir: &Path, problems: &mut Problems) -> Option<Workload> {
    match Workload::new(&run.workload, run.seed, base_dir) {
        Ok(mut w) => {
            w.set_horizon(run.horizon_us);
            if w.planned_requests().is_none() && run.horizon_us.is_none() {
                problems
                    .error("the workload is unbounded: set workload.num_requests or horizon_us");
            }
            if let (Some(stages), Some((name, _))) = (w.client_stages(), w.client_model()) {
                problems.note(format!(
                    "inference_perf: driven by {name} as it runs (open loop, stages drained one after the other, a {} s request timeout): {stages} stage(s), {} system prompt(s), {} requests; the client's own metrics in the report's `client`",
                    w.client_timeout_us().unwrap_or(0) as f64 / 1e6,
                    w.tenant_names().len(),
                    w.planned_requests().unwrap_or(0)
                ));
            }
            if !w.stages().is_empty() {
                problems.note(format!(
                    "inference_perf: {} stage(s), {} user(s), at most {} requests; per-stage results in the report's `stages`",
                    w.stages().len(),
                    w.client_names().len(),
                    w.planned_requests().unwrap_or(0)
                ));
            }
            Some(w)
        }
        Err(e) => {
            problems.error(format!("[workload]: {e}"));
            None
        }
    }
}

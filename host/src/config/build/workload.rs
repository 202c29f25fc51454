//! `[workload]`: the request stream, and whether the run ends.

use std::path::Path;

use super::Problems;
use crate::config::RunFile;
use crate::workload::Workload;

pub(super) fn check(run: &RunFile, base_dir: &Path, problems: &mut Problems) -> Option<Workload> {
    match Workload::new(&run.workload, run.seed, base_dir) {
        Ok(w) => {
            if w.planned_requests().is_none() && run.horizon_us.is_none() {
                problems
                    .error("the workload is unbounded: set workload.num_requests or horizon_us");
            }
            Some(w)
        }
        Err(e) => {
            problems.error(format!("[workload]: {e}"));
            None
        }
    }
}

//! The models a run serves, checked against the models its requests name
//! (`workload.clients[*].model`, a trace's `model` column).

use super::Problems;
use crate::config::RunFile;
use crate::workload::Workload;

/// The models the run's instances serve, in first-mention order.
pub(super) fn served(run: &RunFile) -> Vec<String> {
    vec![run.model.name.clone()]
}

/// Check every client's `model` against the served models.
pub(super) fn check(run: &RunFile, workload: Option<&Workload>, problems: &mut Problems) {
    let Some(_w) = workload else {
        return;
    };
    let served = served(run);
    let clients = run.workload.clients.as_deref().unwrap_or(&[]);
    for (i, c) in clients.iter().enumerate() {
        if let Some(m) = &c.model {
            if !served.contains(m) {
                problems.error(format!(
                    "workload.clients[{i}].model = \"{m}\": no instance serves that model (served: {}); \
                     name a served model or leave model out (the default is [model].name)",
                    served.join(", ")
                ));
            }
        }
    }
}

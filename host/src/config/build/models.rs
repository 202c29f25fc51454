//! The models a run serves (`[model].name`, or the models of its `serve`
//! pools), checked against the models its requests name
//! (`workload.clients[*].model`, a trace's `model` column, adapters'
//! `base_model`), and the model filter and per-model records of a run
//! serving several.

use super::Problems;
use crate::cluster::ModelFilter;
use crate::config::RunFile;
use crate::metrics::models::ModelRecorder;
use crate::workload::Workload;

/// True when the run's pools are `serve` pools (several models possible).
pub(super) fn multi(run: &RunFile) -> bool {
    run.pools.iter().any(|p| p.role == "serve")
}

/// The models the run's instances serve, in first-mention order.
pub(super) fn served(run: &RunFile) -> Vec<String> {
    if !multi(run) {
        return vec![run.model.name.clone()];
    }
    let mut v: Vec<String> = Vec::new();
    for p in &run.pools {
        let name = match p.model.get("name").and_then(|n| n.as_str()) {
            Some(n) => n.to_string(),
            None => run.model.name.clone(),
        };
        if !v.contains(&name) {
            v.push(name);
        }
    }
    v
}

/// Check every client's `model` (and, with serve pools, a trace's `model`
/// column) against the served models.
pub(super) fn check(run: &RunFile, workload: Option<&Workload>, problems: &mut Problems) {
    let Some(w) = workload else {
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
    // A one-model run serves every trace row, whatever its model column
    // says (as the reference's replay does); several models route by it.
    if let (true, Some(t)) = (multi(run), &run.workload.trace_v2) {
        for m in w.model_names() {
            if !served.contains(m) {
                problems.error(format!(
                    "{} (column model) = \"{m}\": no pool serves that model (served: {}); \
                     add a pool with model.name = \"{m}\" or drop those rows",
                    t.data,
                    served.join(", ")
                ));
            }
        }
    }
}

/// The model filter and the collector's records of a run with serve
/// pools: fleet models `names` (0 is `[model].name`), `of_instance` the
/// model of each instance.
pub(super) fn create(
    names: Vec<String>,
    of_instance: Vec<u32>,
    workload: &Workload,
) -> (ModelFilter, ModelRecorder) {
    let of_request: Vec<u32> = workload
        .model_names()
        .iter()
        .map(|m| {
            names
                .iter()
                .position(|n| n == m)
                .map_or(u32::MAX, |k| k as u32)
        })
        .collect();
    let filter = ModelFilter::new(names.len(), &of_instance, of_request.clone(), 0);
    let rec = ModelRecorder::new(names, of_instance, of_request, 0);
    (filter, rec)
}

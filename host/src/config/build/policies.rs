//! `[admission]`, `[routing]` and `[[plugins]]`: which policies decide, and
//! from which libraries they come.

use std::path::Path;

use super::{derive_seed, resolve, Problems};
use crate::cluster::Admission;
use crate::cluster::Routing;
use crate::config::{RoutingSection, RunFile};
use crate::plugins::{ObserverPolicy, Registry};

/// The scorer profile of `policy = "weighted"` when none is given.
const DEFAULT_PROFILE: [(&str, f64); 3] = [
    ("prefix-affinity", 3.0),
    ("queue-depth", 2.0),
    ("kv-utilization", 2.0),
];

/// What `[routing]` resolved to: a router plugin, weighted scorers
/// (name, weight, params), or a scheduling profile (`pipeline`).
pub(super) enum RoutingPlan {
    Router,
    Weighted(Vec<(String, f64, toml::Table)>),
    Pipeline,
}

pub(super) fn check(run: &RunFile, problems: &mut Problems) -> RoutingPlan {
    for e in crate::config::bounds::check_delays(run) {
        problems.error(e);
    }
    let plan = check_routing(&run.routing, problems);
    match plan {
        RoutingPlan::Weighted(scorers) if run.lora.is_none() => {
            RoutingPlan::Weighted(without_lora_affinity(scorers, problems))
        }
        plan => plan,
    }
}

/// A run without `[lora]` has no adapters: `lora-affinity` scores every
/// instance alike (every request is a base-model request), so it moves no
/// decision and is left out, with a note — as llm-d runs its configs that
/// name `lora-affinity-scorer` on a fleet without adapters. Alone (or with
/// only zero weights beside it) it stays, and the run is refused.
fn without_lora_affinity(
    scorers: Vec<(String, f64, toml::Table)>,
    problems: &mut Problems,
) -> Vec<(String, f64, toml::Table)> {
    if !scorers.iter().any(|(n, _, _)| n == LORA_AFFINITY) {
        return scorers;
    }
    let rest: Vec<_> = scorers
        .iter()
        .filter(|(n, _, _)| n != LORA_AFFINITY)
        .cloned()
        .collect();
    if !rest.iter().any(|(_, w, _)| *w > 0.0) {
        return scorers;
    }
    problems.note(format!(
        "routing.scorers: '{LORA_AFFINITY}' is left out: the run has no [lora] section, so no request names an adapter and it would score every instance alike (the run is the run without it)"
    ));
    rest
}

/// Check one routing section (`[routing]`, or a P/D stage's).
pub(super) fn check_routing(routing: &RoutingSection, problems: &mut Problems) -> RoutingPlan {
    for e in super::routing_profiles::check(routing) {
        problems.error(e);
    }
    match routing.tie_break.as_deref() {
        None | Some("lowest-index") => {}
        Some("random") if routing.policy == "weighted" => {}
        Some("random") => problems.error(format!(
            "routing.tie_break = \"random\" is given but routing.policy = \"{}\"; it is used only by policy = \"weighted\" (a profile's picker has its own tie_break)",
            routing.policy
        )),
        Some(other) => problems.error(super::one_of(
            "routing.tie_break",
            other,
            &["lowest-index", "random"],
        )),
    }
    if routing.policy == "pipeline" {
        return RoutingPlan::Pipeline;
    }
    if routing.policy != "weighted" {
        if !routing.scorers.is_empty() {
            problems.error(format!(
                "routing.scorers is given but routing.policy = \"{}\"; scorers are used only by policy = \"weighted\"",
                routing.policy
            ));
        }
        return RoutingPlan::Router;
    }
    if !routing.params.is_empty() {
        problems.error("routing.params is given but routing.policy = \"weighted\"; give each scorer its own params in [[routing.scorers]]");
    }
    let scorers: Vec<(String, f64, toml::Table)> = if routing.scorers.is_empty() {
        DEFAULT_PROFILE
            .iter()
            .map(|(n, w)| (n.to_string(), *w, toml::Table::new()))
            .collect()
    } else {
        routing
            .scorers
            .iter()
            .map(|s| (s.name.clone(), s.weight, s.params.clone()))
            .collect()
    };
    for (name, w, _) in &scorers {
        if !(w.is_finite() && *w >= 0.0) {
            problems.error(format!(
                "routing.scorers: weight {w} of '{name}' must be a finite number ≥ 0"
            ));
        }
    }
    if scorers.iter().all(|(_, w, _)| *w == 0.0) {
        problems.error(
            "routing.scorers: all weights are zero; give at least one scorer a positive weight",
        );
    }
    RoutingPlan::Weighted(scorers)
}

/// The standard LoRA-affinity scorer (it reads the host's LoRA queries,
/// which a run without `[lora]` leaves empty).
pub(super) const LORA_AFFINITY: &str = "lora-affinity";

impl RoutingPlan {
    /// Whether the weighted policy names `lora-affinity`.
    fn uses_lora_affinity(&self) -> bool {
        matches!(self, RoutingPlan::Weighted(s) if s.iter().any(|(n, _, _)| n == LORA_AFFINITY))
    }
}

/// A policy's params table as the TOML text handed to the plugin.
pub(super) fn params_text(t: &toml::Table) -> String {
    if t.is_empty() {
        String::new()
    } else {
        toml::to_string(t).unwrap_or_default()
    }
}

impl RoutingPlan {
    /// Load the plugin libraries, then create the admission policy and the
    /// routing (each policy with its own seed derived from the run seed).
    pub(super) fn create(
        self,
        run: &RunFile,
        base_dir: &Path,
        registry: &mut Registry,
    ) -> Result<(Admission, Routing), String> {
        for p in &run.plugins {
            let path = resolve(base_dir, &p.path);
            let limits = crate::plugins::WasmLimitsSpec {
                fuel_per_call: p.fuel_per_call,
                max_memory_mib: p.max_memory_mib,
            };
            registry
                .load_with(&path, Some(limits))
                .map_err(|e| e.to_string())?;
        }
        let admission = registry
            .admission(
                &run.admission.policy,
                &params_text(&run.admission.params),
                derive_seed(run.seed, "admission"),
            )
            .map_err(|e| e.to_string())?;
        let mut then = Vec::new();
        for (i, step) in run.admission.then.iter().enumerate() {
            then.push(
                registry
                    .admission(
                        &step.policy,
                        &params_text(&step.params),
                        derive_seed(run.seed, &format!("admission/then/{i}/{}", step.policy)),
                    )
                    .map_err(|e| format!("admission.then[{i}]: {e}"))?,
            );
        }
        let admission = Admission::new(admission, then);
        if run.lora.is_none() && self.uses_lora_affinity() {
            return Err(format!(
                "routing.scorers: '{LORA_AFFINITY}' scores LoRA adapter residency, but the run file has no [lora] section; \
                 declare the adapters in [lora] or remove the scorer"
            ));
        }
        let clients = run.workload.clients.as_deref().unwrap_or(&[]);
        let routing = self.create_routing(&run.routing, run.seed, registry, Some(clients))?;
        Ok((admission, routing))
    }

    /// Create the routing of `section` (libraries already loaded), its
    /// policies seeded from `seed`; `clients`: the workload's clients, or
    /// `None` for a P/D stage (see `routing_profiles::create`).
    pub(super) fn create_routing(
        self,
        section: &RoutingSection,
        seed: u64,
        registry: &mut Registry,
        clients: Option<&[crate::workload::ClientSpec]>,
    ) -> Result<Routing, String> {
        Ok(match self {
            RoutingPlan::Weighted(scorers) => {
                let mut v = Vec::new();
                for (i, (name, w, params)) in scorers.iter().enumerate() {
                    let s = registry
                        .scorer(
                            name,
                            &params_text(params),
                            derive_seed(seed, &format!("scorer/{i}/{name}")),
                        )
                        .map_err(|e| e.to_string())?;
                    v.push((s, *w));
                }
                let tie = (section.tie_break.as_deref() == Some("random"))
                    .then(|| blis_plugin_api::Rng::new(derive_seed(seed, "routing/tie_break")));
                Routing::weighted(v, tie)
            }
            RoutingPlan::Pipeline => {
                super::routing_profiles::create(section, registry, seed, clients)?
            }
            RoutingPlan::Router => Routing::Single(
                registry
                    .router(
                        &section.policy,
                        &params_text(&section.params),
                        derive_seed(seed, "routing"),
                    )
                    .map_err(|e| e.to_string())?,
            ),
        })
    }
}

/// Create the observers of `[[observers]]` (libraries already loaded), each
/// seeded from the run seed and its position.
pub(super) fn create_observers(
    run: &RunFile,
    registry: &Registry,
) -> Result<Vec<ObserverPolicy>, String> {
    run.observers
        .iter()
        .enumerate()
        .map(|(i, o)| {
            registry
                .observer(
                    &o.name,
                    &params_text(&o.params),
                    derive_seed(run.seed, &format!("observer/{i}/{}", o.name)),
                )
                .map_err(|e| format!("observers[{i}]: {e}"))
        })
        .collect()
}

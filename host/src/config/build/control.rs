//! `[[node_pools]]`, `[lifecycle]` and `[autoscaler]`: the control plane
//! (see `crate::control`). None of them → no control plane, the fixed fleet
//! of `[instance]`, exactly as before.

use super::model::CheckedModel;
use super::policies::params_text;
use super::{derive_seed, one_of, Problems};
use crate::config::RunFile;
use crate::control::{
    ControlSetup, Delay, DrainPolicy, InstanceFactory, Lifecycle, NodeFleet, PoolSpec, Scaler,
    ScalingStats, Windows,
};
use crate::instance::{Instance, PreemptionKind, SchedulerKind};
use crate::plugins::Registry;

/// Largest scaling interval or stabilization window (about 31 years), so
/// times built from them stay far from overflow.
const MAX_WINDOW_US: i64 = 1 << 50;

/// What the control sections resolved to.
pub(super) struct CheckedControl {
    lifecycle: Lifecycle,
    pools: Vec<PoolSpec>,
    tp: u32,
    /// `[autoscaler]`'s bounds per scaling group: one for a single fleet,
    /// one per serve pool (empty without an autoscaler).
    bounds: Vec<(u32, Option<u32>)>,
}

/// Check the control sections; `None` when the run has none.
pub(super) fn check(
    run: &RunFile,
    model: Option<&CheckedModel>,
    problems: &mut Problems,
) -> Option<CheckedControl> {
    if run.node_pools.is_empty() && run.lifecycle.is_none() && run.autoscaler.is_none() {
        return None;
    }
    let serve = super::models::multi(run);
    if !run.pools.is_empty() && !serve {
        problems.error(
            "[[pools]] of prefill/decode disaggregation with [[node_pools]], [lifecycle] or [autoscaler] \
             is not supported yet: the control plane scales one fleet, or each serve pool on its own; \
             remove one of them",
        );
        return None;
    }
    if serve && !run.node_pools.is_empty() {
        problems.error(
            "[[node_pools]] with serve pools is not supported yet: node pools hold one GPU type and one \
             TP, serve pools each their own; remove [[node_pools]] (each serve pool is then scaled \
             without node accounting, within its min_instances and max_instances)",
        );
        return None;
    }
    let tp = model.map_or(1, |m| m.latency.tp.max(1));
    let pools = check_node_pools(run, model, tp, problems);
    let lc = run.lifecycle.clone().unwrap_or_default();
    let drain = DrainPolicy::parse(&lc.drain_policy).unwrap_or_else(|| {
        problems.error(one_of(
            "lifecycle.drain_policy",
            &lc.drain_policy,
            &DrainPolicy::NAMES,
        ));
        DrainPolicy::Wait
    });
    let loading = Delay::from(lc.loading_delay);
    if let Some(e) = loading.check("lifecycle.loading_delay") {
        problems.error(e);
    }
    let bounds = match &run.autoscaler {
        Some(a) => check_autoscaler(run, a, serve, problems),
        None => Vec::new(),
    };
    Some(CheckedControl {
        lifecycle: Lifecycle {
            loading_delay: loading,
            warm_start_initial_instances: lc.warm_start_initial_instances,
            warm_up_request_count: lc.warm_up_request_count,
            drain_policy: drain,
        },
        pools,
        tp,
        bounds,
    })
}

/// `[[node_pools]]`: each pool's keys, and the initial instances fit on
/// the initial nodes.
fn check_node_pools(
    run: &RunFile,
    model: Option<&CheckedModel>,
    tp: u32,
    problems: &mut Problems,
) -> Vec<PoolSpec> {
    let gpu = model.and_then(|m| m.latency.gpu.clone());
    let mut pools = Vec::new();
    let mut fits_some = false;
    let mut initial_slots: u64 = 0;
    for (k, p) in run.node_pools.iter().enumerate() {
        let key = format!("node_pools[{k}]");
        if p.name.trim().is_empty() {
            problems.error(format!("{key}.name is empty: give the pool a name"));
        }
        if run.node_pools[..k].iter().any(|q| q.name == p.name) {
            problems.error(format!(
                "{key}.name = \"{}\": another pool has this name; pool names must be unique",
                p.name
            ));
        }
        match &gpu {
            _ if p.gpu_type.trim().is_empty() => {
                problems.error(format!("{key}.gpu_type is empty: give the nodes' GPU type"))
            }
            Some(g) if !g.eq_ignore_ascii_case(&p.gpu_type) => problems.error(format!(
                "{key}.gpu_type = \"{}\" differs from [model].hardware = \"{g}\": blis fleets are \
                 homogeneous, so every pool must carry the model's GPU",
                p.gpu_type
            )),
            _ => {}
        }
        if p.gpus_per_node == 0 {
            problems.error(format!("{key}.gpus_per_node = 0: must be at least 1"));
        }
        if p.min_nodes > p.max_nodes {
            problems.error(format!(
                "{key}.min_nodes = {} > {key}.max_nodes = {}: min_nodes must not exceed max_nodes",
                p.min_nodes, p.max_nodes
            ));
        }
        if p.initial_nodes > p.max_nodes {
            problems.error(format!(
                "{key}.initial_nodes = {} > {key}.max_nodes = {}: raise max_nodes",
                p.initial_nodes, p.max_nodes
            ));
        }
        if p.max_nodes > 100_000 {
            problems.error(format!("{key}.max_nodes = {}: at most 100000", p.max_nodes));
        }
        if !(p.cost_per_hour.is_finite() && p.cost_per_hour >= 0.0) {
            problems.error(format!(
                "{key}.cost_per_hour = {}: must be a finite number of dollars ≥ 0",
                p.cost_per_hour
            ));
        }
        let delay = Delay::from(p.provisioning_delay);
        if let Some(e) = delay.check(&format!("{key}.provisioning_delay")) {
            problems.error(e);
        }
        if p.gpus_per_node >= tp {
            fits_some = true;
            initial_slots += u64::from(p.initial_nodes) * u64::from(p.gpus_per_node / tp);
        }
        pools.push(PoolSpec {
            name: p.name.clone(),
            gpu_type: p.gpu_type.clone(),
            gpus_per_node: p.gpus_per_node,
            initial_nodes: p.initial_nodes,
            min_nodes: p.min_nodes,
            max_nodes: p.max_nodes,
            provisioning_delay: delay,
            cost_per_hour: p.cost_per_hour,
        });
    }
    if !run.node_pools.is_empty() {
        if !fits_some {
            problems.error(format!(
                "an instance needs {tp} GPUs on one node ([model].tp = {tp}), but no pool has that many \
                 (node_pools[*].gpus_per_node): it fits no node; raise gpus_per_node or lower tp"
            ));
        } else if u64::from(run.instance.count) > initial_slots {
            problems.error(format!(
                "instance.count = {} instances of {tp} GPUs do not fit on the initial nodes \
                 (room for {initial_slots}): raise node_pools[*].initial_nodes or lower instance.count",
                run.instance.count
            ));
        }
    }
    pools
}

/// `[autoscaler]`'s keys; its bounds per scaling group.
fn check_autoscaler(
    run: &RunFile,
    a: &crate::config::AutoscalerSection,
    serve: bool,
    problems: &mut Problems,
) -> Vec<(u32, Option<u32>)> {
    if !(1..=MAX_WINDOW_US).contains(&a.interval_us) {
        problems.error(format!(
            "autoscaler.interval_us = {}: must be in [1, {MAX_WINDOW_US}] µs (e.g. 30000000 for 30 s)",
            a.interval_us
        ));
    }
    for (k, v) in [
        (
            "autoscaler.scale_up_stabilization_window_us",
            a.scale_up_stabilization_window_us,
        ),
        (
            "autoscaler.scale_down_stabilization_window_us",
            a.scale_down_stabilization_window_us,
        ),
    ] {
        if !(0..=MAX_WINDOW_US).contains(&v) {
            problems.error(format!("{k} = {v}: must be in [0, {MAX_WINDOW_US}] µs"));
        }
    }
    if let Some(e) = Delay::from(a.hpa_scrape_delay).check("autoscaler.hpa_scrape_delay") {
        problems.error(e);
    }
    if a.min_instances == 0 {
        problems.error(
            "autoscaler.min_instances = 0: must be at least 1 (no autoscaler scales up from zero)",
        );
    }
    if serve {
        serve_bounds(run, a, problems)
    } else {
        fleet_bounds(run, a, problems)
    }
}

/// A single fleet's autoscaler bounds, `[autoscaler]`'s; `instance.count`
/// within them.
fn fleet_bounds(
    run: &RunFile,
    a: &crate::config::AutoscalerSection,
    problems: &mut Problems,
) -> Vec<(u32, Option<u32>)> {
    match a.max_instances {
        Some(max) if a.min_instances > max => problems.error(format!(
            "autoscaler.min_instances = {} > autoscaler.max_instances = {max}: min must not exceed max",
            a.min_instances
        )),
        Some(max) if run.instance.count > max => problems.error(format!(
            "instance.count = {} > autoscaler.max_instances = {max}: start within the bounds",
            run.instance.count
        )),
        None if run.node_pools.is_empty() => problems.error(
            "autoscaler.max_instances is required without [[node_pools]] (the nodes' max_nodes bound the fleet otherwise)",
        ),
        _ => {}
    }
    if run.instance.count < a.min_instances {
        problems.error(format!(
            "instance.count = {} < autoscaler.min_instances = {}: start within the bounds",
            run.instance.count, a.min_instances
        ));
    }
    vec![(a.min_instances, a.max_instances)]
}

/// Each serve pool's autoscaler bounds: its own `min_instances` /
/// `max_instances`, else `[autoscaler]`'s; its `instances` within them.
fn serve_bounds(
    run: &RunFile,
    a: &crate::config::AutoscalerSection,
    problems: &mut Problems,
) -> Vec<(u32, Option<u32>)> {
    let mut out = Vec::with_capacity(run.pools.len());
    for (i, p) in run.pools.iter().enumerate() {
        let key = format!("pools[{i}] ({})", p.name);
        let min = p.min_instances.unwrap_or(a.min_instances);
        let max = p.max_instances.or(a.max_instances);
        if p.min_instances == Some(0) {
            problems.error(format!(
                "{key}.min_instances = 0: must be at least 1 (no autoscaler scales up from zero)"
            ));
        }
        match max {
            None => problems.error(format!(
                "{key}: no max_instances: give pools[{i}].max_instances or autoscaler.max_instances \
                 (each serve pool is scaled on its own, within its bounds)"
            )),
            Some(max) if min > max => problems.error(format!(
                "{key}: min_instances = {min} > max_instances = {max} (the pool's, or [autoscaler]'s \
                 where the pool gives none): min must not exceed max"
            )),
            Some(max) if p.instances > max => problems.error(format!(
                "{key}.instances = {} > max_instances = {max}: start within the bounds",
                p.instances
            )),
            _ => {}
        }
        if p.instances < min {
            problems.error(format!(
                "{key}.instances = {} < min_instances = {min}: start within the bounds",
                p.instances
            ));
        }
        out.push((min, max));
    }
    out
}

impl CheckedControl {
    /// Place the initial instances, create the autoscaler plugin (one per
    /// scaling group). `groups`: the serve pools' names and each
    /// instance's pool (`None`: one fleet, one group).
    pub(super) fn create(
        self,
        run: &RunFile,
        registry: &Registry,
        instances: &[Instance],
        groups: Option<(Vec<String>, Vec<u32>)>,
    ) -> Result<ControlSetup, String> {
        let (group_names, group_of) = groups.unwrap_or_default();
        let mut firsts: Vec<Option<&Instance>> = vec![None; group_names.len().max(1)];
        for (i, inst) in instances.iter().enumerate() {
            let g = group_of.get(i).map_or(0, |&g| g as usize);
            firsts[g].get_or_insert(inst);
        }
        let mut factories = Vec::with_capacity(firsts.len());
        for (g, first) in firsts.into_iter().enumerate() {
            let first = first.ok_or("a scaling group without an instance")?;
            if run.autoscaler.is_some()
                && (first.config().scheduler == SchedulerKind::Custom
                    || first.config().preemption == PreemptionKind::Custom)
            {
                let what = group_names
                    .get(g)
                    .map_or("[instance]".to_string(), |n| format!("pool {n}"));
                return Err(format!(
                    "[autoscaler] with a scheduler or preemption plugin in {what} is not supported yet: \
                     instances the autoscaler adds would need their own plugin objects; use a native \
                     scheduler and preemption policy"
                ));
            }
            factories.push(InstanceFactory {
                config: first.config().clone(),
                latency: first.latency_model().clone(),
                lora: first.lora().map(|l| l.config().clone()),
            });
        }
        let mut fleet = (!self.pools.is_empty()).then(|| NodeFleet::new(self.pools, self.tp));
        let mut initial_nodes = Vec::with_capacity(instances.len());
        for _ in instances {
            initial_nodes.push(match fleet.as_mut() {
                None => None,
                Some(f) => Some(f.place().ok_or_else(|| {
                    "the initial instances do not fit on the initial nodes".to_string()
                })?),
            });
        }
        let mut scalers = Vec::new();
        if let Some(a) = &run.autoscaler {
            for (g, &(min_instances, max_instances)) in self.bounds.iter().enumerate() {
                // A single fleet keeps the stream of earlier rounds.
                let (stream, what) = match group_names.get(g) {
                    None => ("autoscaler-policy".to_string(), "[autoscaler]".to_string()),
                    Some(n) => (
                        format!("autoscaler-policy/pool/{n}"),
                        format!("[autoscaler] of pool {n}"),
                    ),
                };
                let policy = registry
                    .autoscaler(
                        &a.policy,
                        &params_text(&a.params),
                        derive_seed(run.seed, &stream),
                    )
                    .map_err(|e| format!("{what}: {e}"))?;
                scalers.push(Scaler {
                    policy,
                    interval: a.interval_us,
                    windows: Windows::new(
                        a.scale_up_stabilization_window_us,
                        a.scale_down_stabilization_window_us,
                    ),
                    scrape_delay: Delay::from(a.hpa_scrape_delay),
                    min_instances,
                    max_instances,
                    stats: ScalingStats::default(),
                });
            }
        }
        Ok(ControlSetup {
            lifecycle: self.lifecycle,
            fleet,
            scalers,
            factories,
            group_names,
            group_of,
            seeds: [
                derive_seed(run.seed, "node-provisioning"),
                derive_seed(run.seed, "instance-loading"),
                derive_seed(run.seed, "autoscaler"),
            ],
            initial_nodes,
        })
    }
}

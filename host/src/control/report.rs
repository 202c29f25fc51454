//! The report's `control` section: every instance's life, the scaling
//! loop's counts, node pools and cost.
//!
//! ```text
//! "control": {"instances": [{"instance":0,"state":"active","node":"h100-0",…}],
//!   "active_instances": 3, "peak_instances": 5, "no_instance_rejections": 0, …,
//!   "autoscaler": {"ticks": 720, "wanted_up": 12, …} | null,
//!   "node_pools": [{"name":"h100","gpu_hours":…,"cost_usd":…}],
//!   "cost": {"gpu_hours":…, "cost_usd":…, "cost_per_million_output_tokens":…} | null}
//! ```

use blis_plugin_api::InstanceState;
use serde_json::{json, Value};

use super::{ControlPlane, ScalingStats};
use crate::engine::Tick;

impl ControlPlane {
    /// The `control` section for a run that ended at `end` with
    /// `output_tokens` generated.
    pub fn report(&self, end: Tick, output_tokens: u64) -> Value {
        let fleet = self.fleet.as_ref();
        let at = |t: Option<Tick>| t.map_or(Value::Null, |t| json!(t));
        let instances: Vec<Value> = self
            .lives
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let mut e = json!({
                    "instance": i,
                    "state": l.state.name(),
                    "node": match (fleet, l.node) {
                        (Some(f), Some(n)) => json!(f.node_name(n)),
                        _ => Value::Null,
                    },
                    "created_us": l.created_at,
                    "routable_us": at(l.routable_at),
                    "draining_us": at(l.draining_at),
                    "terminated_us": at(l.terminated_at),
                });
                if let Some(name) = self.group_names.get(self.group_of[i] as usize) {
                    e["pool"] = json!(name);
                }
                e
            })
            .collect();
        let scaler = self.scalers_report();
        let (pools, cost) = match fleet {
            None => (Value::Null, Value::Null),
            Some(f) => {
                let costs = f.cost(end);
                let mut pools = Vec::new();
                let (mut gh, mut usd) = (0.0, 0.0);
                for (idx, (p, &(g, d))) in f.pools.iter().zip(&costs).enumerate() {
                    let nodes = f.nodes.iter().filter(|n| n.pool == idx as u32);
                    let requested = nodes.clone().count();
                    let released = nodes.filter(|n| n.released_at.is_some()).count();
                    gh += g;
                    usd += d;
                    pools.push(json!({
                        "name": p.name,
                        "gpu_type": p.gpu_type,
                        "nodes_requested": requested,
                        "nodes_released": released,
                        "gpu_hours": g,
                        "cost_usd": d,
                    }));
                }
                let per_m = if output_tokens == 0 {
                    Value::Null
                } else {
                    json!(usd / output_tokens as f64 * 1e6)
                };
                (
                    Value::Array(pools),
                    json!({
                        "gpu_hours": gh,
                        "cost_usd": usd,
                        "cost_per_million_output_tokens": per_m,
                        "peak_nodes": f.peak_nodes,
                        "until_us": end,
                        "nodes_at_end": f.live_nodes(),
                    }),
                )
            }
        };
        json!({
            "instances": instances,
            "active_instances": self.count(InstanceState::ACTIVE),
            "peak_instances": self.peak_instances,
            "no_instance_rejections": self.no_instance,
            "redirected_requests": self.redirected,
            "drain_dropped_requests": self.drain_dropped,
            "autoscaler": scaler,
            "node_pools": pools,
            "cost": cost,
        })
    }

    /// The `autoscaler` entry: null without one; one fleet's counts; with
    /// serve pools the counts summed, and each pool's under `pools`.
    fn scalers_report(&self) -> Value {
        let Some(first) = self.scalers.first() else {
            return Value::Null;
        };
        let counts = |st: &ScalingStats| {
            json!({
                "ticks": st.ticks,
                "wanted_up": st.wanted_up,
                "wanted_down": st.wanted_down,
                "suppressed": st.suppressed,
                "actuations": st.actuations,
                "instances_added": st.instances_added,
                "instances_removed": st.instances_removed,
                "unplaced_instances": st.unplaced,
            })
        };
        let label = first.policy.label();
        let mut total = ScalingStats::default();
        for s in &self.scalers {
            total.add(&s.stats);
        }
        let mut out = json!({"policy": format!("{}::{}", label.library, label.name)});
        let map = out.as_object_mut().expect("object");
        if let Value::Object(c) = counts(&total) {
            map.extend(c);
        }
        if !self.group_names.is_empty() {
            let pools: Vec<Value> = self
                .scalers
                .iter()
                .zip(&self.group_names)
                .enumerate()
                .map(|(g, (s, name))| {
                    let mut e = json!({
                        "pool": name,
                        "min_instances": s.min_instances,
                        "max_instances": s.max_instances,
                        "live_instances": self.live_in(g as u32),
                    });
                    if let (Value::Object(m), Value::Object(c)) = (&mut e, counts(&s.stats)) {
                        m.extend(c);
                    }
                    e
                })
                .collect();
            map.insert("pools".into(), Value::Array(pools));
        }
        out
    }
}

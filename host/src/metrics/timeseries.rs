//! The time series (`output.timeseries_path`): one JSON line per interval
//! of simulated time with the cluster's state at the interval's end.
//!
//! ```text
//! {"time_us":1000000,"arrived":38,"completed":31,"arrival_rate":38.0,"completion_rate":31.0,
//!  "active_instances":4,"nodes":null,
//!  "instances":[{"instance":0,"state":"active","queue_depth":2,"batch_size":7,"kv_utilization":0.12,"free_kv_blocks":…},…]}
//! ```
//!
//! Sampling observes and never schedules: the cluster loop calls
//! [`TimeSeries::sample`] before it executes an event past the next
//! boundary, so the state written for boundary `b` is the state after every
//! event at time ≤ `b`, and the event order (hence the report) is the same
//! with or without a time series. With `[flow_control]`, a line also has
//! `gateway_queue_depth` (requests waiting in the gateway queue). A line is a JSON object; later features
//! add keys (readers must ignore keys they do not know).

use std::io::Write;

use serde_json::{json, Map, Value};

use crate::control::ControlPlane;
use crate::engine::Tick;
use crate::instance::Instance;

/// Cluster-wide counters at a boundary.
pub struct ClusterCounts {
    pub arrived: u64,
    pub completed: u64,
    /// Requests in the gateway queue (`[flow_control]` only).
    pub gateway_depth: Option<u64>,
}

/// The writer and the next boundary.
pub struct TimeSeries {
    out: Box<dyn Write>,
    interval: Tick,
    /// The next boundary to write.
    pub next_at: Tick,
    last: ClusterCounts,
    /// The first write error (the run goes on; the CLI reports it).
    pub error: Option<std::io::Error>,
}

impl TimeSeries {
    /// A time series every `interval` µs (> 0) into `out`.
    pub fn new(out: Box<dyn Write>, interval: Tick) -> TimeSeries {
        TimeSeries {
            out,
            interval,
            next_at: interval,
            last: ClusterCounts {
                arrived: 0,
                completed: 0,
                gateway_depth: None,
            },
            error: None,
        }
    }

    /// Write every boundary `< t` (all events at or before it have run).
    pub fn sample(
        &mut self,
        t: Tick,
        instances: &[Instance],
        counts: ClusterCounts,
        control: Option<&ControlPlane>,
    ) {
        let per_s = 1e6 / self.interval as f64;
        while self.next_at < t {
            let insts: Vec<Value> = instances
                .iter()
                .map(|i| {
                    let state =
                        control.map_or("active", |c| c.lives[i.index() as usize].state.name());
                    json!({
                        "instance": i.index(),
                        "state": state,
                        "queue_depth": i.queue_depth(),
                        "batch_size": i.batch_size(),
                        "kv_utilization": i.kv_utilization(),
                        "free_kv_blocks": i.free_kv_blocks(),
                    })
                })
                .collect();
            let mut m = Map::new();
            m.insert("time_us".into(), json!(self.next_at));
            m.insert("arrived".into(), json!(counts.arrived));
            m.insert("completed".into(), json!(counts.completed));
            m.insert(
                "arrival_rate".into(),
                json!((counts.arrived - self.last.arrived) as f64 * per_s),
            );
            m.insert(
                "completion_rate".into(),
                json!((counts.completed - self.last.completed) as f64 * per_s),
            );
            m.insert(
                "active_instances".into(),
                json!(control.map_or(instances.len(), |c| c.routable.len())),
            );
            m.insert(
                "nodes".into(),
                control
                    .and_then(|c| c.fleet.as_ref())
                    .map_or(Value::Null, |f| json!(f.live_nodes())),
            );
            if let Some(d) = counts.gateway_depth {
                m.insert("gateway_queue_depth".into(), json!(d));
            }
            m.insert("instances".into(), Value::Array(insts));
            self.last = ClusterCounts {
                arrived: counts.arrived,
                completed: counts.completed,
                gateway_depth: counts.gateway_depth,
            };
            if self.error.is_none() {
                if let Err(e) = writeln!(self.out, "{}", Value::Object(m)) {
                    self.error = Some(e);
                }
            }
            self.next_at += self.interval;
        }
    }

    /// Write the boundaries up to and including `end`, then flush.
    pub fn finish(
        &mut self,
        end: Tick,
        instances: &[Instance],
        counts: ClusterCounts,
        control: Option<&ControlPlane>,
    ) {
        self.sample(end.saturating_add(1), instances, counts, control);
        if self.error.is_none() {
            if let Err(e) = self.out.flush() {
                self.error = Some(e);
            }
        }
    }
}

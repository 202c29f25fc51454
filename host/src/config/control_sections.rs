//! The control-plane sections of the run file: `[[node_pools]]`,
//! `[lifecycle]` and `[autoscaler]` (checked and assembled by
//! `build::control`). Absent, the cluster is exactly the fixed fleet of
//! `[instance]`.

use serde::{Deserialize, Serialize};

/// A random delay in **seconds** (the reference's `{mean, stddev}`): the
/// sample is `max(0, N(0,1)·stddev + mean)`, or `mean` when `stddev` is 0,
/// truncated to whole µs.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DelaySection {
    /// Mean, seconds (≥ 0).
    #[serde(default)]
    pub mean: f64,
    /// Standard deviation, seconds (≥ 0).
    #[serde(default)]
    pub stddev: f64,
}

/// `[[node_pools]]`: one pool of identical GPU nodes.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodePoolSection {
    /// Pool name (unique, non-empty); nodes are `<name>-<k>`.
    pub name: String,
    /// GPU type of every node; must be the model's GPU (`[model].hardware`).
    pub gpu_type: String,
    /// GPUs per node (≥ 1).
    pub gpus_per_node: u32,
    /// Nodes Ready at time 0.
    #[serde(default)]
    pub initial_nodes: u32,
    /// Nodes never released below this.
    #[serde(default)]
    pub min_nodes: u32,
    /// Nodes never provisioned above this (≥ initial_nodes, ≥ min_nodes).
    pub max_nodes: u32,
    /// Time from a node's request to Ready, seconds.
    #[serde(default)]
    pub provisioning_delay: DelaySection,
    /// Price of one node per hour, dollars (≥ 0).
    #[serde(default)]
    pub cost_per_hour: f64,
}

/// `[lifecycle]`: how instances start and stop.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleSection {
    /// Model loading time of a new instance, seconds.
    #[serde(default)]
    pub loading_delay: DelaySection,
    /// The `[instance].count` instances of time 0 skip loading (default true).
    #[serde(default = "yes")]
    pub warm_start_initial_instances: bool,
    /// Requests an instance serves as `warming_up` before it is `active`.
    #[serde(default)]
    pub warm_up_request_count: u32,
    /// What a draining instance does with its wait queue: `wait` (serve
    /// it, default), `immediate` (drop it), `redirect` (route it again).
    #[serde(default = "d_drain")]
    pub drain_policy: String,
}

fn yes() -> bool {
    true
}
fn d_drain() -> String {
    "wait".to_string()
}

impl Default for LifecycleSection {
    fn default() -> Self {
        LifecycleSection {
            loading_delay: DelaySection::default(),
            warm_start_initial_instances: true,
            warm_up_request_count: 0,
            drain_policy: d_drain(),
        }
    }
}

/// `[autoscaler]`: the scaling loop.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AutoscalerSection {
    /// Time between scaling ticks, µs (> 0).
    pub interval_us: i64,
    /// A scale-up must be wanted this long before it happens, µs.
    #[serde(default)]
    pub scale_up_stabilization_window_us: i64,
    /// A scale-down must be wanted this long before it happens, µs.
    #[serde(default)]
    pub scale_down_stabilization_window_us: i64,
    /// Delay from a decision to its actuation (the HPA's metric scrape), seconds.
    #[serde(default)]
    pub hpa_scrape_delay: DelaySection,
    /// Fewest instances the autoscaler keeps (default 1).
    #[serde(default = "one")]
    pub min_instances: u32,
    /// Most instances the autoscaler runs (required without `[[node_pools]]`).
    #[serde(default)]
    pub max_instances: Option<u32>,
    /// The decision: an autoscaler plugin, `name` or `library::name`
    /// (default `kv-saturation`).
    #[serde(default = "d_policy")]
    pub policy: String,
    /// Parameters handed to the plugin.
    #[serde(default)]
    pub params: toml::Table,
}

fn one() -> u32 {
    1
}
fn d_policy() -> String {
    "kv-saturation".to_string()
}

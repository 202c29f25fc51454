//! Run-file sections of the control plane's traffic side: `[slo]` (targets
//! per class, goodput), `[saturation]` (post-hoc saturation verdicts),
//! `[flow_control]` (the gateway queue) and `[tenants]` (budgets). Each is optional; absent, the run
//! is exactly what it is without the feature.

use serde::{Deserialize, Serialize};

/// `[slo.<class>]`: the targets of one SLO class.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SloTarget {
    /// Time-to-first-token target, ms (absent = no TTFT target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// End-to-end latency target, ms (absent = no E2E target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
}

/// `[slo]`: targets per SLO class; attainment and goodput in the report.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SloSection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critical: Option<SloTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standard: Option<SloTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<SloTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sheddable: Option<SloTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<SloTarget>,
}

impl SloSection {
    /// The targets in `SloClass::ALL` order.
    pub fn by_class(&self) -> [&Option<SloTarget>; 5] {
        [
            &self.critical,
            &self.standard,
            &self.batch,
            &self.sheddable,
            &self.background,
        ]
    }
}

/// `[saturation.threshold]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ThresholdDetectorSection {
    /// Mean E2E latency at and above which the run is overloaded, ms (default 5000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_ms: Option<f64>,
}

/// `[saturation.backlog_drift]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BacklogDriftSection {
    /// Bucket width of the in-flight series, seconds (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_size_sec: Option<f64>,
}

/// `[saturation]`: post-hoc saturation detectors over the run's arrivals
/// and completions; a verdict per detector in the report.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SaturationSection {
    /// Detectors: any of `composite`, `threshold`, `backlog-drift`, or `all`.
    pub detectors: Vec<String>,
    /// The final verdict votes over the records of the last this-many µs
    /// (default: the backlog-drift window when configured, else 30 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_window_us: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<ThresholdDetectorSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog_drift: Option<BacklogDriftSection>,
}

/// `[flow_control]`: a gateway queue between admission and routing, with
/// priority bands, per-tenant flows and saturation-gated dispatch.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FlowControlSection {
    /// `utilization` (default), `concurrency` or `never` (never saturated).
    #[serde(default = "d_detector")]
    pub saturation_detector: String,
    /// `utilization`: queue depth at which an instance counts as full (default 5).
    #[serde(default = "d_queue_depth_threshold")]
    pub queue_depth_threshold: f64,
    /// `utilization`: KV utilisation at which an instance counts as full (default 0.8).
    #[serde(default = "d_kv_threshold")]
    pub kv_cache_util_threshold: f64,
    /// `concurrency`: requests in flight per instance at saturation (default 100).
    #[serde(default = "d_max_concurrency")]
    pub max_concurrency: f64,
    /// `concurrency`: what it counts — `requests` (default), `tokens` (the
    /// router's in-flight uncached prompt tokens, llm-d's EPP counter) or
    /// `hybrid` (per instance the larger of the two ratios).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_mode: Option<String>,
    /// `concurrency` with tokens or hybrid: in-flight tokens per instance at
    /// saturation (default 1,000,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_token_concurrency: Option<f64>,
    /// Saturation ceiling of the lowest band, in (0, 1] (default 1.0: every
    /// band dispatches below saturation 1).
    #[serde(default = "d_usage_limit")]
    pub usage_limit_threshold: f64,
    /// Requests one band may hold (absent = unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_band_capacity: Option<u64>,
    /// Requests the whole queue may hold (absent = unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u64>,
    /// At `max_depth`, shed the lowest-priority sheddable request for a
    /// more important one instead of rejecting the newcomer (default false).
    #[serde(default)]
    pub shedding: bool,
    /// `global-strict` (default: oldest head first), `round-robin` (tenants
    /// in turn) or `program-aware` (least attained service, llm-d's
    /// program-aware-fairness).
    #[serde(default = "d_fairness")]
    pub fairness: String,
    /// One band's own capacity: SLO class → requests its band may hold
    /// (instead of `per_band_capacity`; llm-d's per-band `maxRequests`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub band_capacity: std::collections::BTreeMap<String, u64>,
    /// One band's own fairness: SLO class → `global-strict`, `round-robin`
    /// or `program-aware` (instead of `fairness`; llm-d's per-band
    /// `fairnessPolicyRef`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub band_fairness: std::collections::BTreeMap<String, String>,
    /// `program-aware`: weight of the attained-service term (default 0.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub las_weight_service: Option<f64>,
    /// `program-aware`: weight of the head-wait term (default 0.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub las_weight_head_wait: Option<f64>,
    /// `program-aware`: half-life of attained service, s (default 60; 0 = no decay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub las_half_life_s: Option<f64>,
    /// Band ceilings: `linear` (default: by band rank from
    /// `usage_limit_max` down to `usage_limit_threshold`), `by-priority`
    /// (by the bands' SLO-class priorities between the same two: llm-d's
    /// priority-holdback-policy with domain value), `static` (every band at
    /// `usage_limit_threshold`, llm-d's static-usage-limit-policy) or
    /// `soft-reflective` (llm-d's soft-reflective-ceiling-policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_limit: Option<String>,
    /// `linear` / `by-priority`: the highest band's ceiling, in (0, 1],
    /// above `usage_limit_threshold` (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_limit_max: Option<f64>,
    /// A request still queued this long after it was queued expires, µs
    /// (absent = never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_ttl_us: Option<i64>,
    /// Dispatch attempts while the queue is not empty, µs apart (default 1000).
    #[serde(default = "d_tick")]
    pub dispatch_tick_us: i64,
    /// When saturated with a non-sheddable request waiting, evict a
    /// dispatched sheddable request from its instance (default false).
    #[serde(default)]
    pub in_flight_eviction: bool,
}

fn d_detector() -> String {
    "utilization".to_string()
}
fn d_queue_depth_threshold() -> f64 {
    5.0
}
fn d_kv_threshold() -> f64 {
    0.8
}
fn d_max_concurrency() -> f64 {
    100.0
}
fn d_usage_limit() -> f64 {
    1.0
}
fn d_fairness() -> String {
    "global-strict".to_string()
}
fn d_tick() -> i64 {
    1000
}

/// `[tenants]`: per-tenant shares of the fleet's batch slots.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TenantsSection {
    /// Tenant id → fraction in [0, 1] of instances × `max_num_seqs`.
    pub budgets: std::collections::BTreeMap<String, f64>,
}

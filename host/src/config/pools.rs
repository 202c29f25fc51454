//! The run-file sections of prefill/decode disaggregation: `[[pools]]`
//! (instances with a role, each pool an `[instance]`/`[model]` override)
//! and `[pd]` (the decider, the KV transfer, per-stage routing).

use serde::{Deserialize, Serialize};

use super::RoutingSection;

/// `[[pools]]`: `instances` instances with a role. `model` and `instance`
/// override keys of `[model]` and `[instance]` for this pool only
/// (heterogeneous hardware); every other key is inherited.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSection {
    /// Unique name (used in the report).
    pub name: String,
    /// `prefill`, `decode` or `both`.
    pub role: String,
    /// Number of instances in the pool (≥ 1).
    pub instances: u32,
    /// Keys of `[model]` to override (e.g. `hardware`, `tp`, `latency_model`).
    #[serde(default, skip_serializing_if = "toml::Table::is_empty")]
    pub model: toml::Table,
    /// Keys of `[instance]` to override (e.g. `max_num_batched_tokens`,
    /// `total_kv_blocks`); not `count` (use `instances`).
    #[serde(default, skip_serializing_if = "toml::Table::is_empty")]
    pub instance: toml::Table,
    /// Role `serve` with `[autoscaler]`: this pool's bounds (default
    /// `autoscaler.min_instances` / `max_instances`); each serve pool is
    /// scaled on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_instances: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<u32>,
}

/// `[pd]`: how requests are split between the pools.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PdSection {
    /// `never` (default), `always`, `prefix-threshold`, or the name of a
    /// decider plugin (`name` or `library::name`).
    #[serde(default = "d_never")]
    pub decider: String,
    /// Parameters handed to a decider plugin.
    #[serde(default, skip_serializing_if = "toml::Table::is_empty")]
    pub decider_params: toml::Table,
    /// `prefix-threshold`: disaggregate when more than this many prompt
    /// tokens are not cached on the chosen decode instance (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_threshold: Option<i64>,
    /// `prefix-threshold`: never disaggregate a prompt shorter than this
    /// (llm-d's promptTokens; default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_min_prompt_tokens: Option<i64>,
    /// Per-link KV transfer bandwidth, GB/s (decimal; default 25).
    #[serde(default = "d_bandwidth")]
    pub transfer_bandwidth_gbps: f64,
    /// Fixed latency of every transfer, ms (default 0.05).
    #[serde(default = "d_base_latency")]
    pub transfer_base_latency_ms: f64,
    /// Fair-share contention: a transfer that starts while k − 1 others run
    /// gets bandwidth / k for its whole duration (default false).
    #[serde(default)]
    pub transfer_contention: bool,
    /// KV bytes of one token on one GPU at TP 1 (default: from the model's
    /// config); the transfer divides it by the smaller TP of the two sides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_bytes_per_token: Option<f64>,
    /// Routing of the prefill stage (default: a copy of `[routing]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_routing: Option<RoutingSection>,
    /// Routing of the decode stage (default: a copy of `[routing]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_routing: Option<RoutingSection>,
    /// With an `encode` pool: which requests the encode stage runs for —
    /// `multimodal` (default: those with multimodal input), `always` or
    /// `never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encode_decider: Option<String>,
    /// `encode_decider = "prefix-threshold"`: encode when more than this
    /// many prompt tokens are not cached on the decode instance (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encode_prefix_threshold: Option<i64>,
    /// `encode_decider = "prefix-threshold"`: never encode a prompt shorter
    /// than this (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encode_prefix_min_prompt_tokens: Option<i64>,
    /// Routing of the encode stage (default: a copy of `[routing]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encode_routing: Option<RoutingSection>,
}

fn d_never() -> String {
    "never".to_string()
}
fn d_bandwidth() -> f64 {
    25.0
}
fn d_base_latency() -> f64 {
    0.05
}

impl Default for PdSection {
    fn default() -> Self {
        PdSection {
            decider: d_never(),
            decider_params: toml::Table::new(),
            prefix_threshold: None,
            prefix_min_prompt_tokens: None,
            transfer_bandwidth_gbps: d_bandwidth(),
            transfer_base_latency_ms: d_base_latency(),
            transfer_contention: false,
            kv_bytes_per_token: None,
            prefill_routing: None,
            decode_routing: None,
            encode_decider: None,
            encode_prefix_threshold: None,
            encode_prefix_min_prompt_tokens: None,
            encode_routing: None,
        }
    }
}

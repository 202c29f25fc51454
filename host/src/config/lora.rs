//! The run-file section of LoRA adapters: `[lora]` (`cluster-head.md` §5.5).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[lora]`: the adapters the cluster serves and what loading and running
/// them costs. Absent = no adapters (nothing is reserved or checked).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LoraSection {
    /// `[[lora.adapters]]`: every adapter requests may name.
    #[serde(default)]
    pub adapters: Vec<AdapterSection>,
    /// Resident adapter slots per instance (default 1, vLLM's `max_loras`).
    #[serde(default = "d_capacity")]
    pub adapter_capacity: u32,
    /// Fixed part of a cold load, µs (default 1000).
    #[serde(default = "d_base_latency")]
    pub load_base_latency_us: f64,
    /// Load bandwidth host → GPU, bytes per µs (default 25000 = 25 GB/s).
    #[serde(default = "d_bandwidth")]
    pub load_bandwidth_bytes_us: f64,
    /// Adapter bytes per unit of rank (default 5242880 = 5 MiB, about an
    /// all-linear-layers adapter of an 8B model).
    #[serde(default = "d_footprint")]
    pub footprint_bytes_per_rank: u64,
    /// Step overhead per rank tier: `{ "8" = { k6 = 0.05, k7 = 0.03 } }`
    /// (default none: adapters cost no step time).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub step_overhead_tiers: BTreeMap<String, TierSection>,
}

/// One `[[lora.adapters]]` entry.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterSection {
    /// Unique id, as requests name it.
    pub id: String,
    /// LoRA rank (≥ 1).
    pub rank: u32,
    /// The model it adapts (default: `[model].name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_model: Option<String>,
}

/// The step-overhead coefficients of one rank tier.
#[derive(Clone, Copy, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TierSection {
    /// Overhead per distinct adapter of a step with prefill work (≥ 0).
    pub k6: f64,
    /// Overhead per distinct adapter of a decode-only step (≥ 0).
    pub k7: f64,
}

fn d_capacity() -> u32 {
    1
}
fn d_base_latency() -> f64 {
    1000.0
}
fn d_bandwidth() -> f64 {
    25_000.0
}
fn d_footprint() -> u64 {
    5 * 1024 * 1024
}

impl LoraSection {
    /// HBM reserved per instance for the adapter slots:
    /// `adapter_capacity × footprint_bytes_per_rank × max rank` over the
    /// adapters of `model` (saturating).
    pub fn reserved_bytes(&self, model: &str) -> u64 {
        let max_rank = self
            .adapters
            .iter()
            .filter(|a| a.base_model.as_deref().is_none_or(|m| m == model))
            .map(|a| a.rank)
            .max()
            .unwrap_or(0);
        u64::from(self.adapter_capacity)
            .saturating_mul(self.footprint_bytes_per_rank)
            .saturating_mul(u64::from(max_rank))
    }
}

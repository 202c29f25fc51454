//! `[instance.kv_offload]`: the CPU KV tier behind every instance's GPU
//! blocks (capacity, transfer bandwidth, per-block latency).

use super::Problems;
use crate::config::InstanceSection;
use crate::instance::{KvOffloadConfig, MAX_KV_BLOCKS};

/// Largest `transfer_base_latency_us`: one second per reloaded block (a
/// step reloads up to millions of blocks; their sum must stay far below the
/// simulated-time limit).
const MAX_BASE_LATENCY_US: i64 = 1_000_000;
/// Smallest `transfer_bandwidth_tokens_per_us`: one token per second.
const MIN_BANDWIDTH_TOKENS_PER_US: f64 = 1e-6;

/// What `[instance.kv_offload]` resolved to: `None` when the section is
/// absent or `cpu_blocks = 0` (GPU only). Every bad key is reported.
pub(super) fn check(inst: &InstanceSection, problems: &mut Problems) -> Option<KvOffloadConfig> {
    let s = inst.kv_offload.as_ref()?;
    let bw = s.transfer_bandwidth_tokens_per_us;
    let mut ok = true;
    if !bw.is_finite() || bw <= 0.0 {
        problems.error(format!(
            "instance.kv_offload.transfer_bandwidth_tokens_per_us = {bw}: must be a finite \
             number > 0 (tokens moved from CPU to GPU per µs; a block of B tokens takes \
             ⌈B / bandwidth⌉ µs)"
        ));
        ok = false;
    }
    if bw.is_finite() && bw > 0.0 && bw < MIN_BANDWIDTH_TOKENS_PER_US {
        problems.error(format!(
            "instance.kv_offload.transfer_bandwidth_tokens_per_us = {bw}: must be at least \
             {MIN_BANDWIDTH_TOKENS_PER_US} (one token per second); a slower link cannot be meant"
        ));
        ok = false;
    }
    if !(0..=MAX_BASE_LATENCY_US).contains(&s.transfer_base_latency_us) {
        problems.error(format!(
            "instance.kv_offload.transfer_base_latency_us = {}: must be in [0, {MAX_BASE_LATENCY_US}] \
             (µs added per reloaded block; 10^6 µs is a second per block)",
            s.transfer_base_latency_us
        ));
        ok = false;
    }
    if s.cpu_blocks > MAX_KV_BLOCKS {
        problems.error(format!(
            "instance.kv_offload.cpu_blocks = {}: at most {MAX_KV_BLOCKS} blocks are supported \
             per tier; lower it (0 turns the CPU tier off)",
            s.cpu_blocks
        ));
        ok = false;
    }
    if !ok || s.cpu_blocks == 0 {
        return None;
    }
    let config = KvOffloadConfig {
        cpu_blocks: s.cpu_blocks,
        bandwidth_tokens_per_us: bw,
        base_latency_us: s.transfer_base_latency_us,
    };
    problems.note(format!(
        "KV CPU tier: {} blocks per instance, {} µs per reloaded block",
        config.cpu_blocks,
        config.reload_cost(inst.block_size.max(1))
    ));
    Some(config)
}

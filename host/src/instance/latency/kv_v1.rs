//! KV capacity as blis derived it before the HEAD rules (for `linear` and
//! `roofline-v1`, so their earlier results stay reproducible): how many
//! KV-cache blocks fit on an instance, from model and GPU memory.
//!
//! vLLM sizes its KV cache as "GPU memory it may use, minus what the model
//! needs, divided by the bytes of one block". blis does the same with the
//! shapes it already has for the roofline model, so a run needs no
//! hand-measured `total_kv_blocks` (spec/README.md decision 21):
//!
//! ```text
//! usable    = MemoryGiB · 2^30 · TP · gpu_memory_utilization
//! weights   = (d·(d + 2·dKV) + d·d + 3·d·dFF) · layers · bytes_per_param    (§6.3)
//! per block = 2 · layers · kv_heads · head_dim · bytes_per_param · block_size
//! blocks    = floor((usable − weights) / per block)
//! ```
//!
//! The estimate is optimistic: activation memory (vLLM's profiling peak),
//! CUDA graphs, embeddings and the LM head are ignored, so real vLLM reports
//! fewer blocks. Memory and KV heads are summed over the TP group, so the
//! count is for the whole instance.

use super::gpu::GpuSpec;
use super::model_config::ModelConfig;
use super::roofline_v1::{kv_bytes_per_token, weight_bytes};
use super::{validate_roofline_v1, LatencyError};

/// vLLM's default `gpu_memory_utilization`.
pub const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.9;

const GIB: f64 = (1u64 << 30) as f64;

/// KV blocks of `block_size` tokens that fit beside the weights of `model`
/// on `tp` GPUs of type `gpu`, using `gpu_memory_utilization` of their memory
/// (see the module docs for the formula and what it ignores).
///
/// Errors: invalid model/GPU/TP (every problem listed), a block size of 0, a
/// utilisation outside (0, 1], a GPU spec without `MemoryGiB`, or a model
/// whose weights leave room for no block.
pub fn derive_total_kv_blocks_v1(
    model: &ModelConfig,
    gpu: &GpuSpec,
    tp: u32,
    block_size: u32,
    gpu_memory_utilization: f64,
) -> Result<u64, LatencyError> {
    validate_roofline_v1(model, gpu, tp)?;
    if block_size == 0 {
        return Err(LatencyError::InvalidSetting(
            "block_size must be ≥ 1 token".into(),
        ));
    }
    if !(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0) {
        return Err(LatencyError::InvalidSetting(format!(
            "gpu_memory_utilization = {gpu_memory_utilization} must be in (0, 1]"
        )));
    }
    if gpu.memory_gib == 0.0 {
        return Err(LatencyError::KvCapacityUnknown {
            reason: format!("GPU {} has no MemoryGiB in its hardware config", gpu.name),
        });
    }
    let usable = gpu.memory_gib * GIB * f64::from(tp) * gpu_memory_utilization;
    let weights = weight_bytes(model);
    let per_block = kv_bytes_per_token(model) * f64::from(block_size);
    let blocks = ((usable - weights) / per_block).floor();
    if blocks < 1.0 {
        return Err(LatencyError::ModelDoesNotFit {
            gpu: gpu.name.clone(),
            tp,
            utilization: gpu_memory_utilization,
            weights_gib: weights / GIB,
            usable_gib: usable / GIB,
            hint: String::new(),
        });
    }
    // Saturates for absurd inputs; a count that large is never the limit.
    Ok(blocks as u64)
}

//! KV capacity as the reference derives it at HEAD (`latency-head.md` §4),
//! for `roofline` and `trained-physics`: GPU memory at the utilisation,
//! minus weights (quantised width, experts, router, embeddings, LM head),
//! activations (8 GiB for MoE, else 5.5) and per-GPU non-torch memory, divided
//! by the bytes of one block.
//!
//! ```text
//! KV bytes/token = L·2·hd·Hkv·aB / TP          (MLA: L·(kv_lora_rank + qk_rope_head_dim)·aB)
//! per block      = trunc(KV bytes/token · block_size)
//! available      = MemoryGiB · util · TP                                      (GiB)
//! overhead       = weights/2^30 + (8.0 | 5.5) + (0.15 if TP = 1 else 0.6)·TP  (GiB)
//! blocks         = trunc((available − overhead)·2^30) / per block   (× DP for MoE)
//! ```
//!
//! `hd` is `head_dim` when the config gives one, else `hidden / heads`; the
//! KV cache is in the compute dtype (`aB`), never the quantised weight width.

use super::gpu::GpuSpec;
use super::model_config::ModelConfig;
use super::LatencyError;

const GIB: f64 = (1u64 << 30) as f64;

/// Activation functions the sizing accepts (`""` = unspecified).
const ACTIVATIONS: &[&str] = &["silu", "swiglu", "geglu", "situ", ""];

/// Head dimension for KV sizing: `head_dim`, else `hidden / heads` (integer).
fn head_dim(m: &ModelConfig) -> u64 {
    match m.declared_head_dim {
        Some(hd) => u64::from(hd),
        None => u64::from(m.hidden_size / m.num_heads.max(1)),
    }
}

/// KV-cache bytes of one token on one GPU at tensor parallelism `tp`.
pub fn kv_bytes_per_token(m: &ModelConfig, tp: u32) -> f64 {
    let l = f64::from(m.num_layers);
    if m.kv_lora_rank > 0 {
        // The MLA latent is replicated, not split by TP.
        return l * f64::from(m.kv_lora_rank + m.qk_rope_head_dim) * m.bytes_per_param;
    }
    let kv_heads = if m.num_kv_heads == 0 {
        m.num_heads
    } else {
        m.num_kv_heads
    };
    l * 2.0 * head_dim(m) as f64 * f64::from(kv_heads) * m.bytes_per_param / f64::from(tp)
}

/// Bytes of all weights for memory sizing (`latency-head.md` §4.3):
/// embeddings, attention, norms, the 3-matrix MLP (experts, shared expert and
/// router for MoE layers after `first_k_dense_replace`), the LM head unless
/// tied, the final norm; at the quantised weight width.
pub fn weight_bytes(m: &ModelConfig) -> u64 {
    let d = u64::from(m.hidden_size);
    let v = u64::from(m.vocab_size);
    let l = u64::from(m.num_layers);
    let i = u64::from(m.intermediate_size);
    let kv_heads = u64::from(if m.num_kv_heads == 0 {
        m.num_heads
    } else {
        m.num_kv_heads
    });
    let kv_dim = kv_heads * head_dim(m);
    let emb = v * d;
    let attn = d * (d + 2 * kv_dim) + d * d;
    let norms = 2 * d;
    let lm_head = if m.tie_word_embeddings { 0 } else { v * d };
    let mlp = if m.is_moe() {
        let e = u64::from(m.num_experts);
        let shared = u64::from(m.shared_expert_intermediate_size);
        let moe_layer = 3 * d * u64::from(m.expert_ffn()) * e
            + if shared > 0 { 3 * d * shared } else { 0 }
            + e * d;
        let dense_layer = 3 * d * u64::from(m.dense_ffn());
        let k = u64::from(m.first_k_dense_replace).min(l);
        k * dense_layer + (l - k) * moe_layer
    } else {
        l * 3 * d * i
    };
    let params = emb + l * (attn + norms) + mlp + lm_head + d;
    (params as f64 * m.weight_bytes_per_param()) as u64
}

/// KV blocks of `block_size` tokens one instance (TP GPUs per DP rank, `dp`
/// ranks) holds, by the HEAD rules in the module docs. Errors say what is
/// missing or that the model does not fit (with the smallest TP that might).
pub fn derive_total_kv_blocks(
    m: &ModelConfig,
    gpu: &GpuSpec,
    tp: u32,
    dp: u32,
    block_size: u32,
    utilization: f64,
) -> Result<u64, LatencyError> {
    derive_total_kv_blocks_reserving(m, gpu, tp, dp, block_size, utilization, 0)
}

/// [`derive_total_kv_blocks`] with `reserved_bytes` of HBM set aside per
/// DP rank (LoRA adapter slots: `loraGiB = reserved / 2^30`, added to the
/// overhead after the non-torch memory).
pub fn derive_total_kv_blocks_reserving(
    m: &ModelConfig,
    gpu: &GpuSpec,
    tp: u32,
    dp: u32,
    block_size: u32,
    utilization: f64,
    reserved_bytes: u64,
) -> Result<u64, LatencyError> {
    let mut problems = m.problems();
    problems.extend(m.moe_problems());
    if tp == 0 {
        problems.push("tensor parallelism (tp) must be ≥ 1".into());
    }
    if dp == 0 {
        problems.push("data parallelism (dp) must be ≥ 1".into());
    }
    if m.intermediate_size == 0 {
        problems.push(format!("model {}: intermediate_size must be > 0", m.name));
    }
    if m.vocab_size == 0 {
        problems.push(format!(
            "model {}: vocab_size must be > 0 (missing or 0)",
            m.name
        ));
    }
    if !ACTIVATIONS.contains(&m.hidden_act.as_str()) {
        problems.push(format!(
            "model {}: hidden_act '{}' is not supported by the KV sizing (accepted: silu, swiglu, \
             geglu, situ)",
            m.name, m.hidden_act
        ));
    }
    if m.kv_lora_rank == 0 && m.num_heads > 0 {
        if m.declared_head_dim.is_none() && m.hidden_size % m.num_heads != 0 {
            problems.push(format!(
                "model {}: hidden_size {} is not divisible by {} heads and no head_dim is given",
                m.name, m.hidden_size, m.num_heads
            ));
        }
        let kv = if m.num_kv_heads == 0 {
            m.num_heads
        } else {
            m.num_kv_heads
        };
        if tp > 0 && kv >= tp && kv % tp != 0 {
            problems.push(format!(
                "model {}: {kv} KV heads are not divisible by tp = {tp}",
                m.name
            ));
        }
    }
    if !problems.is_empty() {
        return Err(LatencyError::InvalidModel {
            model: "KV sizing",
            problems,
        });
    }
    if block_size == 0 {
        return Err(LatencyError::InvalidSetting(
            "block_size must be ≥ 1 token".into(),
        ));
    }
    if !(utilization.is_finite() && utilization > 0.0 && utilization <= 1.0) {
        return Err(LatencyError::InvalidSetting(format!(
            "gpu_memory_utilization = {utilization} must be in (0, 1]"
        )));
    }
    if !(gpu.memory_gib.is_finite() && gpu.memory_gib > 0.0) {
        return Err(LatencyError::KvCapacityUnknown {
            reason: format!("GPU {} has no MemoryGiB in its hardware config", gpu.name),
        });
    }
    let per_block = (kv_bytes_per_token(m, tp) * f64::from(block_size)) as u64;
    if per_block == 0 {
        return Err(LatencyError::KvCapacityUnknown {
            reason: format!("model {}: a KV block would hold 0 bytes", m.name),
        });
    }
    let tpf = f64::from(tp);
    let available = gpu.memory_gib * utilization * tpf;
    let weights = weight_bytes(m) as f64 / GIB;
    let activations = if m.is_moe() { 8.0 } else { 5.5 };
    let non_torch = if tp == 1 { 0.15 } else { 0.6 } * tpf;
    let lora = reserved_bytes as f64 / GIB;
    let overhead = weights + activations + non_torch + lora;
    let blocks = if overhead < available {
        ((available - overhead) * GIB) as u64 / per_block
    } else {
        0
    };
    if blocks == 0 {
        let per_gpu = gpu.memory_gib * utilization - 0.6;
        let mut min_tp = if per_gpu > 0.0 && weights + activations + non_torch < available {
            String::new()
        } else if per_gpu > 0.0 {
            format!(
                "; at least TP {} might fit",
                ((weights + activations + lora) / per_gpu).ceil()
            )
        } else {
            String::new()
        };
        if lora > 0.0 {
            min_tp.push_str(&format!(
                "; of this, the LoRA adapter slots reserve {} GiB (lora.adapter_capacity × \
                 lora.footprint_bytes_per_rank × the largest lora.adapters rank)",
                crate::config::bounds::short_number((lora * 100.0).round() / 100.0)
            ));
        }
        return Err(LatencyError::ModelDoesNotFit {
            gpu: gpu.name.clone(),
            tp,
            utilization,
            weights_gib: overhead,
            usable_gib: available,
            hint: min_tp,
        });
    }
    Ok(if m.is_moe() && dp > 1 {
        blocks * u64::from(dp)
    } else {
        blocks
    })
}

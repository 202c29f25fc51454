//! `roofline`: the reference's analytical step time at HEAD
//! (`latency-head.md` §3) — one compute/memory crossover per step, weights
//! loaded once per step, MoE-aware FLOPs and bytes, FP8 compute when the
//! weights are 1 byte wide, weight width separate from the compute dtype, no
//! overhead or communication terms.
//!
//! ```text
//! compute = Σ_prefill flops(S, T) / (TP·peak·mfuPrefill) + Σ_decode flops(S, 1) / (TP·peak·mfuDecode)
//! memory  = (weights(Ntok) + Σ (KV written + KV read + activations)) / TP / BW
//! step    = max(compute, memory)
//! ```
//!
//! Per request, FLOPs are linear in `T`, in `T·eff` (`eff = S + (T − 1)/2`)
//! and bytes in `T` and `S`, so a phase needs only the sums the engine keeps
//! in [`PhaseSums`](super::PhaseSums); the per-unit costs are frozen in
//! [`RooflineModel::new`]. MoE weight bytes depend on the step's token count
//! through the expected number of experts touched,
//! `nEff = E·(1 − ((E − k)/E)^Ntok)`. Decode requests count one token each.

use super::gpu::GpuSpec;
use super::model_config::ModelConfig;
use super::{round_tick, validate_alpha, BatchShape, LatencyError};
use crate::engine::Tick;

/// The HEAD roofline model, frozen for one model, GPU and TP.
#[derive(Clone, Debug, PartialEq)]
pub struct RooflineModel {
    /// `[α₀, α₁, α₂]`: queueing delay `α₀ + α₁·L` µs, per-output-token
    /// overhead `α₂` µs (zeros unless given).
    pub alpha: [f64; 3],
    tp: u32,
    /// Compute µs per token, prefill and decode.
    prefill_per_token: f64,
    decode_per_token: f64,
    /// Compute µs per unit of `Σ T·eff`, prefill and decode.
    prefill_per_attention: f64,
    decode_per_attention: f64,
    /// Memory µs per new token (KV written, activations) and per context token (KV read).
    memory_per_token: f64,
    memory_per_context: f64,
    /// Memory µs of the attention and dense-MLP weights.
    memory_fixed_weights: f64,
    /// Memory µs of the routed experts' weights per expert touched (0 for dense).
    memory_per_expert: f64,
    experts: f64,
    /// `(E − k) / E`.
    miss_ratio: f64,
}

impl RooflineModel {
    /// Freeze the model. Every problem of model, GPU and TP is listed in one
    /// error (`latency-head.md` §3.3 validation).
    pub fn new(
        model: &ModelConfig,
        gpu: &GpuSpec,
        tp: u32,
        alpha: [f64; 3],
    ) -> Result<Self, LatencyError> {
        validate_alpha(&alpha)?;
        let mut problems = model.problems();
        problems.extend(model.moe_problems());
        problems.extend(gpu.problems_head(true));
        let wq = model.quantized_weight_bytes;
        if !(wq.is_finite() && wq >= 0.0) {
            problems.push(format!(
                "model {}: quantized weight bytes = {wq} must be a finite number ≥ 0",
                model.name
            ));
        }
        if tp == 0 {
            problems.push("tensor parallelism (tp) must be ≥ 1".into());
        }
        if !problems.is_empty() {
            return Err(LatencyError::InvalidModel {
                model: "roofline",
                problems,
            });
        }

        let l = f64::from(model.num_layers);
        let d = f64::from(model.hidden_size);
        let h = f64::from(model.num_heads);
        let dh = d / h;
        let kv_heads = if model.num_kv_heads == 0 {
            h
        } else {
            f64::from(model.num_kv_heads)
        };
        let dkv = kv_heads * dh;
        let (n_moe, n_dense) = model.layer_split();
        let (n_moe, n_dense) = (f64::from(n_moe), f64::from(n_dense));
        let f_moe = f64::from(model.expert_ffn());
        let f_dense = f64::from(model.dense_ffn());
        let k = f64::from(model.num_experts_per_tok);
        let e = f64::from(model.num_experts);
        let wb = model.weight_bytes_per_param();
        let ab = model.bytes_per_param;
        let tpf = f64::from(tp);

        // FLOPs per token: projections (Q, O: 2·d·d; K, V: 2·d·dKV), the
        // 2-matrix MLP (raw top-k for MoE layers) and the vector work 2·d.
        let mut per_token = (2.0 * (d * d + 2.0 * d * dkv) + 2.0 * d * d) * l + 2.0 * d * l;
        if n_moe > 0.0 {
            per_token += 2.0 * (2.0 * d * f_moe) * k * n_moe;
        }
        if n_dense > 0.0 {
            per_token += 2.0 * (2.0 * d * f_dense) * n_dense;
        }
        // FLOPs per unit of T·eff: QKᵀ and AV (4·H·dH) and softmax (5·H).
        let per_attention = 4.0 * h * dh * l + 5.0 * h * l;

        let peak = gpu.flops_per_us(wb) * 1e6; // FLOP/s
        let bw = gpu.bw_peak_tbs * 1e12;
        let us = 1e6 / tpf;
        let kv_row = 2.0 * l * kv_heads * dh * ab;
        let attn_weights = (d * (d + 2.0 * dkv) + d * d) * l;
        let dense_weights = if n_dense > 0.0 {
            2.0 * d * f_dense * n_dense
        } else {
            0.0
        };
        let (memory_per_expert, miss_ratio) = if n_moe > 0.0 && e > 0.0 {
            (us * 2.0 * d * f_moe * n_moe * wb / bw, (e - k) / e)
        } else {
            (0.0, 0.0)
        };
        Ok(RooflineModel {
            alpha,
            tp,
            prefill_per_token: us * per_token / (peak * gpu.mfu_prefill),
            decode_per_token: us * per_token / (peak * gpu.mfu_decode),
            prefill_per_attention: us * per_attention / (peak * gpu.mfu_prefill),
            decode_per_attention: us * per_attention / (peak * gpu.mfu_decode),
            memory_per_token: us * (kv_row + l * d * ab) / bw,
            memory_per_context: us * kv_row / bw,
            memory_fixed_weights: us * (attn_weights + dense_weights) * wb / bw,
            memory_per_expert,
            experts: e,
            miss_ratio,
        })
    }

    /// Tensor parallelism.
    pub fn tp(&self) -> u32 {
        self.tp
    }

    /// Step time in µs before rounding (0 for an empty batch).
    #[inline]
    pub fn step_us(&self, shape: &BatchShape) -> f64 {
        let (p, dc) = (&shape.prefill, &shape.decode);
        if p.requests == 0 && dc.requests == 0 {
            return 0.0;
        }
        let pt = p.new_tokens as f64;
        // Decode requests count one token each, whatever their grant.
        let dt = f64::from(dc.requests);
        let compute = self.prefill_per_token * pt
            + self.prefill_per_attention * p.attention_tokens as f64
            + self.decode_per_token * dt
            + self.decode_per_attention * dc.context_tokens as f64;
        let tokens = pt + dt;
        let mut memory = self.memory_fixed_weights
            + self.memory_per_token * tokens
            + self.memory_per_context * (p.context_tokens + dc.context_tokens) as f64;
        if self.memory_per_expert > 0.0 {
            let touched = self.experts * (1.0 - self.miss_ratio.powf(tokens));
            memory += self.memory_per_expert * touched;
        }
        compute.max(memory)
    }

    /// Duration of one step, rounded to the nearest tick, at least 1.
    #[inline]
    pub fn step_time(&self, shape: &BatchShape) -> Tick {
        round_tick(self.step_us(shape)).max(1)
    }
}

//! `roofline-v1`: the February 2026 roofline step time (FLOPs and bytes of a
//! batch against a GPU's peaks), kept so earlier results stay reproducible.
//!
//! `core-engine.md` §6.3 states the cost per request (context `S`, `T` new
//! tokens) and sums it over the batch. Every term is linear in `T`, in
//! `T · eff` (with `eff = S + (T − 1)/2`, the average attended context) or in
//! `S`, so a phase's total depends only on the sums the engine keeps in
//! [`PhaseSums`]: `Σ T` (`new_tokens`), `Σ T · eff` (`attention_tokens`) and
//! `Σ S` (`context_tokens`). [`RooflineV1Model::new`] folds model, GPU and TP
//! into a few microsecond-per-unit constants, so [`RooflineV1Model::step_time`]
//! is a handful of multiply-adds whatever the batch size.
//!
//! Per phase present (prefill, decode; each at its own MFU):
//!
//! ```text
//! compute = GEMM FLOPs / (TP · peak · mfu) + vector FLOPs / (TP · 0.10 · peak)
//! memory  = (weights + activations + KV read + KV written) bytes / (TP · peak BW · BW efficiency)
//! phase   = max(compute, memory)
//! step    = round(Σ phases + layers · perLayerOverhead
//!                 + [TP > 1] · 2 · layers · allReduceLatency + TOverheadMicros)
//! ```
//!
//! Weights are read once per phase present; prefill and decode are added, not
//! overlapped; an empty batch costs the overheads only. The reference charges
//! every decode request `T = 1` whatever its grant; blis's engine puts a
//! request in the decode phase only when it computes exactly one token, so
//! the decode sums are used as given. The per-request
//! formulas are kept, term by term, in a test-only `request_cost` that the
//! tests check the aggregate against.

use super::gpu::GpuSpec;
use super::model_config::ModelConfig;
use super::{
    round_tick, validate_alpha, validate_roofline_v1, BatchShape, LatencyError, PhaseSums,
};
use crate::engine::Tick;

/// Fraction of peak FLOP/s the "vector" work (softmax, masking, RoPE) reaches.
const VECTOR_FRACTION: f64 = 0.10;

/// Microsecond costs of one phase, per unit of each [`PhaseSums`] aggregate.
#[derive(Clone, Copy, Debug, PartialEq)]
struct PhaseCoeffs {
    /// Compute µs per new token (projections, MLP, RoPE).
    compute_per_token: f64,
    /// Compute µs per unit of `Σ T · eff` (QKᵀ, AV, softmax).
    compute_per_attention: f64,
}

/// The analytical step-time model of §6.3, ready to evaluate.
///
/// Built from a [`ModelConfig`], a [`GpuSpec`] and the tensor parallelism;
/// `alpha` gives the queueing delay and per-token output overhead as for the
/// linear model (zeros when not calibrated).
#[derive(Clone, Debug, PartialEq)]
pub struct RooflineV1Model {
    /// `[alpha0, alpha1, alpha2]`: queueing delay `alpha0 + alpha1 · L` µs,
    /// per-output-token overhead `alpha2` µs.
    pub alpha: [f64; 3],
    tp: u32,
    prefill: PhaseCoeffs,
    decode: PhaseCoeffs,
    /// Memory µs to read this GPU's share of the weights.
    memory_weights: f64,
    /// Memory µs per new token (activations plus KV written).
    memory_per_token: f64,
    /// Memory µs per context token (KV read).
    memory_per_context: f64,
    /// Overheads paid by every step, µs.
    fixed: f64,
}

/// FLOPs and bytes of one request in one step, by the per-request formulas
/// of §6.3 (exactly as written there, for cross-checking).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RequestCost {
    /// Matrix-multiply FLOPs (projections, attention, MLP).
    pub gemm: f64,
    /// "Vector" FLOPs (softmax, masking, RoPE).
    pub sram: f64,
    /// Bytes of all weights.
    pub weights: f64,
    /// KV bytes written for the new tokens.
    pub kv_growth: f64,
    /// KV bytes read for the context.
    pub kv_access: f64,
    /// Activation bytes.
    pub activations: f64,
}

/// The shape quantities the formulas use, as doubles.
struct Dims {
    d: f64,
    layers: f64,
    heads: f64,
    kv_heads: f64,
    kv_dim: f64,
    head_dim: f64,
    ffn: f64,
    bpp: f64,
}

impl Dims {
    fn of(m: &ModelConfig) -> Self {
        let heads = f64::from(m.num_heads);
        let kv_heads = if m.num_kv_heads == 0 {
            heads
        } else {
            f64::from(m.num_kv_heads)
        };
        let d = f64::from(m.hidden_size);
        let head_dim = d / heads;
        Dims {
            d,
            layers: f64::from(m.num_layers),
            heads,
            kv_heads,
            kv_dim: kv_heads * head_dim,
            head_dim,
            ffn: if m.intermediate_size == 0 {
                4.0 * d
            } else {
                f64::from(m.intermediate_size)
            },
            bpp: m.bytes_per_param,
        }
    }

    /// Bytes of all weights: attention projections (Q, K, V, O) and the
    /// SwiGLU MLP of every layer. Embeddings and norms are not counted.
    fn weight_bytes(&self) -> f64 {
        let per_layer =
            self.d * (self.d + 2.0 * self.kv_dim) + self.d * self.d + 3.0 * self.d * self.ffn;
        per_layer * self.layers * self.bpp
    }

    /// KV-cache bytes of one token (K and V, every layer).
    fn kv_bytes_per_token(&self) -> f64 {
        2.0 * self.layers * self.kv_heads * self.head_dim * self.bpp
    }
}

/// Bytes of all weights of `model` by the §6.3 weight formula:
/// `(d·(d + 2·dKV) + d·d + 3·d·dFF) · layers · bytes_per_param` — Q/K/V/O
/// projections and the SwiGLU MLP. Embeddings, the LM head and norms are not
/// counted.
pub fn weight_bytes(model: &ModelConfig) -> f64 {
    Dims::of(model).weight_bytes()
}

/// KV-cache bytes of one token of `model`: `2 · layers · kv_heads · head_dim · bytes_per_param`.
pub fn kv_bytes_per_token(model: &ModelConfig) -> f64 {
    Dims::of(model).kv_bytes_per_token()
}

/// The §6.3 per-request formulas, term by term, for context `s` and `t` new tokens.
#[cfg(test)]
pub(crate) fn request_cost(model: &ModelConfig, s: f64, t: f64) -> RequestCost {
    let Dims {
        d,
        layers: nl,
        heads: nh,
        kv_heads: nkv,
        kv_dim: dkv,
        head_dim: dh,
        ffn: dff,
        bpp,
    } = Dims::of(model);
    let eff = if t > 1.0 { s + (t - 1.0) / 2.0 } else { s };
    let mut gemm = ((2.0 * t) * (d * d + (2.0 * d) * dkv) + ((2.0 * t) * d) * d) * nl;
    gemm += ((((4.0 * nh) * t) * eff) * dh) * nl;
    let sram = ((((5.0 * nh) * t) * eff) + (2.0 * t) * d) * nl;
    gemm += ((2.0 * t) * ((3.0 * d) * dff)) * nl;
    let kv_row = (((2.0 * nl) * nkv) * dh) * bpp;
    RequestCost {
        gemm,
        sram,
        weights: (((d * (d + 2.0 * dkv)) + d * d) + (3.0 * d) * dff) * nl * bpp,
        kv_growth: kv_row * t,
        kv_access: kv_row * s,
        activations: ((nl * d) * bpp) * t,
    }
}

impl RooflineV1Model {
    /// Fold model, GPU and tensor parallelism into per-unit costs.
    ///
    /// Fails with every problem listed when the model or GPU cannot drive
    /// the formulas (§6.4 validation) or `tp` is 0, and when an alpha
    /// coefficient is negative or not finite.
    pub fn new(
        model: &ModelConfig,
        gpu: &GpuSpec,
        tp: u32,
        alpha: [f64; 3],
    ) -> Result<Self, LatencyError> {
        validate_roofline_v1(model, gpu, tp)?;
        validate_alpha(&alpha)?;

        let dims = Dims::of(model);
        let Dims {
            d,
            layers: nl,
            heads: nh,
            kv_dim: dkv,
            head_dim: dh,
            ffn: dff,
            bpp,
            ..
        } = dims;
        let tpf = f64::from(tp);
        let peak = gpu.tflops_peak * 1e12;
        let vector_peak = peak * VECTOR_FRACTION;
        let bandwidth = gpu.bw_peak_tbs * 1e12 * gpu.bw_eff_constant;

        // FLOPs per new token and per unit of Σ T·eff (see `request_cost`).
        let gemm_per_token =
            2.0 * (d * d + 2.0 * d * dkv) * nl + 2.0 * d * d * nl + 6.0 * d * dff * nl;
        let gemm_per_attention = 4.0 * nh * dh * nl;
        let sram_per_token = 2.0 * d * nl;
        let sram_per_attention = 5.0 * nh * nl;

        let us = 1e6 / tpf;
        let phase = |mfu: f64| PhaseCoeffs {
            compute_per_token: us * (gemm_per_token / (peak * mfu) + sram_per_token / vector_peak),
            compute_per_attention: us
                * (gemm_per_attention / (peak * mfu) + sram_per_attention / vector_peak),
        };
        let kv_per_token = dims.kv_bytes_per_token();
        let activation_per_token = nl * d * bpp;

        let all_reduce = if tp > 1 {
            2.0 * nl * gpu.all_reduce_latency
        } else {
            0.0
        };
        Ok(RooflineV1Model {
            alpha,
            tp,
            prefill: phase(gpu.mfu_prefill),
            decode: phase(gpu.mfu_decode),
            memory_weights: us * dims.weight_bytes() / bandwidth,
            memory_per_token: us * (activation_per_token + kv_per_token) / bandwidth,
            memory_per_context: us * kv_per_token / bandwidth,
            fixed: nl * gpu.per_layer_overhead + all_reduce + gpu.t_overhead_micros,
        })
    }

    /// Tensor parallelism.
    pub fn tp(&self) -> u32 {
        self.tp
    }

    /// Microseconds of one phase (0 when the phase has no request).
    #[inline]
    fn phase_us(&self, c: &PhaseCoeffs, p: &PhaseSums) -> f64 {
        if p.requests == 0 {
            return 0.0;
        }
        let t = p.new_tokens as f64;
        let compute = c.compute_per_token * t + c.compute_per_attention * p.attention_tokens as f64;
        let memory = self.memory_weights
            + self.memory_per_token * t
            + self.memory_per_context * p.context_tokens as f64;
        compute.max(memory)
    }

    /// Step time in microseconds before rounding.
    #[inline]
    pub(crate) fn step_us(&self, shape: &BatchShape) -> f64 {
        self.fixed
            + self.phase_us(&self.prefill, &shape.prefill)
            + self.phase_us(&self.decode, &shape.decode)
    }

    /// Duration of one step over `shape`, rounded to the nearest tick.
    #[inline]
    pub fn step_time(&self, shape: &BatchShape) -> Tick {
        round_tick(self.step_us(shape))
    }
}

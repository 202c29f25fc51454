//! `trained-physics`: the reference's default latency model at HEAD
//! (`latency-head.md` §2) — physics-shaped basis functions (prefill compute,
//! decode KV traffic, weight loading, TP all-reduce, MoE dispatch, per-layer,
//! per-request and per-step constants) weighted by trained coefficients.
//!
//! ```text
//! step = β₁·T_pf_compute + β₉·T_pf_kv          (≥ 9 betas; else β₁·max of the two)
//!      + β₂·T_dc_compute + β₁₀·T_dc_kv         (≥ 10 betas; else β₂·max of the two)
//!      + β₃·T_weight + β₄·(T_tp_attn + T_tp_dense + T_moe_reduce)
//!      + β₁₁·T_moe_dispatch + β₅·L + β₆·B + β₇ + β₈·[interleaved MoE]·nMoE
//! ```
//!
//! Everything that depends only on model, GPU, TP and DP (layer split, head
//! sizes, peak FLOP rate, the weight-loading time) is frozen in
//! [`TrainedPhysicsModel::new`]; a step reads five sums of the
//! [`BatchShape`] and evaluates the basis functions in the spec's order, with
//! no allocation. The batch aggregates map as: `P` = prefill tokens, `A` =
//! `Σ 4·(H/tp)·T·(In + T/2)·dH` over prefill requests (`In` is the whole
//! sequence being prefilled, so a chunk pays the attention of the whole
//! prompt, as in the reference), `D` = decode requests (one token each), `S`
//! = their context, `B` = requests in the batch.
//!
//! `T_weight` counts every routed expert's weights in every step, as the
//! reference does; with `[model] moe_expert_load = "touched"`
//! ([`MoeExpertLoad::Touched`], off by default) its routed-expert part is
//! scaled by the expected fraction of experts a step's `N = P + D` tokens
//! route to, `1 − (1 − k/E)^N`.
//!
//! The shape is the reference's: attention heads of `hidden / heads`, the
//! query and output projections `hidden × hidden`, no LM head. With
//! `[model] geometry = "full"` ([`ModelGeometry::Full`], off by default)
//! the attention has the config's declared `head_dim` (queries `H·dH`
//! wide, keys and values `Hkv·dH`) and every step reads the LM head's
//! `vocab × hidden` 16-bit weights besides.
//!
//! Alphas: queueing delay `α₀`, a fixed `α₁` added to a request's E2E after
//! its last token (not to TTFT or ITL), `α₂` per output token.

use super::gpu::GpuSpec;
use super::model_config::ModelConfig;
use super::{round_tick, validate_coefficients, BatchShape, LatencyError};
use crate::engine::Tick;

/// The iter29 alpha coefficients (µs): queueing, post-decode, per output token.
pub const ITER29_ALPHA: [f64; 3] = [15563.199579, 777.3455, 45.907545];

/// The iter29 beta coefficients, all 11 (`defaults.yaml`).
pub const ITER29_BETA: [f64; 11] = [
    0.152128,
    0.0,
    1.36252915,
    0.752037,
    32.09546717,
    4.41684444,
    126.024825,
    481.8613888,
    0.0,
    1.94710771,
    0.752037,
];

/// Bytes per KV-cache element: the model assumes an FP16 KV cache always.
const KV_BYTES: f64 = 2.0;

/// Bytes per LM-head weight ([`ModelGeometry::Full`]): 16-bit, as quantized
/// checkpoints leave the LM head unquantized.
const LM_HEAD_BYTES: f64 = 2.0;

/// How MoE tokens travel between the GPUs of a DP > 1 group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MoeCommBackend {
    /// All-gather family (`""`, `naive`, `allgather_reducescatter`): every
    /// token to every rank, no top-k factor.
    #[default]
    AllGather,
    /// All-to-all family (`pplx`, `deepep_high_throughput`,
    /// `deepep_low_latency`, `mori`, `flashinfer_all2allv`): each token to
    /// its top-k experts' ranks.
    AllToAll,
}

impl MoeCommBackend {
    /// Accepted names, in the order they are listed in messages.
    pub const NAMES: &'static [&'static str] = &[
        "allgather_reducescatter",
        "naive",
        "pplx",
        "deepep_high_throughput",
        "deepep_low_latency",
        "mori",
        "flashinfer_all2allv",
    ];

    /// The family of a backend name (`""` = `allgather_reducescatter`).
    pub fn parse(name: &str) -> Result<Self, LatencyError> {
        match name.trim() {
            "" | "naive" | "allgather_reducescatter" => Ok(MoeCommBackend::AllGather),
            "pplx"
            | "deepep_high_throughput"
            | "deepep_low_latency"
            | "mori"
            | "flashinfer_all2allv" => Ok(MoeCommBackend::AllToAll),
            other => Err(LatencyError::InvalidSetting(format!(
                "unknown moe_comm_backend '{other}': expected one of {}",
                MoeCommBackend::NAMES.join(", ")
            ))),
        }
    }
}

/// The basis-function values of one step, unscaled (µs), for tests and
/// diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BasisTerms {
    /// Prefill projections, attention and MLP FLOPs / peak.
    pub pf_compute: f64,
    /// Prefill KV writes / bandwidth.
    pub pf_kv: f64,
    /// Decode projections, attention and MLP FLOPs / peak.
    pub dc_compute: f64,
    /// Decode KV reads and writes / bandwidth.
    pub dc_kv: f64,
    /// Loading this GPU's weights / bandwidth.
    pub weight: f64,
    /// Attention all-reduce (TP > 1).
    pub tp_attn: f64,
    /// Dense-MLP all-reduce (TP > 1).
    pub tp_dense: f64,
    /// MoE all-reduce (MoE, DP = 1, TP > 1).
    pub moe_reduce: f64,
    /// MoE dispatch/combine (MoE, DP > 1).
    pub moe_dispatch: f64,
}

/// The trained-physics step-time model, frozen for one model, GPU, TP and DP.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainedPhysicsModel {
    /// `[α₀ queueing, α₁ post-decode, α₂ per output token]` (µs).
    pub alpha: [f64; 3],
    /// `b[0..10]` (missing slots 0; `b[10]` defaults to `b[3]`).
    beta: [f64; 11],
    split_prefill: bool,
    split_decode: bool,
    layers: f64,
    hidden: f64,
    heads: f64,
    /// `d / H`, integer division (the config's `head_dim` with
    /// [`ModelGeometry::Full`]).
    head_dim: f64,
    /// Query width `H·dH` (`d` in the reference's geometry).
    q_dim: f64,
    kv_dim: f64,
    n_moe: f64,
    n_dense: f64,
    /// 1 for interleaved MoE (the β₈ term), else 0.
    interleaved: f64,
    is_moe: bool,
    k_eff: f64,
    /// Routed experts `E`.
    experts: f64,
    ffn_moe: f64,
    ffn_dense: f64,
    ffn_shared: f64,
    act_bytes: f64,
    tp: f64,
    dp: f64,
    group: f64,
    tpdp: f64,
    flops: f64,
    bandwidth: f64,
    comm: MoeCommBackend,
    /// `T_weight`, independent of the batch.
    weight_us: f64,
    /// The routed experts' part of `weight_us`.
    expert_weight_us: f64,
    /// Load only the experts a step's tokens are expected to touch
    /// ([`MoeExpertLoad::Touched`]).
    touched_experts: bool,
}

/// Which routed experts' weights a trained-physics step loads
/// (`[model] moe_expert_load`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MoeExpertLoad {
    /// Every routed expert's weights, whatever the batch (the reference's
    /// trained-physics model; the default).
    #[default]
    All,
    /// The expected number of distinct experts the step's `N` tokens route
    /// to under uniform top-k routing, `E·(1 − (1 − k/E)^N)` (as the
    /// reference's roofline model counts them): a step of few tokens reads
    /// few experts.
    Touched,
}

impl MoeExpertLoad {
    /// The run-file spelling.
    pub fn name(self) -> &'static str {
        match self {
            MoeExpertLoad::All => "all",
            MoeExpertLoad::Touched => "touched",
        }
    }

    /// `all` or `touched`; an empty string is the default.
    pub fn parse(name: &str) -> Result<Self, LatencyError> {
        match name {
            "" | "all" => Ok(MoeExpertLoad::All),
            "touched" => Ok(MoeExpertLoad::Touched),
            other => Err(LatencyError::InvalidSetting(format!(
                "unknown moe_expert_load '{other}': expected all (every routed expert's weights each \
                 step, the default) or touched (the experts the step's tokens are expected to route to)"
            ))),
        }
    }
}

/// Which shape of the model the step-time formulas read
/// (`[model] geometry`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ModelGeometry {
    /// The reference's: heads of `hidden / heads`, the query and output
    /// projections `hidden × hidden`, no LM head (the default).
    #[default]
    Reference,
    /// The config's declared `head_dim` for the attention and the KV cache,
    /// and the LM head's `vocab × hidden` weights read every step.
    Full,
}

impl ModelGeometry {
    /// The run-file spelling.
    pub fn name(self) -> &'static str {
        match self {
            ModelGeometry::Reference => "reference",
            ModelGeometry::Full => "full",
        }
    }

    /// `reference` or `full`; an empty string is the default.
    pub fn parse(name: &str) -> Result<Self, LatencyError> {
        match name {
            "" | "reference" => Ok(ModelGeometry::Reference),
            "full" => Ok(ModelGeometry::Full),
            other => Err(LatencyError::InvalidSetting(format!(
                "unknown geometry '{other}': expected reference (the reference's model shape, the \
                 default) or full (the declared head_dim and the LM head's weights)"
            ))),
        }
    }
}

/// The trained-physics settings beyond the coefficients that change what a
/// step costs: a calibration profile's coefficients belong to one of each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepVariant {
    /// `[model] moe_expert_load`.
    pub expert_load: MoeExpertLoad,
    /// `[model] geometry`.
    pub geometry: ModelGeometry,
}

impl StepVariant {
    /// The variant of a run file's `moe_expert_load` and `geometry` (absent
    /// or empty: the default).
    pub fn parse(expert_load: Option<&str>, geometry: Option<&str>) -> Result<Self, LatencyError> {
        Ok(StepVariant {
            expert_load: MoeExpertLoad::parse(expert_load.unwrap_or(""))?,
            geometry: ModelGeometry::parse(geometry.unwrap_or(""))?,
        })
    }

    /// Each setting as `(model key, value)`, in the run file's spelling.
    pub fn settings(&self) -> [(&'static str, &'static str); 2] {
        [
            ("moe_expert_load", self.expert_load.name()),
            ("geometry", self.geometry.name()),
        ]
    }

    /// Each setting's value where it is not the default (what a profile
    /// records), in the order of [`StepVariant::settings`].
    pub fn recorded(&self) -> [Option<String>; 2] {
        let (ours, default) = (self.settings(), StepVariant::default().settings());
        std::array::from_fn(|i| (ours[i] != default[i]).then(|| ours[i].1.to_string()))
    }

    /// The first setting in which `other` differs from this variant:
    /// `(model key, this value, other's value)`.
    pub fn difference(
        &self,
        other: &StepVariant,
    ) -> Option<(&'static str, &'static str, &'static str)> {
        self.settings()
            .into_iter()
            .zip(other.settings())
            .find(|(a, b)| a != b)
            .map(|((key, a), (_, b))| (key, a, b))
    }
}

/// The geometry-dependent part of a frozen model.
struct Shape {
    head_dim: f64,
    q_dim: f64,
    kv_dim: f64,
    /// Weight bytes a step reads per GPU, and the routed experts' part.
    weight: f64,
    expert_weight: f64,
}

impl Shape {
    /// Head sizes and weight bytes of `model` on one GPU of a `tp`-way
    /// (MoE: `group`-way) deployment.
    fn of(model: &ModelConfig, geometry: ModelGeometry, tp: f64, group: f64) -> Shape {
        let full = geometry == ModelGeometry::Full;
        let head_dim = match (full, model.declared_head_dim) {
            (true, Some(h)) => f64::from(h),
            _ => f64::from(model.hidden_size / model.num_heads),
        };
        let kv_heads = if model.num_kv_heads == 0 {
            model.num_heads
        } else {
            model.num_kv_heads
        };
        let d = f64::from(model.hidden_size);
        let q_dim = if full {
            f64::from(model.num_heads) * head_dim
        } else {
            d
        };
        let kv_dim = f64::from(kv_heads) * head_dim;
        let (n_moe, n_dense) = model.layer_split();
        let (n_moe, n_dense) = (f64::from(n_moe), f64::from(n_dense));
        let wb = model.weight_bytes_per_param();
        // Weights are replicated across DP ranks: divided by TP only; routed
        // experts are E/G expert-equivalents per GPU whatever the batch.
        let mut weight = f64::from(model.num_layers) * d * (2.0 * q_dim + 2.0 * kv_dim) * wb / tp;
        if full {
            weight += f64::from(model.vocab_size) * d * LM_HEAD_BYTES / tp;
        }
        let mut expert_weight = 0.0;
        if n_moe > 0.0 {
            let experts = f64::from(model.num_experts);
            expert_weight =
                n_moe * (experts / group) * 3.0 * d * f64::from(model.expert_ffn()) * wb;
            weight += expert_weight;
            let shared = f64::from(model.shared_expert_intermediate_size);
            if shared > 0.0 {
                weight += n_moe * 3.0 * d * shared * wb / tp;
            }
        }
        if n_dense > 0.0 {
            weight += n_dense * 1.0 * 3.0 * d * f64::from(model.dense_ffn()) * wb / tp;
        }
        Shape {
            head_dim,
            q_dim,
            kv_dim,
            weight,
            expert_weight,
        }
    }
}

impl TrainedPhysicsModel {
    /// Freeze the model. `beta` holds 7 to 11 values (see the module docs);
    /// `dp` > 1 needs a mixture-of-experts model. Errors list what is wrong:
    /// a shape the formulas cannot use (layers, heads, hidden, MLP width 0;
    /// heads or KV heads not divisible by TP; an MoE config without top-k),
    /// a GPU without peak FLOP/s or bandwidth, a bad coefficient.
    pub fn new(
        model: &ModelConfig,
        gpu: &GpuSpec,
        tp: u32,
        dp: u32,
        comm: MoeCommBackend,
        alpha: [f64; 3],
        beta: &[f64],
    ) -> Result<Self, LatencyError> {
        validate_coefficients("alpha", &alpha)?;
        validate_coefficients("beta", beta)?;
        if !(7..=11).contains(&beta.len()) {
            return Err(LatencyError::InvalidSetting(format!(
                "trained-physics needs 7 to 11 beta coefficients, got {}",
                beta.len()
            )));
        }
        check_shape(model, gpu, tp, dp)?;

        let mut b = [0.0; 11];
        b[..beta.len()].copy_from_slice(beta);
        if beta.len() < 11 {
            b[10] = b[3];
        }
        let layers = f64::from(model.num_layers);
        let hidden = f64::from(model.hidden_size);
        let heads = f64::from(model.num_heads);
        let is_moe = model.is_moe();
        let (n_moe, n_dense) = model.layer_split();
        let (n_moe, n_dense) = (f64::from(n_moe), f64::from(n_dense));
        let interleaved = if is_moe && model.interleave_moe_layer_step > 0 {
            1.0
        } else {
            0.0
        };
        let experts = f64::from(model.num_experts);
        let ffn_moe = f64::from(model.expert_ffn());
        let ffn_dense = f64::from(model.dense_ffn());
        let ffn_shared = f64::from(model.shared_expert_intermediate_size);
        let wb = model.weight_bytes_per_param();
        let tpf = f64::from(tp);
        let dpf = f64::from(dp.max(1));
        let group = if is_moe { tpf * dpf } else { tpf };
        let bandwidth = gpu.bw_peak_tbs * 1e6;
        let shape = Shape::of(model, ModelGeometry::Reference, tpf, group);

        Ok(TrainedPhysicsModel {
            alpha,
            beta: b,
            split_prefill: beta.len() >= 9,
            split_decode: beta.len() >= 10,
            layers,
            hidden,
            heads,
            head_dim: shape.head_dim,
            q_dim: shape.q_dim,
            kv_dim: shape.kv_dim,
            n_moe,
            n_dense,
            interleaved,
            is_moe,
            k_eff: f64::from(model.num_experts_per_tok.max(1)),
            experts,
            ffn_moe,
            ffn_dense,
            ffn_shared,
            act_bytes: model.bytes_per_param,
            tp: tpf,
            dp: dpf,
            group,
            tpdp: tpf * dpf,
            flops: gpu.flops_per_us(wb),
            bandwidth,
            comm,
            weight_us: shape.weight / bandwidth,
            expert_weight_us: shape.expert_weight / bandwidth,
            touched_experts: false,
        })
    }

    /// The model of `model` (the config it was frozen for) in `variant`:
    /// routed-expert weights loaded as its `expert_load` says (a dense model
    /// has none: that setting changes nothing) and the shape its `geometry`
    /// says.
    pub fn with_variant(mut self, model: &ModelConfig, variant: StepVariant) -> Self {
        self.touched_experts = variant.expert_load == MoeExpertLoad::Touched;
        let shape = Shape::of(model, variant.geometry, self.tp, self.group);
        self.head_dim = shape.head_dim;
        self.q_dim = shape.q_dim;
        self.kv_dim = shape.kv_dim;
        self.weight_us = shape.weight / self.bandwidth;
        self.expert_weight_us = shape.expert_weight / self.bandwidth;
        self
    }

    /// `T_weight` of a step of `n` tokens: with [`MoeExpertLoad::Touched`]
    /// the routed experts' part scaled by the expected fraction of experts
    /// `n` tokens route to, `1 − (1 − k/E)^n` (`k/E` of them per token).
    #[inline]
    fn weight_of(&self, n: f64) -> f64 {
        if !self.touched_experts || self.expert_weight_us == 0.0 {
            return self.weight_us;
        }
        let miss = 1.0 - self.k_eff / self.experts;
        let touched = 1.0 - miss.max(0.0).powf(n);
        self.weight_us - self.expert_weight_us + self.expert_weight_us * touched
    }

    /// MLP FLOPs of `x` tokens on the busiest GPU (balanced placement).
    #[inline]
    fn ffn(&self, x: f64) -> f64 {
        let d = self.hidden;
        let mut f = 0.0;
        if self.n_moe > 0.0 {
            f += self.n_moe * (x * self.k_eff / self.group) * 6.0 * d * self.ffn_moe;
            if self.ffn_shared > 0.0 {
                f += self.n_moe * x * 6.0 * d * self.ffn_shared / self.tpdp;
            }
        }
        if self.n_dense > 0.0 {
            f += self.n_dense * x * 1.0 * 6.0 * d * self.ffn_dense / self.tpdp;
        }
        f
    }

    /// One all-reduce over `units` layers of `x` tokens (0 at TP 1).
    #[inline]
    fn all_reduce(&self, units: f64, x: f64) -> f64 {
        if self.tp > 1.0 {
            units * x * self.hidden * self.act_bytes * 2.0 * ((self.tp - 1.0) / self.tp)
                / self.bandwidth
        } else {
            0.0
        }
    }

    /// The unscaled basis functions of a batch (µs).
    pub fn terms(&self, shape: &BatchShape) -> BasisTerms {
        let q = self.q_dim;
        let (l, d, dkv, tp, dp, tpdp) = (
            self.layers,
            self.hidden,
            self.kv_dim,
            self.tp,
            self.dp,
            self.tpdp,
        );
        let p = shape.prefill.new_tokens as f64;
        let dc = f64::from(shape.decode.requests);
        let s = shape.decode.context_tokens as f64;
        let n = p + dc;
        let mut t = BasisTerms {
            weight: self.weight_of(n),
            ..BasisTerms::default()
        };
        if p > 0.0 {
            // Σ 4·(H/tp)·T·(In + T/2)·dH, from the exact integer Σ T·(2·In + T).
            let attention = 4.0
                * (self.heads / tp)
                * (shape.prefill.prompt_attention2 as f64 / 2.0)
                * self.head_dim;
            t.pf_compute =
                (l * 2.0 * p * d * (2.0 * q + 2.0 * dkv) / tpdp + l * attention / dp + self.ffn(p))
                    / self.flops;
            t.pf_kv = l * 2.0 * (dkv / tpdp) * p * KV_BYTES / self.bandwidth;
        }
        if dc > 0.0 {
            t.dc_compute = (l * 2.0 * dc * d * (2.0 * q + 2.0 * dkv) / tpdp
                + l * 4.0 * (self.heads / tp) * s * self.head_dim / dp
                + self.ffn(dc))
                / self.flops;
            t.dc_kv = l * 2.0 * (dkv / tpdp) * KV_BYTES * (s + dc) / self.bandwidth;
        }
        if tp > 1.0 {
            t.tp_attn = self.all_reduce(l, n) / dp;
            t.tp_dense = self.all_reduce(self.n_dense, n) / dp;
            if self.is_moe && self.n_moe > 0.0 && dp == 1.0 {
                t.moe_reduce = self.all_reduce(self.n_moe, n);
            }
        }
        if self.is_moe && dp > 1.0 {
            let g = self.group;
            let per_layer = match self.comm {
                MoeCommBackend::AllGather => {
                    (n / dp) * (g - 1.0) / g * 2.0 * d * self.act_bytes / self.bandwidth
                }
                MoeCommBackend::AllToAll => {
                    ((n / dp) * self.k_eff * (g - 1.0) / g * 2.0) * d * self.act_bytes
                        / self.bandwidth
                }
            };
            t.moe_dispatch = self.n_moe * per_layer;
        }
        t
    }

    /// Step time in µs before rounding (`None` for an empty batch).
    #[inline]
    pub fn step_us(&self, shape: &BatchShape) -> Option<f64> {
        let batch = shape.prefill.requests + shape.decode.requests;
        if batch == 0 {
            return None;
        }
        let b = &self.beta;
        let t = self.terms(shape);
        let prefill = if self.split_prefill {
            b[0] * t.pf_compute + b[8] * t.pf_kv
        } else {
            b[0] * t.pf_compute.max(t.pf_kv)
        };
        let decode = if self.split_decode {
            b[1] * t.dc_compute + b[9] * t.dc_kv
        } else {
            b[1] * t.dc_compute.max(t.dc_kv)
        };
        Some(
            prefill
                + decode
                + b[2] * t.weight
                + b[3] * (t.tp_attn + t.tp_dense + t.moe_reduce)
                + b[10] * t.moe_dispatch
                + b[4] * self.layers
                + b[5] * f64::from(batch)
                + b[6]
                + b[7] * self.interleaved * self.n_moe,
        )
    }

    /// Duration of one step, rounded to the nearest tick, at least 1 (an
    /// empty batch takes 1 tick).
    #[inline]
    pub fn step_time(&self, shape: &BatchShape) -> Tick {
        self.step_us(shape).map_or(1, |us| round_tick(us).max(1))
    }

    /// The 11 beta slots in use.
    pub fn beta(&self) -> &[f64; 11] {
        &self.beta
    }
}

/// What the formulas cannot use: a shape with layers, heads, hidden or MLP
/// width 0, heads or KV heads not divisible by TP, an MoE config without
/// top-k, dp > 1 on a dense model, a GPU without peak FLOP/s or bandwidth.
fn check_shape(model: &ModelConfig, gpu: &GpuSpec, tp: u32, dp: u32) -> Result<(), LatencyError> {
    let mut problems = Vec::new();
    for (field, v) in [
        ("num_hidden_layers", model.num_layers),
        ("hidden_size", model.hidden_size),
        ("num_attention_heads", model.num_heads),
        ("intermediate_size", model.intermediate_size),
    ] {
        if v == 0 {
            problems.push(format!(
                "model {}: {field} must be > 0 (missing or 0)",
                model.name
            ));
        }
    }
    if !(model.bytes_per_param.is_finite() && model.bytes_per_param > 0.0) {
        problems.push(format!(
            "model {}: bytes per parameter (torch_dtype) = {} must be > 0",
            model.name, model.bytes_per_param
        ));
    }
    problems.extend(model.moe_problems());
    if tp == 0 {
        problems.push("tensor parallelism (tp) must be ≥ 1".into());
    } else {
        let kv_heads = if model.num_kv_heads == 0 {
            model.num_heads
        } else {
            model.num_kv_heads
        };
        for (what, n) in [("attention heads", model.num_heads), ("KV heads", kv_heads)] {
            if n % tp != 0 {
                problems.push(format!(
                    "model {}: {n} {what} are not divisible by tp = {tp}",
                    model.name
                ));
            }
        }
    }
    if dp == 0 {
        problems.push("data parallelism (dp) must be ≥ 1".into());
    } else if dp > 1 && !model.is_moe() {
        problems.push(format!(
            "model {}: dp = {dp} needs a mixture-of-experts model (data parallelism \
             only splits MoE deployments)",
            model.name
        ));
    }
    problems.extend(gpu.problems_head(false));
    if !problems.is_empty() {
        return Err(LatencyError::InvalidModel {
            model: "trained-physics",
            problems,
        });
    }
    Ok(())
}

//! Step-time models: how long one batch step takes.
//!
//! The engine summarises a batch as a [`BatchShape`] (sums per phase, built
//! while the batch is formed) so a model costs O(1) per step, whatever the
//! batch size. Four models ([`LatencyKind`] names them):
//!
//! * [`LatencyModel::TrainedPhysics`] (`trained-physics`, the default) —
//!   physics basis functions with trained coefficients, MoE/FP8/TP/DP aware
//!   (`latency-head.md` §2);
//! * [`LatencyModel::Roofline`] (`roofline`) — the reference's HEAD roofline,
//!   MoE- and FP8-aware (§3);
//! * [`LatencyModel::RooflineV1`] (`roofline-v1`) — the February 2026
//!   roofline (`core-engine.md` §6.3), kept so earlier results reproduce;
//! * [`LatencyModel::Linear`] (`linear`) — the February alpha/beta model (§6.2).
//!
//! Every float → tick conversion rounds to the nearest tick (spec/README.md
//! decision 20), and every model is validated when built, so evaluating one
//! never fails.
//!
//! Around the models live the facts they need, all bundled as data under
//! `host/data/` so a run needs no network:
//!
//! * [`ModelConfig`] — a transformer's shape (dense or MoE, quantised or
//!   not) from a HuggingFace `config.json` (bundled ones via
//!   [`ModelConfig::bundled`], any file via [`ModelConfig::from_path`]);
//! * [`GpuSpec`] — a GPU's peaks and memory ([`GpuSpec::bundled`]; the
//!   February table via [`GpuSpec::bundled_v1`]);
//! * [`lookup_linear_coefficients`] — calibrated alpha/beta sets (§6.6);
//! * [`derive_total_kv_blocks`] (HEAD rules) and [`derive_total_kv_blocks_v1`]
//!   — KV capacity from GPU memory and model size.
//!
//! [`build_latency`] puts them together the way a run file asks
//! ([`LatencySetup`] → [`BuiltLatency`]); the config layer needs nothing else.
//! This module knows nothing of TOML, the CLI or the engine's event loop.

mod capacity;
mod coefficients;
mod error;
mod gpu;
mod kv_v1;
mod model_config;
mod roofline;
mod roofline_v1;
mod setup;
mod trained_physics;

pub use capacity::{
    derive_total_kv_blocks, derive_total_kv_blocks_reserving,
    kv_bytes_per_token as kv_bytes_per_token_at_tp,
};
pub use coefficients::{
    calibrated_setups, coefficient_entries, default_hardware, lookup_entry,
    lookup_linear_coefficients, CoefficientEntry, DefaultHardware,
};
pub use error::LatencyError;
pub(crate) use gpu::hardware_file_names;
pub use gpu::{bundled_gpu_names, bundled_gpu_names_v1, same_gpu, GpuSpec};
pub use kv_v1::{derive_total_kv_blocks_v1, DEFAULT_GPU_MEMORY_UTILIZATION};
pub use model_config::{bundled_model_id, bundled_model_names, ModelConfig};
pub use roofline::RooflineModel;
pub use roofline_v1::{kv_bytes_per_token, weight_bytes, RooflineV1Model};
pub use setup::{build_latency, BuiltLatency, KvBlocksSource, LatencyKind, LatencySetup};
pub use trained_physics::{
    BasisTerms, ModelGeometry, MoeCommBackend, MoeExpertLoad, StepVariant, TrainedPhysicsModel,
    ITER29_ALPHA, ITER29_BETA,
};

use crate::engine::Tick;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_head;

/// Sums over the requests of one phase (prefill or decode) of a batch.
///
/// For request `i` with context `S_i` (tokens already computed) and `T_i` new
/// tokens this step:
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PhaseSums {
    /// Number of requests in this phase.
    pub requests: u32,
    /// `Σ T_i`.
    pub new_tokens: u64,
    /// `Σ S_i`.
    pub context_tokens: u64,
    /// `Σ T_i · (S_i + (T_i − 1) / 2)` — attention work (QKᵀ and AV). An
    /// integer (`T (T − 1)` is even), summed as one: exact, and a step's
    /// sum is no longer a chain of dependent floating-point additions.
    pub attention_tokens: u64,
    /// `Σ T_i · (2·In_i + T_i)`, where `In_i` is the length of the sequence
    /// being prefilled: twice trained-physics' `Σ T·(In + T/2)` (prefill
    /// only; an integer, exact).
    pub prompt_attention2: u64,
}

impl PhaseSums {
    /// Add one request with context `s` and `t` new tokens.
    #[inline]
    pub fn add(&mut self, s: u32, t: u32) {
        self.requests += 1;
        self.new_tokens += u64::from(t);
        self.context_tokens += u64::from(s);
        let (s, t) = (u64::from(s), u64::from(t));
        self.attention_tokens += t * s + t * t.saturating_sub(1) / 2;
    }

    /// Add one prefill request with context `s`, `t` new tokens and a
    /// sequence of `full` tokens to prefill (prompt, plus generated tokens
    /// when recomputing after preemption).
    #[inline]
    pub fn add_prefill(&mut self, s: u32, t: u32, full: u32) {
        self.add(s, t);
        let (t, full) = (u64::from(t), u64::from(full));
        self.prompt_attention2 += t * (2 * full + t);
    }
}

/// A batch as a latency model sees it. A request is in `decode` when its step
/// computes exactly the one token it emitted last; otherwise in `prefill`
/// (including chunks and recompute after preemption).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchShape {
    /// Requests computing prompt tokens (or recomputing after preemption).
    pub prefill: PhaseSums,
    /// Requests computing the one token they emitted last.
    pub decode: PhaseSums,
}

/// A step-time model, validated when built.
#[derive(Clone, Debug)]
pub enum LatencyModel {
    /// Trained physics-informed model (`latency-head.md` §2).
    TrainedPhysics(TrainedPhysicsModel),
    /// Analytical FLOPs/bytes model at HEAD (`latency-head.md` §3).
    Roofline(RooflineModel),
    /// The February 2026 roofline (`core-engine.md` §6.3).
    RooflineV1(RooflineV1Model),
    /// Calibrated alpha/beta model (§6.2).
    Linear(LinearModel),
}

/// `step = beta0 + beta1 · prefill_tokens + beta2 · decode_tokens`;
/// queueing delay `alpha0 + alpha1 · L`; per-token output overhead `alpha2`
/// (all in µs).
///
/// Build it with [`LinearModel::new`], which rejects negative and non-finite
/// coefficients; the fields are public for reading.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearModel {
    /// `[alpha0, alpha1, alpha2]`.
    pub alpha: [f64; 3],
    /// `[beta0, beta1, beta2]`.
    pub beta: [f64; 3],
}

impl LinearModel {
    /// A linear model, or an error naming the first coefficient that is
    /// negative or not finite (e.g. `beta[1] = -3 must be a finite number ≥ 0`).
    pub fn new(alpha: [f64; 3], beta: [f64; 3]) -> Result<Self, LatencyError> {
        validate_alpha(&alpha)?;
        validate_coefficients("beta", &beta)?;
        Ok(LinearModel { alpha, beta })
    }

    /// Step time in microseconds before rounding.
    #[inline]
    fn step_us(&self, shape: &BatchShape) -> f64 {
        self.beta[0]
            + self.beta[1] * shape.prefill.new_tokens as f64
            + self.beta[2] * shape.decode.new_tokens as f64
    }
}

/// Round a non-negative duration in microseconds to the nearest tick (half
/// away from zero).
#[inline]
pub fn round_tick(us: f64) -> Tick {
    us.round() as Tick
}

/// Largest α or β coefficient, µs (per step or per token): about 11.6
/// days. A larger one cannot be meant, and keeps simulated times far from
/// overflowing (see [`crate::engine::TIME_LIMIT`]).
pub const MAX_COEFFICIENT_US: f64 = 1e12;

/// Check that every entry of `values` is finite and in
/// [0, [`MAX_COEFFICIENT_US`]]; the error names `name[i]`.
pub fn validate_coefficients(name: &str, values: &[f64]) -> Result<(), LatencyError> {
    match values
        .iter()
        .position(|v| !(v.is_finite() && (0.0..=MAX_COEFFICIENT_US).contains(v)))
    {
        None => Ok(()),
        Some(i) => Err(LatencyError::InvalidCoefficient {
            name: format!("{name}[{i}]"),
            value: values[i],
        }),
    }
}

/// Check the alpha coefficients (finite, in [0, [`MAX_COEFFICIENT_US`]]).
pub fn validate_alpha(alpha: &[f64; 3]) -> Result<(), LatencyError> {
    validate_coefficients("alpha", alpha)
}

/// Check that `model`, `gpu` and `tp` can drive `roofline-v1` and the
/// February KV derivation (§6.4). Every problem is reported, in one error.
pub fn validate_roofline_v1(
    model: &ModelConfig,
    gpu: &GpuSpec,
    tp: u32,
) -> Result<(), LatencyError> {
    let mut problems = model.problems();
    problems.extend(gpu.problems_v1());
    if tp == 0 {
        problems.push("tensor parallelism (tp) must be ≥ 1".into());
    } else if model.num_heads > 0 && model.num_heads % tp != 0 {
        // vLLM shards attention heads evenly over the GPUs.
        let divisors: Vec<String> = (1..=model.num_heads)
            .filter(|d| model.num_heads % d == 0 && *d <= 64)
            .map(|d| d.to_string())
            .collect();
        problems.push(format!(
            "tensor parallelism tp = {tp} does not divide the {} attention heads of model {}; use one of {}",
            model.num_heads,
            model.name,
            divisors.join(", ")
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(LatencyError::InvalidRoofline { problems })
    }
}

impl LatencyModel {
    /// Duration of one step over `shape`, rounded to the nearest tick.
    #[inline]
    pub fn step_time(&self, shape: &BatchShape) -> Tick {
        match self {
            LatencyModel::TrainedPhysics(m) => m.step_time(shape),
            LatencyModel::Roofline(m) => m.step_time(shape),
            LatencyModel::RooflineV1(m) => m.step_time(shape),
            LatencyModel::Linear(m) => round_tick(m.step_us(shape)),
        }
    }

    /// The alpha coefficients `[alpha0, alpha1, alpha2]` (every model has
    /// them; trained-physics reads `alpha1` as its post-decode overhead).
    #[inline]
    pub fn alpha(&self) -> &[f64; 3] {
        match self {
            LatencyModel::TrainedPhysics(m) => &m.alpha,
            LatencyModel::Roofline(m) => &m.alpha,
            LatencyModel::RooflineV1(m) => &m.alpha,
            LatencyModel::Linear(m) => &m.alpha,
        }
    }

    /// Delay between a request reaching the instance and entering its wait
    /// queue: `round(alpha0)` for trained-physics, else
    /// `round(alpha0 + alpha1 · input_len)`.
    #[inline]
    pub fn queueing_delay(&self, input_len: u32) -> Tick {
        let a = self.alpha();
        match self {
            LatencyModel::TrainedPhysics(_) => round_tick(a[0]),
            _ => round_tick(a[0] + a[1] * f64::from(input_len)),
        }
    }

    /// Per-token output processing overhead, `round(alpha2)` (added to every
    /// token's delivery time).
    #[inline]
    pub fn output_token_overhead(&self) -> Tick {
        round_tick(self.alpha()[2])
    }

    /// Fixed time between a request's last token and its completion as the
    /// client sees it: `round(alpha1)` for trained-physics (it adds to E2E,
    /// not to TTFT or ITL), 0 for the other models.
    #[inline]
    pub fn post_decode_overhead(&self) -> Tick {
        match self {
            LatencyModel::TrainedPhysics(m) => round_tick(m.alpha[1]),
            _ => 0,
        }
    }

    /// The beta coefficients the model uses: trained-physics' eleven slots,
    /// the linear `[beta0, beta1, beta2]`; `None` for the rooflines.
    pub fn beta(&self) -> Option<&[f64]> {
        match self {
            LatencyModel::TrainedPhysics(m) => Some(m.beta()),
            LatencyModel::Linear(m) => Some(&m.beta),
            LatencyModel::Roofline(_) | LatencyModel::RooflineV1(_) => None,
        }
    }

    /// The model's name as a run file spells it.
    pub fn name(&self) -> &'static str {
        match self {
            LatencyModel::TrainedPhysics(_) => "trained-physics",
            LatencyModel::Roofline(_) => "roofline",
            LatencyModel::RooflineV1(_) => "roofline-v1",
            LatencyModel::Linear(_) => "linear",
        }
    }
}

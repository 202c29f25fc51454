//! Step-time models: how long one batch step takes.
//!
//! The engine summarises a batch as a [`BatchShape`] (sums per phase, built
//! while the batch is formed) so a model costs O(1) per step, whatever the
//! batch size. Two models: [`LatencyModel::Linear`] (alpha/beta coefficients)
//! and [`LatencyModel::Roofline`] (FLOPs and bytes from a model config and a
//! GPU's specs). Every float → tick conversion rounds to the nearest tick.

use crate::engine::Tick;

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
    /// `Σ T_i · (S_i + (T_i − 1) / 2)` — attention work (QKᵀ and AV).
    pub attention_tokens: f64,
}

impl PhaseSums {
    /// Add one request with context `s` and `t` new tokens.
    #[inline]
    pub fn add(&mut self, s: u32, t: u32) {
        self.requests += 1;
        self.new_tokens += u64::from(t);
        self.context_tokens += u64::from(s);
        let (s, t) = (f64::from(s), f64::from(t));
        self.attention_tokens += t * (s + (t - 1.0) / 2.0);
    }
}

/// A batch as a latency model sees it. A request is in `decode` when its step
/// computes exactly the one token it emitted last; otherwise in `prefill`
/// (including chunks and recompute after preemption).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchShape {
    pub prefill: PhaseSums,
    pub decode: PhaseSums,
}

/// A step-time model.
#[derive(Clone, Debug)]
pub enum LatencyModel {
    Linear(LinearModel),
}

/// `step = beta0 + beta1 · prefill_tokens + beta2 · decode_tokens`;
/// queueing delay `alpha0 + alpha1 · L`; per-token output overhead `alpha2`.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearModel {
    pub alpha: [f64; 3],
    pub beta: [f64; 3],
}

/// Round a non-negative duration in microseconds to the nearest tick.
#[inline]
pub fn round_tick(us: f64) -> Tick {
    us.round() as Tick
}

impl LatencyModel {
    /// Duration of one step over `shape`.
    pub fn step_time(&self, shape: &BatchShape) -> Tick {
        match self {
            LatencyModel::Linear(m) => round_tick(
                m.beta[0]
                    + m.beta[1] * shape.prefill.new_tokens as f64
                    + m.beta[2] * shape.decode.new_tokens as f64,
            ),
        }
    }

    /// Delay between a request reaching the instance and entering its wait queue.
    pub fn queueing_delay(&self, input_len: u32) -> Tick {
        match self {
            LatencyModel::Linear(m) => round_tick(m.alpha[0] + m.alpha[1] * f64::from(input_len)),
        }
    }

    /// Per-token output processing overhead (added to every token's delivery time).
    pub fn output_token_overhead(&self) -> Tick {
        match self {
            LatencyModel::Linear(m) => round_tick(m.alpha[2]),
        }
    }
}

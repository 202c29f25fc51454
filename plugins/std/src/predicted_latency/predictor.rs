//! The router-side latency predictor of llm-d's `predicted-latency-producer`
//! (llm-d-router.md §5.1), trained online on the requests it routes.
//!
//! Features of a (request, instance) pair, llm-d's: the instance's KV
//! utilisation and waiting queue (its last snapshot), the prompt length, the
//! router's own in-flight requests and in-flight uncached prompt tokens on the
//! instance (released at the first token, as `inflight-load-producer` does)
//! and the fraction of the prompt's blocks the router-side prefix index holds
//! for it. llm-d trains gradient-boosted trees in a sidecar; here each target
//! is a ridge regression, linear in those features plus the uncached prompt
//! `L·(1 − prefix ratio)` (the product a tree finds by itself), refitted on
//! the latest `window` samples every `retrain_interval_us` of simulated time
//! once `min_samples` have completed (llm-d: every 10 s after 100 samples).
//! Until then there is no prediction, as when llm-d's sidecar has no model.
//!
//! Targets, in ms from dispatch (the routing decision): TTFT to the first
//! token when `streaming`, else to the last (llm-d's non-streaming mode
//! trains its "TTFT" on E2E); TPOT (streaming only) `(E2E − TTFT)/(output −
//! 1)`. Features are taken at dispatch, on the chosen instance.

use std::collections::HashMap;

use blis_plugin_api::{headers, ClusterView, EventKind, Hooks, RequestEvent, RequestView};
use serde::Deserialize;

use crate::prefix_index::RequestMatches;

/// The lifecycle events the predictor learns from.
pub const HOOKS: Hooks = Hooks::of(EventKind::FIRST_TOKEN)
    .with(EventKind::COMPLETED)
    .with(EventKind::DROPPED);

/// Documentation of the `predictor` table every predicted-latency policy
/// takes (a literal, to end each policy's `PARAMS_DOC` with `concat!`).
macro_rules! predictor_doc {
    () => {
        "\
predictor            (table, optional)  the latency predictor, shared keys:
  streaming          (bool, default false)  train TTFT to the first token and
                     predict TPOT (llm-d's streamingMode); false: TTFT is
                     trained on E2E and TPOT headroom is 0.
  slo_buffer         (number > 0, default 1.0)  TPOT SLO multiplier
                     (sloBufferFactor).
  block_size         (integer ≥ 1, tokens, default 16)  tokens per prompt
                     block hash: the run's KV block size.
  capacity           (integer ≥ 1, default 31250)  block hashes per instance
                     in the router-side prefix index.
  min_samples        (integer ≥ 1, default 100)  completed requests before
                     the first fit.
  retrain_interval_us (integer ≥ 1, µs, default 10000000)  refit period.
  window             (integer ≥ 10, default 2000)  latest samples fitted.
  prompt             (bool, default true)  false: the router sees no prompt
                     (llm-d with passthrough-parser alone): prompt length,
                     prefix ratio and uncached tokens are all 0.
"
    };
}
pub(crate) use predictor_doc;

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct PredictorParams {
    streaming: bool,
    slo_buffer: f64,
    block_size: u32,
    capacity: usize,
    min_samples: usize,
    retrain_interval_us: i64,
    window: usize,
    prompt: bool,
}

impl Default for PredictorParams {
    fn default() -> Self {
        PredictorParams {
            streaming: false,
            slo_buffer: 1.0,
            block_size: 16,
            capacity: 31_250,
            min_samples: 100,
            retrain_interval_us: 10_000_000,
            window: 2000,
            prompt: true,
        }
    }
}

impl PredictorParams {
    fn check(&self) -> Result<(), String> {
        let p = "params.predictor";
        if !(self.slo_buffer.is_finite() && self.slo_buffer > 0.0) {
            return Err(format!(
                "{p}.slo_buffer = {}: must be a finite number > 0",
                self.slo_buffer
            ));
        }
        if self.block_size == 0 || self.capacity == 0 || self.min_samples == 0 {
            return Err(format!(
                "{p}: block_size, capacity and min_samples must each be at least 1"
            ));
        }
        if self.retrain_interval_us <= 0 {
            return Err(format!("{p}.retrain_interval_us must be at least 1"));
        }
        if self.window < 10 || self.window < self.min_samples {
            return Err(format!(
                "{p}.window = {}: must be at least 10 and at least min_samples ({})",
                self.window, self.min_samples
            ));
        }
        Ok(())
    }
}

/// The request's SLO targets in ms from its client's headers (llm-d's
/// `x-llm-d-slo-ttft-ms` / `x-llm-d-slo-tpot-ms`, aliases `x-slo-…`);
/// 0 when absent or not a number.
pub fn slo_targets(req: &RequestView<'_>) -> (f64, f64) {
    let read = |name: &str, alias: &str| {
        headers::request_header(req, name)
            .or_else(|| headers::request_header(req, alias))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v > 0.0)
            .unwrap_or(0.0)
    };
    (
        read("x-llm-d-slo-ttft-ms", "x-slo-ttft-ms"),
        read("x-llm-d-slo-tpot-ms", "x-slo-tpot-ms"),
    )
}

/// What the predictor says about one candidate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    pub ttft_ms: f64,
    pub tpot_ms: f64,
    /// SLO − prediction (negative when the SLO is missed or absent).
    pub ttft_headroom: f64,
    pub tpot_headroom: f64,
}

impl Prediction {
    /// Both headrooms ≥ 0 (llm-d's positive tier).
    pub fn positive(&self) -> bool {
        self.ttft_headroom >= 0.0 && self.tpot_headroom >= 0.0
    }

    /// TTFT < SLO and TPOT within its bound (llm-d's "valid" prediction).
    pub fn valid(&self) -> bool {
        self.ttft_headroom > 0.0 && self.tpot_headroom >= 0.0
    }
}

/// The features of one (request, instance) pair.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Features {
    kv: f64,
    waiting: f64,
    running: f64,
    input: f64,
    tokens_in_flight: f64,
    prefix_ratio: f64,
}

const TTFT_D: usize = 7;
const TPOT_D: usize = 6;

impl Features {
    fn ttft(&self) -> [f64; TTFT_D] {
        [
            1.0,
            self.kv,
            self.waiting,
            self.running,
            self.input / 1e3,
            self.tokens_in_flight / 1e3,
            self.input * (1.0 - self.prefix_ratio) / 1e3,
        ]
    }

    fn tpot(&self) -> [f64; TPOT_D] {
        [
            1.0,
            self.kv,
            self.waiting,
            self.running,
            self.input / 1e3,
            self.tokens_in_flight / 1e3,
        ]
    }
}

/// A ridge regression over the latest `window` samples.
pub(crate) struct Ridge<const D: usize> {
    samples: Vec<([f64; D], f64)>,
    /// Next slot to overwrite once `samples` is full.
    next: usize,
    window: usize,
    weights: Option<[f64; D]>,
}

/// Ridge penalty on every weight but the intercept.
const LAMBDA: f64 = 1e-3;

impl<const D: usize> Ridge<D> {
    pub fn new(window: usize) -> Self {
        Ridge {
            samples: Vec::new(),
            next: 0,
            window,
            weights: None,
        }
    }

    pub fn add(&mut self, x: [f64; D], y: f64) {
        if self.samples.len() < self.window {
            self.samples.push((x, y));
        } else {
            self.samples[self.next] = (x, y);
            self.next = (self.next + 1) % self.window;
        }
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Solve (XᵀX + λI′) w = Xᵀy; keep the old weights if it is singular.
    pub fn fit(&mut self) {
        let mut a = [[0.0f64; D]; D];
        let mut b = [0.0f64; D];
        for (x, y) in &self.samples {
            for r in 0..D {
                b[r] += x[r] * y;
                for c in 0..D {
                    a[r][c] += x[r] * x[c];
                }
            }
        }
        for (r, row) in a.iter_mut().enumerate().skip(1) {
            row[r] += LAMBDA * self.samples.len() as f64;
        }
        if let Some(w) = solve(a, b) {
            self.weights = Some(w);
        }
    }

    pub fn predict(&self, x: &[f64; D]) -> Option<f64> {
        let w = self.weights.as_ref()?;
        Some(w.iter().zip(x).map(|(w, x)| w * x).sum::<f64>().max(0.0))
    }
}

/// Gaussian elimination with partial pivoting.
fn solve<const D: usize>(mut a: [[f64; D]; D], mut b: [f64; D]) -> Option<[f64; D]> {
    for col in 0..D {
        let pivot = (col..D).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        let pivot_row = a[col];
        for r in col + 1..D {
            let f = a[r][col] / pivot_row[col];
            for (x, p) in a[r][col..].iter_mut().zip(&pivot_row[col..]) {
                *x -= f * p;
            }
            b[r] -= f * b[col];
        }
    }
    let mut w = [0.0; D];
    for r in (0..D).rev() {
        let s: f64 = (r + 1..D).map(|c| a[r][c] * w[c]).sum();
        w[r] = (b[r] - s) / a[r][r];
    }
    w.iter().all(|v| v.is_finite()).then_some(w)
}

/// A routed request not yet finished.
struct Pending {
    instance: usize,
    /// Uncached prompt tokens charged to the instance until the first token.
    tokens: u64,
    features: Features,
    dispatch_us: i64,
    first_token_us: Option<i64>,
    /// Its TPOT SLO (ms, 0 = none), for streaming mode's bound.
    tpot_slo: f64,
}

/// llm-d's predicted-latency producer with the in-flight counts and prefix
/// index it reads.
pub struct Predictor {
    p: PredictorParams,
    prompts: RequestMatches,
    requests: Vec<u32>,
    tokens: Vec<u64>,
    pending: HashMap<u64, Pending>,
    ttft: Ridge<TTFT_D>,
    tpot: Ridge<TPOT_D>,
    last_fit_us: Option<i64>,
}

impl Predictor {
    pub fn new(p: Option<PredictorParams>) -> Result<Predictor, String> {
        let p = p.unwrap_or_default();
        p.check()?;
        Ok(Predictor {
            prompts: RequestMatches::new(p.capacity, p.block_size),
            ttft: Ridge::new(p.window),
            tpot: Ridge::new(p.window),
            p,
            requests: Vec::new(),
            tokens: Vec::new(),
            pending: HashMap::new(),
            last_fit_us: None,
        })
    }

    fn grow(&mut self, n: usize) {
        if self.requests.len() < n {
            self.requests.resize(n, 0);
            self.tokens.resize(n, 0);
        }
    }

    /// The fraction of `req`'s prompt blocks the index holds for instance `i`
    /// (after [`Predictor::prepare`]).
    pub fn prefix_ratio(&self, req: &RequestView<'_>, i: usize) -> f64 {
        let total = req.block_hashes.len();
        if total == 0 || !self.p.prompt {
            0.0
        } else {
            f64::from(self.prompts.matched(i)) / total as f64
        }
    }

    /// The router's in-flight requests and uncached prompt tokens on `i`.
    pub fn in_flight(&self, i: usize) -> (u32, u64) {
        (self.requests[i], self.tokens[i])
    }

    /// Make the per-request state ready for `req` on a cluster of `n`.
    pub fn prepare(&mut self, req: &RequestView<'_>, n: usize) {
        self.grow(n);
        self.prompts.prepare(req, n);
    }

    fn features(&self, req: &RequestView<'_>, cluster: &ClusterView<'_>, i: usize) -> Features {
        let s = &cluster.instances[i];
        let (input, prefix_ratio) = if self.p.prompt {
            (f64::from(req.input_tokens), self.prefix_ratio(req, i))
        } else {
            (0.0, 0.0)
        };
        Features {
            kv: s.kv_utilization,
            waiting: f64::from(s.queue_depth),
            running: f64::from(self.requests[i]),
            input,
            tokens_in_flight: self.tokens[i] as f64,
            prefix_ratio,
        }
    }

    fn uncached(&self, req: &RequestView<'_>, i: usize) -> u64 {
        if !self.p.prompt {
            return 0;
        }
        self.prompts.uncached(req, i)
    }

    /// The prediction for `req` on instance `i` with SLO targets `slo`
    /// (ms; 0 = none), or `None` before the first fit. Call
    /// [`Predictor::prepare`] first.
    pub fn predict(
        &self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        i: usize,
        slo: (f64, f64),
    ) -> Option<Prediction> {
        let f = self.features(req, cluster, i);
        let ttft_ms = self.ttft.predict(&f.ttft())?;
        let (tpot_ms, tpot_headroom) = if self.p.streaming {
            let tpot = self.tpot.predict(&f.tpot()).unwrap_or(0.0);
            let mut bound = slo.1;
            for q in self.pending.values() {
                if q.instance == i && q.tpot_slo > 0.0 && (bound <= 0.0 || q.tpot_slo < bound) {
                    bound = q.tpot_slo;
                }
            }
            (tpot, bound * self.p.slo_buffer - tpot)
        } else {
            (0.0, 0.0)
        };
        Some(Prediction {
            ttft_ms,
            tpot_ms,
            ttft_headroom: slo.0 - ttft_ms,
            tpot_headroom,
        })
    }

    /// After the routing decision: `req` goes to `chosen` now.
    pub fn dispatched(&mut self, req: &RequestView<'_>, cluster: &ClusterView<'_>, chosen: usize) {
        let n = cluster.len().max(chosen + 1);
        self.prepare(req, n);
        let features = if chosen < cluster.len() {
            self.features(req, cluster, chosen)
        } else {
            Features::default()
        };
        let tokens = self.uncached(req, chosen);
        self.requests[chosen] += 1;
        self.tokens[chosen] += tokens;
        self.pending.insert(
            req.id,
            Pending {
                instance: chosen,
                tokens,
                features,
                dispatch_us: cluster.clock_us,
                first_token_us: None,
                tpot_slo: if self.p.streaming {
                    slo_targets(req).1
                } else {
                    0.0
                },
            },
        );
        self.prompts.record(req, chosen);
    }

    fn release_tokens(&mut self, q: &mut Pending) {
        let t = &mut self.tokens[q.instance];
        *t = t.saturating_sub(q.tokens);
        q.tokens = 0;
    }

    /// A lifecycle event: release the counts and learn from what finished.
    pub fn on_event(&mut self, e: &RequestEvent<'_>) {
        let Some(mut q) = self.pending.remove(&e.request.id) else {
            return;
        };
        match e.kind {
            EventKind::FIRST_TOKEN => {
                self.release_tokens(&mut q);
                q.first_token_us = Some(e.time_us);
                self.pending.insert(e.request.id, q);
                return;
            }
            EventKind::COMPLETED => {
                let ms = |us: i64| (us - q.dispatch_us) as f64 / 1e3;
                let e2e = ms(e.time_us);
                let first = q.first_token_us.map_or(e2e, ms);
                let ttft = if self.p.streaming { first } else { e2e };
                self.ttft.add(q.features.ttft(), ttft);
                if self.p.streaming && e.output_tokens > 1 {
                    let tpot = (e2e - first) / f64::from(e.output_tokens - 1);
                    self.tpot.add(q.features.tpot(), tpot);
                }
                self.maybe_fit(e.time_us);
            }
            _ => {}
        }
        self.release_tokens(&mut q);
        let r = &mut self.requests[q.instance];
        *r = r.saturating_sub(1);
    }

    fn maybe_fit(&mut self, now: i64) {
        if self.ttft.len() < self.p.min_samples {
            return;
        }
        if let Some(t) = self.last_fit_us {
            if now - t < self.p.retrain_interval_us {
                return;
            }
        }
        self.ttft.fit();
        if self.tpot.len() >= self.p.min_samples {
            self.tpot.fit();
        }
        self.last_fit_us = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact data from y = 2 + 3·x₁ − x₂ is recovered (the ridge penalty
    /// scaled by n bends it by well under a percent).
    #[test]
    fn ridge_recovers_a_linear_law() {
        let mut r: Ridge<3> = Ridge::new(100);
        for i in 0..50 {
            let x1 = f64::from(i % 7);
            let x2 = f64::from(i % 5) * 2.0;
            r.add([1.0, x1, x2], 2.0 + 3.0 * x1 - x2);
        }
        r.fit();
        let w = r.weights.unwrap();
        assert!(
            (w[1] - 3.0).abs() < 0.01 && (w[2] + 1.0).abs() < 0.01,
            "{w:?}"
        );
        assert!((r.predict(&[1.0, 4.0, 1.0]).unwrap() - 13.0).abs() < 0.05);
        // A window keeps only the latest samples: refit on a new law.
        let mut r: Ridge<2> = Ridge::new(20);
        for i in 0..40 {
            let x = f64::from(i % 4);
            let y = if i < 20 { 10.0 * x } else { x + 1.0 };
            r.add([1.0, x], y);
        }
        r.fit();
        assert!((r.predict(&[1.0, 3.0]).unwrap() - 4.0).abs() < 0.05);
    }

    #[test]
    fn a_singular_system_keeps_no_weights() {
        let mut r: Ridge<2> = Ridge::new(10);
        r.add([0.0, 0.0], 1.0);
        r.fit();
        assert!(r.predict(&[1.0, 0.0]).is_none());
    }
}

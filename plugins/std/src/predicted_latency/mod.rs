//! llm-d's predicted-latency routing (llm-d-router.md §5): the
//! `latency-scorer`, the `slo-headroom-tier-filter`, the
//! `latency-slo-admitter` and the `prefix-cache-affinity-filter`, each with
//! the router-side latency predictor they read ([`predictor`]).
//!
//! In llm-d one `predicted-latency-producer` feeds them all. A blis policy
//! owns its state, so each of these policies trains its own predictor on
//! the same requests with the same parameters (its `predictor` table): they
//! see the same decisions and lifecycle events, so their models are the same
//! numbers. SLO targets come from the headers the request's client sends
//! (`x-llm-d-slo-ttft-ms`, `x-llm-d-slo-tpot-ms`; see
//! [`blis_plugin_api::headers`]).

pub mod predictor;

use blis_plugin_api::{
    Admission, ClusterState, ClusterView, Filter, Hooks, Kept, Params, PolicyDef, RequestEvent,
    RequestView, Rng, Scorer, Scores,
};
use serde::Deserialize;

use predictor::{slo_targets, Prediction, Predictor, PredictorParams};

/// The predictions for `req` on `instances` (every entry `None` before the
/// predictor's first fit).
fn predictions(
    p: &mut Predictor,
    req: &RequestView<'_>,
    cluster: &ClusterView<'_>,
    instances: impl Iterator<Item = usize>,
) -> Vec<Option<Prediction>> {
    p.prepare(req, cluster.len());
    let slo = slo_targets(req);
    instances.map(|i| p.predict(req, cluster, i, slo)).collect()
}

// ---------------------------------------------------------------- scorer

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct LatencyParams {
    ttft_weight: f64,
    tpot_weight: f64,
    strategy: String,
    composite_kv_weight: f64,
    composite_queue_weight: f64,
    composite_prefix_weight: f64,
    predictor: Option<PredictorParams>,
}

impl Default for LatencyParams {
    fn default() -> Self {
        LatencyParams {
            ttft_weight: 0.8,
            tpot_weight: 0.2,
            strategy: "least".into(),
            composite_kv_weight: 1.0,
            composite_queue_weight: 1.0,
            composite_prefix_weight: 1.0,
            predictor: None,
        }
    }
}

/// llm-d's `latency-scorer`: rates candidates by their predicted SLO
/// headroom (§5.2).
pub struct Latency {
    ttft_weight: f64,
    tpot_weight: f64,
    /// `most` headroom first (else `least`: pack where it just fits).
    most: bool,
    composite: [f64; 3],
    predictor: Predictor,
}

impl PolicyDef for Latency {
    const NAME: &'static str = "latency";
    const SUMMARY: &'static str =
        "score by predicted TTFT/TPOT headroom against the request's SLO headers (llm-d's latency-scorer)";
    const PARAMS_DOC: &'static str = concat!(
        "\
ttft_weight          (number ≥ 0, default 0.8)  weight of the normalised
                     TTFT headroom.
tpot_weight          (number ≥ 0, default 0.2)  weight of the TPOT headroom.
strategy             (\"least\" | \"most\", default least)  prefer the
                     candidates with the least headroom that still meets the
                     SLO (packing), or the most.
composite_kv_weight  (number ≥ 0, default 1)  before the predictor's first
                     fit the score is the weighted mean of (1 − kv), ...
composite_queue_weight (number ≥ 0, default 1)  ... the relative waiting
                     queue (max − q)/max, ...
composite_prefix_weight (number ≥ 0, default 1)  ... and the prefix ratio.
The request's SLOs are its client's x-llm-d-slo-ttft-ms / x-llm-d-slo-tpot-ms
headers. Candidates meeting both SLOs score by headroom, the others 0; when
none meets them: the instances the router has nothing in flight on, else the
least negative tier.
",
        predictor::predictor_doc!()
    );
    const HOOKS: Hooks = predictor::HOOKS;
    const USES_STATE: bool = true;

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: LatencyParams = params.parse()?;
        for (k, v) in [
            ("ttft_weight", p.ttft_weight),
            ("tpot_weight", p.tpot_weight),
            ("composite_kv_weight", p.composite_kv_weight),
            ("composite_queue_weight", p.composite_queue_weight),
            ("composite_prefix_weight", p.composite_prefix_weight),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("params.{k} = {v}: must be a finite number ≥ 0"));
            }
        }
        let most = match p.strategy.as_str() {
            "least" => false,
            "most" => true,
            s => {
                return Err(format!(
                    "params.strategy = \"{s}\": accepted values are \"least\" and \"most\""
                ))
            }
        };
        Ok(Latency {
            ttft_weight: p.ttft_weight,
            tpot_weight: p.tpot_weight,
            most,
            composite: [
                p.composite_kv_weight,
                p.composite_queue_weight,
                p.composite_prefix_weight,
            ],
            predictor: Predictor::new(p.predictor)?,
        })
    }

    fn on_event(&mut self, event: &RequestEvent<'_>, _cluster: &ClusterState<'_>) {
        self.predictor.on_event(event);
    }
}

impl Latency {
    /// The score before any prediction: kv, waiting queue and prefix terms.
    fn composite(&self, req: &RequestView<'_>, cluster: &ClusterState<'_>, scores: &mut Scores) {
        let sum: f64 = self.composite.iter().sum();
        let [wk, wq, wp] = if sum <= 0.0 {
            [1.0, 0.0, 0.0]
        } else {
            self.composite.map(|w| w / sum)
        };
        let snaps = cluster.view.instances();
        let cands = cluster.candidates();
        let max_q = cands
            .iter()
            .map(|&i| snaps[i as usize].queue_depth)
            .max()
            .unwrap_or(0);
        for &i in cands {
            let s = &snaps[i as usize];
            let q = if max_q == 0 {
                1.0
            } else {
                f64::from(max_q - s.queue_depth) / f64::from(max_q)
            };
            let v = wk * (1.0 - s.kv_utilization)
                + wq * q
                + wp * self.predictor.prefix_ratio(req, i as usize);
            scores.push((100.0 * v).round() / 100.0);
        }
    }
}

/// Score `bucket` (indices into `preds`) into `scores` (llm-d's bucket
/// scoring, §5.2 step 4); the rest keep their score.
fn score_bucket(
    preds: &[Option<Prediction>],
    bucket: &[usize],
    weights: (f64, f64),
    most: bool,
    scores: &mut [f64],
) {
    let sum = weights.0 + weights.1;
    let (mut a, mut b) = if sum <= 0.0 {
        (1.0, 0.0)
    } else {
        (weights.0 / sum, weights.1 / sum)
    };
    let head = |k: usize| preds[k].map_or((0.0, 0.0), |p| (p.ttft_headroom, p.tpot_headroom));
    let range = |f: &dyn Fn(usize) -> f64| {
        let lo = bucket.iter().map(|&k| f(k)).fold(f64::INFINITY, f64::min);
        let hi = bucket
            .iter()
            .map(|&k| f(k))
            .fold(f64::NEG_INFINITY, f64::max);
        (lo, hi - lo)
    };
    let (t_lo, t_range) = range(&|k| head(k).0.abs());
    let (p_lo, p_range) = range(&|k| head(k).1.abs());
    let flat_t = t_range <= 1e-9;
    let flat_p = p_range <= 1e-9;
    if flat_t && !flat_p {
        b += a;
        a = 0.0;
    } else if flat_p && !flat_t {
        a += b;
        b = 0.0;
    }
    for &k in bucket {
        let (t, p) = head(k);
        let nt = if flat_t {
            0.5
        } else {
            (t.abs() - t_lo) / t_range
        };
        let np = if flat_p {
            0.5
        } else {
            (p.abs() - p_lo) / p_range
        };
        let c = a * nt + b * np;
        let v = if most { c } else { 1.0 - c };
        scores[k] = (((v * 100.0).floor() + 1.0) / 100.0).min(1.0);
    }
}

/// The latency scores of candidates with predictions `preds` (`idle[k]`:
/// the router has nothing in flight on candidate `k`), §5.2 steps 2–4.
fn rank(preds: &[Option<Prediction>], idle: &[bool], weights: (f64, f64), most: bool) -> Vec<f64> {
    let mut out = vec![0.0; preds.len()];
    let all = 0..preds.len();
    let positive: Vec<usize> = all
        .clone()
        .filter(|&k| preds[k].is_none_or(|p| p.positive()))
        .collect();
    if !positive.is_empty() {
        score_bucket(preds, &positive, weights, most, &mut out);
        return out;
    }
    let tier = |f: &dyn Fn(&Prediction) -> bool| -> Vec<usize> {
        all.clone()
            .filter(|&k| preds[k].is_some_and(|p| f(&p)))
            .collect()
    };
    let bucket = [
        all.clone().filter(|&k| idle[k]).collect(),
        tier(&|p| p.ttft_headroom >= 0.0 && p.tpot_headroom < 0.0),
        tier(&|p| p.ttft_headroom < 0.0 && p.tpot_headroom >= 0.0),
        tier(&|p| p.ttft_headroom < 0.0 && p.tpot_headroom < 0.0),
    ]
    .into_iter()
    .find(|b: &Vec<usize>| !b.is_empty())
    .unwrap_or_default();
    score_bucket(preds, &bucket, weights, false, &mut out);
    out
}

impl Scorer for Latency {
    fn score_candidates(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        scores: &mut Scores,
    ) {
        let cands = cluster.candidates();
        let preds = predictions(
            &mut self.predictor,
            req,
            &cluster.view,
            cands.iter().map(|&i| i as usize),
        );
        if preds.iter().all(Option::is_none) {
            return self.composite(req, cluster, scores);
        }
        let idle: Vec<bool> = cands
            .iter()
            .map(|&i| self.predictor.in_flight(i as usize).0 == 0)
            .collect();
        let weights = (self.ttft_weight, self.tpot_weight);
        let out = rank(&preds, &idle, weights, self.most);
        scores.extend(out);
    }

    fn observe(&mut self, req: &RequestView<'_>, cluster: &ClusterView<'_>, chosen: usize) {
        self.predictor.dispatched(req, cluster, chosen);
    }
}

// ---------------------------------------------------------------- tier filter

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct TierParams {
    epsilon_explore_neg: f64,
    predictor: Option<PredictorParams>,
}

impl Default for TierParams {
    fn default() -> Self {
        TierParams {
            epsilon_explore_neg: 0.01,
            predictor: None,
        }
    }
}

/// llm-d's `slo-headroom-tier-filter` (§5.3): keep the candidates predicted
/// to meet both SLOs, or (with probability ε, or when none does) the rest.
pub struct SloHeadroomTier {
    epsilon: f64,
    rng: Rng,
    predictor: Predictor,
}

impl PolicyDef for SloHeadroomTier {
    const NAME: &'static str = "slo-headroom-tier";
    const SUMMARY: &'static str =
        "keep the candidates predicted to meet the request's SLOs (llm-d's slo-headroom-tier-filter)";
    const PARAMS_DOC: &'static str = concat!(
        "\
epsilon_explore_neg  (number in [0, 1], default 0.01)  probability of keeping
                     the candidates predicted to miss instead, when both
                     tiers exist (one seeded draw).
Before the predictor's first fit every candidate is kept.
",
        predictor::predictor_doc!()
    );
    const HOOKS: Hooks = predictor::HOOKS;

    fn create(params: Params<'_>, seed: u64) -> Result<Self, String> {
        let p: TierParams = params.parse()?;
        if !(0.0..=1.0).contains(&p.epsilon_explore_neg) {
            return Err(format!(
                "params.epsilon_explore_neg = {}: must be in [0, 1]",
                p.epsilon_explore_neg
            ));
        }
        Ok(SloHeadroomTier {
            epsilon: p.epsilon_explore_neg,
            rng: Rng::new(seed),
            predictor: Predictor::new(p.predictor)?,
        })
    }

    fn on_event(&mut self, event: &RequestEvent<'_>, _cluster: &ClusterState<'_>) {
        self.predictor.on_event(event);
    }
}

impl Filter for SloHeadroomTier {
    fn filter(&mut self, req: &RequestView<'_>, cluster: &ClusterState<'_>, keep: &mut Kept) {
        let cands = cluster.candidates();
        if cands.len() <= 1 {
            keep.extend(cands.iter().copied());
            return;
        }
        let preds = predictions(
            &mut self.predictor,
            req,
            &cluster.view,
            cands.iter().map(|&i| i as usize),
        );
        if preds.iter().all(Option::is_none) {
            keep.extend(cands.iter().copied());
            return;
        }
        let positive = |k: &usize| preds[*k].is_some_and(|p| p.positive());
        let (pos, neg): (Vec<usize>, Vec<usize>) = (0..cands.len()).partition(positive);
        let tier = if pos.is_empty() {
            neg
        } else if neg.is_empty() {
            pos
        } else if self.rng.next_f64() < self.epsilon {
            neg
        } else {
            pos
        };
        keep.extend(tier.into_iter().map(|k| cands[k]));
    }

    fn observe(&mut self, req: &RequestView<'_>, cluster: &ClusterView<'_>, chosen: usize) {
        self.predictor.dispatched(req, cluster, chosen);
    }
}

// ---------------------------------------------------------------- admitter

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct AdmitterParams {
    saturation_queue_depth: Option<f64>,
    saturation_kv: Option<f64>,
    predictor: Option<PredictorParams>,
}

/// llm-d's `latency-slo-admitter` (§5.3): a sheddable request with an SLO is
/// refused when no instance is predicted to meet it, unless some instance
/// runs nothing or has KV utilisation under 0.02.
pub struct LatencySlo {
    /// llm-d's legacy admission controller before the admitter: (queue
    /// depth, KV) thresholds of its saturation.
    saturation: Option<(f64, f64)>,
    predictor: Predictor,
}

impl PolicyDef for LatencySlo {
    const NAME: &'static str = "latency-slo";
    const SUMMARY: &'static str =
        "reject a sheddable request no instance is predicted to serve within its SLO headers (llm-d's latency-slo-admitter)";
    const PARAMS_DOC: &'static str = concat!(
        "\
Admits every request of priority ≥ 0 (critical, standard), every request whose
client sends no SLO header, and every request before the predictor's first
fit. Any other is rejected unless some instance is predicted to meet both
SLOs, runs no request, or has KV utilisation below 0.02.
saturation_queue_depth (number > 0, optional)  with saturation_kv: first
                     reject every sheddable request while the mean over
                     instances of max(queue / this, kv / saturation_kv) is
                     ≥ 1 (llm-d's legacy admission controller).
saturation_kv        (number in (0, 1], optional)  see above.
",
        predictor::predictor_doc!()
    );
    const HOOKS: Hooks = predictor::HOOKS;

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: AdmitterParams = params.parse()?;
        let saturation = match (p.saturation_queue_depth, p.saturation_kv) {
            (None, None) => None,
            (Some(qd), Some(kv)) if qd.is_finite() && qd > 0.0 && kv > 0.0 && kv <= 1.0 => {
                Some((qd, kv))
            }
            (Some(_), Some(_)) => {
                return Err("params.saturation_queue_depth must be > 0 and params.saturation_kv in (0, 1]".into())
            }
            _ => {
                return Err(
                    "params.saturation_queue_depth and params.saturation_kv go together: give both or neither"
                        .into(),
                )
            }
        };
        Ok(LatencySlo {
            saturation,
            predictor: Predictor::new(p.predictor)?,
        })
    }

    fn on_event(&mut self, event: &RequestEvent<'_>, _cluster: &ClusterState<'_>) {
        self.predictor.on_event(event);
    }
}

impl Admission for LatencySlo {
    fn admit(&mut self, req: &RequestView<'_>, cluster: &ClusterView<'_>) -> bool {
        if !req.slo_class.is_sheddable() {
            return true;
        }
        if let Some((qd, kv)) = self.saturation {
            let sat = crate::admission::utilization_saturation(cluster.instances(), qd, kv);
            if sat.is_some_and(|s| s >= 1.0) {
                blis_plugin_api::reason("the pool is saturated");
                return false;
            }
        }
        let (ttft, tpot) = slo_targets(req);
        if ttft <= 0.0 && tpot <= 0.0 {
            return true;
        }
        let preds = predictions(&mut self.predictor, req, cluster, 0..cluster.len());
        if preds.iter().all(Option::is_none) {
            return true;
        }
        let ok = preds.iter().zip(cluster.instances()).any(|(p, s)| {
            p.is_some_and(|p| p.valid()) || s.batch_size == 0 || s.kv_utilization < 0.02
        });
        if !ok {
            blis_plugin_api::reason("no valid endpoint available to serve the request");
        }
        ok
    }

    fn observe(&mut self, req: &RequestView<'_>, cluster: &ClusterView<'_>, chosen: usize) {
        self.predictor.dispatched(req, cluster, chosen);
    }
}

// ---------------------------------------------------------------- affinity filter

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct AffinityParams {
    affinity_threshold: f64,
    exploration_probability: f64,
    max_ttft_penalty_ms: f64,
    ttft_source: String,
    peak_prefill_throughput: f64,
    predictor: Option<PredictorParams>,
}

impl Default for AffinityParams {
    fn default() -> Self {
        AffinityParams {
            affinity_threshold: 0.8,
            exploration_probability: 0.0,
            max_ttft_penalty_ms: 18_000.0,
            ttft_source: "prefill-throughput".into(),
            peak_prefill_throughput: 15_928.0,
            predictor: None,
        }
    }
}

/// llm-d's `prefix-cache-affinity-filter` (§5.4): keep the candidates that
/// hold most of the prompt, unless that costs too much TTFT.
pub struct PrefixCacheAffinity {
    threshold: f64,
    exploration: f64,
    penalty_ms: f64,
    /// `None`: TTFT from the predictor; else the peak prefill throughput.
    peak_tokens_per_s: Option<f64>,
    rng: Rng,
    predictor: Predictor,
}

impl PolicyDef for PrefixCacheAffinity {
    const NAME: &'static str = "prefix-cache-affinity";
    const SUMMARY: &'static str =
        "keep the candidates holding most of the prompt unless their TTFT is far worse (llm-d's prefix-cache-affinity-filter)";
    const PARAMS_DOC: &'static str = concat!(
        "\
affinity_threshold   (number ≤ 1, default 0.8)  prefix ratio that makes a
                     candidate sticky; ≤ 0 keeps every candidate.
exploration_probability (number in [0, 1], default 0)  probability of keeping
                     every candidate (one seeded draw).
max_ttft_penalty_ms  (number ≥ 0, default 18000)  keep every candidate when
                     the best sticky TTFT exceeds the best other by more; 0:
                     always stick.
ttft_source          (\"prefill-throughput\" | \"predictor\", default the
                     first)  TTFT = router in-flight prompt tokens /
                     peak_prefill_throughput, or the predictor's TTFT
                     (+∞ before its first fit).
peak_prefill_throughput (number > 0, tokens/s, default 15928).
",
        predictor::predictor_doc!()
    );
    const HOOKS: Hooks = predictor::HOOKS;

    fn create(params: Params<'_>, seed: u64) -> Result<Self, String> {
        let p: AffinityParams = params.parse()?;
        if !(p.affinity_threshold.is_finite() && p.affinity_threshold <= 1.0) {
            return Err(format!(
                "params.affinity_threshold = {}: must be at most 1",
                p.affinity_threshold
            ));
        }
        if !(0.0..=1.0).contains(&p.exploration_probability) {
            return Err(format!(
                "params.exploration_probability = {}: must be in [0, 1]",
                p.exploration_probability
            ));
        }
        if !(p.max_ttft_penalty_ms.is_finite() && p.max_ttft_penalty_ms >= 0.0) {
            return Err(format!(
                "params.max_ttft_penalty_ms = {}: must be a finite number ≥ 0",
                p.max_ttft_penalty_ms
            ));
        }
        let peak = match p.ttft_source.as_str() {
            "predictor" => None,
            "prefill-throughput" => {
                if !(p.peak_prefill_throughput.is_finite() && p.peak_prefill_throughput > 0.0) {
                    return Err(format!(
                        "params.peak_prefill_throughput = {}: must be a finite number > 0",
                        p.peak_prefill_throughput
                    ));
                }
                Some(p.peak_prefill_throughput)
            }
            s => {
                return Err(format!(
                    "params.ttft_source = \"{s}\": accepted values are \"prefill-throughput\" and \"predictor\""
                ))
            }
        };
        Ok(PrefixCacheAffinity {
            threshold: p.affinity_threshold,
            exploration: p.exploration_probability,
            penalty_ms: p.max_ttft_penalty_ms,
            peak_tokens_per_s: peak,
            rng: Rng::new(seed),
            predictor: Predictor::new(p.predictor)?,
        })
    }

    fn on_event(&mut self, event: &RequestEvent<'_>, _cluster: &ClusterState<'_>) {
        self.predictor.on_event(event);
    }
}

impl PrefixCacheAffinity {
    fn ttft_ms(&self, req: &RequestView<'_>, cluster: &ClusterView<'_>, i: usize) -> f64 {
        match self.peak_tokens_per_s {
            Some(peak) => self.predictor.in_flight(i).1 as f64 / peak * 1e3,
            None => self
                .predictor
                .predict(req, cluster, i, slo_targets(req))
                .map_or(f64::INFINITY, |p| p.ttft_ms),
        }
    }
}

impl Filter for PrefixCacheAffinity {
    fn filter(&mut self, req: &RequestView<'_>, cluster: &ClusterState<'_>, keep: &mut Kept) {
        let cands = cluster.candidates();
        if cands.len() <= 1 || self.threshold <= 0.0 {
            keep.extend(cands.iter().copied());
            return;
        }
        if self.exploration > 0.0 && self.rng.next_f64() < self.exploration {
            keep.extend(cands.iter().copied());
            return;
        }
        self.predictor.prepare(req, cluster.len());
        let (sticky, other): (Vec<u32>, Vec<u32>) = cands
            .iter()
            .partition(|&&i| self.predictor.prefix_ratio(req, i as usize) >= self.threshold);
        if sticky.is_empty() {
            keep.extend(cands.iter().copied());
            return;
        }
        if self.penalty_ms > 0.0 && !other.is_empty() {
            let best = |set: &[u32]| {
                set.iter()
                    .map(|&i| self.ttft_ms(req, &cluster.view, i as usize))
                    .fold(f64::INFINITY, f64::min)
            };
            if best(&sticky) - best(&other) > self.penalty_ms {
                keep.extend(cands.iter().copied());
                return;
            }
        }
        keep.extend(sticky);
    }

    fn observe(&mut self, req: &RequestView<'_>, cluster: &ClusterView<'_>, chosen: usize) {
        self.predictor.dispatched(req, cluster, chosen);
    }
}

#[cfg(test)]
mod tests;

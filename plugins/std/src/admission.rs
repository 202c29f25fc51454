//! Admission policies: the first gate of the pipeline.

use std::collections::{BTreeMap, HashMap};

use blis_plugin_api::{
    Admission, ClusterState, ClusterView, EventKind, Hooks, InstanceSnapshot, Params, PolicyDef,
    RequestEvent, RequestView, Rng, SloClass,
};
use serde::Deserialize;

use crate::token_load::{InFlight, TokenLoadParams};

/// Admit every request (the default).
pub struct AlwaysAdmit;

impl PolicyDef for AlwaysAdmit {
    const NAME: &'static str = "always-admit";
    const SUMMARY: &'static str = "admit every request (default)";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(AlwaysAdmit)
    }
}

impl Admission for AlwaysAdmit {
    fn admit(&mut self, _: &RequestView<'_>, _: &ClusterView<'_>) -> bool {
        true
    }
}

/// Reject every request (a pathological template for testing).
pub struct RejectAll;

impl PolicyDef for RejectAll {
    const NAME: &'static str = "reject-all";
    const SUMMARY: &'static str = "reject every request (pathological testing)";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(RejectAll)
    }
}

impl Admission for RejectAll {
    fn admit(&mut self, _: &RequestView<'_>, _: &ClusterView<'_>) -> bool {
        false
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct TokenBucketParams {
    capacity: f64,
    refill_rate: f64,
}

impl Default for TokenBucketParams {
    fn default() -> Self {
        TokenBucketParams {
            capacity: 10_000.0,
            refill_rate: 1_000.0,
        }
    }
}

/// Rate limiting by prompt tokens: each request costs its input token count;
/// the bucket refills at a constant rate in simulated time; a request that
/// finds too few tokens is rejected (and costs nothing).
pub struct TokenBucket {
    capacity: f64,
    refill_rate: f64,
    tokens: f64,
    last_refill_us: i64,
}

impl PolicyDef for TokenBucket {
    const NAME: &'static str = "token-bucket";
    const SUMMARY: &'static str = "rate-limit by prompt tokens with a refilling token bucket";
    const PARAMS_DOC: &'static str = "\
capacity     (float, tokens, default 10000)  bucket size; the bucket starts full.
             A request whose prompt is longer than this can never be admitted.
refill_rate  (float, tokens per second of simulated time, default 1000)
Each request consumes its input token count (shared prefix included); it is
rejected when the bucket holds fewer tokens than that. Both must be finite and > 0.";

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: TokenBucketParams = params.parse()?;
        if !(p.capacity.is_finite() && p.capacity > 0.0) {
            return Err(format!(
                "params.capacity = {} must be a finite number > 0",
                p.capacity
            ));
        }
        if !(p.refill_rate.is_finite() && p.refill_rate > 0.0) {
            return Err(format!(
                "params.refill_rate = {} must be a finite number > 0 (tokens per second)",
                p.refill_rate
            ));
        }
        Ok(TokenBucket {
            capacity: p.capacity,
            refill_rate: p.refill_rate,
            tokens: p.capacity,
            last_refill_us: 0,
        })
    }
}

impl Admission for TokenBucket {
    fn admit(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> bool {
        let elapsed = cluster.clock_us - self.last_refill_us;
        if elapsed > 0 {
            self.tokens =
                (self.tokens + elapsed as f64 * self.refill_rate / 1e6).min(self.capacity);
            self.last_refill_us = cluster.clock_us;
        }
        let cost = f64::from(request.input_tokens);
        if self.tokens >= cost {
            self.tokens -= cost;
            true
        } else {
            false
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct TierShedParams {
    threshold: i64,
    min_priority: i64,
    priorities: BTreeMap<String, i64>,
}

impl Default for TierShedParams {
    fn default() -> Self {
        TierShedParams {
            threshold: 0,
            min_priority: 3,
            priorities: BTreeMap::new(),
        }
    }
}

/// Priority of each class code (0..5), from the defaults and overrides.
fn class_priorities(overrides: &BTreeMap<String, i64>) -> Result<[i64; 5], String> {
    let mut p = [0i64; 5];
    for (code, x) in p.iter_mut().enumerate() {
        *x = i64::from(SloClass(code as u8).priority());
    }
    for (name, v) in overrides {
        let code = (0..5u8)
            .find(|&c| SloClass(c).name() == name)
            .ok_or_else(|| {
                format!(
                    "params.priorities: unknown SLO class '{name}'; accepted: critical, standard, batch, sheddable, background"
                )
            })?;
        p[usize::from(code)] = *v;
    }
    Ok(p)
}

/// Load shedding by tier (the reference's `tier-shed`): while the busiest
/// instance's effective load is above `threshold`, only classes of priority
/// ≥ `min_priority` are admitted.
pub struct TierShed {
    threshold: u64,
    min_priority: i64,
    priorities: [i64; 5],
}

impl PolicyDef for TierShed {
    const NAME: &'static str = "tier-shed";
    const SUMMARY: &'static str =
        "under load, admit only SLO classes of at least a minimum priority";
    const PARAMS_DOC: &'static str = "\
threshold     (int ≥ 0, default 0)  effective load (queue + batch + pending) of
              the busiest instance above which shedding starts
min_priority  (int, default 3)  classes below this priority are rejected while
              shedding (default: everything below `standard`)
priorities    (table class → int, default critical 4, standard 3, batch −1,
              sheddable −2, background −3)  overrides of class priorities";

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: TierShedParams = params.parse()?;
        if p.threshold < 0 {
            return Err(format!(
                "params.threshold = {}: must be an integer ≥ 0 (effective load)",
                p.threshold
            ));
        }
        Ok(TierShed {
            threshold: p.threshold as u64,
            min_priority: p.min_priority,
            priorities: class_priorities(&p.priorities)?,
        })
    }
}

impl Admission for TierShed {
    fn admit(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> bool {
        let max_load = cluster
            .instances()
            .iter()
            .map(|s| s.effective_load())
            .max()
            .unwrap_or(0);
        if max_load <= self.threshold {
            return true;
        }
        let priority = self
            .priorities
            .get(usize::from(request.slo_class.0))
            .copied()
            .unwrap_or(0);
        priority >= self.min_priority
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct GaieLegacyParams {
    queue_depth_threshold: f64,
    kv_threshold: f64,
}

impl Default for GaieLegacyParams {
    fn default() -> Self {
        GaieLegacyParams {
            queue_depth_threshold: 5.0,
            kv_threshold: 0.8,
        }
    }
}

/// The Gateway API Inference Extension's legacy admission (`gaie-legacy`):
/// sheddable classes are rejected while the cluster is saturated; every
/// other class is admitted.
pub struct GaieLegacy {
    queue_depth_threshold: f64,
    kv_threshold: f64,
}

impl PolicyDef for GaieLegacy {
    const NAME: &'static str = "gaie-legacy";
    const SUMMARY: &'static str = "reject sheddable classes while mean instance saturation is ≥ 1";
    const PARAMS_DOC: &'static str = "\
queue_depth_threshold  (float > 0, default 5)  wait-queue depth that counts as full
kv_threshold           (float in (0, 1], default 0.8)  KV utilisation that counts as full
Saturation = mean over instances of max(queue_depth / queue_depth_threshold,
kv_utilization / kv_threshold). A sheddable request (batch, sheddable,
background) is rejected when saturation ≥ 1.";

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: GaieLegacyParams = params.parse()?;
        if !(p.queue_depth_threshold.is_finite() && p.queue_depth_threshold > 0.0) {
            return Err(format!(
                "params.queue_depth_threshold = {}: must be a finite number > 0",
                p.queue_depth_threshold
            ));
        }
        if !(p.kv_threshold > 0.0 && p.kv_threshold <= 1.0) {
            return Err(format!(
                "params.kv_threshold = {}: must be in (0, 1]",
                p.kv_threshold
            ));
        }
        Ok(GaieLegacy {
            queue_depth_threshold: p.queue_depth_threshold,
            kv_threshold: p.kv_threshold,
        })
    }
}

/// llm-d's utilization-detector saturation: the mean over `snaps` of
/// max(queue depth / `qd`, KV utilisation / `kv`); `None` without instances.
pub(crate) fn utilization_saturation(snaps: &[InstanceSnapshot], qd: f64, kv: f64) -> Option<f64> {
    if snaps.is_empty() {
        return None;
    }
    let sum: f64 = snaps
        .iter()
        .map(|s| (f64::from(s.queue_depth) / qd).max(s.kv_utilization / kv))
        .sum();
    Some(sum / snaps.len() as f64)
}

impl GaieLegacy {
    /// Mean saturation over the instances (1 with none).
    fn saturation(&self, cluster: &ClusterView<'_>) -> f64 {
        utilization_saturation(
            cluster.instances(),
            self.queue_depth_threshold,
            self.kv_threshold,
        )
        .unwrap_or(1.0)
    }
}

impl Admission for GaieLegacy {
    fn admit(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> bool {
        !request.slo_class.is_sheddable() || self.saturation(cluster) < 1.0
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProbabilisticParams {
    #[serde(default = "d_qd")]
    queue_depth_threshold: f64,
    #[serde(default = "d_kv")]
    kv_threshold: f64,
    #[serde(default = "d_power")]
    power: f64,
    #[serde(default = "d_k")]
    k: f64,
}

fn d_qd() -> f64 {
    5.0
}
fn d_kv() -> f64 {
    0.8
}
fn d_power() -> f64 {
    5.0
}
fn d_k() -> f64 {
    300.0
}

/// llm-d's `probabilistic-admitter`: a sheddable request (priority < 0) is
/// rejected with probability min(sat^power · k, 1), sat the mean over
/// instances of max(queue_depth / QD, kv_utilization / KV); every other
/// request is admitted.
pub struct Probabilistic {
    qd: f64,
    kv: f64,
    power: f64,
    k: f64,
    rng: Rng,
}

impl PolicyDef for Probabilistic {
    const NAME: &'static str = "probabilistic";
    const SUMMARY: &'static str =
        "reject sheddable classes with probability min(saturation^power · k, 1) (llm-d's probabilistic-admitter)";
    const PARAMS_DOC: &'static str = "\
queue_depth_threshold  (float > 0, default 5)  wait-queue depth QD that counts as full
kv_threshold           (float in (0, 1], default 0.8)  KV utilisation KV that counts as full
power                  (float ≥ 0, default 5)  exponent of the saturation
k                      (float ≥ 0, default 300)  scale of the rejection probability
Saturation = mean over instances of max(queue_depth / QD, kv_utilization / KV).
A sheddable request (batch, sheddable, background) is rejected with probability
min(saturation^power · k, 1), one seeded draw per sheddable request.";

    fn create(params: Params<'_>, seed: u64) -> Result<Self, String> {
        let p: ProbabilisticParams = params.parse()?;
        if !(p.queue_depth_threshold.is_finite() && p.queue_depth_threshold > 0.0) {
            return Err(format!(
                "params.queue_depth_threshold = {}: must be a finite number > 0",
                p.queue_depth_threshold
            ));
        }
        if !(p.kv_threshold > 0.0 && p.kv_threshold <= 1.0) {
            return Err(format!(
                "params.kv_threshold = {}: must be in (0, 1]",
                p.kv_threshold
            ));
        }
        for (k, v) in [("power", p.power), ("k", p.k)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("params.{k} = {v}: must be a finite number ≥ 0"));
            }
        }
        Ok(Probabilistic {
            qd: p.queue_depth_threshold,
            kv: p.kv_threshold,
            power: p.power,
            k: p.k,
            rng: Rng::new(seed),
        })
    }
}

impl Probabilistic {
    /// The rejection probability of a sheddable request.
    fn reject_probability(&self, cluster: &ClusterView<'_>) -> f64 {
        match utilization_saturation(cluster.instances(), self.qd, self.kv) {
            Some(sat) => (sat.powf(self.power) * self.k).min(1.0),
            None => 0.0,
        }
    }
}

impl Admission for Probabilistic {
    fn admit(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> bool {
        if !request.slo_class.is_sheddable() {
            return true;
        }
        let p = self.reject_probability(cluster);
        self.rng.next_f64() >= p
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ConcurrencyShedParams {
    mode: String,
    max_concurrency: f64,
    max_token_concurrency: f64,
    block_size: u32,
    capacity: usize,
}

impl Default for ConcurrencyShedParams {
    fn default() -> Self {
        ConcurrencyShedParams {
            mode: "requests".into(),
            max_concurrency: 100.0,
            max_token_concurrency: 1e6,
            block_size: 16,
            capacity: 31_250,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Requests,
    Tokens,
    Hybrid,
}

/// llm-d's legacy admission controller over a `concurrency-detector`: a
/// sheddable request is rejected while the router's in-flight load is
/// saturated — requests: Σ requests / (N · max_concurrency); tokens:
/// Σ tokens / (N · max_token_concurrency); hybrid: the mean over instances
/// of the larger ratio — at ≥ 1. Requests count from dispatch to the end;
/// tokens are token-load's (uncached prompt tokens until the first token).
pub struct ConcurrencyShed {
    mode: Mode,
    max_requests: f64,
    max_tokens: f64,
    /// Requests in flight per instance, and where each one is.
    requests: Vec<u64>,
    at: HashMap<u64, usize>,
    tokens: Option<InFlight>,
}

impl PolicyDef for ConcurrencyShed {
    const NAME: &'static str = "concurrency-shed";
    const SUMMARY: &'static str =
        "reject sheddable classes while the router's in-flight requests or tokens saturate the instances (llm-d's legacy controller over a concurrency-detector)";
    const PARAMS_DOC: &'static str = "\
mode                   (\"requests\", \"tokens\" or \"hybrid\", default \"requests\")
                       what saturates (llm-d's concurrencyMode).
max_concurrency        (number > 0, default 100)  requests in flight per instance
                       that count as full.
max_token_concurrency  (number > 0, default 1000000)  tokens in flight per
                       instance that count as full.
block_size             (integer ≥ 1, tokens, default 16)  the run's KV block size
                       (tokens mode: uncached prompt tokens).
capacity               (integer ≥ 1, default 31250)  prefix index LRU per instance.
Saturation: requests Σ r / (N·max_concurrency); tokens Σ t / (N·max_token_concurrency);
hybrid the mean over instances of max(r / max_concurrency, t / max_token_concurrency).
A sheddable request (batch, sheddable, background) is rejected when it is ≥ 1.
Requests count from dispatch to completion or drop; tokens as token-load's
(uncached prompt tokens, released at the first token).";
    const HOOKS: Hooks = Hooks::of(EventKind::DISPATCHED)
        .with(EventKind::FIRST_TOKEN)
        .with(EventKind::COMPLETED)
        .with(EventKind::DROPPED);

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: ConcurrencyShedParams = params.parse()?;
        let mode = match p.mode.as_str() {
            "requests" => Mode::Requests,
            "tokens" => Mode::Tokens,
            "hybrid" => Mode::Hybrid,
            other => {
                return Err(format!(
                    "params.mode = \"{other}\": must be \"requests\", \"tokens\" or \"hybrid\""
                ))
            }
        };
        for (k, v) in [
            ("max_concurrency", p.max_concurrency),
            ("max_token_concurrency", p.max_token_concurrency),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("params.{k} = {v}: must be a finite number > 0"));
            }
        }
        let tokens = if mode == Mode::Requests {
            None
        } else {
            Some(InFlight::create(&TokenLoadParams {
                threshold: 1,
                block_size: p.block_size,
                capacity: p.capacity,
                output_ratio: None,
                max_output_estimate: None,
            })?)
        };
        Ok(ConcurrencyShed {
            mode,
            max_requests: p.max_concurrency,
            max_tokens: p.max_token_concurrency,
            requests: Vec::new(),
            at: HashMap::new(),
            tokens,
        })
    }

    fn on_event(&mut self, event: &RequestEvent<'_>, _cluster: &ClusterState<'_>) {
        self.lifecycle(event.kind, event.instance, event.request.id);
    }
}

impl ConcurrencyShed {
    fn lifecycle(&mut self, kind: EventKind, instance: u32, id: u64) {
        match kind {
            EventKind::DISPATCHED => {
                let i = instance as usize;
                if let Some(old) = self.at.insert(id, i) {
                    self.requests[old] -= 1;
                }
                if self.requests.len() <= i {
                    self.requests.resize(i + 1, 0);
                }
                self.requests[i] += 1;
            }
            EventKind::COMPLETED | EventKind::DROPPED => {
                if let Some(i) = self.at.remove(&id) {
                    self.requests[i] -= 1;
                }
            }
            _ => {}
        }
        if let Some(t) = self.tokens.as_mut() {
            if kind != EventKind::DISPATCHED {
                t.on_lifecycle(kind, id);
            }
        }
    }

    /// The saturation over `n` instances.
    fn saturation(&self, n: usize) -> f64 {
        if n == 0 {
            return 1.0;
        }
        let r = |i: usize| self.requests.get(i).copied().unwrap_or(0) as f64 / self.max_requests;
        let t = |i: usize| self.tokens.as_ref().map_or(0, |t| t.tokens(i)) as f64 / self.max_tokens;
        let sum: f64 = match self.mode {
            Mode::Requests => (0..n).map(r).sum(),
            Mode::Tokens => (0..n).map(t).sum(),
            Mode::Hybrid => (0..n).map(|i| r(i).max(t(i))).sum(),
        };
        sum / n as f64
    }
}

impl Admission for ConcurrencyShed {
    fn admit(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> bool {
        if !request.slo_class.is_sheddable() || self.saturation(cluster.len()) < 1.0 {
            return true;
        }
        blis_plugin_api::reason("the router's in-flight load saturates the pool");
        false
    }

    fn observe(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>, chosen: usize) {
        if let Some(t) = self.tokens.as_mut() {
            t.charge(request, cluster.len(), chosen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cluster, request, snap};

    fn sheddable(id: u64, len: u32) -> RequestView<'static> {
        let mut r = request(id, len, &[]);
        r.slo_class = SloClass::BATCH;
        r
    }

    /// Two instances, max_concurrency 2: saturation = Σ requests / 4.
    /// Three requests in flight (0.75) admit; a fourth (1.0) refuses a
    /// sheddable request but never a standard one; one completing (0.75)
    /// admits again. A request dispatched twice (redirected) counts once.
    #[test]
    fn concurrency_shed_requests_by_hand() {
        let mut a = ConcurrencyShed::create(Params::new("max_concurrency = 2"), 0).unwrap();
        let s = [snap(0, 0, 0, 0.0), snap(0, 0, 0, 0.0)];
        let view = cluster(0, &s);
        for (id, i) in [(1, 0), (2, 0), (3, 1)] {
            a.lifecycle(EventKind::DISPATCHED, i, id);
        }
        a.lifecycle(EventKind::DISPATCHED, 1, 3); // redirected: still 3 in all
        assert!(a.admit(&sheddable(9, 16), &view));
        a.lifecycle(EventKind::DISPATCHED, 1, 4);
        assert!(!a.admit(&sheddable(9, 16), &view));
        assert!(a.admit(&request(9, 16, &[]), &view));
        a.lifecycle(EventKind::COMPLETED, 0, 1);
        assert!(a.admit(&sheddable(9, 16), &view));
        blis_plugin_api::check_params_doc::<ConcurrencyShedParams>(ConcurrencyShed::PARAMS_DOC)
            .unwrap();
    }

    /// Tokens: 160-token prompts (10 blocks of 16), max 200 tokens per
    /// instance over 2 instances. One request charges 160 (0.4), a second
    /// on the other instance 160 more (0.8), a third 160 (1.2): refused.
    /// At the first request's first token its 160 leave (0.8). Hybrid with
    /// max_concurrency 1: instance 0 has one request (ratio 1), instance 1
    /// two (2) → mean of max(1, 0.8), max(2, 0.8) = 1.5, refused.
    #[test]
    fn concurrency_shed_tokens_and_hybrid_by_hand() {
        for mode in ["tokens", "hybrid"] {
            let mut a = ConcurrencyShed::create(
                Params::new(&format!(
                    "mode = \"{mode}\"\nmax_token_concurrency = 200\nmax_concurrency = 1"
                )),
                0,
            )
            .unwrap();
            let s = [snap(0, 0, 0, 0.0), snap(0, 0, 0, 0.0)];
            let view = cluster(0, &s);
            let route = |a: &mut ConcurrencyShed, id: u64, i: u32| {
                let h: Vec<u64> = (0..10).map(|b| id * 100 + b).collect();
                a.observe(&request(id, 160, &h), &view, i as usize);
                a.lifecycle(EventKind::DISPATCHED, i, id);
            };
            route(&mut a, 1, 0);
            if mode == "tokens" {
                assert!(a.admit(&sheddable(9, 16), &view)); // 0.4
            }
            route(&mut a, 2, 1);
            route(&mut a, 3, 1);
            assert!(!a.admit(&sheddable(9, 16), &view)); // tokens 1.2, hybrid 1.5
            a.lifecycle(EventKind::FIRST_TOKEN, 0, 1);
            assert_eq!(a.admit(&sheddable(9, 16), &view), mode == "tokens"); // 0.8 / 1.5
        }
        assert!(ConcurrencyShed::create(Params::new("mode = \"bytes\""), 0).is_err());
        assert!(ConcurrencyShed::create(Params::new("max_concurrency = 0"), 0).is_err());
    }

    #[test]
    fn token_bucket_accepts_and_rejects_with_refills_at_known_times() {
        let mut tb =
            TokenBucket::create(Params::new("capacity = 1000.0\nrefill_rate = 100.0"), 0).unwrap();
        let s = [snap(0, 0, 0, 0.0)];
        let mut at = |t: i64, len: u32| tb.admit(&request(0, len, &[]), &cluster(t, &s));
        assert!(at(0, 600)); // 1000 → 400
        assert!(!at(0, 500)); // 400 < 500: rejected, nothing consumed
        assert!(at(0, 400)); // 400 → 0
        assert!(!at(999_999, 100)); // refilled 99.9999 < 100
        assert!(at(1_000_000, 100)); // exactly 100 after 1 s → 0
        assert!(!at(1_000_000, 1)); // same tick: no refill
        assert!(at(100_000_000, 1000)); // refill capped at capacity 1000
        assert!(!at(100_000_000, 1));
    }

    #[test]
    fn token_bucket_rejects_bad_params() {
        let e = TokenBucket::create(Params::new("capacity = -1.0"), 0)
            .err()
            .unwrap();
        assert!(e.contains("capacity"), "{e}");
        let e = TokenBucket::create(Params::new("refill_rate = 0.0"), 0)
            .err()
            .unwrap();
        assert!(e.contains("refill_rate"), "{e}");
        let e = TokenBucket::create(Params::new("capacityy = 1.0"), 0)
            .err()
            .unwrap();
        assert!(e.contains("capacityy"), "{e}");
    }

    fn with_class(class: SloClass) -> RequestView<'static> {
        RequestView {
            slo_class: class,
            ..request(0, 5, &[])
        }
    }

    #[test]
    fn tier_shed_admits_at_or_below_the_threshold_and_sheds_low_tiers_above() {
        let mut ts = TierShed::create(Params::new("threshold = 4"), 0).unwrap();
        // Busiest effective load 1 + 2 + 1 = 4 = threshold: every class admitted.
        let at_threshold = [snap(1, 2, 1, 0.0), snap(0, 0, 0, 0.0)];
        for code in 0..5 {
            assert!(ts.admit(&with_class(SloClass(code)), &cluster(0, &at_threshold)));
        }
        // Load 5 > 4: critical (4) and standard (3) pass min_priority 3; the rest shed.
        let above = [snap(0, 0, 0, 0.0), snap(2, 2, 1, 0.0)];
        let got: Vec<bool> = (0..5)
            .map(|c| ts.admit(&with_class(SloClass(c)), &cluster(0, &above)))
            .collect();
        assert_eq!(got, [true, true, false, false, false]);
        // Defaults: any load > 0 sheds below standard; overrides move a class.
        let mut ts = TierShed::create(
            Params::new("min_priority = 4\npriorities = { batch = 9 }"),
            0,
        )
        .unwrap();
        let one = [snap(0, 0, 1, 0.0)];
        let got: Vec<bool> = (0..5)
            .map(|c| ts.admit(&with_class(SloClass(c)), &cluster(0, &one)))
            .collect();
        assert_eq!(got, [true, false, true, false, false]);
        let idle = [snap(0, 0, 0, 0.0)];
        assert!(ts.admit(&with_class(SloClass::BACKGROUND), &cluster(0, &idle)));
    }

    #[test]
    fn gaie_legacy_sheds_sheddable_classes_at_mean_saturation_one() {
        let mut g = GaieLegacy::create(Params::new(""), 0).unwrap();
        // Saturations: max(4/5, 0.4/0.8) = 0.8 and max(0/5, 0.96/0.8) = 1.2 → mean 1.0.
        let full = [snap(4, 9, 9, 0.4), snap(0, 0, 0, 0.96)];
        // max(5/5, 0) = 1.0 and max(0, 0.7/0.8 = 0.875) → mean 0.9375.
        let below = [snap(5, 0, 0, 0.0), snap(0, 0, 0, 0.7)];
        let got: Vec<bool> = (0..5)
            .map(|c| g.admit(&with_class(SloClass(c)), &cluster(0, &full)))
            .collect();
        assert_eq!(got, [true, true, false, false, false]);
        for code in 0..5 {
            assert!(g.admit(&with_class(SloClass(code)), &cluster(0, &below)));
        }
        let mut g = GaieLegacy::create(
            Params::new("queue_depth_threshold = 2.0\nkv_threshold = 1.0"),
            0,
        )
        .unwrap();
        // max(2/2, 0.5) = 1.0 → saturated.
        assert!(!g.admit(
            &with_class(SloClass::BATCH),
            &cluster(0, &[snap(2, 0, 0, 0.5)])
        ));
        assert!(g.admit(
            &with_class(SloClass::BATCH),
            &cluster(0, &[snap(1, 0, 0, 0.5)])
        ));
    }

    #[test]
    fn shedding_policies_reject_bad_params_by_key() {
        for (text, key) in [
            ("threshold = -1", "threshold"),
            ("priorities = { gold = 1 }", "gold"),
            ("min_priorty = 1", "min_priorty"),
        ] {
            let e = TierShed::create(Params::new(text), 0).err().unwrap();
            assert!(e.contains(key), "{text}: {e}");
        }
        for (text, key) in [
            ("queue_depth_threshold = 0.0", "queue_depth_threshold"),
            ("kv_threshold = 1.5", "kv_threshold"),
            ("kv_threshold = 0.0", "kv_threshold"),
        ] {
            let e = GaieLegacy::create(Params::new(text), 0).err().unwrap();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn always_and_never() {
        let s = [snap(0, 0, 0, 0.0)];
        assert!(AlwaysAdmit.admit(&request(0, 5, &[]), &cluster(0, &s)));
        assert!(!RejectAll.admit(&request(0, 5, &[]), &cluster(0, &s)));
        assert!(AlwaysAdmit::create(Params::new("x = 1"), 0).is_err());
    }
}

#[cfg(test)]
mod params_doc_tests {
    use super::*;

    /// Queues 1 and 3 (QD 4, KV idle): saturation 0.5, probability
    /// min(0.5^2 · 2, 1) = 0.5 with power 2, k 2; critical requests always
    /// pass; at saturation ≥ 1 with k ≥ 1 every sheddable one is rejected;
    /// the rejected share of 4000 draws is 0.5 within 3 %.
    #[test]
    fn probabilistic_rejects_sheddable_requests_with_the_llm_d_probability() {
        use crate::testutil::{cluster, request, snap};
        let params = "queue_depth_threshold = 4.0\npower = 2.0\nk = 2.0";
        let mut a = Probabilistic::create(Params::new(params), 9).unwrap();
        let snaps = [snap(1, 0, 0, 0.0), snap(3, 0, 0, 0.0)];
        let c = cluster(0, &snaps);
        assert_eq!(a.reject_probability(&c), 0.5);
        let critical = RequestView {
            slo_class: SloClass::CRITICAL,
            ..request(0, 10, &[])
        };
        assert!((0..100).all(|_| a.admit(&critical, &c)));
        let shed = RequestView {
            slo_class: SloClass::SHEDDABLE,
            ..request(1, 10, &[])
        };
        let rejected = (0..4000).filter(|_| !a.admit(&shed, &c)).count();
        assert!((1880..2120).contains(&rejected), "{rejected}");
        let full = [snap(4, 0, 0, 0.0), snap(8, 0, 0, 0.0)];
        assert!((0..100).all(|_| !a.admit(&shed, &cluster(0, &full))));
        assert!(Probabilistic::create(Params::new("k = -1.0"), 0).is_err());
    }

    /// `PARAMS_DOC` documents exactly the keys of the params struct.
    #[test]
    fn params_docs_match_the_params_structs() {
        blis_plugin_api::check_params_doc::<TokenBucketParams>(TokenBucket::PARAMS_DOC).unwrap();
        blis_plugin_api::check_params_doc::<TierShedParams>(TierShed::PARAMS_DOC).unwrap();
        blis_plugin_api::check_params_doc::<GaieLegacyParams>(GaieLegacy::PARAMS_DOC).unwrap();
        blis_plugin_api::check_params_doc::<ProbabilisticParams>(Probabilistic::PARAMS_DOC)
            .unwrap();
    }
}

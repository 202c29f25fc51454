//! Scorers for the host's weighted router. Each returns one score per
//! instance in [0, 1], higher is better; the host clamps, weights, sums and
//! takes the argmax (ties to the lowest index).

use blis_plugin_api::{
    lora, ClusterState, ClusterView, InstanceSnapshot, Params, PolicyDef, RequestView, Scorer,
    Scores,
};
use serde::Deserialize;

use crate::prefix_index::{match_length_doc, MatchLength, PrefixIndex};

/// Min-max normalised effective load, lower load scores higher:
/// `(max − load) / (max − min)`, and 1.0 for every instance when all loads are equal.
pub struct QueueDepth;

impl PolicyDef for QueueDepth {
    const NAME: &'static str = "queue-depth";
    const SUMMARY: &'static str = "min-max normalised effective load (lower load → higher score)";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(QueueDepth)
    }
}

impl Scorer for QueueDepth {
    fn score_candidates(
        &mut self,
        _: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        scores: &mut Scores,
    ) {
        min_max_low_is_best(cluster, InstanceSnapshot::effective_load, scores);
    }

    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        let s = cluster.instances();
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        for x in s {
            lo = lo.min(x.effective_load());
            hi = hi.max(x.effective_load());
        }
        for x in s {
            scores.push(if hi == lo {
                1.0
            } else {
                (hi - x.effective_load()) as f64 / (hi - lo) as f64
            });
        }
    }
}

/// `1 − KV utilisation` (a Tier 3 signal: may be as old as the snapshot refresh interval).
pub struct KvUtilization;

impl PolicyDef for KvUtilization {
    const NAME: &'static str = "kv-utilization";
    const SUMMARY: &'static str = "1 − KV utilisation (less memory pressure → higher score)";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(KvUtilization)
    }
}

impl Scorer for KvUtilization {
    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        for x in cluster.instances() {
            scores.push(1.0 - x.kv_utilization);
        }
    }
}

/// `1 / (1 + effective load)`.
pub struct LoadBalance;

impl PolicyDef for LoadBalance {
    const NAME: &'static str = "load-balance";
    const SUMMARY: &'static str = "1 / (1 + effective load)";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(LoadBalance)
    }
}

impl Scorer for LoadBalance {
    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        for x in cluster.instances() {
            scores.push(1.0 / (1.0 + x.effective_load() as f64));
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct PrefixAffinityParams {
    capacity: usize,
    match_length_weight: f64,
    match_length_scale_tokens: f64,
    block_size: u32,
}

impl Default for PrefixAffinityParams {
    fn default() -> Self {
        PrefixAffinityParams {
            capacity: 10_000,
            match_length_weight: 0.0,
            match_length_scale_tokens: 8192.0,
            block_size: 16,
        }
    }
}

/// Fraction of the request's block hashes found in the router-side index of
/// each instance. Stateful: after every routing decision, `observe` records
/// the request's hashes for the chosen instance (Tier 1 freshness).
pub struct PrefixAffinityScorer {
    index: PrefixIndex,
    counts: Vec<u32>,
    match_length: MatchLength,
}

impl PolicyDef for PrefixAffinityScorer {
    const NAME: &'static str = "prefix-affinity";
    const SUMMARY: &'static str =
        "fraction of the request's prefix blocks recently routed to each instance";
    const PARAMS_DOC: &'static str = concat!(
        "\
capacity                   (integer ≥ 1, block hashes per instance, default 10000)
                           size of each instance's LRU set in the router-side
                           prefix index.
",
        match_length_doc!()
    );

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: PrefixAffinityParams = params.parse()?;
        if p.capacity == 0 {
            return Err("params.capacity must be at least 1".to_string());
        }
        Ok(PrefixAffinityScorer {
            index: PrefixIndex::new(p.capacity),
            counts: Vec::new(),
            match_length: MatchLength::new(
                p.match_length_weight,
                p.match_length_scale_tokens,
                p.block_size,
            )?,
        })
    }
}

impl Scorer for PrefixAffinityScorer {
    fn score(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        let hashes = request.block_hashes.as_slice();
        self.counts.clear();
        self.counts.resize(cluster.len(), 0);
        self.index.count_matches(hashes, &mut self.counts);
        let total = hashes.len();
        for &c in &self.counts {
            scores.push(if total == 0 {
                0.0
            } else {
                self.match_length.score(c, f64::from(c) / total as f64)
            });
        }
    }

    fn observe(&mut self, request: &RequestView<'_>, _cluster: &ClusterView<'_>, chosen: usize) {
        self.index.record(request.block_hashes.as_slice(), chosen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cluster, request, snap};
    use blis_plugin_api::RVec;

    fn run(
        s: &mut impl Scorer,
        hashes: &[u64],
        snaps: &[blis_plugin_api::InstanceSnapshot],
    ) -> Vec<f64> {
        let mut out = RVec::new();
        s.score(&request(0, 64, hashes), &cluster(0, snaps), &mut out);
        out.to_vec()
    }

    #[test]
    fn queue_depth_normalises_and_all_equal_is_one() {
        let s = [snap(4, 0, 0, 0.0), snap(1, 1, 0, 0.0), snap(0, 0, 0, 0.0)];
        assert_eq!(run(&mut QueueDepth, &[], &s), vec![0.0, 0.5, 1.0]);
        let eq = [snap(1, 1, 0, 0.0), snap(0, 2, 0, 0.0)];
        assert_eq!(run(&mut QueueDepth, &[], &eq), vec![1.0, 1.0]);
    }

    #[test]
    fn kv_and_load_balance() {
        let s = [snap(0, 0, 0, 0.25), snap(1, 2, 0, 1.0)];
        assert_eq!(run(&mut KvUtilization, &[], &s), vec![0.75, 0.0]);
        assert_eq!(run(&mut LoadBalance, &[], &s), vec![1.0, 0.25]);
    }

    #[test]
    fn prefix_affinity_scores_fraction_found_after_observe() {
        let mut pa = PrefixAffinityScorer::create(Params::new(""), 0).unwrap();
        let s = [snap(0, 0, 0, 0.0), snap(0, 0, 0, 0.0)];
        assert_eq!(run(&mut pa, &[1, 2, 3, 4], &s), vec![0.0, 0.0]);
        pa.observe(&request(0, 64, &[1, 2, 3, 4]), &cluster(0, &s), 1);
        assert_eq!(run(&mut pa, &[1, 2, 7, 8], &s), vec![0.0, 0.5]);
        assert_eq!(run(&mut pa, &[], &s), vec![0.0, 0.0]);
    }

    /// llm-d's match-length term: 2 of 4 blocks of 16 tokens matched, S =
    /// 64: w = 0.25 → 0.25·(32/64)² + 0.75·0.5 = 0.4375.
    #[test]
    fn prefix_affinity_match_length_term() {
        let mut pa = PrefixAffinityScorer::create(
            Params::new("match_length_weight = 0.25\nmatch_length_scale_tokens = 64"),
            0,
        )
        .unwrap();
        let s = [snap(0, 0, 0, 0.0), snap(0, 0, 0, 0.0)];
        pa.observe(&request(0, 64, &[1, 2, 3, 4]), &cluster(0, &s), 1);
        assert_eq!(run(&mut pa, &[1, 2, 7, 8], &s), vec![0.0, 0.4375]);
        // All 4 blocks: 64 tokens reach S → 0.25 + 0.75 = 1.
        assert_eq!(run(&mut pa, &[1, 2, 3, 4], &s), vec![0.0, 1.0]);
    }
}

/// `(max − v) / (max − min)` over the candidates, 1.0 for all when equal
/// (llm-d normalises over the post-filter endpoints).
fn min_max_low_is_best(
    cluster: &ClusterState<'_>,
    value: impl Fn(&InstanceSnapshot) -> u64,
    scores: &mut Scores,
) {
    let snaps = cluster.instances();
    let vals = cluster
        .candidates()
        .iter()
        .map(|&i| value(&snaps[i as usize]));
    let (lo, hi) = vals
        .clone()
        .fold((u64::MAX, 0), |(l, h), v| (l.min(v), h.max(v)));
    for v in vals {
        scores.push(if hi == lo {
            1.0
        } else {
            (hi - v) as f64 / (hi - lo) as f64
        });
    }
}

/// The same over every instance.
fn min_max_all(
    cluster: &ClusterView<'_>,
    value: impl Fn(&InstanceSnapshot) -> u64,
    scores: &mut Scores,
) {
    let snaps = cluster.instances();
    let (lo, hi) = snaps
        .iter()
        .map(&value)
        .fold((u64::MAX, 0), |(l, h), v| (l.min(v), h.max(v)));
    for x in snaps {
        let v = value(x);
        scores.push(if hi == lo {
            1.0
        } else {
            (hi - v) as f64 / (hi - lo) as f64
        });
    }
}

fn batch(s: &InstanceSnapshot) -> u64 {
    u64::from(s.batch_size)
}

fn dp_load(s: &InstanceSnapshot) -> u64 {
    4 * u64::from(s.queue_depth) + u64::from(s.batch_size)
}

/// Min-max normalised running-batch size (llm-d's
/// `running-requests-size-scorer`): `(max − BS) / (max − min)`, 1 when equal.
pub struct RunningRequests;

impl PolicyDef for RunningRequests {
    const NAME: &'static str = "running-requests";
    const SUMMARY: &'static str = "min-max normalised batch size (fewer running → higher score)";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(RunningRequests)
    }
}

impl Scorer for RunningRequests {
    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        min_max_all(cluster, batch, scores);
    }
    fn score_candidates(&mut self, _: &RequestView<'_>, c: &ClusterState<'_>, scores: &mut Scores) {
        min_max_low_is_best(c, batch, scores);
    }
}

/// llm-d's `queue-scorer`: the waiting queue alone, min-max normalised over
/// the scored instances, `(max − q) / (max − min)`, 1 for all when equal
/// (blis's `queue-depth` min-maxes queue + batch + pending instead).
pub struct WaitingQueue;

impl PolicyDef for WaitingQueue {
    const NAME: &'static str = "waiting-queue";
    const SUMMARY: &'static str =
        "min-max normalised wait-queue depth (llm-d's queue-scorer; shorter queue → higher score)";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(WaitingQueue)
    }
}

fn waiting(s: &InstanceSnapshot) -> u64 {
    u64::from(s.queue_depth)
}

impl Scorer for WaitingQueue {
    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        min_max_all(cluster, waiting, scores);
    }
    fn score_candidates(&mut self, _: &RequestView<'_>, c: &ClusterState<'_>, scores: &mut Scores) {
        min_max_low_is_best(c, waiting, scores);
    }
}

/// vLLM data-parallel load (the reference's `vllm-dp`): raw = 4·queue depth +
/// batch size, min-max normalised, lower is better; 1 when equal.
pub struct VllmDp;

impl PolicyDef for VllmDp {
    const NAME: &'static str = "vllm-dp";
    const SUMMARY: &'static str = "min-max normalised 4·queue depth + batch size";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(VllmDp)
    }
}

impl Scorer for VllmDp {
    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        min_max_all(cluster, dp_load, scores);
    }
    fn score_candidates(&mut self, _: &RequestView<'_>, c: &ClusterState<'_>, scores: &mut Scores) {
        min_max_low_is_best(c, dp_load, scores);
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadAwareParams {
    #[serde(default = "d_threshold")]
    threshold: u32,
}

fn d_threshold() -> u32 {
    128
}

/// llm-d's `load-aware-scorer`: queue depth 0 → 0.5, else
/// `0.5 · (1 − min(QD, threshold) / threshold)`.
pub struct LoadAware {
    threshold: u32,
}

impl PolicyDef for LoadAware {
    const NAME: &'static str = "load-aware";
    const SUMMARY: &'static str = "0.5 when the queue is empty, else 0.5·(1 − min(QD, T)/T)";
    const PARAMS_DOC: &'static str =
        "threshold  (integer ≥ 1, requests, default 128)  queue depth T at which the score reaches 0.";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: LoadAwareParams = params.parse()?;
        if p.threshold == 0 {
            return Err("params.threshold must be ≥ 1".to_string());
        }
        Ok(LoadAware {
            threshold: p.threshold,
        })
    }
}

impl Scorer for LoadAware {
    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        let t = f64::from(self.threshold);
        for x in cluster.instances() {
            let q = x.queue_depth;
            scores.push(if q == 0 {
                0.5
            } else {
                0.5 * (1.0 - f64::from(q.min(self.threshold)) / t)
            });
        }
    }
}

/// The same score for every candidate: what an llm-d scorer whose signal
/// a simulation does not have (a topology label, a request header, an
/// unparsed prompt) gives every endpoint. Under max-score it changes
/// nothing; under a random picker drawing by score it flattens the draw.
pub struct Constant {
    value: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConstantParams {
    #[serde(default = "one")]
    value: f64,
}

fn one() -> f64 {
    1.0
}

impl PolicyDef for Constant {
    const NAME: &'static str = "constant";
    const SUMMARY: &'static str = "the same score for every candidate";
    const PARAMS_DOC: &'static str = "\
value  (number in [0, 1], default 1)  every candidate's score.";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: ConstantParams = params.parse()?;
        if !(0.0..=1.0).contains(&p.value) {
            return Err(format!("params.value = {}: must be in [0, 1]", p.value));
        }
        Ok(Constant { value: p.value })
    }
}

impl Scorer for Constant {
    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        for _ in cluster.instances() {
            scores.push(self.value);
        }
    }

    fn score_candidates(
        &mut self,
        _: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        scores: &mut Scores,
    ) {
        for _ in cluster.candidates() {
            scores.push(self.value);
        }
    }
}

/// llm-d's active-request scorer (the reference's `active-requests`):
/// c = requests dispatched to the instance and not finished (the host's
/// exact in-flight count); 1 when c ≤ `idle_threshold`, else
/// `(max − c) / max · max_busy_score`, max over the candidates.
pub struct ActiveRequests {
    idle_threshold: u64,
    max_busy_score: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ActiveRequestsParams {
    idle_threshold: u64,
    max_busy_score: f64,
}

impl Default for ActiveRequestsParams {
    fn default() -> Self {
        ActiveRequestsParams {
            idle_threshold: 0,
            max_busy_score: 1.0,
        }
    }
}

impl Default for ActiveRequests {
    fn default() -> Self {
        ActiveRequests {
            idle_threshold: 0,
            max_busy_score: 1.0,
        }
    }
}

impl PolicyDef for ActiveRequests {
    const NAME: &'static str = "active-requests";
    const SUMMARY: &'static str = "(max − in-flight) / max over the candidates; idle → 1";
    const PARAMS_DOC: &'static str = "\
idle_threshold  (integer ≥ 0, requests, default 0)  an instance with at most this
                many requests in flight is idle and scores 1 (llm-d's idleThreshold).
max_busy_score  (number in [0, 1], default 1)  the top score of a busy
                instance (llm-d's maxBusyScore): (max − c) / max · max_busy_score,
                c its requests in flight, max the most among the candidates.";
    const USES_STATE: bool = true;
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: ActiveRequestsParams = params.parse()?;
        if !(0.0..=1.0).contains(&p.max_busy_score) {
            return Err(format!(
                "params.max_busy_score = {}: must be in [0, 1]",
                p.max_busy_score
            ));
        }
        Ok(ActiveRequests {
            idle_threshold: p.idle_threshold,
            max_busy_score: p.max_busy_score,
        })
    }
}

impl ActiveRequests {
    fn score_of(&self, c: u64, max: u64) -> f64 {
        if c <= self.idle_threshold || max == 0 {
            1.0
        } else {
            (max - c) as f64 / max as f64 * self.max_busy_score
        }
    }
}

impl Scorer for ActiveRequests {
    /// Only for hosts without the 0.2 cluster state (never blis ≥ 0.2):
    /// the effective load stands in for the in-flight count.
    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        let max = cluster
            .instances()
            .iter()
            .map(InstanceSnapshot::effective_load)
            .max()
            .unwrap_or(0);
        for x in cluster.instances() {
            scores.push(self.score_of(x.effective_load(), max));
        }
    }

    fn score_candidates(
        &mut self,
        _: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        scores: &mut Scores,
    ) {
        let info = cluster.info();
        let c = |i: u32| u64::from(info[i as usize].in_flight);
        let max = cluster
            .candidates()
            .iter()
            .map(|&i| c(i))
            .max()
            .unwrap_or(0);
        for &i in cluster.candidates() {
            scores.push(self.score_of(c(i), max));
        }
    }
}

#[cfg(test)]
mod active_requests_tests {
    use super::*;
    use blis_plugin_api::testing::Fixture;

    #[test]
    fn scores_in_flight_over_the_candidates() {
        let mut f = Fixture::idle(4).candidates(&[0, 1, 3]);
        for (x, n) in f.info.iter_mut().zip([4u32, 0, 9, 2]) {
            x.in_flight = n;
        }
        let mut out = Scores::new();
        ActiveRequests::default().score_candidates(&f.request(0), &f.state(), &mut out);
        // max over the candidates is 4 (instance 2 was filtered out).
        assert_eq!(out.as_slice(), &[0.0, 1.0, 0.5]);
    }

    /// llm-d's idleThreshold and maxBusyScore: in-flight 4, 0, 9, 2 over
    /// the candidates 0, 1, 3 with idle ≤ 2 and busy scores scaled by 0.5.
    #[test]
    fn idle_threshold_and_max_busy_score() {
        let mut f = Fixture::idle(4).candidates(&[0, 1, 3]);
        for (x, n) in f.info.iter_mut().zip([4u32, 0, 9, 2]) {
            x.in_flight = n;
        }
        let mut s =
            ActiveRequests::create(Params::new("idle_threshold = 2\nmax_busy_score = 0.5"), 0)
                .unwrap();
        let mut out = Scores::new();
        s.score_candidates(&f.request(0), &f.state(), &mut out);
        // 4 > 2: (4 − 4)/4·0.5 = 0; 0 and 2 are idle.
        assert_eq!(out.as_slice(), &[0.0, 1.0, 1.0]);
        for (x, n) in f.info.iter_mut().zip([3u32, 0, 9, 6]) {
            x.in_flight = n;
        }
        let mut out = Scores::new();
        s.score_candidates(&f.request(0), &f.state(), &mut out);
        // max 6: (6 − 3)/6·0.5 = 0.25, idle 1, (6 − 6)/6·0.5 = 0.
        assert_eq!(out.as_slice(), &[0.25, 1.0, 0.0]);
        assert!(ActiveRequests::create(Params::new("max_busy_score = 1.5"), 0).is_err());
    }
}

#[cfg(test)]
mod synthetic_run_tests {
    use super::*;
    use blis_plugin_api::testing::SyntheticRun;

    /// With every request served for 4 decisions on 4 instances,
    /// `load-balance` sends request k to instance k mod 4.
    #[test]
    fn load_balance_round_robins_a_steady_synthetic_run() {
        let run = SyntheticRun::new(4, 4).run_scorer(&mut LoadBalance, 100);
        assert_eq!(run.per_instance, vec![25, 25, 25, 25]);
        assert!(run
            .choices
            .iter()
            .enumerate()
            .all(|(k, &c)| c as usize == k % 4));
    }
}

#[cfg(test)]
mod head_scorer_tests {
    use super::*;
    use crate::testutil::{cluster, request, snap};

    /// The formulas of the reference's newer scorers, by hand.
    #[test]
    fn running_requests_vllm_dp_and_load_aware() {
        let snaps = [
            snap(0, 4, 0, 0.0),
            snap(2, 0, 0, 0.0),
            snap(1, 8, 0, 0.0),
            snap(200, 1, 0, 0.0),
        ];
        let c = cluster(0, &snaps);
        let r = request(0, 16, &[]);
        let mut out = Scores::new();
        RunningRequests.score(&r, &c, &mut out);
        assert_eq!(out.as_slice(), &[0.5, 1.0, 0.0, 7.0 / 8.0]);
        out.clear();
        // raw = 4, 8, 12, 801: (801 − raw) / 797.
        VllmDp.score(&r, &c, &mut out);
        assert_eq!(out.as_slice(), &[1.0, 793.0 / 797.0, 789.0 / 797.0, 0.0]);
        out.clear();
        LoadAware::create(Params::new(""), 0)
            .unwrap()
            .score(&r, &c, &mut out);
        assert_eq!(
            out.as_slice(),
            &[
                0.5,
                0.5 * (1.0 - 2.0 / 128.0),
                0.5 * (1.0 - 1.0 / 128.0),
                0.0
            ]
        );
        out.clear();
        let same = [snap(1, 1, 0, 0.0); 3];
        RunningRequests.score(&r, &cluster(0, &same), &mut out);
        assert_eq!(out.as_slice(), &[1.0, 1.0, 1.0]);
    }
}

#[cfg(test)]
mod params_doc_tests {
    use super::*;

    /// llm-d's queue-scorer reads the wait queue only: queues 0, 4, 2 with
    /// batches 9, 0, 0 score 1, 0, 0.5 (queue-depth would rank by 9, 4, 2).
    #[test]
    fn waiting_queue_min_maxes_the_wait_queue_only() {
        use crate::testutil::{cluster, request, snap};
        let snaps = [snap(0, 9, 1, 0.0), snap(4, 0, 0, 0.0), snap(2, 0, 0, 0.0)];
        let c = cluster(0, &snaps);
        let mut s = WaitingQueue::create(Params::new(""), 0).unwrap();
        let mut out = Scores::new();
        s.score(&request(0, 10, &[]), &c, &mut out);
        assert_eq!(out.as_slice(), &[1.0, 0.0, 0.5]);
        let equal = [snap(3, 0, 0, 0.0), snap(3, 5, 0, 0.0)];
        let mut out = Scores::new();
        s.score(&request(0, 10, &[]), &cluster(0, &equal), &mut out);
        assert_eq!(out.as_slice(), &[1.0, 1.0]);
        assert!(WaitingQueue::create(Params::new("x = 1"), 0).is_err());
    }

    /// `PARAMS_DOC` documents exactly the keys of the params struct.
    #[test]
    fn params_docs_match_the_params_structs() {
        blis_plugin_api::check_params_doc::<PrefixAffinityParams>(PrefixAffinityScorer::PARAMS_DOC)
            .unwrap();
        blis_plugin_api::check_params_doc::<LoadAwareParams>(LoadAware::PARAMS_DOC).unwrap();
        blis_plugin_api::check_params_doc::<ActiveRequestsParams>(ActiveRequests::PARAMS_DOC)
            .unwrap();
        blis_plugin_api::check_params_doc::<ConstantParams>(Constant::PARAMS_DOC).unwrap();
    }
}

/// The reference's `lora-affinity` (`cluster-head.md` §5.5), read live
/// through the host's LoRA queries: 1 where the request's adapter is
/// resident or being loaded, 0 elsewhere; 1 everywhere for a base-model
/// request, in a run without `[lora]`, or when every instance scores the
/// same. With `graded = true`, llm-d's `lora-affinity-scorer`: 1 where the
/// adapter is resident, else 0.8 where a slot is free (resident adapters
/// plus the one loading below the capacity), else 0.6 where it is the one
/// loading, else 0 (llm-d's active and waiting adapters read as blis's
/// resident and loading ones; no equal-scores rule).
pub struct LoraAffinity {
    graded: bool,
    resident: Vec<u32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct LoraAffinityParams {
    graded: bool,
}

impl PolicyDef for LoraAffinity {
    const NAME: &'static str = "lora-affinity";
    const SUMMARY: &'static str =
        "1 where the request's LoRA adapter is resident or loading, else 0 (all 1 when all agree); graded: llm-d's 1/0.8/0.6/0";
    const PARAMS_DOC: &'static str =
        "graded (bool, default false): llm-d's lora-affinity-scorer (1 resident, 0.8 a free slot, 0.6 loading, else 0)";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: LoraAffinityParams = params.parse()?;
        Ok(LoraAffinity {
            graded: p.graded,
            resident: Vec::new(),
        })
    }
}

impl Scorer for LoraAffinity {
    fn score(&mut self, req: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        let n = cluster.len() as u32;
        let Some(a) = lora::request_adapter(req) else {
            scores.extend((0..n).map(|_| 1.0));
            return;
        };
        if self.graded {
            for i in 0..n {
                let score = match lora::instance_adapters(cluster, i, &mut self.resident) {
                    None => 0.0,
                    Some(_) if self.resident.contains(&a.index) => 1.0,
                    Some(st) if st.resident + u32::from(st.loading.is_some()) < st.capacity => 0.8,
                    Some(st) if st.loading == Some(a.index) => 0.6,
                    Some(_) => 0.0,
                };
                scores.push(score);
            }
            return;
        }
        let start = scores.len();
        scores.extend((0..n).map(|i| {
            if lora::residency(cluster, i, a.index) == lora::Residency::Absent {
                0.0
            } else {
                1.0
            }
        }));
        let mine = &mut scores.as_mut_slice()[start..];
        if mine.iter().all(|&x| x == mine[0]) {
            mine.fill(1.0);
        }
    }
}

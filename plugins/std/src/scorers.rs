//! Scorers for the host's weighted router. Each returns one score per
//! instance in [0, 1], higher is better; the host clamps, weights, sums and
//! takes the argmax (ties to the lowest index).

use blis_plugin_api::{ClusterView, Params, PolicyDef, RequestView, Scorer, Scores};
use serde::Deserialize;

use crate::prefix_index::PrefixIndex;

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
}

impl Default for PrefixAffinityParams {
    fn default() -> Self {
        PrefixAffinityParams { capacity: 10_000 }
    }
}

/// Fraction of the request's block hashes found in the router-side index of
/// each instance. Stateful: after every routing decision, `observe` records
/// the request's hashes for the chosen instance (Tier 1 freshness).
pub struct PrefixAffinityScorer {
    index: PrefixIndex,
    counts: Vec<u32>,
}

impl PolicyDef for PrefixAffinityScorer {
    const NAME: &'static str = "prefix-affinity";
    const SUMMARY: &'static str =
        "fraction of the request's prefix blocks recently routed to each instance";
    const PARAMS_DOC: &'static str = "\
capacity  (integer ≥ 1, block hashes per instance, default 10000)  size of each
          instance's LRU set in the router-side prefix index.";

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: PrefixAffinityParams = params.parse()?;
        if p.capacity == 0 {
            return Err("params.capacity must be at least 1".to_string());
        }
        Ok(PrefixAffinityScorer {
            index: PrefixIndex::new(p.capacity),
            counts: Vec::new(),
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
                f64::from(c) / total as f64
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
}

//! Simple routing policies: each picks one instance from the snapshots.

use blis_plugin_api::{ClusterView, InstanceSnapshot, Params, PolicyDef, RequestView, Router};
use serde::Deserialize;

/// Index of the first instance with the minimum effective load.
pub fn least_loaded_index(instances: &[InstanceSnapshot]) -> usize {
    let mut best = 0;
    for (i, s) in instances.iter().enumerate() {
        if s.effective_load() < instances[best].effective_load() {
            best = i;
        }
    }
    best
}

/// Cyclic assignment: request k goes to instance k mod N (counting routed
/// requests only; rejected requests do not advance the counter).
#[derive(Default)]
pub struct RoundRobin {
    next: u64,
}

impl PolicyDef for RoundRobin {
    const NAME: &'static str = "round-robin";
    const SUMMARY: &'static str = "cyclic instance assignment";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(RoundRobin::default())
    }
}

impl Router for RoundRobin {
    fn route(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>) -> usize {
        let i = (self.next % cluster.len() as u64) as usize;
        self.next += 1;
        i
    }
}

/// Minimum effective load; ties go to the lowest index.
pub struct LeastLoaded;

impl PolicyDef for LeastLoaded {
    const NAME: &'static str = "least-loaded";
    const SUMMARY: &'static str = "instance with the minimum effective load (ties: lowest index)";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(LeastLoaded)
    }
}

impl Router for LeastLoaded {
    fn route(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>) -> usize {
        least_loaded_index(cluster.instances())
    }
}

/// Maximum effective load; ties go to the lowest index (pathological testing).
pub struct AlwaysBusiest;

impl PolicyDef for AlwaysBusiest {
    const NAME: &'static str = "always-busiest";
    const SUMMARY: &'static str = "instance with the maximum effective load (pathological testing)";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(AlwaysBusiest)
    }
}

impl Router for AlwaysBusiest {
    fn route(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>) -> usize {
        let s = cluster.instances();
        let mut best = 0;
        for (i, x) in s.iter().enumerate() {
            if x.effective_load() > s[best].effective_load() {
                best = i;
            }
        }
        best
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct PrefixAffinityParams {
    prefix_blocks: u32,
    max_imbalance: u64,
}

impl Default for PrefixAffinityParams {
    fn default() -> Self {
        PrefixAffinityParams {
            prefix_blocks: 4,
            max_imbalance: 8,
        }
    }
}

/// Deterministic prefix-hash mapping with least-loaded fallback: requests
/// whose first `prefix_blocks` KV blocks are identical map to the same
/// instance (hash of that prefix mod N), unless that instance's effective
/// load exceeds the least-loaded instance's by more than `max_imbalance`.
/// Requests shorter than one block go to the least-loaded instance.
pub struct PrefixAffinityRouter {
    prefix_blocks: usize,
    max_imbalance: u64,
}

impl PolicyDef for PrefixAffinityRouter {
    const NAME: &'static str = "prefix-affinity";
    const SUMMARY: &'static str = "same leading prefix → same instance, least-loaded fallback";
    const PARAMS_DOC: &'static str = "\
prefix_blocks  (integer ≥ 1, KV blocks, default 4)  length of the prefix that
               decides the instance: requests sharing their first
               prefix_blocks blocks (fewer if the prompt is shorter) map to
               the same instance.
max_imbalance  (integer, requests, default 8)  fall back to the least-loaded
               instance when the mapped instance's effective load exceeds the
               minimum by more than this.";

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: PrefixAffinityParams = params.parse()?;
        if p.prefix_blocks == 0 {
            return Err("params.prefix_blocks must be at least 1".to_string());
        }
        Ok(PrefixAffinityRouter {
            prefix_blocks: p.prefix_blocks as usize,
            max_imbalance: p.max_imbalance,
        })
    }
}

impl Router for PrefixAffinityRouter {
    fn route(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> usize {
        let s = cluster.instances();
        let fallback = least_loaded_index(s);
        let hashes = request.block_hashes.as_slice();
        if hashes.is_empty() {
            return fallback;
        }
        // Hashes are hierarchical: the k-th identifies the whole prefix up to block k.
        let key = hashes[hashes.len().min(self.prefix_blocks) - 1];
        let target = (key % s.len() as u64) as usize;
        if s[target].effective_load() > s[fallback].effective_load() + self.max_imbalance {
            fallback
        } else {
            target
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cluster, request, snap};

    #[test]
    fn round_robin_counts_differ_by_at_most_one() {
        let s = vec![snap(0, 0, 0, 0.0); 3];
        let mut rr = RoundRobin::default();
        let mut counts = [0; 3];
        for k in 0..10 {
            counts[rr.route(&request(k, 10, &[]), &cluster(0, &s))] += 1;
        }
        assert_eq!(counts, [4, 3, 3]);
    }

    #[test]
    fn least_loaded_and_busiest_with_ties() {
        // loads: 3, 1, 1, 5 (queue + batch + pending)
        let s = [
            snap(1, 1, 1, 0.0),
            snap(0, 1, 0, 0.0),
            snap(1, 0, 0, 0.0),
            snap(2, 2, 1, 0.0),
        ];
        let r = request(0, 10, &[]);
        assert_eq!(LeastLoaded.route(&r, &cluster(0, &s)), 1);
        assert_eq!(AlwaysBusiest.route(&r, &cluster(0, &s)), 3);
        let tied = [snap(2, 0, 0, 0.0), snap(0, 2, 0, 0.0), snap(0, 0, 2, 0.0)];
        assert_eq!(LeastLoaded.route(&r, &cluster(0, &tied)), 0);
        assert_eq!(AlwaysBusiest.route(&r, &cluster(0, &tied)), 0);
    }

    #[test]
    fn prefix_affinity_maps_shared_prefix_together_while_load_allows() {
        let mut pa =
            PrefixAffinityRouter::create(Params::new("prefix_blocks = 2\nmax_imbalance = 3"), 0)
                .unwrap();
        let idle = vec![snap(0, 0, 0, 0.0); 4];
        let a = pa.route(&request(0, 64, &[11, 22, 33, 44]), &cluster(0, &idle));
        let b = pa.route(&request(1, 64, &[11, 22, 99, 98]), &cluster(0, &idle));
        assert_eq!(a, b, "same first two blocks → same instance");
        assert_eq!(a, (22 % 4) as usize);
        // Overloaded target: falls back to least loaded.
        let mut busy = idle.clone();
        busy[a] = snap(4, 0, 0, 0.0);
        busy[(a + 1) % 4] = snap(0, 1, 0, 0.0);
        let c = pa.route(&request(2, 64, &[11, 22]), &cluster(0, &busy));
        assert_ne!(c, a);
        assert_eq!(c, least_loaded_index(&busy));
        // Within the allowed imbalance it stays.
        busy[a] = snap(3, 0, 0, 0.0);
        assert_eq!(pa.route(&request(3, 64, &[11, 22]), &cluster(0, &busy)), a);
        // No full block: least loaded.
        assert_eq!(
            pa.route(&request(4, 5, &[]), &cluster(0, &busy)),
            least_loaded_index(&busy)
        );
    }
}

#[cfg(test)]
mod params_doc_tests {
    use super::*;

    /// `PARAMS_DOC` documents exactly the keys of the params struct.
    #[test]
    fn params_docs_match_the_params_structs() {
        blis_plugin_api::check_params_doc::<PrefixAffinityParams>(PrefixAffinityRouter::PARAMS_DOC)
            .unwrap();
    }
}

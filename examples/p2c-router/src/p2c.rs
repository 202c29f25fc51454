//! The `p2c` router: power of two choices. Sample a few distinct instances
//! at random and send the request to the least loaded of them.
//!
//! Why it is worth having next to `least-loaded` and `round-robin`: real
//! large-scale balancers rarely look at every backend for every request. They
//! probe a few, because a full scan costs too much and because routers that
//! all pick the single global minimum stampede onto it. Sampling only two
//! instances already removes most of the imbalance of random routing. When
//! `m` requests land on `n` instances and none leaves, the most loaded
//! instance ends up about `ln ln n / ln 2` above the mean, against
//! `√(2 (m/n) ln n)` for random placement. `p2c` lets a blis user measure
//! that middle ground against full knowledge (`least-loaded`, which is what
//! `p2c` becomes at `choices = N`) and against no knowledge (`choices = 1`,
//! uniform random routing).

use blis_plugin_api::{ClusterView, InstanceSnapshot, Params, PolicyDef, RequestView, Router};
use serde::Deserialize;

use crate::rng::SplitMix64;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct P2cParams {
    choices: u32,
}

impl Default for P2cParams {
    fn default() -> Self {
        P2cParams { choices: 2 }
    }
}

/// Power-of-`choices` routing with its own seeded random stream.
///
/// Each call draws `d = min(choices, N)` distinct instances uniformly at
/// random, in random order, and picks the one with the smallest effective
/// load (`queue_depth + batch_size + pending_requests`). Among equally loaded
/// sampled instances it picks the one drawn first, which is a uniformly
/// random one. Equally loaded instances therefore get equal shares. Breaking
/// ties towards the lowest index would starve the last instance of an idle
/// cluster: with 4 idle instances and d = 2, instance 3 would never be
/// picked.
#[derive(Clone, Debug)]
pub struct PowerOfChoices {
    choices: usize,
    rng: SplitMix64,
    /// A permutation of `0..N`, kept between calls; each call shuffles only
    /// its first `d` places (a partial Fisher–Yates shuffle), so sampling
    /// costs O(d) and allocates nothing after the first call.
    order: Vec<u32>,
}

impl PowerOfChoices {
    /// Draw `min(choices, n)` distinct indices in `0..n`, uniformly and in
    /// random order.
    pub(crate) fn sample(&mut self, n: usize) -> &[u32] {
        if self.order.len() != n {
            self.order = (0..n as u32).collect();
        }
        let d = self.choices.min(n);
        for i in 0..d {
            let j = i + self.rng.below((n - i) as u64) as usize;
            self.order.swap(i, j);
        }
        &self.order[..d]
    }
}

impl PolicyDef for PowerOfChoices {
    const NAME: &'static str = "p2c";
    const SUMMARY: &'static str =
        "power of two choices: least loaded of `choices` random instances";
    const PARAMS_DOC: &'static str = "\
choices  (integer ≥ 1, instances, default 2)  distinct instances sampled at
         random per request; the request goes to the sampled instance with the
         least effective load (queue_depth + batch_size + pending_requests).
         1 = uniform random routing. A value above the number of instances is
         clamped to it, which makes p2c least-loaded.
Ties between sampled instances go to the one sampled first, i.e. a uniformly
random one, so equally loaded instances get equal shares. The only
randomness is the policy's own seed, which blis derives from the run seed.";

    fn create(params: Params<'_>, seed: u64) -> Result<Self, String> {
        let p: P2cParams = params.parse()?;
        if p.choices == 0 {
            return Err(
                "params.choices = 0: must be at least 1 (2 = power of two choices)".to_string(),
            );
        }
        Ok(PowerOfChoices {
            choices: p.choices as usize,
            rng: SplitMix64::new(seed),
            order: Vec::new(),
        })
    }
}

impl Router for PowerOfChoices {
    fn route(&mut self, _request: &RequestView<'_>, cluster: &ClusterView<'_>) -> usize {
        let s: &[InstanceSnapshot] = cluster.instances();
        if s.len() <= 1 {
            return 0;
        }
        let sample = self.sample(s.len());
        let mut best = sample[0] as usize;
        for &i in &sample[1..] {
            let i = i as usize;
            if s[i].effective_load() < s[best].effective_load() {
                best = i;
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cluster, queued, request};
    use blis_plugin_api::SloClass;

    /// `PARAMS_DOC` documents exactly the keys of the params struct.
    #[test]
    fn params_doc_matches_the_params_struct() {
        blis_plugin_api::check_params_doc::<P2cParams>(PowerOfChoices::PARAMS_DOC).unwrap();
    }

    fn p2c(params: &str, seed: u64) -> PowerOfChoices {
        PowerOfChoices::create(Params::new(params), seed).unwrap()
    }

    /// Route `calls` requests over fixed loads; return the choices.
    fn choices_over(r: &mut PowerOfChoices, loads: &[u32], calls: usize) -> Vec<usize> {
        let s: Vec<_> = loads.iter().map(|&l| queued(l)).collect();
        (0..calls)
            .map(|k| r.route(&request(k as u64, SloClass::STANDARD), &cluster(&s)))
            .collect()
    }

    /// Loads that change from call to call, from a stream independent of the router's.
    fn varying_loads(n: usize, calls: usize, max_load: u64) -> Vec<Vec<u32>> {
        let mut g = SplitMix64::new(0xDEC0DE);
        (0..calls)
            .map(|_| (0..n).map(|_| g.below(max_load + 1) as u32).collect())
            .collect()
    }

    #[test]
    fn same_seed_same_choices() {
        let (mut a, mut b) = (p2c("", 42), p2c("", 42));
        for loads in varying_loads(7, 500, 6) {
            assert_eq!(
                choices_over(&mut a, &loads, 1),
                choices_over(&mut b, &loads, 1)
            );
        }
    }

    #[test]
    fn different_seeds_different_choices() {
        let idle = [0; 8];
        let a = choices_over(&mut p2c("", 1), &idle, 200);
        let b = choices_over(&mut p2c("", 2), &idle, 200);
        // Independent picks agree with probability 1/8 per call: ~25 of 200.
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert!(same < 60, "{same} of 200 choices equal");
    }

    #[test]
    fn never_picks_the_more_loaded_of_the_two_sampled() {
        let mut r = p2c("choices = 2", 9);
        let (mut ties, mut strict) = (0, 0);
        for (k, loads) in varying_loads(10, 20_000, 4).into_iter().enumerate() {
            let s: Vec<_> = loads.iter().map(|&l| queued(l)).collect();
            // A clone shares the generator state, so it draws the same pair.
            let pair = r.clone().sample(s.len()).to_vec();
            let chosen = r.route(&request(k as u64, SloClass::STANDARD), &cluster(&s));
            let (a, b) = (pair[0] as usize, pair[1] as usize);
            assert_ne!(a, b);
            let (la, lb) = (loads[a], loads[b]);
            let expected = if lb < la { b } else { a };
            assert_eq!(
                chosen, expected,
                "sampled {a} (load {la}) and {b} (load {lb})"
            );
            if la == lb {
                ties += 1;
            } else {
                strict += 1;
            }
        }
        // Both branches were exercised many times.
        assert!(
            ties > 1_000 && strict > 10_000,
            "{ties} ties, {strict} strict"
        );
    }

    #[test]
    fn equally_loaded_instances_get_equal_shares() {
        for params in ["", "choices = 1", "choices = 3"] {
            let mut r = p2c(params, 5);
            let mut counts = [0u32; 5];
            for i in choices_over(&mut r, &[3; 5], 50_000) {
                counts[i] += 1;
            }
            // Expected 10,000 each; the standard deviation is about 89.
            for c in counts {
                assert!((9_600..=10_400).contains(&c), "{params}: {counts:?}");
            }
        }
    }

    /// Balls into bins: 100 instances, 5,000 requests that never leave, each
    /// routed with the loads its predecessors left behind. Power of two
    /// choices keeps the busiest instance within a few requests of the mean
    /// (50); random routing (choices = 1) lets it drift far above.
    #[test]
    fn two_choices_balance_far_better_than_one() {
        let max_load = |params: &str| {
            let mut r = p2c(params, 2024);
            let mut s = vec![queued(0); 100];
            for k in 0..5_000 {
                let i = r.route(&request(k, SloClass::STANDARD), &cluster(&s));
                s[i].queue_depth += 1;
            }
            let loads: Vec<u32> = s.iter().map(|x| x.queue_depth).collect();
            assert_eq!(loads.iter().sum::<u32>(), 5_000);
            assert!(loads.iter().all(|&l| l > 0), "an instance was starved");
            *loads.iter().max().unwrap()
        };
        let (two, one) = (max_load(""), max_load("choices = 1"));
        assert!(two <= 54, "p2c max load {two}");
        assert!(one >= 60, "random max load {one}");
    }

    #[test]
    fn choices_above_n_is_least_loaded() {
        let mut r = p2c("choices = 100", 3);
        for loads in varying_loads(4, 2_000, 3) {
            let chosen = choices_over(&mut r, &loads, 1)[0];
            assert_eq!(loads[chosen], *loads.iter().min().unwrap(), "{loads:?}");
        }
    }

    #[test]
    fn single_instance_and_bad_params() {
        assert_eq!(choices_over(&mut p2c("", 0), &[9], 3), vec![0, 0, 0]);
        for (params, needle) in [
            ("choices = 0", "params.choices = 0"),
            ("choices = -1", "params.choices:"),
            ("choices = 2.5", "params.choices:"),
            ("choice = 2", "choice"),
        ] {
            match PowerOfChoices::create(Params::new(params), 0) {
                Ok(_) => panic!("{params} accepted"),
                Err(e) => assert!(e.contains(needle), "{params}: {e}"),
            }
        }
    }
}

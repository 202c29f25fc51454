//! Pickers of a routing profile (ABI 0.2): choose one instance among the
//! scored candidates. Randomness comes only from the policy's seed.

use blis_plugin_api::serde::Deserialize;
use blis_plugin_api::{ClusterState, Params, Picker, PolicyDef, RequestView, Rng};

#[derive(Deserialize, Default)]
#[serde(crate = "blis_plugin_api::serde", deny_unknown_fields)]
struct MaxScoreParams {
    #[serde(default)]
    tie_break: Option<String>,
}

/// The highest total wins; ties go to the lowest instance index (blis's
/// rule) or, with `tie_break = "random"`, to a uniformly random one of the
/// tied candidates (llm-d's `max-score-picker`).
pub struct MaxScore {
    rng: Option<Rng>,
}

impl PolicyDef for MaxScore {
    const NAME: &'static str = "max-score";
    const SUMMARY: &'static str = "highest weighted total; ties to the lowest index (or random)";
    const PARAMS_DOC: &'static str = "\
tie_break  (string, default \"lowest-index\")  \"lowest-index\": ties go to the
           lowest instance index; \"random\": to a uniformly random tied
           candidate, seeded from the run seed (llm-d's max-score-picker).";
    fn create(params: Params<'_>, seed: u64) -> Result<Self, String> {
        let p: MaxScoreParams = params.parse()?;
        let rng = match p.tie_break.as_deref() {
            None | Some("lowest-index") => None,
            Some("random") => Some(Rng::new(seed)),
            Some(other) => {
                return Err(format!(
                    "params.tie_break = \"{other}\": accepted values are \"lowest-index\" and \"random\""
                ))
            }
        };
        Ok(MaxScore { rng })
    }
}

impl Picker for MaxScore {
    fn pick(&mut self, _: &RequestView<'_>, cluster: &ClusterState<'_>, scores: &[f64]) -> u32 {
        let cands = cluster.candidates();
        let best = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        match &mut self.rng {
            None => cands[scores.iter().position(|&s| s == best).unwrap_or(0)],
            Some(rng) => {
                let ties = scores.iter().filter(|&&s| s == best).count() as u64;
                let k = rng.below(ties) as usize;
                let at = scores
                    .iter()
                    .enumerate()
                    .filter(|(_, &s)| s == best)
                    .nth(k)
                    .map_or(0, |(i, _)| i);
                cands[at]
            }
        }
    }
}

/// A uniformly random candidate; ignores the scores (llm-d's `random-picker`).
pub struct RandomPick {
    rng: Rng,
}

impl PolicyDef for RandomPick {
    const NAME: &'static str = "random";
    const SUMMARY: &'static str = "a uniformly random candidate (seeded), ignoring scores";
    fn create(params: Params<'_>, seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(RandomPick {
            rng: Rng::new(seed),
        })
    }
}

impl Picker for RandomPick {
    fn pick(&mut self, _: &RequestView<'_>, cluster: &ClusterState<'_>, _: &[f64]) -> u32 {
        let cands = cluster.candidates();
        cands[self.rng.below(cands.len() as u64) as usize]
    }
}

/// A candidate drawn with probability proportional to its total (llm-d's
/// `weighted-random-picker`); uniformly when no total is positive.
pub struct WeightedRandom {
    rng: Rng,
}

impl PolicyDef for WeightedRandom {
    const NAME: &'static str = "weighted-random";
    const SUMMARY: &'static str = "P(candidate) = its total / sum of totals (seeded)";
    fn create(params: Params<'_>, seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(WeightedRandom {
            rng: Rng::new(seed),
        })
    }
}

impl Picker for WeightedRandom {
    fn pick(&mut self, _: &RequestView<'_>, cluster: &ClusterState<'_>, scores: &[f64]) -> u32 {
        let cands = cluster.candidates();
        let total: f64 = scores.iter().map(|s| s.max(0.0)).sum();
        if total <= 0.0 {
            return cands[self.rng.below(cands.len() as u64) as usize];
        }
        let mut x = self.rng.next_f64() * total;
        for (k, s) in scores.iter().enumerate() {
            let s = s.max(0.0);
            if x < s {
                return cands[k];
            }
            x -= s;
        }
        // Rounding left x at the very end: the last candidate with weight.
        let last = scores.iter().rposition(|&s| s > 0.0).unwrap_or(0);
        cands[last]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{request, snap};
    use blis_plugin_api::abi_stable::std_types::RSlice;
    use blis_plugin_api::ClusterView;

    fn state<'a>(
        snaps: &'a [blis_plugin_api::InstanceSnapshot],
        cands: &'a [u32],
    ) -> ClusterState<'a> {
        ClusterState {
            view: ClusterView {
                clock_us: 0,
                instances: RSlice::from_slice(snaps),
            },
            candidates: RSlice::from_slice(cands),
            info: RSlice::from_slice(&[]),
            prefix_blocks: RSlice::from_slice(&[]),
        }
    }

    #[test]
    fn max_score_ties_lowest_or_uniform() {
        let snaps = [snap(0, 0, 0, 0.0); 5];
        let cands = [1, 2, 4];
        let st = state(&snaps, &cands);
        let r = request(0, 16, &[]);
        let mut low = MaxScore::create(Params::new(""), 1).unwrap();
        assert_eq!(low.pick(&r, &st, &[0.5, 0.9, 0.9]), 2);
        assert_eq!(low.pick(&r, &st, &[0.95, 0.9, 0.9]), 1);
        let mut rnd = MaxScore::create(Params::new("tie_break = \"random\""), 7).unwrap();
        let mut seen = [0u32; 5];
        for _ in 0..2000 {
            seen[rnd.pick(&r, &st, &[0.5, 0.9, 0.9]) as usize] += 1;
        }
        assert_eq!(seen[1], 0);
        assert!(seen[2] > 900 && seen[4] > 900, "{seen:?}");
        assert!(MaxScore::create(Params::new("tie_break = \"first\""), 1).is_err());
    }

    #[test]
    fn weighted_random_follows_the_scores() {
        let snaps = [snap(0, 0, 0, 0.0); 3];
        let cands = [0, 1, 2];
        let st = state(&snaps, &cands);
        let r = request(0, 16, &[]);
        let mut p = WeightedRandom::create(Params::new(""), 3).unwrap();
        let mut seen = [0u32; 3];
        for _ in 0..30_000 {
            seen[p.pick(&r, &st, &[0.0, 1.0, 3.0]) as usize] += 1;
        }
        assert_eq!(seen[0], 0);
        assert!((7_000..8_000).contains(&seen[1]), "{seen:?}");
        let mut u = RandomPick::create(Params::new(""), 3).unwrap();
        let mut seen = [0u32; 3];
        for _ in 0..30_000 {
            seen[u.pick(&r, &st, &[0.0, 1.0, 3.0]) as usize] += 1;
        }
        assert!(
            seen.iter().all(|&c| (9_500..10_500).contains(&c)),
            "{seen:?}"
        );
    }
}

#[cfg(test)]
mod params_doc_tests {
    use super::*;

    /// `PARAMS_DOC` documents exactly the keys of the params struct.
    #[test]
    fn params_docs_match_the_params_structs() {
        blis_plugin_api::check_params_doc::<MaxScoreParams>(MaxScore::PARAMS_DOC).unwrap();
    }
}

//! Scorers that read the host's per-instance prefix-cache query
//! (`ClusterState::prefix_blocks`: leading prompt blocks each instance's KV
//! cache holds, as of `routing.cache_signal_delay_us`): the reference's
//! `precise-prefix-cache` and `no-hit-lru`.

use blis_plugin_api::{ClusterState, ClusterView, Params, PolicyDef, RequestView, Scorer, Scores};

use crate::prefix_index::{match_length_doc, MatchLength};

/// `c_i` = cached leading blocks of the prompt on instance i; by default
/// min-max normalised over the candidates, `(c_i − min)/(max − min)`, all
/// 1 when equal (or without the query); with `normalise = "total"`,
/// `c_i / ⌊L/B⌋` (llm-d's prefix-cache-scorer over its precise producer).
/// Stateless.
pub struct PrecisePrefixCache {
    by_total: bool,
    match_length: MatchLength,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
struct PreciseParams {
    normalise: String,
    match_length_weight: f64,
    match_length_scale_tokens: f64,
    block_size: u32,
}

impl Default for PreciseParams {
    fn default() -> Self {
        PreciseParams {
            normalise: "min-max".into(),
            match_length_weight: 0.0,
            match_length_scale_tokens: 8192.0,
            block_size: 16,
        }
    }
}

impl PolicyDef for PrecisePrefixCache {
    const NAME: &'static str = "precise-prefix-cache";
    const SUMMARY: &'static str =
        "min-max normalised leading prompt blocks held in each instance's KV cache";
    const PARAMS_DOC: &'static str = concat!(
        "\
normalise                  (\"min-max\" or \"total\", default \"min-max\")  min-max:
                           (c − min)/(max − min) over the candidates (all 1 when
                           equal: the reference's scorer); total: c / ⌊L/B⌋, the
                           fraction of the prompt's blocks cached (llm-d's
                           prefix-cache-scorer), 0 for a prompt under one block.
",
        match_length_doc!()
    );
    const PREFIX_QUERY: bool = true;
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: PreciseParams = params.parse()?;
        let by_total = match p.normalise.as_str() {
            "min-max" => false,
            "total" => true,
            other => {
                return Err(format!(
                    "params.normalise = \"{other}\": must be \"min-max\" or \"total\""
                ))
            }
        };
        Ok(PrecisePrefixCache {
            by_total,
            match_length: MatchLength::new(
                p.match_length_weight,
                p.match_length_scale_tokens,
                p.block_size,
            )?,
        })
    }
}

impl Scorer for PrecisePrefixCache {
    /// Only for hosts without the query (never blis ≥ 0.2): all equal.
    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        scores.extend(std::iter::repeat_n(1.0, cluster.len()));
    }

    fn score_candidates(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        scores: &mut Scores,
    ) {
        let cands = cluster.candidates();
        let c = cluster.prefix_blocks();
        if c.is_empty() {
            scores.extend(std::iter::repeat_n(1.0, cands.len()));
            return;
        }
        if self.by_total {
            let total = request.input_tokens / self.match_length.block_size;
            for &i in cands {
                let m = c[i as usize].min(total);
                scores.push(if total == 0 {
                    0.0
                } else {
                    self.match_length.score(m, f64::from(m) / f64::from(total))
                });
            }
            return;
        }
        let (lo, hi) = cands.iter().fold((u32::MAX, 0), |(l, h), &i| {
            (l.min(c[i as usize]), h.max(c[i as usize]))
        });
        for &i in cands {
            let m = c[i as usize];
            scores.push(self.match_length.score(
                m,
                if hi == lo {
                    1.0
                } else {
                    f64::from(m - lo) / f64::from(hi - lo)
                },
            ));
        }
    }
}

/// Spreads cold requests over the least recently used instances. A request
/// is warm when some candidate holds a leading block of its prompt: then
/// every candidate scores 0.5 and nothing changes. A cold request ranks the
/// never-used candidates first (in instance order), then the used ones from
/// least to most recently used; `score = 1 − rank/(N − 1)` (1 when N = 1).
/// After a cold decision the chosen instance becomes the most recent.
pub struct NoHitLru {
    /// Every request counts as cold (llm-d's scorer when its router sees
    /// no prompt).
    all_cold: bool,
    /// Instances that received a cold request, least recent first.
    lru: Vec<u32>,
    /// The request whose decision was cold (its `observe` updates the list).
    cold_request: Option<u64>,
    rank: Vec<u32>,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct NoHitLruParams {
    all_cold: bool,
}

impl PolicyDef for NoHitLru {
    const NAME: &'static str = "no-hit-lru";
    const SUMMARY: &'static str =
        "cold requests (no cached prefix anywhere) to the least recently used instance; 0.5 when warm";
    const PARAMS_DOC: &'static str = "\
all_cold  (bool, default false)  treat every request as cold (llm-d's
          no-hit-lru-scorer when the router sees no prompt).";
    const PREFIX_QUERY: bool = true;
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: NoHitLruParams = params.parse()?;
        Ok(NoHitLru {
            all_cold: p.all_cold,
            lru: Vec::new(),
            cold_request: None,
            rank: Vec::new(),
        })
    }
}

impl Scorer for NoHitLru {
    /// Only for hosts without the query (never blis ≥ 0.2): all warm.
    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        scores.extend(std::iter::repeat_n(0.5, cluster.len()));
    }

    fn score_candidates(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        scores: &mut Scores,
    ) {
        let cands = cluster.candidates();
        let c = cluster.prefix_blocks();
        let warm = !self.all_cold && (c.is_empty() || cands.iter().any(|&i| c[i as usize] > 0));
        if warm {
            self.cold_request = None;
            scores.extend(std::iter::repeat_n(0.5, cands.len()));
            return;
        }
        self.cold_request = Some(request.id);
        let n = cluster.len() as u32;
        self.lru.retain(|&i| i < n);
        // Rank: never-used candidates in instance order, then used ones LRU → MRU.
        self.rank.clear();
        self.rank.resize(cluster.len(), u32::MAX);
        let mut next = 0;
        for &i in cands {
            if !self.lru.contains(&i) {
                self.rank[i as usize] = next;
                next += 1;
            }
        }
        for &i in &self.lru {
            if cands.contains(&i) {
                self.rank[i as usize] = next;
                next += 1;
            }
        }
        let last = cands.len().saturating_sub(1);
        for &i in cands {
            scores.push(if last == 0 {
                1.0
            } else {
                1.0 - f64::from(self.rank[i as usize]) / last as f64
            });
        }
    }

    fn observe(&mut self, request: &RequestView<'_>, _: &ClusterView<'_>, chosen: usize) {
        if self.cold_request.take() == Some(request.id) {
            let chosen = chosen as u32;
            self.lru.retain(|&i| i != chosen);
            self.lru.push(chosen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_plugin_api::testing::Fixture;

    fn scores(s: &mut impl Scorer, f: &Fixture, id: u64) -> Vec<f64> {
        let mut out = Scores::new();
        s.score_candidates(&f.request(id), &f.state(), &mut out);
        out.to_vec()
    }

    fn precise(params: &str) -> PrecisePrefixCache {
        PrecisePrefixCache::create(Params::new(params), 0).unwrap()
    }

    /// llm-d's prefix-cache-scorer over its precise producer: matched/total,
    /// and the match-length term w·min(1, matched·B/S)² + (1 − w)·ratio.
    #[test]
    fn precise_prefix_cache_by_total_and_match_length() {
        // 100 tokens / 16 = 6 full blocks.
        let f = Fixture::idle(3).prefix_blocks(&[3, 6, 0]).input_tokens(100);
        assert_eq!(
            scores(&mut precise("normalise = \"total\""), &f, 0),
            vec![0.5, 1.0, 0.0]
        );
        // w = 0.5, S = 64: 3 blocks = 48 tokens → (48/64)² = 0.5625;
        // 0.5·0.5625 + 0.5·0.5 = 0.53125; 6 blocks = 96 ≥ 64 → 0.5 + 0.5 = 1.
        let mut s = precise(
            "normalise = \"total\"\nmatch_length_weight = 0.5\nmatch_length_scale_tokens = 64",
        );
        assert_eq!(scores(&mut s, &f, 0), vec![0.53125, 1.0, 0.0]);
        // A prompt under one block scores 0 everywhere.
        let short = Fixture::idle(2).prefix_blocks(&[0, 0]).input_tokens(10);
        assert_eq!(
            scores(&mut precise("normalise = \"total\""), &short, 0),
            vec![0.0, 0.0]
        );
        assert!(PrecisePrefixCache::create(Params::new("normalise = \"max\""), 0).is_err());
        blis_plugin_api::check_params_doc::<PreciseParams>(PrecisePrefixCache::PARAMS_DOC).unwrap();
        assert!(PrecisePrefixCache::create(Params::new("match_length_weight = 1.5"), 0).is_err());
        assert!(PrecisePrefixCache::create(
            Params::new("match_length_weight = 0.5\nmatch_length_scale_tokens = 0"),
            0
        )
        .is_err());
    }

    #[test]
    fn precise_prefix_cache_min_max_normalises_over_the_candidates() {
        let f = Fixture::idle(4).prefix_blocks(&[3, 7, 1, 5]);
        assert_eq!(
            scores(&mut precise(""), &f, 0),
            vec![2.0 / 6.0, 1.0, 0.0, 4.0 / 6.0]
        );
        // Instance 1 filtered out: max is now 5.
        let f = f.candidates(&[0, 2, 3]);
        assert_eq!(scores(&mut precise(""), &f, 0), vec![0.5, 0.0, 1.0]);
        // All equal, or no query: all 1.
        let f = Fixture::idle(3).prefix_blocks(&[2, 2, 2]);
        assert_eq!(scores(&mut precise(""), &f, 0), vec![1.0; 3]);
        assert_eq!(scores(&mut precise(""), &Fixture::idle(3), 0), vec![1.0; 3]);
    }

    /// `1 − rank/(N − 1)` for each instance's rank.
    fn by_rank(ranks: &[u32]) -> Vec<f64> {
        let last = (ranks.len() - 1) as f64;
        ranks.iter().map(|&r| 1.0 - f64::from(r) / last).collect()
    }

    #[test]
    fn no_hit_lru_ranks_never_used_then_least_recent_and_ignores_warm_requests() {
        let mut s = NoHitLru::create(Params::new(""), 0).unwrap();
        let cold = Fixture::idle(4).prefix_blocks(&[0, 0, 0, 0]);
        let view = cold.view();
        // Nothing used yet: instance order, 1 − rank/3.
        assert_eq!(scores(&mut s, &cold, 1), by_rank(&[0, 1, 2, 3]));
        s.observe(&cold.request(1), &view, 2);
        // 2 is used: never-used 0, 1, 3 first, then 2.
        assert_eq!(scores(&mut s, &cold, 2), by_rank(&[0, 1, 3, 2]));
        s.observe(&cold.request(2), &view, 0);
        // Used: 2 (older), 0 (newer); never used: 1, 3.
        assert_eq!(scores(&mut s, &cold, 3), by_rank(&[3, 0, 2, 1]));
        // An observe for another request id changes nothing.
        s.observe(&cold.request(99), &view, 1);
        assert_eq!(scores(&mut s, &cold, 4), by_rank(&[3, 0, 2, 1]));
        // Warm: all 0.5, and its observe does not touch the list.
        let warm = Fixture::idle(4).prefix_blocks(&[0, 0, 1, 0]);
        assert_eq!(scores(&mut s, &warm, 5), vec![0.5; 4]);
        s.observe(&warm.request(5), &view, 1);
        assert_eq!(scores(&mut s, &cold, 6), by_rank(&[3, 0, 2, 1]));
        // Candidates only: 1 and 2 → never-used 1 first, then 2.
        let two = cold.clone().candidates(&[1, 2]);
        assert_eq!(scores(&mut s, &two, 7), vec![1.0, 0.0]);
        // A single candidate scores 1.
        let one = cold.clone().candidates(&[2]);
        assert_eq!(scores(&mut s, &one, 8), vec![1.0]);
    }
}

//! Routing: a single router plugin, or the weighted composition of scorer
//! plugins (score → clamp to [0, 1] → weights normalised to sum 1 → sum →
//! argmax, ties to the lowest index), as llm-d's endpoint picker does.

use blis_plugin_api::{ClusterView, RequestView};

use crate::plugins::{PluginError, RouterPolicy, ScorerPolicy};

/// One scorer with its normalised weight.
pub struct WeightedScorer {
    pub scorer: ScorerPolicy,
    pub weight: f64,
}

/// How requests are routed.
pub enum Routing {
    /// A router plugin picks the instance.
    Single(RouterPolicy),
    /// The host combines scorer plugins.
    Weighted {
        scorers: Vec<WeightedScorer>,
        composite: Vec<f64>,
    },
}

impl Routing {
    /// Weighted routing from `(scorer, weight)` pairs; weights must be
    /// finite, ≥ 0 and not all zero (checked by the config layer).
    pub fn weighted(scorers: Vec<(ScorerPolicy, f64)>) -> Routing {
        let weights = normalise(&scorers.iter().map(|(_, w)| *w).collect::<Vec<_>>());
        Routing::Weighted {
            scorers: scorers
                .into_iter()
                .zip(weights)
                .map(|((scorer, _), weight)| WeightedScorer { scorer, weight })
                .collect(),
            composite: Vec::new(),
        }
    }

    /// Pick the instance for `req`. For weighted routing, also returns the
    /// composite score of every instance.
    pub fn route(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> Result<(u32, Option<&[f64]>), Box<PluginError>> {
        match self {
            Routing::Single(r) => Ok((r.route(req, cluster)?, None)),
            Routing::Weighted { scorers, composite } => {
                composite.clear();
                composite.resize(cluster.len(), 0.0);
                for ws in scorers.iter_mut() {
                    let s = ws.scorer.score(req, cluster)?;
                    for (c, &x) in composite.iter_mut().zip(s) {
                        *c += x * ws.weight;
                    }
                }
                let mut best = 0;
                for (i, &c) in composite.iter().enumerate() {
                    if c > composite[best] {
                        best = i;
                    }
                }
                Ok((best as u32, Some(composite.as_slice())))
            }
        }
    }

    /// Tell every stateful policy where `req` went.
    pub fn observe(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> Result<(), Box<PluginError>> {
        match self {
            Routing::Single(r) => r.observe(req, cluster, chosen),
            Routing::Weighted { scorers, .. } => {
                for ws in scorers.iter_mut() {
                    ws.scorer.observe(req, cluster, chosen)?;
                }
                Ok(())
            }
        }
    }

    /// Human-readable description for traces and logs.
    pub fn describe(&self) -> String {
        match self {
            Routing::Single(r) => format!("{}::{}", r.label().library, r.label().name),
            Routing::Weighted { scorers, .. } => {
                let parts: Vec<String> = scorers
                    .iter()
                    .map(|w| format!("{}:{}", w.scorer.label().name, w.weight))
                    .collect();
                format!("weighted({})", parts.join(","))
            }
        }
    }
}

/// Weights scaled to sum 1 (finite, ≥ 0, not all zero in). When their sum
/// overflows (`1e308` twice is infinite, and every weight would normalise
/// to zero) they are first divided by the largest, so it cannot.
pub fn normalise(weights: &[f64]) -> Vec<f64> {
    let total: f64 = weights.iter().sum();
    if total.is_finite() {
        return weights.iter().map(|w| w / total).collect();
    }
    let max = weights.iter().copied().fold(0.0, f64::max);
    let scaled: Vec<f64> = weights.iter().map(|w| w / max).collect();
    let total: f64 = scaled.iter().sum();
    scaled.iter().map(|w| w / total).collect()
}

#[cfg(test)]
mod tests {
    use super::normalise;

    #[test]
    fn weights_normalise_exactly_and_huge_weights_do_not_overflow() {
        assert_eq!(
            normalise(&[3.0, 2.0, 2.0]),
            vec![3.0 / 7.0, 2.0 / 7.0, 2.0 / 7.0]
        );
        // Issue 18, defect 2: the sum of these is infinite.
        assert_eq!(normalise(&[1e308, 1e308]), vec![0.5, 0.5]);
        assert_eq!(
            normalise(&[f64::MAX, 0.0, f64::MAX / 4.0]),
            vec![0.8, 0.0, 0.2]
        );
        assert_eq!(normalise(&[0.0, 5e-324]), vec![0.0, 1.0]);
    }
}

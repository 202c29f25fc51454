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
        let total: f64 = scorers.iter().map(|(_, w)| *w).sum();
        Routing::Weighted {
            scorers: scorers
                .into_iter()
                .map(|(scorer, w)| WeightedScorer {
                    scorer,
                    weight: w / total,
                })
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

//! Routing: a single router plugin, or one scheduling profile shaped like
//! llm-d's (filters → weighted scorers → picker) run by the single-profile
//! handler.
//!
//! The `weighted` policy is the profile with no filter, weights normalised to
//! sum 1 and the host's own max-score pick (ties to the lowest index): it
//! computes exactly what it always did, without a picker call. A
//! `[[routing.profiles]]` profile keeps llm-d's raw weights (only their ratios
//! matter to the pickers) and may name filters and a picker plugin.
//!
//! A profile whose filters leave no candidate fails, as in llm-d; blis then
//! rejects the request (counted with the rejected requests, traced with the
//! filter that emptied the set).

use blis_plugin_api::{
    ClusterState, ClusterView, EventKind, Hooks, RequestEvent, RequestView, Rng,
};

use crate::plugins::{FilterPolicy, PickerPolicy, PluginError, RouterPolicy, ScorerPolicy};

/// One scorer with its weight (normalised for `weighted`, raw in a profile).
pub struct WeightedScorer {
    pub scorer: ScorerPolicy,
    pub weight: f64,
}

/// How a profile chooses among its scored candidates.
pub enum Pick {
    /// The highest total wins (the host does it): ties to the lowest index,
    /// or to a uniformly random tied one when a generator is given
    /// (`tie_break = "random"`, llm-d's max-score-picker).
    MaxScore(Option<Rng>),
    /// A picker plugin.
    Plugin(PickerPolicy),
}

/// One scheduling profile: filters, weighted scorers, a picker.
pub struct Profile {
    pub name: String,
    pub filters: Vec<FilterPolicy>,
    pub scorers: Vec<WeightedScorer>,
    pub pick: Pick,
    /// Weighted totals: per instance without filters, per candidate with.
    composite: Vec<f64>,
    /// Candidates still in play (only used with filters).
    candidates: Vec<u32>,
    /// Per filter: the instances it removed at the last decision.
    removed: Vec<Vec<u32>>,
    /// The instances a decision may choose, when not all (instance
    /// lifecycle: the routable ones); `None` = every instance.
    eligible: Option<Vec<u32>>,
    /// Per filter: the reason it gave at the last decision (asked only
    /// when `keep_reasons` and it removed something).
    reasons: Vec<Option<String>>,
    /// A decision trace is written: ask filters for their reasons.
    keep_reasons: bool,
}

/// The result of one routing decision.
pub enum Decision<'a> {
    /// Route to `chosen`. `scores` are the weighted totals (per instance, or
    /// per candidate when `candidates` is set), if the policy has scores.
    Routed {
        chosen: u32,
        scores: Option<&'a [f64]>,
        candidates: Option<&'a [u32]>,
    },
    /// The filters left no candidate: filter `filter` emptied the set.
    NoCandidate { filter: usize },
}

impl Decision<'_> {
    /// The chosen instance, if the request was routed.
    pub fn chosen(&self) -> Option<u32> {
        match self {
            Decision::Routed { chosen, .. } => Some(*chosen),
            Decision::NoCandidate { .. } => None,
        }
    }
}

/// How requests are routed.
pub enum Routing {
    /// A router plugin picks the instance.
    Single(RouterPolicy),
    /// A scheduling profile.
    Profile(Box<Profile>),
    /// A profile per client, chosen by its request header.
    ByClient(Box<ByClient>),
}

impl Profile {
    /// A profile. `normalise` divides the weights by their sum (the
    /// `weighted` policy; see [`normalised_weights`], which cannot overflow);
    /// weights are checked by the config layer.
    pub fn new(
        name: String,
        filters: Vec<FilterPolicy>,
        scorers: Vec<(ScorerPolicy, f64)>,
        pick: Pick,
        normalise: bool,
    ) -> Profile {
        let weights = normalised_weights(&scorers.iter().map(|(_, w)| *w).collect::<Vec<_>>());
        let removed = filters.iter().map(|_| Vec::new()).collect();
        let reasons = filters.iter().map(|_| None).collect();
        Profile {
            name,
            filters,
            scorers: scorers
                .into_iter()
                .zip(weights)
                .map(|((scorer, w), normalised)| WeightedScorer {
                    scorer,
                    weight: if normalise { normalised } else { w },
                })
                .collect(),
            pick,
            composite: Vec::new(),
            candidates: Vec::new(),
            removed,
            eligible: None,
            reasons,
            keep_reasons: false,
        }
    }

    /// True when a decision needs the 0.2 cluster state (filters, a picker
    /// plugin, or a scorer that reads it).
    pub fn needs_state(&self) -> bool {
        !self.filters.is_empty()
            || matches!(self.pick, Pick::Plugin(_))
            || self.scorers.iter().any(|s| s.scorer.label().uses_state)
            || self.needs_prefix_query()
    }

    /// True when some policy of the profile reads the prefix-cache query.
    pub fn needs_prefix_query(&self) -> bool {
        self.filters.iter().any(|f| f.label().prefix_query)
            || self.scorers.iter().any(|s| s.scorer.label().prefix_query)
            || matches!(&self.pick, Pick::Plugin(p) if p.label().prefix_query)
    }

    /// True when some policy of the profile may read the prompt's block
    /// hashes.
    pub fn reads_block_hashes(&self) -> bool {
        self.filters.iter().any(|f| f.label().block_hashes)
            || self.scorers.iter().any(|s| s.scorer.label().block_hashes)
            || matches!(&self.pick, Pick::Plugin(p) if p.label().block_hashes)
    }

    /// Scorer `k`'s score (clamped to [0, 1], before its weight) of
    /// `instance` at the last decision, if it scored it. A scorer's scores
    /// are per instance when it scored them all, else per candidate.
    pub fn last_score(&self, k: usize, instance: u32, n_instances: usize) -> Option<f64> {
        let s = self.scorers.get(k)?.scorer.last_scores();
        if s.len() == n_instances {
            s.get(instance as usize).copied()
        } else {
            let at = self.candidates.iter().position(|&c| c == instance)?;
            s.get(at).copied()
        }
    }

    /// The instances each filter removed at the last decision, with the
    /// reason it gave (when reasons are kept).
    pub fn removed(&self) -> impl Iterator<Item = (&FilterPolicy, &[u32], Option<&str>)> {
        self.filters
            .iter()
            .zip(&self.removed)
            .zip(&self.reasons)
            .map(|((f, r), why)| (f, r.as_slice(), why.as_deref()))
    }

    fn route(
        &mut self,
        req: &RequestView<'_>,
        state: Option<&ClusterState<'_>>,
        cluster: &ClusterView<'_>,
    ) -> Result<Decision<'_>, Box<PluginError>> {
        let Some(state) = state else {
            // No filter and the host's max-score: every instance, as `weighted` always did.
            self.composite.clear();
            self.composite.resize(cluster.len(), 0.0);
            for ws in self.scorers.iter_mut() {
                let s = ws.scorer.score(req, cluster)?;
                for (c, &x) in self.composite.iter_mut().zip(s) {
                    *c += x * ws.weight;
                }
            }
            let Some(e) = &self.eligible else {
                let best = pick_max(&mut self.pick, &self.composite);
                return Ok(Decision::Routed {
                    chosen: best as u32,
                    scores: Some(&self.composite),
                    candidates: None,
                });
            };
            // Only the eligible instances are candidates: keep their totals.
            self.candidates.clear();
            self.candidates.extend_from_slice(e);
            for (k, &i) in self.candidates.iter().enumerate() {
                self.composite[k] = self.composite[i as usize];
            }
            self.composite.truncate(self.candidates.len());
            return Ok(Decision::Routed {
                chosen: self.candidates[pick_max(&mut self.pick, &self.composite)],
                scores: Some(&self.composite),
                candidates: Some(&self.candidates),
            });
        };
        self.candidates.clear();
        match &self.eligible {
            None => self.candidates.extend(0..cluster.len() as u32),
            Some(e) => self.candidates.extend_from_slice(e),
        }
        for (k, f) in self.filters.iter_mut().enumerate() {
            let view = ClusterState {
                candidates: abi_stable::std_types::RSlice::from_slice(&self.candidates),
                ..*state
            };
            let kept_all = f.filter(req, &view)?.len() == self.candidates.len();
            if self.keep_reasons {
                self.reasons[k] = if kept_all { None } else { f.take_reason() };
            }
            let kept = f.kept();
            let removed = &mut self.removed[k];
            removed.clear();
            let mut kept_iter = kept.iter().peekable();
            for &c in &self.candidates {
                if kept_iter.peek() == Some(&&c) {
                    kept_iter.next();
                } else {
                    removed.push(c);
                }
            }
            if kept.is_empty() {
                for r in &mut self.removed[k + 1..] {
                    r.clear();
                }
                return Ok(Decision::NoCandidate { filter: k });
            }
            self.candidates.clear();
            self.candidates.extend_from_slice(kept);
        }
        let view = ClusterState {
            candidates: abi_stable::std_types::RSlice::from_slice(&self.candidates),
            ..*state
        };
        self.composite.clear();
        self.composite.resize(self.candidates.len(), 0.0);
        for ws in self.scorers.iter_mut() {
            let s = ws.scorer.score_candidates(req, &view)?;
            for (c, &x) in self.composite.iter_mut().zip(s) {
                *c += x * ws.weight;
            }
        }
        let chosen = match &mut self.pick {
            Pick::MaxScore(rng) => self.candidates[max_score(&self.composite, rng.as_mut())],
            Pick::Plugin(p) => p.pick(req, &view, &self.composite)?,
        };
        Ok(Decision::Routed {
            chosen,
            scores: Some(&self.composite),
            candidates: Some(&self.candidates),
        })
    }
}

/// The host's pick of the filterless path (`Pick::MaxScore`; a picker
/// plugin never takes that path).
fn pick_max(pick: &mut Pick, values: &[f64]) -> usize {
    match pick {
        Pick::MaxScore(rng) => max_score(values, rng.as_mut()),
        Pick::Plugin(_) => max_score(values, None),
    }
}

/// Index of the highest value: ties to the lowest index, or with `rng` to
/// the r-th tied index, r uniform in [0, ties) (one draw per decision with
/// a tie, none without).
fn max_score(values: &[f64], rng: Option<&mut Rng>) -> usize {
    let mut best = 0;
    let mut ties = 1u64;
    for (i, &c) in values.iter().enumerate().skip(1) {
        if c > values[best] {
            best = i;
            ties = 1;
        } else if c == values[best] {
            ties += 1;
        }
    }
    match rng {
        Some(rng) if ties > 1 => {
            let r = rng.below(ties) as usize;
            let top = values[best];
            values
                .iter()
                .enumerate()
                .filter(|(_, &c)| c == top)
                .nth(r)
                .map_or(best, |(i, _)| i)
        }
        _ => best,
    }
}

/// Several scheduling profiles, each workload client's requests running
/// the one its request header names (llm-d's header-profile-handler). The
/// header is a client's, so the choice is made per client at build time.
pub struct ByClient {
    pub profiles: Vec<Profile>,
    /// The profile of each workload client (in workload order); a client
    /// beyond the list (a trace's) runs `default`.
    pub of_client: Vec<u32>,
    pub default: u32,
    /// The profile of the decision under way.
    current: usize,
}

impl ByClient {
    pub fn new(profiles: Vec<Profile>, of_client: Vec<u32>, default: u32) -> ByClient {
        ByClient {
            profiles,
            of_client,
            default,
            current: default as usize,
        }
    }
}

impl Routing {
    /// The `weighted` policy: `(scorer, weight)` pairs, weights finite, ≥ 0
    /// and not all zero (checked by the config layer); ties broken by `tie`
    /// at random, or to the lowest index without.
    pub fn weighted(scorers: Vec<(ScorerPolicy, f64)>, tie: Option<Rng>) -> Routing {
        Routing::Profile(Box::new(Profile::new(
            "weighted".to_string(),
            Vec::new(),
            scorers,
            Pick::MaxScore(tie),
            true,
        )))
    }

    /// Every profile (none for a router plugin).
    fn profiles(&self) -> &[Profile] {
        match self {
            Routing::Single(_) => &[],
            Routing::Profile(p) => std::slice::from_ref(&**p),
            Routing::ByClient(b) => &b.profiles,
        }
    }

    fn profiles_mut(&mut self) -> &mut [Profile] {
        match self {
            Routing::Single(_) => &mut [],
            Routing::Profile(p) => std::slice::from_mut(&mut **p),
            Routing::ByClient(b) => &mut b.profiles,
        }
    }

    /// The next decision is for a request of workload client `client`
    /// (only profiles chosen per client care).
    #[inline]
    pub fn select_client(&mut self, client: u32) {
        if let Routing::ByClient(b) = self {
            b.current = b
                .of_client
                .get(client as usize)
                .copied()
                .unwrap_or(b.default) as usize;
        }
    }

    /// The profile of the decision under way, if routing uses profiles.
    fn current_mut(&mut self) -> Option<&mut Profile> {
        match self {
            Routing::Single(_) => None,
            Routing::Profile(p) => Some(p),
            Routing::ByClient(b) => b.profiles.get_mut(b.current),
        }
    }

    /// Restrict the next decisions to `eligible` instances (ascending, not
    /// empty), or lift the restriction with `None` (the instance lifecycle:
    /// only routable instances are chosen). A router plugin is restricted by
    /// the cluster, which shows it only the eligible instances.
    pub fn set_eligible(&mut self, eligible: Option<&[u32]>) {
        if let Some(p) = self.current_mut() {
            match (eligible, &mut p.eligible) {
                (None, e) => *e = None,
                (Some(new), Some(old)) if old.as_slice() == new => {}
                (Some(new), e) => *e = Some(new.to_vec()),
            }
        }
    }

    /// True when decisions need the 0.2 cluster state.
    pub fn needs_state(&self) -> bool {
        self.profiles().iter().any(Profile::needs_state)
    }

    /// True when decisions need the per-instance prefix-cache query.
    pub fn needs_prefix_query(&self) -> bool {
        self.profiles().iter().any(Profile::needs_prefix_query)
    }

    /// True when the routing policy may read the instance snapshots.
    pub fn reads_snapshots(&self) -> bool {
        match self {
            Routing::Single(r) => r.label().snapshots,
            Routing::Profile(_) | Routing::ByClient(_) => true,
        }
    }

    /// True when the routing policy may read the prompt's block hashes.
    pub fn reads_block_hashes(&self) -> bool {
        match self {
            Routing::Single(r) => r.label().block_hashes,
            _ => self.profiles().iter().any(Profile::reads_block_hashes),
        }
    }

    /// Ask filters for the reasons of their removals (when a decision
    /// trace is written).
    pub fn keep_reasons(&mut self, keep: bool) {
        for p in self.profiles_mut() {
            p.keep_reasons = keep;
        }
    }

    /// The profile of the decision under way, if routing uses one.
    pub fn profile(&self) -> Option<&Profile> {
        match self {
            Routing::Single(_) => None,
            Routing::Profile(p) => Some(p),
            Routing::ByClient(b) => b.profiles.get(b.current),
        }
    }

    /// Pick the instance for `req`. `state` must be given when
    /// [`Routing::needs_state`] says so.
    pub fn route(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        state: Option<&ClusterState<'_>>,
    ) -> Result<Decision<'_>, Box<PluginError>> {
        match self {
            Routing::Single(r) => Ok(Decision::Routed {
                chosen: r.route(req, cluster)?,
                scores: None,
                candidates: None,
            }),
            Routing::Profile(p) => p.route(req, state, cluster),
            Routing::ByClient(b) => b.profiles[b.current].route(req, state, cluster),
        }
    }

    /// Tell every stateful policy of the deciding profile where `req` went.
    pub fn observe(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> Result<(), Box<PluginError>> {
        match self {
            Routing::Single(r) => r.observe(req, cluster, chosen),
            _ => match self.current_mut() {
                Some(p) => p.observe(req, cluster, chosen),
                None => Ok(()),
            },
        }
    }

    /// The union of the lifecycle events the routing policies handle.
    pub fn hooks(&self) -> Hooks {
        match self {
            Routing::Single(r) => r.label().hooks,
            _ => Hooks(self.profiles().iter().fold(0, |h, p| h | p.hooks().0)),
        }
    }

    /// Deliver a lifecycle event to every routing policy that handles it.
    pub fn on_event(
        &mut self,
        event: &RequestEvent<'_>,
        cluster: &ClusterState<'_>,
    ) -> Result<(), Box<PluginError>> {
        let kind: EventKind = event.kind;
        match self {
            Routing::Single(r) if r.wants(kind) => r.on_event(event, cluster),
            Routing::Single(_) => Ok(()),
            _ => {
                for p in self.profiles_mut() {
                    p.on_event(event, cluster)?;
                }
                Ok(())
            }
        }
    }

    /// Human-readable description for traces and logs.
    pub fn describe(&self) -> String {
        match self {
            Routing::Single(r) => format!("router {}", named(r.label())),
            Routing::Profile(p) => p.describe(),
            Routing::ByClient(b) => format!(
                "header-chosen profiles (default '{}'): {}",
                b.profiles[b.default as usize].name,
                b.profiles
                    .iter()
                    .map(Profile::describe)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
    }
}

fn named(l: &crate::plugins::PolicyLabel) -> String {
    format!("{}::{}", l.library, l.name)
}

impl Profile {
    fn observe(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> Result<(), Box<PluginError>> {
        for f in self.filters.iter_mut() {
            f.observe(req, cluster, chosen)?;
        }
        for ws in self.scorers.iter_mut() {
            ws.scorer.observe(req, cluster, chosen)?;
        }
        if let Pick::Plugin(pk) = &mut self.pick {
            pk.observe(req, cluster, chosen)?;
        }
        Ok(())
    }

    fn hooks(&self) -> Hooks {
        let mut h = 0;
        for f in &self.filters {
            h |= f.label().hooks.0;
        }
        for ws in &self.scorers {
            h |= ws.scorer.label().hooks.0;
        }
        if let Pick::Plugin(pk) = &self.pick {
            h |= pk.label().hooks.0;
        }
        Hooks(h)
    }

    fn on_event(
        &mut self,
        event: &RequestEvent<'_>,
        cluster: &ClusterState<'_>,
    ) -> Result<(), Box<PluginError>> {
        let kind: EventKind = event.kind;
        for f in self.filters.iter_mut().filter(|f| f.wants(kind)) {
            f.on_event(event, cluster)?;
        }
        for ws in self.scorers.iter_mut().filter(|w| w.scorer.wants(kind)) {
            ws.scorer.on_event(event, cluster)?;
        }
        match &mut self.pick {
            Pick::Plugin(pk) if pk.wants(kind) => pk.on_event(event, cluster),
            _ => Ok(()),
        }
    }

    fn describe(&self) -> String {
        let list = |v: Vec<String>| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        let filters = list(self.filters.iter().map(|f| named(f.label())).collect());
        let scorers = list(
            self.scorers
                .iter()
                .map(|w| format!("{}:{}", named(w.scorer.label()), format_weight(w.weight)))
                .collect(),
        );
        let picker = match &self.pick {
            Pick::MaxScore(None) => "max-score (host, ties to the lowest index)".to_string(),
            Pick::MaxScore(Some(_)) => "max-score (host, ties at random)".to_string(),
            Pick::Plugin(pk) => named(pk.label()),
        };
        format!(
            "{} profile '{}': filters {filters}; scorers {scorers}; picker {picker}",
            if self.name == "weighted" {
                "weighted"
            } else {
                "scheduling"
            },
            self.name
        )
    }
}

/// Weights scaled to sum 1 (finite, ≥ 0, not all zero in). When their sum
/// overflows (`1e308` twice is infinite, and every weight would normalise
/// to zero) they are first divided by the largest, so it cannot.
pub fn normalised_weights(weights: &[f64]) -> Vec<f64> {
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
    use super::normalised_weights as normalise;

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

/// A weight for people: at most 4 decimals, no trailing zeros
/// (`3/7` → `0.4286`, `2.0` → `2`).
pub fn format_weight(w: f64) -> String {
    let s = format!("{w:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod weight_tests {
    use super::format_weight;

    #[test]
    fn weights_print_short() {
        assert_eq!(format_weight(3.0 / 7.0), "0.4286");
        assert_eq!(format_weight(2.0), "2");
        assert_eq!(format_weight(0.5), "0.5");
        assert_eq!(format_weight(0.0), "0");
        assert_eq!(format_weight(1.0 / 3.0), "0.3333");
    }
}

//! llm-d's `session-affinity-scorer` and `session-affinity-filter`
//! (llm-d-router.md §2.4, §2.5): a request of a multi-turn session goes
//! back to the instance its session's previous request was routed to.
//!
//! The session is the host's ([`blis_plugin_api::session`]): every round
//! of one conversation of the workload shares it, which is what a client
//! sending llm-d's `x-session-id` header (strategy `session_id`) or echoing
//! the `x-session-token` of the last response (`encoded_endpoint_header`)
//! achieves. After each decision the session is bound to the chosen
//! instance; with `ttl_us` a binding not renewed for that long is
//! forgotten (llm-d's session-id strategy keeps one for 300 s).
//!
//! The scorer gives 1 to the bound instance and 0 to every other (all 0
//! for a request outside a session, or a session not bound or expired).
//! The filter keeps only the bound instance when it is a candidate, else
//! every candidate.

use std::collections::HashMap;

use blis_plugin_api::{
    session, ClusterState, ClusterView, Filter, Kept, Params, PolicyDef, RequestView, Scorer,
    Scores,
};
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct SessionParams {
    ttl_us: Option<i64>,
}

/// Session → (instance, time of the last binding), with the expiry rule.
struct Bindings {
    ttl_us: Option<i64>,
    map: HashMap<u64, (u32, i64)>,
    /// Decisions since the last sweep of expired bindings.
    since_sweep: u32,
}

impl Bindings {
    fn create(params: Params<'_>) -> Result<Bindings, String> {
        let p: SessionParams = params.parse()?;
        if let Some(t) = p.ttl_us {
            if t <= 0 {
                return Err(format!(
                    "params.ttl_us = {t}: must be > 0 (leave it out for bindings that never expire)"
                ));
            }
        }
        Ok(Bindings {
            ttl_us: p.ttl_us,
            map: HashMap::new(),
            since_sweep: 0,
        })
    }

    /// The instance `req`'s session is bound to at `now`, if any.
    fn bound(&self, req: &RequestView<'_>, now: i64) -> Option<u32> {
        let s = session::request_session(req)?;
        let &(i, at) = self.map.get(&s)?;
        match self.ttl_us {
            Some(ttl) if now - at >= ttl => None,
            _ => Some(i),
        }
    }

    /// After a decision: bind `req`'s session to `chosen`.
    fn bind(&mut self, req: &RequestView<'_>, now: i64, chosen: usize) {
        let Some(s) = session::request_session(req) else {
            return;
        };
        self.map.insert(s, (chosen as u32, now));
        self.since_sweep += 1;
        if let Some(ttl) = self.ttl_us {
            if self.since_sweep as usize > self.map.len().max(1024) {
                self.map.retain(|_, &mut (_, at)| now - at < ttl);
                self.since_sweep = 0;
            }
        }
    }
}

const PARAMS_DOC: &str = "\
ttl_us  (integer > 0, µs, optional)  forget a session's instance when the
        session has not been routed for this long (llm-d's session_id
        strategy: 300000000); absent: never.";

/// 1 for the instance the request's session was last routed to, else 0.
pub struct SessionAffinityScorer(Bindings);

impl PolicyDef for SessionAffinityScorer {
    const NAME: &'static str = "session-affinity";
    const SUMMARY: &'static str =
        "1 for the instance the request's session was last routed to, else 0";
    const PARAMS_DOC: &'static str = PARAMS_DOC;

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        Bindings::create(params).map(SessionAffinityScorer)
    }
}

impl Scorer for SessionAffinityScorer {
    fn score(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        let bound = self.0.bound(request, cluster.clock_us);
        for i in 0..cluster.len() as u32 {
            scores.push(if bound == Some(i) { 1.0 } else { 0.0 });
        }
    }

    fn observe(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>, chosen: usize) {
        self.0.bind(request, cluster.clock_us, chosen);
    }
}

/// Only the instance the request's session was last routed to, when it is
/// a candidate; else every candidate.
pub struct SessionAffinityFilter(Bindings);

impl PolicyDef for SessionAffinityFilter {
    const NAME: &'static str = "session-affinity";
    const SUMMARY: &'static str =
        "keep only the instance the request's session was last routed to, when it is a candidate";
    const PARAMS_DOC: &'static str = PARAMS_DOC;

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        Bindings::create(params).map(SessionAffinityFilter)
    }
}

impl Filter for SessionAffinityFilter {
    fn filter(&mut self, request: &RequestView<'_>, cluster: &ClusterState<'_>, keep: &mut Kept) {
        let candidates = cluster.candidates();
        match self.0.bound(request, cluster.clock_us) {
            Some(i) if candidates.contains(&i) => keep.push(i),
            _ => keep.extend(candidates.iter().copied()),
        }
    }

    fn observe(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>, chosen: usize) {
        self.0.bind(request, cluster.clock_us, chosen);
    }
}

//! llm-d's `token-load-scorer` with the `inflight-load-producer` it reads
//! (llm-d-router.md §2.5, §6.4): the router's own count of the tokens it
//! has sent each instance and not yet seen answered.
//!
//! At a decision, instance `i` is charged `t = in-flight tokens(i) +
//! uncached(i)`, `uncached(i) = L − matched(i)·B` (L the prompt length, B
//! the KV block size, `matched(i)` the prompt blocks the router-side prefix
//! index holds for `i`, as `prefix-affinity` counts them), and scores `1`
//! when `t = 0`, else `1 − min(t, T)/T`. After the decision the chosen
//! instance's count grows by the request's uncached tokens there (plus,
//! with `output_ratio`, the estimated output `round(L·ratio)`, capped by
//! `max_output_estimate`), and its prompt blocks enter the index. The
//! tokens leave the count at the request's first token (without an output
//! estimate) or when it finishes (with one), and at a drop in either case.
//!
//! The same count, as llm-d's concurrency-detector uses it as a filter in
//! `tokens` or `hybrid` mode, is the `in-flight-limit` filter.

use std::collections::HashMap;

use blis_plugin_api::{
    ClusterState, ClusterView, EventKind, Filter, Hooks, Kept, Params, PolicyDef, RequestEvent,
    RequestView, Scorer, Scores,
};
use serde::Deserialize;

use crate::prefix_index::RequestMatches;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct TokenLoadParams {
    pub threshold: u64,
    pub block_size: u32,
    pub capacity: usize,
    pub output_ratio: Option<f64>,
    pub max_output_estimate: Option<u64>,
}

impl Default for TokenLoadParams {
    fn default() -> Self {
        TokenLoadParams {
            threshold: 4_194_304,
            block_size: 16,
            capacity: 31_250,
            output_ratio: None,
            max_output_estimate: None,
        }
    }
}

/// In-flight uncached tokens per instance, llm-d's token-load scorer.
pub struct TokenLoad {
    threshold: u64,
    load: InFlight,
}

/// llm-d's inflight-load-producer: the tokens the router has sent each
/// instance and not yet seen answered, with the prefix index it counts
/// uncached tokens by.
pub(crate) struct InFlight {
    output_ratio: Option<f64>,
    max_output_estimate: Option<u64>,
    prompts: RequestMatches,
    /// Tokens charged to each instance and not yet released.
    in_flight: Vec<u64>,
    /// Request id → (instance, tokens released at the first token, tokens
    /// released at the end).
    charged: HashMap<u64, (usize, u64, u64)>,
}

impl PolicyDef for TokenLoad {
    const NAME: &'static str = "token-load";
    const SUMMARY: &'static str =
        "1 − min(in-flight + uncached tokens, threshold)/threshold (llm-d's token-load-scorer)";
    const PARAMS_DOC: &'static str = "\
threshold            (integer ≥ 1, tokens, default 4194304)  load that scores 0
                     (llm-d's queueThresholdTokens).
block_size           (integer ≥ 1, tokens, default 16)  tokens per prompt block
                     hash: the run's KV block size.
capacity             (integer ≥ 1, block hashes per instance, default 31250)
                     size of each instance's LRU set in the prefix index.
output_ratio         (number > 0, optional)  also charge round(prompt × ratio)
                     output tokens, held until the request finishes
                     (llm-d's addEstimatedOutputTokens with outputRatio).
max_output_estimate  (integer ≥ 1, optional)  cap on that estimate.";
    const HOOKS: Hooks = Hooks::of(EventKind::FIRST_TOKEN)
        .with(EventKind::COMPLETED)
        .with(EventKind::DROPPED);

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: TokenLoadParams = params.parse()?;
        if p.threshold == 0 {
            return Err("params.threshold must be at least 1".into());
        }
        Ok(TokenLoad {
            threshold: p.threshold,
            load: InFlight::create(&p)?,
        })
    }

    fn on_event(&mut self, event: &RequestEvent<'_>, _cluster: &ClusterState<'_>) {
        self.load.on_lifecycle(event.kind, event.request.id);
    }
}

impl InFlight {
    /// The counter of `p` (its checks: see `TokenLoad::create`).
    pub(crate) fn create(p: &TokenLoadParams) -> Result<InFlight, String> {
        if p.block_size == 0 {
            return Err("params.block_size must be at least 1".into());
        }
        if p.capacity == 0 {
            return Err("params.capacity must be at least 1".into());
        }
        if let Some(r) = p.output_ratio {
            if !(r.is_finite() && r > 0.0) {
                return Err(format!(
                    "params.output_ratio = {r}: must be a finite number > 0"
                ));
            }
        }
        if p.max_output_estimate == Some(0) {
            return Err("params.max_output_estimate must be at least 1".into());
        }
        if p.max_output_estimate.is_some() && p.output_ratio.is_none() {
            return Err(
                "params.max_output_estimate caps the output estimate: give params.output_ratio too"
                    .into(),
            );
        }
        Ok(InFlight {
            output_ratio: p.output_ratio,
            max_output_estimate: p.max_output_estimate,
            prompts: RequestMatches::new(p.capacity, p.block_size),
            in_flight: Vec::new(),
            charged: HashMap::new(),
        })
    }

    fn grow(&mut self, n: usize) {
        if self.in_flight.len() < n {
            self.in_flight.resize(n, 0);
        }
    }

    fn release(&mut self, instance: usize, tokens: u64) {
        if let Some(n) = self.in_flight.get_mut(instance) {
            *n = n.saturating_sub(tokens);
        }
    }

    pub(crate) fn on_lifecycle(&mut self, kind: EventKind, id: u64) {
        let Some(&(i, first, end)) = self.charged.get(&id) else {
            return;
        };
        if kind == EventKind::FIRST_TOKEN {
            self.release(i, first);
            if end == 0 {
                self.charged.remove(&id);
            } else {
                self.charged.insert(id, (i, 0, end));
            }
        } else {
            self.release(i, first + end);
            self.charged.remove(&id);
        }
    }

    /// After a decision: charge `request` to `chosen` and index its prompt.
    pub(crate) fn charge(&mut self, request: &RequestView<'_>, n: usize, chosen: usize) {
        let n = n.max(chosen + 1);
        self.grow(n);
        self.prompts.prepare(request, n);
        let prompt = self.prompts.uncached(request, chosen);
        let output = self.output_ratio.map_or(0, |r| {
            let est = (f64::from(request.input_tokens) * r).round() as u64;
            self.max_output_estimate.map_or(est, |m| est.min(m))
        });
        // Without an output estimate everything goes at the first token;
        // with one, everything at the end (llm-d's release rule).
        let (at_first, at_end) = if self.output_ratio.is_some() {
            (0, prompt + output)
        } else {
            (prompt, 0)
        };
        self.in_flight[chosen] += at_first + at_end;
        if at_first + at_end > 0 {
            self.charged.insert(request.id, (chosen, at_first, at_end));
        }
        self.prompts.record(request, chosen);
    }

    /// The tokens in flight on instance `i`.
    pub(crate) fn tokens(&self, i: usize) -> u64 {
        self.in_flight.get(i).copied().unwrap_or(0)
    }
}

impl Scorer for TokenLoad {
    fn score(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        let n = cluster.len();
        let load = &mut self.load;
        load.grow(n);
        load.prompts.prepare(request, n);
        let t_max = self.threshold as f64;
        for i in 0..n {
            let t = load.in_flight[i] + load.prompts.uncached(request, i);
            scores.push(if t == 0 {
                1.0
            } else {
                1.0 - t.min(self.threshold) as f64 / t_max
            });
        }
    }

    fn observe(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>, chosen: usize) {
        self.load.charge(request, cluster.len(), chosen);
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct FilterParams {
    max_tokens: Option<u64>,
    max_requests: Option<u32>,
    block_size: u32,
    capacity: usize,
    output_ratio: Option<f64>,
    max_output_estimate: Option<u64>,
}

impl Default for FilterParams {
    fn default() -> Self {
        let d = TokenLoadParams::default();
        FilterParams {
            max_tokens: None,
            max_requests: None,
            block_size: d.block_size,
            capacity: d.capacity,
            output_ratio: None,
            max_output_estimate: None,
        }
    }
}

/// llm-d's concurrency-detector as a filter in `tokens` or `hybrid` mode:
/// keep the candidates with at most `max_tokens` router in-flight tokens
/// (and, in hybrid mode, at most `max_requests` requests in flight); none
/// when every candidate is over, as llm-d.
pub struct InFlightLimit {
    max_tokens: u64,
    max_requests: Option<u32>,
    load: InFlight,
}

impl PolicyDef for InFlightLimit {
    const NAME: &'static str = "in-flight-limit";
    const SUMMARY: &'static str =
        "keep instances with at most max_tokens router in-flight tokens (llm-d's concurrency-detector in tokens/hybrid mode)";
    const PARAMS_DOC: &'static str = "\
max_tokens           (integer ≥ 0, default 999999)  the most in-flight tokens
                     an instance may hold and stay a candidate (llm-d:
                     ⌈maxTokenConcurrency·(1 + headroom)⌉ − 1).
max_requests         (integer ≥ 0, optional)  also the most requests in flight
                     (hybrid mode).
block_size           (integer ≥ 1, tokens, default 16)  the run's KV block size.
capacity             (integer ≥ 1, default 31250)  prefix index LRU per instance.
output_ratio         (number > 0, optional)  as token-load's.
max_output_estimate  (integer ≥ 1, optional)  as token-load's.
In-flight tokens are token-load's: uncached prompt tokens released at the
first token (with an output estimate: all at the end). Requests in flight are
the host's exact count.";
    const HOOKS: Hooks = Hooks::of(EventKind::FIRST_TOKEN)
        .with(EventKind::COMPLETED)
        .with(EventKind::DROPPED);

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: FilterParams = params.parse()?;
        let max_tokens = p.max_tokens.unwrap_or(999_999);
        let load = InFlight::create(&TokenLoadParams {
            threshold: 1,
            block_size: p.block_size,
            capacity: p.capacity,
            output_ratio: p.output_ratio,
            max_output_estimate: p.max_output_estimate,
        })?;
        Ok(InFlightLimit {
            max_tokens,
            max_requests: p.max_requests,
            load,
        })
    }

    fn on_event(&mut self, event: &RequestEvent<'_>, _cluster: &ClusterState<'_>) {
        self.load.on_lifecycle(event.kind, event.request.id);
    }
}

impl Filter for InFlightLimit {
    fn filter(&mut self, _request: &RequestView<'_>, cluster: &ClusterState<'_>, keep: &mut Kept) {
        let info = cluster.info();
        for &i in cluster.candidates() {
            let tokens_ok = self.load.tokens(i as usize) <= self.max_tokens;
            let requests_ok = self
                .max_requests
                .is_none_or(|m| info.get(i as usize).map_or(0, |x| x.in_flight) <= m);
            if tokens_ok && requests_ok {
                keep.push(i);
            }
        }
    }

    fn observe(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>, chosen: usize) {
        self.load.charge(request, cluster.len(), chosen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cluster, request, snap};
    use blis_plugin_api::RVec;

    fn scores(s: &mut TokenLoad, req: &RequestView<'_>, n: usize) -> Vec<f64> {
        let snaps = vec![snap(0, 0, 0, 0.0); n];
        let mut out = RVec::new();
        s.score(req, &cluster(0, &snaps), &mut out);
        out.to_vec()
    }

    /// By hand, threshold 1000, blocks of 16: a 160-token prompt (10
    /// blocks) scores 1 − 160/1000 = 0.84 everywhere on an idle cluster.
    /// Routed to instance 1, it is charged there; a second request sharing
    /// its first 5 blocks is charged 160 − 5·16 = 80 more on instance 1
    /// (160 + 80 = 240 → 0.76) and 160 on instance 0 (0.84). At the first
    /// request's first token its 160 leave: instance 1 scores 1 − 80/1000.
    #[test]
    fn in_flight_and_uncached_tokens_by_hand() {
        let mut s = TokenLoad::create(Params::new("threshold = 1000"), 0).unwrap();
        let h1: Vec<u64> = (1..=10).collect();
        let r1 = request(1, 160, &h1);
        assert_eq!(scores(&mut s, &r1, 2), vec![0.84, 0.84]);
        s.observe(&r1, &cluster(0, &[snap(0, 0, 0, 0.0); 2]), 1);
        let mut h2: Vec<u64> = (1..=5).collect();
        h2.extend(100..105);
        let r2 = request(2, 160, &h2);
        let got = scores(&mut s, &r2, 2);
        assert!(
            (got[0] - 0.84).abs() < 1e-12 && (got[1] - 0.76).abs() < 1e-12,
            "{got:?}"
        );
        s.load.on_lifecycle(EventKind::FIRST_TOKEN, r1.id);
        let got = scores(&mut s, &r2, 2);
        assert!((got[1] - 0.92).abs() < 1e-12, "{got:?}");
        // A load beyond the threshold scores 0; an empty prompt on an idle
        // instance scores 1.
        let r3 = request(3, 5000, &[]);
        assert_eq!(scores(&mut s, &r3, 2), vec![0.0, 0.0]);
        assert_eq!(scores(&mut s, &request(4, 0, &[]), 2), vec![1.0, 1.0]);
    }

    /// With an output estimate (ratio 1.5, cap 100) the 160-token prompt
    /// charges 160 + min(240, 100) = 260, held past the first token and
    /// released at completion.
    #[test]
    fn the_output_estimate_is_held_until_the_end() {
        let mut s = TokenLoad::create(
            Params::new("threshold = 1000\noutput_ratio = 1.5\nmax_output_estimate = 100"),
            0,
        )
        .unwrap();
        let r1 = request(1, 160, &[]);
        s.observe(&r1, &cluster(0, &[snap(0, 0, 0, 0.0); 2]), 0);
        let probe = request(2, 0, &[]);
        let got = scores(&mut s, &probe, 2);
        assert!((got[0] - 0.74).abs() < 1e-12, "{got:?}");
        s.load.on_lifecycle(EventKind::FIRST_TOKEN, r1.id);
        let got = scores(&mut s, &probe, 2);
        assert!((got[0] - 0.74).abs() < 1e-12, "{got:?}");
        s.load.on_lifecycle(EventKind::COMPLETED, r1.id);
        assert_eq!(scores(&mut s, &probe, 2), vec![1.0, 1.0]);
    }

    /// The filter keeps the candidates whose in-flight tokens are at most
    /// max_tokens (and, hybrid, requests at most max_requests): 160 tokens
    /// charged to instance 1 → with max 100 only instance 0 stays; after
    /// the first token both do; with max_requests 2, an instance the host
    /// counts 3 requests on goes.
    #[test]
    fn the_in_flight_limit_filter_by_hand() {
        use blis_plugin_api::abi_stable::std_types::RSlice;
        use blis_plugin_api::InstanceInfo;
        let snaps = [snap(0, 0, 0, 0.0); 2];
        let view = cluster(0, &snaps);
        let info = [
            InstanceInfo {
                in_flight: 3,
                ..Default::default()
            },
            InstanceInfo {
                in_flight: 1,
                ..Default::default()
            },
        ];
        let cands = [0u32, 1];
        let state = ClusterState {
            view,
            candidates: RSlice::from_slice(&cands),
            info: RSlice::from_slice(&info),
            prefix_blocks: RSlice::from_slice(&[]),
        };
        let kept = |f: &mut InFlightLimit| {
            let mut keep = RVec::new();
            f.filter(&request(9, 16, &[]), &state, &mut keep);
            keep.to_vec()
        };
        let mut f = InFlightLimit::create(Params::new("max_tokens = 100"), 0).unwrap();
        f.observe(&request(1, 160, &[]), &view, 1);
        assert_eq!(kept(&mut f), vec![0]);
        f.load.on_lifecycle(EventKind::FIRST_TOKEN, 1);
        assert_eq!(kept(&mut f), vec![0, 1]);
        let mut h =
            InFlightLimit::create(Params::new("max_tokens = 100\nmax_requests = 2"), 0).unwrap();
        assert_eq!(kept(&mut h), vec![1]);
        blis_plugin_api::check_params_doc::<FilterParams>(InFlightLimit::PARAMS_DOC).unwrap();
    }

    #[test]
    fn bad_params_are_refused() {
        for (p, want) in [
            ("threshold = 0", "threshold"),
            ("block_size = 0", "block_size"),
            ("output_ratio = -1.0", "output_ratio"),
            ("max_output_estimate = 5", "give params.output_ratio"),
        ] {
            let e = TokenLoad::create(Params::new(p), 0).err().unwrap();
            assert!(e.contains(want), "{p}: {e}");
        }
    }
}

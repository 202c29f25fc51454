//! Test helpers for plugin authors (feature `testing`): build the views a
//! policy receives in one line, and drive a policy through a short synthetic
//! run.
//!
//! ```
//! use blis_plugin_api::testing::{Fixture, SyntheticRun};
//! # use blis_plugin_api::{ClusterView, Params, PolicyDef, RequestView, Scorer, Scores};
//! # struct Idle;
//! # impl PolicyDef for Idle {
//! #     const NAME: &'static str = "idle";
//! #     const SUMMARY: &'static str = "";
//! #     fn create(_: Params<'_>, _: u64) -> Result<Self, String> { Ok(Idle) }
//! # }
//! # impl Scorer for Idle {
//! #     fn score(&mut self, _: &RequestView<'_>, c: &ClusterView<'_>, s: &mut Scores) {
//! #         for x in c.instances() { s.push(1.0 / (1.0 + x.effective_load() as f64)); }
//! #     }
//! # }
//! let f = Fixture::idle(4).queue_depths(&[3, 0, 1, 0]);
//! let mut scorer = Idle;
//! let mut scores = Scores::new();
//! scorer.score(&f.request(7), &f.view(), &mut scores);
//! assert_eq!(scores.len(), 4);
//!
//! // 200 requests, each to the best-scored instance, 4 instances, each
//! // request finishing after 5 decisions: the choices and the per-instance counts.
//! let run = SyntheticRun::new(4, 5).run_scorer(&mut Idle, 200);
//! assert_eq!(run.choices.len(), 200);
//! assert_eq!(run.per_instance.iter().sum::<u64>(), 200);
//! ```

use abi_stable::std_types::{RSlice, RStr};

use crate::abi::{AbiVersion, ABI_VERSION};
use crate::author::{Scorer, Scores};
use crate::events::{EventKind, RequestEvent};
use crate::views::{
    ClusterState, ClusterView, InstanceInfo, InstanceSnapshot, InstanceState, PdView, RequestView,
    SloClass,
};

/// Owned storage for the views of one decision.
#[derive(Clone, Debug)]
pub struct Fixture {
    /// Simulated time of the decision, µs.
    pub clock_us: i64,
    /// One snapshot per instance.
    pub snaps: Vec<InstanceSnapshot>,
    /// One 0.2 record per instance.
    pub info: Vec<InstanceInfo<'static>>,
    /// Candidates (all instances unless set).
    pub candidates: Vec<u32>,
    /// Block hashes of the requests built by [`Fixture::request`].
    pub hashes: Vec<u64>,
    /// The prefix-cache query's answer (empty unless set).
    pub prefix_blocks: Vec<u32>,
    /// Prompt length of the requests, tokens.
    pub input_tokens: u32,
    /// Service class of the requests.
    pub slo_class: SloClass,
}

impl Fixture {
    /// `n` idle instances, every one a candidate, at time 0.
    pub fn idle(n: usize) -> Fixture {
        Fixture {
            clock_us: 0,
            snaps: vec![InstanceSnapshot::default(); n],
            info: vec![InstanceInfo::default(); n],
            candidates: (0..n as u32).collect(),
            hashes: Vec::new(),
            prefix_blocks: Vec::new(),
            input_tokens: 64,
            slo_class: SloClass::STANDARD,
        }
    }

    /// Set every instance's queue depth.
    pub fn queue_depths(mut self, depths: &[u32]) -> Fixture {
        for (s, &d) in self.snaps.iter_mut().zip(depths) {
            s.queue_depth = d;
        }
        self
    }

    /// Set every instance's KV utilisation.
    pub fn kv_utilizations(mut self, kv: &[f64]) -> Fixture {
        for (s, &k) in self.snaps.iter_mut().zip(kv) {
            s.kv_utilization = k;
        }
        self
    }

    /// Set every instance's lifecycle state (for autoscalers).
    pub fn states(mut self, states: &[InstanceState]) -> Fixture {
        for (x, &st) in self.info.iter_mut().zip(states) {
            x.state = st;
        }
        self
    }

    /// Set every instance's KV capacity and KV tokens in use, as
    /// `(capacity, in_use)` pairs (for autoscalers).
    pub fn kv_tokens(mut self, tokens: &[(u64, u64)]) -> Fixture {
        for (x, &(cap, used)) in self.info.iter_mut().zip(tokens) {
            x.kv_capacity_tokens = cap;
            x.kv_tokens_in_use = used;
        }
        self
    }

    /// Set the candidates.
    pub fn candidates(mut self, candidates: &[u32]) -> Fixture {
        self.candidates = candidates.to_vec();
        self
    }

    /// Set the block hashes of the requests.
    pub fn block_hashes(mut self, hashes: &[u64]) -> Fixture {
        self.hashes = hashes.to_vec();
        self
    }

    /// Set the prefix-cache query's answer: leading prompt blocks held by
    /// each instance (one entry per instance).
    pub fn prefix_blocks(mut self, blocks: &[u32]) -> Fixture {
        self.prefix_blocks = blocks.to_vec();
        self
    }

    /// Set the prompt length of the requests, tokens.
    pub fn input_tokens(mut self, tokens: u32) -> Fixture {
        self.input_tokens = tokens;
        self
    }

    /// What a decider sees about the P/D split (kind `decider`): the
    /// request is decoded on `decode_instance`, which holds `cached_blocks`
    /// of its prompt's blocks (16 tokens each); the candidates are the
    /// prefill-capable instances (`prefill_first .. prefill_end` spans them).
    pub fn pd_view(&self, decode_instance: u32, cached_blocks: u32) -> PdView {
        PdView {
            decode_instance,
            decode_cached_blocks: cached_blocks,
            block_size: 16,
            prefill_first: self.candidates.iter().copied().min().unwrap_or(0),
            prefill_end: self.candidates.iter().copied().max().map_or(0, |m| m + 1),
        }
    }

    /// A request with id `id` (arrival = the clock).
    pub fn request(&self, id: u64) -> RequestView<'_> {
        RequestView {
            id,
            arrival_us: self.clock_us,
            input_tokens: self.input_tokens,
            slo_class: self.slo_class,
            tenant: RStr::from(""),
            block_hashes: RSlice::from_slice(&self.hashes),
        }
    }

    /// The 0.1 cluster view.
    pub fn view(&self) -> ClusterView<'_> {
        ClusterView {
            clock_us: self.clock_us,
            instances: RSlice::from_slice(&self.snaps),
        }
    }

    /// The 0.2 cluster state.
    pub fn state(&self) -> ClusterState<'_> {
        ClusterState {
            view: self.view(),
            candidates: RSlice::from_slice(&self.candidates),
            info: RSlice::from_slice(&self.info),
            prefix_blocks: RSlice::from_slice(&self.prefix_blocks),
        }
    }

    /// The ABI version the views belong to.
    pub fn abi(&self) -> AbiVersion {
        ABI_VERSION
    }
}

/// A short synthetic run: requests arrive one per decision, go to the
/// best-scored instance (ties to the lowest index), queue there, and finish
/// `service` decisions later. The policy is called as blis calls it:
/// `score`, `observe`, then the lifecycle events it asked for.
#[derive(Clone, Debug)]
pub struct SyntheticRun {
    instances: usize,
    service: usize,
}

/// What a [`SyntheticRun`] produced.
#[derive(Clone, Debug, PartialEq)]
pub struct RunResult {
    /// The chosen instance of each request, in order.
    pub choices: Vec<u32>,
    /// Requests routed to each instance.
    pub per_instance: Vec<u64>,
}

impl SyntheticRun {
    /// `instances` instances; each request finishes after `service` decisions.
    pub fn new(instances: usize, service: usize) -> SyntheticRun {
        SyntheticRun { instances, service }
    }

    /// Route `requests` requests with `scorer`.
    pub fn run_scorer<S: Scorer>(&self, scorer: &mut S, requests: u64) -> RunResult {
        let mut f = Fixture::idle(self.instances);
        let mut finishing: std::collections::VecDeque<(u64, u32)> = Default::default();
        let mut out = RunResult {
            choices: Vec::new(),
            per_instance: vec![0; self.instances],
        };
        let mut scores = Scores::new();
        for id in 0..requests {
            f.clock_us = id as i64 * 1000;
            while finishing.len() >= self.service {
                let (done, i) = finishing.pop_front().expect("non-empty");
                let s = &mut f.snaps[i as usize];
                s.batch_size = s.batch_size.saturating_sub(1);
                f.info[i as usize].in_flight -= 1;
                deliver(scorer, &f, EventKind::COMPLETED, done, i);
            }
            scores.clear();
            scorer.score(&f.request(id), &f.view(), &mut scores);
            assert_eq!(
                scores.len(),
                self.instances,
                "a scorer must push exactly one score per instance"
            );
            let mut best = 0;
            for (i, &s) in scores.iter().enumerate() {
                assert!(s.is_finite(), "score {s} for instance {i} is not finite");
                if s > scores[best] {
                    best = i;
                }
            }
            scorer.observe(&f.request(id), &f.view(), best);
            f.snaps[best].batch_size += 1;
            f.info[best].in_flight += 1;
            deliver(scorer, &f, EventKind::DISPATCHED, id, best as u32);
            finishing.push_back((id, best as u32));
            out.choices.push(best as u32);
            out.per_instance[best] += 1;
        }
        out
    }
}

fn deliver<S: Scorer>(scorer: &mut S, f: &Fixture, kind: EventKind, id: u64, instance: u32) {
    if !S::HOOKS.contains(kind) {
        return;
    }
    let event = RequestEvent {
        kind,
        instance,
        time_us: f.clock_us,
        request: RequestView {
            block_hashes: RSlice::from_slice(&[]),
            ..f.request(id)
        },
        ttft_us: if kind == EventKind::COMPLETED {
            1000
        } else {
            -1
        },
        e2e_us: if kind == EventKind::COMPLETED {
            2000
        } else {
            -1
        },
        output_tokens: if kind == EventKind::COMPLETED { 16 } else { 0 },
        reserved: 0,
    };
    scorer.on_event(&event, &f.state());
}

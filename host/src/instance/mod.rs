//! One simulated vLLM-like inference server.
//!
//! An [`Instance`] owns its wait queue, running batch, KV cache and latency
//! model. It reacts to three events the cluster routes to it
//! ([`Instance::on_arrival`], [`Instance::on_queued`], [`Instance::on_step`])
//! and reports what clients observe (tokens, completions, drops) to an
//! [`InstanceObserver`]. It never talks to other instances, plugins, TOML or
//! JSON; the cluster reads its state through [`Instance::queue_depth`] and
//! friends when it builds routing snapshots.
//!
//! Semantics follow `core-engine.md` with the blis decisions of
//! `spec/README.md`; see `README.md` ("How blis differs") for the user view.

pub mod latency;

use crate::engine::{EventQueue, Tick};
use crate::request::{Request, RequestStore, Slot};

pub use latency::{BatchShape, LatencyModel, PhaseSums};

/// Order in which the wait queue is served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SchedulerKind {
    /// Arrival time, then request id.
    #[default]
    Fcfs,
    /// SLO-class priority (high first), then arrival, then id.
    PriorityFcfs,
    /// Shortest prompt first, then arrival, then id.
    Sjf,
    /// SLO-class priority (low first), then arrival, then id.
    ReversePriority,
}

/// Which running request is evicted when KV blocks run out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PreemptionKind {
    /// The most recently admitted request (the tail of the batch), as vLLM.
    #[default]
    Fcfs,
    /// The lowest-priority request (latest arrival among equals).
    Priority,
}

/// Static configuration of an instance (every instance of a cluster shares one).
#[derive(Clone, Debug)]
pub struct InstanceConfig {
    /// Maximum requests in the running batch (`max_num_seqs`).
    pub max_num_seqs: u32,
    /// Token budget per step (`max_num_batched_tokens`).
    pub max_num_batched_tokens: u32,
    /// Chunked-prefill threshold: a prefill chunk is at most this many tokens (0 = off).
    pub long_prefill_token_threshold: u32,
    /// KV block size in tokens.
    pub block_size: u32,
    /// KV blocks available on the instance.
    pub total_kv_blocks: u64,
    /// Context limit (prompt + output); `None` = unlimited.
    pub max_model_len: Option<u32>,
    pub scheduler: SchedulerKind,
    pub preemption: PreemptionKind,
}

/// What clients and the cluster observe from an instance. Implemented by the
/// metrics collector; the instance calls it at the simulated instant each
/// thing happens.
pub trait InstanceObserver {
    /// The client saw the request's first output token at `at`.
    fn first_token(&mut self, instance: u32, req: &Request, at: Tick);
    /// The client saw another token `gap` ticks after the previous one (one ITL sample).
    fn token_gap(&mut self, instance: u32, gap: Tick);
    /// The request finished at `at` (its last token). The slot may be recycled after the step.
    fn completed(&mut self, instance: u32, slot: Slot, req: &Request, at: Tick);
    /// The request was dropped at enqueue: it can never be served by this instance.
    fn dropped(&mut self, instance: u32, slot: Slot, req: &Request, at: Tick);
    /// The request was preempted (evicted from the batch, back to the wait queue).
    fn preempted(&mut self, instance: u32, req: &Request, at: Tick);
}

/// One inference server.
#[derive(Debug)]
pub struct Instance {
    index: u32,
    // Fields are the engine's business (wait queue, batch, KV cache, latency model, counters).
}

/// End-of-run counts of one instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceCounts {
    pub still_queued: u64,
    pub still_running: u64,
    pub preemptions: u64,
    pub steps: u64,
    /// KV prefix-cache blocks hit / looked up (for a weighted hit rate).
    pub cache_hit_blocks: u64,
    pub cache_lookup_blocks: u64,
    pub peak_kv_blocks: u64,
}

impl Instance {
    /// A fresh idle instance. Costs O(1) memory in `total_kv_blocks`.
    pub fn new(_index: u32, _config: InstanceConfig, _latency: LatencyModel) -> Self {
        todo!()
    }

    /// Index of this instance in the cluster.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// A routed request reached the instance at `now`: schedule its `Queued`
    /// event after the alpha queueing delay.
    pub fn on_arrival(
        &mut self,
        _now: Tick,
        _slot: Slot,
        _store: &mut RequestStore,
        _q: &mut EventQueue,
    ) {
        todo!()
    }

    /// The request enters the wait queue at `now` (or is dropped as
    /// unservable); make sure a step is pending (work conservation, INV-8).
    pub fn on_queued(
        &mut self,
        _now: Tick,
        _slot: Slot,
        _store: &mut RequestStore,
        _q: &mut EventQueue,
        _obs: &mut impl InstanceObserver,
    ) {
        todo!()
    }

    /// Finish the running step (tokens, completions, KV release) and start the
    /// next one (batch formation, step time); schedules the next `Step`.
    pub fn on_step(
        &mut self,
        _now: Tick,
        _store: &mut RequestStore,
        _q: &mut EventQueue,
        _obs: &mut impl InstanceObserver,
    ) {
        todo!()
    }

    /// Requests waiting in the wait queue (Tier 2 signal).
    pub fn queue_depth(&self) -> u32 {
        todo!()
    }
    /// Requests in the running batch (Tier 2 signal).
    pub fn batch_size(&self) -> u32 {
        todo!()
    }
    /// Used KV blocks / total (Tier 3 signal).
    pub fn kv_utilization(&self) -> f64 {
        todo!()
    }
    /// Free KV blocks (Tier 3 signal).
    pub fn free_kv_blocks(&self) -> u64 {
        todo!()
    }
    /// Cumulative prefix-cache hit rate in blocks (Tier 3 signal).
    pub fn cache_hit_rate(&self) -> f64 {
        todo!()
    }
    /// Counts for the report.
    pub fn counts(&self) -> InstanceCounts {
        todo!()
    }
}

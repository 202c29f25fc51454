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
//!
//! # The model, and why
//!
//! * **One `Step` event ends one batch and starts the next.** A step's
//!   effects (KV computed, tokens emitted, completions, KV released) happen at
//!   its end, which is also the instant the next batch is formed. So the state
//!   the cluster sees between two steps is the state of the batch in flight,
//!   and there is never more than one pending `Step` per instance (spec
//!   decision 2): an idle instance is woken by `Queued`, a busy one keeps its
//!   single chain.
//! * **Progress needs a grant.** A request advances only by the tokens batch
//!   formation granted it *and* allocated KV for (decisions 4, 5). Its
//!   progress is the vLLM rule: it must compute every token of its stream up
//!   to the last emitted one (`target = L + generated`); a step that reaches
//!   the target emits the next token. Decode is the special case "exactly one
//!   token missing", and recompute after a preemption is the same rule
//!   starting from zero (minus prefix-cache hits), so no phase flags can go
//!   stale.
//! * **Clients see tokens once.** `generated` never goes back, so a preempted
//!   request recomputes its context without re-emitting tokens: TTFT is
//!   recorded once, every ITL sample is a gap the client observes (N − 1 per
//!   request) and E2E is completion − arrival (decision 8).
//! * **Nothing is ever scanned per step beyond the batch.** The wait queue is
//!   a heap on a static key, the KV cache is O(1) per block, the batch shape
//!   is summed while forming the batch, and vectors are reused, so a step
//!   costs O(batch + log queue) and allocates nothing in steady state.
//! * **A decode step does not even scan the batch.** While most of the
//!   batch only decodes, steps are aggregated ([`cruise`]): a step costs
//!   O(1 + requests that change state) — those at a KV block boundary,
//!   finishing, being prefilled or admitted — the decoders' progress kept
//!   as the step count plus per-request offsets.

mod cruise;
mod evict;
mod kv;
mod kv_offload;
pub mod latency;
pub mod lora;
mod queue;
mod remote_kv;
mod signals;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;

use crate::engine::{later, Event, EventQueue, Tick};
use crate::request::{Request, RequestState, RequestStore, SloClass, Slot, UNSET};

use cruise::Track;
pub use kv::MAX_KV_BLOCKS;
/// The KV cache, public for the benchmarks only (`host/benches/kv.rs`);
/// simulations reach it through [`Instance`].
#[doc(hidden)]
pub use kv::{KvCache, Lookup};
pub use kv_offload::{KvOffloadConfig, KvOffloadCounts};
use queue::WaitQueue;
pub use remote_kv::Reservation;

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
    /// A key from outside the instance ([`SortKey`], set with
    /// [`Instance::set_sort_key`]: a scheduler plugin), then arrival, then id.
    Custom,
}

/// The primary wait-queue key of a request, supplied from outside the
/// instance (the cluster wires a scheduler plugin in; the instance knows
/// nothing of plugins). Called once when a request enters the wait queue.
pub trait SortKey: Send {
    /// Smallest first. An error is kept by the instance (see
    /// [`Instance::take_policy_error`]) and the request gets key 0.
    fn key(&mut self, req: &Request) -> Result<i64, String>;
}

/// Which running request is evicted when KV blocks run out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PreemptionKind {
    /// The most recently admitted request (the tail of the batch), as vLLM.
    #[default]
    Fcfs,
    /// The lowest-priority request (latest arrival among equals).
    Priority,
    /// Chosen from outside the instance ([`VictimChoice`], set with
    /// [`Instance::set_victim_choice`]: a preemption plugin).
    Custom,
}

/// A request of the running batch, as a [`VictimChoice`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunningInfo {
    pub id: u64,
    pub arrival: Tick,
    pub input_len: u32,
    pub generated: u32,
    pub computed: u32,
    pub slo_class: SloClass,
}

/// The preemption victim, chosen from outside the instance (the cluster
/// wires a preemption plugin in).
pub trait VictimChoice: Send {
    /// Index in `running` (the batch in admission order, never empty). An
    /// error, or an index out of range, is kept by the instance (see
    /// [`Instance::take_policy_error`]) and the tail is preempted.
    fn victim(&mut self, running: &[RunningInfo]) -> Result<usize, String>;
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
    /// Wait-queue order.
    pub scheduler: SchedulerKind,
    /// Victim choice when KV blocks run out.
    pub preemption: PreemptionKind,
    /// A CPU tier behind the GPU KV blocks (`None` = GPU only).
    pub kv_offload: Option<KvOffloadConfig>,
    /// Schedule one step ahead, as vLLM's V1 engine does by default since
    /// late 2025 (`--async-scheduling`, vllm-project/vllm#27614): the batch
    /// of a step is formed when the step before it starts, so a request
    /// queued while a step runs joins the step after the next one; on an
    /// idle instance, or after a step no request goes on from, at once.
    /// Off (the reference): a step's batch is formed when it starts.
    pub async_scheduling: bool,
}

impl Default for InstanceConfig {
    /// vLLM-like defaults: 256 sequences, 2048 tokens per step, no chunking
    /// threshold, 16-token blocks, 1,000,000 blocks, no context limit, FCFS.
    fn default() -> Self {
        InstanceConfig {
            max_num_seqs: 256,
            max_num_batched_tokens: 2048,
            long_prefill_token_threshold: 0,
            block_size: 16,
            total_kv_blocks: 1_000_000,
            max_model_len: None,
            scheduler: SchedulerKind::Fcfs,
            preemption: PreemptionKind::Fcfs,
            kv_offload: None,
            async_scheduling: false,
        }
    }
}

impl InstanceConfig {
    /// Check the values an instance cannot work with. The config layer calls
    /// this and reports the message; [`Instance::new`] panics on an invalid
    /// configuration.
    pub fn validate(&self) -> Result<(), String> {
        if self.block_size == 0 {
            return Err("block_size must be greater than 0 (tokens per KV block)".into());
        }
        if self.max_num_seqs == 0 {
            return Err("max_num_seqs must be greater than 0 (requests per batch)".into());
        }
        if self.max_num_batched_tokens == 0 {
            return Err(
                "max_num_batched_tokens must be greater than 0 (token budget per step)".into(),
            );
        }
        if self.total_kv_blocks == 0 {
            return Err("total_kv_blocks must be greater than 0".into());
        }
        if self.total_kv_blocks > MAX_KV_BLOCKS {
            return Err(format!(
                "total_kv_blocks must be at most {MAX_KV_BLOCKS}, got {}",
                self.total_kv_blocks
            ));
        }
        if self.max_model_len == Some(0) {
            return Err("max_model_len must be greater than 0 when given".into());
        }
        if let Some(o) = &self.kv_offload {
            o.validate()?;
        }
        Ok(())
    }
}

/// What clients and the cluster observe from an instance. Implemented by the
/// metrics collector; the instance calls it at the simulated instant each
/// thing happens.
pub trait InstanceObserver {
    /// The client saw the request's first output token at `at`.
    fn first_token(&mut self, instance: u32, req: &Request, at: Tick);
    /// The client saw another token `gap` ticks after the previous one (one ITL sample).
    fn token_gap(&mut self, instance: u32, gap: Tick);
    /// `count` ITL samples equal to `gap`, as `count` calls of
    /// [`InstanceObserver::token_gap`]. The instance reports the samples of a
    /// step in runs of equal gaps, in no particular order within the step;
    /// override to take a run at once.
    fn token_gaps(&mut self, instance: u32, gap: Tick, count: u64) {
        for _ in 0..count {
            self.token_gap(instance, gap);
        }
    }
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
    config: InstanceConfig,
    latency: LatencyModel,
    /// Step times × this (`blis serve`'s `slow` fault; 1 otherwise).
    slowdown: f64,
    kv: KvCache,
    waiting: WaitQueue,
    /// The batch in flight, in admission order, with each request's progress
    /// (see [`Run`]).
    running: Vec<Run>,
    /// A `Step` for this instance is in the event queue (at most one, ever).
    step_pending: bool,
    /// With `async_scheduling`: the start of the compute step in flight
    /// (`None` when none runs), and while a step's batch is formed, the
    /// start of the step that just ended — requests queued after it are not
    /// yet visible to the scheduler.
    step_started: Option<Tick>,
    visible_until: Option<Tick>,
    steps: u64,
    preemptions: u64,
    completed: u64,
    dropped: u64,
    /// Latest time a token (or a completion without output) reached a
    /// client; with α2 > 0 it can lie after the last executed event.
    last_delivery: Tick,
    /// Reused buffer for prefix-cache hits during admission.
    hit_scratch: Vec<u32>,
    /// The victim choice of [`PreemptionKind::Custom`], its view buffer,
    /// and its first error.
    victim_choice: CustomVictim,
    victim_view: Vec<RunningInfo>,
    policy_error: Option<String>,
    /// Requests whose prompt KV is being transferred here (P/D
    /// disaggregation): they hold blocks but are in no queue yet.
    reserved: Vec<Slot>,
    /// Waiting requests that hold their transferred prompt's KV.
    remote_waiting: u32,
    /// Aggregated decode steps (see [`cruise`]).
    cruise: cruise::Cruise,
    /// LoRA adapters (`None` without `[lora]`: one check per step).
    lora: Option<Box<lora::Lora>>,
}

/// The optional [`VictimChoice`] (a newtype so the instance stays `Debug`).
#[derive(Default)]
struct CustomVictim(Option<Box<dyn VictimChoice>>);

impl std::fmt::Debug for CustomVictim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CustomVictim({})", self.0.is_some())
    }
}

/// A request in the running batch, with the progress a step updates.
///
/// A step touches every running request; doing it on these dense 48-byte
/// records instead of the 200-byte [`Request`]s (reached through the store's
/// hot region, see [`RequestStore::promote`]) keeps a steady decode step to
/// one pass over one small array. The progress fields (`computed`,
/// `generated`, `granted`, `last_token_at`) and the count of private KV
/// blocks (`kv_private`, which grows without the request being touched) are
/// written back to the request whenever the engine touches it for another
/// reason (first token, a block boundary of a shared block, completion,
/// preemption) and by [`Instance::sync`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    slot: Slot,
    /// Index in the store's hot region.
    hot: u32,
    input_len: u32,
    output_len: u32,
    computed: u32,
    generated: u32,
    granted: u32,
    /// The request's first private KV block ([`KvCache::first_private`]):
    /// filling a block from there on needs no hash and no index.
    private_block: u32,
    /// Tokens the request's KV blocks can hold (blocks × block size).
    kv_cap: u64,
    last_token_at: Tick,
    /// Copies of the request's KV state for prefetching without reading
    /// the record: the hash of its last full block, its last block, and
    /// its output seed.
    kv_last_hash: u64,
    last_block: u32,
    /// The request's private KV blocks (`Request::kv_private`), kept here
    /// while it runs.
    kv_private: u32,
    output_seed: u64,
    /// How the progress fields are kept while the instance cruises
    /// ([`cruise`]); [`Track::Stepped`] otherwise.
    track: Track,
}

impl Run {
    /// Refresh the copies of the request's KV state after the KV cache
    /// changed it.
    #[inline]
    fn read_kv(&mut self, r: &Request, block_size: u32) {
        self.kv_cap = r.kv_held() * u64::from(block_size);
        self.kv_private = r.kv_private;
        self.kv_last_hash = r.kv_last_hash;
        self.last_block = match r.kv_private {
            0 => r.kv_blocks.last().copied().unwrap_or(0),
            _ => kv::NO_ID,
        };
    }

    /// Whether the block this request fills next lies wholly in the output
    /// (and is not the stream's first): its hash then needs only this
    /// record, see [`KvCache::fill_output_block`].
    #[inline]
    fn fills_output_block(&self, block_size: u64) -> bool {
        let start = self.kv_cap - block_size;
        start >= u64::from(self.input_len) && start > 0
    }

    /// Whether the block this request fills next is private (filling it
    /// touches nothing in the KV cache).
    #[inline]
    fn fills_private_block(&self, block_size: u64) -> bool {
        self.kv_cap / block_size > u64::from(self.private_block)
    }

    /// Write the progress (and the last full block's hash, which a block
    /// filled from the batch record alone changes) to the request's record.
    #[inline]
    fn write_back(&self, r: &mut Request) {
        r.computed = self.computed;
        r.generated = self.generated;
        r.granted = self.granted;
        r.last_token_at = self.last_token_at;
        r.kv_last_hash = self.kv_last_hash;
        r.kv_private = self.kv_private;
    }

    /// Whether an extension from `computed` tokens touches private blocks
    /// only: the block holding token `computed` is private, so there is no
    /// shared block left to fill (and register), and every block still to
    /// allocate is private. Such an extension needs only this record.
    #[inline]
    fn grows_private(&self, computed: u64, block_size: u64) -> bool {
        computed / block_size >= u64::from(self.private_block)
    }
}

/// End-of-run counts of one instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceCounts {
    /// Requests in the wait queue (including preempted ones).
    pub still_queued: u64,
    /// Requests in the running batch.
    pub still_running: u64,
    /// Preemptions (a request preempted twice counts twice).
    pub preemptions: u64,
    /// Batches executed (`Step` events that started a non-empty batch).
    pub steps: u64,
    /// KV prefix-cache blocks hit at admissions (numerator of the hit rate).
    pub cache_hit_blocks: u64,
    /// KV prefix-cache blocks looked up at admissions: the full blocks of the
    /// stream a hit could have covered (denominator, for a weighted hit rate).
    pub cache_lookup_blocks: u64,
    /// Largest number of KV blocks held at once.
    pub peak_kv_blocks: u64,
    /// The CPU tier's counts, when one is configured.
    pub kv_offload: Option<KvOffloadCounts>,
    /// Requests completed.
    pub completed: u64,
    /// Requests dropped at enqueue as unservable.
    pub dropped: u64,
    /// Latest time a token or a completion reached a client (0 if none).
    pub last_delivery: Tick,
}

/// Add a request to the batch shape: nothing if it got no grant, to
/// `decode` if its grant computes exactly the one token it emitted last,
/// else to `prefill`.
#[inline]
fn add_to_shape(shape: &mut BatchShape, r: &Run) {
    if r.granted == 0 {
        return;
    }
    let needed = r.input_len + r.generated - r.computed;
    if r.generated > 0 && needed == 1 {
        shape.decode.add(r.computed, r.granted);
    } else {
        shape
            .prefill
            .add_prefill(r.computed, r.granted, r.input_len + r.generated);
    }
}

/// Tokens granted to a request that still needs `needed`: capped by the
/// chunked-prefill threshold and the remaining step budget.
#[inline]
fn chunk(needed: u32, threshold: u32, budget: u32) -> u32 {
    let mut n = needed;
    if threshold > 0 && threshold < n {
        n = threshold;
    }
    n.min(budget)
}

impl Instance {
    /// A fresh idle instance. Costs O(1) memory in `total_kv_blocks`.
    ///
    /// # Panics
    /// If `config` fails [`InstanceConfig::validate`].
    pub fn new(index: u32, config: InstanceConfig, latency: LatencyModel) -> Self {
        if let Err(e) = config.validate() {
            panic!("invalid instance configuration: {e}");
        }
        Instance {
            index,
            kv: match config.kv_offload {
                None => KvCache::new(config.block_size, config.total_kv_blocks),
                Some(o) => KvCache::with_cpu_tier(config.block_size, config.total_kv_blocks, o),
            },
            waiting: WaitQueue::new(config.scheduler),
            config,
            latency,
            running: Vec::new(),
            step_pending: false,
            step_started: None,
            visible_until: None,
            steps: 0,
            preemptions: 0,
            completed: 0,
            dropped: 0,
            last_delivery: 0,
            hit_scratch: Vec::new(),
            victim_choice: CustomVictim::default(),
            victim_view: Vec::new(),
            policy_error: None,
            reserved: Vec::new(),
            remote_waiting: 0,
            cruise: cruise::Cruise::default(),
            lora: None,
            slowdown: 1.0,
        }
    }

    /// Make every step from the next one on take `factor` × as long
    /// (`blis serve`'s `slow` fault; 1 restores the model's times).
    pub fn set_slowdown(&mut self, factor: f64) {
        self.slowdown = factor;
    }

    /// The latency model's time for a step of `shape`, slowed down.
    #[inline]
    fn step_cost(&self, shape: &BatchShape) -> Tick {
        let t = self.latency.step_time(shape);
        if self.slowdown == 1.0 {
            t
        } else {
            (t as f64 * self.slowdown).round() as Tick
        }
    }

    /// Serve LoRA adapters (before the first event).
    pub fn set_lora(&mut self, config: lora::LoraConfig) {
        self.lora = Some(Box::new(lora::Lora::new(config)));
    }

    /// The LoRA state (`None` without `[lora]`).
    pub fn lora(&self) -> Option<&lora::Lora> {
        self.lora.as_deref()
    }

    /// Index of this instance in the cluster.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The configuration this instance runs with.
    pub fn config(&self) -> &InstanceConfig {
        &self.config
    }

    /// The step-time model this instance runs with.
    pub fn latency_model(&self) -> &LatencyModel {
        &self.latency
    }

    /// A routed request reached the instance at `now`: schedule its `Queued`
    /// event after the alpha queueing delay.
    pub fn on_arrival(
        &mut self,
        now: Tick,
        slot: Slot,
        store: &mut RequestStore,
        q: &mut EventQueue,
    ) {
        let delay = self.latency.queueing_delay(store[slot].input_len).max(0);
        q.push(
            later(now, delay),
            Event::Queued {
                instance: self.index,
                slot,
            },
        );
    }

    /// The request enters the wait queue at `now` (or is dropped as
    /// unservable); make sure a step is pending (work conservation, INV-8).
    ///
    /// Resets the request's engine-owned lifecycle fields (timestamps not yet
    /// reached become [`UNSET`]). Applies `max_model_len`: a prompt of
    /// `max_model_len` tokens or more is dropped, and a longer total is served
    /// with the output capped to `max_model_len − L` (`output_len` is lowered;
    /// the request completes early). A request whose prompt plus output can
    /// never fit in the KV cache, even alone, or with an empty prompt, is
    /// dropped (`state = Dropped`, [`InstanceObserver::dropped`]).
    ///
    /// `prompt_hashes` may be left empty: the prompt's full-block hashes for
    /// this instance's block size are computed at admission when their count
    /// does not match `L / block_size`, so a waiting request needs none.
    pub fn on_queued(
        &mut self,
        now: Tick,
        slot: Slot,
        store: &mut RequestStore,
        q: &mut EventQueue,
        obs: &mut impl InstanceObserver,
    ) {
        let req = &mut store[slot];
        debug_assert_eq!(
            req.state,
            RequestState::Pipeline,
            "INV-2: request {} queued from state {:?}",
            req.id,
            req.state
        );
        req.enqueued_at = now;
        req.scheduled_at = UNSET;
        req.first_token_at = UNSET;
        req.last_token_at = UNSET;
        req.completed_at = UNSET;
        req.computed = 0;
        req.generated = 0;
        req.granted = 0;
        req.cached_tokens = 0;
        req.preemptions = 0;
        debug_assert_eq!(req.kv_held(), 0);
        if !self.admissible(req) {
            self.end_dropped(now, slot, req, obs);
            return;
        }
        req.state = RequestState::Queued;
        self.waiting.push(slot, req);
        if !self.step_pending {
            self.step_pending = true;
            q.push(
                now,
                Event::Step {
                    instance: self.index,
                },
            );
        }
    }

    /// The unservable guard and the `max_model_len` cap (may lower `output_len`).
    fn admissible(&self, req: &mut Request) -> bool {
        if !self.can_serve(req.input_len, req.output_len) {
            return false;
        }
        if let Some(m) = self.config.max_model_len {
            let (l, m) = (u64::from(req.input_len), u64::from(m));
            if l + u64::from(req.output_len) > m {
                req.output_len = (m - l) as u32;
            }
        }
        true
    }

    /// Whether a request with these lengths can ever be served here: a
    /// non-empty prompt shorter than `max_model_len`, whose prompt plus
    /// (capped) output fits in the whole KV cache. O(1); the cluster asks it
    /// before any per-token work on an arriving request.
    pub fn can_serve(&self, input_len: u32, output_len: u32) -> bool {
        let l = u64::from(input_len);
        if l == 0 {
            return false;
        }
        let mut n = u64::from(output_len);
        if let Some(m) = self.config.max_model_len {
            let m = u64::from(m);
            if l >= m {
                return false;
            }
            n = n.min(m - l);
        }
        let total = l + n;
        total <= u64::from(u32::MAX) && self.kv.blocks_for(total) <= self.kv.total()
    }

    /// Finish the running step (tokens, completions, KV release) and start the
    /// next one (batch formation, step time); schedules the next `Step`.
    ///
    /// Token `k` of a request produced by the finished step reaches the
    /// client at `now + k·output_token_overhead()` (the reference's ITL
    /// samples are `dt + α2`); that is the time given to the observer and
    /// stored in `first_token_at`, `last_token_at` and `completed_at`. When nothing runs and nothing waits afterwards, no
    /// step is scheduled (the instance idles until the next `Queued`).
    pub fn on_step(
        &mut self,
        now: Tick,
        store: &mut RequestStore,
        q: &mut EventQueue,
        obs: &mut impl InstanceObserver,
    ) {
        debug_assert!(
            self.step_pending,
            "a Step ran that the instance did not schedule"
        );
        self.step_pending = false;
        if self.config.async_scheduling {
            self.visible_until = self.step_started.take();
        }
        // While cruising, a step costs O(1 + requests that change state).
        let finished = self.cruise.active()
            && match self.cruise_step(now, store, q, obs) {
                cruise::CruiseStep::Done => return,
                cruise::CruiseStep::Finished => true,
                cruise::CruiseStep::Full => false,
            };
        if !finished {
            self.kv.prefetch_next_free();
            self.finish_batch(now, store, obs);
        }
        let load_done = match self.lora.as_deref_mut() {
            None => None,
            Some(l) => {
                l.finish_due(now);
                let head = self.waiting.peek().and_then(|s| store[s].adapter.get());
                l.gate(now, head)
            }
        };
        let shape = self.form_batch(now, store, obs);
        if self.running.is_empty() {
            if self.waiting.is_empty() {
                return; // idle until the next Queued
            }
            if let Some(at) = load_done {
                // The head waits for its adapter: step when it is loaded.
                self.step_pending = true;
                q.push(
                    at,
                    Event::Step {
                        instance: self.index,
                    },
                );
                return;
            }
            if !self.reserved.is_empty() {
                // The head waits for blocks that KV transfers on their way
                // here hold (P/D): nothing changes until one arrives, and
                // its arrival schedules a step (`enqueue_transferred`), so
                // idle rather than poll (an empty step can take 1 µs).
                return;
            }
            // Everything was preempted: retry after an empty step.
            let dt = (self.step_cost(&BatchShape::default()) + self.kv.take_transfer_time()).max(1);
            self.started_step(now);
            q.push(
                later(now, dt),
                Event::Step {
                    instance: self.index,
                },
            );
            return;
        }
        // Blocks reloaded from the CPU tier while forming the batch delay it.
        let mut base = self.step_cost(&shape);
        if self.lora.is_some() {
            base = self.lora_step_time(base, &shape, store);
        }
        let dt = (base + self.kv.take_transfer_time()).max(1);
        self.steps += 1;
        self.started_step(now);
        q.push(
            later(now, dt),
            Event::Step {
                instance: self.index,
            },
        );
        self.try_cruise(now, store);
    }

    /// A compute step starts at `now` (its `Step` event is about to be
    /// pushed).
    fn started_step(&mut self, now: Tick) {
        self.step_pending = true;
        if self.config.async_scheduling {
            self.step_started = Some(now);
        }
    }

    /// Apply the grants of the batch that ends at `now`: KV computed, tokens
    /// emitted (token k seen by the client at `now + k·output_token_overhead`),
    /// completions with their KV released.
    fn finish_batch(
        &mut self,
        now: Tick,
        store: &mut RequestStore,
        obs: &mut impl InstanceObserver,
    ) {
        let a2 = self.latency.output_token_overhead().max(0);
        let post = self.latency.post_decode_overhead().max(0);
        // ITL samples, reported in runs of equal gaps (decodes of one step
        // mostly share their previous token's time).
        let (mut gap, mut gaps) = (0, 0u64);
        let index = self.index;
        let b = u64::from(self.config.block_size);
        let mut running = std::mem::take(&mut self.running);
        let mut delivered = self.last_delivery;
        let mut keep = 0;
        for i in 0..running.len() {
            let run = &mut running[i];
            let (g, done) = self.finish_run(run, now, a2, post, store, obs, &mut delivered);
            if let Some(g) = g {
                if g != gap && gaps > 0 {
                    obs.token_gaps(index, gap, gaps);
                    gaps = 0;
                }
                gap = g;
                gaps += 1;
            }
            if done {
                continue;
            }
            if run.generated > 0 && run.input_len + run.generated - run.computed == 1 {
                // A decoding request reaches a KV block boundary every B
                // steps, where the KV cache touches its record, a block and
                // the index: all cold, since every other instance stepped in
                // between. Start fetching them now, from the batch record
                // alone, so the misses overlap with the rest of the step.
                let c = u64::from(run.computed);
                if c + 1 == run.kv_cap && !run.fills_private_block(b) {
                    // (An output block is filled from the batch record alone.)
                    if !run.fills_output_block(b) {
                        store.prefetch_hot(run.hot);
                    }
                    self.kv.prefetch_fill(
                        run.kv_last_hash,
                        run.output_seed,
                        run.input_len,
                        run.kv_cap - b,
                        run.last_block,
                    );
                } else if c == run.kv_cap {
                    store.prefetch_hot(run.hot);
                }
            }
            if keep != i {
                running[keep] = running[i];
            }
            keep += 1;
        }
        running.truncate(keep);
        self.running = running;
        self.last_delivery = delivered;
        if gaps > 0 {
            obs.token_gaps(index, gap, gaps);
        }
    }

    /// The end of a step for one request of the batch: its granted tokens
    /// are computed; when they reach its target it emits its next token
    /// (seen by the client at `now + k·α2`), and completes when that was its
    /// last. Returns the ITL gap of an emitted token that was not the first,
    /// and whether the request completed (its KV released, reported).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn finish_run(
        &mut self,
        run: &mut Run,
        now: Tick,
        a2: Tick,
        post: Tick,
        store: &mut RequestStore,
        obs: &mut impl InstanceObserver,
        delivered: &mut Tick,
    ) -> (Option<Tick>, bool) {
        if run.granted == 0 {
            return (None, false);
        }
        run.computed += run.granted;
        run.granted = 0;
        let target = run.input_len + run.generated;
        debug_assert!(run.computed <= target);
        if run.computed != target {
            return (None, false);
        }
        let mut gap = None;
        if run.generated < run.output_len {
            run.generated += 1;
            // Token k reaches the client k·α2 after the step that produced
            // it (α2: per-token output processing on the client path; it
            // never delays the next step).
            let emit_at = later(now, a2.saturating_mul(Tick::from(run.generated)));
            *delivered = (*delivered).max(emit_at);
            if run.generated == 1 {
                let req = store.hot_mut(run.hot);
                run.write_back(req);
                req.first_token_at = emit_at;
                obs.first_token(self.index, req, emit_at);
            } else {
                gap = Some(emit_at - run.last_token_at);
            }
            run.last_token_at = emit_at;
        }
        let done = run.generated == run.output_len;
        if done {
            self.complete(run, now, a2, post, store, obs, delivered);
        }
        (gap, done)
    }

    /// Complete `run`, which has just emitted its last token (or had none
    /// to emit): the client sees the completion with the last token plus the
    /// model's post-decode overhead (or at the step end `now` when there was
    /// no output); its KV blocks are released.
    #[allow(clippy::too_many_arguments)]
    fn complete(
        &mut self,
        run: &Run,
        now: Tick,
        a2: Tick,
        post: Tick,
        store: &mut RequestStore,
        obs: &mut impl InstanceObserver,
        delivered: &mut Tick,
    ) {
        let req = store.hot_mut(run.hot);
        run.write_back(req);
        if let Some(l) = self.lora.as_deref_mut() {
            l.unpin(req.adapter.get());
        }
        let at = if run.generated > 0 {
            run.last_token_at + post
        } else {
            later(now, a2)
        };
        *delivered = (*delivered).max(at);
        req.state = RequestState::Completed;
        req.completed_at = at;
        self.kv.release_final(req);
        self.completed += 1;
        obs.completed(self.index, run.slot, req, at);
    }

    /// vLLM continuous batching: grant the running requests in batch order
    /// (preempting under KV pressure), then admit from the wait queue.
    ///
    /// A running request whose KV cannot grow preempts victims chosen by the
    /// policy until it fits; a victim that already got a grant this step is
    /// refunded. If the request is itself the victim it gets nothing and the
    /// loop moves on to the next running request (vLLM stops the loop there;
    /// with FCFS victims the request is then the tail, so the two agree, and
    /// with priority victims continuing lets higher-priority requests later
    /// in the batch progress). Running requests not reached because the budget
    /// ran out stay in the batch with no grant. No request is admitted in a
    /// step that preempted, and a head request that does not fit blocks the
    /// queue (no skipping ahead).
    ///
    /// Returns the batch's shape (see [`Instance::batch_shape`]), summed
    /// while granting when nothing was preempted (same requests, same order,
    /// so the same floating-point sums), recomputed otherwise.
    fn form_batch(
        &mut self,
        now: Tick,
        store: &mut RequestStore,
        obs: &mut impl InstanceObserver,
    ) -> BatchShape {
        let threshold = self.config.long_prefill_token_threshold;
        let mut budget = self.config.max_num_batched_tokens;
        let mut preempted = false;
        let mut shape = BatchShape::default();

        // Running requests, in batch order.
        let b = u64::from(self.config.block_size);
        let mut i = 0;
        loop {
            // Fast path (decode, 15 steps out of 16): the tokens fit in the
            // last block without filling it; the KV cache has nothing to do.
            let runs = &mut self.running[..];
            while i < runs.len() && budget > 0 {
                let run = &mut runs[i];
                let computed = run.computed;
                let needed = run.input_len + run.generated - computed;
                debug_assert!(needed > 0);
                let n = chunk(needed, threshold, budget);
                let end = u64::from(computed) + u64::from(n);
                if end >= run.kv_cap || u64::from(computed) + b < run.kv_cap {
                    break;
                }
                run.granted = n;
                add_to_shape(&mut shape, run);
                budget -= n;
                i += 1;
            }
            if i >= self.running.len() || budget == 0 {
                break;
            }
            // The KV cache allocates or registers blocks: grant through it,
            // preempting under pressure.
            let run = &self.running[i];
            let computed = run.computed;
            let n = chunk(run.input_len + run.generated - computed, threshold, budget);
            if n == 1 && u64::from(computed) + 1 == run.kv_cap {
                self.grant_fill(i, store);
                add_to_shape(&mut shape, &self.running[i]);
                budget -= n;
                i += 1;
                continue;
            }
            loop {
                if self.grant_extend(i, n, store) {
                    add_to_shape(&mut shape, &self.running[i]);
                    budget -= n;
                    i += 1;
                    break;
                }
                let v = self.victim(store);
                let victim = self.running.remove(v);
                budget += victim.granted; // refund a grant made earlier this step
                self.preempt(victim, now, store, obs);
                preempted = true;
                if v == i {
                    // The request itself was the victim: it gets nothing this
                    // step; the next running request is now at index i.
                    break;
                }
                if v < i {
                    i -= 1;
                }
            }
        }

        // New requests, while there is room and no preemption happened.
        if preempted {
            return self.batch_shape();
        }
        self.admit_waiting(now, &mut budget, &mut shape, store);
        debug_assert_eq!(shape, self.batch_shape());
        shape
    }

    /// Admit from the wait queue while the batch has room and `budget`
    /// tokens are left (appending to the batch and adding to `shape`); a
    /// head request that does not fit blocks the queue (no skipping ahead).
    fn admit_waiting(
        &mut self,
        now: Tick,
        budget: &mut u32,
        shape: &mut BatchShape,
        store: &mut RequestStore,
    ) {
        let threshold = self.config.long_prefill_token_threshold;
        let b = self.config.block_size;
        // Scheduling one step ahead, this batch was formed when the step
        // that just ended started: what was queued since is not in it —
        // unless no request went on from that step (the scheduler had
        // nothing to run ahead, and forms this batch now).
        let visible_until = self.visible_until.filter(|_| self.batch_len() > 0);
        while self.batch_len() < self.config.max_num_seqs as usize && *budget > 0 {
            let Some(slot) = self.waiting.peek() else {
                break;
            };
            if visible_until.is_some_and(|t| store[slot].enqueued_at > t) {
                // Queued after the batch was formed (and so, in FCFS order,
                // is everything behind it).
                break;
            }
            // From here on the request lives in the store's dense hot region
            // (it stays there if it has to wait longer).
            let h = store.promote(slot);
            let req = store.hot_mut(h);
            if let Some(l) = self.lora.as_deref() {
                if !l.is_resident(req.adapter.get()) {
                    break; // its adapter is not loaded: the queue waits
                }
            }
            let (cached, n) = if req.kv_held() == 0 {
                self.kv.hash_prompt(req);
                let target = req.input_len + req.generated;
                // A fully cached stream still computes its last token (vLLM).
                let lookup = self.kv.lookup(req, target - 1, &mut self.hit_scratch);
                let cached = lookup.hits * b;
                let n = chunk(target - cached, threshold, *budget);
                if !self.kv.admit(req, lookup, &self.hit_scratch, n) {
                    if self.remote_waiting > 0 && self.batch_len() == 0 {
                        // Transferred KV held by waiting requests must not
                        // block an idle instance forever (see `remote_kv`).
                        self.give_up_waiting_transfers(store);
                        continue;
                    }
                    break; // head-of-line blocking
                }
                (cached, n)
            } else {
                // Its prompt's KV arrived by transfer (see `remote_kv`).
                self.remote_waiting -= 1;
                remote_kv::admission(req)
            };
            self.waiting.pop();
            debug_assert_eq!(req.state, RequestState::Queued);
            req.state = RequestState::Running;
            req.computed = cached;
            req.granted = n;
            if let Some(l) = self.lora.as_deref_mut() {
                l.pin(req.adapter.get());
            }
            // (A request whose prefill ran on another instance keeps the
            // scheduling time of that prefill.)
            if req.scheduled_at == UNSET {
                req.scheduled_at = now;
                req.cached_tokens = cached;
            }
            let mut run = Run {
                slot,
                hot: h,
                input_len: req.input_len,
                output_len: req.output_len,
                computed: cached,
                generated: req.generated,
                granted: n,
                private_block: self.kv.first_private(req),
                kv_cap: 0,
                last_token_at: req.last_token_at,
                kv_last_hash: 0,
                last_block: 0,
                kv_private: 0,
                output_seed: req.output_seed,
                track: Track::Stepped,
            };
            run.read_kv(req, b);
            add_to_shape(shape, &run);
            *budget -= n;
            self.running.push(run);
        }
        // The next request to admit, at a later step, is most likely the
        // head of the queue: start fetching its record.
        if let Some(slot) = self.waiting.peek() {
            store.prefetch_promotion(slot);
        }
    }

    /// Grant running request `i` `n` tokens as batch formation does, through
    /// the KV cache only at a block boundary; false, with nothing changed,
    /// when the cache has too few free blocks.
    fn grant_run(&mut self, i: usize, n: u32, store: &mut RequestStore) -> bool {
        let b = u64::from(self.config.block_size);
        let run = &mut self.running[i];
        let (computed, end) = (u64::from(run.computed), u64::from(run.computed + n));
        if end < run.kv_cap && computed + b >= run.kv_cap {
            run.granted = n;
            return true;
        }
        if n == 1 && computed + 1 == run.kv_cap {
            self.grant_fill(i, store);
            return true;
        }
        self.grant_extend(i, n, store)
    }

    /// Requests in the batch (while cruising, the batch has holes).
    #[inline]
    fn batch_len(&self) -> usize {
        self.running.len() - self.cruise.holes()
    }

    /// Grant running request `i` the one token that fills its last KV
    /// block: register the block (no allocation, so no preemption), knowing
    /// the block from the batch record.
    fn grant_fill(&mut self, i: usize, store: &mut RequestStore) {
        let b = u64::from(self.config.block_size);
        let run = self.running[i];
        debug_assert_eq!(u64::from(run.computed) + 1, run.kv_cap);
        if run.fills_private_block(b) {
            // Nothing to hash or index (see `KvCache::first_private`).
            self.running[i].granted = 1;
        } else if run.fills_output_block(b) {
            // An output block: its hash needs only the batch record, so the
            // request's record is not touched.
            let start = run.kv_cap - b;
            let hash = self.kv.fill_output_block(
                run.last_block,
                run.kv_last_hash,
                run.output_seed,
                run.input_len,
                start,
            );
            let run = &mut self.running[i];
            run.kv_last_hash = hash;
            run.granted = 1;
        } else {
            let req = store.hot_mut(run.hot);
            // The record's KV hash may be behind the batch record's.
            req.kv_last_hash = run.kv_last_hash;
            self.kv.fill_last(req, run.computed, run.last_block);
            let run = &mut self.running[i];
            run.kv_last_hash = req.kv_last_hash;
            run.granted = 1;
            run.write_back(req);
        }
    }

    /// Grant running request `i` `n` more tokens through the KV cache
    /// (allocating and registering blocks); false, with nothing changed,
    /// when the cache has too few free blocks.
    fn grant_extend(&mut self, i: usize, n: u32, store: &mut RequestStore) -> bool {
        let b = u64::from(self.config.block_size);
        let run = &mut self.running[i];
        if run.grows_private(u64::from(run.computed), b) {
            // Private blocks are counted in the batch record: neither the
            // request's record nor any block is touched.
            let end = u64::from(run.computed) + u64::from(n);
            let fresh = self.kv.blocks_for(end).saturating_sub(run.kv_cap / b);
            if !self.kv.take_private(fresh) {
                return false;
            }
            run.kv_private += fresh as u32;
            run.kv_cap += fresh * b;
            run.last_block = kv::NO_ID;
            run.granted = n;
            return true;
        }
        let run = &self.running[i];
        let req = store.hot_mut(run.hot);
        // The record's KV hash may be behind the batch record's.
        req.kv_last_hash = run.kv_last_hash;
        let had = req.kv_held();
        if !self.kv.extend(req, run.computed, n) {
            return false;
        }
        let run = &mut self.running[i];
        let len = req.kv_held();
        run.kv_cap = len * b;
        run.kv_private = req.kv_private;
        run.kv_last_hash = req.kv_last_hash;
        if len > had {
            run.last_block = self.kv.last_allocated();
        }
        run.granted = n;
        run.write_back(req);
        true
    }

    /// Index in the batch of the request to preempt.
    fn victim(&mut self, store: &RequestStore) -> usize {
        match self.config.preemption {
            PreemptionKind::Fcfs => self.running.len() - 1,
            PreemptionKind::Priority => {
                let mut best = 0;
                let key = |run: Run| {
                    let r = store.hot(run.hot);
                    (r.slo_class.priority(), Reverse(r.arrival), Reverse(r.id))
                };
                let mut best_key = key(self.running[0]);
                for (j, &run) in self.running.iter().enumerate().skip(1) {
                    let k = key(run);
                    if k < best_key {
                        best = j;
                        best_key = k;
                    }
                }
                best
            }
            PreemptionKind::Custom => self.custom_victim(store),
        }
    }

    /// The victim of the [`VictimChoice`]; the tail on an error.
    #[cold]
    fn custom_victim(&mut self, store: &RequestStore) -> usize {
        let tail = self.running.len() - 1;
        self.victim_view.clear();
        for run in &self.running {
            let r = store.hot(run.hot);
            self.victim_view.push(RunningInfo {
                id: r.id,
                arrival: r.arrival,
                input_len: run.input_len,
                generated: run.generated,
                computed: run.computed,
                slo_class: r.slo_class,
            });
        }
        let Some(choice) = self.victim_choice.0.as_mut() else {
            self.policy_error.get_or_insert_with(|| {
                "a custom preemption policy was configured without a victim choice".into()
            });
            return tail;
        };
        match choice.victim(&self.victim_view) {
            Ok(v) if v < self.running.len() => v,
            Ok(v) => {
                self.policy_error.get_or_insert_with(|| {
                    format!(
                        "the preemption policy chose batch index {v}, but the batch has {} requests",
                        self.running.len()
                    )
                });
                tail
            }
            Err(e) => {
                self.policy_error.get_or_insert(e);
                tail
            }
        }
    }

    /// Recompute preemption: free all KV (full blocks stay cached), forget
    /// the computed context, keep the emitted tokens, back to the queue front.
    fn preempt(
        &mut self,
        run: Run,
        now: Tick,
        store: &mut RequestStore,
        obs: &mut impl InstanceObserver,
    ) {
        let req = store.hot_mut(run.hot);
        run.write_back(req);
        if let Some(l) = self.lora.as_deref_mut() {
            l.unpin(req.adapter.get());
        }
        // It comes back and may hit its own blocks.
        self.kv.release_returning(req);
        req.computed = 0;
        req.granted = 0;
        req.state = RequestState::Queued;
        req.preemptions += 1;
        self.preemptions += 1;
        self.waiting.push_front(run.slot);
        obs.preempted(self.index, req, now);
    }

    /// `base` scaled by the LoRA factor of the batch just formed (rounded
    /// to the nearest tick, at least 1; unchanged when the factor is 1).
    #[cold]
    fn lora_step_time(&mut self, base: Tick, shape: &BatchShape, store: &RequestStore) -> Tick {
        let Some(l) = self.lora.as_deref_mut() else {
            return base;
        };
        let adapters = self
            .running
            .iter()
            .filter(|r| r.granted > 0)
            .filter_map(|r| store.hot(r.hot).adapter.get());
        let f = l.batch_factor(adapters, shape.prefill.requests > 0);
        if !(f.is_finite() && f > 1.0) {
            return base;
        }
        ((base as f64 * f)
            .round()
            .min(crate::engine::TIME_LIMIT as f64) as Tick)
            .max(1)
    }

    /// The batch as the latency model sees it (granted requests only).
    fn batch_shape(&self) -> BatchShape {
        let mut shape = BatchShape::default();
        for run in &self.running {
            add_to_shape(&mut shape, run);
        }
        shape
    }

    /// Write the progress of the running requests (`computed`, `generated`,
    /// `granted`, `last_token_at`) to their records in `store`. The engine
    /// keeps that progress in its batch while a request runs and writes it
    /// back when it touches the record anyway (first token, a KV block
    /// boundary, completion, preemption); call this before reading those
    /// fields of a running request between events (the cluster does at the
    /// end of a run).
    pub fn sync(&self, store: &mut RequestStore) {
        for run in self.running.iter().filter(|r| r.track != Track::Gone) {
            let run = self.cruise.materialize(run);
            run.write_back(store.hot_mut(run.hot));
        }
    }

    /// The LoRA adapters of the requests running and waiting here (sorted,
    /// each once) and the resident-adapter capacity — vLLM's
    /// `lora_requests_info`; `None` without `[lora]`.
    pub fn lora_requests(&self, store: &RequestStore) -> Option<(Vec<u32>, Vec<u32>, u32)> {
        let l = self.lora.as_deref()?;
        let mut running: Vec<u32> = self
            .running
            .iter()
            .filter(|r| r.track != Track::Gone)
            .filter_map(|r| store[r.slot].adapter.get())
            .collect();
        let mut waiting: Vec<u32> = self
            .waiting
            .iter()
            .filter_map(|slot| store[slot].adapter.get())
            .collect();
        for v in [&mut running, &mut waiting] {
            v.sort_unstable();
            v.dedup();
        }
        Some((running, waiting, l.config().capacity))
    }

    /// Drop every waiting request (an `immediate` drain of the control
    /// plane): each becomes `Dropped` and is reported to `obs` like a
    /// request dropped at enqueue (INV-1: injected = completed + dropped +
    /// queued + running still holds). Waiting requests hold no KV blocks.
    pub fn drop_waiting(
        &mut self,
        now: Tick,
        store: &mut RequestStore,
        obs: &mut impl InstanceObserver,
    ) -> u64 {
        let mut n = 0;
        while let Some(slot) = self.waiting.pop() {
            self.end_dropped(now, slot, &mut store[slot], obs);
            n += 1;
        }
        n
    }

    /// End `req` (in `slot`) here as `Dropped` — unservable at enqueue,
    /// drained, or evicted — counted with this instance's drops (INV-1:
    /// injected = completed + dropped + queued + running) and reported to
    /// `obs`. The caller has released its KV blocks, if it held any.
    fn end_dropped(
        &mut self,
        now: Tick,
        slot: Slot,
        req: &mut Request,
        obs: &mut impl InstanceObserver,
    ) {
        req.state = RequestState::Dropped;
        self.dropped += 1;
        obs.dropped(self.index, slot, req, now);
    }

    /// Take out the waiting requests no client has seen a token of (a
    /// `redirect` drain): they go back to the cluster to be routed again.
    /// Preempted requests that did produce tokens stay, in front, in order.
    pub fn take_unstarted_waiting(&mut self, store: &RequestStore) -> Vec<Slot> {
        let mut taken = Vec::new();
        let mut kept = Vec::new();
        while let Some(slot) = self.waiting.pop() {
            let r = &store[slot];
            if r.generated == 0 && r.first_token_at == UNSET {
                taken.push(slot);
            } else {
                kept.push(slot);
            }
        }
        for &slot in kept.iter().rev() {
            self.waiting.push_front(slot);
        }
        taken
    }

    /// Requests waiting in the wait queue (Tier 2 signal).
    pub fn queue_depth(&self) -> u32 {
        self.waiting.len() as u32
    }
    /// Requests in the running batch (Tier 2 signal).
    pub fn batch_size(&self) -> u32 {
        self.batch_len() as u32
    }
    /// Used KV blocks / total (Tier 3 signal).
    pub fn kv_utilization(&self) -> f64 {
        self.kv.used() as f64 / self.kv.total() as f64
    }
    /// Free KV blocks (Tier 3 signal). Includes free blocks that still cache a prefix.
    pub fn free_kv_blocks(&self) -> u64 {
        self.kv.free()
    }
    /// Order the wait queue by `key` (for [`SchedulerKind::Custom`]; call
    /// before the first request arrives).
    pub fn set_sort_key(&mut self, key: Box<dyn SortKey>) {
        self.waiting.set_sort_key(key);
    }
    /// Choose preemption victims with `choice` (for
    /// [`PreemptionKind::Custom`]).
    pub fn set_victim_choice(&mut self, choice: Box<dyn VictimChoice>) {
        self.victim_choice = CustomVictim(Some(choice));
    }
    /// The first error a custom sort key or victim choice returned, if any
    /// (taken).
    pub fn take_policy_error(&mut self) -> Option<String> {
        self.policy_error
            .take()
            .or_else(|| self.waiting.take_error())
    }
    /// Preemptions so far (a request preempted twice counts twice).
    pub fn preemption_count(&self) -> u64 {
        self.preemptions
    }
    /// KV blocks held by requests.
    pub fn used_kv_blocks(&self) -> u64 {
        self.kv.used()
    }
    /// Cumulative prefix-cache hit rate in blocks (Tier 3 signal): blocks hit
    /// over blocks looked up at admissions, 0 before any lookup.
    pub fn cache_hit_rate(&self) -> f64 {
        match self.kv.lookup_blocks() {
            0 => 0.0,
            n => self.kv.hit_blocks() as f64 / n as f64,
        }
    }
    /// True when a `Step` of this instance is in the event queue.
    pub fn step_pending(&self) -> bool {
        self.step_pending
    }
    /// KV blocks that have ever been handed out (memory is proportional to this).
    pub fn kv_blocks_ever_used(&self) -> u64 {
        self.kv.blocks_ever_used()
    }
    /// The running batch, in batch order.
    pub fn running_slots(&self) -> Vec<Slot> {
        self.running
            .iter()
            .filter(|r| r.track != Track::Gone)
            .map(|r| r.slot)
            .collect()
    }
    /// Every waiting request: preempted ones first, in queue order, then the
    /// rest in no particular order (use it for end-of-run records, not order).
    pub fn waiting_slots(&self) -> impl Iterator<Item = Slot> + '_ {
        self.waiting.iter()
    }
    /// Counts for the report.
    pub fn counts(&self) -> InstanceCounts {
        InstanceCounts {
            still_queued: self.waiting.len() as u64,
            still_running: self.batch_len() as u64,
            preemptions: self.preemptions,
            steps: self.steps,
            cache_hit_blocks: self.kv.hit_blocks(),
            cache_lookup_blocks: self.kv.lookup_blocks(),
            peak_kv_blocks: self.kv.peak_used(),
            kv_offload: self.kv.cpu_counts(),
            completed: self.completed,
            dropped: self.dropped,
            last_delivery: self.last_delivery(),
        }
    }

    /// Check the instance's internal consistency against `store`, O(state):
    /// the KV cache structure (INV-4 included), every running request in
    /// state `Running` holding exactly the blocks covering its computed and
    /// granted tokens, every waiting request `Queued` with no blocks and
    /// nothing computed, block reference counts equal to the number of
    /// holders, and INV-8 (a step pending whenever requests wait or run).
    /// Meant for tests and debugging; returns the first violation found.
    pub fn check_invariants(&self, store: &RequestStore) -> Result<(), String> {
        self.kv.check()?;
        let mut holders: std::collections::HashMap<u32, u32> = Default::default();
        // Private blocks held (they have no ids to count holders of).
        let mut anon = 0u64;
        self.check_cruise()?;
        for run in self.running.iter().filter(|r| r.track != Track::Gone) {
            let run = &self.cruise.materialize(run);
            if store.hot_index(run.slot) != Some(run.hot) || store.hot_slot(run.hot) != run.slot {
                return Err(format!(
                    "running slot {} and hot index {} disagree",
                    run.slot, run.hot
                ));
            }
            let r = store.hot(run.hot);
            if r.state != RequestState::Running {
                return Err(format!("running request {} in state {:?}", r.id, r.state));
            }
            if (r.input_len, r.output_len) != (run.input_len, run.output_len) {
                return Err(format!(
                    "request {}: batch copy of its lengths differs",
                    r.id
                ));
            }
            let want = self
                .kv
                .blocks_for(u64::from(run.computed) + u64::from(run.granted));
            // The batch record holds the private block count.
            let held = r.kv_blocks.len() as u64 + u64::from(run.kv_private);
            if held != want {
                return Err(format!(
                    "request {} holds {held} blocks for {} tokens",
                    r.id,
                    run.computed + run.granted
                ));
            }
            anon += u64::from(run.kv_private);
            if run.kv_cap != held * u64::from(self.config.block_size) {
                return Err(format!("request {}: stale KV capacity in the batch", r.id));
            }
            for &b in &r.kv_blocks {
                *holders.entry(b).or_default() += 1;
            }
        }
        for &s in &self.reserved {
            remote_kv::check_reserved(&store[s], &self.kv, RequestState::Transferring)?;
            anon += u64::from(store[s].kv_private);
            for &b in &store[s].kv_blocks {
                *holders.entry(b).or_default() += 1;
            }
        }
        for s in self.waiting.iter() {
            let r = &store[s];
            if r.kv_held() != 0 {
                remote_kv::check_reserved(r, &self.kv, RequestState::Queued)?;
                anon += u64::from(r.kv_private);
                for &b in &r.kv_blocks {
                    *holders.entry(b).or_default() += 1;
                }
                continue;
            }
            if r.state != RequestState::Queued || r.computed != 0 {
                return Err(format!(
                    "waiting request {} in state {:?} with {} blocks, {} computed",
                    r.id,
                    r.state,
                    r.kv_held(),
                    r.computed
                ));
            }
        }
        if holders.len() as u64 + anon != self.kv.used() || anon != self.kv.anon_held() {
            return Err(format!(
                "{} blocks and {anon} private ones held by running, waiting and reserved requests, KV says {} used, {} private",
                holders.len(),
                self.kv.used(),
                self.kv.anon_held()
            ));
        }
        for (&b, &n) in &holders {
            if self.kv.refs_of(b) != n {
                return Err(format!(
                    "block {b}: {n} holders, {} refs",
                    self.kv.refs_of(b)
                ));
            }
        }
        if (!self.waiting.is_empty() || !self.running.is_empty()) && !self.step_pending {
            return Err("INV-8: work present but no step pending".into());
        }
        if let Some(l) = &self.lora {
            l.check(
                self.running
                    .iter()
                    .filter(|r| r.track != Track::Gone)
                    .map(|r| store.hot(r.hot).adapter.get()),
            )?;
        }
        Ok(())
    }
}

//! The `repr(C)` views a policy receives: the request being decided and the
//! state of the cluster. They borrow host memory (no copies, no allocation
//! per call) and are only valid for the duration of the call.

use abi_stable::{
    std_types::{RSlice, RStr},
    StableAbi,
};

/// Service class of a request, as a stable one-byte code.
///
/// Codes: 0 critical, 1 standard, 2 batch, 3 sheddable, 4 background. Codes
/// added in later versions are reported by [`SloClass::name`] as `"unknown"`.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SloClass(pub u8);

impl SloClass {
    /// Latency-critical traffic (priority 4).
    pub const CRITICAL: SloClass = SloClass(0);
    /// Ordinary interactive traffic (priority 3).
    pub const STANDARD: SloClass = SloClass(1);
    /// Offline batch work (priority −1).
    pub const BATCH: SloClass = SloClass(2);
    /// Traffic that may be shed under load (priority −2).
    pub const SHEDDABLE: SloClass = SloClass(3);
    /// Best-effort background work (priority −3).
    pub const BACKGROUND: SloClass = SloClass(4);

    /// The class name used in run files and reports.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "critical",
            1 => "standard",
            2 => "batch",
            3 => "sheddable",
            4 => "background",
            _ => "unknown",
        }
    }

    /// Scheduling priority of the class; negative means sheddable.
    pub fn priority(self) -> i32 {
        match self.0 {
            0 => 4,
            1 => 3,
            2 => -1,
            3 => -2,
            4 => -3,
            _ => 0,
        }
    }

    /// True for classes with negative priority (batch, sheddable, background).
    pub fn is_sheddable(self) -> bool {
        self.priority() < 0
    }
}

/// The request a policy decides on.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct RequestView<'a> {
    /// Unique request id (arrival order, 0-based).
    pub id: u64,
    /// Time the request reached the cluster, in microseconds.
    pub arrival_us: i64,
    /// Prompt length in tokens (shared prefix and session context included).
    pub input_tokens: u32,
    /// Service class.
    pub slo_class: SloClass,
    /// Tenant the request belongs to (empty when the workload names none).
    pub tenant: RStr<'a>,
    /// Hierarchical hashes of the prompt's full KV blocks: hash `k` identifies
    /// the whole prefix up to block `k`, so two requests share their first `k`
    /// hashes exactly when they share their first `k` blocks of tokens.
    pub block_hashes: RSlice<'a, u64>,
}

/// What the router knows about one instance.
///
/// Freshness (INV-7): `pending_requests` is synchronous (Tier 1);
/// `queue_depth` and `batch_size` are read live (Tier 2); `kv_utilization`,
/// `free_kv_blocks` and `cache_hit_rate` may be as old as the run's
/// `snapshot_refresh_interval_us` (Tier 3). A run's `[routing.freshness]`
/// may give queue depth, batch size and the KV fields each their own
/// refresh interval (e.g. llm-d's 50 ms scrape).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, Default, PartialEq)]
pub struct InstanceSnapshot {
    /// Requests waiting in the instance's wait queue.
    pub queue_depth: u32,
    /// Requests in the instance's running batch.
    pub batch_size: u32,
    /// Requests routed to the instance that have not reached its queue yet.
    pub pending_requests: u32,
    /// Always 0; keeps the layout explicit.
    pub reserved: u32,
    /// Used KV blocks / total KV blocks, in [0, 1].
    pub kv_utilization: f64,
    /// Free KV blocks.
    pub free_kv_blocks: u64,
    /// Cumulative prefix-cache hit rate (blocks hit / blocks looked up), in [0, 1].
    pub cache_hit_rate: f64,
}

impl InstanceSnapshot {
    /// Effective load = queue depth + batch size + pending requests. Every
    /// load-based standard policy uses exactly this.
    #[inline]
    pub fn effective_load(&self) -> u64 {
        u64::from(self.queue_depth) + u64::from(self.batch_size) + u64::from(self.pending_requests)
    }
}

/// The cluster as a routing or admission decision sees it.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct ClusterView<'a> {
    /// Current simulated time, in microseconds.
    pub clock_us: i64,
    /// One snapshot per instance, in instance index order.
    pub instances: RSlice<'a, InstanceSnapshot>,
}

impl<'a> ClusterView<'a> {
    /// Number of instances.
    #[inline]
    pub fn len(&self) -> usize {
        self.instances.len()
    }

    /// True when the cluster has no instance (never the case in a run).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }

    /// The snapshots as a plain slice.
    #[inline]
    pub fn instances(&self) -> &'a [InstanceSnapshot] {
        self.instances.as_slice()
    }
}

/// ABI 0.2: what the cluster knows about one instance beyond the 0.1
/// [`InstanceSnapshot`] (which is frozen: a slice of it cannot grow without
/// breaking a 0.1 plugin's stride, so new signals live in this parallel
/// slice). Read live at the decision (whatever `[routing.freshness]` says:
/// it governs the [`InstanceSnapshot`] fields only).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, Default, PartialEq)]
pub struct InstanceInfo<'a> {
    /// Requests dispatched to the instance and not finished yet (routed,
    /// queued or running; −1 at completion or drop).
    pub in_flight: u32,
    /// Tensor parallelism of the instance.
    pub tp: u32,
    /// Preemptions on the instance so far.
    pub preemptions: u64,
    /// KV capacity in tokens (total blocks × block size).
    pub kv_capacity_tokens: u64,
    /// KV tokens in use (used blocks × block size).
    pub kv_tokens_in_use: u64,
    /// Model name.
    pub model: RStr<'a>,
    /// GPU type.
    pub gpu: RStr<'a>,
    /// Lifecycle state (appended in 0.2): [`InstanceState::ACTIVE`] for every
    /// instance of a run without instance lifecycle or autoscaling.
    pub state: InstanceState,
    /// Context tokens of the running batch: Σ (prompt + output generated so
    /// far) over the requests in it.
    pub running_tokens: u64,
    /// Tokens the wait queue still has to compute: Σ (prompt + output
    /// generated so far) over the waiting requests (a preempted request
    /// recomputes its whole context; prefix-cache hits are not deducted).
    pub waiting_tokens: u64,
}

/// ABI 0.2: where an instance is in its lifecycle, as a stable code.
/// Only `ACTIVE` and `WARMING_UP` instances are routed to.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceState(pub u32);

impl InstanceState {
    /// Serving (the state of every instance when there is no lifecycle).
    pub const ACTIVE: InstanceState = InstanceState(0);
    /// Waiting for its node to be provisioned.
    pub const PENDING: InstanceState = InstanceState(1);
    /// Loading the model (not routable; counts as pending supply).
    pub const LOADING: InstanceState = InstanceState(2);
    /// Serving its first requests (routable).
    pub const WARMING_UP: InstanceState = InstanceState(3);
    /// Finishing or handing back its work; receives no new requests.
    pub const DRAINING: InstanceState = InstanceState(4);
    /// Gone; its GPUs are released.
    pub const TERMINATED: InstanceState = InstanceState(5);

    /// The name used in reports and time series.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "active",
            1 => "pending",
            2 => "loading",
            3 => "warming_up",
            4 => "draining",
            5 => "terminated",
            _ => "unknown",
        }
    }

    /// True when requests may be routed to the instance.
    #[inline]
    pub fn is_routable(self) -> bool {
        self == Self::ACTIVE || self == Self::WARMING_UP
    }
}

/// ABI 0.2: the cluster as a filter, picker, candidate scorer or lifecycle
/// hook sees it: the 0.1 [`ClusterView`] (every instance), the candidates
/// still in play, and the 0.2 per-instance signals. It dereferences to the
/// [`ClusterView`], so `state.instances()` and `state.clock_us` work.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct ClusterState<'a> {
    /// Every instance, as in 0.1.
    pub view: ClusterView<'a>,
    /// Indices of the instances still in play (all of them outside routing,
    /// and before the first filter), ascending.
    pub candidates: RSlice<'a, u32>,
    /// One entry per instance, in instance order.
    pub info: RSlice<'a, InstanceInfo<'a>>,
    /// The per-instance prefix-cache query: entry `i` is the number of
    /// leading blocks of the request's prompt (`request.block_hashes`)
    /// that instance `i`'s KV cache holds, as of `cache_signal_delay_us`
    /// ago (see the `precise-prefix-cache` scorer). One entry per instance
    /// when some policy of the decision declares
    /// [`PolicyDef::PREFIX_QUERY`](crate::PolicyDef::PREFIX_QUERY), empty
    /// otherwise (and outside routing decisions).
    pub prefix_blocks: RSlice<'a, u32>,
}

impl<'a> ClusterState<'a> {
    /// The candidates as a plain slice.
    #[inline]
    pub fn candidates(&self) -> &'a [u32] {
        self.candidates.as_slice()
    }

    /// The 0.2 signals as a plain slice (one per instance).
    #[inline]
    pub fn info(&self) -> &'a [InstanceInfo<'a>] {
        self.info.as_slice()
    }

    /// The prefix-cache query as a plain slice: one entry per instance, or
    /// empty when no policy of the decision asked for it.
    #[inline]
    pub fn prefix_blocks(&self) -> &'a [u32] {
        self.prefix_blocks.as_slice()
    }

    /// Snapshot and 0.2 signals of instance `i`.
    #[inline]
    pub fn instance(&self, i: u32) -> (&'a InstanceSnapshot, &'a InstanceInfo<'a>) {
        (
            &self.view.instances()[i as usize],
            &self.info.as_slice()[i as usize],
        )
    }
}

impl<'a> std::ops::Deref for ClusterState<'a> {
    type Target = ClusterView<'a>;
    fn deref(&self) -> &ClusterView<'a> {
        &self.view
    }
}

/// ABI 0.2: one request of an instance's running batch, as a preemption
/// policy sees it (the batch in admission order).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunningRequest {
    /// Request id.
    pub id: u64,
    /// Time the request reached the cluster, µs.
    pub arrival_us: i64,
    /// Prompt length in tokens.
    pub input_tokens: u32,
    /// Output tokens generated so far.
    pub generated: u32,
    /// Tokens whose KV is computed (prompt and output).
    pub computed: u32,
    /// Service class.
    pub slo_class: SloClass,
}

/// ABI 0.2 (kind `decider`, code 7): what prefill/decode disaggregation
/// knows about a request when it asks a decider whether to split it. The
/// decode instance is already chosen (decode-first, as llm-d's P/D
/// scheduler does); instance indices are the cluster's.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PdView {
    /// The instance routing chose to decode the request.
    pub decode_instance: u32,
    /// Leading blocks of the prompt that the decode instance's KV cache
    /// holds now, GPU or CPU tier (what the standard `prefix-threshold`
    /// decider reads).
    pub decode_cached_blocks: u32,
    /// Tokens per KV block.
    pub block_size: u32,
    /// The instances that can run a prefill leg are
    /// `prefill_first .. prefill_end` (also the `candidates` of the
    /// cluster state the decider receives).
    pub prefill_first: u32,
    /// End (exclusive) of the prefill-capable instances.
    pub prefill_end: u32,
}

impl PdView {
    /// Prompt tokens of `request` not cached on the decode instance: what a
    /// prefill leg would compute.
    pub fn uncached_prompt_tokens(&self, request: &RequestView<'_>) -> u64 {
        let cached = u64::from(self.decode_cached_blocks) * u64::from(self.block_size);
        u64::from(request.input_tokens).saturating_sub(cached)
    }
}

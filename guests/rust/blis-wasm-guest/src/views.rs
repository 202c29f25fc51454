//! The views a policy reads, laid out exactly as the component model's
//! canonical ABI stores the records of `wit/blis-plugin.wit` in linear
//! memory (wasm32: pointers and lengths are 4 bytes), so the host's values
//! are read in place, without copies.

use core::marker::PhantomData;

/// A canonical-ABI list: pointer and length into this module's memory.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RawList<T> {
    ptr: *const T,
    len: usize,
    _t: PhantomData<T>,
}

impl<T> RawList<T> {
    pub(crate) fn new(ptr: *const T, len: usize) -> Self {
        RawList {
            ptr,
            len,
            _t: PhantomData,
        }
    }

    /// The elements (the host's values for the current call).
    #[inline]
    pub fn as_slice<'a>(&self) -> &'a [T] {
        if self.len == 0 || self.ptr.is_null() {
            &[]
        } else {
            // SAFETY: the host lowered `len` values of T at `ptr` (memory it
            // allocated through cabi_realloc), valid for the whole call.
            unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
        }
    }
}

/// A canonical-ABI string.
pub type RawStr = RawList<u8>;

impl RawList<u8> {
    /// The text (the host always lowers valid UTF-8).
    #[inline]
    pub fn as_str<'a>(&self) -> &'a str {
        // SAFETY: canonical-ABI strings are UTF-8 (checked by the host side
        // when it lowers a Rust string).
        unsafe { core::str::from_utf8_unchecked(self.as_slice()) }
    }
}

/// Service class of a request: 0 critical, 1 standard, 2 batch,
/// 3 sheddable, 4 background.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SloClass(pub u8);

impl SloClass {
    pub const CRITICAL: SloClass = SloClass(0);
    pub const STANDARD: SloClass = SloClass(1);
    pub const BATCH: SloClass = SloClass(2);
    pub const SHEDDABLE: SloClass = SloClass(3);
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

    /// Scheduling priority; negative means sheddable.
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

    /// True for classes with negative priority.
    pub fn is_sheddable(self) -> bool {
        self.priority() < 0
    }
}

/// `request-view` as stored by the host.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawRequest {
    pub id: u64,
    pub arrival_us: i64,
    pub input_tokens: u32,
    pub slo_class: u8,
    pub tenant: RawStr,
    pub block_hashes: RawList<u64>,
}

/// The request a policy decides on.
#[derive(Clone, Copy, Debug)]
pub struct RequestView<'a> {
    pub id: u64,
    /// Arrival time at the cluster, µs.
    pub arrival_us: i64,
    pub input_tokens: u32,
    pub slo_class: SloClass,
    /// Tenant name ("" when none).
    pub tenant: &'a str,
    /// Hierarchical hashes of the prompt's full KV blocks.
    pub block_hashes: &'a [u64],
}

impl RawRequest {
    pub(crate) fn view<'a>(&self) -> RequestView<'a> {
        RequestView {
            id: self.id,
            arrival_us: self.arrival_us,
            input_tokens: self.input_tokens,
            slo_class: SloClass(self.slo_class),
            tenant: self.tenant.as_str(),
            block_hashes: self.block_hashes.as_slice(),
        }
    }
}

/// One instance's signals.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct InstanceSnapshot {
    pub queue_depth: u32,
    pub batch_size: u32,
    pub pending_requests: u32,
    pub kv_utilization: f64,
    pub free_kv_blocks: u64,
    pub cache_hit_rate: f64,
}

impl InstanceSnapshot {
    /// `queue_depth + batch_size + pending_requests`.
    #[inline]
    pub fn effective_load(&self) -> u64 {
        u64::from(self.queue_depth) + u64::from(self.batch_size) + u64::from(self.pending_requests)
    }
}

/// `cluster-view` as stored by the host.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawClusterView {
    pub clock_us: i64,
    pub instances: RawList<InstanceSnapshot>,
}

/// The cluster at a decision.
#[derive(Clone, Copy, Debug)]
pub struct ClusterView<'a> {
    /// Simulated time, µs.
    pub clock_us: i64,
    pub instances: &'a [InstanceSnapshot],
}

impl<'a> ClusterView<'a> {
    /// Number of instances.
    #[inline]
    pub fn len(&self) -> usize {
        self.instances.len()
    }

    /// True for an empty cluster.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }

    /// One snapshot per instance.
    #[inline]
    pub fn instances(&self) -> &'a [InstanceSnapshot] {
        self.instances
    }
}

impl RawClusterView {
    pub(crate) fn view<'a>(&self) -> ClusterView<'a> {
        ClusterView {
            clock_us: self.clock_us,
            instances: self.instances.as_slice(),
        }
    }
}

/// Lifecycle state of an instance: 0 active, 1 pending, 2 loading,
/// 3 warming-up, 4 draining, 5 terminated.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceState(pub u32);

impl InstanceState {
    pub const ACTIVE: InstanceState = InstanceState(0);
    pub const PENDING: InstanceState = InstanceState(1);
    pub const LOADING: InstanceState = InstanceState(2);
    pub const WARMING_UP: InstanceState = InstanceState(3);
    pub const DRAINING: InstanceState = InstanceState(4);
    pub const TERMINATED: InstanceState = InstanceState(5);

    /// True when routing may send requests to the instance.
    pub fn is_routable(self) -> bool {
        self == Self::ACTIVE || self == Self::WARMING_UP
    }
}

/// The 0.2 per-instance signals (read the strings with `model()`, `gpu()`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct InstanceInfo {
    pub in_flight: u32,
    pub tp: u32,
    pub preemptions: u64,
    pub kv_capacity_tokens: u64,
    pub kv_tokens_in_use: u64,
    model: RawStr,
    gpu: RawStr,
    pub state: InstanceState,
    pub running_tokens: u64,
    pub waiting_tokens: u64,
}

impl InstanceInfo {
    /// The model the instance serves.
    pub fn model(&self) -> &str {
        self.model.as_str()
    }

    /// The instance's GPU.
    pub fn gpu(&self) -> &str {
        self.gpu.as_str()
    }

    pub(crate) fn empty() -> Self {
        InstanceInfo {
            in_flight: 0,
            tp: 0,
            preemptions: 0,
            kv_capacity_tokens: 0,
            kv_tokens_in_use: 0,
            model: RawList::new(core::ptr::null(), 0),
            gpu: RawList::new(core::ptr::null(), 0),
            state: InstanceState::ACTIVE,
            running_tokens: 0,
            waiting_tokens: 0,
        }
    }
}

/// `cluster-state` as stored by the host.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawClusterState {
    pub view: RawClusterView,
    pub candidates: RawList<u32>,
    pub info: RawList<InstanceInfo>,
    pub prefix_blocks: RawList<u32>,
}

/// The 0.2 cluster state.
#[derive(Clone, Copy)]
pub struct ClusterState<'a> {
    pub view: ClusterView<'a>,
    /// The instances still in play (after the profile's filters).
    pub candidates: &'a [u32],
    pub info: &'a [InstanceInfo],
    /// Leading prompt blocks each instance holds (only with `PREFIX_QUERY`).
    pub prefix_blocks: &'a [u32],
}

impl<'a> ClusterState<'a> {
    /// The candidates' instance indices.
    #[inline]
    pub fn candidates(&self) -> &'a [u32] {
        self.candidates
    }

    /// Per-instance info.
    #[inline]
    pub fn info(&self) -> &'a [InstanceInfo] {
        self.info
    }

    /// Leading prompt blocks per instance.
    #[inline]
    pub fn prefix_blocks(&self) -> &'a [u32] {
        self.prefix_blocks
    }

    /// Number of instances.
    #[inline]
    pub fn len(&self) -> usize {
        self.view.len()
    }

    /// True for an empty cluster.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.view.is_empty()
    }

    /// Simulated time, µs.
    #[inline]
    pub fn clock_us(&self) -> i64 {
        self.view.clock_us
    }

    /// The snapshots.
    #[inline]
    pub fn instances(&self) -> &'a [InstanceSnapshot] {
        self.view.instances
    }

    /// Snapshot and info of instance `i`.
    pub fn instance(&self, i: u32) -> (&'a InstanceSnapshot, &'a InstanceInfo) {
        (&self.view.instances[i as usize], &self.info[i as usize])
    }
}

impl RawClusterState {
    pub(crate) fn view<'a>(&self) -> ClusterState<'a> {
        ClusterState {
            view: self.view.view(),
            candidates: self.candidates.as_slice(),
            info: self.info.as_slice(),
            prefix_blocks: self.prefix_blocks.as_slice(),
        }
    }
}

/// Kind of a lifecycle event.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventKind(pub u8);

impl EventKind {
    pub const DISPATCHED: EventKind = EventKind(0);
    pub const FIRST_TOKEN: EventKind = EventKind(1);
    pub const COMPLETED: EventKind = EventKind(2);
    pub const REJECTED: EventKind = EventKind(3);
    pub const DROPPED: EventKind = EventKind(4);
    pub const RUN_END: EventKind = EventKind(5);
}

/// `request-event` as stored by the host.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawEvent {
    pub kind: u8,
    pub instance: u32,
    pub time_us: i64,
    pub request: RawRequest,
    pub ttft_us: i64,
    pub e2e_us: i64,
    pub output_tokens: u32,
}

/// One lifecycle event of one request.
#[derive(Clone, Copy, Debug)]
pub struct RequestEvent<'a> {
    pub kind: EventKind,
    /// The instance concerned (`u32::MAX` when none).
    pub instance: u32,
    pub time_us: i64,
    pub request: RequestView<'a>,
    /// Time to first token, µs (−1 when not known yet).
    pub ttft_us: i64,
    /// End-to-end latency, µs (−1 when not known yet).
    pub e2e_us: i64,
    pub output_tokens: u32,
}

impl RawEvent {
    pub(crate) fn view<'a>(&self) -> RequestEvent<'a> {
        RequestEvent {
            kind: EventKind(self.kind),
            instance: self.instance,
            time_us: self.time_us,
            request: self.request.view(),
            ttft_us: self.ttft_us,
            e2e_us: self.e2e_us,
            output_tokens: self.output_tokens,
        }
    }
}

/// A request of an instance's running batch.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunningRequest {
    pub id: u64,
    pub arrival_us: i64,
    pub input_tokens: u32,
    pub generated: u32,
    pub computed: u32,
    pub slo_class: SloClass,
}

/// The prefill/decode split decision's context.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PdView {
    pub decode_instance: u32,
    pub decode_cached_blocks: u32,
    pub block_size: u32,
    pub prefill_first: u32,
    pub prefill_end: u32,
}

impl PdView {
    /// Prompt tokens not cached on the decode instance.
    pub fn uncached_prompt_tokens(&self, request: &RequestView<'_>) -> u64 {
        let cached = u64::from(self.decode_cached_blocks) * u64::from(self.block_size);
        u64::from(request.input_tokens).saturating_sub(cached)
    }
}

/// The run's summary, handed to `on_run_end`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    pub end_us: i64,
    pub arrived: u64,
    pub completed: u64,
    pub rejected: u64,
    pub rejected_by_admission: u64,
    pub rejected_by_filter: u64,
    pub rejected_by_gateway: u64,
    pub rejected_by_tenant_budget: u64,
    pub rejected_no_instance: u64,
    pub dropped: u64,
    pub unfinished: u64,
}

impl RunSummary {
    /// Read the `key = integer` lines the host writes (unknown keys are
    /// ignored: a newer host may add some).
    pub fn from_toml(text: &str) -> RunSummary {
        let mut s = RunSummary::default();
        for line in text.lines() {
            let (k, v) = match line.split_once('=') {
                Some(kv) => kv,
                None => continue,
            };
            let v: i64 = match v.trim().parse() {
                Ok(v) => v,
                Err(_) => continue,
            };
            let u = v.max(0) as u64;
            match k.trim() {
                "end_us" => s.end_us = v,
                "arrived" => s.arrived = u,
                "completed" => s.completed = u,
                "rejected" => s.rejected = u,
                "rejected_by_admission" => s.rejected_by_admission = u,
                "rejected_by_filter" => s.rejected_by_filter = u,
                "rejected_by_gateway" => s.rejected_by_gateway = u,
                "rejected_by_tenant_budget" => s.rejected_by_tenant_budget = u,
                "rejected_no_instance" => s.rejected_no_instance = u,
                "dropped" => s.dropped = u,
                "unfinished" => s.unfinished = u,
                _ => {}
            }
        }
        s
    }
}

// The canonical-ABI sizes and alignments of the WIT records on wasm32,
// checked at compile time.
#[cfg(target_arch = "wasm32")]
const _: () = {
    use core::mem::{align_of, size_of};
    assert!(size_of::<RawRequest>() == 40 && align_of::<RawRequest>() == 8);
    assert!(size_of::<InstanceSnapshot>() == 40);
    assert!(size_of::<RawClusterView>() == 16);
    assert!(size_of::<InstanceInfo>() == 72);
    assert!(size_of::<RawClusterState>() == 40);
    assert!(size_of::<RawEvent>() == 80);
    assert!(size_of::<RunningRequest>() == 32);
    assert!(size_of::<PdView>() == 20 && align_of::<PdView>() == 4);
};

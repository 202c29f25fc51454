//! Routing snapshots with the seed's three freshness tiers (INV-7), and
//! per-signal freshness settings (`[routing.freshness]`).
//!
//! * Tier 1 — `pending_requests` (and the prefix index inside the scorer):
//!   owned by the cluster, updated synchronously at every routing decision.
//! * Tier 2 — `queue_depth`, `batch_size`: read live from the instance at
//!   every snapshot by default.
//! * Tier 3 — `kv_utilization`, `free_kv_blocks`, `cache_hit_rate`: re-read
//!   together when at least `refresh_interval` ticks of simulated time have
//!   passed since the last refresh (lazily, at the first snapshot after the
//!   interval, as the reference does); 0 means always live. The first
//!   snapshot of a run always reads them.
//!
//! [`Freshness`] gives each of the three periodic groups — queue depth,
//! batch size (running requests), KV (the Tier 3 fields) — its own
//! interval, each on its own schedule: a signal with interval P is re-read
//! at a decision when at least P µs have passed since its last read (the
//! reference's `--snapshot-refresh-interval` model, per field), and 0 reads
//! it live. llm-d scrapes these metrics every 50 ms: intervals of 50 000 µs
//! reproduce that staleness (llm-d's scrapes tick on a wall clock whose
//! phase is arbitrary; here a read happens at the first decision after the
//! interval). The default — queue depth and batch size live, KV every
//! `snapshot_refresh_interval_us` — is the INV-7 tiering above, unchanged.
//!
//! The ABI 0.2 signals ([`InstanceInfo`]: in-flight requests, preemptions,
//! KV capacity and use in tokens, running and waiting tokens, model, GPU,
//! TP) are read live, and only when a policy needs them (filters, pickers,
//! state-reading scorers, lifecycle hooks).

use abi_stable::std_types::RSlice;
use abi_stable::std_types::RStr;
use blis_plugin_api::{ClusterState, ClusterView, InstanceInfo, InstanceSnapshot};

use super::InstanceLabels;
use crate::engine::Tick;
use crate::instance::Instance;
use crate::request::RequestStore;

/// Refresh interval of each periodic signal group, µs (0 = read live).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Freshness {
    /// `queue_depth`.
    pub queue_depth: Tick,
    /// `batch_size` (running requests).
    pub batch_size: Tick,
    /// `kv_utilization`, `free_kv_blocks`, `cache_hit_rate` (Tier 3).
    pub kv: Tick,
    /// The LoRA adapters resident (and loading) on each instance, as the
    /// plugins' LoRA queries answer them (`cluster::lora_view`).
    pub resident_adapters: Tick,
}

impl Freshness {
    /// The INV-7 tiers: queue depth and batch size live, KV every `interval`.
    pub fn tiers(interval: Tick) -> Self {
        Freshness {
            queue_depth: 0,
            batch_size: 0,
            kv: interval,
            resident_adapters: 0,
        }
    }
}

/// When one signal group was last read, and how often it is.
#[derive(Clone, Copy, Debug)]
pub(super) struct Schedule {
    interval: Tick,
    last: Option<Tick>,
}

impl Schedule {
    pub(super) fn new(interval: Tick) -> Self {
        Schedule {
            interval,
            last: None,
        }
    }

    /// Whether a decision at `now` re-reads the group (and if so, record it).
    #[inline]
    pub(super) fn due(&mut self, now: Tick) -> bool {
        let due = match self.last {
            None => true,
            Some(last) => self.interval == 0 || now - last >= self.interval,
        };
        if due {
            self.last = Some(now);
        }
        due
    }

    /// Whether the group is read live at every decision.
    #[inline]
    pub(super) fn is_live(&self) -> bool {
        self.interval == 0
    }

    /// Whether an observer re-reads the group: a live one, or one never
    /// read (an observer never moves a schedule).
    #[inline]
    fn live(&self) -> bool {
        self.interval == 0 || self.last.is_none()
    }
}

/// Builds the per-instance snapshots a decision sees.
///
/// A live signal is re-read only from the instances the cluster has
/// touched since it was last read ([`SnapshotProvider::touched`]): the
/// others' snapshots already hold what a read would give (with 64
/// instances, re-reading all of them at every decision cost 4 % of a
/// weighted-routing run, most of it cache misses; a decision follows one or
/// two instance events). Debug builds check that against a fresh read.
#[derive(Debug)]
pub struct SnapshotProvider {
    queue_depth: Schedule,
    batch_size: Schedule,
    kv: Schedule,
    snaps: Vec<InstanceSnapshot>,
    info: Vec<InstanceInfo<'static>>,
    /// Instances whose live signals may have changed since their last read.
    stale: Vec<bool>,
}

impl SnapshotProvider {
    /// A provider for `n` instances refreshing Tier 3 every `interval` ticks.
    pub fn new(n: usize, interval: Tick) -> Self {
        Self::with_labels(n, Freshness::tiers(interval), &InstanceLabels::default())
    }

    /// A provider with per-signal `freshness` whose 0.2 signals carry the
    /// fleet's model, GPU and TP.
    pub fn with_labels(n: usize, freshness: Freshness, labels: &InstanceLabels) -> Self {
        // The names live for the whole run; leaking two short strings once
        // lets the views borrow them without a lifetime on the provider.
        let model: &'static str = Box::leak(labels.model.clone().into_boxed_str());
        let gpu: &'static str = Box::leak(labels.gpu.clone().into_boxed_str());
        let info = InstanceInfo {
            tp: labels.tp,
            model: RStr::from(model),
            gpu: RStr::from(gpu),
            ..InstanceInfo::default()
        };
        SnapshotProvider {
            queue_depth: Schedule::new(freshness.queue_depth),
            batch_size: Schedule::new(freshness.batch_size),
            kv: Schedule::new(freshness.kv),
            snaps: vec![InstanceSnapshot::default(); n],
            info: vec![info; n],
            stale: vec![true; n],
        }
    }

    /// Instance `i` may have changed (the cluster delivered it an event or
    /// called into it): its live signals are re-read at the next decision.
    #[inline]
    pub fn touched(&mut self, i: u32) {
        self.stale[i as usize] = true;
    }

    /// Snapshots as of `now` for a decision (re-reading each periodic
    /// group when due).
    pub fn build(
        &mut self,
        now: Tick,
        instances: &[Instance],
        pending: &[u32],
    ) -> &[InstanceSnapshot] {
        let reads = Reads {
            queue_depth: Read::of(&mut self.queue_depth, |s| s.due(now)),
            batch_size: Read::of(&mut self.batch_size, |s| s.due(now)),
            kv: Read::of(&mut self.kv, |s| s.due(now)),
        };
        self.fill(reads, instances, pending)
    }

    /// Snapshots for a decision at `now`: [`SnapshotProvider::build`] when
    /// its policy `reads` them, else [`SnapshotProvider::pass`].
    pub fn for_decision(
        &mut self,
        reads: bool,
        now: Tick,
        instances: &[Instance],
        pending: &[u32],
    ) -> &[InstanceSnapshot] {
        match reads {
            true => self.build(now, instances, pending),
            false => self.pass(now, instances),
        }
    }

    /// A decision by a policy that reads no snapshot: each periodic group
    /// that falls due is read now, exactly as by [`SnapshotProvider::build`]
    /// (a later decision within its interval sees it as of now), while the
    /// live groups and the pending counts are left to the next decision
    /// that reads them (which re-reads them anyway). Returns the snapshots,
    /// stale in those fields: for the view's length only.
    pub fn pass(&mut self, now: Tick, instances: &[Instance]) -> &[InstanceSnapshot] {
        let periodic_due = |s: &mut Schedule| match s.interval != 0 && s.due(now) {
            true => Read::All,
            false => Read::Skip,
        };
        let reads = Reads {
            queue_depth: periodic_due(&mut self.queue_depth),
            batch_size: periodic_due(&mut self.batch_size),
            kv: periodic_due(&mut self.kv),
        };
        if reads.any_all() {
            for (s, inst) in self.snaps.iter_mut().zip(instances) {
                reads.apply(s, inst, false);
            }
        }
        &self.snaps
    }

    /// Snapshots for a lifecycle event: live signals as of now, periodic
    /// ones as the last decision saw them (an observer does not move the
    /// refresh schedules, so hooks never change what the decisions see).
    pub fn peek(&mut self, instances: &[Instance], pending: &[u32]) -> &[InstanceSnapshot] {
        let reads = Reads {
            queue_depth: Read::of(&mut self.queue_depth, |s| s.live()),
            batch_size: Read::of(&mut self.batch_size, |s| s.live()),
            kv: Read::of(&mut self.kv, |s| s.live()),
        };
        self.fill(reads, instances, pending)
    }

    #[inline]
    fn fill(
        &mut self,
        reads: Reads,
        instances: &[Instance],
        pending: &[u32],
    ) -> &[InstanceSnapshot] {
        let all = reads.any_all();
        for (((s, inst), &p), stale) in self
            .snaps
            .iter_mut()
            .zip(instances)
            .zip(pending)
            .zip(&mut self.stale)
        {
            if *stale || all {
                reads.apply(s, inst, *stale);
                *stale = false;
            } else {
                debug_assert!(
                    reads.unchanged(s, inst),
                    "instance {} changed without SnapshotProvider::touched",
                    inst.index()
                );
            }
            s.pending_requests = p;
        }
        &self.snaps
    }

    /// The 0.2 signals of every instance, read live.
    pub fn build_info(
        &mut self,
        instances: &[Instance],
        in_flight: &[u32],
        store: &RequestStore,
    ) -> &[InstanceInfo<'static>] {
        for ((x, inst), &f) in self.info.iter_mut().zip(instances).zip(in_flight) {
            x.running_tokens = inst.running_tokens();
            x.waiting_tokens = inst.waiting_tokens(store);
            let block = u64::from(inst.config().block_size);
            x.in_flight = f;
            x.preemptions = inst.preemption_count();
            x.kv_capacity_tokens = inst.config().total_kv_blocks * block;
            x.kv_tokens_in_use = inst.used_kv_blocks() * block;
        }
        &self.info
    }

    /// One more instance (the control plane added it), with the same labels.
    pub fn push_instance(&mut self) {
        self.snaps.push(InstanceSnapshot::default());
        self.stale.push(true);
        let mut x = self.info.first().copied().unwrap_or_default();
        x.in_flight = 0;
        x.preemptions = 0;
        x.kv_tokens_in_use = 0;
        self.info.push(x);
    }

    /// Set an instance's lifecycle state in the 0.2 signals.
    pub fn set_state(&mut self, instance: usize, state: blis_plugin_api::InstanceState) {
        self.info[instance].state = state;
    }

    /// The whole cluster as of `t`, as a lifecycle hook or an autoscaler
    /// sees it: every instance, no candidate list, no prefix-cache query.
    pub fn whole_cluster(&self, t: Tick) -> ClusterState<'_> {
        ClusterState {
            view: ClusterView {
                clock_us: t,
                instances: RSlice::from_slice(self.snaps()),
            },
            candidates: RSlice::from_slice(&[]),
            info: RSlice::from_slice(self.info()),
            prefix_blocks: RSlice::from_slice(&[]),
        }
    }

    /// The snapshots of the last [`SnapshotProvider::build`].
    pub fn snaps(&self) -> &[InstanceSnapshot] {
        &self.snaps
    }

    /// The 0.2 signals of the last [`SnapshotProvider::build_info`].
    pub fn info(&self) -> &[InstanceInfo<'static>] {
        &self.info
    }

    /// Time of the last Tier 3 refresh.
    pub fn last_refresh(&self) -> Option<Tick> {
        self.kv.last
    }
}

/// How a snapshot re-reads one signal group.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Not at all.
    Skip,
    /// From every instance (a periodic group falling due, or never read).
    All,
    /// From the instances touched since their last read (a live group).
    Touched,
}

impl Read {
    /// How a group on `schedule` is read when `wanted` says it is.
    #[inline]
    fn of(schedule: &mut Schedule, wanted: impl FnOnce(&mut Schedule) -> bool) -> Read {
        let live_before = schedule.interval == 0 && schedule.last.is_some();
        match wanted(schedule) {
            false => Read::Skip,
            true if live_before => Read::Touched,
            true => Read::All,
        }
    }
}

/// Which signal groups a snapshot re-reads.
#[derive(Clone, Copy)]
struct Reads {
    queue_depth: Read,
    batch_size: Read,
    kv: Read,
}

impl Reads {
    /// Some group is read from every instance.
    #[inline]
    fn any_all(&self) -> bool {
        [self.queue_depth, self.batch_size, self.kv].contains(&Read::All)
    }

    /// Re-read the groups of `s` from `inst` (touched since its last read
    /// when `touched`).
    #[inline]
    fn apply(self, s: &mut InstanceSnapshot, inst: &Instance, touched: bool) {
        let read = |r: Read| r == Read::All || (r == Read::Touched && touched);
        if read(self.queue_depth) {
            s.queue_depth = inst.queue_depth();
        }
        if read(self.batch_size) {
            s.batch_size = inst.batch_size();
        }
        if read(self.kv) {
            s.kv_utilization = inst.kv_utilization();
            s.free_kv_blocks = inst.free_kv_blocks();
            s.cache_hit_rate = inst.cache_hit_rate();
        }
    }

    /// Whether the groups read from touched instances hold what `inst`
    /// would give now (for an instance not touched).
    fn unchanged(self, s: &InstanceSnapshot, inst: &Instance) -> bool {
        let mut fresh = *s;
        let touched_only = |r: Read| match r {
            Read::Touched => Read::All,
            _ => Read::Skip,
        };
        Reads {
            queue_depth: touched_only(self.queue_depth),
            batch_size: touched_only(self.batch_size),
            kv: touched_only(self.kv),
        }
        .apply(&mut fresh, inst, false);
        fresh == *s
    }
}

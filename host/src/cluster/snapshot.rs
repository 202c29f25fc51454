//! Routing snapshots with the seed's three freshness tiers (INV-7).
//!
//! * Tier 1 — `pending_requests` (and the prefix index inside the scorer):
//!   owned by the cluster, updated synchronously at every routing decision.
//! * Tier 2 — `queue_depth`, `batch_size`: read live from the instance at
//!   every snapshot.
//! * Tier 3 — `kv_utilization`, `free_kv_blocks`, `cache_hit_rate`: re-read
//!   together when at least `refresh_interval` ticks of simulated time have
//!   passed since the last refresh (lazily, at the first snapshot after the
//!   interval, as the reference does); 0 means always live. The first
//!   snapshot of a run always reads them.
//!
//! The ABI 0.2 signals ([`InstanceInfo`]: in-flight requests, preemptions,
//! KV capacity and use in tokens, model, GPU, TP) are read live, and only
//! when a policy needs them (filters, pickers, lifecycle hooks).

use abi_stable::std_types::RStr;
use blis_plugin_api::{InstanceInfo, InstanceSnapshot};

use super::InstanceLabels;
use crate::engine::Tick;
use crate::instance::Instance;

/// Builds the per-instance snapshots a decision sees.
#[derive(Debug)]
pub struct SnapshotProvider {
    interval: Tick,
    last_refresh: Option<Tick>,
    snaps: Vec<InstanceSnapshot>,
    info: Vec<InstanceInfo<'static>>,
}

impl SnapshotProvider {
    /// A provider for `n` instances refreshing Tier 3 every `interval` ticks.
    pub fn new(n: usize, interval: Tick) -> Self {
        Self::with_labels(n, interval, &InstanceLabels::default())
    }

    /// A provider whose 0.2 signals carry the fleet's model, GPU and TP.
    pub fn with_labels(n: usize, interval: Tick, labels: &InstanceLabels) -> Self {
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
            interval,
            last_refresh: None,
            snaps: vec![InstanceSnapshot::default(); n],
            info: vec![info; n],
        }
    }

    /// Snapshots as of `now` for a decision (refreshing Tier 3 when due).
    pub fn build(
        &mut self,
        now: Tick,
        instances: &[Instance],
        pending: &[u32],
    ) -> &[InstanceSnapshot] {
        let refresh = match self.last_refresh {
            None => true,
            Some(last) => self.interval == 0 || now - last >= self.interval,
        };
        if refresh {
            self.last_refresh = Some(now);
        }
        self.fill(refresh, instances, pending)
    }

    /// Snapshots for a lifecycle event: Tiers 1 and 2 as of now, Tier 3 as
    /// the last decision saw it (an observer does not move the refresh
    /// schedule, so hooks never change what the decisions see).
    pub fn peek(&mut self, instances: &[Instance], pending: &[u32]) -> &[InstanceSnapshot] {
        let never_read = self.last_refresh.is_none();
        self.fill(never_read, instances, pending)
    }

    fn fill(
        &mut self,
        refresh: bool,
        instances: &[Instance],
        pending: &[u32],
    ) -> &[InstanceSnapshot] {
        for ((s, inst), &p) in self.snaps.iter_mut().zip(instances).zip(pending) {
            s.queue_depth = inst.queue_depth();
            s.batch_size = inst.batch_size();
            s.pending_requests = p;
            if refresh {
                s.kv_utilization = inst.kv_utilization();
                s.free_kv_blocks = inst.free_kv_blocks();
                s.cache_hit_rate = inst.cache_hit_rate();
            }
        }
        &self.snaps
    }

    /// The 0.2 signals of every instance, read live.
    pub fn build_info(
        &mut self,
        instances: &[Instance],
        in_flight: &[u32],
    ) -> &[InstanceInfo<'static>] {
        for ((x, inst), &f) in self.info.iter_mut().zip(instances).zip(in_flight) {
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
        self.last_refresh
    }
}

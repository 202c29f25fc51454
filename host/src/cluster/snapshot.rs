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

use blis_plugin_api::InstanceSnapshot;

use crate::engine::Tick;
use crate::instance::Instance;

/// Builds the per-instance snapshots a decision sees.
#[derive(Debug)]
pub struct SnapshotProvider {
    interval: Tick,
    last_refresh: Option<Tick>,
    snaps: Vec<InstanceSnapshot>,
}

impl SnapshotProvider {
    /// A provider for `n` instances refreshing Tier 3 every `interval` ticks.
    pub fn new(n: usize, interval: Tick) -> Self {
        SnapshotProvider {
            interval,
            last_refresh: None,
            snaps: vec![InstanceSnapshot::default(); n],
        }
    }

    /// Snapshots as of `now`.
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

    /// Time of the last Tier 3 refresh.
    pub fn last_refresh(&self) -> Option<Tick> {
        self.last_refresh
    }
}

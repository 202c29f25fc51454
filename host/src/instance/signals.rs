//! Signals of an instance that only routing policies of ABI 0.2 read, and
//! only when one asks (the cluster computes them on demand, never in the
//! engine's hot loop): token counts of the batch and the wait queue, and
//! the prefix-cache query.

use super::{Instance, Track};
use crate::request::RequestStore;

impl Instance {
    /// Context tokens of the running batch: Σ (prompt + output generated so
    /// far). O(batch size).
    pub fn running_tokens(&self) -> u64 {
        self.running
            .iter()
            .filter(|r| r.track != Track::Gone)
            .map(|r| {
                let r = self.cruise.materialize(r);
                u64::from(r.input_len) + u64::from(r.generated)
            })
            .sum()
    }

    /// Tokens the wait queue still has to compute: Σ (prompt + output
    /// generated so far) over the waiting requests (a preempted request
    /// recomputes its whole context). O(queue length).
    pub fn waiting_tokens(&self, store: &RequestStore) -> u64 {
        self.waiting
            .iter()
            .map(|s| {
                let r = &store[s];
                u64::from(r.input_len) + u64::from(r.generated)
            })
            .sum()
    }

    /// Leading blocks of a prompt (its full-block hashes) the instance's
    /// KV cache holds now.
    pub fn cached_leading_blocks(&self, hashes: &[u64]) -> u32 {
        self.kv.cached_leading_blocks(hashes)
    }

    /// Call `f` with every block hash the instance's KV cache holds.
    pub fn for_each_cached_hash(&self, f: impl FnMut(u64)) {
        self.kv.for_each_cached_hash(f);
    }
}

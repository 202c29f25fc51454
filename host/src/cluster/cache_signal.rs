//! The per-instance prefix-cache query of ABI 0.2 (`ClusterState::
//! prefix_blocks`, read by the `precise-prefix-cache` and `no-hit-lru`
//! scorers): for each instance, how many leading blocks of the request's
//! prompt its KV cache holds.
//!
//! Staleness (`routing.cache_signal_delay_us`, the reference's
//! `--cache-signal-delay`): with a delay D > 0 the query answers from a
//! frozen copy of every instance's block-hash index. All copies are taken
//! together, at the start of a routing decision, when at least D µs have
//! passed since the last copy; the first copies are the empty caches of
//! time 0, so until D µs into the run the query answers 0 everywhere — as
//! in the reference. With D = 0 (blis's default) the query reads the live
//! caches. A copy costs O(blocks ever used) per instance; nothing at all is
//! computed or copied unless a policy of the run declares
//! `PolicyDef::PREFIX_QUERY`.
//!
//! Only the GPU prefix index counts (a CPU tier's blocks do not); held and
//! free-but-cached blocks both count, as they would for an admission.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use crate::engine::Tick;
use crate::instance::Instance;

/// Block hashes are already uniform 64-bit values: hash them as themselves.
#[derive(Default)]
struct BlockHashHasher(u64);

impl Hasher for BlockHashHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type HashIndex = HashSet<u64, BuildHasherDefault<BlockHashHasher>>;

/// Answers the prefix-cache query, live or delayed.
pub struct CacheSignal {
    delay: Tick,
    last_copy: Tick,
    frozen: Vec<HashIndex>,
    counts: Vec<u32>,
}

impl CacheSignal {
    /// A query over `n` instances with staleness `delay` µs (0 = live).
    pub fn new(n: usize, delay: Tick) -> Self {
        CacheSignal {
            delay,
            last_copy: 0,
            frozen: (0..if delay > 0 { n } else { 0 })
                .map(|_| HashIndex::default())
                .collect(),
            counts: vec![0; n],
        }
    }

    /// Leading blocks of `hashes` held by each instance, as of the last
    /// copy (refreshed first when due) or live.
    pub fn query(&mut self, now: Tick, instances: &[Instance], hashes: &[u64]) -> &[u32] {
        // Instances the autoscaler added since: answered too (a delayed
        // copy of a new instance is empty until the next refresh, as its
        // cache was when it started).
        if instances.len() > self.counts.len() {
            self.counts.resize(instances.len(), 0);
            if self.delay > 0 {
                self.frozen.resize_with(instances.len(), HashIndex::default);
            }
        }
        if self.delay == 0 {
            for (c, inst) in self.counts.iter_mut().zip(instances) {
                *c = inst.cached_leading_blocks(hashes);
            }
            return &self.counts;
        }
        if now - self.last_copy >= self.delay {
            self.last_copy = now;
            for (copy, inst) in self.frozen.iter_mut().zip(instances) {
                copy.clear();
                inst.for_each_cached_hash(|h| {
                    copy.insert(h);
                });
            }
        }
        for (c, copy) in self.counts.iter_mut().zip(&self.frozen) {
            *c = hashes.iter().take_while(|h| copy.contains(h)).count() as u32;
        }
        &self.counts
    }
}

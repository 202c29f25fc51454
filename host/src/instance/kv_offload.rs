//! The CPU tier behind an instance's GPU KV cache (`[instance.kv_offload]`).
//!
//! The GPU cache ([`super::kv::KvCache`]) owns this tier when one is
//! configured; without one the cache is the single-tier special case and
//! none of this code runs. The behaviour is the reference's CPU mirror
//! (`cluster-head.md` §1.2), the one the reference's validation experiments
//! use:
//!
//! * **Mirror.** A GPU block is stored in the CPU tier when it becomes full
//!   (its hash is registered), and its entry is marked most recently used
//!   again whenever an admission hits the block (stored again if it was
//!   evicted meanwhile). A full tier first evicts its least recently used
//!   entry. The GPU tier is never changed by mirroring. (The reference
//!   re-touches every block of every running request after every step, which
//!   costs O(KV of the batch) per step; blis touches a block when it is
//!   computed or reused, as vLLM's CPU offloading stores a block once.)
//! * **Reload.** When a request is admitted, the prefix lookup continues past
//!   the GPU hits into this tier: each following block found here is copied
//!   back into a free GPU block (a *CPU hit*) until the first block found in
//!   neither tier. Each reloaded block costs `base latency + ⌈block size /
//!   bandwidth⌉` µs, summed and added once to the instance's next step.
//!
//! Entries are block hashes only: blis's hashes chain the whole prefix, so a
//! hash names its content and no token copy is needed. The tier is an LRU
//! list threaded through a slab of at most `capacity` nodes, indexed by a hash
//! map; every operation is O(1). INV-4 for this tier: `0 ≤ used ≤ capacity`,
//! with every entry in the index exactly once on the list (checked after every
//! operation in debug builds, and in full by [`CpuTier::check`]).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::engine::Tick;

/// Configuration of the CPU tier (validated by the config layer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvOffloadConfig {
    /// Capacity of the CPU tier in KV blocks (> 0).
    pub cpu_blocks: u64,
    /// Transfer bandwidth CPU → GPU in tokens per µs (finite, > 0).
    pub bandwidth_tokens_per_us: f64,
    /// Fixed cost of reloading one block, µs (≥ 0).
    pub base_latency_us: Tick,
}

impl KvOffloadConfig {
    /// Time to reload one block of `block_size` tokens:
    /// `base_latency + ⌈block_size / bandwidth⌉` µs (the reference's formula).
    pub fn reload_cost(&self, block_size: u32) -> Tick {
        let transfer = (f64::from(block_size) / self.bandwidth_tokens_per_us).ceil();
        // Saturate rather than wrap for absurdly slow links.
        self.base_latency_us
            .saturating_add(transfer.min(Tick::MAX as f64 / 2.0) as Tick)
    }

    /// The values a CPU tier cannot work with (the config layer reports them
    /// with the key's name first).
    pub fn validate(&self) -> Result<(), String> {
        if self.cpu_blocks == 0 || self.cpu_blocks > super::MAX_KV_BLOCKS {
            return Err(format!(
                "cpu_blocks must be between 1 and {}, got {}",
                super::MAX_KV_BLOCKS,
                self.cpu_blocks
            ));
        }
        let bw = self.bandwidth_tokens_per_us;
        if !bw.is_finite() || bw <= 0.0 {
            return Err(format!(
                "transfer_bandwidth_tokens_per_us must be a finite number > 0, got {bw}"
            ));
        }
        if self.base_latency_us < 0 {
            return Err(format!(
                "transfer_base_latency_us must be ≥ 0, got {}",
                self.base_latency_us
            ));
        }
        Ok(())
    }
}

/// End-of-run counts of a CPU tier (for the report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvOffloadCounts {
    /// Capacity in blocks.
    pub capacity: u64,
    /// Blocks stored in the tier by mirroring (new entries, not refreshes).
    pub mirrored_blocks: u64,
    /// Entries evicted to make room for new ones.
    pub evictions: u64,
    /// Blocks found in the CPU tier at admission and reloaded to the GPU.
    pub hit_blocks: u64,
    /// Admissions that reloaded at least one block.
    pub reloads: u64,
    /// Reload time charged to steps, µs.
    pub transfer_time: Tick,
}

/// Identity hashing for block hashes, which are already uniformly mixed.
#[derive(Default)]
struct BlockHashHasher(u64);

impl Hasher for BlockHashHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// End of the LRU list.
const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Node {
    hash: u64,
    /// Towards the least recently used end.
    older: u32,
    /// Towards the most recently used end.
    newer: u32,
}

/// The CPU tier: an LRU set of block hashes. See the module documentation.
#[derive(Debug)]
pub struct CpuTier {
    config: KvOffloadConfig,
    /// Cost of reloading one block, µs.
    reload_cost: Tick,
    index: HashMap<u64, u32, BuildHasherDefault<BlockHashHasher>>,
    /// At most `capacity` nodes; a full tier reuses its evicted node.
    nodes: Vec<Node>,
    /// Least recently used entry.
    oldest: u32,
    /// Most recently used entry.
    newest: u32,
    /// Reload time not yet charged to a step.
    pending: Tick,
    counts: KvOffloadCounts,
}

impl CpuTier {
    /// An empty tier (memory grows with the entries stored).
    pub fn new(config: KvOffloadConfig, block_size: u32) -> Self {
        CpuTier {
            config,
            reload_cost: config.reload_cost(block_size),
            index: HashMap::default(),
            nodes: Vec::new(),
            oldest: NIL,
            newest: NIL,
            pending: 0,
            counts: KvOffloadCounts {
                capacity: config.cpu_blocks,
                ..KvOffloadCounts::default()
            },
        }
    }

    /// Entries held.
    pub fn used(&self) -> u64 {
        self.index.len() as u64
    }

    /// Whether the tier holds the block hashed `hash`.
    #[inline]
    pub fn contains(&self, hash: u64) -> bool {
        self.index.contains_key(&hash)
    }

    pub fn counts(&self) -> KvOffloadCounts {
        self.counts
    }

    /// Mirror a full GPU block: refresh its entry, or store it (evicting the
    /// least recently used entry when the tier is full).
    pub fn mirror(&mut self, hash: u64) {
        if let Some(&n) = self.index.get(&hash) {
            self.make_newest(n);
            return;
        }
        let n = if (self.nodes.len() as u64) < self.config.cpu_blocks {
            self.nodes.push(Node {
                hash,
                older: NIL,
                newer: NIL,
            });
            (self.nodes.len() - 1) as u32
        } else {
            // Full: evict the oldest entry and reuse its node.
            let n = self.oldest;
            self.unlink(n);
            self.index.remove(&self.nodes[n as usize].hash);
            self.counts.evictions += 1;
            self.nodes[n as usize].hash = hash;
            n
        };
        self.index.insert(hash, n);
        self.link_newest(n);
        self.counts.mirrored_blocks += 1;
        self.debug_check_counts();
    }

    /// A block found here at admission is copied back to the GPU: refresh
    /// its entry and charge its reload cost to the next step.
    pub fn reload(&mut self, hash: u64) {
        let n = *self
            .index
            .get(&hash)
            .expect("reloading a block the CPU tier does not hold");
        self.make_newest(n);
        self.counts.hit_blocks += 1;
        self.pending += self.reload_cost;
        self.counts.transfer_time += self.reload_cost;
        self.debug_check_counts();
    }

    /// One admission reloaded blocks (counted once per admission).
    pub fn count_reload(&mut self) {
        self.counts.reloads += 1;
    }

    /// Reload time accumulated since the last call (charged to the step
    /// being formed), and reset it.
    #[inline]
    pub fn take_pending(&mut self) -> Tick {
        std::mem::take(&mut self.pending)
    }

    fn make_newest(&mut self, n: u32) {
        if self.newest != n {
            self.unlink(n);
            self.link_newest(n);
        }
    }

    fn unlink(&mut self, n: u32) {
        let Node { older, newer, .. } = self.nodes[n as usize];
        match older {
            NIL => self.oldest = newer,
            o => self.nodes[o as usize].newer = newer,
        }
        match newer {
            NIL => self.newest = older,
            w => self.nodes[w as usize].older = older,
        }
    }

    fn link_newest(&mut self, n: u32) {
        let old_newest = self.newest;
        self.nodes[n as usize].older = old_newest;
        self.nodes[n as usize].newer = NIL;
        match old_newest {
            NIL => self.oldest = n,
            w => self.nodes[w as usize].newer = n,
        }
        self.newest = n;
    }

    /// INV-4 for this tier, in O(1): entries within capacity, one node each.
    #[inline]
    fn debug_check_counts(&self) {
        debug_assert!(
            self.index.len() == self.nodes.len()
                && self.nodes.len() as u64 <= self.config.cpu_blocks,
            "INV-4 (CPU tier): {} entries, {} nodes, capacity {}",
            self.index.len(),
            self.nodes.len(),
            self.config.cpu_blocks
        );
    }

    /// Full structural check, O(entries): `used ≤ capacity`, the LRU list
    /// links every node exactly once in both directions, and the index maps
    /// each node's hash to it. Returns the first violation found.
    pub fn check(&self) -> Result<(), String> {
        let cap = self.config.cpu_blocks;
        if self.used() > cap {
            return Err(format!(
                "INV-4 (CPU tier): {} blocks used, capacity {cap}",
                self.used()
            ));
        }
        if self.index.len() != self.nodes.len() {
            return Err(format!(
                "CPU tier: {} index entries for {} nodes",
                self.index.len(),
                self.nodes.len()
            ));
        }
        let mut seen = vec![false; self.nodes.len()];
        let (mut n, mut prev, mut len) = (self.oldest, NIL, 0usize);
        while n != NIL {
            let node = &self.nodes[n as usize];
            if std::mem::replace(&mut seen[n as usize], true) {
                return Err(format!("CPU tier: node {n} twice on the LRU list"));
            }
            if node.older != prev {
                return Err(format!("CPU tier: node {n} has a wrong back link"));
            }
            if self.index.get(&node.hash) != Some(&n) {
                return Err(format!("CPU tier: node {n} is not indexed by its hash"));
            }
            prev = n;
            n = node.newer;
            len += 1;
        }
        if prev != self.newest || len != self.nodes.len() {
            return Err(format!(
                "CPU tier: LRU list of {len} nodes, {} expected",
                self.nodes.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(cap: u64) -> CpuTier {
        CpuTier::new(
            KvOffloadConfig {
                cpu_blocks: cap,
                bandwidth_tokens_per_us: 0.2,
                base_latency_us: 3,
            },
            16,
        )
    }

    #[test]
    fn reload_cost_is_base_plus_ceil_of_block_over_bandwidth() {
        // 16 / 0.2 = 80 µs, plus 3 µs base.
        assert_eq!(tier(1).reload_cost, 83);
        let c = KvOffloadConfig {
            cpu_blocks: 1,
            bandwidth_tokens_per_us: 100.0,
            base_latency_us: 0,
        };
        assert_eq!(c.reload_cost(16), 1); // ⌈0.16⌉
        assert_eq!(c.reload_cost(300), 3);
    }

    #[test]
    fn lru_evicts_the_least_recently_mirrored_or_reloaded() {
        let mut t = tier(3);
        for h in [1, 2, 3] {
            t.mirror(h);
        }
        t.mirror(1); // refresh: 2 is now the oldest
        t.reload(3); // 2 still the oldest, then 1
        t.mirror(4);
        assert!(!t.contains(2) && t.contains(1) && t.contains(3) && t.contains(4));
        t.mirror(5);
        assert!(!t.contains(1));
        t.check().unwrap();
        let c = t.counts();
        assert_eq!((c.mirrored_blocks, c.evictions, c.hit_blocks), (5, 2, 1));
        assert_eq!(t.take_pending(), 83);
        assert_eq!(t.take_pending(), 0);
        assert_eq!(c.transfer_time, 83);
    }

    #[test]
    fn validation_names_the_key() {
        let ok = KvOffloadConfig {
            cpu_blocks: 10,
            bandwidth_tokens_per_us: 1.0,
            base_latency_us: 0,
        };
        assert!(ok.validate().is_ok());
        let bad = [
            (
                KvOffloadConfig {
                    bandwidth_tokens_per_us: -1.0,
                    ..ok
                },
                "transfer_bandwidth_tokens_per_us",
            ),
            (
                KvOffloadConfig {
                    bandwidth_tokens_per_us: f64::NAN,
                    ..ok
                },
                "transfer_bandwidth_tokens_per_us",
            ),
            (
                KvOffloadConfig {
                    cpu_blocks: super::super::MAX_KV_BLOCKS + 1,
                    ..ok
                },
                "cpu_blocks",
            ),
            (
                KvOffloadConfig {
                    base_latency_us: -1,
                    ..ok
                },
                "transfer_base_latency_us",
            ),
        ];
        for (c, key) in bad {
            let e = c.validate().unwrap_err();
            assert!(e.starts_with(key), "{e}");
        }
    }
}

//! Read-only prefix-cache queries for routing policies (the ABI 0.2
//! `precise-prefix-cache` signal): how many leading blocks of a prompt the
//! cache holds, and every hash it holds (for the cluster's delayed copies).
//! Nothing here changes the cache or its hit counters.

use super::KvCache;

impl KvCache {
    /// The number of leading entries of `hashes` (a prompt's hierarchical
    /// full-block hashes) whose blocks are in the GPU prefix index, held or
    /// free and cached: what an admission would hit now, without its
    /// last-token cap and without the CPU tier.
    pub fn cached_leading_blocks(&self, hashes: &[u64]) -> u32 {
        hashes
            .iter()
            .take_while(|&&h| self.index.get(h, &self.blocks).is_some())
            .count() as u32
    }

    /// Call `f` with the hash of every block in the GPU prefix index (in
    /// block-id order). O(block ids ever used).
    pub fn for_each_cached_hash(&self, mut f: impl FnMut(u64)) {
        for (id, b) in self.blocks.iter().enumerate() {
            if b.state & super::HASHED != 0
                && self.index.get(b.hash, &self.blocks) == Some(id as u32)
            {
                f(b.hash);
            }
        }
    }
}

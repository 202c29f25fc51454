//! The KV cache of one instance: paged blocks, prefix caching, LRU reuse.
//!
//! Why it looks the way it does:
//!
//! * **Memory follows use, not capacity.** A large GPU has around a million
//!   blocks, a cluster has many instances and most runs touch a small fraction
//!   of them. Blocks that were never used are therefore only a counter; a block
//!   gets metadata the first time it is handed out, so `KvCache::new` costs
//!   nothing whatever the capacity and memory is O(blocks ever used).
//! * **Freed blocks stay useful.** A freed block keeps its hash and goes to
//!   the tail of an intrusive LRU list; it is only reused (and its hash
//!   forgotten) when it reaches the head. Never-used blocks are handed out
//!   before any cached block is evicted, so cached content lives as long as
//!   possible. A freed block without a hash (a partial block) holds nothing
//!   reusable and goes to the head instead, so it is recycled first.
//! * **One live block per hash.** The index maps a block hash to exactly one
//!   block; evicting a block only removes the index entry if it points at that
//!   block, so two requests that computed the same prefix can never make each
//!   other's entries disappear (spec decision 14).
//! * **All or nothing.** Every allocation is checked exactly before anything
//!   changes (blocks needed, including cached blocks that must come off the
//!   free list), so a failed allocation leaves the cache untouched and blocks
//!   are never leaked (spec decision 3). `allocated + free == total` (INV-4) is
//!   asserted after every allocation and release in debug builds.
//!
//! Block hashes come from [`crate::request`]: the prompt's full-block hashes are
//! precomputed in `Request::prompt_hashes`; blocks that reach into the output
//! are hashed on demand with [`stream_block_hash`], chaining from the previous
//! block's hash, so a later session round whose prompt repeats this stream
//! hits the same blocks.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::request::{stream_block_hash, Request};

/// Sentinel for "no block" in the intrusive LRU links.
const NIL: u32 = u32::MAX;

/// Largest number of blocks an instance may have (block ids are `u32` and one
/// value is the list sentinel).
pub const MAX_KV_BLOCKS: u64 = u32::MAX as u64 - 1;

/// Hasher for keys that already are well-mixed 64-bit hashes: identity.
#[derive(Default, Clone, Copy)]
pub(crate) struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Not used for u64 keys; fold anything else in so it stays correct.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

type HashIndex = HashMap<u64, u32, BuildHasherDefault<IdentityHasher>>;

/// Metadata of a block that has been used at least once.
#[derive(Clone, Copy, Debug)]
struct Block {
    /// Hash of the token prefix ending with this block (valid when `hashed`).
    hash: u64,
    /// Requests holding this block; 0 = on the free LRU list.
    refs: u32,
    hashed: bool,
    /// LRU neighbours (only meaningful while `refs == 0`).
    prev: u32,
    next: u32,
}

/// Result of a prefix-cache lookup (see [`KvCache::lookup`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lookup {
    /// Leading blocks of the stream found in the cache.
    pub hits: u32,
    /// How many of them currently sit on the free list (attaching them uses free blocks).
    pub hits_free: u32,
    /// Blocks that were eligible for a hit (the denominator of the hit rate).
    pub candidates: u32,
}

/// Paged KV cache with prefix caching. See the module documentation.
#[derive(Debug)]
pub struct KvCache {
    block_size: u32,
    total: u64,
    /// Metadata of blocks `0 .. blocks.len()` (the blocks ever used).
    blocks: Vec<Block>,
    /// Free list of used-before blocks: evict from the head, free to the tail.
    lru_head: u32,
    lru_tail: u32,
    lru_len: u64,
    /// Blocks held by at least one request.
    used: u64,
    peak_used: u64,
    index: HashIndex,
    hit_blocks: u64,
    lookup_blocks: u64,
}

impl KvCache {
    /// An empty cache of `total` blocks of `block_size` tokens. O(1) memory.
    pub fn new(block_size: u32, total: u64) -> Self {
        assert!(block_size > 0, "KV block size must be positive");
        assert!(
            total <= MAX_KV_BLOCKS,
            "at most {MAX_KV_BLOCKS} KV blocks are supported"
        );
        KvCache {
            block_size,
            total,
            blocks: Vec::new(),
            lru_head: NIL,
            lru_tail: NIL,
            lru_len: 0,
            used: 0,
            peak_used: 0,
            index: HashIndex::default(),
            hit_blocks: 0,
            lookup_blocks: 0,
        }
    }

    pub fn total(&self) -> u64 {
        self.total
    }
    /// Blocks held by requests.
    pub fn used(&self) -> u64 {
        self.used
    }
    /// Blocks not held by any request (never used, or freed and maybe cached).
    pub fn free(&self) -> u64 {
        self.total - self.blocks.len() as u64 + self.lru_len
    }
    pub fn peak_used(&self) -> u64 {
        self.peak_used
    }
    /// Blocks that have ever been handed out (what memory is proportional to).
    pub fn blocks_ever_used(&self) -> u64 {
        self.blocks.len() as u64
    }
    pub fn hit_blocks(&self) -> u64 {
        self.hit_blocks
    }
    pub fn lookup_blocks(&self) -> u64 {
        self.lookup_blocks
    }

    /// Number of blocks covering `tokens` tokens.
    #[inline]
    pub fn blocks_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(u64::from(self.block_size))
    }

    #[inline]
    fn check_conservation(&self) {
        debug_assert_eq!(
            self.used + self.free(),
            self.total,
            "INV-4: allocated + free != total"
        );
    }

    /// Hash of block `k` of `req`'s stream, given the hash of block `k − 1`.
    #[inline]
    fn block_hash(&self, req: &Request, k: u32, prev: Option<u64>) -> u64 {
        match req.prompt_hashes.get(k as usize) {
            Some(&h) => h,
            None => stream_block_hash(req, self.block_size, k, prev),
        }
    }

    /// Prefix-cache lookup for a request about to be admitted with nothing
    /// computed: the longest run of leading full blocks of its stream, among
    /// those covering at most `max_tokens` tokens, whose hashes are in the
    /// index. The hit block ids are written to `out` (cleared first). Pure
    /// query: nothing changes until [`KvCache::admit`].
    pub fn lookup(&self, req: &Request, max_tokens: u32, out: &mut Vec<u32>) -> Lookup {
        out.clear();
        let candidates = max_tokens / self.block_size;
        let mut res = Lookup {
            candidates,
            ..Lookup::default()
        };
        let mut prev = None;
        for k in 0..candidates {
            let h = self.block_hash(req, k, prev);
            let Some(&id) = self.index.get(&h) else { break };
            out.push(id);
            res.hits += 1;
            if self.blocks[id as usize].refs == 0 {
                res.hits_free += 1;
            }
            prev = Some(h);
        }
        res
    }

    /// Admit a request that holds no blocks: attach the hit blocks found by
    /// [`KvCache::lookup`] (`hits`), then allocate for tokens
    /// `[hits·B, hits·B + n)`. All or nothing: returns false, changing nothing,
    /// when the free blocks do not suffice.
    pub fn admit(&mut self, req: &mut Request, lookup: Lookup, hits: &[u32], n: u32) -> bool {
        debug_assert!(
            req.kv_blocks.is_empty(),
            "admitting a request that holds blocks"
        );
        debug_assert_eq!(hits.len(), lookup.hits as usize);
        let cached = u64::from(lookup.hits) * u64::from(self.block_size);
        let fresh = self.blocks_for(cached + u64::from(n)) - u64::from(lookup.hits);
        if fresh + u64::from(lookup.hits_free) > self.free() {
            return false;
        }
        // Size the block list once for the whole stream (L + N − 1 computed
        // tokens at most) instead of growing it while decoding.
        let max_blocks = self.blocks_for(u64::from(req.total_len().saturating_sub(1)));
        req.kv_blocks
            .reserve((max_blocks as usize).saturating_sub(req.kv_blocks.len()));
        for &id in hits {
            let b = self.blocks[id as usize];
            if b.refs == 0 {
                self.lru_unlink(id);
                self.used += 1;
            }
            self.blocks[id as usize].refs += 1;
            req.kv_blocks.push(id);
        }
        self.hit_blocks += u64::from(lookup.hits);
        self.lookup_blocks += u64::from(lookup.candidates);
        let ok = self.extend(req, cached as u32, n);
        debug_assert!(ok, "pre-checked allocation failed");
        true
    }

    /// Extend a request that has `computed` tokens (and exactly the blocks
    /// covering them) so that it covers `computed + n` tokens. Blocks that
    /// become full are hashed and registered. All or nothing.
    pub fn extend(&mut self, req: &mut Request, computed: u32, n: u32) -> bool {
        let b = u64::from(self.block_size);
        let have = req.kv_blocks.len() as u64;
        debug_assert_eq!(have, self.blocks_for(u64::from(computed)));
        let end = u64::from(computed) + u64::from(n);
        let fresh = self.blocks_for(end).saturating_sub(have);
        if fresh > self.free() {
            return false;
        }
        for _ in 0..fresh {
            let id = self.take_free_block();
            req.kv_blocks.push(id);
        }
        // Register the blocks that become full with this extension.
        let first_full = u64::from(computed) / b;
        let last_full = end / b;
        for k in first_full..last_full {
            let k = k as u32;
            let prev = if k == 0 {
                None
            } else {
                let p = req.kv_blocks[k as usize - 1] as usize;
                debug_assert!(self.blocks[p].hashed, "full block without a hash");
                Some(self.blocks[p].hash)
            };
            let h = self.block_hash(req, k, prev);
            self.register(req.kv_blocks[k as usize], h);
        }
        self.used += fresh;
        self.peak_used = self.peak_used.max(self.used);
        self.check_conservation();
        true
    }

    /// Release all of a request's blocks (last to first, so its leading,
    /// most shareable blocks are freed last and evicted last).
    pub fn release(&mut self, blocks: &mut Vec<u32>) {
        for &id in blocks.iter().rev() {
            let blk = &mut self.blocks[id as usize];
            debug_assert!(blk.refs > 0, "releasing a free block");
            blk.refs -= 1;
            if blk.refs == 0 {
                self.used -= 1;
                if blk.hashed {
                    self.lru_push_tail(id);
                } else {
                    self.lru_push_head(id);
                }
            }
        }
        blocks.clear();
        self.check_conservation();
    }

    /// Hand out one free block: a never-used one if any, else the LRU head
    /// (forgetting its hash). The caller accounts for `used`.
    fn take_free_block(&mut self) -> u32 {
        if (self.blocks.len() as u64) < self.total {
            let id = self.blocks.len() as u32;
            self.blocks.push(Block {
                hash: 0,
                refs: 1,
                hashed: false,
                prev: NIL,
                next: NIL,
            });
            return id;
        }
        let id = self.lru_head;
        assert!(id != NIL, "KV free list empty after a successful pre-check");
        self.lru_unlink(id);
        let blk = &mut self.blocks[id as usize];
        if blk.hashed {
            let h = blk.hash;
            blk.hashed = false;
            if let Entry::Occupied(o) = self.index.entry(h) {
                if *o.get() == id {
                    o.remove();
                }
            }
        }
        self.blocks[id as usize].refs = 1;
        id
    }

    /// Record that live block `id` now holds the full prefix hashed `h`.
    fn register(&mut self, id: u32, h: u64) {
        {
            let blk = &mut self.blocks[id as usize];
            blk.hash = h;
            blk.hashed = true;
        }
        // One probe of the (large, cache-unfriendly) index per registration.
        match self.index.entry(h) {
            Entry::Vacant(v) => {
                v.insert(id);
            }
            Entry::Occupied(mut o) => {
                let old = *o.get();
                if old != id && self.blocks[old as usize].refs == 0 {
                    // The old copy is only cached: point the index at the live
                    // copy and recycle the old one first (it is now unreachable).
                    o.insert(id);
                    self.blocks[old as usize].hashed = false;
                    self.lru_unlink(old);
                    self.lru_push_head(old);
                }
                // Else another live block already serves this hash; keep it.
            }
        }
    }

    fn lru_unlink(&mut self, id: u32) {
        let Block { prev, next, .. } = self.blocks[id as usize];
        if prev == NIL {
            self.lru_head = next;
        } else {
            self.blocks[prev as usize].next = next;
        }
        if next == NIL {
            self.lru_tail = prev;
        } else {
            self.blocks[next as usize].prev = prev;
        }
        let blk = &mut self.blocks[id as usize];
        blk.prev = NIL;
        blk.next = NIL;
        self.lru_len -= 1;
    }

    fn lru_push_tail(&mut self, id: u32) {
        let tail = self.lru_tail;
        {
            let blk = &mut self.blocks[id as usize];
            blk.prev = tail;
            blk.next = NIL;
        }
        if tail == NIL {
            self.lru_head = id;
        } else {
            self.blocks[tail as usize].next = id;
        }
        self.lru_tail = id;
        self.lru_len += 1;
    }

    fn lru_push_head(&mut self, id: u32) {
        let head = self.lru_head;
        {
            let blk = &mut self.blocks[id as usize];
            blk.prev = NIL;
            blk.next = head;
        }
        if head == NIL {
            self.lru_tail = id;
        } else {
            self.blocks[head as usize].prev = id;
        }
        self.lru_head = id;
        self.lru_len += 1;
    }

    /// Full structural check, O(blocks ever used): the LRU list holds exactly
    /// the unreferenced blocks, `used` counts the referenced ones, the index
    /// points at hashed blocks with the right hash, and INV-4 holds. Used by
    /// tests; returns a description of the first violation.
    pub fn check(&self) -> Result<(), String> {
        let mut on_list = 0u64;
        let mut id = self.lru_head;
        let mut prev = NIL;
        while id != NIL {
            let blk = &self.blocks[id as usize];
            if blk.refs != 0 {
                return Err(format!(
                    "block {id} on the free list with {} refs",
                    blk.refs
                ));
            }
            if blk.prev != prev {
                return Err(format!("block {id}: broken back link"));
            }
            on_list += 1;
            if on_list > self.blocks.len() as u64 {
                return Err("cycle in the free list".into());
            }
            prev = id;
            id = blk.next;
        }
        if prev != self.lru_tail {
            return Err("free-list tail mismatch".into());
        }
        if on_list != self.lru_len {
            return Err(format!(
                "free list has {on_list} blocks, counter says {}",
                self.lru_len
            ));
        }
        let referenced = self.blocks.iter().filter(|b| b.refs > 0).count() as u64;
        if referenced != self.used {
            return Err(format!(
                "{referenced} referenced blocks, used = {}",
                self.used
            ));
        }
        if referenced + on_list != self.blocks.len() as u64 {
            return Err("a block is neither referenced nor free".into());
        }
        for (&h, &id) in &self.index {
            let blk = &self.blocks[id as usize];
            if !blk.hashed || blk.hash != h {
                return Err(format!(
                    "index entry for block {id} does not match its hash"
                ));
            }
        }
        if self.used + self.free() != self.total {
            return Err("INV-4: used + free != total".into());
        }
        Ok(())
    }

    /// Reference count of a block (consistency checks).
    pub fn refs_of(&self, id: u32) -> u32 {
        self.blocks[id as usize].refs
    }
}

//! The KV cache of one instance: paged blocks, prefix caching, LRU reuse.
//!
//! Why it looks the way it does:
//!
//! * **Memory follows use, not capacity.** A large GPU has around a million
//!   blocks, a cluster has many instances and most runs touch a small fraction
//!   of them. Blocks that were never used are therefore only a counter; a block
//!   gets metadata the first time it is handed out, so `KvCache::new` costs
//!   nothing whatever the capacity and memory is O(blocks ever used): 16 bytes
//!   of metadata per block plus 11 to 64 bytes of index per cached hash (see `BlockIndex`).
//! * **Freed blocks stay useful.** A freed block keeps its hash and goes to
//!   the tail of a FIFO queue of block ids; it is only reused (and its hash
//!   forgotten) when it reaches the head, so cached blocks are evicted least
//!   recently freed first. Never-used blocks are handed out before any cached
//!   block is evicted, so cached content lives as long as possible. A freed
//!   block without a hash (a partial block) holds nothing reusable and goes
//!   on a stack that is drawn from first.
//! * **Eviction reads ahead.** A prefix hit takes a cached block out of the
//!   middle of the queue; instead of unlinking it (an intrusive list would
//!   make every eviction chase a pointer to a random block), its queue entry
//!   just becomes stale: an entry is current when its block is free and
//!   cached and records that position. Since the next blocks to evict are a
//!   run of ids in the queue, their metadata and index slots are fetched a
//!   few evictions ahead.
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
//! * **Private blocks have no identity.** A block whose content no other
//!   request can have (past the shared prefix of a plain generated request:
//!   its random unique segment, then its output; see
//!   `Request::private_from`) can only ever be hit by its own request, so
//!   nothing ever needs to find it: it is neither hashed nor indexed, and it
//!   has no id or metadata either. A request holds ids for its blocks before
//!   the first private one and a count (`Request::kv_private`) of the rest;
//!   allocating or freeing private blocks is arithmetic on counters. When
//!   the request completes, its full private blocks enter the eviction queue
//!   as one entry, a run of `n` anonymous blocks, exactly where their ids
//!   would have gone, so the order in which cached blocks are evicted (what
//!   decides later prefix hits) is unchanged; evicting from a run takes one
//!   of its blocks and probes no index. When an indexed block's id is needed
//!   no longer because its block is reused anonymously, the id is kept for
//!   the next block that needs one (`dead`). A request that gives its blocks
//!   up and may come back (preemption, a returned prompt transfer) gets ids
//!   for its private blocks and has them hashed and indexed first, as if
//!   registered when they filled, so results are byte-identical to indexing
//!   everything (a property test checks it event for event). Most synthetic
//!   runs are unique prompts: this took the per-block work out of them.
//!
//! * **Tiers are optional.** A CPU tier ([`super::kv_offload`]) may sit
//!   behind the GPU blocks: a block is copied to it when it becomes full
//!   (registered) and refreshed there when an admission hits it, and a
//!   lookup that runs out of GPU hits continues there, reloading blocks into
//!   free GPU blocks at admission. Without one, `cpu` is `None` and each
//!   entry point pays one branch at most (a registration, a lookup that
//!   misses, an admission, the step that takes the transfer time).
//!
//! Block hashes come from [`crate::request`]: the prompt's full-block hashes are
//! precomputed in `Request::prompt_hashes`; blocks that reach into the output
//! are hashed on demand with [`stream_block_hash`], chaining from the previous
//! block's hash, so a later session round whose prompt repeats this stream
//! hits the same blocks.

mod prefix_query;

use super::kv_offload::{CpuTier, KvOffloadConfig, KvOffloadCounts};
use crate::engine::Tick;
use crate::request::{
    leading_prompt_hashes, output_block_hash, output_run_hash, prefetch, stream_block_hash, OptIdx,
    Request,
};
use std::collections::VecDeque;

/// Entry of a lookup's hit list for a block found in the CPU tier (block ids
/// are below [`MAX_KV_BLOCKS`]): [`KvCache::admit`] reloads it.
const RELOAD: u32 = u32::MAX;

/// Flag in `Block::state`: the block carries a registered hash (held and
/// full, or free and cached in the eviction queue).
const HASHED: u32 = 1 << 31;
/// `Block::state` of a free block that is cached (in the eviction queue).
const CACHED: u32 = HASHED;
/// Flag of an eviction-queue entry that is not a block id but a run of
/// anonymous private blocks, counted in the low bits (see
/// [`KvCache::first_private`]). Block ids are below 2^30.
const ANON_RUN: u32 = 1 << 31;

/// [`KvCache::last_allocated`] when the block handed out last is private.
pub const NO_ID: u32 = u32::MAX;

/// Largest number of blocks an instance may have (2^30: block ids are `u32`,
/// and eviction-queue positions are compared modulo 2^32, which is exact
/// while the queue, at most twice the cached blocks plus 64, stays shorter).
pub const MAX_KV_BLOCKS: u64 = 1 << 30;

/// Metadata of a block that has been used at least once: 16 bytes.
#[derive(Clone, Copy, Debug)]
struct Block {
    /// Hash of the token prefix ending with this block (valid when hashed).
    hash: u64,
    /// Reference count (requests holding the block; 0 = free) and the
    /// `HASHED` flag.
    state: u32,
    /// Position of the block's current entry in the eviction queue (modulo
    /// 2^32), when it is free and cached.
    queued_at: u32,
}

impl Block {
    #[inline]
    fn held(&self) -> bool {
        self.state & !HASHED != 0
    }
    /// Requests holding the block (0 = free).
    #[inline]
    fn refs(&self) -> u32 {
        self.state & !HASHED
    }
    /// Free and cached (current in the eviction queue when `queued_at` is
    /// its position there).
    #[inline]
    fn cached(&self) -> bool {
        self.state == CACHED
    }
}

/// The prefix index: block hash → block id, one entry per hash.
///
/// Open addressing with linear probing over 8-byte slots `(tag << 32) | (id + 1)`
/// (0 = empty), where `tag` is the hash's upper 32 bits; the slot's home is the
/// tag's top bits, so the table can be rebuilt and entries shifted on deletion
/// without reading any block. A tag match is confirmed against the block's
/// full hash. One probe usually costs one cache line, and an entry costs
/// 8 bytes / load factor (16 to 32 bytes while the table is small: it grows
/// at load 1/2, as linear-probing clusters, which deletions must walk, get
/// long beyond that; 11 to 21 bytes once it is large, see `reserve_one`).
/// A table of up to 2^14 slots (128 KiB) grows at load 1/4 already (32 to
/// 64 bytes an entry): a small cache evicts all the time, and each eviction
/// and registration walks a cluster. (Capping a GPU-sized cache's table at
/// load 5/8 to halve its memory measured 40 % slower per block.)
#[derive(Debug, Default)]
struct BlockIndex {
    slots: Vec<u64>,
    len: usize,
    /// `32 − log2(slots.len())`: the home of tag `t` is `t >> shift`.
    shift: u32,
}

/// Where [`BlockIndex::find`] stopped.
enum Probe {
    /// The hash is present at this slot, pointing at this block.
    Found(usize, u32),
    /// The hash is absent; this empty slot is where it would go.
    Vacant(usize),
}

impl BlockIndex {
    #[inline]
    fn tag(hash: u64) -> u32 {
        (hash >> 32) as u32
    }

    #[inline]
    fn home(&self, tag: u32) -> usize {
        (tag >> self.shift) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Slot of `hash`, or the empty slot that ends its probe sequence. The
    /// table must not be empty.
    #[inline]
    fn find(&self, hash: u64, blocks: &[Block]) -> Probe {
        let tag = Self::tag(hash);
        let mask = self.mask();
        let mut i = self.home(tag);
        loop {
            let s = self.slots[i];
            if s == 0 {
                return Probe::Vacant(i);
            }
            if (s >> 32) as u32 == tag {
                let id = (s as u32) - 1;
                if blocks[id as usize].hash == hash {
                    return Probe::Found(i, id);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Start fetching the slots where the probe for `hash` begins (the home
    /// slot's cache line and, as probes often run on, the next one; fetching
    /// the next line only when the home lies near the end of its line
    /// measured slower).
    #[inline]
    fn prefetch(&self, hash: u64) {
        if !self.slots.is_empty() {
            let i = self.home(Self::tag(hash));
            prefetch(&self.slots[i]);
            prefetch(&self.slots[(i + 7) & self.mask()]);
        }
    }

    /// The block registered for `hash`.
    #[inline]
    fn get(&self, hash: u64, blocks: &[Block]) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        match self.find(hash, blocks) {
            Probe::Found(_, id) => Some(id),
            Probe::Vacant(_) => None,
        }
    }

    /// Make room for one more entry (slot positions change when the table is
    /// rebuilt). A table of up to 2^14 slots grows at load 1/4, one of up
    /// to 2^16 at load 1/2; a larger one,
    /// which misses the cache whatever its load, at load 3/4, to halve the
    /// memory of caches that keep hundreds of thousands of blocks.
    #[inline]
    fn reserve_one(&mut self) {
        let n = self.slots.len();
        let room = if n <= 1 << 14 {
            n / 4
        } else if n <= 1 << 16 {
            n / 2
        } else {
            n / 4 * 3
        };
        if self.len < room {
            return;
        }
        // Tags are 32 bits, so 2^32 slots at most; there is always an empty
        // slot since there are fewer than 2^32 − 1 blocks.
        if self.slots.len() >= 1 << 32 {
            return;
        }
        let cap = (self.slots.len() * 2).max(64);
        let old = std::mem::replace(&mut self.slots, vec![0; cap]);
        self.shift = 32 - cap.trailing_zeros();
        let mask = cap - 1;
        for s in old.into_iter().filter(|&s| s != 0) {
            let mut i = self.home((s >> 32) as u32);
            while self.slots[i] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }

    /// Store `id` for `hash` in the empty slot `pos` found by [`BlockIndex::find`].
    #[inline]
    fn insert_at(&mut self, pos: usize, hash: u64, id: u32) {
        debug_assert_eq!(self.slots[pos], 0);
        self.slots[pos] = (u64::from(Self::tag(hash)) << 32) | u64::from(id + 1);
        self.len += 1;
    }

    /// Point the entry at `pos` at block `id` (same hash).
    #[inline]
    fn set_at(&mut self, pos: usize, id: u32) {
        let s = &mut self.slots[pos];
        *s = (*s & !0xffff_ffff) | u64::from(id + 1);
    }

    /// Remove the entry for `hash` if it points at block `id`, whose hash it
    /// is. An entry for block `id` always carries the block's own hash, so
    /// the entry is the slot holding exactly `(tag, id)`: no block is read.
    #[inline]
    fn remove_if(&mut self, hash: u64, id: u32) {
        if self.len == 0 {
            return;
        }
        let want = (u64::from(Self::tag(hash)) << 32) | u64::from(id + 1);
        let mask = self.mask();
        let mut i = self.home(Self::tag(hash));
        loop {
            let s = self.slots[i];
            if s == want {
                self.delete_at(i);
                return;
            }
            if s == 0 {
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Backward-shift deletion: later entries of the cluster move up so every
    /// probe sequence stays unbroken.
    fn delete_at(&mut self, mut hole: usize) {
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let s = self.slots[j];
            if s == 0 {
                break;
            }
            let home = self.home((s >> 32) as u32);
            // The entry at j may fill the hole unless its home lies
            // cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = 0;
        self.len -= 1;
    }

    /// Every entry as `(tag, block id)`.
    fn entries(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.slots
            .iter()
            .filter(|&&s| s != 0)
            .map(|&s| ((s >> 32) as u32, (s as u32) - 1))
    }
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
    /// How many of the hits are in the CPU tier only (reloaded at admission).
    pub reloads: u32,
}

/// Paged KV cache with prefix caching. See the module documentation.
#[derive(Debug)]
pub struct KvCache {
    block_size: u32,
    total: u64,
    /// Metadata of the block ids `0 .. blocks.len()` (ids ever handed out).
    blocks: Vec<Block>,
    /// Free cached blocks, least recently freed first: block ids, with stale
    /// entries (see the module documentation), and [`ANON_RUN`] entries;
    /// `queue_head` is the position of the first entry.
    queue: VecDeque<u32>,
    queue_head: u64,
    /// Free cached blocks: current id entries in `queue`, plus the blocks
    /// of its anonymous runs.
    cached_free: u64,
    /// Free blocks with an id and without a hash, drawn from before any
    /// cached block (last freed first).
    unhashed: Vec<u32>,
    /// Free blocks with neither an id nor content (never used, or a freed
    /// private partial block), drawn from first.
    blank: u64,
    /// Ids without a block: their block was evicted or taken from the
    /// unhashed stack for a private (anonymous) block. Reused first.
    dead: Vec<u32>,
    /// Blocks held by at least one request (with ids, and private).
    used: u64,
    /// Private blocks held by requests (no ids; part of `used`).
    anon_held: u64,
    peak_used: u64,
    index: BlockIndex,
    hit_blocks: u64,
    lookup_blocks: u64,
    /// The block most recently handed out (see [`KvCache::last_allocated`]).
    last_allocated: u32,
    /// The CPU tier, if any (see the module documentation).
    cpu: Option<Box<CpuTier>>,
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
            queue: VecDeque::new(),
            queue_head: 0,
            cached_free: 0,
            unhashed: Vec::new(),
            blank: total,
            dead: Vec::new(),
            used: 0,
            anon_held: 0,
            peak_used: 0,
            index: BlockIndex::default(),
            hit_blocks: 0,
            lookup_blocks: 0,
            last_allocated: 0,
            cpu: None,
        }
    }

    /// An empty cache with a CPU tier behind it.
    pub fn with_cpu_tier(block_size: u32, total: u64, offload: KvOffloadConfig) -> Self {
        KvCache {
            cpu: Some(Box::new(CpuTier::new(offload, block_size))),
            ..KvCache::new(block_size, total)
        }
    }

    /// Whether a CPU tier is configured.
    #[inline]
    pub fn has_cpu_tier(&self) -> bool {
        self.cpu.is_some()
    }

    /// Counts of the CPU tier, if any.
    pub fn cpu_counts(&self) -> Option<KvOffloadCounts> {
        self.cpu.as_ref().map(|c| c.counts())
    }

    /// Blocks held in the CPU tier (0 without one).
    pub fn cpu_used(&self) -> u64 {
        self.cpu.as_ref().map_or(0, |c| c.used())
    }

    /// Reload time owed since the last call (to be added to the step being
    /// formed), reset to 0. Always 0 without a CPU tier.
    #[inline]
    pub fn take_transfer_time(&mut self) -> Tick {
        match self.cpu.as_deref_mut() {
            None => 0,
            Some(cpu) => cpu.take_pending(),
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
        self.blank + self.cached_free + self.unhashed.len() as u64
    }
    /// Free blocks never handed out.
    pub fn blank(&self) -> u64 {
        self.blank
    }
    /// Private (anonymous) blocks held by requests.
    pub fn anon_held(&self) -> u64 {
        self.anon_held
    }
    pub fn peak_used(&self) -> u64 {
        self.peak_used
    }
    /// Block ids ever handed out (what memory is proportional to; private
    /// blocks take none).
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

    /// Index of `req`'s first private block: the first block that reaches
    /// past [`Request::private_from`], whose hash (chaining over content no
    /// other request has) no other request can produce. Such a block could
    /// only ever be hit by the request itself, so it has no id: the request
    /// counts it in `kv_private`, and when the request completes it is freed
    /// into the eviction queue as part of an [`ANON_RUN`]. A request that
    /// gives its blocks up and comes back (preemption, a returned prompt
    /// transfer) first gets ids for them and has them indexed, see
    /// [`KvCache::publish_private`]. `u32::MAX` when the request has no
    /// private content, and always with a CPU tier (which keeps copies by
    /// hash, so its contents would differ).
    #[inline]
    pub fn first_private(&self, req: &Request) -> u32 {
        match req.private_from.get() {
            Some(p) if self.cpu.is_none() => p / self.block_size,
            _ => u32::MAX,
        }
    }

    /// Stream positions of `req`'s full private blocks: from the first
    /// private block to the last block its latest allocation filled
    /// (`computed + granted` tokens are covered: `granted` is the grant of
    /// the step being formed or in flight, 0 otherwise).
    fn private_full(&self, req: &Request) -> std::ops::Range<usize> {
        let full = ((req.computed + req.granted) / self.block_size) as usize;
        let full = full.min(req.kv_held() as usize);
        (self.first_private(req) as usize).min(full)..full
    }

    /// Give `req`'s private blocks ids, hash and index its full ones now,
    /// exactly as if they had been registered when they filled, and make the
    /// request ordinary (`private_from = None`) for the rest of its life: it
    /// is about to give its blocks up (preemption, a prompt transfer it will
    /// recompute) and may come back and hit them.
    #[cold]
    fn publish_private(&mut self, req: &mut Request) {
        let range = self.private_full(req);
        req.private_from = OptIdx::NONE;
        // The same physical blocks, now with ids: `used` is unchanged.
        self.anon_held -= u64::from(req.kv_private);
        for _ in 0..std::mem::take(&mut req.kv_private) {
            let id = self.new_id();
            req.kv_blocks.push(id);
        }
        let mut prev = range
            .start
            .checked_sub(1)
            .map(|k| self.blocks[req.kv_blocks[k] as usize].hash);
        for k in range {
            let h = self.block_hash(req, k as u32, prev);
            self.register(req.kv_blocks[k], h);
            req.kv_last_hash = h;
            prev = Some(h);
        }
        self.check_conservation();
    }

    /// Release the blocks of a request that is done with this instance for
    /// good (completed, dropped): like [`KvCache::release`], its last block
    /// first; its full private blocks go to the eviction queue as one
    /// anonymous run, a private partial block becomes blank.
    pub fn release_final(&mut self, req: &mut Request) {
        let anon = u64::from(req.kv_private);
        if anon > 0 {
            let full = self.private_full(req).len() as u64;
            req.kv_private = 0;
            debug_assert!(anon - full <= 1, "more than one partial block");
            self.used -= anon;
            self.anon_held -= anon;
            self.blank += anon - full;
            if full > 0 {
                self.queue.push_back(ANON_RUN | full as u32);
                self.cached_free += full;
            }
        }
        self.release(&mut req.kv_blocks);
    }

    /// Release the blocks of a request that may come back and hit them (a
    /// preemption, a prompt transfer it will recompute): its private blocks
    /// are indexed first, see [`KvCache::publish_private`].
    pub fn release_returning(&mut self, req: &mut Request) {
        self.publish_private(req);
        self.release(&mut req.kv_blocks);
    }

    /// Fill `req.prompt_hashes` with what a lookup and an admission here
    /// read: the hashes of the prompt's full blocks, but for private ones (no
    /// cache can hold them). Kept when already there.
    pub fn hash_prompt(&self, req: &mut Request) {
        let need = (req.input_len / self.block_size).min(self.first_private(req)) as usize;
        if req.prompt_hashes.len() != need {
            let mut hashes = std::mem::take(&mut req.prompt_hashes);
            hashes.clear();
            hashes.reserve_exact(need);
            leading_prompt_hashes(req, self.block_size, need, &mut hashes);
            req.prompt_hashes = hashes;
        }
    }

    /// Hash of block `k` of `req`'s stream, given the hash of block `k − 1`.
    #[inline]
    fn block_hash(&self, req: &Request, k: u32, prev: Option<u64>) -> u64 {
        if let Some(&h) = req.prompt_hashes.get(k as usize) {
            return h;
        }
        // A block wholly inside the output segment is one run of it: no need
        // to walk (and fetch) the prompt's segments.
        let start = u64::from(k) * u64::from(self.block_size);
        if let Some(p) = prev {
            if start >= u64::from(req.input_len) {
                let h = output_block_hash(
                    p,
                    req,
                    (start - u64::from(req.input_len)) as u32,
                    self.block_size,
                );
                debug_assert_eq!(h, stream_block_hash(req, self.block_size, k, prev));
                return h;
            }
        }
        stream_block_hash(req, self.block_size, k, prev)
    }

    /// Prefix-cache lookup for a request about to be admitted with nothing
    /// computed: the longest run of leading full blocks of its stream, among
    /// those covering at most `max_tokens` tokens, whose hashes are in the
    /// index (or, with a CPU tier, in the index or that tier). The hit block
    /// ids are written to `out` (cleared first; [`RELOAD`] for a block to
    /// reload from the CPU tier). Pure query: nothing changes until
    /// [`KvCache::admit`].
    pub fn lookup(&self, req: &Request, max_tokens: u32, out: &mut Vec<u32>) -> Lookup {
        out.clear();
        let candidates = max_tokens / self.block_size;
        let mut res = Lookup {
            candidates,
            ..Lookup::default()
        };
        let mut prev = None;
        // Private blocks are in no cache (nobody else computed them).
        for k in 0..candidates.min(self.first_private(req)) {
            let h = self.block_hash(req, k, prev);
            let Some(id) = self.index.get(h, &self.blocks) else {
                break;
            };
            out.push(id);
            res.hits += 1;
            if !self.blocks[id as usize].held() {
                res.hits_free += 1;
            }
            prev = Some(h);
        }
        if res.hits < candidates {
            if let Some(cpu) = self.cpu.as_deref() {
                self.lookup_cpu_tier(cpu, req, prev, &mut res, out);
            }
        }
        res
    }

    /// Continue a lookup past the GPU hits: blocks found in the CPU tier (to
    /// reload) or again on the GPU, until one is in neither.
    #[inline(never)]
    fn lookup_cpu_tier(
        &self,
        cpu: &CpuTier,
        req: &Request,
        mut prev: Option<u64>,
        res: &mut Lookup,
        out: &mut Vec<u32>,
    ) {
        for k in res.hits..res.candidates {
            let h = self.block_hash(req, k, prev);
            if let Some(id) = self.index.get(h, &self.blocks) {
                out.push(id);
                if !self.blocks[id as usize].held() {
                    res.hits_free += 1;
                }
            } else if cpu.contains(h) {
                out.push(RELOAD);
                res.reloads += 1;
            } else {
                break;
            }
            res.hits += 1;
            prev = Some(h);
        }
    }

    /// Admit a request that holds no blocks: attach the hit blocks found by
    /// [`KvCache::lookup`] (`hits`), then allocate for tokens
    /// `[hits·B, hits·B + n)`. All or nothing: returns false, changing nothing,
    /// when the free blocks do not suffice.
    pub fn admit(&mut self, req: &mut Request, lookup: Lookup, hits: &[u32], n: u32) -> bool {
        debug_assert!(req.kv_held() == 0, "admitting a request that holds blocks");
        debug_assert_eq!(hits.len(), lookup.hits as usize);
        let cached = u64::from(lookup.hits) * u64::from(self.block_size);
        let fresh = self.blocks_for(cached + u64::from(n)) - u64::from(lookup.hits)
            + u64::from(lookup.reloads);
        if fresh + u64::from(lookup.hits_free) > self.free() {
            return false;
        }
        // Size the block list once for the whole stream (L + N − 1 computed
        // tokens at most) instead of growing it while decoding.
        let max_blocks = self
            .blocks_for(u64::from(req.total_len().saturating_sub(1)))
            .min(u64::from(self.first_private(req)));
        req.kv_blocks
            .reserve((max_blocks as usize).saturating_sub(req.kv_blocks.len()));
        if lookup.reloads > 0 {
            self.attach_with_reloads(req, hits);
        } else {
            self.attach(req, hits);
        }
        if self.cpu.is_some() && !hits.is_empty() {
            self.refresh_cpu_copies(hits);
        }
        if let Some(&last) = req.kv_blocks.last() {
            req.kv_last_hash = self.blocks[last as usize].hash;
        }
        self.hit_blocks += u64::from(lookup.hits);
        self.lookup_blocks += u64::from(lookup.candidates);
        let ok = self.extend(req, cached as u32, n);
        debug_assert!(ok, "pre-checked allocation failed");
        true
    }

    /// Take a reference on GPU hit block `id` (off the free list if it was
    /// free and cached).
    #[inline]
    fn take_hit(&mut self, id: u32) {
        let blk = &mut self.blocks[id as usize];
        debug_assert!(blk.state & HASHED != 0, "a hit block without a hash");
        if blk.held() {
            assert!(blk.refs() < HASHED - 1, "KV block reference count overflow");
            blk.state += 1;
        } else {
            // A cached free block: held again, its queue entry goes stale.
            blk.state = 1 | HASHED;
            self.cached_free -= 1;
            self.used += 1;
        }
    }

    /// An admission used these hit blocks: refresh (or store again) their
    /// copies in the CPU tier, most recently used last.
    #[inline(never)]
    fn refresh_cpu_copies(&mut self, hits: &[u32]) {
        if let Some(cpu) = self.cpu.as_deref_mut() {
            for &id in hits.iter().filter(|&&id| id != RELOAD) {
                cpu.mirror(self.blocks[id as usize].hash);
            }
        }
    }

    /// Attach GPU hits (no reloads) to a request that holds no blocks.
    #[inline]
    fn attach(&mut self, req: &mut Request, hits: &[u32]) {
        for &id in hits {
            self.take_hit(id);
            req.kv_blocks.push(id);
        }
    }

    /// Attach a hit list that has CPU-tier entries: first every GPU hit (so
    /// that no block taken for a reload can evict one), then, in stream
    /// order, each reloaded block into a fresh GPU block registered under its
    /// hash, charging the reload to the CPU tier. The caller checked that the
    /// free blocks suffice.
    #[inline(never)]
    fn attach_with_reloads(&mut self, req: &mut Request, hits: &[u32]) {
        for &id in hits.iter().filter(|&&id| id != RELOAD) {
            self.take_hit(id);
        }
        let mut prev = None;
        for (k, &id) in hits.iter().enumerate() {
            let id = if id == RELOAD {
                let h = self.block_hash(req, k as u32, prev);
                let fresh = self.take_free_block();
                self.register(fresh, h);
                self.used += 1;
                self.cpu
                    .as_deref_mut()
                    .expect("a reload without a CPU tier")
                    .reload(h);
                fresh
            } else {
                id
            };
            prev = Some(self.blocks[id as usize].hash);
            req.kv_blocks.push(id);
        }
        self.peak_used = self.peak_used.max(self.used);
        if let Some(cpu) = self.cpu.as_deref_mut() {
            cpu.count_reload();
        }
        self.check_conservation();
    }

    /// Extend a request that has `computed` tokens (and exactly the blocks
    /// covering them) so that it covers `computed + n` tokens. Blocks that
    /// become full are hashed and registered. All or nothing.
    #[inline]
    pub fn extend(&mut self, req: &mut Request, computed: u32, n: u32) -> bool {
        // Fast path (decode, 15 steps out of 16): the tokens fit in the last
        // block without filling it, so nothing is allocated or registered.
        let b = u64::from(self.block_size);
        let cap = req.kv_held() * b;
        let end = u64::from(computed) + u64::from(n);
        if end < cap && u64::from(computed) + b >= cap {
            return true;
        }
        self.extend_slow(req, computed, n)
    }

    #[inline(never)]
    fn extend_slow(&mut self, req: &mut Request, computed: u32, n: u32) -> bool {
        let b = u64::from(self.block_size);
        let have = req.kv_held();
        debug_assert_eq!(have, self.blocks_for(u64::from(computed)));
        let end = u64::from(computed) + u64::from(n);
        let fresh = self.blocks_for(end).saturating_sub(have);
        if fresh > self.free() {
            return false;
        }
        let first_full = u64::from(computed) / b;
        // Blocks that fill with this extension and get hashed and indexed
        // (private ones have no ids, see `first_private`).
        let first_private = u64::from(self.first_private(req));
        let last_full = (end / b).min(first_private);
        if last_full > first_full + 1 {
            // A prefill registers many prompt blocks at random index slots:
            // start all those fetches now so the misses overlap.
            let hashes = &req.prompt_hashes;
            let upto = (last_full as usize).min(hashes.len());
            for &h in hashes.get(first_full as usize..upto).unwrap_or(&[]) {
                self.index.prefetch(h);
            }
        }
        // Blocks before the first private one get ids, the rest are counted.
        let with_ids = first_private.saturating_sub(have).min(fresh);
        for _ in 0..with_ids {
            let id = self.take_free_block();
            req.kv_blocks.push(id);
            self.last_allocated = id;
        }
        self.used += with_ids;
        if fresh > with_ids {
            let anon = fresh - with_ids;
            let took = self.take_private(anon);
            debug_assert!(took, "pre-checked allocation failed");
            req.kv_private += anon as u32;
            self.last_allocated = NO_ID;
        }
        // Register the blocks that become full with this extension.
        for k in first_full..last_full {
            let k = k as u32;
            let prev = if k == 0 {
                None
            } else {
                // The request's last full block is k − 1; its hash is kept in
                // the request so the block itself need not be read.
                debug_assert!({
                    let p = &self.blocks[req.kv_blocks[k as usize - 1] as usize];
                    p.held() && p.state & HASHED != 0 && p.hash == req.kv_last_hash
                });
                Some(req.kv_last_hash)
            };
            let h = self.block_hash(req, k, prev);
            self.register(req.kv_blocks[k as usize], h);
            req.kv_last_hash = h;
        }
        self.peak_used = self.peak_used.max(self.used);
        self.check_conservation();
        true
    }

    /// Allocate `n` private blocks for a request whose next block is
    /// private (the caller counts them in the request); false, changing
    /// nothing, when the free blocks do not suffice.
    #[inline]
    pub fn take_private(&mut self, n: u64) -> bool {
        if n > self.free() {
            return false;
        }
        self.take_anon(n);
        self.used += n;
        self.anon_held += n;
        self.peak_used = self.peak_used.max(self.used);
        self.check_conservation();
        true
    }

    /// The block most recently handed out: after an [`KvCache::extend`]
    /// that allocated, the request's last block (known without reading its
    /// block list back); [`NO_ID`] when that block is private.
    #[inline]
    pub fn last_allocated(&self) -> u32 {
        self.last_allocated
    }

    /// [`KvCache::extend`]`(req, computed, 1)` for the case where that one
    /// token fills the request's last block, `last` (the caller knows its
    /// id, which saves reading the block list): the block is hashed and
    /// registered; nothing is allocated.
    #[inline]
    pub fn fill_last(&mut self, req: &mut Request, computed: u32, last: u32) {
        let b = u64::from(self.block_size);
        let len = req.kv_held();
        debug_assert_eq!(u64::from(computed) + 1, len * b);
        let k = (len - 1) as u32;
        if k < self.first_private(req) {
            debug_assert_eq!(req.kv_blocks.last(), Some(&last));
            let prev = (k > 0).then_some(req.kv_last_hash);
            let h = self.block_hash(req, k, prev);
            self.register(last, h);
            req.kv_last_hash = h;
        }
        // The request's next extension (B tokens from now) appends a block
        // id here: start fetching that line.
        prefetch(req.kv_blocks.spare_capacity_mut().as_ptr());
        self.check_conservation();
    }

    /// [`KvCache::fill_last`] for a block wholly inside the output (its
    /// tokens start `start ≥ input_len` tokens into the stream, and it is not
    /// the stream's first block), from what the engine keeps in its batch
    /// record instead of the request: the block `last`, the hash `prev` of
    /// the block before it and the output seed. Returns the block's hash,
    /// the request's new last full-block hash.
    #[inline]
    pub fn fill_output_block(
        &mut self,
        last: u32,
        prev: u64,
        output_seed: u64,
        input_len: u32,
        start: u64,
    ) -> u64 {
        debug_assert!(start >= u64::from(input_len) && start > 0);
        let off = (start - u64::from(input_len)) as u32;
        let h = output_run_hash(prev, output_seed, off, self.block_size);
        self.register(last, h);
        self.check_conservation();
        h
    }

    /// Start fetching what the next evictions read: the metadata of the
    /// first blocks in the queue and the index slots of the first two (a
    /// hint given at the start of a step).
    #[inline]
    pub fn prefetch_next_free(&self) {
        if self.blank == 0 && self.unhashed.is_empty() {
            for (k, &id) in self.queue.iter().take(8).enumerate() {
                if id & ANON_RUN != 0 {
                    continue;
                }
                let b = &self.blocks[id as usize];
                if k < 2 {
                    self.index.prefetch(b.hash);
                } else {
                    prefetch(b);
                }
            }
        }
    }

    /// Prefetch what filling block `block` (the request's last, covering
    /// stream tokens `[start, start + B)`) will touch, when it holds output
    /// tokens only: its metadata and the index slot of its hash, chained
    /// after `prev` (the hash of the block before it). Reads no request: a
    /// hint the engine gives a step ahead of a decode that fills a block.
    #[inline]
    pub fn prefetch_fill(
        &self,
        prev: u64,
        output_seed: u64,
        input_len: u32,
        start: u64,
        block: u32,
    ) {
        if start < u64::from(input_len) || start == 0 {
            return; // a prompt or straddling block, or the first one
        }
        let off = (start - u64::from(input_len)) as u32;
        self.index
            .prefetch(output_run_hash(prev, output_seed, off, self.block_size));
        if let Some(b) = self.blocks.get(block as usize) {
            prefetch(b);
        }
    }

    /// Release all of a request's blocks (last to first, so its leading,
    /// most shareable blocks are freed last and evicted last). A request
    /// with private blocks uses [`KvCache::release_final`] or
    /// [`KvCache::release_returning`] instead.
    pub fn release(&mut self, blocks: &mut Vec<u32>) {
        // The blocks lie at random places: keep a window of fetches in
        // flight ahead of the loop (a burst of all of them would overflow
        // the CPU's miss buffers).
        const AHEAD: usize = 8;
        for &id in blocks.iter().rev().take(AHEAD) {
            prefetch(&self.blocks[id as usize]);
        }
        for (k, &id) in blocks.iter().enumerate().rev() {
            if let Some(&ahead) = k.checked_sub(AHEAD).and_then(|a| blocks.get(a)) {
                prefetch(&self.blocks[ahead as usize]);
            }
            let blk = &mut self.blocks[id as usize];
            debug_assert!(blk.held(), "releasing a free block");
            if blk.refs() == 1 {
                self.used -= 1;
                if blk.state & HASHED != 0 {
                    blk.state = CACHED;
                    blk.queued_at = (self.queue_head + self.queue.len() as u64) as u32;
                    self.queue.push_back(id);
                    self.cached_free += 1;
                } else {
                    blk.state = 0;
                    self.unhashed.push(id);
                }
            } else {
                blk.state -= 1;
            }
        }
        blocks.clear();
        self.compact_queue();
        self.check_conservation();
    }

    /// Drop stale queue entries once they outnumber the current ones (hits on
    /// cached blocks leave them behind), renumbering the positions.
    fn compact_queue(&mut self) {
        if (self.queue.len() as u64) <= 2 * self.cached_free + 64 {
            return;
        }
        let mut queue = std::mem::take(&mut self.queue);
        let mut pos = self.queue_head;
        let blocks = &self.blocks;
        queue.retain(|&id| {
            let current = id & ANON_RUN != 0 || {
                let b = &blocks[id as usize];
                b.cached() && b.queued_at == pos as u32
            };
            pos += 1;
            current
        });
        for (k, &id) in queue.iter().enumerate() {
            if id & ANON_RUN == 0 {
                self.blocks[id as usize].queued_at = (self.queue_head + k as u64) as u32;
            }
        }
        self.queue = queue;
    }

    /// A held block id (one reference) for a block the caller took: a dead
    /// id if any, else a new one.
    #[inline]
    fn new_id(&mut self) -> u32 {
        let held = Block {
            hash: 0,
            state: 1,
            queued_at: 0,
        };
        if let Some(id) = self.dead.pop() {
            self.blocks[id as usize] = held;
            return id;
        }
        self.blocks.push(held);
        (self.blocks.len() - 1) as u32
    }

    /// Hand out one free block with an id: a blank one if any, else an
    /// unhashed one, else the least recently freed cached block (forgetting
    /// its hash). The caller accounts for `used`.
    fn take_free_block(&mut self) -> u32 {
        if self.blank > 0 {
            self.blank -= 1;
            return self.new_id();
        }
        if let Some(id) = self.unhashed.pop() {
            self.blocks[id as usize].state = 1;
            return id;
        }
        match self.evict_one() {
            Some(id) => {
                self.blocks[id as usize].state = 1;
                id
            }
            None => self.new_id(),
        }
    }

    /// Hand out `n` free blocks without ids (private blocks), in the order
    /// [`KvCache::take_free_block`] would. The caller accounts for `used`.
    fn take_anon(&mut self, mut n: u64) {
        let blank = n.min(self.blank);
        self.blank -= blank;
        n -= blank;
        while n > 0 {
            if let Some(id) = self.unhashed.pop() {
                self.dead.push(id);
                n -= 1;
                continue;
            }
            // An anonymous run at the head gives up to all its blocks at once.
            let took = self.take_from_head_run(n);
            if took > 0 {
                n -= took;
                continue;
            }
            if let Some(id) = self.evict_one() {
                self.blocks[id as usize].state = 0;
                self.dead.push(id);
            }
            n -= 1;
        }
    }

    /// Take up to `n` blocks from the anonymous run at the head of the
    /// eviction queue, if the head is one; returns how many were taken (0
    /// when the head is a block id or the queue is empty).
    #[inline]
    fn take_from_head_run(&mut self, n: u64) -> u64 {
        let Some(head) = self.queue.front_mut().filter(|h| **h & ANON_RUN != 0) else {
            return 0;
        };
        let run = u64::from(*head & !ANON_RUN);
        let take = run.min(n);
        if take == run {
            self.queue.pop_front();
            self.queue_head += 1;
        } else {
            *head -= take as u32;
        }
        self.cached_free -= take;
        take
    }

    /// Evict the least recently freed cached block: `Some(id)` for a block
    /// with an id (its index entry removed; the caller sets its state),
    /// `None` for one block of an anonymous run.
    fn evict_one(&mut self) -> Option<u32> {
        loop {
            if self.take_from_head_run(1) == 1 {
                return None;
            }
            let id = self
                .queue
                .pop_front()
                .expect("KV free list empty after a successful pre-check");
            let pos = self.queue_head as u32;
            self.queue_head += 1;
            let blk = self.blocks[id as usize];
            if !blk.cached() || blk.queued_at != pos {
                continue; // stale: the block was hit since it was queued
            }
            // Read ahead: the metadata of the block evicted 8 evictions from
            // now, and the index slot of the one 4 from now (its metadata
            // was fetched ahead already).
            if let Some(&far) = self.queue.get(8).filter(|&&e| e & ANON_RUN == 0) {
                prefetch(&self.blocks[far as usize]);
            }
            if let Some(&near) = self.queue.get(4).filter(|&&e| e & ANON_RUN == 0) {
                self.index.prefetch(self.blocks[near as usize].hash);
            }
            self.cached_free -= 1;
            self.index.remove_if(blk.hash, id);
            return Some(id);
        }
    }

    /// Record that live block `id` now holds the full prefix hashed `h`.
    fn register(&mut self, id: u32, h: u64) {
        {
            let blk = &mut self.blocks[id as usize];
            debug_assert!(blk.held() && blk.state & HASHED == 0);
            blk.hash = h;
            blk.state |= HASHED;
        }
        if let Some(cpu) = self.cpu.as_deref_mut() {
            cpu.mirror(h);
        }
        self.index.reserve_one();
        // One probe of the (large, cache-unfriendly) index per registration.
        match self.index.find(h, &self.blocks) {
            Probe::Vacant(pos) => self.index.insert_at(pos, h, id),
            Probe::Found(pos, old) => {
                if old != id && !self.blocks[old as usize].held() {
                    // The old copy is only cached: point the index at the live
                    // copy and recycle the old one first (it is now
                    // unreachable; its queue entry goes stale).
                    self.index.set_at(pos, id);
                    self.blocks[old as usize].state = 0;
                    self.cached_free -= 1;
                    self.unhashed.push(old);
                }
                // Else another live block already serves this hash; keep it.
            }
        }
    }

    /// Full structural check, O(block ids ever used): every free block id
    /// is either on the unhashed stack or has exactly one current entry in
    /// the eviction queue, or is dead; `used` counts the referenced blocks
    /// and the private ones, the index points at hashed blocks with the
    /// right hash and every entry is reachable by probing, and INV-4 holds.
    /// Used by tests; returns a description of the first violation.
    pub fn check(&self) -> Result<(), String> {
        let mut hashed = vec![false; self.blocks.len()];
        let mut free_seen = vec![false; self.blocks.len()];
        for (list, ids) in [("unhashed", &self.unhashed), ("dead", &self.dead)] {
            for &id in ids {
                let blk = &self.blocks[id as usize];
                if blk.state != 0 {
                    return Err(format!("{list} block id {id} in state {:#x}", blk.state));
                }
                if std::mem::replace(&mut free_seen[id as usize], true) {
                    return Err(format!("block id {id} twice on the unhashed or dead lists"));
                }
            }
        }
        let (mut current, mut anon_cached) = (0u64, 0u64);
        for (k, &id) in self.queue.iter().enumerate() {
            if id & ANON_RUN != 0 {
                if id == ANON_RUN {
                    return Err("an empty anonymous run in the eviction queue".into());
                }
                anon_cached += u64::from(id & !ANON_RUN);
                continue;
            }
            let blk = &self.blocks[id as usize];
            let pos = (self.queue_head + k as u64) as u32;
            if blk.cached() && blk.queued_at == pos {
                if std::mem::replace(&mut free_seen[id as usize], true) {
                    return Err(format!("block {id} free twice"));
                }
                hashed[id as usize] = true;
                current += 1;
            }
        }
        if current + anon_cached != self.cached_free {
            return Err(format!(
                "{current} current queue entries and {anon_cached} anonymous blocks, counter says {}",
                self.cached_free
            ));
        }
        let on_list = current + self.unhashed.len() as u64 + self.dead.len() as u64;
        for (i, b) in self.blocks.iter().enumerate() {
            if !b.held() && !free_seen[i] {
                return Err(format!(
                    "free block {i} is neither queued nor unhashed nor dead"
                ));
            }
        }
        let mut referenced = 0u64;
        for (i, b) in self.blocks.iter().enumerate() {
            if b.held() {
                if b.refs() == 0 {
                    return Err(format!("held block {i} with no reference"));
                }
                referenced += 1;
                hashed[i] = b.state & HASHED != 0;
            }
        }
        if referenced + self.anon_held != self.used {
            return Err(format!(
                "{referenced} referenced blocks and {} private ones, used = {}",
                self.anon_held, self.used
            ));
        }
        if referenced + on_list != self.blocks.len() as u64 {
            return Err("a block is neither referenced nor free".into());
        }
        let mut entries = 0usize;
        for (tag, id) in self.index.entries() {
            entries += 1;
            let blk = &self.blocks[id as usize];
            if !hashed[id as usize] || BlockIndex::tag(blk.hash) != tag {
                return Err(format!(
                    "index entry for block {id} does not match its hash"
                ));
            }
            if self.index.get(blk.hash, &self.blocks) != Some(id) {
                return Err(format!("index entry for block {id} is not reachable"));
            }
        }
        if entries != self.index.len {
            return Err("index length mismatch".into());
        }
        if self.used + self.free() != self.total {
            return Err("INV-4: used + free != total".into());
        }
        if let Some(cpu) = &self.cpu {
            cpu.check()?;
        }
        Ok(())
    }

    /// Entries in the eviction queue, stale ones included (tests).
    #[cfg(test)]
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// Reference count of a block (consistency checks).
    pub fn refs_of(&self, id: u32) -> u32 {
        self.blocks[id as usize].refs()
    }
}

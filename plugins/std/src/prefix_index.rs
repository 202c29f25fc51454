//! The router-side prefix index: per instance, an LRU set of the block
//! hashes of requests recently routed there (bounded capacity), queried per
//! hash for all instances at once.
//!
//! Why it looks the way it does: with tens of instances the index holds
//! hundreds of thousands of hashes (tens of MB), so every update is a cache
//! miss and the number of random accesses is the cost. One open-addressing
//! table holds every `(hash, instance)` pair with its recency stamp — a
//! hash held by several instances has one entry per holder, side by side
//! in its probe run — so scoring a block is one probe run, touching it for
//! the chosen instance is the same run (already in cache from scoring), and
//! evicting is one more. Each instance's recency order is a queue of
//! touches; a queued touch is current when its stamp is still the pair's
//! stamp, and the least recently used hash is the first current touch.
//! Because the slots are known up front, a request's updates fetch all of
//! them at once before using any ([`PrefixIndex::record`]).
//!
//! Most prompts share nothing: their blocks never match another request's.
//! Hashes are hierarchical (block `k`'s hash covers the whole prefix up to
//! it), so two records share a block only if they share their first one. A
//! record whose first block no other record has (its *group* is alone) is
//! therefore kept as one [`Run`]: one touch in the recency queue standing
//! for all its blocks in order, and no pairs. Only when a second record of
//! the group comes does the run become pairs too ([`PrefixIndex::publish`])
//! — exactly the entries the block-by-block path would have made — and the
//! group goes that path from then on. On prompts that share nothing an
//! update then costs a few accesses per request instead of two cache misses
//! per block.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use blis_plugin_api::RequestView;

/// Start fetching the cache line at `p` (a hint: never faults).
#[inline]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch does not dereference `p` and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Bits of a slot's record holding `instance + 1` (0 = empty slot); the
/// rest hold the stamp.
const INSTANCE_BITS: u32 = 20;
const INSTANCE_MASK: u64 = (1 << INSTANCE_BITS) - 1;
/// Most instances the index supports.
pub(crate) const MAX_INSTANCES: usize = (1 << INSTANCE_BITS) - 1;

#[inline]
fn record_of(instance: usize, stamp: u64) -> u64 {
    (stamp << INSTANCE_BITS) | (instance as u64 + 1)
}

#[inline]
fn instance_of(record: u64) -> usize {
    (record & INSTANCE_MASK) as usize - 1
}

#[inline]
fn stamp_of(record: u64) -> u64 {
    record >> INSTANCE_BITS
}

/// Where a probe for a `(hash, instance)` pair stopped.
enum Probe {
    Found(usize),
    /// Absent; this empty slot ends the probe run.
    Vacant(usize),
}

/// Open addressing with linear probing over `(hash, record)` slots; the
/// home of a hash is its top bits (block hashes are well mixed). Load stays
/// at most 3/8; deletion shifts the run back, so no tombstones. A full
/// index of unique prompts inserts and deletes one pair per block routed,
/// and each deletion walks the rest of its probe run: at the 64-instance
/// benchmark's 640,000 pairs a 5/8 bound left the table at load 0.61, and
/// 3/8 (twice the slots, 16 bytes each) took 10–15 % off that run's time.
struct PairTable {
    slots: Vec<(u64, u64)>,
    len: usize,
    /// `64 − log2(slots.len())`.
    shift: u32,
}

impl PairTable {
    fn new() -> Self {
        PairTable {
            slots: vec![(0, 0); 64],
            len: 0,
            shift: 64 - 6,
        }
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        (hash >> self.shift) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Start fetching the start of `hash`'s probe run: its home slot's
    /// cache line and the next one (runs often cross it, and a deletion
    /// scans to the run's end).
    #[inline]
    fn prefetch(&self, hash: u64) {
        let i = self.home(hash);
        prefetch(&self.slots[i]);
        prefetch(&self.slots[(i + 4) & self.mask()]);
    }

    #[inline]
    fn find(&self, hash: u64, instance: usize) -> Probe {
        let want = instance as u64 + 1;
        let mask = self.mask();
        let mut i = self.home(hash);
        loop {
            let (h, r) = self.slots[i];
            if r == 0 {
                return Probe::Vacant(i);
            }
            if h == hash && r & INSTANCE_MASK == want {
                return Probe::Found(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Call `f(instance)` for every holder of `hash`.
    #[inline]
    fn holders(&self, hash: u64, mut f: impl FnMut(usize)) {
        let mask = self.mask();
        let mut i = self.home(hash);
        loop {
            let (h, r) = self.slots[i];
            if r == 0 {
                return;
            }
            if h == hash {
                f(instance_of(r));
            }
            i = (i + 1) & mask;
        }
    }

    /// Whether some instance holds `hash`.
    #[inline]
    fn held(&self, hash: u64) -> bool {
        let mut any = false;
        self.holders(hash, |_| any = true);
        any
    }

    /// Whether one more entry fits without growing.
    #[inline]
    fn has_room(&self) -> bool {
        (self.len + 1) * 8 <= self.slots.len() * 3
    }

    /// Double the table (slot positions change).
    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, vec![(0, 0); n]);
        self.shift -= 1;
        let mask = n - 1;
        for (h, r) in old.into_iter().filter(|&(_, r)| r != 0) {
            let mut i = self.home(h);
            while self.slots[i].1 != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = (h, r);
        }
    }

    /// Insert a pair known to be absent: `vacant` is where its probe ended.
    #[inline]
    fn insert(&mut self, vacant: usize, hash: u64, instance: usize, stamp: u64) {
        let pos = if self.has_room() {
            vacant
        } else {
            self.grow();
            match self.find(hash, instance) {
                Probe::Vacant(i) => i,
                Probe::Found(_) => unreachable!("pair appeared while growing"),
            }
        };
        self.slots[pos] = (hash, record_of(instance, stamp));
        self.len += 1;
    }

    /// Backward-shift deletion: later entries of the run move up so every
    /// probe run stays unbroken.
    fn delete_at(&mut self, mut hole: usize) {
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let e = self.slots[j];
            if e.1 == 0 {
                break;
            }
            let home = self.home(e.0);
            // The entry at j may fill the hole unless its home lies
            // cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.slots[hole] = e;
                hole = j;
            }
        }
        self.slots[hole] = (0, 0);
        self.len -= 1;
    }
}

/// One instance's recency order: its touches in order, as `(hash, stamp)`
/// for one block, `(run slot, RUN)` for a [`Run`] (all its blocks).
#[derive(Default)]
struct Recency {
    touches: VecDeque<(u64, u64)>,
    /// Distinct hashes held (the live blocks of runs included).
    len: usize,
    clock: u64,
}

/// The stamp of a touch that stands for a [`Run`] (the stamps of blocks
/// stay below 2^44, see [`record_of`]).
const RUN: u64 = u64::MAX;

/// The blocks of one record (one request routed to one instance) kept as
/// one touch: block `k` has the stamp `stamp + k`, and the blocks before
/// `first_live` are gone (the LRU takes them oldest first, i.e. in order).
/// While its group is alone they are nowhere else; once `published` they
/// are pairs too, and a block touched again since (its pair's stamp moved
/// on) is no longer this run's.
#[derive(Default)]
struct Run {
    hashes: Vec<u64>,
    /// `hashes[0]`, its group's key (here to spare a cache miss).
    first: u64,
    instance: usize,
    first_live: usize,
    stamp: u64,
    published: bool,
    /// False once its last block went (the slot is free).
    in_use: bool,
}

/// The records whose blocks start with a given first block.
#[derive(Clone, Copy, Debug)]
enum Group {
    /// One record so far: its run (a slot of `PrefixIndex::runs`). Left
    /// behind when the run goes (forgetting it would cost a cache miss per
    /// run): it is current only while that slot holds a run of this group
    /// ([`PrefixIndex::group`]), and stale ones are swept out in bulk.
    Alone(usize),
    /// More than one: its blocks go block by block, as pairs. A cache: a
    /// record whose group has no entry looks its blocks up in the table
    /// first ([`PrefixIndex::record`]), so entries can be swept out
    /// ([`PrefixIndex::sweep_groups`]) while the group's pairs live on.
    Shared,
}

/// Block hashes are well mixed, but tests use small integers: one multiply.
#[derive(Clone, Copy, Default)]
struct HashHasher(u64);

impl Hasher for HashHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// How many evictions ahead their probe runs are fetched.
const EVICTION_LOOKAHEAD: usize = 8;

/// Per-instance bounded LRU sets of block hashes, queried across instances.
pub(crate) struct PrefixIndex {
    capacity: usize,
    pairs: PairTable,
    recency: Vec<Recency>,
    /// By first block hash (see [`Group::Alone`] for stale entries).
    groups: HashMap<u64, Group, BuildHasherDefault<HashHasher>>,
    /// Slab of runs (`free` lists the unused slots, whose vectors are kept
    /// for reuse).
    runs: Vec<Run>,
    free: Vec<usize>,
    /// Entries `groups` may have beyond twice what is live before a sweep.
    group_slack: usize,
}

impl PrefixIndex {
    /// An index holding at most `capacity` hashes per instance.
    pub fn new(capacity: usize) -> Self {
        PrefixIndex {
            capacity,
            pairs: PairTable::new(),
            recency: Vec::new(),
            groups: HashMap::default(),
            runs: Vec::new(),
            free: Vec::new(),
            group_slack: 1024,
        }
    }

    /// [`PrefixIndex::new`] sweeping its groups as soon as they exceed
    /// twice what is live (tests: every sweep path taken often).
    #[cfg(test)]
    fn with_group_slack(capacity: usize, group_slack: usize) -> Self {
        PrefixIndex {
            group_slack,
            ..PrefixIndex::new(capacity)
        }
    }

    /// Hashes held for `instance`.
    #[cfg(test)]
    pub fn len(&self, instance: usize) -> usize {
        self.recency.get(instance).map_or(0, |r| r.len)
    }

    /// Record `hashes` (a prompt's hierarchical block hashes) as routed to
    /// `instance` (the observer of the seed): each block is touched in
    /// order; the least recently used block is evicted when the instance's
    /// set is full. Instances beyond [`MAX_INSTANCES`] are ignored.
    pub fn record(&mut self, hashes: &[u64], instance: usize) {
        let Some(&first) = hashes.first() else {
            return;
        };
        if instance >= MAX_INSTANCES {
            return;
        }
        if self.recency.len() <= instance {
            self.recency.resize_with(instance + 1, Recency::default);
        }
        match self.group(first) {
            Some(Group::Alone(slot)) => {
                self.publish(slot);
                self.groups.insert(first, Group::Shared);
            }
            Some(Group::Shared) => {}
            // A group without an entry is new, or shared and swept out: its
            // blocks have pairs only in the second case (an empty table,
            // when nothing is shared, answers from cache).
            None => {
                for &h in hashes {
                    self.pairs.prefetch(h);
                }
                if !hashes.iter().any(|&h| self.pairs.held(h)) {
                    return self.record_run(hashes, instance);
                }
                self.groups.insert(first, Group::Shared);
            }
        }
        self.record_blocks(hashes, instance);
        self.sweep_groups();
    }

    /// The current group of prompts starting with block `first`, if any.
    #[inline]
    fn group(&self, first: u64) -> Option<Group> {
        match *self.groups.get(&first)? {
            Group::Alone(slot) => {
                let run = &self.runs[slot];
                (run.in_use && run.first == first).then_some(Group::Alone(slot))
            }
            shared => Some(shared),
        }
    }

    /// The first record of its group: one run, no pairs (none of its blocks
    /// is held anywhere, so every touch inserts, and the evictions they
    /// cause take the oldest blocks in order).
    fn record_run(&mut self, hashes: &[u64], instance: usize) {
        let rec = &mut self.recency[instance];
        let stamp = rec.clock + 1;
        rec.clock += hashes.len() as u64;
        let slot = self.free.pop().unwrap_or_else(|| {
            self.runs.push(Run::default());
            self.runs.len() - 1
        });
        let run = &mut self.runs[slot];
        run.hashes.clear();
        run.hashes.extend_from_slice(hashes);
        run.first = hashes[0];
        (run.instance, run.first_live, run.stamp) = (instance, 0, stamp);
        (run.published, run.in_use) = (false, true);
        rec.touches.push_back((slot as u64, RUN));
        self.groups.insert(hashes[0], Group::Alone(slot));
        rec.len += hashes.len();
        let excess = rec.len.saturating_sub(self.capacity);
        if excess > 0 {
            self.evict(instance, excess);
        }
        self.sweep_groups();
    }

    /// Keep `groups` within twice the live runs and pairs (plus a slack):
    /// drop stale lone entries, and shared ones whose first block no
    /// instance holds (the rest of such a group's blocks may still be
    /// held: its next record finds them in the table). A sweep leaves at
    /// most one entry per live run or pair, so it runs O(1) times per
    /// entry added.
    fn sweep_groups(&mut self) {
        let live = self.runs.len() - self.free.len() + self.pairs.len;
        if self.groups.len() <= 2 * live + self.group_slack {
            return;
        }
        let (runs, pairs) = (&self.runs, &self.pairs);
        self.groups.retain(|&first, g| match *g {
            Group::Alone(slot) => runs[slot].in_use && runs[slot].first == first,
            Group::Shared => pairs.held(first),
        });
    }

    /// A second record of the run's group came: give the run's live blocks
    /// the pairs the block-by-block path would have given them.
    fn publish(&mut self, slot: usize) {
        let run = &mut self.runs[slot];
        run.published = true;
        for k in run.first_live..run.hashes.len() {
            match self.pairs.find(run.hashes[k], run.instance) {
                Probe::Vacant(i) => {
                    self.pairs
                        .insert(i, run.hashes[k], run.instance, run.stamp + k as u64);
                }
                Probe::Found(_) => unreachable!("a lone group's block has no pair"),
            }
        }
    }

    /// Touch `hashes` block by block (their group is shared).
    fn record_blocks(&mut self, hashes: &[u64], instance: usize) {
        // Start every fetch this update will wait for: the probe runs of the
        // hashes and of those likely to be evicted.
        for &h in hashes {
            self.pairs.prefetch(h);
        }
        let rec = &self.recency[instance];
        let evictions = (rec.len + hashes.len()).saturating_sub(self.capacity);
        // The oldest touches, which the evictions pop, were written long
        // ago: fetch their lines too (4 touches a line) before reading any.
        for k in (0..evictions + EVICTION_LOOKAHEAD).step_by(4) {
            if let Some(t) = rec.touches.get(k) {
                prefetch(t);
            }
        }
        for &(h, s) in rec.touches.iter().take(evictions.min(EVICTION_LOOKAHEAD)) {
            if s != RUN {
                self.pairs.prefetch(h);
            }
        }
        for &h in hashes {
            let rec = &mut self.recency[instance];
            rec.clock += 1;
            let stamp = rec.clock;
            rec.touches.push_back((h, stamp));
            match self.pairs.find(h, instance) {
                Probe::Found(i) => self.pairs.slots[i].1 = record_of(instance, stamp),
                Probe::Vacant(i) => {
                    self.pairs.insert(i, h, instance, stamp);
                    rec.len += 1;
                    if rec.len > self.capacity {
                        self.evict(instance, 1);
                    }
                }
            }
            self.compact(instance);
        }
    }

    /// Remove the `n` least recently used blocks of `instance`.
    fn evict(&mut self, instance: usize, mut n: usize) {
        let rec = &mut self.recency[instance];
        while n > 0 {
            let Some(&(h, s)) = rec.touches.front() else {
                return;
            };
            if s == RUN {
                let slot = h as usize;
                let run = &mut self.runs[slot];
                if run.published {
                    // Its oldest block, unless touched again since.
                    let k = run.first_live;
                    run.first_live += 1;
                    if let Probe::Found(i) = self.pairs.find(run.hashes[k], instance) {
                        if stamp_of(self.pairs.slots[i].1) == run.stamp + k as u64 {
                            self.pairs.delete_at(i);
                            rec.len -= 1;
                            n -= 1;
                        }
                    }
                } else {
                    let k = n.min(run.hashes.len() - run.first_live);
                    run.first_live += k;
                    rec.len -= k;
                    n -= k;
                }
                if run.first_live == run.hashes.len() {
                    run.in_use = false;
                    self.free.push(slot);
                    rec.touches.pop_front();
                }
                continue;
            }
            rec.touches.pop_front();
            // Keep the next evictions' probe runs coming (a window of
            // fetches in flight rather than a burst the CPU cannot hold).
            if let Some(&(ahead, sa)) = rec.touches.get(EVICTION_LOOKAHEAD - 1) {
                if sa != RUN {
                    self.pairs.prefetch(ahead);
                }
            }
            if let Probe::Found(i) = self.pairs.find(h, instance) {
                if stamp_of(self.pairs.slots[i].1) == s {
                    self.pairs.delete_at(i);
                    rec.len -= 1;
                    n -= 1;
                }
            }
        }
    }

    /// Stale touches are dropped at eviction; a set that never fills up
    /// would keep them, so drop them once they outnumber the live ones.
    /// (A run stays queued until its last block goes.)
    fn compact(&mut self, instance: usize) {
        let rec = &mut self.recency[instance];
        if rec.touches.len() <= 2 * rec.len + 64 {
            return;
        }
        let pairs = &self.pairs;
        rec.touches.retain(|&(h, s)| {
            s == RUN
                || match pairs.find(h, instance) {
                    Probe::Found(i) => stamp_of(pairs.slots[i].1) == s,
                    Probe::Vacant(_) => false,
                }
        });
    }

    /// For each instance, how many of `hashes` (a prompt's hierarchical
    /// block hashes) it holds, added into `counts` (one entry per instance;
    /// holders beyond its length are skipped).
    pub fn count_matches(&self, hashes: &[u64], counts: &mut [u32]) {
        let Some(first) = hashes.first() else {
            return;
        };
        match self.group(*first) {
            // One record: the blocks both have are their common prefix.
            Some(Group::Alone(slot)) => {
                let run = &self.runs[slot];
                let common = hashes
                    .iter()
                    .zip(&run.hashes)
                    .take_while(|(a, b)| a == b)
                    .count();
                let held = common.saturating_sub(run.first_live) as u32;
                if let Some(c) = counts.get_mut(run.instance) {
                    *c += held;
                }
            }
            // Shared, or no entry (new, or shared and swept out).
            Some(Group::Shared) | None => {
                for &h in hashes {
                    self.pairs.prefetch(h);
                }
                for &h in hashes {
                    self.pairs.holders(h, |i| {
                        if let Some(c) = counts.get_mut(i) {
                            *c += 1;
                        }
                    });
                }
            }
        }
    }
}

/// A prefix index with the match counts of the request being decided,
/// computed once for its decision and its `observe` (the `token-load`
/// scorer, the `in-flight-limit` filter and the predicted-latency
/// predictor): each instance's uncached prompt tokens `L − matched·B`, B the
/// run's KV block size.
pub struct RequestMatches {
    index: PrefixIndex,
    block_size: u64,
    counts: Vec<u32>,
    /// The request `counts` belong to.
    request: Option<u64>,
}

impl RequestMatches {
    /// `capacity` hashes per instance, blocks of `block_size` tokens.
    pub fn new(capacity: usize, block_size: u32) -> Self {
        RequestMatches {
            index: PrefixIndex::new(capacity),
            block_size: u64::from(block_size),
            counts: Vec::new(),
            request: None,
        }
    }

    /// Count `request`'s blocks held on each of `n` instances (once per
    /// request and cluster size).
    pub fn prepare(&mut self, request: &RequestView<'_>, n: usize) {
        if self.request == Some(request.id) && self.counts.len() == n {
            return;
        }
        self.counts.clear();
        self.counts.resize(n, 0);
        self.index
            .count_matches(request.block_hashes.as_slice(), &mut self.counts);
        self.request = Some(request.id);
    }

    /// Leading blocks of the prepared request held on instance `i`.
    pub fn matched(&self, i: usize) -> u32 {
        self.counts[i]
    }

    /// The prepared request's prompt tokens not held on instance `i`.
    pub fn uncached(&self, request: &RequestView<'_>, i: usize) -> u64 {
        let held = u64::from(self.counts[i]) * self.block_size;
        u64::from(request.input_tokens).saturating_sub(held)
    }

    /// `request` went to `chosen`: its blocks enter the index.
    pub fn record(&mut self, request: &RequestView<'_>, chosen: usize) {
        self.index.record(request.block_hashes.as_slice(), chosen);
        self.request = None;
    }
}

/// llm-d's `prefix-cache-scorer` match-length term (`matchLengthWeight` w,
/// `matchLengthScaleTokens` S): `w·min(1, matched·B/S)² + (1 − w)·ratio`,
/// `ratio` the scorer's own fraction. With `w = 0` it is `ratio`.
#[derive(Clone, Copy, Debug)]
pub struct MatchLength {
    pub weight: f64,
    pub scale_tokens: f64,
    pub block_size: u32,
}

impl MatchLength {
    /// From the scorer's parameters (checked: `w ∈ [0, 1]`, `S > 0` when
    /// `w > 0`, `B ≥ 1`).
    pub fn new(weight: f64, scale_tokens: f64, block_size: u32) -> Result<Self, String> {
        if !(0.0..=1.0).contains(&weight) {
            return Err(format!(
                "params.match_length_weight = {weight}: must be in [0, 1]"
            ));
        }
        if weight > 0.0 && !(scale_tokens.is_finite() && scale_tokens > 0.0) {
            return Err(format!(
                "params.match_length_scale_tokens = {scale_tokens}: must be > 0 when match_length_weight > 0"
            ));
        }
        if block_size == 0 {
            return Err("params.block_size must be ≥ 1".into());
        }
        Ok(MatchLength {
            weight,
            scale_tokens,
            block_size,
        })
    }

    /// The score of `matched` blocks whose plain score is `ratio`.
    #[inline]
    pub fn score(&self, matched: u32, ratio: f64) -> f64 {
        if self.weight == 0.0 {
            return ratio;
        }
        let len = (f64::from(matched) * f64::from(self.block_size) / self.scale_tokens).min(1.0);
        self.weight * len * len + (1.0 - self.weight) * ratio
    }
}

/// The parameters' documentation of [`MatchLength`].
macro_rules! match_length_doc {
    () => {
        "\
match_length_weight        (number in [0, 1], default 0)  weight w of llm-d's
                           match-length term: score = w·min(1, matched·B/S)²
                           + (1 − w)·(the plain score).
match_length_scale_tokens  (number > 0, tokens, default 8192)  S above.
block_size                 (integer ≥ 1, tokens, default 16)  tokens per block B:
                           the run's KV block size.
"
    };
}
pub(crate) use match_length_doc;

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(idx: &PrefixIndex, hashes: &[u64], instances: usize) -> Vec<u32> {
        let mut c = vec![0u32; instances];
        idx.count_matches(hashes, &mut c);
        c
    }

    /// Hashes here are hierarchical, as the host's are: `[1, 2, 3]` is a
    /// prompt of three blocks and `[1, 2]` its first two; `[4]` starts
    /// another prompt.
    #[test]
    fn lru_evicts_least_recently_touched() {
        let mut idx = PrefixIndex::new(3);
        idx.record(&[1, 2, 3], 0);
        idx.record(&[1], 0); // 1 refreshed: LRU order 2, 3, 1
        idx.record(&[4], 0); // evicts 2
        assert_eq!(idx.len(0), 3);
        assert_eq!(counts(&idx, &[1, 2, 3], 2), [2, 0]);
        assert_eq!(counts(&idx, &[4, 5], 2), [1, 0]);
        idx.record(&[1, 2], 1);
        assert_eq!(counts(&idx, &[1, 2], 2), [1, 2]);
        assert_eq!(counts(&idx, &[1, 2, 3], 2), [2, 2]);
    }

    /// A lone prompt is one run: it takes capacity like its blocks, loses
    /// its oldest blocks first, and matches the prompts that share a prefix
    /// with it; a second prompt of its group turns it into pairs.
    #[test]
    fn a_lone_prompt_is_one_run_until_its_group_is_shared() {
        let mut idx = PrefixIndex::new(5);
        idx.record(&[10, 11], 0);
        idx.record(&[1, 2, 3, 4], 0); // six blocks: 10 goes
        assert_eq!(idx.len(0), 5);
        assert!(matches!(idx.group(1), Some(Group::Alone(_))));
        assert_eq!(counts(&idx, &[1, 2, 3, 4], 1), [4]);
        assert_eq!(counts(&idx, &[1, 2, 7], 1), [2]);
        assert_eq!(counts(&idx, &[10, 11], 1), [1]);
        // Two more blocks: 11 and then the run's oldest, 1.
        idx.record(&[20, 21], 0);
        assert_eq!(counts(&idx, &[1, 2, 3, 4], 1), [3]);
        assert_eq!(counts(&idx, &[1, 2], 1), [1]);
        // A second prompt of the group [1, …]: the run becomes pairs. The
        // run's live blocks 2, 3, 4 are older than 20, 21: inserting 1
        // evicts 2, which is then inserted again and evicts 3, and 8
        // evicts 4.
        idx.record(&[1, 2, 8], 0);
        assert!(matches!(idx.group(1), Some(Group::Shared)));
        assert_eq!(idx.len(0), 5);
        assert_eq!(counts(&idx, &[1, 2, 3, 4], 1), [2]);
        assert_eq!(counts(&idx, &[1, 2, 8], 1), [3]);
        assert_eq!(counts(&idx, &[20, 21], 1), [2]);
        // Two lone prompts push out 20 and 21: that run is done and its
        // group forgotten; a third pushes out 1.
        idx.record(&[30], 0);
        idx.record(&[31], 0);
        assert!(idx.group(20).is_none());
        assert_eq!(counts(&idx, &[20, 21], 1), [0]);
        idx.record(&[32], 0);
        assert_eq!(counts(&idx, &[1, 2, 8], 1), [2]);
        assert_eq!(counts(&idx, &[30], 1), [1]);
    }

    #[test]
    fn instances_beyond_64_are_distinct() {
        let mut idx = PrefixIndex::new(10);
        idx.record(&[7, 8], 100);
        idx.record(&[7], 3);
        let c = counts(&idx, &[7, 8, 9], 130);
        assert_eq!(c[100], 2);
        assert_eq!(c[3], 1);
        assert_eq!(c.iter().sum::<u32>(), 3);
    }

    /// The index agrees with a plain model (per instance: hash → last
    /// touch, evict the smallest) over random prompts with hierarchical
    /// hashes: each new prompt shares a random prefix of an earlier one (or
    /// none) and then goes on with blocks of its own, and one record in
    /// six routes an earlier prompt again. Checked after every record: the
    /// set sizes, and the counts of earlier prompts, of prefixes of them
    /// and of prompts that branch off them. `share` is the chance (out of
    /// 8) that a new prompt shares a prefix; `spread` maps block numbers to
    /// hashes (identity puts them in one probe run: wrap-around, long
    /// shifts; a multiply spreads them). Each case runs twice: with the
    /// usual slack of group entries, and sweeping them at every chance.
    fn check_against_model(
        instances: usize,
        cap: usize,
        max_len: u64,
        share: u64,
        spread: fn(u64) -> u64,
    ) {
        check_against_model_with(instances, cap, max_len, share, spread, 1024);
        check_against_model_with(instances, cap, max_len, share, spread, 0);
    }

    fn check_against_model_with(
        instances: usize,
        cap: usize,
        max_len: u64,
        share: u64,
        spread: fn(u64) -> u64,
        group_slack: usize,
    ) {
        use std::collections::BTreeMap;
        let mut idx = PrefixIndex::with_group_slack(cap, group_slack);
        let mut model: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); instances];
        let mut clock = 0u64;
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut fresh = 0u64;
        let mut prompts: Vec<Vec<u64>> = Vec::new();
        for _ in 0..3000 {
            let inst = (next() % instances as u64) as usize;
            let hashes = if !prompts.is_empty() && next() % 6 == 0 {
                prompts[(next() % prompts.len() as u64) as usize].clone()
            } else {
                let mut h = Vec::new();
                if !prompts.is_empty() && next() % 8 < share {
                    let parent = &prompts[(next() % prompts.len() as u64) as usize];
                    let keep = (next() % (parent.len() as u64 + 1)) as usize;
                    h.extend_from_slice(&parent[..keep]);
                }
                for _ in 0..next() % (max_len + 1) {
                    fresh += 1;
                    h.push(spread(fresh));
                }
                prompts.push(h.clone());
                h
            };
            idx.record(&hashes, inst);
            for &h in &hashes {
                clock += 1;
                let m = &mut model[inst];
                m.insert(h, clock);
                if m.len() > cap {
                    let (&oldest, _) = m.iter().min_by_key(|(_, &t)| t).unwrap();
                    m.remove(&oldest);
                }
            }
            for (i, m) in model.iter().enumerate() {
                assert_eq!(idx.len(i), m.len(), "instance {i}");
            }
            let live = idx.runs.len() - idx.free.len() + idx.pairs.len;
            assert!(idx.groups.len() <= 2 * live + group_slack + 1);
            for _ in 0..4 {
                let p = &prompts[(next() % prompts.len() as u64) as usize];
                let mut query = p[..(next() % (p.len() as u64 + 1)) as usize].to_vec();
                if next() % 3 == 0 {
                    query.push(spread(u64::MAX - next() % 1000));
                }
                let c = counts(&idx, &query, instances);
                for (i, m) in model.iter().enumerate() {
                    let held = query.iter().filter(|h| m.contains_key(h)).count();
                    assert_eq!(c[i] as usize, held, "query {query:?} instance {i}");
                }
            }
        }
    }

    fn identity(h: u64) -> u64 {
        h
    }

    fn scatter(h: u64) -> u64 {
        h.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    #[test]
    fn matches_a_plain_lru_model_few_instances() {
        check_against_model(3, 40, 12, 4, identity);
        check_against_model(3, 40, 12, 4, scatter);
    }

    #[test]
    fn matches_a_plain_lru_model_many_holders_per_hash() {
        check_against_model(70, 6, 4, 7, identity);
        check_against_model(70, 6, 4, 7, scatter);
    }

    /// Prompts that share nothing but their re-routes (lone runs only, a
    /// run longer than the set), and prompts that nearly all share.
    #[test]
    fn matches_a_plain_lru_model_lone_and_shared_prompts() {
        check_against_model(4, 10, 25, 0, scatter);
        check_against_model(2, 3, 8, 0, identity);
        check_against_model(5, 30, 10, 8, scatter);
    }

    #[test]
    fn capacity_is_never_exceeded() {
        let mut idx = PrefixIndex::new(50);
        for r in 0..100u64 {
            let hs: Vec<u64> = (0..20)
                .map(|k| (r % 7) * 1000 + (r % 3) * 100 + k)
                .collect();
            idx.record(&hs, (r % 3) as usize);
            for i in 0..3 {
                assert!(idx.len(i) <= 50);
            }
        }
    }
}

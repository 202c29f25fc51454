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

use std::collections::VecDeque;

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

/// One instance's recency order: its touches in order, as `(hash, stamp)`.
#[derive(Default)]
struct Recency {
    touches: VecDeque<(u64, u64)>,
    /// Distinct hashes held.
    len: usize,
    clock: u64,
}

/// How many evictions ahead their probe runs are fetched.
const EVICTION_LOOKAHEAD: usize = 8;

/// Per-instance bounded LRU sets of block hashes, queried across instances.
pub(crate) struct PrefixIndex {
    capacity: usize,
    pairs: PairTable,
    recency: Vec<Recency>,
}

impl PrefixIndex {
    /// An index holding at most `capacity` hashes per instance.
    pub fn new(capacity: usize) -> Self {
        PrefixIndex {
            capacity,
            pairs: PairTable::new(),
            recency: Vec::new(),
        }
    }

    /// Hashes held for `instance`.
    #[cfg(test)]
    pub fn len(&self, instance: usize) -> usize {
        self.recency.get(instance).map_or(0, |r| r.len)
    }

    /// Record `hashes` as routed to `instance` (the observer of the seed):
    /// each hash is touched in order; the least recently used hash is evicted
    /// when the instance's set is full. Instances beyond [`MAX_INSTANCES`]
    /// are ignored.
    pub fn record(&mut self, hashes: &[u64], instance: usize) {
        if instance >= MAX_INSTANCES {
            return;
        }
        if self.recency.len() <= instance {
            self.recency.resize_with(instance + 1, Recency::default);
        }
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
        for &(h, _) in rec.touches.iter().take(evictions.min(EVICTION_LOOKAHEAD)) {
            self.pairs.prefetch(h);
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
                        self.evict_lru(instance);
                    }
                }
            }
            self.compact(instance);
        }
    }

    /// Remove the least recently used hash of `instance`.
    fn evict_lru(&mut self, instance: usize) {
        let rec = &mut self.recency[instance];
        while let Some((h, s)) = rec.touches.pop_front() {
            // Keep the next evictions' probe runs coming (a window of
            // fetches in flight rather than a burst the CPU cannot hold).
            if let Some(&(ahead, _)) = rec.touches.get(EVICTION_LOOKAHEAD - 1) {
                self.pairs.prefetch(ahead);
            }
            if let Probe::Found(i) = self.pairs.find(h, instance) {
                if stamp_of(self.pairs.slots[i].1) == s {
                    self.pairs.delete_at(i);
                    rec.len -= 1;
                    return;
                }
            }
        }
    }

    /// Stale touches are dropped at eviction; a set that never fills up
    /// would keep them, so drop them once they outnumber the live ones.
    fn compact(&mut self, instance: usize) {
        let rec = &mut self.recency[instance];
        if rec.touches.len() <= 2 * rec.len + 64 {
            return;
        }
        let pairs = &self.pairs;
        rec.touches.retain(|&(h, s)| match pairs.find(h, instance) {
            Probe::Found(i) => stamp_of(pairs.slots[i].1) == s,
            Probe::Vacant(_) => false,
        });
    }

    /// For each instance, how many of `hashes` it holds, added into `counts`
    /// (one entry per instance; holders beyond its length are skipped).
    pub fn count_matches(&self, hashes: &[u64], counts: &mut [u32]) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_least_recently_touched() {
        let mut idx = PrefixIndex::new(3);
        idx.record(&[1, 2, 3], 0);
        idx.record(&[1], 0); // 1 refreshed: LRU order 2, 3, 1
        idx.record(&[4], 0); // evicts 2
        assert_eq!(idx.len(0), 3);
        let mut c = [0u32; 2];
        idx.count_matches(&[1, 2, 3, 4], &mut c);
        assert_eq!(c, [3, 0]);
        idx.record(&[2, 3], 1);
        let mut c = [0u32; 2];
        idx.count_matches(&[2, 3], &mut c);
        assert_eq!(c, [1, 2]);
    }

    #[test]
    fn instances_beyond_64_are_distinct() {
        let mut idx = PrefixIndex::new(10);
        idx.record(&[7, 8], 100);
        idx.record(&[7], 3);
        let mut c = vec![0u32; 130];
        idx.count_matches(&[7, 8, 9], &mut c);
        assert_eq!(c[100], 2);
        assert_eq!(c[3], 1);
        assert_eq!(c.iter().sum::<u32>(), 3);
    }

    /// The index agrees with a plain model (per instance: hash → last touch,
    /// evict the smallest) over random records with shared and repeated
    /// hashes: few instances with large sets, and many instances with small
    /// sets sharing a small universe of hashes (long runs of holders of one
    /// hash). `spread` maps the universe to table positions: identity puts
    /// every hash in one probe run (wrap-around, long shifts), a multiply
    /// spreads them.
    fn check_against_model(instances: usize, cap: usize, universe: u64, spread: fn(u64) -> u64) {
        use std::collections::BTreeMap;
        let mut idx = PrefixIndex::new(cap);
        let mut model: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); instances];
        let mut clock = 0u64;
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let probe: Vec<u64> = (0..universe).map(spread).collect();
        for _ in 0..3000 {
            let inst = (next() % instances as u64) as usize;
            let n = (next() % 12) as usize;
            let hashes: Vec<u64> = (0..n).map(|_| spread(next() % universe)).collect();
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
            let mut counts = vec![0u32; instances];
            idx.count_matches(&probe, &mut counts);
            for i in 0..instances {
                assert_eq!(counts[i] as usize, model[i].len());
                assert_eq!(idx.len(i), model[i].len());
            }
            let one = spread(next() % universe);
            let mut c = vec![0u32; instances];
            idx.count_matches(&[one], &mut c);
            for i in 0..instances {
                assert_eq!(
                    c[i] == 1,
                    model[i].contains_key(&one),
                    "hash {one} instance {i}"
                );
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
        check_against_model(3, 40, 150, identity);
        check_against_model(3, 40, 150, scatter);
    }

    #[test]
    fn matches_a_plain_lru_model_many_holders_per_hash() {
        check_against_model(70, 6, 20, identity);
        check_against_model(70, 6, 20, scatter);
    }

    #[test]
    fn capacity_is_never_exceeded() {
        let mut idx = PrefixIndex::new(50);
        for r in 0..100u64 {
            let hs: Vec<u64> = (0..20).map(|k| r * 1000 + k).collect();
            idx.record(&hs, (r % 3) as usize);
            for i in 0..3 {
                assert!(idx.len(i) <= 50);
            }
        }
    }
}

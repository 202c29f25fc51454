//! The router-side prefix index: per instance, an LRU set of the block hashes
//! of requests recently routed there (bounded capacity), plus one global map
//! hash → bitset of instances holding it, so scoring a request costs one
//! lookup per block whatever the number of instances.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// Block hashes are already well mixed: hash them as themselves.
#[derive(Default)]
pub(crate) struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }
}

type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdentityHasher>>;

/// One instance's LRU set of block hashes.
///
/// Recency is a stamp per hash (the clock of its latest touch) plus a queue
/// of touches in order; a queued touch is current when its stamp is still the
/// hash's stamp. The least recently used hash is the first current touch.
/// Touching appends to the queue (sequential memory) instead of relinking a
/// list node, which is what makes recording cheap.
#[derive(Default)]
struct Lru {
    at: IdMap<u64>,
    touches: VecDeque<(u64, u64)>,
    clock: u64,
}

impl Lru {
    fn len(&self) -> usize {
        self.at.len()
    }

    /// Touch `hash`: refresh it if present (returns false), else insert it
    /// (returns true).
    fn touch(&mut self, hash: u64) -> bool {
        self.clock += 1;
        let stamp = self.clock;
        let new = match self.at.entry(hash) {
            Entry::Occupied(mut e) => {
                *e.get_mut() = stamp;
                false
            }
            Entry::Vacant(v) => {
                v.insert(stamp);
                true
            }
        };
        self.touches.push_back((hash, stamp));
        // Stale touches are dropped at eviction; a set that never fills up
        // would keep them, so compact once they outnumber the live ones.
        if self.touches.len() > 2 * self.at.len() + 64 {
            let at = &self.at;
            self.touches.retain(|(h, s)| at.get(h) == Some(s));
        }
        new
    }

    /// Remove and return the least recently used hash.
    fn pop_lru(&mut self) -> Option<u64> {
        while let Some((h, s)) = self.touches.pop_front() {
            if let Entry::Occupied(e) = self.at.entry(h) {
                if *e.get() == s {
                    e.remove();
                    return Some(h);
                }
            }
        }
        None
    }
}

/// Per-instance bounded LRU sets with a shared hash → instances map.
pub(crate) struct PrefixIndex {
    capacity: usize,
    words: usize,
    lrus: Vec<Lru>,
    /// hash → row in `bits` (a bitset of `words` u64 over instances).
    rows: IdMap<u32>,
    bits: Vec<u64>,
    free_rows: Vec<u32>,
}

impl PrefixIndex {
    /// An index holding at most `capacity` hashes per instance.
    pub fn new(capacity: usize) -> Self {
        PrefixIndex {
            capacity,
            words: 0,
            lrus: Vec::new(),
            rows: IdMap::default(),
            bits: Vec::new(),
            free_rows: Vec::new(),
        }
    }

    fn ensure(&mut self, instances: usize) {
        if self.lrus.len() < instances {
            // Instance count is fixed for a run; size once (re-layout if it grows).
            let words = instances.div_ceil(64);
            if words != self.words && !self.rows.is_empty() {
                let mut bits = vec![0u64; (self.bits.len() / self.words.max(1)) * words];
                for (r, chunk) in self.bits.chunks(self.words).enumerate() {
                    bits[r * words..r * words + chunk.len()].copy_from_slice(chunk);
                }
                self.bits = bits;
            }
            self.words = words;
            self.lrus.resize_with(instances, Lru::default);
        }
    }

    /// Hashes held for `instance`.
    #[cfg(test)]
    pub fn len(&self, instance: usize) -> usize {
        self.lrus.get(instance).map_or(0, Lru::len)
    }

    /// Record `hashes` as routed to `instance` (the observer of the seed):
    /// each hash is touched in order; the least recently used hash is evicted
    /// when the instance's set is full.
    pub fn record(&mut self, hashes: &[u64], instance: usize, instances: usize) {
        self.ensure(instances.max(instance + 1));
        let (word, bit) = (instance / 64, 1u64 << (instance % 64));
        for &h in hashes {
            if !self.lrus[instance].touch(h) {
                continue;
            }
            let (free_rows, bits, words) = (&mut self.free_rows, &mut self.bits, self.words);
            let row = *self.rows.entry(h).or_insert_with(|| match free_rows.pop() {
                Some(r) => r,
                None => {
                    bits.resize(bits.len() + words, 0);
                    (bits.len() / words - 1) as u32
                }
            });
            self.bits[row as usize * self.words + word] |= bit;
            if self.lrus[instance].len() > self.capacity {
                let old = self.lrus[instance].pop_lru().expect("non-empty");
                self.clear_bit(old, word, bit);
            }
        }
    }

    fn clear_bit(&mut self, hash: u64, word: usize, bit: u64) {
        if let Entry::Occupied(e) = self.rows.entry(hash) {
            let r = *e.get();
            let base = r as usize * self.words;
            self.bits[base + word] &= !bit;
            if self.bits[base..base + self.words].iter().all(|&w| w == 0) {
                e.remove();
                self.free_rows.push(r);
            }
        }
    }

    /// For each instance, how many of `hashes` it holds, added into `counts`
    /// (one entry per instance).
    pub fn count_matches(&self, hashes: &[u64], counts: &mut [u32]) {
        if self.words == 0 {
            return;
        }
        for h in hashes {
            if let Some(&r) = self.rows.get(h) {
                let base = r as usize * self.words;
                for (w, &word) in self.bits[base..base + self.words].iter().enumerate() {
                    let mut m = word;
                    while m != 0 {
                        let i = w * 64 + m.trailing_zeros() as usize;
                        if let Some(c) = counts.get_mut(i) {
                            *c += 1;
                        }
                        m &= m - 1;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_least_recently_touched_and_keeps_bits_consistent() {
        let mut idx = PrefixIndex::new(3);
        idx.record(&[1, 2, 3], 0, 2);
        idx.record(&[1], 0, 2); // 1 refreshed: LRU order 2, 3, 1
        idx.record(&[4], 0, 2); // evicts 2
        assert_eq!(idx.len(0), 3);
        let mut c = [0u32; 2];
        idx.count_matches(&[1, 2, 3, 4], &mut c);
        assert_eq!(c, [3, 0]);
        idx.record(&[2, 3], 1, 2);
        let mut c = [0u32; 2];
        idx.count_matches(&[2, 3], &mut c);
        assert_eq!(c, [1, 2]);
    }

    #[test]
    fn many_instances_use_several_words() {
        let mut idx = PrefixIndex::new(10);
        idx.record(&[7, 8], 100, 130);
        idx.record(&[7], 3, 130);
        let mut c = vec![0u32; 130];
        idx.count_matches(&[7, 8, 9], &mut c);
        assert_eq!(c[100], 2);
        assert_eq!(c[3], 1);
        assert_eq!(c.iter().sum::<u32>(), 3);
    }

    /// The index agrees with a plain model (per instance: hash → last touch,
    /// evict the smallest) over random records with shared and repeated hashes.
    #[test]
    fn matches_a_plain_lru_model() {
        use std::collections::BTreeMap;
        let cap = 40;
        let mut idx = PrefixIndex::new(cap);
        let mut model: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); 3];
        let mut clock = 0u64;
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..3000 {
            let inst = (next() % 3) as usize;
            let n = (next() % 12) as usize;
            let hashes: Vec<u64> = (0..n).map(|_| next() % 150).collect();
            idx.record(&hashes, inst, 3);
            for &h in &hashes {
                clock += 1;
                let m = &mut model[inst];
                m.insert(h, clock);
                if m.len() > cap {
                    let (&oldest, _) = m.iter().min_by_key(|(_, &t)| t).unwrap();
                    m.remove(&oldest);
                }
            }
            let probe: Vec<u64> = (0..150).collect();
            let mut counts = [0u32; 3];
            idx.count_matches(&probe, &mut counts);
            for i in 0..3 {
                assert_eq!(counts[i] as usize, model[i].len());
                assert_eq!(idx.len(i), model[i].len());
            }
            let one = next() % 150;
            let mut c = [0u32; 3];
            idx.count_matches(&[one], &mut c);
            for i in 0..3 {
                assert_eq!(
                    c[i] == 1,
                    model[i].contains_key(&one),
                    "hash {one} instance {i}"
                );
            }
        }
    }

    #[test]
    fn capacity_is_never_exceeded() {
        let mut idx = PrefixIndex::new(50);
        for r in 0..100u64 {
            let hs: Vec<u64> = (0..20).map(|k| r * 1000 + k).collect();
            idx.record(&hs, (r % 3) as usize, 3);
            for i in 0..3 {
                assert!(idx.len(i) <= 50);
            }
        }
    }
}

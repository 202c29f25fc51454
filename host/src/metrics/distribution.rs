//! Exact summary statistics of a latency population.
//!
//! Percentiles use linear interpolation between closest ranks (R-7, Excel
//! `PERCENTILE.INC`), as the reference simulator does: for `n` sorted values
//! and percentile `p`, `rank = p/100 · (n − 1)`, and the result interpolates
//! between `x[floor(rank)]` and `x[ceil(rank)]`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::engine::Tick;

/// Mean, p50, p90, p95, p99, min and max of a population, in milliseconds.
/// `None` when the population is empty.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// Statistics in ticks, before unit conversion.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TickStats {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
}

impl TickStats {
    /// Convert to milliseconds.
    pub fn to_ms(self) -> Summary {
        let ms = |v: f64| Some(v / 1000.0);
        Summary {
            count: self.count,
            mean: ms(self.mean),
            p50: ms(self.p50),
            p90: ms(self.p90),
            p95: ms(self.p95),
            p99: ms(self.p99),
            min: ms(self.min),
            max: ms(self.max),
        }
    }
}

/// R-7 percentile of a sorted population given by an accessor.
fn percentile(n: u64, p: f64, at: &impl Fn(u64) -> f64) -> f64 {
    let rank = p / 100.0 * (n - 1) as f64;
    let lo = rank.floor() as u64;
    let hi = rank.ceil() as u64;
    let (a, b) = (at(lo), at(hi));
    if lo == hi {
        a
    } else {
        a + (b - a) * (rank - lo as f64)
    }
}

/// Statistics of a sorted population of `n > 0` values with sum `sum`,
/// given the value at any rank.
fn summarize(n: u64, sum: f64, at: impl Fn(u64) -> f64) -> TickStats {
    TickStats {
        count: n,
        mean: sum / n as f64,
        p50: percentile(n, 50.0, &at),
        p90: percentile(n, 90.0, &at),
        p95: percentile(n, 95.0, &at),
        p99: percentile(n, 99.0, &at),
        min: at(0),
        max: at(n - 1),
    }
}

/// Statistics of `values` (sorted in place). `None` if empty.
pub fn stats_of(values: &mut [Tick]) -> Option<TickStats> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let n = values.len() as u64;
    let sum: f64 = values.iter().map(|&v| v as f64).sum();
    Some(summarize(n, sum, |i| values[i as usize] as f64))
}

/// A multiset of tick values stored as value → count: exact percentiles in
/// memory proportional to the number of *distinct* values. Inter-token
/// latencies are step durations, which repeat a lot.
///
/// Counts live in a dense window of values (`dense[v − base]`) where
/// possible, and in a hash map outside it. Step durations drift slowly from
/// one step to the next, so consecutive updates hit nearby cells of the
/// window (usually the same cache line), where a hash map would scatter
/// neighbouring values over the table and miss the cache once per step.
/// The window only widens while it stays within a few cells per distinct
/// value (see [`CountMap::widen_to`]), so memory stays proportional to the
/// distinct values however they are spread. Statistics sort the values
/// first, so where a count is kept never shows in the result.
#[derive(Clone, Debug, Default)]
pub struct CountMap {
    /// Counts of the values `base .. base + dense.len()`.
    dense: Vec<u64>,
    base: Tick,
    /// Cells of `dense` with a nonzero count.
    dense_distinct: usize,
    /// Counts of values outside the window (never inside it).
    sparse: HashMap<Tick, u64, BuildHasherDefault<TickHasher>>,
    n: u64,
    last: Option<(Tick, u64)>,
    /// The hash map's size at which the window is placed anew
    /// ([`CountMap::recenter`]); 0 before the first time.
    recenter_at: usize,
}

/// The hash map's least size at which the window may be placed anew.
const RECENTER_FLOOR: usize = 256;

/// Cells the window may have regardless of the distinct values seen.
const WINDOW_FLOOR: usize = 4096;
/// Further cells allowed per distinct value (8 bytes each: about what a
/// hash map entry costs at its usual load).
const CELLS_PER_VALUE: usize = 4;

/// A fast hasher for tick values (one multiply; the map is never iterated
/// in hash order where order matters: statistics sort the values first).
#[derive(Clone, Copy, Debug, Default)]
pub struct TickHasher(u64);

impl Hasher for TickHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    #[inline]
    fn write_i64(&mut self, n: i64) {
        // Fibonacci hashing: the multiply moves the low bits' entropy up,
        // where the table takes its position and tag bits from.
        self.0 = (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

impl CountMap {
    /// Add one sample.
    #[inline]
    pub fn add(&mut self, v: Tick) {
        // Consecutive equal samples are common (one step, many requests).
        match &mut self.last {
            Some((lv, c)) if *lv == v => *c += 1,
            _ => {
                self.flush();
                self.last = Some((v, 1));
            }
        }
    }

    /// Add `count` samples equal to `v` (the same as `count` calls of
    /// [`CountMap::add`]).
    #[inline]
    pub fn add_n(&mut self, v: Tick, count: u64) {
        if count == 0 {
            return;
        }
        match &mut self.last {
            Some((lv, c)) if *lv == v => *c += count,
            _ => {
                self.flush();
                self.last = Some((v, count));
            }
        }
    }

    #[inline]
    fn flush(&mut self) {
        if let Some((v, c)) = self.last.take() {
            self.count(v, c);
        }
    }

    /// Add `c` samples equal to `v` to the stored counts.
    #[inline]
    fn count(&mut self, v: Tick, c: u64) {
        self.n += c;
        let i = v.wrapping_sub(self.base) as u64;
        if i < self.dense.len() as u64 {
            let cell = &mut self.dense[i as usize];
            self.dense_distinct += usize::from(*cell == 0);
            *cell += c;
        } else {
            self.count_outside(v, c);
        }
    }

    /// [`CountMap::count`] for a value outside the window: widen the window
    /// to take it if that is cheap enough, else count it in the hash map.
    #[inline(never)]
    fn count_outside(&mut self, v: Tick, c: u64) {
        if self.widen_to(v) {
            let cell = &mut self.dense[(v - self.base) as usize];
            self.dense_distinct += usize::from(*cell == 0);
            *cell += c;
        } else {
            *self.sparse.entry(v).or_insert(0) += c;
            if self.sparse.len() >= self.recenter_at.max(RECENTER_FLOOR)
                && self.sparse.len() > self.dense_distinct
            {
                self.recenter();
            }
        }
    }

    /// Place the window anew over the span of values holding the most
    /// distinct values (at most the cells [`CountMap::widen_to`] allows),
    /// when most values seen lie outside it: the window is placed where
    /// the first values fell, and step durations drift with the load, so a
    /// long run could otherwise leave nearly every update to the hash map
    /// (16 instances × 10,000 requests: 1,100–1,500 distinct values in the
    /// map against 40–400 in the window). Runs again only once the distinct
    /// values have doubled, so O(log distinct) times.
    fn recenter(&mut self) {
        let mut values: Vec<Tick> = self.pairs_stored().map(|(v, _)| v).collect();
        values.sort_unstable();
        let limit = WINDOW_FLOOR + CELLS_PER_VALUE * values.len();
        // The densest span of `limit` cells: the most values within it.
        let (mut best, mut best_first) = (0, 0);
        let mut first = 0;
        for (last, &v) in values.iter().enumerate() {
            while v - values[first] >= limit as Tick {
                first += 1;
            }
            if last + 1 - first > best {
                (best, best_first) = (last + 1 - first, first);
            }
        }
        let span = values[best_first + best - 1] - values[best_first];
        let base = values[best_first] - (limit as Tick - 1 - span) / 2;
        let old = std::mem::take(self);
        let (n, last) = (old.n, old.last);
        self.dense = vec![0; limit];
        self.base = base;
        for (v, c) in old.pairs_stored() {
            let i = v.wrapping_sub(base) as u64;
            if i < limit as u64 {
                self.dense[i as usize] = c;
                self.dense_distinct += 1;
            } else {
                self.sparse.insert(v, c);
            }
        }
        self.n = n;
        self.last = last;
        self.recenter_at = 2 * values.len();
    }

    /// Widen the window so that it covers `v`, at least by half its size
    /// (so a window is rebuilt O(log span) times) and to at most
    /// [`WINDOW_FLOOR`] + [`CELLS_PER_VALUE`] cells per distinct value;
    /// counts of the hash map that fall inside the new window move into it.
    /// Returns false, changing nothing, when that is not possible.
    fn widen_to(&mut self, v: Tick) -> bool {
        let old_len = self.dense.len();
        let limit = WINDOW_FLOOR + CELLS_PER_VALUE * (self.dense_distinct + self.sparse.len() + 1);
        let (lo, hi) = if old_len == 0 {
            (v, v)
        } else {
            let hi = self.base + (old_len as Tick - 1);
            (v.min(self.base), v.max(hi))
        };
        let Some(needed) = hi
            .checked_sub(lo)
            .and_then(|d| usize::try_from(d).ok())
            .and_then(|d| d.checked_add(1))
        else {
            return false;
        };
        let len = needed.max((2 * old_len).max(256).min(limit));
        if needed > limit || len < old_len + old_len / 2 {
            return false;
        }
        // Grow towards `v`: downwards when it lies below the window.
        let Some(base) = (if v < self.base && old_len > 0 {
            hi.checked_sub(len as Tick - 1)
        } else {
            Some(lo)
        }) else {
            return false;
        };
        let mut dense = vec![0u64; len];
        if old_len > 0 {
            let shift = (self.base - base) as usize;
            dense[shift..shift + old_len].copy_from_slice(&self.dense);
        }
        let end = base + (len as Tick - 1);
        let mut distinct = self.dense_distinct;
        self.sparse.retain(|&value, &mut count| {
            if (base..=end).contains(&value) {
                dense[(value - base) as usize] = count;
                distinct += 1;
                false
            } else {
                true
            }
        });
        self.dense = dense;
        self.base = base;
        self.dense_distinct = distinct;
        true
    }

    /// Every stored `(value, count)`, the pending run included, unordered.
    fn pairs(&self) -> impl Iterator<Item = (Tick, u64)> + '_ {
        self.pairs_stored().chain(self.last)
    }

    /// Every stored `(value, count)` but the pending run (each value once),
    /// unordered.
    fn pairs_stored(&self) -> impl Iterator<Item = (Tick, u64)> + '_ {
        let base = self.base;
        self.dense
            .iter()
            .enumerate()
            .filter(|&(_, &c)| c != 0)
            .map(move |(i, &c)| (base + i as Tick, c))
            .chain(self.sparse.iter().map(|(&v, &c)| (v, c)))
    }

    /// Merge another map into this one.
    pub fn merge(&mut self, other: &CountMap) {
        self.flush();
        for (v, c) in other.pairs() {
            self.count(v, c);
        }
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.n + self.last.map_or(0, |(_, c)| c)
    }

    /// True when no sample was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Exact statistics. `None` if empty.
    pub fn stats(&self) -> Option<TickStats> {
        if self.is_empty() {
            return None;
        }
        let mut pairs: Vec<(Tick, u64)> = self.pairs().collect();
        pairs.sort_unstable();
        // A value is stored once, except the pending run's value, which may
        // also have a stored count: merge equal values.
        pairs.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                a.1 += b.1;
            }
            same
        });
        let mut cum = Vec::with_capacity(pairs.len());
        let mut acc = 0u64;
        let mut sum = 0f64;
        for &(v, c) in &pairs {
            acc += c;
            cum.push(acc);
            sum += v as f64 * c as f64;
        }
        Some(summarize(acc, sum, |i| {
            pairs[cum.partition_point(|&c| c <= i)].0 as f64
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic xorshift64 stream for the property-style tests.
    pub(super) fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    #[test]
    fn r7_percentiles_match_the_reference_example() {
        // core-engine.md §7.3: [1000, 2000, 3000, 4000], p90 → 3.7 ms.
        let mut v = vec![4000, 1000, 3000, 2000];
        let s = stats_of(&mut v).unwrap().to_ms();
        assert_eq!(s.p90, Some(3.7));
        assert_eq!(s.mean, Some(2.5));
        assert_eq!(s.p50, Some(2.5));
        assert_eq!(s.min, Some(1.0));
        assert_eq!(s.max, Some(4.0));
        assert_eq!(stats_of(&mut []), None);
        let one = stats_of(&mut [7]).unwrap();
        assert_eq!((one.p99, one.mean), (7.0, 7.0));
    }

    #[test]
    fn count_map_equals_sorted_vector() {
        let samples: Vec<Tick> = (0..5000)
            .map(|i| ((i * 7919) % 97) * 10 + (i % 3))
            .collect();
        let mut cm = CountMap::default();
        for &s in &samples {
            cm.add(s);
        }
        let mut v = samples.clone();
        assert_eq!(cm.stats(), stats_of(&mut v));
        let mut a = CountMap::default();
        let mut b = CountMap::default();
        for (i, &s) in samples.iter().enumerate() {
            if i % 2 == 0 {
                a.add(s)
            } else {
                b.add(s)
            }
        }
        a.merge(&b);
        assert_eq!(a.len(), 5000);
        // Runs of equal samples added at once.
        let mut runs = CountMap::default();
        let mut i = 0;
        while i < samples.len() {
            let j = (i..samples.len())
                .find(|&j| samples[j] != samples[i])
                .unwrap_or(samples.len());
            runs.add_n(samples[i], (j - i) as u64);
            runs.add_n(samples[i], 0);
            i = j;
        }
        assert_eq!(runs.stats(), cm.stats());
        let (x, y) = (a.stats().unwrap(), cm.stats().unwrap());
        assert_eq!(
            (x.p50, x.p99, x.min, x.max, x.count),
            (y.p50, y.p99, y.min, y.max, y.count)
        );
        assert!((x.mean - y.mean).abs() < 1e-9);
    }

    /// Values spread far apart, drifting up and down, with bursts of new
    /// distinct values: the window widens both ways, refuses to widen past
    /// its bound (counts go to the hash map) and later takes them over;
    /// statistics and merges stay those of the sorted samples.
    #[test]
    fn count_map_window_and_map_agree_with_sorted_vector() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        let mut samples: Vec<Tick> = Vec::new();
        let mut level: Tick = 50_000;
        for round in 0..40 {
            for _ in 0..500 {
                level = (level + (next() % 201) as Tick - 100).max(0);
                samples.push(level);
            }
            // Outliers far from the drifting level, below and above.
            samples.push((next() % 3_000_000) as Tick);
            samples.push(level / 4 + round);
            if round % 7 == 0 {
                level = (next() % 1_000_000) as Tick;
            }
        }
        let mut all = CountMap::default();
        let (mut a, mut b) = (CountMap::default(), CountMap::default());
        for (i, &s) in samples.iter().enumerate() {
            all.add(s);
            if i % 3 == 0 {
                a.add(s)
            } else {
                b.add_n(s, 1)
            }
        }
        assert!(!all.sparse.is_empty() && all.dense_distinct > 0);
        let mut sorted = samples.clone();
        let want = stats_of(&mut sorted);
        assert_eq!(all.stats(), want);
        a.merge(&b);
        assert_eq!(a.stats(), want);
        assert_eq!(a.len(), samples.len() as u64);
        // The window stays within its bound of cells per distinct value.
        let distinct = {
            let mut d = samples.clone();
            d.sort_unstable();
            d.dedup();
            d.len()
        };
        all.flush();
        assert!(all.dense.len() <= WINDOW_FLOOR + CELLS_PER_VALUE * distinct);
        assert_eq!(all.dense_distinct + all.sparse.len(), distinct);
        assert_eq!(all.stats(), want);
    }

    /// Step durations that start low and settle far higher, spread over
    /// more cells than the window may take at first: the window placed
    /// where the first values fell is placed anew over the bulk, so most
    /// values end in it; statistics stay those of the sorted samples.
    #[test]
    fn count_map_window_moves_to_where_the_values_are() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let mut samples: Vec<Tick> = (0..300).map(|i| 1_000 + i * 3).collect();
        samples.extend((0..20_000).map(|_| 400_000 + (next() % 12_000) as Tick));
        let mut cm = CountMap::default();
        let mut sorted = samples.clone();
        for (i, &s) in samples.iter().enumerate() {
            cm.add_n(s, 1 + i as u64 % 3);
            sorted.extend(std::iter::repeat_n(s, i % 3));
        }
        cm.flush();
        assert!(
            cm.dense_distinct > 4 * cm.sparse.len(),
            "{} distinct values in the window, {} in the map",
            cm.dense_distinct,
            cm.sparse.len()
        );
        let distinct = {
            let mut d = samples.clone();
            d.sort_unstable();
            d.dedup();
            d.len()
        };
        assert!(cm.dense.len() <= WINDOW_FLOOR + CELLS_PER_VALUE * distinct);
        assert_eq!(cm.dense_distinct + cm.sparse.len(), distinct);
        assert_eq!(cm.stats(), stats_of(&mut sorted));
        let mut merged = CountMap::default();
        merged.merge(&cm);
        assert_eq!(merged.stats(), cm.stats());
    }
}

/// A latency sample packed with its SLO class in the low 8 bits, so that one
/// vector serves the instance, the cluster and every class without copies
/// (8 bytes per sample). Sorting packed values sorts by latency.
#[inline]
pub fn pack(value: Tick, class: u8) -> u64 {
    debug_assert!(value >= 0, "latencies are non-negative");
    ((value.max(0) as u64) << 8) | u64::from(class)
}

/// The latency of a packed sample.
#[inline]
pub fn unpack_value(p: u64) -> Tick {
    (p >> 8) as Tick
}

/// The class of a packed sample.
#[inline]
pub fn unpack_class(p: u64) -> u8 {
    (p & 0xff) as u8
}

/// Exact statistics over the union of sorted runs of packed samples, keeping
/// only samples accepted by `keep`: one counting pass, then each needed rank
/// found by bisection over values when every sample is kept (a merge walked
/// every sample once per run head, 64 times at 64 instances), or by one
/// merge over a heap of run heads when `keep` rejects some (a per-class
/// statistic: bisection would need a copy of the kept samples, 8 bytes
/// each at the end of a 100M-request run).
pub fn stats_of_runs(runs: &[&[u64]], keep: impl Fn(u64) -> bool) -> Option<TickStats> {
    let mut n = 0u64;
    let mut sum = 0f64;
    let mut total = 0usize;
    for r in runs {
        debug_assert!(r.windows(2).all(|w| w[0] <= w[1]), "runs must be sorted");
        total += r.len();
        for &p in r.iter() {
            if keep(p) {
                n += 1;
                sum += unpack_value(p) as f64;
            }
        }
    }
    if n == 0 {
        return None;
    }
    if n as usize == total {
        let kept: Vec<&[u64]> = runs.iter().copied().filter(|r| !r.is_empty()).collect();
        return Some(summarize(n, sum, |r| {
            unpack_value(at_rank(&kept, r)) as f64
        }));
    }
    // `keep` rejects some (a per-class statistic): one merge of the kept
    // samples over a heap of run heads picks the values at the ranks
    // `summarize` reads, copying none.
    let wanted = ranks_read(n);
    let values = kept_at_ranks(runs, &keep, &wanted);
    Some(summarize(n, sum, |r| {
        values[wanted.binary_search(&r).expect("rank was requested")]
    }))
}

/// The ranks [`summarize`] reads of a population of `n`, ascending, each
/// once (min, max and the two neighbours of every percentile).
fn ranks_read(n: u64) -> Vec<u64> {
    let read = std::cell::RefCell::new(Vec::new());
    summarize(n, 0.0, |rank| {
        read.borrow_mut().push(rank);
        0.0
    });
    let mut ranks = read.into_inner();
    ranks.sort_unstable();
    ranks.dedup();
    ranks
}

/// The values at the (ascending) ranks `wanted` of the samples of sorted
/// `runs` that `keep` accepts, by a k-way merge over a heap of run heads.
fn kept_at_ranks(runs: &[&[u64]], keep: &impl Fn(u64) -> bool, wanted: &[u64]) -> Vec<f64> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let next_kept = |r: &[u64], mut i: usize| {
        while i < r.len() && !keep(r[i]) {
            i += 1;
        }
        i
    };
    let mut heads: BinaryHeap<Reverse<(u64, usize, usize)>> = BinaryHeap::new();
    for (k, r) in runs.iter().enumerate() {
        let i = next_kept(r, 0);
        if i < r.len() {
            heads.push(Reverse((r[i], k, i)));
        }
    }
    let mut values = Vec::with_capacity(wanted.len());
    let mut rank = 0u64;
    while values.len() < wanted.len() {
        let Reverse((v, k, i)) = heads.pop().expect("the counted samples");
        while values.len() < wanted.len() && wanted[values.len()] == rank {
            values.push(unpack_value(v) as f64);
        }
        rank += 1;
        let j = next_kept(runs[k], i + 1);
        if j < runs[k].len() {
            heads.push(Reverse((runs[k][j], k, j)));
        }
    }
    values
}

/// The sample at `rank` (0-based, < the number of samples) of the union of
/// non-empty sorted runs: the smallest value `v` with more than `rank`
/// samples `≤ v` (always a sample), by bisection over the packed values.
fn at_rank(runs: &[&[u64]], rank: u64) -> u64 {
    if let [run] = runs {
        return run[rank as usize];
    }
    let mut lo = runs.iter().map(|r| r[0]).min().expect("a sample exists");
    let mut hi = runs
        .iter()
        .map(|r| r[r.len() - 1])
        .max()
        .expect("a sample exists");
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let at_most: u64 = runs
            .iter()
            .map(|r| r.partition_point(|&p| p <= mid) as u64)
            .sum();
        if at_most > rank {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

#[cfg(test)]
mod run_tests {
    use super::tests::xorshift;
    use super::*;

    /// Every rank of many runs (empty ones, one-sample ones, long repeats,
    /// values shared across runs) equals that rank of the sorted union, and
    /// every class's statistics those of its sorted samples.
    #[test]
    fn every_rank_of_many_runs_is_the_sorted_unions() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        for case in 0..40 {
            let k = 1 + case % 70;
            let mut runs: Vec<Vec<u64>> = (0..k)
                .map(|_| {
                    let len = match next() % 4 {
                        0 => 0,
                        1 => 1,
                        _ => (next() % 300) as usize,
                    };
                    let span = 1 + next() % 5000;
                    (0..len)
                        .map(|_| pack((next() % span) as Tick, (next() % 3) as u8))
                        .collect()
                })
                .collect();
            for r in &mut runs {
                r.sort_unstable();
            }
            let mut all: Vec<u64> = runs.iter().flatten().copied().collect();
            all.sort_unstable();
            let refs: Vec<&[u64]> = runs
                .iter()
                .map(Vec::as_slice)
                .filter(|r| !r.is_empty())
                .collect();
            for (rank, &want) in all.iter().enumerate() {
                assert_eq!(
                    at_rank(&refs, rank as u64),
                    want,
                    "case {case}, rank {rank}"
                );
            }
            // Per class (the merge path), against the sorted kept samples.
            let runs_all: Vec<&[u64]> = runs.iter().map(Vec::as_slice).collect();
            for c in 0..4u8 {
                let mut v: Vec<Tick> = all
                    .iter()
                    .filter(|&&p| unpack_class(p) == c)
                    .map(|&p| unpack_value(p))
                    .collect();
                let want = stats_of(&mut v);
                let got = stats_of_runs(&runs_all, |p| unpack_class(p) == c);
                let key = |s: Option<TickStats>| {
                    s.map(|s| (s.count, s.p50, s.p90, s.p95, s.p99, s.min, s.max))
                };
                assert_eq!(key(got), key(want), "case {case}, class {c}");
            }
        }
    }

    #[test]
    fn merged_runs_equal_one_sorted_vector_per_filter() {
        let mut runs: Vec<Vec<u64>> = (0..3)
            .map(|k| {
                (0..(500 + k * 37))
                    .map(|i: i64| pack((i * 7919 + k * 13) % 10_007, ((i + k) % 5) as u8))
                    .collect()
            })
            .collect();
        for r in &mut runs {
            r.sort_unstable();
        }
        let refs: Vec<&[u64]> = runs.iter().map(Vec::as_slice).collect();
        let all: Vec<u64> = runs.iter().flatten().copied().collect();
        let plain = |keep: &dyn Fn(u64) -> bool| {
            let mut v: Vec<Tick> = all
                .iter()
                .copied()
                .filter(|&p| keep(p))
                .map(unpack_value)
                .collect();
            stats_of(&mut v)
        };
        let s = stats_of_runs(&refs, |_| true).unwrap();
        let p = plain(&|_| true).unwrap();
        assert_eq!(
            (s.count, s.p50, s.p90, s.p95, s.p99, s.min, s.max),
            (p.count, p.p50, p.p90, p.p95, p.p99, p.min, p.max)
        );
        assert!((s.mean - p.mean).abs() < 1e-6);
        for c in 0..5u8 {
            let s = stats_of_runs(&refs, |x| unpack_class(x) == c).unwrap();
            let p = plain(&|x| unpack_class(x) == c).unwrap();
            assert_eq!(
                (s.count, s.p50, s.p99, s.min, s.max),
                (p.count, p.p50, p.p99, p.min, p.max)
            );
        }
        assert!(stats_of_runs(&refs, |x| unpack_class(x) == 9).is_none());
        assert_eq!(unpack_value(pack(123_456_789, 3)), 123_456_789);
    }
}

//! A latency population as the collector keeps it (`output.percentiles`):
//! every sample (`"exact"`, the default: 8 bytes per request) or a quantile
//! sketch per SLO class (`"sketch"`: memory independent of the number of
//! requests, percentiles within [`SKETCH_RELATIVE_ERROR`]).
//!
//! The sketch is DDSketch (the `sketches-ddsketch` crate): values fall into
//! logarithmic bins of ratio `γ = (1 + α) / (1 − α)` and a percentile is the
//! representative value of the bin holding the rank `⌊p · (n − 1)⌋`, so it
//! lies within a relative error `α` of the sample at that rank. Count, mean,
//! min and max stay exact. Sketches of instances and classes merge exactly
//! (bin counts add), so the cluster and per-class blocks carry the same
//! guarantee as the per-instance ones.

use sketches_ddsketch::{Config, DDSketch};

use crate::engine::Tick;

use super::distribution::{pack, stats_of_runs, unpack_class, TickStats};

/// The relative error of a sketched percentile (α), against the sample at
/// rank `⌊p · (n − 1)⌋` of the exact population.
pub const SKETCH_RELATIVE_ERROR: f64 = 0.005;

/// Bins per sketch at most: at α = 0.5 % one bin spans a ratio of 1.01, so
/// 4,096 bins cover values from 1 µs to e^40 µs without collapsing (at most
/// 32 KiB per sketch; a run's latencies use a few hundred bins).
const SKETCH_MAX_BINS: u32 = 4096;

/// Latencies below this many µs are counted as zero (ticks are integers, so
/// only an exact zero is).
const SKETCH_MIN_VALUE: f64 = 0.5;

/// Number of SLO classes a population is split by (the class tag of
/// [`pack`]ed samples).
const CLASSES: usize = 5;

/// `output.percentiles`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PercentileMode {
    /// Every sample kept; percentiles exact.
    #[default]
    Exact,
    /// One DDSketch per class; percentiles within [`SKETCH_RELATIVE_ERROR`].
    Sketch,
}

impl PercentileMode {
    /// The accepted `output.percentiles` values.
    pub const NAMES: [&'static str; 2] = ["exact", "sketch"];

    /// The mode named `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "exact" => Some(PercentileMode::Exact),
            "sketch" => Some(PercentileMode::Sketch),
            _ => None,
        }
    }
}

/// A latency population split by SLO class.
#[derive(Clone, Debug)]
pub enum Population {
    /// Samples [`pack`]ed with their class; sorted by [`Population::finish`].
    Exact(Vec<u64>),
    /// One sketch per class, created on its first sample.
    Sketch(Box<[Option<SketchBox>; CLASSES]>),
}

/// A DDSketch (a newtype so the population stays `Debug`).
#[derive(Clone)]
pub struct SketchBox(DDSketch);

impl std::fmt::Debug for SketchBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DDSketch(n = {})", self.0.count())
    }
}

impl Default for Population {
    fn default() -> Self {
        Population::Exact(Vec::new())
    }
}

fn new_sketch() -> DDSketch {
    DDSketch::new(Config::new(
        SKETCH_RELATIVE_ERROR,
        SKETCH_MAX_BINS,
        SKETCH_MIN_VALUE,
    ))
}

impl Population {
    /// An empty population kept as `mode` says.
    pub fn new(mode: PercentileMode) -> Self {
        match mode {
            PercentileMode::Exact => Population::Exact(Vec::new()),
            PercentileMode::Sketch => Population::Sketch(Box::default()),
        }
    }

    /// Add one sample of class `class` (an index in `SloClass::ALL`).
    #[inline]
    pub fn push(&mut self, value: Tick, class: u8) {
        match self {
            Population::Exact(v) => v.push(pack(value, class)),
            Population::Sketch(s) => s[usize::from(class)]
                .get_or_insert_with(|| SketchBox(new_sketch()))
                .0
                .add(value.max(0) as f64),
        }
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        match self {
            Population::Exact(v) => v.len() as u64,
            Population::Sketch(s) => s.iter().flatten().map(|k| k.0.count() as u64).sum(),
        }
    }

    /// True when no sample was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Prepare for [`Population::stats`] (sorts exact samples in place).
    pub fn finish(&mut self) {
        if let Population::Exact(v) = self {
            v.sort_unstable();
        }
    }

    /// Statistics of the union of `pops` (all finished, all kept the same
    /// way), restricted to class `class` when given. `None` when empty.
    pub fn stats(pops: &[&Population], class: Option<u8>) -> Option<TickStats> {
        let keep = |p: u64| class.is_none_or(|c| unpack_class(p) == c);
        let mut runs: Vec<&[u64]> = Vec::new();
        let mut merged: Option<DDSketch> = None;
        for p in pops {
            match p {
                Population::Exact(v) => runs.push(v),
                Population::Sketch(s) => {
                    for (c, k) in s.iter().enumerate() {
                        let Some(k) = k else { continue };
                        if class.is_some_and(|want| usize::from(want) != c) {
                            continue;
                        }
                        merged
                            .get_or_insert_with(new_sketch)
                            .merge(&k.0)
                            .expect("every sketch has the same configuration");
                    }
                }
            }
        }
        match merged {
            Some(m) => {
                debug_assert!(runs.is_empty(), "populations kept in different ways");
                sketch_stats(&m)
            }
            None => stats_of_runs(&runs, keep),
        }
    }
}

/// Statistics of a sketch: exact count, mean, min and max; sketched
/// percentiles.
fn sketch_stats(s: &DDSketch) -> Option<TickStats> {
    let n = s.count() as u64;
    if n == 0 {
        return None;
    }
    let (min, max) = (s.min()?, s.max()?);
    // A bucket's representative value can lie outside the samples' range
    // (one sample: p50 ≠ the sample); every percentile lies in [min, max].
    let q = |p: f64| {
        s.quantile(p)
            .expect("quantiles are in [0, 1]")
            .expect("the sketch is not empty")
            .clamp(min, max)
    };
    Some(TickStats {
        count: n,
        mean: s.sum()? / n as f64,
        p50: q(0.50),
        p90: q(0.90),
        p95: q(0.95),
        p99: q(0.99),
        min,
        max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A skewed population: many repeats, a long tail, a few zeros.
    fn samples() -> Vec<(Tick, u8)> {
        (0..20_000i64)
            .map(|i| {
                let v = if i % 97 == 0 {
                    0
                } else {
                    1_000 + (i * 7919) % 50_000 + (i % 13) * (i % 13) * 10_000
                };
                (v, (i % 5) as u8)
            })
            .collect()
    }

    fn exact_at_rank(sorted: &[Tick], p: f64) -> f64 {
        sorted[(p * (sorted.len() - 1) as f64) as usize] as f64
    }

    #[test]
    fn sketch_percentiles_are_within_the_stated_error_and_the_rest_is_exact() {
        let (mut ex, mut sk) = (
            Population::new(PercentileMode::Exact),
            Population::new(PercentileMode::Sketch),
        );
        // Two "instances" in sketch mode, merged at statistics time.
        let mut sk2 = Population::new(PercentileMode::Sketch);
        for (i, &(v, c)) in samples().iter().enumerate() {
            ex.push(v, c);
            if i % 3 == 0 {
                sk2.push(v, c)
            } else {
                sk.push(v, c)
            }
        }
        ex.finish();
        assert_eq!(sk.len() + sk2.len(), ex.len());
        for class in [None, Some(0), Some(3), Some(4)] {
            let e = Population::stats(&[&ex], class).unwrap();
            let s = Population::stats(&[&sk, &sk2], class).unwrap();
            assert_eq!((s.count, s.min, s.max), (e.count, e.min, e.max));
            assert!((s.mean - e.mean).abs() <= 1e-9 * e.mean);
            let mut sorted: Vec<Tick> = samples()
                .into_iter()
                .filter(|&(_, c)| class.is_none_or(|w| w == c))
                .map(|(v, _)| v)
                .collect();
            sorted.sort_unstable();
            for (p, got) in [(0.5, s.p50), (0.9, s.p90), (0.95, s.p95), (0.99, s.p99)] {
                let want = exact_at_rank(&sorted, p);
                assert!(
                    (got - want).abs() <= SKETCH_RELATIVE_ERROR * want + 1e-9,
                    "class {class:?} p{p}: sketch {got}, exact {want}"
                );
            }
        }
        assert!(Population::stats(&[&sk], Some(9)).is_none());
        assert!(Population::stats(&[&Population::new(PercentileMode::Sketch)], None).is_none());
    }

    #[test]
    fn exact_mode_is_the_packed_runs() {
        let mut a = Population::new(PercentileMode::Exact);
        let mut b = Population::new(PercentileMode::Exact);
        for (i, &(v, c)) in samples().iter().enumerate() {
            if i % 2 == 0 {
                a.push(v, c)
            } else {
                b.push(v, c)
            }
        }
        a.finish();
        b.finish();
        let (Population::Exact(x), Population::Exact(y)) = (&a, &b) else {
            unreachable!()
        };
        assert_eq!(
            Population::stats(&[&a, &b], Some(2)),
            stats_of_runs(&[x, y], |p| unpack_class(p) == 2)
        );
        assert_eq!(
            PercentileMode::parse("sketch"),
            Some(PercentileMode::Sketch)
        );
        assert_eq!(PercentileMode::parse("exact"), Some(PercentileMode::Exact));
        assert_eq!(PercentileMode::parse("tdigest"), None);
    }
}

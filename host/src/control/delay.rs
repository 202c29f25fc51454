//! Random delays of the control plane (node provisioning, model loading,
//! the HPA's scrape), each stream seeded from the run seed.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

use crate::config::DelaySection;
use crate::engine::Tick;

/// `{mean, stddev}` in seconds, as in the reference.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Delay {
    pub mean_s: f64,
    pub stddev_s: f64,
}

impl From<DelaySection> for Delay {
    fn from(d: DelaySection) -> Self {
        Delay {
            mean_s: d.mean,
            stddev_s: d.stddev,
        }
    }
}

impl Delay {
    /// A problem with the values, if any (`key` names them in the message).
    pub fn check(&self, key: &str) -> Option<String> {
        for (k, v) in [("mean", self.mean_s), ("stddev", self.stddev_s)] {
            if !(v.is_finite() && v >= 0.0) {
                return Some(format!(
                    "{key}.{k} = {v}: must be a finite number of seconds ≥ 0"
                ));
            }
            if v > 1e9 {
                return Some(format!("{key}.{k} = {v}: at most 1e9 seconds"));
            }
        }
        None
    }
}

/// One named random stream of delays.
#[derive(Debug)]
pub struct DelayStream {
    rng: ChaCha8Rng,
}

impl DelayStream {
    /// The stream seeded with `seed` (derived from the run seed and its name).
    pub fn new(seed: u64) -> Self {
        DelayStream {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// A sample in µs: `mean` when `stddev` is 0, else
    /// `max(0, N(0,1)·stddev + mean)`; truncated to whole µs. A delay with
    /// `stddev = 0` draws nothing, so it does not move the stream.
    pub fn sample(&mut self, d: Delay) -> Tick {
        let s = if d.stddev_s <= 0.0 {
            d.mean_s
        } else {
            let z: f64 = StandardNormal.sample(&mut self.rng);
            (z * d.stddev_s + d.mean_s).max(0.0)
        };
        if s.is_finite() {
            (s * 1e6) as Tick
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_delays_are_exact_and_random_ones_are_never_negative() {
        let mut s = DelayStream::new(1);
        let fixed = Delay {
            mean_s: 2.5,
            stddev_s: 0.0,
        };
        assert_eq!(s.sample(fixed), 2_500_000);
        let wide = Delay {
            mean_s: 1.0,
            stddev_s: 10.0,
        };
        let xs: Vec<Tick> = (0..2000).map(|_| s.sample(wide)).collect();
        assert!(xs.iter().all(|&x| x >= 0));
        assert!(xs.contains(&0), "the clamp at 0 is reached");
        assert!(xs.iter().any(|&x| x > 10_000_000));
        let mut a = DelayStream::new(9);
        let mut b = DelayStream::new(9);
        for _ in 0..100 {
            assert_eq!(a.sample(wide), b.sample(wide));
        }
        assert!(Delay {
            mean_s: -1.0,
            stddev_s: 0.0
        }
        .check("x")
        .unwrap()
        .contains("x.mean"));
    }
}

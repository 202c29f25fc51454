//! The plugin's only source of randomness: SplitMix64, seeded from the seed
//! blis hands to `create`.
//!
//! Why a hand-written generator: a plugin must be deterministic given that
//! seed (same run file, same report), and this crate depends only on
//! `blis-plugin-api` and `serde`. SplitMix64 (Steele, Lea and Flood, 2014) is
//! a few lines, has a full 2^64 period, passes BigCrush, and is more than
//! enough to pick instances. It is not cryptographic.

/// SplitMix64: a 64-bit state advanced by a Weyl increment, then mixed.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose stream is fixed by `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `[0, n)`, `n ≥ 1`, without modulo bias
    /// (Lemire's multiply-and-reject method: one multiplication per draw,
    /// a division only on the rare draw that may need rejecting).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0, "below(0)");
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        if (m as u64) < n {
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_splitmix64_stream() {
        // The first outputs of SplitMix64 from state 0, as printed by the
        // reference C implementation.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn below_stays_in_range_and_is_roughly_uniform() {
        let mut r = SplitMix64::new(12345);
        assert_eq!(r.below(1), 0);
        let mut counts = [0u32; 6];
        for _ in 0..60_000 {
            counts[r.below(6) as usize] += 1;
        }
        // Expected 10,000 each; the standard deviation is about 91.
        for c in counts {
            assert!((9_600..=10_400).contains(&c), "{counts:?}");
        }
        let big = u64::MAX - 1;
        for _ in 0..1000 {
            assert!(r.below(big) < big);
        }
    }
}

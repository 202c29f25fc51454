//! `[[serve.faults]]`: failures of single instances, injected by simulated
//! time so a router's failover can be tested.
//!
//! * `down`: the instance's server is gone — new connections to its port
//!   are closed unanswered, requests on connections already open are
//!   answered 503, its streams are cut mid-answer, and its requests in the
//!   simulation are lost (cancelled: they leave its queue and batch). A
//!   request the gateway routes to it while it is down is lost the same
//!   way. When the fault ends the instance serves again, empty.
//! * `errors`: a fraction `rate` of the requests sent to its own port are
//!   answered 503 at once (never reaching the simulation).
//! * `slow`: its steps take `factor` × as long (from its next step on).
//!
//! The engine thread decides (it owns simulated time) and publishes each
//! instance's state in [`FaultState`] for the HTTP side.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::cluster::Cluster;
use crate::config::{FaultKind, FaultSection};

/// Each instance's fault state, as the HTTP side reads it.
#[derive(Debug)]
pub struct FaultState {
    down: Vec<AtomicBool>,
    /// `errors` rate, as f64 bits (0: none).
    error_rate: Vec<AtomicU64>,
}

impl FaultState {
    pub fn new(instances: usize) -> FaultState {
        FaultState {
            down: (0..instances).map(|_| AtomicBool::new(false)).collect(),
            error_rate: (0..instances).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Whether instance `i`'s server is down now.
    pub fn is_down(&self, i: u32) -> bool {
        self.down
            .get(i as usize)
            .is_some_and(|d| d.load(Ordering::Relaxed))
    }

    /// The fraction of requests instance `i`'s server answers 503 now.
    pub fn error_rate(&self, i: u32) -> f64 {
        self.error_rate
            .get(i as usize)
            .map_or(0.0, |r| f64::from_bits(r.load(Ordering::Relaxed)))
    }
}

/// The engine thread's side: applies the faults as simulated time passes.
pub struct Injector {
    faults: Vec<FaultSection>,
    state: Arc<FaultState>,
    /// Each instance's slowdown now.
    slow: Vec<f64>,
    /// Whether any instance is down now.
    any_down: bool,
    /// The simulated second of the next start or end of a fault: nothing
    /// changes before it (−∞ before the first [`Injector::apply`]).
    next: f64,
}

impl Injector {
    pub fn new(faults: Vec<FaultSection>, state: Arc<FaultState>, instances: usize) -> Injector {
        Injector {
            faults,
            state,
            slow: vec![1.0; instances],
            any_down: false,
            next: f64::NEG_INFINITY,
        }
    }

    /// Bring every instance's state to simulated second `t`.
    pub fn apply(&mut self, t: f64, cluster: &mut Cluster) {
        if self.faults.is_empty() || t < self.next {
            return;
        }
        self.next = self
            .faults
            .iter()
            .flat_map(|f| [Some(f.at_s), f.until_s])
            .flatten()
            .filter(|&x| x > t)
            .min_by(f64::total_cmp)
            .unwrap_or(f64::INFINITY);
        let n = self.slow.len();
        let (mut down, mut rate, mut slow) = (vec![false; n], vec![0.0f64; n], vec![1.0f64; n]);
        for f in self.faults.iter().filter(|f| f.active(t)) {
            let i = f.instance as usize;
            if i >= n {
                continue;
            }
            match f.kind {
                FaultKind::Down => down[i] = true,
                FaultKind::Errors => rate[i] = rate[i].max(f.rate.unwrap_or(0.0)),
                FaultKind::Slow => slow[i] *= f.factor.unwrap_or(1.0),
            }
        }
        for i in 0..n {
            self.state.down[i].store(down[i], Ordering::Relaxed);
            self.state.error_rate[i].store(rate[i].to_bits(), Ordering::Relaxed);
            if slow[i] != self.slow[i] {
                self.slow[i] = slow[i];
                cluster.set_slowdown(i, slow[i]);
            }
        }
        self.any_down = down.iter().any(|&d| d);
    }

    /// Whether any instance is down now.
    pub fn any_down(&self) -> bool {
        self.any_down
    }

    /// Whether instance `i` is down now.
    pub fn is_down(&self, i: u32) -> bool {
        self.state.is_down(i)
    }

    /// The simulated second of the next start or end of a fault, after
    /// the last [`Injector::apply`].
    pub fn next_change(&self) -> Option<f64> {
        self.next.is_finite().then_some(self.next)
    }
}

/// Whether request number `n` of an instance whose error rate is `rate`
/// is answered 503: a fixed hash (SplitMix64's finaliser) of `(seed, n)`
/// against the rate, so a run with the same seed fails the same requests.
pub fn draw_error(seed: u64, n: u64, rate: f64) -> bool {
    if rate <= 0.0 {
        return false;
    }
    let mut z = seed ^ n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // 53 bits → [0, 1).
    ((z >> 11) as f64 / (1u64 << 53) as f64) < rate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_drawn_at_their_rate_and_reproducibly() {
        let hits = (0..100_000).filter(|&n| draw_error(7, n, 0.2)).count();
        assert!((19_000..21_000).contains(&hits), "{hits}");
        let again = (0..100_000).filter(|&n| draw_error(7, n, 0.2)).count();
        assert_eq!(hits, again);
        assert!(!(0..1000).any(|n| draw_error(7, n, 0.0)));
        assert!((0..1000).all(|n| draw_error(7, n, 1.0)));
    }
}

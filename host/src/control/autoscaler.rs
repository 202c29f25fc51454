//! The scaling loop around an autoscaler plugin: ticks, stabilization
//! windows, the scrape delay, and the fleet bounds (spec §3.4).
//!
//! At every tick the plugin's decision (a signed change in instance count)
//! goes through one stabilization window per direction: the first tick
//! that wants a direction records its time; the decision passes once it has
//! been wanted for the whole window (then the window restarts), and a tick
//! that does not want a direction forgets it. A passing decision is
//! actuated after the scrape delay, clamped to
//! `[min_instances, max_instances]`.

use crate::engine::Tick;
use crate::plugins::AutoscalerPolicy;

use super::delay::Delay;

/// `[autoscaler]`, resolved.
pub struct Scaler {
    pub policy: AutoscalerPolicy,
    pub interval: Tick,
    pub windows: Windows,
    pub scrape_delay: Delay,
    pub min_instances: u32,
    pub max_instances: Option<u32>,
    pub stats: ScalingStats,
}

/// Counts for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScalingStats {
    pub ticks: u64,
    /// Ticks whose decision wanted to add / remove instances.
    pub wanted_up: u64,
    pub wanted_down: u64,
    /// Of those, suppressed by a stabilization window.
    pub suppressed: u64,
    pub actuations: u64,
    pub instances_added: u64,
    pub instances_removed: u64,
    /// Instances wanted that no node could take.
    pub unplaced: u64,
}

impl ScalingStats {
    /// Add `o`'s counts.
    pub fn add(&mut self, o: &ScalingStats) {
        self.ticks += o.ticks;
        self.wanted_up += o.wanted_up;
        self.wanted_down += o.wanted_down;
        self.suppressed += o.suppressed;
        self.actuations += o.actuations;
        self.instances_added += o.instances_added;
        self.instances_removed += o.instances_removed;
        self.unplaced += o.unplaced;
    }
}

/// The two stabilization windows and their first-signal times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Windows {
    pub up: Tick,
    pub down: Tick,
    first_up: Option<Tick>,
    first_down: Option<Tick>,
}

impl Windows {
    /// Windows of `up` and `down` µs.
    pub fn new(up: Tick, down: Tick) -> Self {
        Windows {
            up,
            down,
            first_up: None,
            first_down: None,
        }
    }

    /// The decision `delta` wanted at `now`: what passes (0 when suppressed
    /// or when nothing is wanted).
    pub fn filter(&mut self, now: Tick, delta: i32) -> i32 {
        if delta <= 0 {
            self.first_up = None;
        }
        if delta >= 0 {
            self.first_down = None;
        }
        let (first, window) = match delta.signum() {
            1 => (&mut self.first_up, self.up),
            -1 => (&mut self.first_down, self.down),
            _ => return 0,
        };
        let since = *first.get_or_insert(now);
        if now - since >= window {
            *first = None;
            delta
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Windows;

    #[test]
    fn windows_suppress_then_pass_and_restart() {
        // Up window 30 s, ticks every 10 s.
        let s = 10_000_000;
        let mut w = Windows::new(30_000_000, 0);
        assert_eq!(w.filter(0, 2), 0, "first signal recorded at 0");
        assert_eq!(w.filter(s, 3), 0);
        assert_eq!(w.filter(2 * s, 1), 0);
        assert_eq!(w.filter(3 * s, 4), 4, "wanted for 30 s: passes");
        assert_eq!(w.filter(4 * s, 1), 0, "the window restarts");
        // A tick without a scale-up forgets the signal.
        assert_eq!(w.filter(5 * s, 0), 0);
        assert_eq!(w.filter(6 * s, 1), 0);
        assert_eq!(w.filter(8 * s, 1), 0);
        assert_eq!(w.filter(9 * s, 1), 1);
        // Down window 0: passes at once, every time.
        assert_eq!(w.filter(10 * s, -2), -2);
        assert_eq!(w.filter(11 * s, -1), -1);
        // Zero window up too.
        let mut z = Windows::new(0, 50);
        assert_eq!(z.filter(0, 1), 1);
        assert_eq!(z.filter(1, -1), 0);
        assert_eq!(z.filter(40, -1), 0);
        assert_eq!(z.filter(51, -1), -1);
    }
}

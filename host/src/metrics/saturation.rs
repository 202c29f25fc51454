//! Post-hoc saturation verdicts (`[saturation]`): the run's arrivals and
//! completions, replayed in time order through up to three detectors —
//! `composite`, `threshold`, `backlog-drift` — each giving a level
//! (`STABLE`, `BACKLOGGED`, `OVERLOADED`) after every event; the verdict is
//! the plurality of the levels recorded in the final window.
//!
//! The stream has two events per served request: its arrival, and its
//! completion at arrival + E2E carrying the E2E latency; a request still
//! being served at the end contributes its arrival only. Requests refused
//! (by admission, routing or the gateway) or dropped as unservable are not
//! in the stream: they are neither load on the fleet nor served by it.
//! Events are ordered by (time, arrivals before completions, request id).
//! Every detector is O(1) per event; levels are computed only for the
//! events of the final window (the verdict needs no others).

use serde_json::{json, Map, Value};

use crate::engine::Tick;

/// A detector's level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Stable,
    Backlogged,
    Overloaded,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Stable => "STABLE",
            Level::Backlogged => "BACKLOGGED",
            Level::Overloaded => "OVERLOADED",
        }
    }
}

/// One detector result.
#[derive(Clone, Debug, PartialEq)]
pub struct Detection {
    pub level: Level,
    pub score: f64,
    pub confidence: f64,
    pub signals: Vec<(&'static str, f64)>,
}

/// The configured detectors (in roster order) and their settings.
#[derive(Clone, Debug, PartialEq)]
pub struct SaturationConfig {
    pub composite: bool,
    /// Mean-E2E threshold, ms, when the threshold detector runs.
    pub threshold_ms: Option<f64>,
    /// Bucket width in µs, when the backlog-drift detector runs.
    pub backlog_window: Option<Tick>,
    /// The verdict votes over records at or after `last event − final_window`.
    pub final_window: Tick,
}

/// The event stream, recorded during the run.
#[derive(Debug)]
pub struct SaturationRecorder {
    config: SaturationConfig,
    /// Arrival time per request, indexed by id (`None`: refused or dropped).
    arrivals: Vec<Option<Tick>>,
    /// (completion time, request id, E2E µs).
    completions: Vec<(Tick, u64, Tick)>,
}

impl SaturationRecorder {
    pub fn new(config: SaturationConfig) -> SaturationRecorder {
        SaturationRecorder {
            config,
            arrivals: Vec::new(),
            completions: Vec::new(),
        }
    }

    /// Request `id` arrived at `t`.
    pub fn arrived(&mut self, id: u64, t: Tick) {
        let i = id as usize;
        if i >= self.arrivals.len() {
            self.arrivals.resize(i + 1, None);
        }
        self.arrivals[i] = Some(t);
    }

    /// Request `id` was refused or dropped: it leaves the stream.
    pub fn removed(&mut self, id: u64) {
        if let Some(a) = self.arrivals.get_mut(id as usize) {
            *a = None;
        }
    }

    /// Request `id` completed at `at` after `e2e` µs.
    pub fn completed(&mut self, id: u64, at: Tick, e2e: Tick) {
        self.completions.push((at, id, e2e));
    }

    /// The `saturation` object: per detector, its verdict, the votes of the
    /// final window, and the last record's score, confidence and signals.
    pub fn report(&mut self) -> Value {
        self.completions.sort_unstable();
        let mut arrivals: Vec<(Tick, u64)> = self
            .arrivals
            .iter()
            .enumerate()
            .filter_map(|(id, a)| a.map(|t| (t, id as u64)))
            .collect();
        arrivals.sort_unstable();
        let last = arrivals
            .last()
            .map(|a| a.0)
            .into_iter()
            .chain(self.completions.last().map(|c| c.0))
            .max();
        let from = last.map_or(Tick::MAX, |l| l.saturating_sub(self.config.final_window));
        let mut bank = Bank::new(&self.config);
        let (mut i, mut j) = (0, 0);
        loop {
            // Arrivals before completions at equal times.
            let take_arrival = match (arrivals.get(i), self.completions.get(j)) {
                (Some(a), Some(c)) => a.0 <= c.0,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let t = if take_arrival {
                let t = arrivals[i].0;
                bank.arrival(t);
                i += 1;
                t
            } else {
                let (t, _, e2e) = self.completions[j];
                bank.completion(t, e2e as f64 / 1e3);
                j += 1;
                t
            };
            if t >= from {
                bank.record();
            }
        }
        bank.report(self.config.final_window)
    }
}

/// Votes and the last record of one detector.
#[derive(Default)]
struct Votes {
    counts: [u64; 3],
    last: Option<Detection>,
}

impl Votes {
    fn add(&mut self, d: Detection) {
        self.counts[d.level as usize] += 1;
        self.last = Some(d);
    }

    /// Plurality; ties go to the more severe level; no records → STABLE.
    fn verdict(&self) -> Level {
        let mut best = (Level::Stable, 0);
        for l in [Level::Overloaded, Level::Backlogged, Level::Stable] {
            if self.counts[l as usize] > best.1 {
                best = (l, self.counts[l as usize]);
            }
        }
        best.0
    }
}

/// The detectors' shared state.
struct Bank {
    composite: Option<(Composite, Votes)>,
    threshold: Option<(Threshold, Votes)>,
    backlog: Option<(BacklogDrift, Votes)>,
}

impl Bank {
    fn new(c: &SaturationConfig) -> Bank {
        Bank {
            composite: c
                .composite
                .then(|| (Composite::default(), Votes::default())),
            threshold: c
                .threshold_ms
                .map(|t| (Threshold::new(t), Votes::default())),
            backlog: c
                .backlog_window
                .map(|w| (BacklogDrift::new(w), Votes::default())),
        }
    }

    fn arrival(&mut self, t: Tick) {
        if let Some((d, _)) = &mut self.composite {
            d.arrivals += 1;
        }
        if let Some((d, _)) = &mut self.backlog {
            d.observe(t, true);
        }
    }

    fn completion(&mut self, t: Tick, latency_ms: f64) {
        if let Some((d, _)) = &mut self.composite {
            d.completion(latency_ms);
        }
        if let Some((d, _)) = &mut self.threshold {
            d.n += 1;
            d.sum += latency_ms;
        }
        if let Some((d, _)) = &mut self.backlog {
            d.observe(t, false);
        }
    }

    fn record(&mut self) {
        if let Some((d, v)) = &mut self.composite {
            v.add(d.detect());
        }
        if let Some((d, v)) = &mut self.threshold {
            v.add(d.detect());
        }
        if let Some((d, v)) = &mut self.backlog {
            v.add(d.detect());
        }
    }

    fn report(&self, window: Tick) -> Value {
        let mut m = Map::new();
        let mut put = |name: &str, v: &Votes| {
            let mut signals = Map::new();
            if let Some(d) = &v.last {
                for (k, x) in &d.signals {
                    signals.insert((*k).into(), json!(x));
                }
            }
            m.insert(
                name.into(),
                json!({
                    "verdict": v.verdict().name(),
                    "votes": {
                        "STABLE": v.counts[0],
                        "BACKLOGGED": v.counts[1],
                        "OVERLOADED": v.counts[2],
                    },
                    "final_window_ms": window as f64 / 1e3,
                    "last": v.last.as_ref().map_or(Value::Null, |d| json!({
                        "level": d.level.name(),
                        "score": d.score,
                        "confidence": d.confidence,
                        "signals": Value::Object(signals),
                    })),
                }),
            );
        };
        if let Some((_, v)) = &self.composite {
            put("composite", v);
        }
        if let Some((_, v)) = &self.threshold {
            put("threshold", v);
        }
        if let Some((_, v)) = &self.backlog {
            put("backlog-drift", v);
        }
        Value::Object(m)
    }
}

/// `threshold`: the mean E2E of the completions so far against a threshold.
struct Threshold {
    threshold_ms: f64,
    n: u64,
    sum: f64,
}

impl Threshold {
    fn new(threshold_ms: f64) -> Threshold {
        Threshold {
            threshold_ms,
            n: 0,
            sum: 0.0,
        }
    }

    fn detect(&self) -> Detection {
        let t = self.threshold_ms;
        if self.n == 0 {
            return Detection {
                level: Level::Stable,
                score: 0.0,
                confidence: 0.0,
                signals: vec![("mean_e2e", 0.0), ("threshold", t)],
            };
        }
        let m = self.sum / self.n as f64;
        let (level, score) = if m < t {
            (Level::Stable, 0.5 * m / t)
        } else {
            (Level::Overloaded, 0.75 + ((m - t) / t / 4.0).min(0.25))
        };
        Detection {
            level,
            score,
            confidence: 1.0 - 1.0 / ((self.n + 1) as f64).sqrt(),
            signals: vec![("mean_e2e", m), ("threshold", t)],
        }
    }
}

/// `composite`: the completion-rate deficit and the E2E trend (second half
/// vs first half of the completions, counted only when the quartile means
/// rise monotonically once there are at least 20).
#[derive(Default)]
struct Composite {
    arrivals: u64,
    /// Prefix sums of the latencies in completion order (`prefix[k]` = Σ of the first k).
    prefix: Vec<f64>,
}

impl Composite {
    fn completion(&mut self, latency_ms: f64) {
        if self.prefix.is_empty() {
            self.prefix.push(0.0);
        }
        let s = *self.prefix.last().expect("starts with 0") + latency_ms;
        self.prefix.push(s);
    }

    /// Mean latency of completions `[a, b)`.
    fn mean(&self, a: usize, b: usize) -> f64 {
        (self.prefix[b] - self.prefix[a]) / (b - a) as f64
    }

    fn detect(&self) -> Detection {
        let a = self.arrivals;
        let n = self.prefix.len().saturating_sub(1);
        if a == 0 {
            return Detection {
                level: Level::Stable,
                score: 0.0,
                confidence: 0.0,
                signals: vec![
                    ("rate_deficit", 0.0),
                    ("latency_trend_raw", 0.0),
                    ("latency_trend", 0.0),
                    ("quartile_monotone", 0.0),
                    ("noise_floor", 0.0),
                ],
            };
        }
        let rate_deficit = (1.0 - n as f64 / a as f64).max(0.0);
        let mut lt_raw = 0.0;
        if n >= 2 {
            let h = n / 2;
            let first = self.mean(0, h);
            if first != 0.0 {
                lt_raw = ((self.mean(h, n) - first) / first).max(0.0);
            }
        }
        let mut monotone = false;
        let mut lt = lt_raw;
        if n >= 20 {
            let q = n / 4;
            let m = [
                self.mean(0, q),
                self.mean(q, 2 * q),
                self.mean(2 * q, 3 * q),
                self.mean(3 * q, n),
            ];
            monotone = m[0] < m[1] && m[1] < m[2] && m[2] < m[3];
            if !monotone {
                lt = 0.0;
            }
        }
        let score = rate_deficit.max(lt.min(1.0));
        let noise = 1.0 / (a as f64).sqrt();
        let level = if score < noise {
            Level::Stable
        } else if lt > noise {
            Level::Overloaded
        } else {
            Level::Backlogged
        };
        Detection {
            level,
            score,
            confidence: (a as f64 / 20.0).min(1.0),
            signals: vec![
                ("rate_deficit", rate_deficit),
                ("latency_trend_raw", lt_raw.min(1.0)),
                ("latency_trend", lt.min(1.0)),
                ("quartile_monotone", if monotone { 1.0 } else { 0.0 }),
                ("noise_floor", noise),
            ],
        }
    }
}

/// `backlog-drift`: the least-squares slope of the in-flight count sampled
/// per time bucket (the latest value in each bucket; skipped buckets repeat
/// the previous value), from the bucket of the first event.
struct BacklogDrift {
    window: Tick,
    arrivals: u64,
    completions: u64,
    /// Bucket index of the first event.
    first: Option<i64>,
    /// Buckets before the current one: count, Σy, Σxy (x from 0).
    closed: u64,
    sum_y: f64,
    sum_xy: f64,
    /// The current bucket's index and value (the latest in-flight count).
    current: i64,
    value: f64,
}

impl BacklogDrift {
    fn new(window: Tick) -> BacklogDrift {
        BacklogDrift {
            window,
            arrivals: 0,
            completions: 0,
            first: None,
            closed: 0,
            sum_y: 0.0,
            sum_xy: 0.0,
            current: 0,
            value: 0.0,
        }
    }

    fn observe(&mut self, t: Tick, arrival: bool) {
        let b = t.div_euclid(self.window);
        match self.first {
            None => {
                self.first = Some(b);
                self.current = b;
            }
            Some(_) => {
                // Close the current bucket and every skipped one (same value).
                let gap = (b - self.current) as u64;
                if gap > 0 {
                    let (k0, y) = (self.closed as f64, self.value);
                    let g = gap as f64;
                    self.sum_y += g * y;
                    // Σ over x = k0 … k0+g−1 of x·y.
                    self.sum_xy += y * (g * k0 + g * (g - 1.0) / 2.0);
                    self.closed += gap;
                    self.current = b;
                }
            }
        }
        if arrival {
            self.arrivals += 1;
        } else {
            self.completions += 1;
        }
        self.value = self.arrivals as f64 - self.completions as f64;
    }

    fn slope(&self) -> f64 {
        let k = (self.closed + 1) as f64;
        if self.first.is_none() || k < 2.0 {
            return 0.0;
        }
        let sx = k * (k - 1.0) / 2.0;
        let sxx = (k - 1.0) * k * (2.0 * k - 1.0) / 6.0;
        let sy = self.sum_y + self.value;
        let sxy = self.sum_xy + self.closed as f64 * self.value;
        let den = k * sxx - sx * sx;
        if den == 0.0 {
            return 0.0;
        }
        (k * sxy - sx * sy) / den
    }

    fn detect(&self) -> Detection {
        let a = self.arrivals;
        let slope = self.slope();
        let in_flight = self.value;
        let signals = |noise: f64| {
            vec![
                ("in_flight", in_flight),
                ("arrivals", a as f64),
                ("completions", self.completions as f64),
                ("running_slope", slope),
                ("noise_floor", noise),
            ]
        };
        if a == 0 {
            return Detection {
                level: Level::Stable,
                score: 0.0,
                confidence: 0.0,
                signals: signals(0.0),
            };
        }
        let noise = 1.0 / (a as f64).sqrt();
        let level = if slope <= noise {
            Level::Stable
        } else if slope <= 3.0 * noise {
            Level::Backlogged
        } else {
            Level::Overloaded
        };
        Detection {
            level,
            score: (slope.max(0.0) / (3.0 * noise)).min(1.0),
            confidence: (a as f64 / 20.0).min(1.0),
            signals: signals(noise),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approx(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }

    #[test]
    fn threshold_by_hand() {
        let mut d = Threshold::new(100.0);
        assert_eq!(d.detect().level, Level::Stable);
        d.n = 3;
        d.sum = 150.0; // mean 50
        let x = d.detect();
        assert_eq!(x.level, Level::Stable);
        approx(x.score, 0.25);
        approx(x.confidence, 0.5); // 1 − 1/√4
        d.sum = 360.0; // mean 120: 0.75 + min(0.25, 0.2/4)
        let x = d.detect();
        assert_eq!(x.level, Level::Overloaded);
        approx(x.score, 0.8);
        d.sum = 3000.0; // mean 1000: capped at 1
        approx(d.detect().score, 1.0);
        d.sum = 300.0; // mean exactly the threshold → overloaded
        assert_eq!(d.detect().level, Level::Overloaded);
    }

    #[test]
    fn composite_by_hand() {
        let mut d = Composite::default();
        assert_eq!(d.detect().level, Level::Stable);
        // 4 arrivals, 2 completions 10 and 30 ms: deficit 0.5, trend (30−10)/10 = 2.
        d.arrivals = 4;
        d.completion(10.0);
        d.completion(30.0);
        let x = d.detect();
        approx(x.score, 1.0); // max(0.5, min(2, 1))
        assert_eq!(x.level, Level::Overloaded); // lt 2 > noise 0.5
        assert_eq!(x.signals[1], ("latency_trend_raw", 1.0));
        approx(x.confidence, 0.2);
        // 100 arrivals, 20 rising completions 1..=20: quartiles monotone.
        let mut d = Composite {
            arrivals: 100,
            ..Composite::default()
        };
        for i in 1..=20 {
            d.completion(f64::from(i));
        }
        let x = d.detect();
        // Halves: mean 5.5 and 15.5 → trend 10/5.5; deficit 0.8; noise 0.1.
        approx(x.signals[0].1, 0.8);
        approx(x.score, 1.0);
        assert_eq!(x.signals[3], ("quartile_monotone", 1.0));
        assert_eq!(x.level, Level::Overloaded);
        // Same latencies with a dip in the third quartile: trend ignored.
        let mut d = Composite {
            arrivals: 40,
            ..Composite::default()
        };
        for i in 1..=20 {
            d.completion(if (11..=15).contains(&i) {
                1.0
            } else {
                f64::from(i)
            });
        }
        let x = d.detect();
        assert_eq!(x.signals[3], ("quartile_monotone", 0.0));
        assert_eq!(x.signals[2], ("latency_trend", 0.0));
        approx(x.score, 0.5); // deficit 1 − 20/40 ≥ noise 1/√40, no trend
        assert_eq!(x.level, Level::Backlogged);
    }

    #[test]
    fn backlog_drift_slope_by_hand() {
        // Window 10 µs. Buckets: 0 → in-flight 2; 1 skipped (2); 2 → 4; 3 → 3.
        let mut d = BacklogDrift::new(10);
        d.observe(1, true);
        d.observe(5, true);
        assert_eq!(d.slope(), 0.0); // one bucket
        d.observe(21, true);
        d.observe(22, true);
        d.observe(35, false);
        // y = [2, 2, 4, 3] at x = 0..3: slope = (4·Σxy − Σx·Σy)/(4·Σx² − Σx²)
        // Σxy = 0 + 2 + 8 + 9 = 19, Σx = 6, Σy = 11, Σx² = 14 → (76 − 66)/(56 − 36) = 0.5.
        approx(d.slope(), 0.5);
        let x = d.detect();
        // 4 arrivals: noise 0.5; slope 0.5 ≤ noise → stable; score 0.5/1.5.
        assert_eq!(x.level, Level::Stable);
        approx(x.score, 1.0 / 3.0);
        approx(x.confidence, 0.2);
        // Starting late: the series starts at the first event's bucket.
        let mut d = BacklogDrift::new(10);
        d.observe(1000, true);
        d.observe(1010, true);
        approx(d.slope(), 1.0);
        for k in 0..30 {
            d.observe(1020 + 10 * k, true);
        }
        // 32 buckets, in-flight 1..=32: slope 1 > 3 · 1/√32.
        approx(d.slope(), 1.0);
        assert_eq!(d.detect().level, Level::Overloaded);
    }

    #[test]
    fn verdict_is_the_plurality_of_the_final_window_with_ties_to_the_severe() {
        let mut v = Votes::default();
        assert_eq!(v.verdict(), Level::Stable);
        v.counts = [2, 2, 1];
        assert_eq!(v.verdict(), Level::Backlogged);
        v.counts = [2, 2, 2];
        assert_eq!(v.verdict(), Level::Overloaded);
        v.counts = [3, 2, 2];
        assert_eq!(v.verdict(), Level::Stable);
    }

    #[test]
    fn recorder_replays_the_stream_in_order_and_votes_over_the_final_window() {
        // Threshold 100 ms; final window 1000 µs.
        let mut r = SaturationRecorder::new(SaturationConfig {
            composite: false,
            threshold_ms: Some(100.0),
            backlog_window: None,
            final_window: 1000,
        });
        // Requests 0..3 arrive at 0; 3 is refused (not in the stream); 0
        // and 1 complete fast, early (outside the final window); 2 completes
        // at 4500 µs after 400 ms (completions are given out of order).
        for id in 0..4 {
            r.arrived(id, 0);
        }
        r.removed(3);
        r.completed(2, 4500, 400_000);
        r.completed(1, 20, 20);
        r.completed(0, 10, 10);
        let v = r.report();
        let t = &v["threshold"];
        // Last event at 4500; window [3500, 4500]: one record, mean
        // (0.01 + 0.02 + 400) / 3 ≈ 133 ms ≥ 100 → overloaded.
        assert_eq!(t["verdict"], "OVERLOADED");
        assert_eq!(t["votes"]["OVERLOADED"], 1);
        assert_eq!(t["votes"]["STABLE"], 0);
        assert_eq!(
            t["last"]["signals"]["mean_e2e"],
            json!((0.01 + 0.02 + 400.0) / 3.0)
        );
    }
}

//! Fitness: one number to rank policies, as the cluster seed defines it.
//!
//! Latencies (ticks) map to `1 / (1 + value / 1000)`; throughputs to
//! `value / (value + reference)` with 100 requests/s and 10,000 tokens/s as
//! references. Normalised values are weighted and summed (keys in ascending
//! order). The normalisation compresses differences strongly: always read the
//! raw metrics too.

use std::collections::BTreeMap;

/// Metric keys accepted in `fitness_weights`.
pub const KEYS: [&str; 8] = [
    "mean_e2e",
    "mean_ttft",
    "p50_e2e",
    "p50_ttft",
    "p99_e2e",
    "p99_ttft",
    "throughput",
    "tokens_per_sec",
];

/// Raw inputs of the fitness score.
#[derive(Clone, Copy, Debug, Default)]
pub struct FitnessInputs {
    /// TTFT mean, p50, p99 in ticks (None when empty).
    pub ttft: Option<(f64, f64, f64)>,
    /// E2E mean, p50, p99 in ticks.
    pub e2e: Option<(f64, f64, f64)>,
    pub requests_per_sec: f64,
    pub tokens_per_sec: f64,
}

fn latency(x: Option<f64>) -> f64 {
    // An empty population has no latency to reward.
    x.map_or(0.0, |v| 1.0 / (1.0 + v / 1000.0))
}

/// Normalised value of one key.
pub fn normalised(key: &str, m: &FitnessInputs) -> Option<f64> {
    Some(match key {
        "throughput" => m.requests_per_sec / (m.requests_per_sec + 100.0),
        "tokens_per_sec" => m.tokens_per_sec / (m.tokens_per_sec + 10_000.0),
        "mean_ttft" => latency(m.ttft.map(|t| t.0)),
        "p50_ttft" => latency(m.ttft.map(|t| t.1)),
        "p99_ttft" => latency(m.ttft.map(|t| t.2)),
        "mean_e2e" => latency(m.e2e.map(|t| t.0)),
        "p50_e2e" => latency(m.e2e.map(|t| t.1)),
        "p99_e2e" => latency(m.e2e.map(|t| t.2)),
        _ => return None,
    })
}

/// Score and per-key normalised components (keys already validated).
pub fn evaluate(
    weights: &BTreeMap<String, f64>,
    m: &FitnessInputs,
) -> (f64, BTreeMap<String, f64>) {
    let mut score = 0.0;
    let mut comps = BTreeMap::new();
    for (k, w) in weights {
        let v = normalised(k, m).unwrap_or(0.0);
        score += v * w;
        comps.insert(k.clone(), v);
    }
    (score, comps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_example_ttft_50ms() {
        let m = FitnessInputs {
            ttft: Some((50_000.0, 50_000.0, 50_000.0)),
            ..Default::default()
        };
        assert!((normalised("p99_ttft", &m).unwrap() - 1.0 / 51.0).abs() < 1e-15);
        let m = FitnessInputs {
            requests_per_sec: 100.0,
            tokens_per_sec: 10_000.0,
            ..Default::default()
        };
        assert_eq!(normalised("throughput", &m), Some(0.5));
        assert_eq!(normalised("tokens_per_sec", &m), Some(0.5));
        let w: BTreeMap<String, f64> = [("throughput".to_string(), 2.0)].into();
        assert_eq!(evaluate(&w, &m).0, 1.0);
        assert_eq!(normalised("nope", &m), None);
    }
}

//! The report's `client` section: a real inference-perf client's own
//! metrics of the run (`[workload.inference_perf]` with an inference-perf
//! `client`), computed the way that release computes them, beside blis's.
//!
//! Per successful request of `K` output tokens, sent at `s` (its arrival in
//! blis), first token at `f`, last at `e` (the end of the stream):
//! `request_latency = e − s`, `time_to_first_token = f − s`,
//! `time_per_output_token = (e − f) / g` and `inter_token_latency` the mean
//! over all gaps `Σ(e − f) / Σ g`, where `g` is the number of gaps between
//! the release's timestamps ([`Timestamps::gaps`]: 2K + 1 per line before
//! 0.3.0, K per SSE message in 0.3.0–0.4.0, K − 1 per content chunk from
//! 0.7.0); `normalized_time_per_output_token = (e − s) / K`. Percentiles
//! interpolate linearly between order statistics, as numpy's do.
//! `output_len` is the server's token count: the client re-tokenizes the
//! text it received, which blis does not have. A request that did not
//! complete — the client's timeout aborted it, or the server dropped or
//! refused it — is a failure.

use serde_json::{json, Map, Value};

use crate::engine::Tick;
use crate::request::Request;
use crate::workload::inference_perf::client::Timestamps;

/// Counters and populations of the client's view (times in µs).
#[derive(Debug)]
pub struct ClientRecorder {
    name: String,
    /// The client's request timeout, µs.
    timeout: Tick,
    timestamps: Timestamps,
    arrived: u64,
    timed_out: u64,
    latency: Vec<f64>,
    ttft: Vec<f64>,
    tpot: Vec<f64>,
    normalized_tpot: Vec<f64>,
    output_len: Vec<f64>,
    gap_span: f64,
    gaps: u64,
}

impl ClientRecorder {
    pub fn new(name: String, timestamps: Timestamps, timeout: Tick) -> ClientRecorder {
        ClientRecorder {
            name,
            timeout,
            timestamps,
            arrived: 0,
            timed_out: 0,
            latency: Vec::new(),
            ttft: Vec::new(),
            tpot: Vec::new(),
            normalized_tpot: Vec::new(),
            output_len: Vec::new(),
            gap_span: 0.0,
            gaps: 0,
        }
    }

    /// The client sent a request.
    pub fn arrived(&mut self) {
        self.arrived += 1;
    }

    /// The client's timeout aborted a request.
    pub fn timed_out(&mut self) {
        self.timed_out += 1;
    }

    /// A request completed at `at`: a success, unless its end reached the
    /// client after its timeout (the server finished the request in a step
    /// the timeout fell into; the client had given up).
    pub fn completed(&mut self, req: &Request, at: Tick) {
        if at - req.arrival > self.timeout {
            self.timed_out += 1;
            return;
        }
        let k = req.generated;
        let latency = (at - req.arrival) as f64;
        self.latency.push(latency);
        self.output_len.push(f64::from(k));
        if k > 0 {
            self.normalized_tpot.push(latency / f64::from(k));
        }
        let g = self.timestamps.gaps(k);
        if req.first_token_at >= 0 && g > 0 {
            self.ttft.push((req.first_token_at - req.arrival) as f64);
            let span = (at - req.first_token_at) as f64;
            self.tpot.push(span / g as f64);
            self.gap_span += span;
            self.gaps += g;
        }
    }

    /// The report's `client` object.
    pub fn report(&mut self) -> Value {
        let successes = self.latency.len() as u64;
        let mut m = Map::new();
        m.insert("name".into(), json!(self.name));
        m.insert("timestamps".into(), json!(self.timestamps.name()));
        m.insert("requests".into(), json!(self.arrived));
        m.insert("successes".into(), json!(successes));
        m.insert(
            "failures".into(),
            json!(self.arrived.saturating_sub(successes)),
        );
        m.insert("timed_out".into(), json!(self.timed_out));
        for (prefix, values, scale) in [
            ("request_latency_", &mut self.latency, 1e-3),
            ("time_to_first_token_", &mut self.ttft, 1e-3),
            ("time_per_output_token_", &mut self.tpot, 1e-3),
            (
                "normalized_time_per_output_token_",
                &mut self.normalized_tpot,
                1e-3,
            ),
        ] {
            put(&mut m, prefix, "_ms", values, scale);
        }
        m.insert(
            "inter_token_latency_mean_ms".into(),
            if self.gaps == 0 {
                Value::Null
            } else {
                json!(self.gap_span / self.gaps as f64 / 1e3)
            },
        );
        put(&mut m, "output_len_", "", &mut self.output_len, 1.0);
        Value::Object(m)
    }
}

/// `<prefix>mean<suffix>`, `p50`, `p90`, `p99` of `values` × `scale`.
fn put(m: &mut Map<String, Value>, prefix: &str, suffix: &str, values: &mut [f64], scale: f64) {
    values.sort_unstable_by(f64::total_cmp);
    let mean = (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64);
    m.insert(
        format!("{prefix}mean{suffix}"),
        mean.map_or(Value::Null, |x| json!(x * scale)),
    );
    for q in [50.0, 90.0, 99.0] {
        m.insert(
            format!("{prefix}p{q}{suffix}"),
            percentile(values, q).map_or(Value::Null, |x| json!(x * scale)),
        );
    }
}

/// numpy's default percentile: linear between the order statistics.
fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let pos = q / 100.0 * (n - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(arrival: Tick, first: Tick, k: u32) -> Request {
        Request {
            arrival,
            first_token_at: first,
            generated: k,
            ..Request::default()
        }
    }

    /// Hand-computed: 248 tokens, sent at 0, first token at 40 ms, done at
    /// 3,540 ms. Per line (0.2.x): 497 gaps, TPOT 3,500/497 = 7.0423 ms,
    /// ITL the same; per chunk (0.7.0): 247 gaps, 14.170 ms.
    #[test]
    fn metric_definitions_follow_the_release() {
        for (ts, tpot) in [
            (Timestamps::Lines, 3500.0 / 497.0),
            (Timestamps::Messages, 3500.0 / 248.0),
            (Timestamps::Chunks, 3500.0 / 247.0),
        ] {
            let mut c = ClientRecorder::new("x".into(), ts, 10_000_000);
            c.arrived();
            c.arrived();
            c.completed(&req(0, 40_000, 248), 3_540_000);
            let r = c.report();
            assert_eq!(r["requests"], 2);
            assert_eq!(r["successes"], 1);
            assert_eq!(r["failures"], 1);
            let got = r["time_per_output_token_mean_ms"].as_f64().unwrap();
            assert!((got - tpot).abs() < 1e-9, "{ts:?}: {got} vs {tpot}");
            let itl = r["inter_token_latency_mean_ms"].as_f64().unwrap();
            assert!((itl - tpot).abs() < 1e-9);
            assert_eq!(r["time_to_first_token_mean_ms"], 40.0);
            assert_eq!(r["request_latency_p50_ms"], 3540.0);
            let ntpot = r["normalized_time_per_output_token_mean_ms"]
                .as_f64()
                .unwrap();
            assert!((ntpot - 3540.0 / 248.0).abs() < 1e-9);
            // Ended after a 3.5 s timeout: a failure, as the client saw it.
            let mut late = ClientRecorder::new("x".into(), ts, 3_500_000);
            late.arrived();
            late.completed(&req(0, 40_000, 248), 3_540_000);
            let r = late.report();
            assert_eq!(
                (r["successes"].clone(), r["timed_out"].clone()),
                (0.into(), 1.into())
            );
            assert!(r["normalized_time_per_output_token_mean_ms"].is_null());
        }
    }

    #[test]
    fn percentiles_interpolate_as_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), Some(2.5));
        assert_eq!(percentile(&v, 90.0), Some(3.7));
        assert_eq!(percentile(&v, 99.0), Some(3.9699999999999998));
        assert_eq!(percentile(&[], 50.0), None);
    }
}

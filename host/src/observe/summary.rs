//! The summary `blis observe` prints (spec §2.5): over the `ok` rows with
//! TTFT = first − send > 0 and E2E = last − send ≥ TTFT, the completed
//! count, TTFT/E2E mean and p90/95/99 in ms, ITL from the positive chunk
//! deltas (with `--record-itl`), responses/s and output tokens/s over the
//! measured wall-clock window, and per-session TTFT and duration (max last
//! chunk − round-0 send). Percentiles interpolate linearly between ranks
//! (R-7, as blis's reports).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::Row;
use crate::trace_v2::TraceStatus;

/// Mean and p90/p95/p99 of `v` (sorted in place); `null` when empty.
pub fn stats(v: &mut [f64]) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    json!({
        "mean": round3(mean),
        "p90": round3(percentile(v, 0.90)),
        "p95": round3(percentile(v, 0.95)),
        "p99": round3(percentile(v, 0.99)),
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// R-7 percentile of sorted `v` (non-empty).
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let h = (v.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}

/// The summary of `rows`; `wall_us` is the measured window's length.
pub fn summarize(rows: &[Row], wall_us: i64, itl_recorded: bool) -> Value {
    let mut ttft = Vec::new();
    let mut e2e = Vec::new();
    let mut itl = Vec::new();
    let mut output_tokens = 0u64;
    let mut counts = [0u64; 3];
    // session → (round-0 send, round-0 ttft, max last chunk)
    let mut sessions: BTreeMap<&str, (Option<i64>, Option<f64>, i64)> = BTreeMap::new();
    for r in rows {
        let o = &r.rec;
        counts[match o.status {
            TraceStatus::Ok => 0,
            TraceStatus::Error => 1,
            _ => 2,
        }] += 1;
        if o.status != TraceStatus::Ok {
            continue;
        }
        let t = o.first_chunk_time_us - o.send_time_us;
        let e = o.last_chunk_time_us - o.send_time_us;
        if t <= 0 || e < t {
            continue;
        }
        ttft.push(t as f64 / 1000.0);
        e2e.push(e as f64 / 1000.0);
        output_tokens += o.output_tokens;
        for w in r.chunks.windows(2) {
            let d = w[1] - w[0];
            if d > 0 {
                itl.push(d as f64 / 1000.0);
            }
        }
        if !o.session_id.is_empty() {
            let s = sessions.entry(&o.session_id).or_insert((None, None, 0));
            if o.round_index == 0 {
                s.0 = Some(o.send_time_us);
                s.1 = Some(t as f64 / 1000.0);
            }
            s.2 = s.2.max(o.last_chunk_time_us);
        }
    }
    let completed = ttft.len() as u64;
    let secs = (wall_us.max(1)) as f64 / 1e6;
    let mut out = json!({
        "recorded": rows.len(),
        "ok": counts[0],
        "error": counts[1],
        "timeout": counts[2],
        "completed": completed,
        "ttft_ms": stats(&mut ttft),
        "e2e_ms": stats(&mut e2e),
        "itl_ms": if itl_recorded { stats(&mut itl) } else { Value::Null },
        "wall_clock_s": round3(secs),
        "responses_per_s": round3(completed as f64 / secs),
        "output_tokens_per_s": round3(output_tokens as f64 / secs),
    });
    if !sessions.is_empty() {
        let mut s_ttft: Vec<f64> = sessions.values().filter_map(|s| s.1).collect();
        let mut dur: Vec<f64> = sessions
            .values()
            .filter_map(|s| s.0.map(|send| (s.2 - send) as f64 / 1000.0))
            .collect();
        out["sessions"] = json!({
            "count": sessions.len(),
            "ttft_ms": stats(&mut s_ttft),
            "duration_ms": stats(&mut dur),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r7_percentiles_of_a_hand_computed_case() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&v, 0.9), 4.6);
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        let s = stats(&mut [4.0, 1.0, 2.0, 3.0, 5.0]);
        assert_eq!(s["mean"], 3.0);
        assert_eq!(s["p95"], 4.8);
    }
}

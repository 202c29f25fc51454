//! The `pd` section of the report (prefill/decode disaggregation) and the
//! per-instance P/D counts.

use serde_json::{json, Map, Value};

use crate::cluster::pd::{PdReport, PoolRole};
use crate::engine::Tick;

use super::distribution::stats_of;

/// `max / min` of `values`: 1 when all are 0, null when only the minimum is.
fn imbalance(values: impl Iterator<Item = f64>) -> Value {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if hi == 0.0 {
        json!(1.0)
    } else if lo == 0.0 {
        Value::Null
    } else {
        json!(hi / lo)
    }
}

/// The per-instance P/D counts: prefill legs handed off and requests
/// received by KV transfer. Per instance, `injected_requests` (transfers
/// included) = completed + still_queued + still_running + dropped +
/// prefill_handoffs.
pub fn instance_fields(pd: &PdReport, i: usize, m: &mut Map<String, Value>) {
    m.insert("prefill_handoffs".into(), json!(pd.handoffs[i]));
    m.insert("kv_transfers_in".into(), json!(pd.transfers_in[i]));
}

/// The `pd` object. `completed[i]` = requests completed on instance i;
/// `stats` writes a latency population's statistics.
pub fn section(
    pd: &PdReport,
    completed: &[u64],
    duration_s: f64,
    stats: impl Fn(Option<super::distribution::TickStats>) -> Value,
) -> Value {
    let per_s = |x: f64| {
        if duration_s > 0.0 {
            x / duration_s
        } else {
            0.0
        }
    };
    let mut pools = Vec::new();
    let (mut prefills, mut decodes) = (0u64, 0u64);
    for p in &pd.pools {
        let r = p.first as usize..(p.first + p.count) as usize;
        let handoffs: u64 = pd.handoffs[r.clone()].iter().sum();
        let done: u64 = completed[r.clone()].iter().sum();
        if p.role != PoolRole::Decode {
            prefills += handoffs;
        }
        if p.role != PoolRole::Prefill {
            decodes += done;
        }
        let mut pool = json!({
            "name": p.name,
            "role": p.role.name(),
            "instances": p.count,
            "first_instance": p.first,
            "prefill_handoffs": handoffs,
            "completed_requests": done,
            "requests_per_sec": per_s((handoffs + done) as f64),
            "load_imbalance_ratio":
                imbalance(r.clone().map(|i| (pd.handoffs[i] + completed[i]) as f64)),
        });
        if p.role == PoolRole::Encode {
            let encoded: u64 = pd.encodes[r.clone()].iter().sum();
            pool["encoded_requests"] = json!(encoded);
            pool["requests_per_sec"] = json!(per_s(encoded as f64));
            pool["load_imbalance_ratio"] = json!(imbalance(r.map(|i| pd.encodes[i] as f64)));
        }
        pools.push(pool);
    }
    let t = &pd.transfers;
    let mut durations: Vec<Tick> = t.durations.clone();
    let mut out = json!({
        "decider": pd.decider,
        "disaggregated_requests": pd.disaggregated,
        "prefill_throughput": per_s(prefills as f64),
        "decode_throughput": per_s(decodes as f64),
        "load_imbalance_ratio": imbalance([prefills as f64, decodes as f64].into_iter()),
        "kv_transfers": {
            "started": t.started,
            "completed": t.completed,
            "in_flight": t.active,
            "dropped_at_decode_kv": pd.dropped_at_decode_kv,
            "contention": pd.contention,
            "total_gb": t.bytes / 1e9,
            "peak_concurrent": t.peak,
            "mean_concurrent_at_start":
                if t.started == 0 { 0.0 } else { t.depth_sum as f64 / t.started as f64 },
            "duration": stats(stats_of(&mut durations)),
        },
        "pools": pools,
    });
    if let Some(d) = pd.encode_decider {
        out["encode_decider"] = json!(d);
        out["encoded_requests"] = json!(pd.encodes.iter().sum::<u64>());
    }
    out
}

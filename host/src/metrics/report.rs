//! The JSON report printed on stdout: one document,
//! `{"cluster", "instances", "slo_classes", "tenants", "fitness"}`.
//! Field names follow the reference simulator where it has them; every
//! field is documented in README.md ("Output reference"). Durations are in
//! milliseconds, rates per second of simulated time; an empty population's
//! statistics are `null`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::cluster::ClusterOutcome;
use crate::engine::Tick;
use crate::request::SloClass;

use super::distribution::{stats_of, CountMap, TickStats};
use super::fitness::{evaluate, FitnessInputs};

fn put_stats(m: &mut Map<String, Value>, prefix: &str, s: Option<TickStats>) {
    let s = s.map(TickStats::to_ms);
    let v = |x: Option<f64>| x.map_or(Value::Null, |x| json!(x));
    let s = s.unwrap_or_default();
    m.insert(format!("{prefix}_mean_ms"), v(s.mean));
    m.insert(format!("{prefix}_p50_ms"), v(s.p50));
    m.insert(format!("{prefix}_p90_ms"), v(s.p90));
    m.insert(format!("{prefix}_p95_ms"), v(s.p95));
    m.insert(format!("{prefix}_p99_ms"), v(s.p99));
    m.insert(format!("{prefix}_min_ms"), v(s.min));
    m.insert(format!("{prefix}_max_ms"), v(s.max));
}

fn stats_object(s: Option<TickStats>) -> Value {
    let mut m = Map::new();
    m.insert("count".into(), json!(s.map_or(0, |s| s.count)));
    let s = s.map(TickStats::to_ms);
    let v = |x: Option<f64>| x.map_or(Value::Null, |x| json!(x));
    let s = s.unwrap_or_default();
    m.insert("mean_ms".into(), v(s.mean));
    m.insert("p50_ms".into(), v(s.p50));
    m.insert("p90_ms".into(), v(s.p90));
    m.insert("p95_ms".into(), v(s.p95));
    m.insert("p99_ms".into(), v(s.p99));
    m.insert("min_ms".into(), v(s.min));
    m.insert("max_ms".into(), v(s.max));
    Value::Object(m)
}

fn rate(x: u64, duration_s: f64) -> f64 {
    if duration_s > 0.0 {
        x as f64 / duration_s
    } else {
        0.0
    }
}

fn ticks_to_s(t: Tick) -> f64 {
    t as f64 / 1e6
}

/// Counts and latency populations of one block (an instance or the cluster).
struct Block {
    completed: u64,
    injected: u64,
    still_queued: u64,
    still_running: u64,
    dropped: u64,
    preemptions: u64,
    input_tokens: u64,
    output_tokens: u64,
    duration: Tick,
    cache_hits: u64,
    cache_lookups: u64,
    peak_kv_blocks: u64,
    steps: u64,
    ttft: Vec<Tick>,
    e2e: Vec<Tick>,
    sched: Vec<Tick>,
    itl: CountMap,
}

impl Block {
    fn write(
        mut self,
        m: &mut Map<String, Value>,
    ) -> (Option<TickStats>, Option<TickStats>, f64, f64) {
        let dur_s = ticks_to_s(self.duration);
        m.insert("completed_requests".into(), json!(self.completed));
        m.insert("injected_requests".into(), json!(self.injected));
        m.insert("still_queued".into(), json!(self.still_queued));
        m.insert("still_running".into(), json!(self.still_running));
        m.insert("dropped_unservable".into(), json!(self.dropped));
        m.insert("preemption_count".into(), json!(self.preemptions));
        m.insert("total_input_tokens".into(), json!(self.input_tokens));
        m.insert("total_output_tokens".into(), json!(self.output_tokens));
        m.insert("simulated_duration_s".into(), json!(dur_s));
        let rps = rate(self.completed, dur_s);
        let tps = rate(self.output_tokens, dur_s);
        m.insert("responses_per_sec".into(), json!(rps));
        m.insert("tokens_per_sec".into(), json!(tps));
        let ttft = stats_of(&mut self.ttft);
        let e2e = stats_of(&mut self.e2e);
        put_stats(m, "ttft", ttft);
        put_stats(m, "e2e", e2e);
        put_stats(m, "itl", self.itl.stats());
        put_stats(m, "scheduling_delay", stats_of(&mut self.sched));
        m.insert(
            "kv_cache_hit_rate".into(),
            json!(if self.cache_lookups == 0 {
                0.0
            } else {
                self.cache_hits as f64 / self.cache_lookups as f64
            }),
        );
        m.insert("peak_kv_blocks".into(), json!(self.peak_kv_blocks));
        m.insert("steps".into(), json!(self.steps));
        (ttft, e2e, rps, tps)
    }
}

/// Build the report.
pub fn build(outcome: &ClusterOutcome, fitness_weights: Option<&BTreeMap<String, f64>>) -> Value {
    let col = &outcome.collector;
    let mut instances = Vec::new();
    let mut cluster = Block {
        completed: 0,
        injected: 0,
        still_queued: 0,
        still_running: 0,
        dropped: 0,
        preemptions: 0,
        input_tokens: 0,
        output_tokens: 0,
        duration: outcome.end_time,
        cache_hits: 0,
        cache_lookups: 0,
        peak_kv_blocks: 0,
        steps: 0,
        ttft: Vec::new(),
        e2e: Vec::new(),
        sched: Vec::new(),
        itl: CountMap::default(),
    };
    for (i, (inst, rec)) in outcome.instances.iter().zip(&col.instances).enumerate() {
        let c = inst.counts();
        let b = Block {
            completed: rec.completed,
            injected: rec.injected,
            still_queued: c.still_queued,
            still_running: c.still_running,
            dropped: rec.dropped,
            preemptions: c.preemptions,
            input_tokens: rec.input_tokens,
            output_tokens: rec.output_tokens,
            duration: rec.last_event,
            cache_hits: c.cache_hit_blocks,
            cache_lookups: c.cache_lookup_blocks,
            peak_kv_blocks: c.peak_kv_blocks,
            steps: c.steps,
            ttft: rec.ttft.clone(),
            e2e: rec.e2e.clone(),
            sched: rec.scheduling_delay.clone(),
            itl: rec.itl.clone(),
        };
        cluster.completed += b.completed;
        cluster.injected += b.injected;
        cluster.still_queued += b.still_queued;
        cluster.still_running += b.still_running;
        cluster.dropped += b.dropped;
        cluster.preemptions += b.preemptions;
        cluster.input_tokens += b.input_tokens;
        cluster.output_tokens += b.output_tokens;
        cluster.cache_hits += b.cache_hits;
        cluster.cache_lookups += b.cache_lookups;
        cluster.peak_kv_blocks = cluster.peak_kv_blocks.max(b.peak_kv_blocks);
        cluster.steps += b.steps;
        cluster.ttft.extend_from_slice(&rec.ttft);
        cluster.e2e.extend_from_slice(&rec.e2e);
        cluster.sched.extend_from_slice(&rec.scheduling_delay);
        cluster.itl.merge(&rec.itl);
        let mut m = Map::new();
        m.insert("instance".into(), json!(i));
        b.write(&mut m);
        instances.push(Value::Object(m));
    }

    // Cluster block.
    let mut cm = Map::new();
    cm.insert("num_requests".into(), json!(outcome.arrived));
    cm.insert("rejected_requests".into(), json!(outcome.rejected));
    cm.insert("still_in_pipeline".into(), json!(outcome.still_in_pipeline));
    let duration_s = ticks_to_s(outcome.end_time);
    let (ttft, e2e, rps, tps) = cluster.write(&mut cm);

    // Tenants and fairness.
    let mut tenants = Map::new();
    let mut thr = Vec::new();
    for (i, t) in col.tenants.iter().enumerate() {
        if t.arrived == 0 {
            continue;
        }
        let name = col.tenant_names.get(i).cloned().unwrap_or_default();
        let tps_t = rate(t.output_tokens, duration_s);
        thr.push(tps_t);
        tenants.insert(
            name,
            json!({
                "num_requests": t.arrived,
                "rejected_requests": t.rejected,
                "completed_requests": t.completed,
                "total_output_tokens": t.output_tokens,
                "tokens_per_sec": tps_t,
            }),
        );
    }
    let jain = if thr.is_empty() {
        Value::Null
    } else {
        let s: f64 = thr.iter().sum();
        let s2: f64 = thr.iter().map(|x| x * x).sum();
        json!(if s2 == 0.0 {
            1.0
        } else {
            s * s / (thr.len() as f64 * s2)
        })
    };
    cm.insert("jain_fairness_index".into(), jain);
    match &outcome.trace {
        Some(tr) => {
            cm.insert("routing_decisions".into(), json!(tr.decisions));
            cm.insert(
                "mean_regret".into(),
                json!(if tr.decisions == 0 {
                    0.0
                } else {
                    tr.regret_sum / tr.decisions as f64
                }),
            );
            cm.insert("max_regret".into(), json!(tr.regret_max));
        }
        None => {
            cm.insert("routing_decisions".into(), Value::Null);
            cm.insert("mean_regret".into(), Value::Null);
            cm.insert("max_regret".into(), Value::Null);
        }
    }

    // SLO classes (only those that saw requests), in priority order.
    let mut classes = Map::new();
    for (i, c) in col.classes.iter().enumerate() {
        if c.arrived == 0 {
            continue;
        }
        let mut ttft = c.ttft.clone();
        let mut e2e = c.e2e.clone();
        classes.insert(
            SloClass::ALL[i].name().to_string(),
            json!({
                "num_requests": c.arrived,
                "rejected_requests": c.rejected,
                "completed_requests": c.completed,
                "ttft": stats_object(stats_of(&mut ttft)),
                "e2e": stats_object(stats_of(&mut e2e)),
            }),
        );
    }

    let fitness = match fitness_weights {
        Some(w) if !w.is_empty() => {
            let inputs = FitnessInputs {
                ttft: ttft.map(|s| (s.mean, s.p50, s.p99)),
                e2e: e2e.map(|s| (s.mean, s.p50, s.p99)),
                requests_per_sec: rps,
                tokens_per_sec: tps,
            };
            let (score, comps) = evaluate(w, &inputs);
            json!({ "score": score, "components": comps })
        }
        _ => Value::Null,
    };

    json!({
        "cluster": Value::Object(cm),
        "instances": instances,
        "slo_classes": Value::Object(classes),
        "tenants": Value::Object(tenants),
        "fitness": fitness,
    })
}

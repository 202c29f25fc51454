//! The JSON report printed on stdout: one document,
//! `{"cluster", "instances", "slo_classes", "tenants", "fitness"}`, plus
//! `"stages"` when the workload has stages and `"saturation"` with
//! `[saturation]`.
//! Field names follow the reference simulator where it has them; every
//! field is documented in README.md ("Output reference"). Durations are in
//! milliseconds, rates per second of simulated time; an empty population's
//! statistics are `null`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::cluster::ClusterOutcome;
use crate::engine::Tick;
use crate::instance::{Instance, KvOffloadCounts};
use crate::request::SloClass;

use super::distribution::{CountMap, TickStats};
use super::fitness::{evaluate, FitnessInputs};
use super::population::Population;
use super::InstanceRecord;

/// Insert `<prefix>mean_ms`, `<prefix>p50_ms`, … `<prefix>max_ms` (null
/// when the population is empty).
fn put_stats(m: &mut Map<String, Value>, prefix: &str, s: Option<TickStats>) {
    let s = s.map(TickStats::to_ms).unwrap_or_default();
    for (name, x) in [
        ("mean", s.mean),
        ("p50", s.p50),
        ("p90", s.p90),
        ("p95", s.p95),
        ("p99", s.p99),
        ("min", s.min),
        ("max", s.max),
    ] {
        m.insert(
            format!("{prefix}{name}_ms"),
            x.map_or(Value::Null, |x| json!(x)),
        );
    }
}

/// `{"count", "mean_ms", "p50_ms", …}` for one population.
fn stats_object(s: Option<TickStats>) -> Value {
    let mut m = Map::new();
    m.insert("count".into(), json!(s.map_or(0, |s| s.count)));
    put_stats(&mut m, "", s);
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

/// Counts of one block (an instance or the cluster).
#[derive(Default)]
struct Counts {
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
    /// CPU KV tier counts (summed over the instances that have one).
    kv_offload: Option<KvOffloadCounts>,
}

impl Counts {
    /// Instance `inst`'s block, with its record `rec`.
    fn of_instance(inst: &Instance, rec: &InstanceRecord) -> Counts {
        let k = inst.counts();
        Counts {
            completed: rec.completed,
            injected: rec.injected,
            still_queued: k.still_queued,
            still_running: k.still_running,
            dropped: rec.dropped,
            preemptions: k.preemptions,
            input_tokens: rec.input_tokens,
            output_tokens: rec.output_tokens,
            duration: rec.last_event.max(k.last_delivery),
            cache_hits: k.cache_hit_blocks,
            cache_lookups: k.cache_lookup_blocks,
            peak_kv_blocks: k.peak_kv_blocks,
            steps: k.steps,
            kv_offload: k.kv_offload,
        }
    }

    /// Add an instance's counts to this sum (its duration is the run's,
    /// set by the caller; the peak is the largest instance's).
    fn add(&mut self, c: &Counts) {
        self.completed += c.completed;
        self.injected += c.injected;
        self.still_queued += c.still_queued;
        self.still_running += c.still_running;
        self.dropped += c.dropped;
        self.preemptions += c.preemptions;
        self.input_tokens += c.input_tokens;
        self.output_tokens += c.output_tokens;
        self.cache_hits += c.cache_hits;
        self.cache_lookups += c.cache_lookups;
        self.peak_kv_blocks = self.peak_kv_blocks.max(c.peak_kv_blocks);
        self.steps += c.steps;
        add_offload(&mut self.kv_offload, c.kv_offload);
    }
}

/// Add one instance's CPU-tier counts to a sum.
fn add_offload(sum: &mut Option<KvOffloadCounts>, k: Option<KvOffloadCounts>) {
    if let Some(k) = k {
        let s = sum.get_or_insert_with(KvOffloadCounts::default);
        s.capacity += k.capacity;
        s.mirrored_blocks += k.mirrored_blocks;
        s.evictions += k.evictions;
        s.hit_blocks += k.hit_blocks;
        s.reloads += k.reloads;
        s.transfer_time += k.transfer_time;
    }
}

/// The `kv_offload` object: CPU-tier counts, the thrashing rate (evictions
/// per mirrored block) and the reload time charged to steps.
fn offload_object(k: &KvOffloadCounts) -> Value {
    json!({
        "cpu_blocks": k.capacity,
        "cpu_hit_blocks": k.hit_blocks,
        "reloads": k.reloads,
        "mirrored_blocks": k.mirrored_blocks,
        "cpu_evictions": k.evictions,
        "thrashing_rate": if k.mirrored_blocks == 0 {
            0.0
        } else {
            k.evictions as f64 / k.mirrored_blocks as f64
        },
        "transfer_time_ms": k.transfer_time as f64 / 1e3,
    })
}

/// Latency statistics of one block.
struct Latencies {
    ttft: Option<TickStats>,
    e2e: Option<TickStats>,
    itl: Option<TickStats>,
    sched: Option<TickStats>,
}

/// Write a block's fields; returns (requests/s, tokens/s).
fn write_block(m: &mut Map<String, Value>, c: &Counts, l: &Latencies) -> (f64, f64) {
    let dur_s = ticks_to_s(c.duration);
    m.insert("completed_requests".into(), json!(c.completed));
    m.insert("injected_requests".into(), json!(c.injected));
    m.insert("still_queued".into(), json!(c.still_queued));
    m.insert("still_running".into(), json!(c.still_running));
    m.insert("dropped_unservable".into(), json!(c.dropped));
    m.insert("preemption_count".into(), json!(c.preemptions));
    m.insert("total_input_tokens".into(), json!(c.input_tokens));
    m.insert("total_output_tokens".into(), json!(c.output_tokens));
    m.insert("simulated_duration_s".into(), json!(dur_s));
    let rps = rate(c.completed, dur_s);
    let tps = rate(c.output_tokens, dur_s);
    m.insert("responses_per_sec".into(), json!(rps));
    m.insert("tokens_per_sec".into(), json!(tps));
    put_stats(m, "ttft_", l.ttft);
    put_stats(m, "e2e_", l.e2e);
    put_stats(m, "itl_", l.itl);
    put_stats(m, "scheduling_delay_", l.sched);
    m.insert(
        "kv_cache_hit_rate".into(),
        json!(if c.cache_lookups == 0 {
            0.0
        } else {
            c.cache_hits as f64 / c.cache_lookups as f64
        }),
    );
    m.insert("peak_kv_blocks".into(), json!(c.peak_kv_blocks));
    if let Some(k) = &c.kv_offload {
        m.insert("kv_offload".into(), offload_object(k));
    }
    m.insert("steps".into(), json!(c.steps));
    (rps, tps)
}

/// Build the report. Sorts the latency populations in place (no copies:
/// cluster and per-class statistics merge the per-instance sorted runs, or
/// sketches).
pub fn build(
    outcome: &mut ClusterOutcome,
    fitness_weights: Option<&BTreeMap<String, f64>>,
) -> Value {
    for rec in &mut outcome.collector.instances {
        rec.ttft.finish();
        rec.e2e.finish();
        rec.scheduling_delay.finish();
    }
    let col = &outcome.collector;
    let all = None;
    let (instances, mut cluster, cluster_itl) = instance_blocks(outcome);
    let runs = |f: fn(&InstanceRecord) -> &Population| -> Vec<&Population> {
        col.instances.iter().map(f).collect()
    };
    let ttft_runs = runs(|r| &r.ttft);
    let e2e_runs = runs(|r| &r.e2e);
    let sched_runs = runs(|r| &r.scheduling_delay);

    // Cluster block.
    let mut cm = Map::new();
    cm.insert("num_requests".into(), json!(outcome.arrived));
    cm.insert("rejected_requests".into(), json!(outcome.rejected));
    let by = &outcome.rejected_by;
    cm.insert(
        "rejected_by".into(),
        json!({
            "admission": by.admission,
            "filter": by.filter,
            "gateway": by.gateway,
            "tenant_budget": by.tenant_budget,
            "no_routable_instance": by.no_instance,
        }),
    );
    if col.models.is_some() {
        cm["rejected_by"]["unroutable_by_model"] = json!(by.unroutable_by_model);
    }
    cm.insert("still_in_pipeline".into(), json!(outcome.still_in_pipeline));
    if let Some(pd) = &outcome.pd {
        // A request received by transfer was injected once, at its prefill.
        cluster.injected -= pd.transfers_in_total();
        cm.insert("in_transfer".into(), json!(pd.in_transfer()));
    }
    let duration_s = ticks_to_s(outcome.duration);
    let cl = Latencies {
        ttft: Population::stats(&ttft_runs, all),
        e2e: Population::stats(&e2e_runs, all),
        itl: cluster_itl.stats(),
        sched: Population::stats(&sched_runs, all),
    };
    let (rps, tps) = write_block(&mut cm, &cluster, &cl);
    let (ttft, e2e) = (cl.ttft, cl.e2e);
    let (tenants, jain) = tenants_section(outcome, duration_s);
    cm.insert("jain_fairness_index".into(), jain);
    write_regret(&mut cm, outcome);
    let classes = classes_section(outcome, &ttft_runs, &e2e_runs, duration_s);
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
    if let Some(slo) = &col.slo {
        cm.insert("slo".into(), slo.total_report(outcome.arrived, duration_s));
    }
    if let Some((g, depth)) = &outcome.gateway {
        cm.insert(
            "flow_control".into(),
            json!({
                "queued": g.queued,
                "dispatched": g.dispatched,
                "rejected": g.rejected,
                "shed": g.shed,
                "expired": g.expired,
                "evicted": g.evicted,
                "depth_at_end": depth,
                "peak_depth": g.peak_depth,
            }),
        );
    }
    let mut report = json!({
        "cluster": Value::Object(cm),
        "instances": instances,
        "slo_classes": classes,
        "tenants": tenants,
        "fitness": fitness,
    });
    add_sections(&mut report, outcome, cluster.output_tokens, duration_s);
    report
}

/// One block per instance, and the cluster's counts and ITL summed over
/// them.
fn instance_blocks(outcome: &ClusterOutcome) -> (Vec<Value>, Counts, CountMap) {
    let col = &outcome.collector;
    let all = None;
    let mut instances = Vec::new();
    let mut cluster = Counts {
        duration: outcome.duration,
        ..Counts::default()
    };
    let mut cluster_itl = CountMap::default();
    for (i, (inst, rec)) in outcome.instances.iter().zip(&col.instances).enumerate() {
        let c = Counts::of_instance(inst, rec);
        cluster.add(&c);
        cluster_itl.merge(&rec.itl);
        let l = Latencies {
            ttft: Population::stats(&[&rec.ttft], all),
            e2e: Population::stats(&[&rec.e2e], all),
            itl: rec.itl.stats(),
            sched: Population::stats(&[&rec.scheduling_delay], all),
        };
        let mut m = Map::new();
        m.insert("instance".into(), json!(i));
        write_block(&mut m, &c, &l);
        if let Some(pd) = &outcome.pd {
            super::pd_report::instance_fields(pd, i, &mut m);
        }
        instances.push(Value::Object(m));
    }
    (instances, cluster, cluster_itl)
}

/// The tenants section (those that saw requests) and Jain's fairness index
/// of their output throughput (null without tenants).
fn tenants_section(outcome: &ClusterOutcome, duration_s: f64) -> (Value, Value) {
    let col = &outcome.collector;
    let mut tenants = Map::new();
    let mut thr = Vec::new();
    for (i, t) in col.tenants.iter().enumerate() {
        if t.arrived == 0 {
            continue;
        }
        let name = col.tenant_names.get(i).cloned().unwrap_or_default();
        let tps_t = rate(t.output_tokens, duration_s);
        thr.push(tps_t);
        let mut entry = json!({
            "num_requests": t.arrived,
            "rejected_requests": t.rejected,
            "completed_requests": t.completed,
            "total_output_tokens": t.output_tokens,
            "tokens_per_sec": tps_t,
        });
        if let Some(b) = &outcome.tenant_budget_rejected {
            entry["budget_rejected"] = json!(b.get(i).copied().unwrap_or(0));
        }
        tenants.insert(name, entry);
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
    (Value::Object(tenants), jain)
}

/// Routing decisions and their regret (null without a decision trace).
fn write_regret(cm: &mut Map<String, Value>, outcome: &ClusterOutcome) {
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
}

/// SLO classes (only those that saw requests), in priority order.
fn classes_section(
    outcome: &ClusterOutcome,
    ttft_runs: &[&Population],
    e2e_runs: &[&Population],
    duration_s: f64,
) -> Value {
    let col = &outcome.collector;
    let mut classes = Map::new();
    for (i, c) in col.classes.iter().enumerate() {
        if c.arrived == 0 {
            continue;
        }
        let class = Some(i as u8);
        let mut entry = json!({
            "num_requests": c.arrived,
            "rejected_requests": c.rejected,
            "completed_requests": c.completed,
            "ttft": stats_object(Population::stats(ttft_runs, class)),
            "e2e": stats_object(Population::stats(e2e_runs, class)),
        });
        if let Some(slo) = &col.slo {
            entry["slo"] = slo.class_report(i, c.arrived, duration_s);
        }
        classes.insert(SloClass::ALL[i].name().to_string(), entry);
    }
    Value::Object(classes)
}

/// The optional sections: P/D, stages, saturation, control plane,
/// adapters, models.
fn add_sections(
    report: &mut Value,
    outcome: &mut ClusterOutcome,
    output_tokens: u64,
    duration_s: f64,
) {
    if let Some(pd) = &outcome.pd {
        let completed: Vec<u64> = outcome
            .collector
            .instances
            .iter()
            .map(|r| r.completed)
            .collect();
        report["pd"] = super::pd_report::section(pd, &completed, duration_s, stats_object);
    }
    if let Some(stages) = &mut outcome.collector.stages {
        report["stages"] = stages.report(put_stats);
    }
    if let Some(c) = &mut outcome.collector.client {
        report["client"] = c.report();
    }
    if let Some(s) = &mut outcome.collector.saturation {
        report["saturation"] = s.report();
    }
    if let Some(c) = &outcome.control {
        report["control"] = c.report(outcome.end_time, output_tokens);
    }
    if let Some(a) = &mut outcome.collector.adapters {
        report["adapters"] = a.report(&outcome.instances, duration_s);
    }
    if let Some(m) = &outcome.collector.models {
        report["models"] = models_section(outcome, m);
    }
}

/// The `models` section: per model, the cluster block's fields over its
/// instances (rates over the run's duration), with its `num_requests`,
/// `rejected_requests`, `unroutable_by_model` and `instances`.
fn models_section(outcome: &ClusterOutcome, m: &super::models::ModelRecorder) -> Value {
    let col = &outcome.collector;
    let all = None;
    let mut out = Map::new();
    for (k, name) in m.names.iter().enumerate() {
        let mine: Vec<usize> = (0..outcome.instances.len())
            .filter(|&i| m.of_instance.get(i) == Some(&(k as u32)))
            .collect();
        let mut c = Counts {
            duration: outcome.duration,
            ..Counts::default()
        };
        let mut itl = CountMap::default();
        for &i in &mine {
            let rec = &col.instances[i];
            c.add(&Counts::of_instance(&outcome.instances[i], rec));
            itl.merge(&rec.itl);
        }
        let runs = |f: fn(&InstanceRecord) -> &Population| -> Vec<&Population> {
            mine.iter().map(|&i| f(&col.instances[i])).collect()
        };
        let l = Latencies {
            ttft: Population::stats(&runs(|r| &r.ttft), all),
            e2e: Population::stats(&runs(|r| &r.e2e), all),
            itl: itl.stats(),
            sched: Population::stats(&runs(|r| &r.scheduling_delay), all),
        };
        let mut b = Map::new();
        b.insert("num_requests".into(), json!(m.arrived[k]));
        b.insert("rejected_requests".into(), json!(m.rejected[k]));
        b.insert("unroutable_by_model".into(), json!(m.unroutable[k]));
        // Arrived, neither rejected nor at an instance yet (admission and
        // routing delays; nonzero only when a horizon stops the run).
        b.insert(
            "still_in_pipeline".into(),
            json!(m.arrived[k].saturating_sub(m.rejected[k] + c.injected)),
        );
        b.insert("instances".into(), json!(mine.len()));
        write_block(&mut b, &c, &l);
        out.insert(name.clone(), Value::Object(b));
    }
    Value::Object(out)
}

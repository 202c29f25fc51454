//! End-of-run checks of a campaign run: INV-1 at every level of the report,
//! INV-5 and the final INV-2 transition on every per-request result, the
//! report's counts against the results file, the run's duration against
//! every delivered completion, and the trace against the report and
//! against what the auditor saw at each routing decision (INV-7).

use std::collections::BTreeMap;

use serde_json::Value;

use super::audit::allowed;
use super::runner::RunOutput;
use crate::request::RequestState;

fn u(v: &Value, k: &str) -> Result<u64, String> {
    v[k].as_u64()
        .ok_or_else(|| format!("{k} missing or not a count in {v}"))
}

fn f(v: &Value, k: &str) -> Option<f64> {
    v[k].as_f64()
}

/// Return the formatted error unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        let holds: bool = $cond;
        if !holds {
            return Err(format!($($fmt)+));
        }
    };
}

/// Every check; the first failure, described.
pub fn check(out: &RunOutput) -> Result<(), String> {
    let r = &out.report;
    let c = &r["cluster"];
    let instances = r["instances"].as_array().ok_or("no instances block")?;
    // With P/D pools the pools are the cluster; a request leaves an
    // instance by a prefill hand-off too, and is in transfer between two.
    // With a control plane the fleet grows: one block per instance ever
    // created. (The two are exclusive.)
    // Serve pools (several models) are plain instance groups: no P/D.
    let serve = out.run.pools.iter().any(|p| p.role == "serve");
    let pd = !out.run.pools.is_empty() && !serve;
    let of_model = instance_models(out);
    let n_instances = match r["control"]["instances"].as_array() {
        Some(lives) => lives.len() as u32,
        None if !out.run.pools.is_empty() => out.run.pools.iter().map(|p| p.instances).sum(),
        None => out.run.instance.count,
    };
    let pd_count = |b: &Value, k: &str| if pd { u(b, k) } else { Ok(0) };
    ensure!(
        instances.len() as u32 == n_instances
            && (!out.run.pools.is_empty() || n_instances >= out.run.instance.count),
        "{} instance blocks for {} instances",
        instances.len(),
        n_instances
    );
    // INV-1: the pipeline and every level.
    ensure!(
        u(c, "num_requests")?
            == u(c, "injected_requests")? + u(c, "rejected_requests")? + u(c, "still_in_pipeline")?,
        "INV-1 (pipeline): {c}"
    );
    ensure!(
        u(c, "injected_requests")?
            == u(c, "completed_requests")?
                + u(c, "still_queued")?
                + u(c, "still_running")?
                + u(c, "dropped_unservable")?
                + pd_count(c, "in_transfer")?,
        "INV-1: {c}"
    );
    for b in instances {
        ensure!(
            u(b, "injected_requests")?
                == u(b, "completed_requests")?
                    + u(b, "still_queued")?
                    + u(b, "still_running")?
                    + u(b, "dropped_unservable")?
                    + pd_count(b, "prefill_handoffs")?,
            "INV-1: {b}"
        );
    }
    if pd {
        let t = &r["pd"]["kv_transfers"];
        ensure!(
            u(t, "started")? == u(t, "completed")? + u(t, "in_flight")?
                && u(t, "in_flight")? == u(c, "in_transfer")?,
            "P/D transfers not conserved: {t}, in_transfer {}",
            c["in_transfer"]
        );
        let sum = |k: &str| -> Result<u64, String> { instances.iter().map(|b| u(b, k)).sum() };
        ensure!(
            u(c, "injected_requests")? == sum("injected_requests")? - sum("kv_transfers_in")?,
            "cluster injected counts a transferred request twice: {c}"
        );
    }
    for k in [
        "completed_requests",
        "still_queued",
        "still_running",
        "dropped_unservable",
        "preemption_count",
        "total_output_tokens",
        "total_input_tokens",
        "steps",
    ] {
        let sum: u64 = instances
            .iter()
            .map(|b| u(b, k))
            .sum::<Result<u64, String>>()?;
        ensure!(
            sum == u(c, k)?,
            "cluster {k} = {} but the instances sum to {sum}",
            u(c, k)?
        );
    }
    if out.run.horizon_us.is_none() {
        ensure!(
            u(c, "still_in_pipeline")?
                + u(c, "still_queued")?
                + u(c, "still_running")?
                + pd_count(c, "in_transfer")?
                == 0,
            "INV-2: without a horizon every request must end: {c}"
        );
    }
    let classes: u64 = r["slo_classes"]
        .as_object()
        .ok_or("no slo_classes")?
        .values()
        .map(|v| u(v, "completed_requests"))
        .sum::<Result<u64, String>>()?;
    ensure!(
        classes == u(c, "completed_requests")?,
        "SLO classes complete {classes}, cluster {}",
        u(c, "completed_requests")?
    );
    let tenants: u64 = r["tenants"]
        .as_object()
        .ok_or("no tenants")?
        .values()
        .map(|v| u(v, "completed_requests"))
        .sum::<Result<u64, String>>()?;
    ensure!(
        tenants == u(c, "completed_requests")?,
        "tenants complete {tenants}, cluster {}",
        u(c, "completed_requests")?
    );
    let duration_s = f(c, "simulated_duration_s").ok_or("no duration")?;
    let duration = (duration_s * 1e6).round() as i64;
    let tps = f(c, "tokens_per_sec").ok_or("no tokens_per_sec")?;
    let want_tps = if duration_s > 0.0 {
        u(c, "total_output_tokens")? as f64 / duration_s
    } else {
        0.0
    };
    ensure!(
        tps == want_tps,
        "tokens_per_sec {tps} is not total_output_tokens / simulated_duration_s = {want_tps}"
    );

    // Per-request results.
    let lines: Vec<Value> = out
        .results
        .lines()
        .map(|l| serde_json::from_str(l).map_err(|e| format!("results line {l}: {e}")))
        .collect::<Result<_, _>>()?;
    ensure!(
        lines.len() as u64 == u(c, "num_requests")?,
        "{} result lines for {} requests",
        lines.len(),
        u(c, "num_requests")?
    );
    let mut status: BTreeMap<String, u64> = BTreeMap::new();
    for (i, l) in lines.iter().enumerate() {
        ensure!(
            u(l, "id")? == i as u64,
            "result line {i} has id {}",
            l["id"]
        );
        let st = l["status"].as_str().ok_or("no status")?.to_string();
        *status.entry(st.clone()).or_default() += 1;
        let arrival = l["arrival_us"].as_i64().ok_or("no arrival")?;
        // INV-5: arrival ≤ scheduling ≤ first token ≤ completion.
        let sched = f(l, "scheduling_delay_ms");
        let ttft = f(l, "ttft_ms");
        let e2e = f(l, "e2e_ms");
        let mut last = 0.0;
        for x in [sched, ttft, e2e].into_iter().flatten() {
            ensure!(x >= last, "INV-5: request {i}: {l}");
            last = x;
        }
        let final_state = match st.as_str() {
            "completed" => RequestState::Completed,
            "rejected" => RequestState::Rejected,
            "dropped" => RequestState::Dropped,
            "queued" => RequestState::Queued,
            "running" => RequestState::Running,
            "in_pipeline" => RequestState::Pipeline,
            "in_transfer" if pd => RequestState::Transferring,
            other => return Err(format!("unknown status {other}")),
        };
        if let Some(&seen) = out.audit.last_seen.get(&(i as u64)) {
            let drained = r["control"].is_object()
                && seen == RequestState::Queued
                && final_state == RequestState::Dropped;
            // (A P/D request dropped at its decode reservation leaves in
            // the event that ends its prefill: Running → Transferring → Dropped.)
            let via_transfer = pd
                && allowed(seen, RequestState::Transferring)
                && allowed(RequestState::Transferring, final_state);
            // (In-flight eviction drops a queued or running request.)
            let evicted = out
                .run
                .flow_control
                .as_ref()
                .is_some_and(|f| f.in_flight_eviction)
                && matches!(seen, RequestState::Queued | RequestState::Running)
                && final_state == RequestState::Dropped;
            ensure!(
                allowed(seen, final_state) || drained || via_transfer || evicted,
                "INV-2: request {i} last seen {seen:?}, ended {st}"
            );
        }
        match final_state {
            RequestState::Completed => {
                ensure!(e2e.is_some(), "completed request {i} without e2e: {l}");
                let done = arrival + (e2e.unwrap_or(0.0) * 1000.0).round() as i64;
                ensure!(
                    done <= duration + 1,
                    "request {i} completed at {done} µs, after the run's duration {duration} µs"
                );
                if u(l, "output_tokens")? > 0 {
                    ensure!(ttft.is_some(), "completed request {i} without ttft: {l}");
                }
            }
            RequestState::Rejected | RequestState::Pipeline => {
                ensure!(
                    e2e.is_none() && ttft.is_none(),
                    "request {i} never served has latencies: {l}"
                );
            }
            _ => {}
        }
        if !matches!(final_state, RequestState::Rejected) && !l["instance"].is_null() {
            let inst = u(l, "instance")?;
            ensure!(
                inst < u64::from(n_instances),
                "request {i} on instance {inst}"
            );
            // (Under P/D a disaggregated request is routed to its prefill
            // instance and ends on its decode instance.)
            if let Some(seen) = out.audit.routed.get(&(i as u64)).filter(|_| !pd) {
                ensure!(
                    u64::from(seen.chosen) == inst,
                    "request {i}: routed to {} but results say {inst}",
                    seen.chosen
                );
            }
        }
    }
    for (st, key) in [
        ("completed", "completed_requests"),
        ("rejected", "rejected_requests"),
        ("dropped", "dropped_unservable"),
        ("queued", "still_queued"),
        ("running", "still_running"),
        ("in_pipeline", "still_in_pipeline"),
        (
            "in_transfer",
            if pd {
                "in_transfer"
            } else {
                "still_in_pipeline"
            },
        ),
    ] {
        if st == "in_transfer" && !pd {
            continue;
        }
        let n = status.get(st).copied().unwrap_or(0);
        ensure!(
            n == u(c, key)?,
            "{n} results are {st}, the report says {key} = {}",
            u(c, key)?
        );
    }

    // The decision trace.
    let mut routings = 0u64;
    let mut rejections = 0u64;
    // Which signals a decision reads live: an llm-d file scrapes the
    // model servers' metrics periodically (every signal, 50 ms unless it
    // says otherwise), and `[routing.freshness]` may make any periodic.
    let epp = out.run.routing.epp_config.is_some();
    let periodic = |v: Option<i64>| v.is_some_and(|v| v > 0);
    let fr = out.run.routing.freshness.clone().unwrap_or_default();
    let live_queue = !epp && !periodic(fr.queue_depth_us) && !periodic(fr.batch_size_us);
    let fresh = !epp
        && out.run.routing.snapshot_refresh_interval_us == 0
        && !periodic(fr.kv_utilization_us);
    for l in out.trace.lines() {
        let v: Value = serde_json::from_str(l).map_err(|e| format!("trace line {l}: {e}"))?;
        let id = u(&v, "request_id")?;
        match v["kind"].as_str() {
            Some("admission") => {
                rejections += 1;
                ensure!(
                    lines
                        .get(id as usize)
                        .is_some_and(|l| l["status"] == "rejected"),
                    "trace rejects request {id}, results disagree"
                );
            }
            Some("routing") if v["chosen"].is_null() => {
                // A profile's filters left no candidate: a rejection.
                rejections += 1;
                ensure!(
                    v["rejected"].is_string()
                        && lines
                            .get(id as usize)
                            .is_some_and(|l| l["status"] == "rejected"),
                    "trace rejects request {id} at routing, results disagree: {v}"
                );
            }
            Some("routing") => {
                routings += 1;
                let chosen = u(&v, "chosen")? as u32;
                let mut seen = out.audit.routed.get(&id).ok_or_else(|| {
                    format!("trace routes request {id}, the audit saw no routing")
                })?;
                // A request a `redirect` drain sent back was routed before.
                if let Some(earlier) = v["time_us"]
                    .as_i64()
                    .and_then(|t| out.audit.routed_before.get(&(id, t)))
                {
                    seen = earlier;
                }
                ensure!(
                    seen.chosen == chosen && v["time_us"].as_i64() == Some(seen.time),
                    "trace routing of {id} differs from the run: {v}"
                );
                let cands = v["candidates"].as_array().ok_or("no candidates")?;
                // With a control plane only the routable instances are
                // candidates; with several models only the request's model's
                // (with both, the routable ones of them).
                if serve {
                    let scaled = r["control"].is_object();
                    let model = lines.get(id as usize).and_then(|l| l["model"].as_str());
                    let theirs = of_model
                        .iter()
                        .filter(|m| Some(m.as_str()) == model)
                        .count();
                    ensure!(
                        (cands.len() == theirs || (scaled && !cands.is_empty() && cands.len() < theirs))
                            && cands.iter().all(|x| {
                                x["instance"]
                                    .as_u64()
                                    .and_then(|i| of_model.get(i as usize))
                                    .map(String::as_str)
                                    == model
                            }),
                        "request {id} for model {model:?}: candidates {cands:?} are not its model's {theirs} instances"
                    );
                }
                // A profile's filters remove instances from the candidates.
                let removed: usize = v["filtered"].as_array().map_or(0, |fs| {
                    fs.iter()
                        .filter_map(|f| f["removed"].as_array())
                        .map(Vec::len)
                        .sum()
                });
                ensure!(
                    cands.len() + removed == seen.queue_depth.len()
                        || ((r["control"].is_object() || serve)
                            && cands.len() + removed < seen.queue_depth.len()),
                    "{} candidates and {removed} filtered out for {} instances",
                    cands.len(),
                    seen.queue_depth.len()
                );
                let best = cands
                    .iter()
                    .filter_map(|x| f(x, "score"))
                    .fold(f64::NEG_INFINITY, f64::max);
                let regret = f(&v, "regret").ok_or("no regret")?;
                ensure!(
                    regret >= 0.0
                        && regret
                            == (best - f(&v, "chosen_score").ok_or("no chosen_score")?).max(0.0),
                    "regret {regret} is not best − chosen: {v}"
                );
                if out.run.routing.policy == "weighted" {
                    ensure!(
                        regret == 0.0,
                        "weighted routing chose a non-best instance: {v}"
                    );
                }
                // INV-7: Tier 1 is live at every decision, Tier 2 too unless
                // made periodic, Tier 3 too with no refresh interval.
                for x in cands {
                    let i = u(x, "instance")? as usize;
                    ensure!(
                        u(x, "pending")? == u64::from(seen.pending[i]),
                        "INV-7: request {id} saw pending {} at instance {i}, the cluster had {}",
                        x["pending"],
                        seen.pending[i]
                    );
                    ensure!(
                        !live_queue
                            || (u(x, "queue_depth")? == u64::from(seen.queue_depth[i])
                                && u(x, "batch_size")? == u64::from(seen.batch_size[i])),
                        "INV-7: request {id} saw stale queue/batch at instance {i}: {x}"
                    );
                    if fresh {
                        ensure!(
                            u(x, "free_kv_blocks")? == seen.free_kv_blocks[i],
                            "INV-7: request {id} saw free KV {} at instance {i}, live {}",
                            x["free_kv_blocks"],
                            seen.free_kv_blocks[i]
                        );
                    }
                }
            }
            other => return Err(format!("unknown trace record kind {other:?}")),
        }
    }
    // P/D routing decisions are not traced (yet).
    let routed = if pd {
        0
    } else {
        (out.audit.routed.len() + out.audit.routed_before.len()) as u64
    };
    ensure!(
        routings == routed,
        "{routings} routing records, {routed} routings ran"
    );
    ensure!(
        Some(routings) == c["routing_decisions"].as_u64(),
        "{routings} routing records, report says {}",
        c["routing_decisions"]
    );
    ensure!(
        rejections == u(c, "rejected_requests")?,
        "{rejections} rejection records, report says {}",
        u(c, "rejected_requests")?
    );
    if !c["flow_control"].is_null() {
        check_gateway(out, c, &lines)?;
    }
    if out.run.tenants.is_some() {
        check_tenant_budgets(out, r, &lines)?;
    }
    if serve {
        check_models(out, r, &lines)?;
        check_pool_scaling(out, r)?;
    }
    Ok(())
}

/// The model each instance serves, from the serve pools in file order,
/// then (control plane) the pool of each instance the autoscaler added
/// (empty without pools).
fn instance_models(out: &RunOutput) -> Vec<String> {
    let model = |p: &crate::config::PoolSection| {
        p.model
            .get("name")
            .and_then(|v| v.as_str())
            .unwrap_or(&out.run.model.name)
            .to_string()
    };
    let mut of_instance: Vec<String> = Vec::new();
    for p in &out.run.pools {
        of_instance.extend(std::iter::repeat_n(model(p), p.instances as usize));
    }
    let lives = out.report["control"]["instances"].as_array();
    for l in lives.into_iter().flatten().skip(of_instance.len()) {
        let pool = out.run.pools.iter().find(|p| l["pool"] == p.name.as_str());
        of_instance.push(pool.map_or_else(|| "(no pool)".to_string(), model));
    }
    of_instance
}

/// Serve pools under an autoscaler: each pool ends within its own bounds,
/// its instances created are those the report lists with its name, and
/// the pools' counts add up to the autoscaler's.
fn check_pool_scaling(out: &RunOutput, r: &Value) -> Result<(), String> {
    let a = &r["control"]["autoscaler"];
    let Some(pools) = a["pools"].as_array() else {
        return Ok(());
    };
    let lives = r["control"]["instances"]
        .as_array()
        .ok_or("no control instances")?;
    ensure!(
        pools.len() == out.run.pools.len(),
        "{} autoscaler pools: {a}",
        pools.len()
    );
    let mut added = 0;
    for (p, spec) in pools.iter().zip(&out.run.pools) {
        let live = u(p, "live_instances")?;
        let (lo, hi) = (u(p, "min_instances")?, u(p, "max_instances")?);
        ensure!(
            p["pool"] == spec.name.as_str() && lo <= live && live <= hi,
            "pool out of its bounds: {p}"
        );
        let mine = lives.iter().filter(|l| l["pool"] == spec.name.as_str());
        let live_listed = mine
            .clone()
            .filter(|l| l["state"] != "draining" && l["state"] != "terminated")
            .count() as u64;
        ensure!(
            live_listed == live
                && mine.count() as u64 == u64::from(spec.instances) + u(p, "instances_added")?,
            "pool {}: {p} against the instances listed",
            spec.name
        );
        added += u(p, "instances_added")?;
    }
    ensure!(
        added == u(a, "instances_added")?,
        "the pools added {added}: {a}"
    );
    Ok(())
}

/// Several models: no request reaches an instance of another model; INV-1
/// per model; each model's section counts what the results file says of
/// its requests; the sections add up to the cluster; a request no instance
/// serves is rejected as `unroutable_by_model`.
fn check_models(out: &RunOutput, r: &Value, lines: &[Value]) -> Result<(), String> {
    let models = r["models"]
        .as_object()
        .ok_or("serve pools but no models section")?;
    let of_instance = instance_models(out);
    let mut seen: BTreeMap<String, [u64; 4]> = BTreeMap::new();
    for l in lines {
        let m = l["model"]
            .as_str()
            .ok_or_else(|| format!("a result line without model: {l}"))?;
        let e = seen.entry(m.to_string()).or_default();
        e[0] += 1;
        match l["status"].as_str() {
            Some("completed") => e[1] += 1,
            Some("rejected") => e[2] += 1,
            _ => {}
        }
        if let Some(i) = l["instance"].as_u64() {
            ensure!(
                of_instance.get(i as usize).map(String::as_str) == Some(m),
                "a request for model {m} reached instance {i}, which serves {:?}: {l}",
                of_instance.get(i as usize)
            );
        } else if !of_instance.iter().any(|s| s == m) && l["status"] == "rejected" {
            e[3] += 1;
        }
    }
    let mut total = 0;
    for (name, m) in models {
        let n = u(m, "num_requests")?;
        let parts: u64 = [
            "completed_requests",
            "rejected_requests",
            "dropped_unservable",
            "still_queued",
            "still_running",
            "still_in_pipeline",
        ]
        .iter()
        .map(|k| u(m, k))
        .sum::<Result<u64, String>>()?;
        ensure!(n == parts, "INV-1 for model {name}: {m}");
        let [lines_n, done, rejected, unroutable] = seen.get(name).copied().unwrap_or_default();
        ensure!(
            n == lines_n && u(m, "completed_requests")? == done && u(m, "rejected_requests")? == rejected,
            "model {name}: the report says {m}, the results file {lines_n} requests, {done} completed, {rejected} rejected"
        );
        // Of a model no instance serves, nothing completes and every
        // request that got past admission is unroutable (admission and the
        // gateway may reject some first); of a served one, none is.
        let served = of_instance.iter().any(|s| s == name);
        let u_by_model = u(m, "unroutable_by_model")?;
        ensure!(
            if served {
                u_by_model == 0
            } else {
                done == 0 && u_by_model <= unroutable && u_by_model <= rejected
            },
            "model {name} (served: {served}): unroutable_by_model {u_by_model}, {unroutable} of its requests rejected without an instance, {done} completed"
        );
        total += n;
    }
    ensure!(
        total == u(&r["cluster"], "num_requests")?,
        "the models' sections hold {total} requests, the cluster {}",
        r["cluster"]["num_requests"]
    );
    ensure!(
        seen.keys().all(|k| models.contains_key(k)),
        "results name models the report has no section for: {:?}",
        seen.keys().collect::<Vec<_>>()
    );
    Ok(())
}

/// Budget refusals: counted per tenant, traced, and only of sheddable classes.
fn check_tenant_budgets(out: &RunOutput, r: &Value, lines: &[Value]) -> Result<(), String> {
    let counted: u64 = r["tenants"]
        .as_object()
        .ok_or("no tenants")?
        .values()
        .map(|t| u(t, "budget_rejected"))
        .sum::<Result<u64, String>>()?;
    let mut traced = 0u64;
    for l in out.trace.lines() {
        let v: Value = serde_json::from_str(l).map_err(|e| format!("trace line {l}: {e}"))?;
        if v["policy"] == "tenant-budget" {
            traced += 1;
            let id = u(&v, "request_id")? as usize;
            let class = lines.get(id).map(|l| l["slo_class"].clone());
            ensure!(
                class
                    .as_ref()
                    .is_some_and(|c| c == "batch" || c == "sheddable" || c == "background"),
                "tenant budget refused request {id} of class {class:?}"
            );
        }
    }
    ensure!(
        traced == counted,
        "{traced} tenant-budget trace records, tenants count {counted}"
    );
    Ok(())
}

/// INV-1 through the gateway queue: everything queued was dispatched, shed,
/// expired or is still queued; refusals, sheds and expiries are rejections
/// (traced with their reason); every routed request was dispatched, and
/// only those have a gateway delay.
fn check_gateway(out: &RunOutput, c: &Value, lines: &[Value]) -> Result<(), String> {
    let g = &c["flow_control"];
    let (queued, dispatched, rejected, shed, expired, depth) = (
        u(g, "queued")?,
        u(g, "dispatched")?,
        u(g, "rejected")?,
        u(g, "shed")?,
        u(g, "expired")?,
        u(g, "depth_at_end")?,
    );
    ensure!(
        queued == dispatched + shed + expired + depth,
        "INV-1 (gateway): queued {queued} ≠ dispatched + shed + expired + depth: {g}"
    );
    ensure!(
        depth <= u(c, "still_in_pipeline")? && u(g, "peak_depth")? >= depth,
        "gateway depth {depth} at the end: {c}"
    );
    // Evicted requests end dropped at their instances, and only with the
    // setting on.
    let evicted = u(g, "evicted")?;
    let evicting = out
        .run
        .flow_control
        .as_ref()
        .is_some_and(|f| f.in_flight_eviction);
    ensure!(
        evicted <= u(c, "dropped_unservable")? && (evicting || evicted == 0),
        "{evicted} evicted, {} dropped, eviction on: {evicting}",
        c["dropped_unservable"]
    );
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for l in out.trace.lines() {
        let v: Value = serde_json::from_str(l).map_err(|e| format!("trace line {l}: {e}"))?;
        if let Some(p) = v["policy"]
            .as_str()
            .and_then(|p| p.strip_prefix("flow-control/"))
        {
            ensure!(v["admitted"] == false, "gateway trace record admits: {v}");
            *reasons.entry(p.to_string()).or_default() += 1;
        }
    }
    for (reason, n) in [
        ("queue-full", rejected),
        ("shed", shed),
        ("expired", expired),
    ] {
        let traced = reasons.remove(reason).unwrap_or(0);
        ensure!(
            traced == n,
            "{traced} `flow-control/{reason}` trace records, the report counts {n}"
        );
    }
    ensure!(
        reasons.is_empty(),
        "unknown gateway trace reasons {reasons:?}"
    );
    let mut delays = 0u64;
    for l in lines {
        let d = l
            .get("gateway_queue_delay_ms")
            .ok_or_else(|| format!("result without gateway_queue_delay_ms: {l}"))?;
        if let Some(d) = d.as_f64() {
            delays += 1;
            ensure!(d >= 0.0, "negative gateway delay: {l}");
        } else {
            ensure!(
                l["instance"].is_null(),
                "request routed without a gateway dispatch: {l}"
            );
        }
    }
    ensure!(
        delays == dispatched,
        "{delays} results with a gateway delay, {dispatched} dispatched"
    );
    Ok(())
}

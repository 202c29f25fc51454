//! Issue 14's traffic control end to end: SLO attainment and goodput equal
//! what the per-request results say; the gateway queue dispatches band by
//! band, counts every refusal, shed and expiry as a rejection (report,
//! results and trace agree), protects critical traffic under overload, is
//! deterministic, and shows in the time series; bad input names its key.

use std::collections::BTreeMap;
use std::process::Output;

use serde_json::Value;

use crate::util::{run_bad, TestDir};

/// Three classes of identical requests at 1.4× the capacity of 2 instances.
const OVERLOAD: &str = r#"
seed = 9
[model]
latency_model = "linear"
alpha = [100.0, 0.5, 20.0]
beta = [2000.0, 5.0, 30.0]
[instance]
count = 2
max_num_seqs = 16
[workload]
aggregate_rate = 300.0
num_requests = 1500
[[workload.clients]]
id = "crit"
tenant_id = "acme"
slo_class = "critical"
rate_fraction = 0.2
arrival = { process = "poisson" }
input = { type = "constant", value = 300 }
output = { type = "constant", value = 50 }
[[workload.clients]]
id = "std"
tenant_id = "globex"
slo_class = "standard"
rate_fraction = 0.4
arrival = { process = "poisson" }
input = { type = "constant", value = 300 }
output = { type = "constant", value = 50 }
[[workload.clients]]
id = "shed"
tenant_id = "initech"
slo_class = "sheddable"
rate_fraction = 0.4
arrival = { process = "poisson" }
input = { type = "constant", value = 300 }
output = { type = "constant", value = 50 }
[routing]
policy = "least-loaded"
[slo.critical]
ttft_ms = 200
[slo.standard]
ttft_ms = 500
e2e_ms = 3000
[output]
results_path = "results.jsonl"
trace_path = "trace.jsonl"
timeseries_path = "ts.jsonl"
timeseries_interval_us = 500000
"#;

const GATEWAY: &str = r#"
[flow_control]
queue_depth_threshold = 4.0
max_depth = 100
shedding = true
request_ttl_us = 1000000
"#;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Run `run.toml` in `dir`: (report, stdout, results lines, trace lines, time series lines).
fn run(dir: &TestDir) -> (Value, String, Vec<Value>, Vec<Value>, Vec<Value>) {
    let o = dir
        .blis()
        .args(["run", "run.toml"])
        .output()
        .expect("run blis");
    assert!(o.status.success(), "blis failed: {}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let lines = |name: &str| -> Vec<Value> {
        std::fs::read_to_string(dir.path().join(name))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    (
        serde_json::from_str(&out).unwrap(),
        out,
        lines("results.jsonl"),
        lines("trace.jsonl"),
        lines("ts.jsonl"),
    )
}

fn close(what: &str, got: &Value, want: f64) {
    let g = got.as_f64().unwrap_or_else(|| panic!("{what}: {got}"));
    assert!(
        (g - want).abs() <= 1e-9 * want.abs().max(1.0),
        "{what}: report {g}, recomputed {want}"
    );
}

#[test]
fn slo_attainment_and_goodput_equal_the_results_file() {
    for (name, text) in [
        ("flow_slo_plain", OVERLOAD.to_string()),
        ("flow_slo_gateway", format!("{OVERLOAD}{GATEWAY}")),
    ] {
        let dir = TestDir::new(name);
        dir.write("run.toml", &text);
        let (r, _, results, _, _) = run(&dir);
        let duration = r["cluster"]["simulated_duration_s"].as_f64().unwrap();
        let targets = BTreeMap::from([
            ("critical", (Some(200.0), None)),
            ("standard", (Some(500.0), Some(3000.0))),
            ("sheddable", (None, None)),
        ]);
        let (mut all_met, mut all_tokens) = (0u64, 0u64);
        for (class, (ttft, e2e)) in targets {
            let mine: Vec<&Value> = results.iter().filter(|l| l["slo_class"] == class).collect();
            let met = |l: &&&Value, target: Option<f64>, key: &str| {
                l["status"] == "completed" && target.is_none_or(|t| l[key].as_f64().unwrap() <= t)
            };
            let ttft_met = mine.iter().filter(|l| met(l, ttft, "ttft_ms")).count() as f64;
            let e2e_met = mine.iter().filter(|l| met(l, e2e, "e2e_ms")).count() as f64;
            let both: Vec<&&Value> = mine
                .iter()
                .filter(|l| met(l, ttft, "ttft_ms") && met(l, e2e, "e2e_ms"))
                .collect();
            let tokens: u64 = both
                .iter()
                .map(|l| l["output_tokens"].as_u64().unwrap())
                .sum();
            let n = mine.len() as f64;
            let slo = &r["slo_classes"][class]["slo"];
            close("ttft_attainment", &slo["ttft_attainment"], ttft_met / n);
            close("e2e_attainment", &slo["e2e_attainment"], e2e_met / n);
            close("attainment", &slo["attainment"], both.len() as f64 / n);
            assert_eq!(slo["met_requests"], both.len());
            close(
                "goodput_rps",
                &slo["goodput_rps"],
                both.len() as f64 / duration,
            );
            close(
                "goodput_tokens",
                &slo["goodput_tokens_per_sec"],
                tokens as f64 / duration,
            );
            all_met += both.len() as u64;
            all_tokens += tokens;
        }
        let total = &r["cluster"]["slo"];
        assert_eq!(total["met_requests"], all_met);
        close(
            "attainment",
            &total["attainment"],
            all_met as f64 / results.len() as f64,
        );
        close(
            "goodput_tokens",
            &total["goodput_tokens_per_sec"],
            all_tokens as f64 / duration,
        );
        // Targets are in the report; a class without targets has nulls.
        assert_eq!(r["slo_classes"]["standard"]["slo"]["e2e_target_ms"], 3000.0);
        assert!(r["slo_classes"]["sheddable"]["slo"]["ttft_target_ms"].is_null());
    }
}

#[test]
fn gateway_counts_agree_with_results_and_trace_and_protect_critical_traffic() {
    let plain = TestDir::new("flow_gateway_off");
    plain.write("run.toml", OVERLOAD);
    let (off, _, off_results, _, off_ts) = run(&plain);
    assert!(off["cluster"].get("flow_control").is_none());
    assert!(off_results
        .iter()
        .all(|l| l.get("gateway_queue_delay_ms").is_none()));
    assert!(off_ts
        .iter()
        .all(|l| l.get("gateway_queue_depth").is_none()));

    let dir = TestDir::new("flow_gateway_on");
    dir.write("run.toml", &format!("{OVERLOAD}{GATEWAY}"));
    let (on, stdout, results, trace, ts) = run(&dir);
    let c = &on["cluster"];
    let g = &c["flow_control"];
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    let (queued, dispatched, rejected, shed, expired, depth) = (
        n(g, "queued"),
        n(g, "dispatched"),
        n(g, "rejected"),
        n(g, "shed"),
        n(g, "expired"),
        n(g, "depth_at_end"),
    );
    // The scenario exercises every outcome.
    assert!(
        rejected > 0 && shed > 0 && expired > 0 && dispatched > 0,
        "{g}"
    );
    assert_eq!(n(g, "peak_depth"), 100, "the queue fills up to max_depth");
    // INV-1 through the gateway.
    assert_eq!(queued + rejected, n(c, "num_requests"), "{g}");
    assert_eq!(queued, dispatched + shed + expired + depth, "{g}");
    assert_eq!(n(c, "rejected_requests"), rejected + shed + expired);
    assert_eq!(
        n(c, "num_requests"),
        n(c, "injected_requests") + n(c, "rejected_requests") + n(c, "still_in_pipeline")
    );
    // Shedding and expiry hit the sheddable class only here; critical and
    // standard are never refused.
    assert_eq!(n(&on["slo_classes"]["critical"], "rejected_requests"), 0);
    assert_eq!(n(&on["slo_classes"]["standard"], "rejected_requests"), 0);
    // Results: a delay exactly for the dispatched requests; the others rejected.
    let mut delays = 0;
    for l in &results {
        match l["gateway_queue_delay_ms"].as_f64() {
            Some(d) => {
                delays += 1;
                assert!(d >= 0.0, "{l}");
                // The delay is part of the time to first token.
                if let Some(ttft) = l["ttft_ms"].as_f64() {
                    assert!(ttft >= d, "{l}");
                }
            }
            None => assert_eq!(l["status"], "rejected", "{l}"),
        }
    }
    assert_eq!(delays, dispatched);
    // Trace: one rejection record per refusal, shed and expiry, none admitted.
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for t in &trace {
        if t["kind"] == "admission" {
            assert_eq!(t["admitted"], false, "{t}");
            *reasons
                .entry(t["policy"].as_str().unwrap().to_string())
                .or_default() += 1;
            let id = t["request_id"].as_u64().unwrap() as usize;
            assert_eq!(results[id]["status"], "rejected");
        }
    }
    eqnice!(
        BTreeMap::from([
            ("flow-control/expired".to_string(), expired),
            ("flow-control/queue-full".to_string(), rejected),
            ("flow-control/shed".to_string(), shed),
        ]),
        reasons
    );
    // The time series shows the queue; it is never deeper than max_depth.
    assert!(ts
        .iter()
        .all(|l| l["gateway_queue_depth"].as_u64().unwrap() <= 100));
    assert!(ts
        .iter()
        .any(|l| l["gateway_queue_depth"].as_u64().unwrap() > 0));
    // Critical traffic: its TTFT p99 and SLO attainment are much better
    // behind the gateway than without it.
    let p99 = |r: &Value| {
        r["slo_classes"]["critical"]["ttft"]["p99_ms"]
            .as_f64()
            .unwrap()
    };
    let att = |r: &Value| {
        r["slo_classes"]["critical"]["slo"]["attainment"]
            .as_f64()
            .unwrap()
    };
    assert!(p99(&on) * 3.0 < p99(&off), "{} vs {}", p99(&on), p99(&off));
    assert!(
        att(&on) > 0.9 && att(&off) < 0.5,
        "{} vs {}",
        att(&on),
        att(&off)
    );
    // Deterministic: a second run prints the same bytes.
    let (_, again, _, _, _) = run(&dir);
    assert_eq!(stdout, again);
}

/// All requests arrive within 4 µs on one instance that serves one at a
/// time (concurrency detector, max_concurrency 1): after the first, the
/// gateway dispatches band by band — critical, standard, batch, sheddable —
/// and within a band by fairness across tenants.
#[test]
fn gateway_dispatches_band_by_band_and_tenants_by_fairness() {
    // id: class, tenant. Arrival order mixes classes and tenants.
    let rows = [
        ("sheddable", "b"),
        ("batch", "a"),
        ("standard", "b"),
        ("critical", "b"),
        ("standard", "a"),
        ("sheddable", "a"),
        ("critical", "a"),
        ("standard", "b"),
        ("critical", "b"),
    ];
    let csv: String = rows
        .iter()
        .enumerate()
        .map(|(i, (class, tenant))| format!("{},100,5,,,{class},{tenant},\n", i / 3))
        .collect();
    for (fairness, want) in [
        // Request 0 first (alone when it came); then critical 3, 6, 8 by
        // age; standard 2, 4, 7; batch 1; sheddable 5.
        ("global-strict", vec![0, 3, 6, 8, 2, 4, 7, 1, 5]),
        // Round robin over tenants a, b from a: critical 6 (a), 3 (b),
        // then b again (a is empty) 8; standard: a 4, b 2, b 7.
        ("round-robin", vec![0, 6, 3, 8, 4, 2, 7, 1, 5]),
    ] {
        let dir = TestDir::new(&format!("flow_bands_{fairness}"));
        dir.write("trace.csv", &format!("arrival_us,input_tokens,output_tokens,prefix_group,prefix_length,slo_class,tenant_id,session_id\n{csv}"));
        dir.write(
            "run.toml",
            &format!(
                r#"
[model]
latency_model = "linear"
alpha = [100.0, 0.5, 20.0]
beta = [2000.0, 5.0, 30.0]
[instance]
count = 1
[workload]
trace = "trace.csv"
[routing]
policy = "round-robin"
[flow_control]
saturation_detector = "concurrency"
max_concurrency = 1.0
fairness = "{fairness}"
[output]
results_path = "results.jsonl"
trace_path = "trace.jsonl"
timeseries_path = "ts.jsonl"
"#
            ),
        );
        let (r, _, results, _, _) = run(&dir);
        assert_eq!(r["cluster"]["completed_requests"], 9);
        let mut order: Vec<(f64, u64)> = results
            .iter()
            .map(|l| {
                let dispatched = l["arrival_us"].as_f64().unwrap() / 1e3
                    + l["gateway_queue_delay_ms"].as_f64().unwrap();
                (dispatched, l["id"].as_u64().unwrap())
            })
            .collect();
        order.sort_by(|a, b| a.0.total_cmp(&b.0));
        // One at a time: every dispatch strictly after the previous one.
        assert!(order.windows(2).all(|w| w[0].0 < w[1].0), "{order:?}");
        let got: Vec<u64> = order.iter().map(|x| x.1).collect();
        eqnice!(want, got);
    }
}

#[test]
fn bad_flow_control_slo_and_saturation_input_names_the_key() {
    let dir = TestDir::new("flow_bad_input");
    for (extra, needle) in [
        (
            "[flow_control]\nper_band_capacity = 0\n",
            "flow_control.per_band_capacity = 0",
        ),
        (
            "[flow_control]\nmax_depth = 0\n",
            "flow_control.max_depth = 0",
        ),
        (
            "[flow_control]\nkv_cache_util_threshold = 1.5\n",
            "flow_control.kv_cache_util_threshold = 1.5",
        ),
        (
            "[flow_control]\nusage_limit_threshold = 0.0\n",
            "flow_control.usage_limit_threshold = 0",
        ),
        (
            "[flow_control]\nqueue_depth_threshold = -1.0\n",
            "flow_control.queue_depth_threshold = -1",
        ),
        (
            "[flow_control]\nsaturation_detector = \"busy\"\n",
            "flow_control.saturation_detector = \"busy\"",
        ),
        (
            "[flow_control]\nfairness = \"fair\"\n",
            "flow_control.fairness = \"fair\"",
        ),
        (
            "[flow_control]\nshedding = true\n",
            "flow_control.shedding = true needs flow_control.max_depth",
        ),
        (
            "[flow_control]\nrequest_ttl_us = 0\n",
            "flow_control.request_ttl_us = 0",
        ),
        (
            "[flow_control]\nin_flight_eviction = 1\n",
            "in_flight_eviction",
        ),
        (
            "[flow_control]\nin_flight_eviction = true\n[[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = 1\n[[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 1\n[pd]\ndecider = \"always\"\n",
            "flow_control.in_flight_eviction = true cannot be combined with [[pools]]",
        ),
        (
            "[slo.critical]\nttft_ms = -5.0\n",
            "slo.critical.ttft_ms = -5",
        ),
        ("[slo.critical]\n", "[slo.critical] has no target"),
        ("[slo.gold]\nttft_ms = 5.0\n", "gold"),
    ] {
        dir.write(
            "run.toml",
            &format!("[workload]\nnum_requests = 5\n{extra}"),
        );
        let e = run_bad(&dir, &["run", "run.toml"]);
        assert_contains!(e, needle);
    }
}

/// The saturation verdicts recomputed from the per-request results: the
/// stream (served requests' arrivals, completions at arrival + E2E), the
/// final window's record count, the threshold detector's mean E2E and the
/// backlog-drift detector's counts and least-squares slope of the
/// per-bucket in-flight series.
#[test]
fn saturation_verdicts_match_the_stream_recomputed_from_the_results() {
    let dir = TestDir::new("flow_saturation");
    let sat = "[saturation]\ndetectors = [\"threshold\", \"backlog-drift\", \"composite\", \"threshold\"]\n[saturation.threshold]\nthreshold_ms = 800.0\n[saturation.backlog_drift]\nwindow_size_sec = 0.5\n";
    dir.write("run.toml", &format!("{OVERLOAD}{GATEWAY}{sat}"));
    let (r, _, results, _, _) = run(&dir);
    let s = &r["saturation"];
    // Roster order, duplicates removed.
    let names: Vec<&String> = s.as_object().unwrap().keys().collect();
    eqnice!(vec!["composite", "threshold", "backlog-drift"], names);
    // The stream: (time, 0 = arrival / 1 = completion, id).
    let mut events: Vec<(i64, u8, u64)> = Vec::new();
    let mut e2e = Vec::new();
    for l in &results {
        let st = l["status"].as_str().unwrap();
        if st == "rejected" || st == "dropped" {
            continue;
        }
        let (id, a) = (l["id"].as_u64().unwrap(), l["arrival_us"].as_i64().unwrap());
        events.push((a, 0, id));
        if st == "completed" {
            let d = l["e2e_ms"].as_f64().unwrap();
            e2e.push(d);
            events.push((a + (d * 1000.0).round() as i64, 1, id));
        }
    }
    events.sort();
    let last = events.last().unwrap().0;
    // Final window = the backlog-drift window (0.5 s) as none is given.
    let in_window = events.iter().filter(|e| e.0 >= last - 500_000).count() as u64;
    for (name, v) in s.as_object().unwrap() {
        let votes: u64 = v["votes"]
            .as_object()
            .unwrap()
            .values()
            .map(|x| x.as_u64().unwrap())
            .sum();
        assert_eq!(votes, in_window, "{name}: {v}");
        assert_eq!(v["final_window_ms"], 500.0);
    }
    let t = &s["threshold"];
    let mean = e2e.iter().sum::<f64>() / e2e.len() as f64;
    close("mean_e2e", &t["last"]["signals"]["mean_e2e"], mean);
    let level = if mean < 800.0 { "STABLE" } else { "OVERLOADED" };
    assert_eq!(t["last"]["level"], level);
    // Backlog drift: bucket = time / 500 000 µs from the first event's
    // bucket; each bucket's value is the in-flight count after its last
    // event; skipped buckets repeat the previous value.
    let b = &s["backlog-drift"]["last"]["signals"];
    let arrivals = events.iter().filter(|e| e.1 == 0).count() as f64;
    close("arrivals", &b["arrivals"], arrivals);
    close("completions", &b["completions"], e2e.len() as f64);
    close("in_flight", &b["in_flight"], arrivals - e2e.len() as f64);
    let first = events[0].0 / 500_000;
    let mut ys: Vec<f64> = Vec::new();
    let mut in_flight = 0.0;
    for e in &events {
        let k = (e.0 / 500_000 - first) as usize;
        while ys.len() <= k {
            ys.push(*ys.last().unwrap_or(&0.0));
        }
        in_flight += if e.1 == 0 { 1.0 } else { -1.0 };
        ys[k] = in_flight;
    }
    let n = ys.len() as f64;
    let mx = (n - 1.0) / 2.0;
    let my = ys.iter().sum::<f64>() / n;
    let sxy: f64 = ys
        .iter()
        .enumerate()
        .map(|(x, y)| (x as f64 - mx) * (y - my))
        .sum();
    let sxx: f64 = (0..ys.len()).map(|x| (x as f64 - mx).powi(2)).sum();
    let slope = b["running_slope"].as_f64().unwrap();
    assert!(
        (slope - sxy / sxx).abs() < 1e-6,
        "slope {slope} vs {}",
        sxy / sxx
    );
    assert!(n > 5.0, "the run spans several buckets");
    // Without [saturation], no key.
    let plain = TestDir::new("flow_saturation_off");
    plain.write("run.toml", OVERLOAD);
    assert!(run(&plain).0.get("saturation").is_none());
}

#[test]
fn bad_saturation_input_names_the_key() {
    let dir = TestDir::new("flow_bad_saturation");
    for (extra, needle) in [
        ("detectors = []\n", "saturation.detectors is empty"),
        (
            "detectors = [\"cusum\"]\n",
            "saturation.detectors = \"cusum\"",
        ),
        (
            "detectors = [\"composite\"]\n[saturation.threshold]\nthreshold_ms = 5.0\n",
            "[saturation.threshold] is given",
        ),
        (
            "detectors = [\"threshold\"]\n[saturation.threshold]\nthreshold_ms = 0.0\n",
            "saturation.threshold.threshold_ms = 0",
        ),
        (
            "detectors = [\"all\"]\n[saturation.backlog_drift]\nwindow_size_sec = -1.0\n",
            "saturation.backlog_drift.window_size_sec = -1",
        ),
        (
            "detectors = [\"all\"]\n[saturation.backlog_drift]\nmin_windows = 5\n",
            "min_windows",
        ),
        (
            "detectors = [\"all\"]\nfinal_window_us = 0\n",
            "saturation.final_window_us = 0",
        ),
    ] {
        dir.write(
            "run.toml",
            &format!("[workload]\nnum_requests = 5\n[saturation]\n{extra}"),
        );
        let e = run_bad(&dir, &["run", "run.toml"]);
        assert_contains!(e, needle);
    }
}

/// Tenant budgets, exactly: capacity 1 instance × 4 slots; tenant batchco
/// may hold 0.5 × 4 = 2 requests in flight, vip has no budget. Only
/// sheddable requests are refused, requests admitted in the same instant
/// count, and a request that finished frees its slot.
#[test]
fn tenant_budgets_refuse_sheddable_requests_over_the_share() {
    let dir = TestDir::new("flow_tenant_budgets");
    let rows = [
        (0, "sheddable", "batchco"),
        (0, "sheddable", "batchco"),
        (0, "sheddable", "batchco"), // 2 in flight: refused
        (0, "critical", "batchco"),  // never refused: 3 in flight
        (0, "sheddable", "batchco"), // refused
        (0, "sheddable", "vip"),
        (0, "sheddable", "vip"),
        (10_000_000, "sheddable", "batchco"), // all earlier ones done
        (10_000_000, "sheddable", "batchco"),
        (10_000_000, "sheddable", "batchco"), // refused
    ];
    let csv: String = rows
        .iter()
        .map(|(t, class, tenant)| format!("{t},100,5,,,{class},{tenant},\n"))
        .collect();
    dir.write(
        "trace.csv",
        &format!("arrival_us,input_tokens,output_tokens,prefix_group,prefix_length,slo_class,tenant_id,session_id\n{csv}"),
    );
    dir.write(
        "run.toml",
        r#"
[model]
latency_model = "linear"
alpha = [100.0, 0.5, 20.0]
beta = [2000.0, 5.0, 30.0]
[instance]
count = 1
max_num_seqs = 4
[workload]
trace = "trace.csv"
[tenants]
budgets = { batchco = 0.5, nobody = 0.1 }
[output]
results_path = "results.jsonl"
trace_path = "trace.jsonl"
timeseries_path = "ts.jsonl"
"#,
    );
    let o = dir.blis().args(["run", "run.toml"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_contains!(
        stderr(&o),
        "tenants.budgets.nobody: the workload has no tenant"
    );
    let (r, _, results, trace, _) = run(&dir);
    let rejected: Vec<u64> = results
        .iter()
        .filter(|l| l["status"] == "rejected")
        .map(|l| l["id"].as_u64().unwrap())
        .collect();
    eqnice!(vec![2, 4, 9], rejected);
    assert_eq!(r["tenants"]["batchco"]["budget_rejected"], 3);
    assert_eq!(r["tenants"]["batchco"]["rejected_requests"], 3);
    assert_eq!(r["tenants"]["vip"]["budget_rejected"], 0);
    let traced: Vec<u64> = trace
        .iter()
        .filter(|t| t["policy"] == "tenant-budget" && t["admitted"] == false)
        .map(|t| t["request_id"].as_u64().unwrap())
        .collect();
    eqnice!(vec![2, 4, 9], traced);
    // Bad budgets name the tenant.
    dir.write(
        "run.toml",
        "[workload]\nnum_requests = 5\n[tenants]\nbudgets = { acme = 1.5 }\n",
    );
    assert_contains!(
        run_bad(&dir, &["run", "run.toml"]),
        "tenants.budgets.acme = 1.5"
    );
}

/// In-flight eviction, exactly: two sheddable requests fill a concurrency
/// budget of 2 on one instance; a critical request arriving at `T` finds
/// the cluster saturated, so the latest dispatched sheddable request (1) is
/// evicted at `T` — from the wait queue at T = 1 ms (request 0's first
/// step is still running), from the running batch at T = 20 ms — and the
/// critical request is dispatched at its arrival. Without the setting it
/// waits for a completion and nothing is evicted.
#[test]
fn in_flight_eviction_makes_room_for_a_critical_request() {
    for (case, arrival, eviction) in [
        ("queued", 1_000, true),
        ("running", 20_000, true),
        ("off", 20_000, false),
    ] {
        let dir = TestDir::new(&format!("flow_evict_{case}"));
        dir.write(
            "trace.csv",
            &format!(
                "arrival_us,input_tokens,output_tokens,prefix_group,prefix_length,slo_class,tenant_id,session_id\n\
                 0,100,50,,,sheddable,a,\n500,100,50,,,sheddable,a,\n{arrival},100,5,,,critical,b,\n"
            ),
        );
        dir.write(
            "run.toml",
            &format!(
                r#"
[model]
latency_model = "linear"
alpha = [100.0, 0.5, 20.0]
beta = [2000.0, 5.0, 30.0]
[instance]
count = 1
[workload]
trace = "trace.csv"
[routing]
policy = "round-robin"
[flow_control]
saturation_detector = "concurrency"
max_concurrency = 2.0
in_flight_eviction = {eviction}
[tenants.budgets]
a = 1.0
[output]
results_path = "results.jsonl"
trace_path = "trace.jsonl"
timeseries_path = "ts.jsonl"
"#
            ),
        );
        let (r, _, results, _, _) = run(&dir);
        let (c, g, inst) = (
            &r["cluster"],
            &r["cluster"]["flow_control"],
            &r["instances"][0],
        );
        let status: Vec<&str> = results
            .iter()
            .map(|l| l["status"].as_str().unwrap())
            .collect();
        let delay = |id: usize| results[id]["gateway_queue_delay_ms"].as_f64().unwrap();
        assert_eq!(g["dispatched"], 3, "{case}: {g}");
        // INV-1: the evicted request was injected and ends dropped at its instance.
        assert_eq!(c["injected_requests"], 3, "{case}");
        assert_eq!(c["rejected_requests"], 0, "{case}");
        if eviction {
            assert_eq!(g["evicted"], 1, "{case}: {g}");
            eqnice!(vec!["completed", "dropped", "completed"], status);
            assert_eq!(inst["dropped_unservable"], 1, "{case}");
            assert_eq!(c["completed_requests"], 2, "{case}");
            // Dispatched at its arrival: the eviction freed the slot at once.
            assert_eq!(delay(2), 0.0, "{case}");
            // Only the running request had shown a token.
            assert_eq!(results[1]["ttft_ms"].is_null(), case == "queued", "{case}");
            // Its tenant's budget counted it out (a's share is 1.0 of 256).
            assert_eq!(r["tenants"]["a"]["budget_rejected"], 0, "{case}");
        } else {
            assert_eq!(g["evicted"], 0, "{case}: {g}");
            eqnice!(vec!["completed", "completed", "completed"], status);
            // It waits for request 0's last step to end: the client sees
            // that completion α2 × 50 tokens = 1 ms later.
            let done0 = results[0]["arrival_us"].as_f64().unwrap() / 1e3
                + results[0]["e2e_ms"].as_f64().unwrap()
                - 1.0;
            assert!(delay(2) > 0.0, "{case}");
            close(
                "critical dispatch",
                &serde_json::json!(arrival as f64 / 1e3 + delay(2)),
                done0,
            );
        }
    }
}

//! The control plane end to end through the real `blis`: an autoscaler
//! plugin loaded from a `.so` changes the instance count over time and the
//! cost; a node's provisioning delay delays the instance it was requested
//! for, exactly; the cost is GPU-hours × price; bad control sections are
//! errors naming the key.

use serde_json::Value;

use crate::util::{artifacts, TestDir};

/// One instance behind a bursty load: a 10 s burst at 200 req/s, then 20 s
/// at 2 req/s. `control` is appended.
fn run_file(control: &str) -> String {
    format!(
        r#"
seed = 5
[model]
latency_model = "linear"
alpha = [0.0, 0.0, 0.0]
beta = [2000.0, 5.0, 30.0]
[instance]
count = 1
max_num_seqs = 2
[routing]
policy = "least-loaded"
[workload.inference_perf]
client = "reference"
stages = [{{ rate = 200.0, duration = 10 }}, {{ rate = 2.0, duration = 20 }}]
[workload.inference_perf.shared_prefix]
num_unique_system_prompts = 2
num_users_per_system_prompt = 4
system_prompt_len = 64
question_len = 100
output_len = 20
{control}
"#
    )
}

const POOL: &str = r#"
[[node_pools]]
name = "gpu"
gpu_type = "H100"
gpus_per_node = 1
initial_nodes = 1
max_nodes = 6
provisioning_delay = { mean = 2.0 }
cost_per_hour = 36.0
[lifecycle]
loading_delay = { mean = 1.0 }
"#;

fn run(dir: &TestDir, text: &str, plugin: bool) -> (Value, Vec<Value>) {
    dir.write("run.toml", text);
    let mut cmd = dir.blis();
    cmd.args(["run", "run.toml", "--timeseries-path", "ts.jsonl"]);
    if plugin {
        cmd.arg("--plugin").arg(artifacts().autoscaler());
    }
    let o = cmd.output().expect("run blis");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let ts = std::fs::read_to_string(dir.path().join("ts.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (report, ts)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn a_queue_depth_autoscaler_from_a_so_changes_the_instance_count_and_the_cost() {
    let dir = TestDir::new("autoscale_plugin");
    let scaler = r#"
[autoscaler]
interval_us = 500000
scale_down_stabilization_window_us = 2000000
max_instances = 6
policy = "queue-depth"
params = { high = 4.0, low = 0.5 }
"#;
    let (fixed, fixed_ts) = run(&dir, &run_file(POOL), false);
    let (scaled, ts) = run(&dir, &run_file(&format!("{POOL}{scaler}")), true);
    // Without an autoscaler: one instance, one node, all along.
    assert!(fixed_ts
        .iter()
        .all(|l| l["active_instances"] == 1 && l["nodes"] == 1));
    assert_eq!(fixed["control"]["autoscaler"], Value::Null);
    // With it: the plugin's decisions grow the fleet during the burst and
    // shrink it afterwards.
    let a = &scaled["control"]["autoscaler"];
    assert_eq!(a["policy"], "fixture-autoscaler::queue-depth");
    assert!(a["instances_added"].as_u64().unwrap() >= 2, "{a}");
    assert!(a["instances_removed"].as_u64().unwrap() >= 1, "{a}");
    let active: Vec<u64> = ts
        .iter()
        .map(|l| l["active_instances"].as_u64().unwrap())
        .collect();
    let peak = *active.iter().max().unwrap();
    let at_peak = active.iter().position(|&n| n == peak).unwrap();
    assert!(peak >= 3, "active instances over time: {active:?}");
    assert!(
        active[at_peak..].iter().any(|&n| n < peak),
        "no scale-down: {active:?}"
    );
    assert!(ts.iter().any(|l| l["instances"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["state"] == "pending" || i["state"] == "loading")));
    // More nodes for a while: more GPU-hours and dollars, same price per GPU-hour.
    let (c0, c1) = (&fixed["control"]["cost"], &scaled["control"]["cost"]);
    assert!(f(&c1["gpu_hours"]) > f(&c0["gpu_hours"]), "{c0} vs {c1}");
    assert!(f(&c1["cost_usd"]) > f(&c0["cost_usd"]));
    for c in [c0, c1] {
        assert!(
            (f(&c["cost_usd"]) - 36.0 * f(&c["gpu_hours"])).abs() < 1e-9,
            "{c}"
        );
    }
    // The fixed fleet: one 1-GPU node for the whole run, exactly.
    let hours = f(&c0["until_us"]) / 3.6e9;
    assert!((f(&c0["gpu_hours"]) - hours).abs() < 1e-12, "{c0}");
    // INV-1 across instances that appeared and drained.
    let c = &scaled["cluster"];
    assert_eq!(c["num_requests"], c["completed_requests"], "{c}");
    // The `plugins list` shows the new kind.
    let o = dir
        .blis()
        .args(["plugins", "list", "--plugin"])
        .arg(artifacts().autoscaler())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("autoscaler") && text.contains("queue-depth"),
        "{text}"
    );
}

#[test]
fn provisioning_and_loading_delay_the_new_instance_exactly_and_cost_is_hours_times_price() {
    let dir = TestDir::new("autoscale_exact");
    // At the first tick with a queue (0.5 s) the plugin wants one more
    // instance (max 2): its node is requested then, Ready 2 s later, and
    // the instance loads for 1 s: routable at exactly 3.5 s.
    let scaler = r#"
[autoscaler]
interval_us = 500000
max_instances = 2
policy = "queue-depth"
params = { high = 0.5 }
"#;
    let (r, _) = run(&dir, &run_file(&format!("{POOL}{scaler}")), true);
    let lives = r["control"]["instances"].as_array().unwrap();
    assert_eq!(lives.len(), 2, "{lives:?}");
    assert_eq!(lives[1]["created_us"], 500_000);
    assert_eq!(lives[1]["node"], "gpu-1");
    assert_eq!(lives[1]["routable_us"], 3_500_000);
    // Cost: gpu-0 for the whole run, gpu-1 from its request to the end
    // (never released: the plugin's low threshold is 0).
    let c = &r["control"]["cost"];
    let until = f(&c["until_us"]);
    let want_hours = (until + (until - 500_000.0)) / 3.6e9;
    assert!((f(&c["gpu_hours"]) - want_hours).abs() < 1e-12, "{c}");
    assert!((f(&c["cost_usd"]) - 36.0 * want_hours).abs() < 1e-9, "{c}");
    let pool = &r["control"]["node_pools"][0];
    assert_eq!(pool["nodes_requested"], 2);
    assert_eq!(
        r["cluster"]["num_requests"],
        r["cluster"]["completed_requests"]
    );
}

#[test]
fn bad_control_sections_are_errors_naming_the_key() {
    let dir = TestDir::new("autoscale_bad");
    let pool = |extra: &str| {
        format!(
            "[[node_pools]]\nname = \"p\"\ngpu_type = \"H100\"\ngpus_per_node = 1\ninitial_nodes = 1\nmax_nodes = 2\n{extra}"
        )
    };
    for (control, key) in [
        (
            pool("min_nodes = 3"),
            "node_pools[0].min_nodes = 3 > node_pools[0].max_nodes",
        ),
        (
            format!(
                "{}[autoscaler]\ninterval_us = 1000000\nparams = {{ kv_cache_threshold = 1.5 }}\n",
                pool("")
            ),
            "kv_cache_threshold",
        ),
        (
            format!(
                "{}[autoscaler]\ninterval_us = 1000000\nmin_instances = 3\nmax_instances = 2\n",
                pool("")
            ),
            "autoscaler.min_instances = 3 > autoscaler.max_instances = 2",
        ),
        (
            "[lifecycle]\ndrain_policy = \"later\"\n".to_string(),
            "lifecycle.drain_policy",
        ),
        (pool("cost_per_hour = -1.0"), "node_pools[0].cost_per_hour"),
    ] {
        dir.write("bad.toml", &run_file(&control));
        let o = dir.blis().args(["run", "bad.toml"]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{control}: {err}");
        assert!(o.stdout.is_empty());
        assert!(err.contains(key), "{control}: {err}");
    }
    // An instance that fits no node: TP 2 on 1-GPU nodes.
    let text = run_file(&pool("")).replace(
        "latency_model = \"linear\"\nalpha = [0.0, 0.0, 0.0]\nbeta = [2000.0, 5.0, 30.0]",
        "name = \"qwen3-14b\"\nhardware = \"H100\"\ntp = 2",
    );
    dir.write("fit.toml", &text);
    let o = dir.blis().args(["run", "fit.toml"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("fits no node") && err.contains("gpus_per_node"),
        "{err}"
    );
}

#[test]
fn drained_requests_are_served_dropped_or_redirected_and_counted() {
    let dir = TestDir::new("autoscale_drain");
    // Three instances; the plugin removes one per tick while the mean queue
    // is below 1000 (and adds one above), so instances drain during the
    // burst with long queues.
    for policy in ["wait", "immediate", "redirect"] {
        let control = format!(
            r#"
[lifecycle]
drain_policy = "{policy}"
[autoscaler]
interval_us = 2000000
max_instances = 3
policy = "queue-depth"
params = {{ high = 1000.0, low = 1000.0 }}
"#
        );
        let text = run_file(&control).replace("count = 1", "count = 3");
        let (r, _) = run(&dir, &text, true);
        let c = &r["cluster"];
        let ctl = &r["control"];
        let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
        let removed = n(&ctl["autoscaler"], "instances_removed");
        assert!(removed >= 2, "{policy}: {ctl}");
        // INV-1: every request completed or was dropped, once (drain drops
        // are counted with the instance's drops, `dropped_unservable`).
        assert_eq!(
            n(c, "num_requests"),
            n(c, "completed_requests") + n(c, "dropped_unservable") + n(c, "rejected_requests"),
            "{policy}: {c}"
        );
        assert_eq!(
            n(c, "injected_requests"),
            n(c, "num_requests"),
            "{policy}: {c}"
        );
        let (dropped, redirected) = (
            n(ctl, "drain_dropped_requests"),
            n(ctl, "redirected_requests"),
        );
        assert_eq!(n(c, "dropped_unservable"), dropped, "{policy}");
        match policy {
            "wait" => assert_eq!((dropped, redirected), (0, 0)),
            "immediate" => assert!(dropped > 0 && redirected == 0, "{ctl}"),
            _ => assert!(redirected > 0 && dropped == 0, "{ctl}"),
        }
        let lives = ctl["instances"].as_array().unwrap();
        let terminated = lives.iter().filter(|l| l["state"] == "terminated").count();
        assert_eq!(terminated as u64, removed, "{policy}: {ctl}");
    }
}

#[test]
fn a_panicking_autoscaler_is_a_one_line_error_naming_it_and_the_tick() {
    let dir = TestDir::new("autoscale_panic");
    let scaler = r#"
[autoscaler]
interval_us = 500000
max_instances = 2
policy = "queue-depth"
params = { panic_at_us = 1000000 }
"#;
    dir.write("run.toml", &run_file(scaler));
    let o = dir
        .blis()
        .args(["run", "run.toml", "--plugin"])
        .arg(artifacts().autoscaler())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(o.stdout.is_empty());
    assert!(
        err.contains(
            "autoscaler 'queue-depth' panicked in decide at the scaling tick of 1000000 µs"
        ) && err.contains("asked to panic at 1000000"),
        "{err}"
    );
}

/// Tenant budgets follow the fleet: the capacity is the routable instances'
/// batch slots at each decision. Two instances of 4 slots load for 1 s
/// (no warm start); tenant `a` may hold half the slots. Its 6 sheddable
/// requests at 0.5 s find no routable instance, so no capacity: all 6 are
/// refused by the budget. At 2 s (both loaded: 8 slots, a share of 4) 6
/// long requests arrive together: 4 pass, 2 are refused. Critical requests
/// are never refused by a budget.
#[test]
fn tenant_budgets_follow_the_routable_instances() {
    let mut csv = String::from(
        "arrival_us,input_tokens,output_tokens,prefix_group,prefix_length,slo_class,tenant_id,session_id\n",
    );
    for i in 0..6 {
        csv += &format!("{},50,500,,,sheddable,a,\n", 500_000 + i);
    }
    for i in 0..6 {
        csv += &format!("{},50,500,,,sheddable,a,\n", 2_000_000 + i);
    }
    csv += "2000010,50,5,,,critical,a,\n";
    let dir = TestDir::new("autoscaling_tenant_budgets");
    dir.write("trace.csv", &csv);
    dir.write(
        "run.toml",
        r#"
[model]
latency_model = "linear"
alpha = [0.0, 0.0, 0.0]
beta = [2000.0, 5.0, 30.0]
[instance]
count = 2
max_num_seqs = 4
[routing]
policy = "least-loaded"
[workload]
trace = "trace.csv"
[lifecycle]
loading_delay = { mean = 1.0 }
warm_start_initial_instances = false
[tenants.budgets]
a = 0.5
[output]
results_path = "results.jsonl"
"#,
    );
    let (r, _) = run(
        &dir,
        &std::fs::read_to_string(dir.path().join("run.toml")).unwrap(),
        false,
    );
    let t = &r["tenants"]["a"];
    assert_eq!(t["budget_rejected"], 8, "{t}");
    let results: Vec<Value> = std::fs::read_to_string(dir.path().join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let status: Vec<&str> = results
        .iter()
        .map(|l| l["status"].as_str().unwrap())
        .collect();
    let mut want = vec!["rejected"; 6];
    want.extend(["completed"; 4]);
    want.extend(["rejected"; 2]);
    want.push("completed");
    assert_eq!(status, want);
    assert_eq!(r["cluster"]["rejected_requests"], 8);
}

//! Several base models in one cluster through the real `blis`
//! (`examples/multi-model.toml`: serve pools of two models on two GPU
//! types): the per-model report sections equal the statistics recomputed
//! from the results file, requests are conserved per model and overall
//! (INV-1), no request reaches an instance of another model, a request
//! whose model no instance serves is counted and named in a warning, each
//! serve pool is scaled on its own under `[autoscaler]`
//! (`examples/multi-model-autoscaling.toml`), and bad input exits 2 naming
//! the key.

use std::path::Path;

use serde_json::Value;

use crate::util::{run_bad, TestDir};

fn example() -> String {
    example_named("multi-model.toml")
}

fn example_named(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

fn run_json(dir: &TestDir, args: &[&str]) -> Value {
    let o = dir.blis().args(args).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn serve_pools_scale_each_on_its_own() {
    let dir = TestDir::new("models_pool_scaling");
    let ex = example_named("multi-model-autoscaling.toml");
    let report = run_json(&dir, &["run", &ex, "--results-path", "r.jsonl"]);
    let control = &report["control"];
    let a = &control["autoscaler"];
    let pools = a["pools"].as_array().expect("per-pool autoscaler counts");
    let spec = [
        ("qwen-h100", "qwen3-14b", 1u64, 1u64, 6u64),
        ("llama-a100", "llama-3.1-8b-instruct", 2, 2, 3),
    ];
    assert_eq!(pools.len(), 2);
    let lives = control["instances"].as_array().unwrap();
    let mut model_of = Vec::new();
    for l in lives {
        let pool = l["pool"].as_str().expect("every instance names its pool");
        let (_, m, ..) = spec.iter().find(|s| s.0 == pool).expect("a known pool");
        model_of.push(*m);
    }
    let mut ticks = 0;
    for (p, &(name, model, initial, lo, hi)) in pools.iter().zip(&spec) {
        assert_eq!(p["pool"], name);
        assert_eq!(
            (p["min_instances"].as_u64(), p["max_instances"].as_u64()),
            (Some(lo), Some(hi))
        );
        let live = p["live_instances"].as_u64().unwrap();
        assert!((lo..=hi).contains(&live), "{p}");
        let added = p["instances_added"].as_u64().unwrap();
        let listed = lives.iter().filter(|l| l["pool"] == name).count() as u64;
        assert_eq!(listed, initial + added, "{name}: instances listed");
        // The models section counts every instance the pool ever had.
        assert_eq!(
            report["models"][model]["instances"],
            initial + added,
            "{name}"
        );
        ticks += p["ticks"].as_u64().unwrap();
    }
    assert_eq!(a["ticks"], ticks, "the pools' ticks add up");
    // The loaded pool grew, the light one stayed at its floor.
    assert!(
        pools[0]["instances_added"].as_u64().unwrap() >= 2,
        "{}",
        pools[0]
    );
    assert_eq!(pools[1]["live_instances"], 2, "{}", pools[1]);
    // No request reaches an instance of another model, and the instances
    // the autoscaler added serve their pool's model.
    let lines: Vec<Value> = std::fs::read_to_string(dir.path().join("r.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut on_added = 0;
    for l in &lines {
        let i = l["instance"].as_u64().expect("routed") as usize;
        assert_eq!(Some(model_of[i]), l["model"].as_str(), "{l}");
        on_added += usize::from(i >= 3);
    }
    assert!(on_added > 100, "{on_added} requests on added instances");
    // INV-1 per model.
    for (name, m) in report["models"].as_object().unwrap() {
        let parts: u64 = [
            "completed_requests",
            "rejected_requests",
            "dropped_unservable",
            "still_queued",
            "still_running",
            "still_in_pipeline",
        ]
        .iter()
        .map(|k| m[*k].as_u64().unwrap())
        .sum();
        assert_eq!(m["num_requests"], parts, "INV-1 for {name}");
    }
    // The same fleet fixed (no control plane): the qwen pool's single
    // instance falls behind; the llama pool's figures are the same, for it
    // neither sees nor is seen by the other pool's scaling (only the rates
    // over the run's length differ, for the run ends later).
    let text = std::fs::read_to_string(&ex).unwrap();
    let fixed = text[..text.find("\n[lifecycle]").unwrap()]
        .replace("max_instances = 6\n", "")
        .replace("min_instances = 2\nmax_instances = 3\n", "");
    let f = dir.write("fixed.toml", &fixed);
    let fixed = run_json(&dir, &["run", f.to_str().unwrap()]);
    let ttft = |r: &Value| r["models"]["qwen3-14b"]["ttft_p99_ms"].as_f64().unwrap();
    assert!(
        ttft(&fixed) > 10.0 * ttft(&report),
        "{} vs {}",
        ttft(&fixed),
        ttft(&report)
    );
    let (x, y) = (
        report["models"]["llama-3.1-8b-instruct"]
            .as_object()
            .unwrap(),
        fixed["models"]["llama-3.1-8b-instruct"]
            .as_object()
            .unwrap(),
    );
    for (k, v) in x {
        if ![
            "simulated_duration_s",
            "responses_per_sec",
            "tokens_per_sec",
        ]
        .contains(&k.as_str())
        {
            assert_eq!(Some(v), y.get(k), "llama-a100 {k}");
        }
    }
}

/// R-7 percentile of sorted values.
fn r7(v: &[f64], p: f64) -> f64 {
    let h = (v.len() - 1) as f64 * p;
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    v[lo] + (h - h.floor()) * (v[hi] - v[lo])
}

#[test]
fn per_model_sections_match_the_results_file() {
    let dir = TestDir::new("models_report_vs_results");
    let ex = example();
    let o = dir
        .blis()
        .args(["run", &ex, "--results-path", "r.jsonl"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let lines: Vec<Value> = std::fs::read_to_string(dir.path().join("r.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let models = report["models"].as_object().expect("models section");
    // Pools in file order: instances 0-3 serve qwen3-14b, 4-7 llama.
    let pools = [("qwen3-14b", 0..4u64), ("llama-3.1-8b-instruct", 4..8u64)];
    let mut sum = 0;
    for (name, range) in pools {
        let m = &models[name];
        let mine: Vec<&Value> = lines.iter().filter(|l| l["model"] == name).collect();
        assert!(!mine.is_empty(), "{name}");
        assert_eq!(m["num_requests"], mine.len() as u64, "{name}");
        assert_eq!(m["instances"], 4, "{name}");
        // No request reaches an instance of another model.
        for l in &mine {
            let i = l["instance"].as_u64().expect("routed");
            assert!(range.contains(&i), "{name}: {l}");
        }
        let done: Vec<&&Value> = mine.iter().filter(|l| l["status"] == "completed").collect();
        assert_eq!(m["completed_requests"], done.len() as u64, "{name}");
        let out: u64 = done
            .iter()
            .map(|l| l["output_tokens"].as_u64().unwrap())
            .sum();
        assert_eq!(m["total_output_tokens"], out, "{name}");
        let inp: u64 = mine
            .iter()
            .map(|l| l["input_tokens"].as_u64().unwrap())
            .sum();
        assert_eq!(m["total_input_tokens"], inp, "{name}");
        let mut ttft: Vec<f64> = mine.iter().filter_map(|l| l["ttft_ms"].as_f64()).collect();
        ttft.sort_by(f64::total_cmp);
        let mut e2e: Vec<f64> = mine.iter().filter_map(|l| l["e2e_ms"].as_f64()).collect();
        e2e.sort_by(f64::total_cmp);
        let close = |x: &Value, y: f64| (x.as_f64().unwrap() - y).abs() < 1e-9;
        for p in [0.5, 0.99] {
            let k = if p == 0.5 { "p50" } else { "p99" };
            assert!(
                close(&m[format!("ttft_{k}_ms")], r7(&ttft, p)),
                "{name} {k}: {m}"
            );
            assert!(
                close(&m[format!("e2e_{k}_ms")], r7(&e2e, p)),
                "{name} {k}: {m}"
            );
        }
        // INV-1 per model.
        let n = m["num_requests"].as_u64().unwrap();
        let parts = [
            "completed_requests",
            "rejected_requests",
            "dropped_unservable",
            "still_queued",
            "still_running",
        ]
        .map(|k| m[k].as_u64().unwrap());
        assert_eq!(n, parts.iter().sum::<u64>(), "{name}: {m}");
        sum += n;
    }
    // INV-1 overall, and the sections add up to the cluster block.
    let c = &report["cluster"];
    assert_eq!(c["num_requests"], sum);
    assert_eq!(c["num_requests"], lines.len() as u64);
    assert_eq!(c["still_in_pipeline"], 0);
    let total: u64 = [
        "completed_requests",
        "rejected_requests",
        "dropped_unservable",
        "still_queued",
        "still_running",
    ]
    .iter()
    .map(|k| c[*k].as_u64().unwrap())
    .sum();
    assert_eq!(c["num_requests"].as_u64().unwrap(), total);
    assert_eq!(c["rejected_by"]["unroutable_by_model"], 0);
}

/// Every pool overrides the model, so `[model].name` is served by none: a
/// client without `model` is rejected at routing, counted per model and in
/// the cluster's `rejected_by`, and named in a warning.
#[test]
fn requests_no_instance_serves_are_counted_and_warned() {
    let dir = TestDir::new("models_unroutable");
    let text = std::fs::read_to_string(example())
        .unwrap()
        .replace(
            "name = \"qwen-h100\"\nrole = \"serve\"\ninstances = 4\n",
            "name = \"qwen-h100\"\nrole = \"serve\"\ninstances = 4\nmodel = { name = \"qwen2.5-7b-instruct\" }\n",
        )
        .replace("model = \"qwen3-14b\"\n", "");
    let p = dir.write("run.toml", &text);
    let o = dir
        .blis()
        .args(["run", p.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let m = &r["models"]["qwen3-14b"];
    let n = m["num_requests"].as_u64().unwrap();
    assert!(n > 0, "{m}");
    assert_eq!(m["unroutable_by_model"], n);
    assert_eq!(m["rejected_requests"], n);
    assert_eq!(m["instances"], 0);
    assert_eq!(r["cluster"]["rejected_by"]["unroutable_by_model"], n);
    assert_eq!(r["models"]["qwen2.5-7b-instruct"]["num_requests"], 0);
    assert!(
        err.contains(&format!("warning: {n} request(s) for model \"qwen3-14b\"")),
        "{err}"
    );
}

#[test]
fn bad_multi_model_input_names_the_key() {
    let dir = TestDir::new("models_bad_input");
    let base = std::fs::read_to_string(example()).unwrap();
    let cases = [
        (
            "client",
            base.replace("model = \"qwen3-14b\"\n", "model = \"yi-34b\"\n"),
            "workload.clients[0].model = \"yi-34b\"",
        ),
        (
            "mixed",
            base.replacen("role = \"serve\"", "role = \"prefill\"", 1),
            "pools[0].role = \"prefill\"",
        ),
        (
            "base_model",
            format!(
                "{base}\n[lora]\nadapter_capacity = 1\n[[lora.adapters]]\nid = \"a\"\nrank = 8\nbase_model = \"yi-34b\"\n"
            ),
            "lora.adapters[0].base_model = \"yi-34b\"",
        ),
    ];
    let scaled = std::fs::read_to_string(example_named("multi-model-autoscaling.toml")).unwrap();
    let cases = cases.into_iter().chain([
        (
            "bounds_without_autoscaler",
            base.replacen("instances = 4\n", "instances = 4\nmax_instances = 6\n", 1),
            "pools[0].max_instances: a pool's autoscaler bounds need role = \"serve\" and [autoscaler]",
        ),
        (
            "node_pools",
            format!(
                "{scaled}\n[[node_pools]]\nname = \"n\"\ngpu_type = \"H100\"\ngpus_per_node = 8\ninitial_nodes = 1\nmax_nodes = 2\n"
            ),
            "[[node_pools]] with serve pools is not supported yet",
        ),
        (
            "beyond_bounds",
            scaled.replace("instances = 2\nmin_instances = 2", "instances = 4\nmin_instances = 2"),
            "pools[1] (llama-a100).instances = 4 > max_instances = 3",
        ),
        (
            "no_max",
            scaled.replace("max_instances = 6\n", ""),
            "pools[0] (qwen-h100): no max_instances",
        ),
        (
            "min_zero",
            scaled.replace("min_instances = 2", "min_instances = 0"),
            "pools[1] (llama-a100).min_instances = 0",
        ),
    ]);
    for (name, text, key) in cases {
        let p = dir.write(&format!("{name}.toml"), &text);
        let e = run_bad(&dir, &["run", p.to_str().unwrap()]);
        assert!(e.contains(key), "{name}: expected {key} in:\n{e}");
    }
}

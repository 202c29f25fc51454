//! Several base models in one cluster through the real `blis`
//! (`examples/multi-model.toml`: serve pools of two models on two GPU
//! types): the per-model report sections equal the statistics recomputed
//! from the results file, requests are conserved per model and overall
//! (INV-1), no request reaches an instance of another model, a request
//! whose model no instance serves is counted and named in a warning, and
//! bad input exits 2 naming the key.

use std::path::Path;

use serde_json::Value;

use crate::util::{run_bad, TestDir};

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/multi-model.toml")
        .to_str()
        .unwrap()
        .to_string()
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
    for (name, text, key) in cases {
        let p = dir.write(&format!("{name}.toml"), &text);
        let e = run_bad(&dir, &["run", p.to_str().unwrap()]);
        assert!(e.contains(key), "{name}: expected {key} in:\n{e}");
    }
}

//! The `blis` command end to end: one JSON report on stdout, determinism
//! across processes (INV-6), embedded vs loaded standard library, the other
//! subcommands, and bad input (one error paragraph, exit 2, empty stdout).

use std::process::Output;

use serde_json::Value;

use crate::util::{artifacts, run_bad, TestDir};

const SMALL: &str = r#"
seed = 5
[model]
latency_model = "linear"
alpha = [100.0, 0.5, 20.0]
beta = [2000.0, 5.0, 30.0]
[instance]
count = 4
[workload]
aggregate_rate = 200.0
num_requests = 400
prompt_tokens = 300
output_tokens = 60
prefix_tokens = 64
[routing]
policy = "weighted"
"#;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn run_ok(dir: &TestDir, args: &[&str]) -> String {
    let o = dir.blis().args(args).output().expect("run blis");
    assert!(o.status.success(), "blis {args:?} failed: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn run_prints_exactly_one_json_document() {
    let dir = TestDir::new("cli_one_json");
    dir.write("run.toml", SMALL);
    let out = run_ok(&dir, &["run", "run.toml"]);
    let v: Value = serde_json::from_str(&out).expect("stdout is one JSON document");
    for k in ["cluster", "instances", "slo_classes", "tenants", "fitness"] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    assert_eq!(v["instances"].as_array().unwrap().len(), 4);
    assert_eq!(v["cluster"]["completed_requests"], 400);
}

#[test]
fn same_seed_is_byte_identical_across_processes_and_seed_matters() {
    let dir = TestDir::new("cli_determinism");
    dir.write("run.toml", SMALL);
    let a = run_ok(&dir, &["run", "run.toml"]);
    let b = run_ok(&dir, &["run", "run.toml"]);
    eqnice!(a, b);
    let c = run_ok(&dir, &["run", "run.toml", "--seed", "6"]);
    assert_ne!(a, c, "a different seed gives a different report");
}

/// The binary's allocator advises large blocks for huge pages (a backlog of
/// 40,000 requests makes the request store several MB); the report is the
/// same with the advice off.
#[test]
fn huge_page_advice_changes_no_output() {
    let dir = TestDir::new("cli_huge_pages");
    dir.write(
        "run.toml",
        r#"
seed = 9
[instance]
count = 2
[workload]
aggregate_rate = 100000.0
num_requests = 40000
prompt_tokens = 64
output_tokens = 16
"#,
    );
    let on = run_ok(&dir, &["run", "run.toml"]);
    let o = dir
        .blis()
        .args(["run", "run.toml"])
        .env("BLIS_HUGE_PAGES", "0")
        .output()
        .expect("run blis");
    assert!(o.status.success(), "{}", stderr(&o));
    eqnice!(on, stdout(&o));
}

#[test]
fn embedded_and_loaded_standard_library_print_identical_stdout() {
    let dir = TestDir::new("cli_std_so");
    dir.write("run.toml", SMALL);
    let so = artifacts().blis_std();
    let so = so.to_str().unwrap();
    for extra in [
        vec![],
        vec![
            "--admission-policy",
            "token-bucket",
            "--set",
            "admission.params.capacity=20000.0",
        ],
        vec!["--routing-policy", "prefix-affinity"],
    ] {
        let mut a = vec!["run", "run.toml"];
        a.extend(&extra);
        let embedded = run_ok(&dir, &a);
        a.extend(["--plugin", so]);
        let loaded = run_ok(&dir, &a);
        // Identical but for the provenance section, which names the file.
        let mut loaded: Value = serde_json::from_str(&loaded).unwrap();
        let files = loaded.as_object_mut().unwrap().remove("plugins").unwrap();
        eqnice!(Some("blis-std"), files[0]["name"].as_str());
        assert!(!embedded.contains("\"plugins\""), "{embedded}");
        // Both texts parsed the same way: equal values mean equal texts
        // but for the section removed.
        let embedded: Value = serde_json::from_str(&embedded).unwrap();
        eqnice!(embedded, loaded);
    }
}

#[test]
fn weights_only_matter_by_ratio() {
    let dir = TestDir::new("cli_weight_ratio");
    dir.write("run.toml", SMALL);
    let a = run_ok(
        &dir,
        &[
            "run",
            "run.toml",
            "--routing-scorers",
            "prefix-affinity:3,queue-depth:2",
        ],
    );
    let b = run_ok(
        &dir,
        &[
            "run",
            "run.toml",
            "--routing-scorers",
            "prefix-affinity:30,queue-depth:20",
        ],
    );
    eqnice!(a, b);
}

#[test]
fn validate_and_plugins_commands() {
    let dir = TestDir::new("cli_validate");
    dir.write("run.toml", SMALL);
    let o = dir.blis().args(["validate", "run.toml"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "");
    let list = run_ok(
        &dir,
        &[
            "plugins",
            "list",
            "--plugin",
            artifacts().alpha().to_str().unwrap(),
        ],
    );
    assert_contains!(list, "blis-std 0.1.0 (ABI 0.2, embedded)");
    assert_contains!(list, "fixture-alpha");
    assert_contains!(list, "token-bucket");
    let show = run_ok(&dir, &["plugins", "show", "token-bucket"]);
    assert_contains!(show, "refill_rate");
    assert_contains!(show, "tokens per second");
}

#[test]
fn malformed_and_misspelt_run_files_name_file_line_column_and_key() {
    let dir = TestDir::new("cli_bad_files");
    dir.write("syntax.toml", "seed = 1\n[instance\ncount = 2\n");
    let e = run_bad(&dir, &["run", "syntax.toml"]);
    assert_contains!(e, "syntax.toml:2:");
    dir.write("typo.toml", "seed = 1\n[instance]\ncuont = 2\n");
    let e = run_bad(&dir, &["run", "typo.toml"]);
    assert_contains!(e, "typo.toml:3:1");
    assert_contains!(e, "cuont");
    assert_contains!(e, "count");
    dir.write("sched.toml", "[instance]\nscheduler = \"lifo\"\n");
    let e = run_bad(&dir, &["validate", "sched.toml"]);
    assert_contains!(e, "instance.scheduler");
    assert_contains!(e, "priority-fcfs");
}

#[test]
fn nonsense_values_are_rejected_before_the_run() {
    let dir = TestDir::new("cli_nonsense");
    dir.write("run.toml", SMALL);
    let e = run_bad(&dir, &["run", "run.toml", "--num-instances", "0"]);
    assert_contains!(e, "instance.count");
    let e = run_bad(&dir, &["run", "run.toml", "--rate=-5"]);
    assert_contains!(e, "rate");
    let e = run_bad(
        &dir,
        &[
            "run",
            "run.toml",
            "--routing-scorers",
            "queue-depth:0,load-balance:0",
        ],
    );
    assert_contains!(e, "all weights are zero");
    let e = run_bad(&dir, &["run", "run.toml", "--plugin", "no/such/lib.so"]);
    assert_contains!(e, "no/such/lib.so");
    let e = run_bad(&dir, &["run", "run.toml", "--routing-policy", "least-load"]);
    assert_contains!(e, "did you mean 'least-loaded'");
    let e = run_bad(&dir, &["run", "run.toml", "--set", "instance.block_size=0"]);
    assert_contains!(e, "block_size");
    let e = run_bad(
        &dir,
        &[
            "run",
            "run.toml",
            "--set",
            "output.fitness_weights.p42_ttft=1.0",
        ],
    );
    assert_contains!(e, "p42_ttft");
    let e = run_bad(&dir, &["run", "missing.toml"]);
    assert_contains!(e, "missing.toml");
}

#[test]
fn bad_trace_names_file_line_and_column_and_simulates_nothing() {
    let dir = TestDir::new("cli_bad_trace");
    dir.write(
        "t.csv",
        "arrival_us,input_tokens,output_tokens\n0,10,5\n10,abc,5\n",
    );
    dir.write("run.toml", "[workload]\ntrace = \"t.csv\"\n");
    let e = run_bad(&dir, &["run", "run.toml"]);
    assert_contains!(e, "t.csv:3");
    assert_contains!(e, "input_tokens");
}

#[test]
fn results_and_trace_files() {
    let dir = TestDir::new("cli_outputs");
    dir.write("run.toml", SMALL);
    run_ok(
        &dir,
        &[
            "run",
            "run.toml",
            "--results-path",
            "r.jsonl",
            "--trace-path",
            "t.jsonl",
        ],
    );
    let results = std::fs::read_to_string(dir.path().join("r.jsonl")).unwrap();
    let ids: Vec<u64> = results
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(
        ids,
        (0..400).collect::<Vec<_>>(),
        "one line per request, in id order"
    );
    let trace = std::fs::read_to_string(dir.path().join("t.jsonl")).unwrap();
    assert_eq!(trace.lines().count(), 400);
    let d: Value = serde_json::from_str(trace.lines().next().unwrap()).unwrap();
    for k in [
        "request_id",
        "time_us",
        "chosen",
        "chosen_score",
        "regret",
        "candidates",
    ] {
        assert!(d.get(k).is_some(), "trace record lacks {k}: {d}");
    }
}

/// `[instance.kv_offload]`: bad values name their key (exit 2); a CPU tier
/// adds a `kv_offload` block to every instance and to the cluster (the
/// instances' sums, thrashing = evictions / mirrored blocks), and a run
/// without one has no such block.
#[test]
fn kv_offload_section_errors_and_report() {
    let dir = TestDir::new("cli_kv_offload");
    let with = |extra: &str| {
        format!("{SMALL}[instance.kv_offload]\n{extra}\n")
            .replace("count = 4\n", "count = 4\ntotal_kv_blocks = 120\n")
    };
    for (body, key) in [
        (
            "cpu_blocks = 100\ntransfer_bandwidth_tokens_per_us = -2.5",
            "instance.kv_offload.transfer_bandwidth_tokens_per_us = -2.5",
        ),
        (
            "cpu_blocks = 2000000000",
            "instance.kv_offload.cpu_blocks = 2000000000",
        ),
        (
            "cpu_blocks = 10\ntransfer_base_latency_us = -1",
            "instance.kv_offload.transfer_base_latency_us = -1",
        ),
        (
            "cpu_blocks = 10\noffload_threshold = 0.9",
            "offload_threshold",
        ),
        ("cpu_blocks = -5", "cpu_blocks"),
    ] {
        dir.write("bad.toml", &with(body));
        let e = run_bad(&dir, &["validate", "bad.toml"]);
        assert_contains!(e, key);
        let e = run_bad(&dir, &["run", "bad.toml"]);
        assert_contains!(e, key);
    }

    dir.write("gpu.toml", &with("cpu_blocks = 0"));
    let gpu: Value = serde_json::from_str(&run_ok(&dir, &["run", "gpu.toml"])).unwrap();
    assert!(gpu["cluster"].get("kv_offload").is_none());
    assert!(gpu["instances"][0].get("kv_offload").is_none());

    dir.write(
        "cpu.toml",
        &with("cpu_blocks = 400\ntransfer_bandwidth_tokens_per_us = 0.5"),
    );
    let cpu_out = run_ok(&dir, &["run", "cpu.toml"]);
    let cpu: Value = serde_json::from_str(&cpu_out).unwrap();
    // The flag sets the same key (here over `cpu_blocks = 0`).
    let flagged = run_ok(
        &dir,
        &[
            "run",
            "gpu.toml",
            "--kv-cpu-blocks",
            "400",
            "--set",
            "instance.kv_offload.transfer_bandwidth_tokens_per_us=0.5",
        ],
    );
    assert_eq!(flagged, cpu_out);
    let c = &cpu["cluster"]["kv_offload"];
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    for k in [
        "cpu_blocks",
        "cpu_hit_blocks",
        "reloads",
        "mirrored_blocks",
        "cpu_evictions",
    ] {
        let sum: u64 = (0..4)
            .map(|i| n(&cpu["instances"][i]["kv_offload"], k))
            .sum();
        assert_eq!(n(c, k), sum, "{k}");
    }
    assert_eq!(n(c, "cpu_blocks"), 1600);
    assert!(n(c, "cpu_hit_blocks") > 0, "{c}");
    assert!(n(c, "mirrored_blocks") > 0, "{c}");
    let thr = c["thrashing_rate"].as_f64().unwrap();
    let want = n(c, "cpu_evictions") as f64 / n(c, "mirrored_blocks") as f64;
    assert!((thr - want).abs() < 1e-12);
    // 16-token blocks at 0.5 tokens/µs: 32 µs per reloaded block.
    let ms = c["transfer_time_ms"].as_f64().unwrap();
    assert!(
        (ms - n(c, "cpu_hit_blocks") as f64 * 0.032).abs() < 1e-9,
        "{c}"
    );
    // Hits in any tier count towards the hit rate.
    let rate = |r: &Value| r["cluster"]["kv_cache_hit_rate"].as_f64().unwrap();
    assert!(rate(&cpu) > rate(&gpu), "{} vs {}", rate(&cpu), rate(&gpu));
}

/// `cluster.rejected_by` splits `rejected_requests` by cause: all by
/// admission under `reject-all`; with the gateway queue of the overload
/// example, its refusals (queue full, shed, expired) are the gateway's
/// count and admission's is 0; the causes always sum to the total.
#[test]
fn rejections_are_counted_by_cause() {
    let dir = TestDir::new("cli_rejected_by");
    let causes = [
        "admission",
        "filter",
        "gateway",
        "tenant_budget",
        "no_routable_instance",
    ];
    let by = |report: &Value| -> Vec<u64> {
        let c = &report["cluster"];
        let v: Vec<u64> = causes
            .iter()
            .map(|k| c["rejected_by"][*k].as_u64().unwrap())
            .collect();
        assert_eq!(
            v.iter().sum::<u64>(),
            c["rejected_requests"].as_u64().unwrap(),
            "{c}"
        );
        v
    };
    let r: Value = serde_json::from_str(&run_ok(
        &dir,
        &[
            "run",
            "--num-requests",
            "7",
            "--admission-policy",
            "reject-all",
        ],
    ))
    .unwrap();
    assert_eq!(by(&r), [7, 0, 0, 0, 0]);
    let ex = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/flow-control-overload.toml");
    let r: Value = serde_json::from_str(&run_ok(
        &dir,
        &["run", ex.to_str().unwrap(), "--num-requests", "3000"],
    ))
    .unwrap();
    let fc = &r["cluster"]["flow_control"];
    let refused: u64 = ["rejected", "shed", "expired"]
        .iter()
        .map(|k| fc[*k].as_u64().unwrap())
        .sum();
    let v = by(&r);
    assert!(refused > 0, "{fc}");
    assert_eq!((v[0], v[2]), (0, refused), "{fc}");
}

//! Issue 33 (hardening, round 3), defects 8–14 and 17–20: figures that were
//! silently wrong with exit 0 (an idle autoscaler's duration, unbounded
//! transfer keys, HF config values replaced by defaults, sketch percentiles
//! outside [min, max], a sweep fingerprint blind to the files it reads, a
//! partial merge, colliding axes, u64 seeds in sweeps), the cache scorers
//! after a scale-up, and a grid too large to plan. Each through the real
//! `blis`.

use serde_json::Value;

use crate::util::{artifacts, run_bad, run_ok as ok, TestDir};

/// A small linear-model run (2 instances, 20 requests).
const BASE: &str = r#"
seed = 3
[model]
latency_model = "linear"
alpha = [100.0, 0.5, 20.0]
beta = [2000.0, 5.0, 30.0]
[instance]
count = 2
[workload]
aggregate_rate = 4.0
num_requests = 20
prompt_tokens = 200
output_tokens = 20
"#;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn report(dir: &TestDir, args: &[&str]) -> Value {
    serde_json::from_slice(&ok(dir, args).stdout).expect("one JSON report")
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn an_autoscaler_that_cannot_act_does_not_lengthen_the_run() {
    // Defect 8.
    let dir = TestDir::new("wrong_idle_autoscaler");
    dir.write("base.toml", BASE);
    dir.write(
        "scaled.toml",
        &format!(
            "{BASE}[autoscaler]\npolicy = \"kv-saturation\"\ninterval_us = 10000000\nmin_instances = 2\nmax_instances = 2\n"
        ),
    );
    let plain = report(&dir, &["run", "base.toml"]);
    let scaled = report(&dir, &["run", "scaled.toml"]);
    let d0 = f(&plain["cluster"]["simulated_duration_s"]);
    let d1 = f(&scaled["cluster"]["simulated_duration_s"]);
    assert!(d0 < 10.0, "{d0}");
    assert_eq!(d1, d0, "the idle tick at 10 s is not part of the run");
    assert_eq!(
        plain["cluster"]["tokens_per_sec"],
        scaled["cluster"]["tokens_per_sec"]
    );
    let a = &scaled["control"]["autoscaler"];
    assert_eq!(a["ticks"], 1, "one tick at 0 s, none after the work: {a}");
}

#[test]
fn transfer_keys_that_would_run_into_the_time_limit_are_refused() {
    // Defects 9 and 17.
    let dir = TestDir::new("wrong_transfer_bounds");
    dir.write("base.toml", BASE);
    let pools = "[[pools]]\nname = \"prefill\"\nrole = \"prefill\"\ninstances = 1\n[[pools]]\nname = \"decode\"\nrole = \"decode\"\ninstances = 1\n[pd]\ndecider = \"always\"\nkv_bytes_per_token = 131072.0\n";
    let pd_base = BASE.replace("[instance]\ncount = 2\n", "");
    dir.write("pd.toml", &format!("{pd_base}{pools}"));
    for (file, set, key) in [
        (
            "base.toml",
            "instance.kv_offload={cpu_blocks=100, transfer_base_latency_us=9223372036854775807}",
            "instance.kv_offload.transfer_base_latency_us",
        ),
        (
            "base.toml",
            "instance.kv_offload={cpu_blocks=100, transfer_base_latency_us=1000000000000000}",
            "instance.kv_offload.transfer_base_latency_us",
        ),
        (
            "base.toml",
            "instance.kv_offload={cpu_blocks=100, transfer_bandwidth_tokens_per_us=1e-300}",
            "instance.kv_offload.transfer_bandwidth_tokens_per_us",
        ),
        (
            "pd.toml",
            "pd.transfer_bandwidth_gbps=1e-300",
            "pd.transfer_bandwidth_gbps",
        ),
        (
            "pd.toml",
            "pd.kv_bytes_per_token=1e300",
            "pd.kv_bytes_per_token",
        ),
    ] {
        for cmd in ["validate", "run"] {
            let e = run_bad(&dir, &[cmd, file, "--set", set]);
            assert!(e.contains(key), "--set {set}: names {key}:\n{e}");
        }
    }
    // Values at the bounds run.
    ok(
        &dir,
        &[
            "run",
            "base.toml",
            "--set",
            "instance.kv_offload={cpu_blocks=100, transfer_base_latency_us=1000000}",
        ],
    );
    ok(
        &dir,
        &["run", "pd.toml", "--set", "pd.kv_bytes_per_token=1e9"],
    );
}

#[test]
fn hf_config_values_that_cannot_be_meant_are_refused_naming_the_key() {
    // Defect 10.
    let dir = TestDir::new("wrong_hf_config");
    let good = r#"{"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 4, "intermediate_size": 1024, "vocab_size": 1000,
        "torch_dtype": "bfloat16", "max_position_embeddings": 4096"#;
    let run = "[model]\nlatency_model = \"roofline\"\nconfig_path = \"config.json\"\nhardware = \"H100\"\n[workload]\naggregate_rate = 10.0\nnum_requests = 5\nprompt_tokens = 50\noutput_tokens = 5\n";
    dir.write("run.toml", run);
    dir.write("config.json", &format!("{good}}}"));
    ok(&dir, &["run", "run.toml"]);
    for (extra, key) in [
        (
            r#""num_local_experts": 8.5, "num_experts_per_tok": 2"#,
            "num_local_experts",
        ),
        (
            r#""interleave_moe_layer_step": 0"#,
            "interleave_moe_layer_step",
        ),
        (
            r#""quantization_config": {"bits": 0}"#,
            "quantization_config.bits",
        ),
        (
            r#""quantization_config": {"bits": -4}"#,
            "quantization_config.bits",
        ),
        (r#""quantization_config": "fp8""#, "quantization_config"),
        (r#""head_dim": 0"#, "head_dim"),
    ] {
        dir.write("config.json", &format!("{good}, {extra}}}"));
        for cmd in ["validate", "run"] {
            let e = run_bad(&dir, &[cmd, "run.toml"]);
            assert!(e.contains(key), "{extra}: names {key}:\n{e}");
        }
    }
}

#[test]
fn sketch_percentiles_lie_within_min_and_max() {
    // Defect 11.
    let dir = TestDir::new("wrong_sketch_bounds");
    dir.write("base.toml", BASE);
    for n in ["1", "2", "3", "7"] {
        let r = report(
            &dir,
            &[
                "run",
                "base.toml",
                "--set",
                &format!("workload.num_requests={n}"),
                "--set",
                "output.percentiles=\"sketch\"",
            ],
        );
        let c = &r["cluster"];
        for m in ["ttft", "e2e", "scheduling_delay"] {
            let (lo, hi) = (f(&c[format!("{m}_min_ms")]), f(&c[format!("{m}_max_ms")]));
            for p in ["p50", "p90", "p95", "p99"] {
                let v = f(&c[format!("{m}_{p}_ms")]);
                assert!(
                    lo <= v && v <= hi,
                    "n = {n}: {m} {p} = {v} outside [{lo}, {hi}]"
                );
            }
            if n == "1" {
                assert_eq!(f(&c[format!("{m}_p50_ms")]), lo, "one sample: p50 is it");
            }
        }
    }
}

const SWEEP: &str = r#"
base = "base.toml"
seeds = [1, 2]
[[axis]]
key = "workload.aggregate_rate"
name = "rate"
values = [50.0, 100.0]
"#;

#[test]
fn a_sweep_notices_edited_inputs_of_its_base_run_file() {
    // Defect 12.
    let dir = TestDir::new("wrong_sweep_inputs");
    dir.write(
        "base.toml",
        "seed = 3\n[model]\nlatency_model = \"linear\"\nbeta = [2000.0, 5.0, 30.0]\n[workload]\ntrace = \"t.csv\"\n",
    );
    dir.write(
        "t.csv",
        "arrival_us,input_tokens,output_tokens\n0,10,2\n5,10,2\n",
    );
    dir.write(
        "sweep.toml",
        "base = \"base.toml\"\n[[axis]]\nkey = \"instance.count\"\nvalues = [1, 2]\n",
    );
    ok(&dir, &["sweep", "sweep.toml", "--out", "sw", "--quiet"]);
    ok(
        &dir,
        &[
            "sweep",
            "sweep.toml",
            "--out",
            "sw",
            "--quiet",
            "--shard",
            "1/2",
        ],
    );
    dir.write(
        "t.csv",
        "arrival_us,input_tokens,output_tokens\n0,10,2\n5,10,2\n9,10,2\n",
    );
    let e = run_bad(&dir, &["sweep", "sweep.toml", "--out", "sw", "--quiet"]);
    assert!(e.contains("another sweep"), "{e}");
    // Shards run on different inputs do not merge.
    ok(
        &dir,
        &[
            "sweep",
            "sweep.toml",
            "--out",
            "s2",
            "--quiet",
            "--shard",
            "2/2",
        ],
    );
    let e = run_bad(&dir, &["sweep", "merge", "sw", "s2", "--out", "m"]);
    assert!(e.contains("different sweeps"), "{e}");
}

#[test]
fn merging_a_partial_set_of_shards_is_an_error_unless_asked() {
    // Defect 13.
    let dir = TestDir::new("wrong_partial_merge");
    dir.write("base.toml", BASE);
    dir.write("sweep.toml", SWEEP);
    ok(
        &dir,
        &[
            "sweep",
            "sweep.toml",
            "--out",
            "a",
            "--quiet",
            "--shard",
            "1/2",
        ],
    );
    let e = run_bad(&dir, &["sweep", "merge", "a", "--out", "m"]);
    assert!(
        e.contains("2 of the sweep's 4 runs") && e.contains("--allow-partial"),
        "{e}"
    );
    assert!(!dir.path().join("m").exists(), "nothing written");
    let o = ok(
        &dir,
        &["sweep", "merge", "a", "--out", "m", "--allow-partial"],
    );
    let err = text(&o.stderr);
    assert!(
        err.contains("warning: 2 runs") && err.contains("rate=100.0"),
        "{err}"
    );
    ok(
        &dir,
        &[
            "sweep",
            "sweep.toml",
            "--out",
            "b",
            "--quiet",
            "--shard",
            "2/2",
        ],
    );
    let o = ok(&dir, &["sweep", "merge", "a", "b", "--out", "full"]);
    assert!(!text(&o.stderr).contains("warning"));
    let rows = std::fs::read_to_string(dir.path().join("full/results.jsonl")).unwrap();
    assert_eq!(rows.lines().count(), 4);
}

#[test]
fn axes_may_not_share_a_key_or_take_a_report_columns_name() {
    // Defect 14.
    let dir = TestDir::new("wrong_axis_collisions");
    dir.write("base.toml", BASE);
    for (axes, says) in [
        (
            "[[axis]]\nkey = \"workload.aggregate_rate\"\nvalues = [1.0, 2.0]\n[[axis]]\nname = \"load\"\n[[axis.variants]]\nname = \"hi\"\nset = { workload = { aggregate_rate = 9.0 } }\n",
            "both set 'workload.aggregate_rate'",
        ),
        (
            "[[axis]]\nkey = \"workload.aggregate_rate\"\nname = \"a\"\nvalues = [1.0]\n[[axis]]\nkey = \"workload.aggregate_rate\"\nname = \"b\"\nvalues = [2.0]\n",
            "both set",
        ),
        (
            "[[axis]]\nkey = \"workload.aggregate_rate\"\nname = \"ttft_p99_ms\"\nvalues = [1.0]\n",
            "'ttft_p99_ms' is a column of the report",
        ),
        (
            "[[axis]]\nkey = \"workload.aggregate_rate\"\nname = \"slo_classes.standard.ttft.p99_ms\"\nvalues = [1.0]\n",
            "is a column of the report",
        ),
        (
            "[[axis]]\nkey = \"workload.aggregate_rate\"\nname = \"status\"\nvalues = [1.0]\n",
            "used twice",
        ),
    ] {
        dir.write("sweep.toml", &format!("base = \"base.toml\"\n{axes}"));
        let e = run_bad(&dir, &["sweep", "sweep.toml", "--out", "sw", "--quiet"]);
        assert!(e.contains(says), "{axes}\n{e}");
    }
    // The list of report columns holds every column of a real report.
    let r = report(&dir, &["run", "base.toml"]);
    for k in r["cluster"].as_object().unwrap().keys() {
        assert!(
            blis_host::sweep::table::CLUSTER_COLUMNS.contains(&k.as_str()),
            "{k} missing from CLUSTER_COLUMNS"
        );
    }
    for k in r
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "cluster" && *k != "instances")
    {
        assert!(
            blis_host::sweep::table::REPORT_BLOCKS.contains(&k.as_str()),
            "{k}"
        );
    }
}

#[test]
fn sweep_seeds_take_any_u64() {
    // Defect 19.
    let dir = TestDir::new("wrong_sweep_seeds");
    dir.write("base.toml", BASE);
    dir.write(
        "sweep.toml",
        "base = \"base.toml\"\nseeds = [\"18446744073709551615\", 9223372036854775808, 1]\n",
    );
    // 9223372036854775808 is not a TOML integer: an error naming the seeds.
    let e = run_bad(&dir, &["sweep", "sweep.toml", "--out", "sw", "--quiet"]);
    assert!(e.contains("seeds"), "{e}");
    dir.write(
        "sweep.toml",
        "base = \"base.toml\"\nseeds = [\"18446744073709551615\", \"9223372036854775808\", 1]\n",
    );
    ok(&dir, &["sweep", "sweep.toml", "--out", "sw", "--quiet"]);
    let rows: Vec<Value> = std::fs::read_to_string(dir.path().join("sw/results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seeds: Vec<u64> = rows.iter().map(|r| r["seed"].as_u64().unwrap()).collect();
    assert_eq!(seeds, [u64::MAX, 1 << 63, 1]);
    // Each run is `blis run --seed S`, byte for byte.
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("sw/sweep.json")).unwrap())
            .unwrap();
    let id = manifest["runs"][0]["id"].as_str().unwrap();
    let stored = std::fs::read(dir.path().join(format!("sw/runs/{id}/report.json"))).unwrap();
    let direct = ok(
        &dir,
        &["run", "base.toml", "--seed", "18446744073709551615"],
    )
    .stdout;
    assert_eq!(text(&stored).trim_end(), text(&direct).trim_end());
}

#[test]
fn cache_scorers_survive_an_added_instance() {
    // Defect 18.
    let dir = TestDir::new("wrong_cache_scorers_scale_up");
    let run = |scorer: &str| {
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
policy = "weighted"
scorers = [{{ name = "{scorer}", weight = 1.0 }}, {{ name = "queue-depth", weight = 2.0 }}]
[workload.inference_perf]
client = "reference"
stages = [{{ rate = 200.0, duration = 4 }}]
[workload.inference_perf.shared_prefix]
num_unique_system_prompts = 2
num_users_per_system_prompt = 4
system_prompt_len = 64
question_len = 100
output_len = 20
[autoscaler]
interval_us = 500000
max_instances = 4
policy = "queue-depth"
params = {{ high = 4.0, low = 0.5 }}
"#
        )
    };
    for scorer in ["precise-prefix-cache", "no-hit-lru"] {
        dir.write("run.toml", &run(scorer));
        let r = report(
            &dir,
            &[
                "run",
                "run.toml",
                "--plugin",
                artifacts().autoscaler().to_str().unwrap(),
            ],
        );
        let a = &r["control"]["autoscaler"];
        assert!(a["instances_added"].as_u64().unwrap() >= 1, "{scorer}: {a}");
        let c = &r["cluster"];
        assert_eq!(c["num_requests"], c["completed_requests"], "{scorer}: {c}");
        // The added instances were scored and served requests.
        let added: u64 = r["instances"].as_array().unwrap()[1..]
            .iter()
            .map(|x| x["injected_requests"].as_u64().unwrap())
            .sum();
        assert!(added > 0, "{scorer}: {}", r["instances"]);
    }
}

#[test]
fn a_grid_too_large_is_refused_with_its_size_before_anything_is_built() {
    // Defect 20.
    let dir = TestDir::new("wrong_grid_bomb");
    dir.write("base.toml", BASE);
    // Eleven axes of 16 values each (distinct keys: a shared key is refused first).
    let keys = [
        "workload.num_requests",
        "workload.aggregate_rate",
        "workload.prompt_tokens",
        "workload.output_tokens",
        "instance.count",
        "instance.max_num_seqs",
        "instance.max_num_batched_tokens",
        "instance.block_size",
        "admission.latency_us",
        "routing.latency_us",
        "seed",
    ];
    let mut sweep = String::from("base = \"base.toml\"\n");
    for (i, key) in keys.iter().enumerate() {
        let values: Vec<String> = (0..16).map(|v| format!("{}", v + 1)).collect();
        let values = if key.contains("rate") {
            values.iter().map(|v| format!("{v}.0")).collect()
        } else {
            values
        };
        sweep.push_str(&format!(
            "[[axis]]\nkey = \"{key}\"\nname = \"a{i}\"\nvalues = [{}]\n",
            values.join(", ")
        ));
    }
    dir.write("bomb.toml", &sweep);
    for extra in [&[][..], &["--shard", "3/1000"][..]] {
        let mut args = vec!["sweep", "bomb.toml", "--out", "sw", "--quiet"];
        args.extend_from_slice(extra);
        let e = run_bad(&dir, &args);
        assert!(
            e.contains("17592186044416 runs") && e.contains("1000000"),
            "{e}"
        );
    }
    assert!(!dir.path().join("sw").exists());
}

#[test]
fn runs_that_cannot_finish_are_refused_and_huge_ones_warned() {
    // Defect 21.
    let dir = TestDir::new("wrong_resource_bombs");
    dir.write("base.toml", BASE);
    let ip = "[model]\nlatency_model = \"linear\"\nbeta = [2000.0, 5.0, 30.0]\n[workload.inference_perf]\nclient = \"reference\"\nstages = [{ rate = 4.2e11, duration = 900 }]\n[workload.inference_perf.shared_prefix]\nnum_unique_system_prompts = 2\nnum_users_per_system_prompt = 4\nsystem_prompt_len = 64\nquestion_len = 100\noutput_len = 20\n";
    dir.write("ip.toml", ip);
    for (file, sets) in [
        (
            "base.toml",
            vec![
                "workload.num_requests=9000000000000000000",
                "workload.aggregate_rate=10.0",
            ],
        ),
        (
            "base.toml",
            vec![
                "horizon_us=9223372036854775807",
                "workload.num_requests=100000000000000",
            ],
        ),
        ("ip.toml", vec![]),
    ] {
        let mut args = vec!["validate", file];
        for s in &sets {
            args.extend(["--set", s]);
        }
        let e = run_bad(&dir, &args);
        assert!(
            e.contains("cannot finish") && e.contains("requests"),
            "{sets:?}: {e}"
        );
    }
    let o = ok(
        &dir,
        &[
            "validate",
            "base.toml",
            "--set",
            "workload.num_requests=200000000",
        ],
    );
    let err = text(&o.stderr);
    assert!(
        err.contains("warning") && err.contains("2.00e8 requests"),
        "{err}"
    );
    let o = ok(
        &dir,
        &[
            "validate",
            "base.toml",
            "--set",
            "workload.num_requests=2000000",
            "--set",
            "workload.aggregate_rate=100000.0",
            "--set",
            "output.timeseries_path=\"ts.jsonl\"",
            "--set",
            "output.timeseries_interval_us=1",
        ],
    );
    let err = text(&o.stderr);
    assert!(
        err.contains("warning") && err.contains("time-series lines"),
        "{err}"
    );
    let e = run_bad(
        &dir,
        &[
            "validate",
            "base.toml",
            "--set",
            "workload.num_requests=20000000000",
            "--set",
            "output.timeseries_path=\"ts.jsonl\"",
            "--set",
            "output.timeseries_interval_us=1",
        ],
    );
    assert!(e.contains("output.timeseries_interval_us"), "{e}");
}

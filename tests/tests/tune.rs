//! `blis tune` and `blis convert to-epp-config` through the real binary:
//! a threshold known by construction recovered from a distant start (a
//! native plugin loaded from disk, some of whose values it refuses), no
//! gain reported when the start is already best, a real gain on held-out
//! traffic for llm-d's default profile, determinism and resumption, the
//! tuned llm-d file and the shipped llm-d files round-tripped to identical
//! reports, bad tune files refused with the file and key named.

use std::path::Path;

use serde_json::Value;

use crate::util::{artifacts, run_bad, run_ok, TestDir};

/// Two instances with room in their KV caches for one shared system
/// prompt each. Half the requests carry system prompt "a" (1,000 tokens)
/// and 100–200 tokens of their own, half system prompt "b" and 300–400
/// tokens: whole prompts of 1,100–1,200 and 1,300–1,400 tokens. The
/// fixture router `length-split` sends prompts of at most `threshold`
/// tokens to instance 0, the others to instance 1. The KV-cache hit rate is
/// highest exactly when each instance sees one system prompt — a threshold
/// in [1200, 1300), where every threshold makes the same decisions — and
/// falls off on both sides as requests of the other prompt evict it (all
/// on one instance below 1,100 and above 1,400). The router refuses
/// thresholds in [1500, 1800].
fn split_base(plugin: &Path, threshold: f64) -> String {
    format!(
        r#"
seed = 1
[[plugins]]
path = "{}"
[model]
name = "qwen3-14b"
hardware = "H100"
[instance]
count = 2
total_kv_blocks = 100
[workload]
aggregate_rate = 4.0
num_requests = 300
[[workload.clients]]
id = "short"
rate_fraction = 0.5
prefix_group = "a"
prefix_length = 1000
input = {{ type = "gaussian", mean = 150, std_dev = 30, min = 100, max = 200 }}
output = {{ type = "gaussian", mean = 20, std_dev = 5, min = 10, max = 30 }}
[[workload.clients]]
id = "long"
rate_fraction = 0.5
prefix_group = "b"
prefix_length = 1000
input = {{ type = "gaussian", mean = 350, std_dev = 30, min = 300, max = 400 }}
output = {{ type = "gaussian", mean = 20, std_dev = 5, min = 10, max = 30 }}
[routing]
policy = "fixture-alpha::length-split"
params = {{ threshold = {threshold:.1}, refuse_min = 1500.0, refuse_max = 1800.0 }}
"#,
        plugin.display()
    )
}

const SPLIT_TUNE: &str = r#"
base = "base.toml"
budget = 110
seed = 3
population = 10
[objective]
metric = "kv_cache_hit_rate"
goal = "maximize"
[train]
seeds = [1, 2]
[held_out]
seeds = [11, 12, 13]
rates = [3.0]
[[param]]
key = "routing.params.threshold"
name = "threshold"
min = 0.0
max = 2500.0
"#;

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Must show 1 and 5: the threshold recovered to within the optimal band
/// [1200, 1300) from 2400 (everything on instance 0), a gain on the held-out
/// seeds and rate; the plugin's refusals recorded as failed evaluations
/// with its message; the same tune again is byte-identical, and resumed
/// from its directory it runs nothing.
#[test]
fn a_threshold_known_by_construction_is_recovered() {
    let dir = TestDir::new("tune_recovery");
    dir.write("base.toml", &split_base(&artifacts().alpha(), 2400.0));
    dir.write("tune.toml", SPLIT_TUNE);
    let o = run_ok(&dir, &["tune", "tune.toml", "--out", "a", "--jobs", "2"]);
    let summary: Value = serde_json::from_slice(&o.stdout).unwrap();
    let t = json(&dir.path().join("a/tune.json"));
    let tuned = t["tuned"]["threshold"].as_f64().unwrap();
    assert!(
        (1200.0..1300.0).contains(&tuned),
        "tuned threshold {tuned}, {summary:#}"
    );
    assert_eq!(t["verdict"]["gain"], true, "{:#}", t["verdict"]);
    let h = &t["held_out"]["summary"];
    let gain = h["tuned"].as_f64().unwrap() - h["start"].as_f64().unwrap();
    assert!(
        gain > h["start_sd"].as_f64().unwrap() && gain > h["tuned_sd"].as_f64().unwrap(),
        "{h:#}"
    );
    assert!(t["simulations"]["search"].as_u64().unwrap() <= 110);
    let csv = std::fs::read_to_string(dir.path().join("a/evaluations.csv")).unwrap();
    assert!(
        csv.starts_with(
            "evaluation,phase,generation,threshold,kv_cache_hit_rate,feasible,best_so_far,error\n"
        ),
        "{csv}"
    );
    let failed: Vec<&str> = csv.lines().filter(|l| l.contains("refused band")).collect();
    assert!(
        !failed.is_empty(),
        "no evaluation fell in the refused band:\n{csv}"
    );
    assert!(failed.iter().all(|l| l.contains(",false,")), "{failed:?}");
    assert!(t["search"]["failed"].as_u64().unwrap() >= failed.len() as u64);
    // The sensitivity of the only parameter is reported around the answer.
    assert!(!t["params"][0]["sensitivity"]["probes"]
        .as_array()
        .unwrap()
        .is_empty());
    // Repeatable, and resumable from the directory.
    run_ok(&dir, &["tune", "tune.toml", "--out", "b", "--jobs", "1"]);
    let csv_b = std::fs::read_to_string(dir.path().join("b/evaluations.csv")).unwrap();
    assert_eq!(csv, csv_b);
    let again = run_ok(&dir, &["tune", "tune.toml", "--out", "a"]);
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["simulations"]["ran"], 0, "{again:#}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a/evaluations.csv")).unwrap(),
        csv
    );
    // The tuned run file runs and routes as the answer says.
    let tuned_toml = std::fs::read_to_string(dir.path().join("a/tuned.toml")).unwrap();
    assert!(
        tuned_toml.contains(&format!("threshold = {tuned}")),
        "{tuned_toml}"
    );
    run_ok(&dir, &["run", "a/tuned.toml"]);
    // The HTML page: convergence, the parameter's trajectory, the comparison.
    run_ok(&dir, &["report", "a", "-o", "tune.html"]);
    let html = std::fs::read_to_string(dir.path().join("tune.html")).unwrap();
    for needle in [
        "data-plot=\"objective\"",
        "data-plot=\"param-threshold\"",
        "held-out",
        "Sensitivity",
    ] {
        assert!(html.contains(needle), "{needle} missing from the tune page");
    }
}

/// Must show 2, second half: a start already in the optimal band is kept;
/// the verdict says there is no gain and the recommended file is the start.
#[test]
fn no_gain_is_reported_when_the_start_is_already_best() {
    let dir = TestDir::new("tune_no_gain");
    dir.write("base.toml", &split_base(&artifacts().alpha(), 1250.0));
    dir.write(
        "tune.toml",
        &SPLIT_TUNE.replace("budget = 110", "budget = 40"),
    );
    run_ok(&dir, &["tune", "tune.toml", "--out", "o"]);
    let t = json(&dir.path().join("o/tune.json"));
    assert_eq!(t["verdict"]["gain"], false, "{:#}", t["verdict"]);
    assert_eq!(t["recommended"]["threshold"].as_f64(), Some(1250.0));
    let reason = t["verdict"]["reason"].as_str().unwrap();
    assert!(reason.contains("nothing better than the start"), "{reason}");
    let tuned = std::fs::read_to_string(dir.path().join("o/tuned.toml")).unwrap();
    assert!(tuned.contains("no gain on the held-out traffic"), "{tuned}");
}

/// Must show 2 and 3: llm-d's default profile tuned on its workload gains
/// on held-out seeds and a held-out rate by more than the seed spread; the
/// tuned llm-d file passes the loader and runs to the report of the tuned
/// run file, byte for byte.
#[test]
fn llm_d_default_profile_gains_held_out_and_round_trips() {
    let dir = TestDir::new("tune_llm_d");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let example = std::fs::read_to_string(root.join("examples/tune/llm-d.toml")).unwrap();
    let text = example
        .replace(
            "\"../llm-d/",
            &format!("\"{}/examples/llm-d/", root.display()),
        )
        .replace("budget = 150", "budget = 75");
    dir.write("tune.toml", &text);
    run_ok(&dir, &["tune", "tune.toml", "--out", "o"]);
    let t = json(&dir.path().join("o/tune.json"));
    assert_eq!(t["verdict"]["gain"], true, "{:#}", t["verdict"]);
    let h = &t["held_out"]["summary"];
    let gain = h["start"].as_f64().unwrap() - h["tuned"].as_f64().unwrap();
    assert!(
        gain > h["start_sd"].as_f64().unwrap() && gain > h["tuned_sd"].as_f64().unwrap(),
        "{h:#}"
    );
    let a = run_ok(&dir, &["run", "o/tuned.toml"]).stdout;
    let b = run_ok(
        &dir,
        &[
            "run",
            root.join("examples/llm-d/workload.toml").to_str().unwrap(),
            "--epp-config",
            "o/tuned-epp.yaml",
            "--num-requests",
            "1500",
        ],
    )
    .stdout;
    assert!(
        a == b,
        "the tuned llm-d file runs differently from the tuned run file"
    );
}

/// Must show 3: every shipped llm-d file blis runs on the example workload
/// converts back to an llm-d file that runs to the identical report — or
/// is refused with the part llm-d's writer lacks named.
#[test]
fn shipped_llm_d_files_round_trip() {
    let dir = TestDir::new("tune_epp_round_trip");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut identical = Vec::new();
    let mut refused = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(root.join("tests/data/llm-d-router-configs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for f in &files {
        let f_str = f.to_str().unwrap();
        // The P/D files disaggregate over the pools of workload-pd.toml.
        let text = std::fs::read_to_string(f).unwrap();
        let workload = if text.contains("disagg-profile-handler") {
            root.join("examples/llm-d/workload-pd.toml")
        } else {
            root.join("examples/llm-d/workload.toml")
        };
        let w = workload.to_str().unwrap();
        let o = dir
            .blis()
            .args(["convert", "to-epp-config", w, "--epp-config", f_str])
            .output()
            .unwrap();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if !o.status.success() {
            let e = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{name}: {e}");
            refused.push((name, e.into_owned()));
            continue;
        }
        let written = dir.write(&format!("rt-{name}"), &String::from_utf8(o.stdout).unwrap());
        // A rate at which admission rejects and flow control queues.
        let run = |cfg: &str| {
            run_ok(
                &dir,
                &[
                    "run",
                    w,
                    "--epp-config",
                    cfg,
                    "--num-requests",
                    "1500",
                    "--rate",
                    "150",
                ],
            )
            .stdout
        };
        let (a, b) = (run(f_str), run(written.to_str().unwrap()));
        assert!(a == b, "{name}: the written file runs differently");
        identical.push(name);
    }
    // Every shipped file blis simulates round-trips: the one refused is the
    // file llm-d's own loader refuses (a parameter its plugin does not
    // have: cacheSizeInMB for cacheSizeInMBPerServer).
    assert_eq!(
        identical.len(),
        18,
        "identical {identical:?}, refused {refused:?}"
    );
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].0, "epp-mm-embeddings-cache-config.yaml");
    assert!(
        refused[0].1.contains("unknown field \"cacheSizeInMB\""),
        "{}",
        refused[0].1
    );
}

/// A run file converted to llm-d and run with `--epp-config` gives the
/// run file's own report; a routing llm-d cannot express is refused by name.
#[test]
fn a_run_file_converts_to_an_llm_d_file_that_runs_identically() {
    let dir = TestDir::new("tune_to_epp");
    dir.write(
        "run.toml",
        r#"
seed = 5
[instance]
count = 3
[workload]
aggregate_rate = 30.0
num_requests = 400
[admission]
policy = "gaie-legacy"
params = { queue_depth_threshold = 7.0, kv_threshold = 0.9 }
[routing]
policy = "weighted"
tie_break = "random"
scorers = [
  { name = "prefix-affinity", weight = 3.0, params = { capacity = 5000 } },
  { name = "waiting-queue", weight = 1.5 },
  { name = "load-aware", weight = 0.5, params = { threshold = 64 } },
]
[routing.freshness]
queue_depth_us = 100000
batch_size_us = 100000
kv_utilization_us = 100000
resident_adapters_us = 100000
"#,
    );
    converts_identically(&dir, "run.toml");
    let e = run_bad(
        &dir,
        &[
            "convert",
            "to-epp-config",
            "run.toml",
            "--set",
            "routing.policy=round-robin",
        ],
    );
    assert!(
        e.contains("policy = \"round-robin\"") && e.contains("llm-d cannot express"),
        "{e}"
    );
}

/// `convert to-epp-config RUN` and `run RUN --epp-config WRITTEN` gives
/// `run RUN`'s report, byte for byte.
fn converts_identically(dir: &TestDir, run: &str) {
    let yaml = run_ok(dir, &["convert", "to-epp-config", run]).stdout;
    let written = format!("{run}.yaml");
    dir.write(&written, &String::from_utf8(yaml).unwrap());
    let a = run_ok(dir, &["run", run]).stdout;
    let b = run_ok(dir, &["run", run, "--epp-config", &written]).stdout;
    assert!(
        a == b,
        "{run}: --epp-config of the written file runs differently"
    );
}

/// Flow control (a concurrency detector, bands with their own capacity
/// and fairness, program-aware settings, by-priority ceilings, TTL, queue
/// limit, eviction), an admitter and a profile with filters convert to
/// llm-d and back to the same run; what llm-d cannot express is refused
/// by name.
#[test]
fn flow_control_admitters_and_filters_convert_identically() {
    let dir = TestDir::new("tune_to_epp_flow");
    let run = |gate: &str, filters: &str| {
        format!(
            r#"
seed = 9
[instance]
count = 4
[workload]
aggregate_rate = 120.0
num_requests = 900
[[workload.clients]]
id = "live"
rate_fraction = 0.3
slo_class = "critical"
input = {{ type = "gaussian", mean = 300, std_dev = 80, min = 16, max = 900 }}
output = {{ type = "gaussian", mean = 120, std_dev = 40, min = 8, max = 400 }}
[[workload.clients]]
id = "chat"
rate_fraction = 0.4
slo_class = "standard"
prefix_group = "sys"
prefix_length = 1024
input = {{ type = "gaussian", mean = 200, std_dev = 60, min = 16, max = 800 }}
output = {{ type = "gaussian", mean = 150, std_dev = 50, min = 8, max = 400 }}
session = {{ max_rounds = 3, think_time_us = 500000, context_growth = "accumulate" }}
[[workload.clients]]
id = "bulk"
rate_fraction = 0.3
slo_class = "sheddable"
input = {{ type = "gaussian", mean = 1500, std_dev = 300, min = 64, max = 3000 }}
output = {{ type = "gaussian", mean = 80, std_dev = 20, min = 8, max = 200 }}
{gate}
[routing]
policy = "pipeline"
profile_handler = "single-profile"
[[routing.profiles]]
name = "p"
filters = [{filters}]
scorers = [
  {{ name = "kv-utilization", weight = 1.0 }},
  {{ name = "active-requests", weight = 2.0 }},
]
picker = {{ name = "max-score", params = {{ tie_break = "random" }} }}
[routing.freshness]
queue_depth_us = 50000
batch_size_us = 50000
kv_utilization_us = 50000
resident_adapters_us = 50000
"#
        )
    };
    let gate = r#"
[admission]
policy = "probabilistic"
params = { queue_depth_threshold = 3.0, kv_threshold = 0.7, power = 2.0, k = 10.0 }
[flow_control]
saturation_detector = "concurrency"
max_concurrency = 6
concurrency_mode = "hybrid"
max_token_concurrency = 20000
per_band_capacity = 300
band_capacity = { sheddable = 40 }
fairness = "round-robin"
band_fairness = { critical = "program-aware" }
las_weight_service = 0.6
usage_limit = "by-priority"
usage_limit_threshold = 0.5
usage_limit_max = 0.9
request_ttl_us = 3000000
max_depth = 500
in_flight_eviction = true
"#;
    let filters = r#"
  { name = "utilization", params = { conditions = [{ metric = "waiting-queue", max = 6.0 }], fallback_on_empty = true } },
  { name = "session-affinity" },
"#;
    dir.write("flow.toml", &run(gate, filters));
    let report = String::from_utf8(run_ok(&dir, &["run", "flow.toml"]).stdout).unwrap();
    // The case exercises what it converts: the gateway queues and expires.
    assert!(report.contains("\"expired\""), "{report}");
    converts_identically(&dir, "flow.toml");
    // Gate off: llm-d's legacy controller (gaie-legacy or concurrency-shed),
    // then the admitter; the unsaturated filter.
    let legacy = r#"
[admission]
policy = "gaie-legacy"
params = { queue_depth_threshold = 4.0 }
[[admission.then]]
policy = "probabilistic"
params = { power = 3.0 }
"#;
    let unsaturated = r#"{ name = "unsaturated", params = { headroom = 0.2 } }"#;
    dir.write("legacy.toml", &run(legacy, unsaturated));
    converts_identically(&dir, "legacy.toml");
    let shed = "[admission]\npolicy = \"concurrency-shed\"\nparams = { mode = \"tokens\", max_token_concurrency = 30000 }\n";
    dir.write("shed.toml", &run(shed, unsaturated));
    converts_identically(&dir, "shed.toml");
    // Static and soft-reflective ceilings, a utilization detector.
    let static_gate = r#"
[flow_control]
queue_depth_threshold = 4.0
usage_limit = "static"
usage_limit_threshold = 0.7
per_band_capacity = 100
"#;
    dir.write("static.toml", &run(static_gate, unsaturated));
    converts_identically(&dir, "static.toml");
    dir.write(
        "soft.toml",
        &run(
            "[flow_control]\nusage_limit = \"soft-reflective\"\n",
            filters,
        ),
    );
    converts_identically(&dir, "soft.toml");
    for (set, named) in [
        ("flow_control.shedding=true", "[flow_control] shedding"),
        (
            "admission.policy=\"gaie-legacy\"",
            "[admission] policy = \"gaie-legacy\" with [flow_control]",
        ),
        (
            "flow_control.dispatch_tick_us=5000",
            "[flow_control] dispatch_tick_us",
        ),
        (
            "routing.profiles.0.filters=[{name=\"least-kv\"}]",
            "routing.profiles.0.filters.0 (least-kv)",
        ),
    ] {
        let e = run_bad(
            &dir,
            &["convert", "to-epp-config", "flow.toml", "--set", set],
        );
        assert!(
            e.contains(named) && e.contains("llm-d cannot express"),
            "{set}: {e}"
        );
    }
}

/// P/D stages (a prefix-threshold decider with a prompt floor, their own
/// prefill and decode routings) convert to llm-d's disagg profile handler
/// and back to the same run.
#[test]
fn pd_stages_convert_identically() {
    let dir = TestDir::new("tune_to_epp_pd");
    dir.write(
        "pd.toml",
        r#"
seed = 3
[workload]
aggregate_rate = 12.0
num_requests = 500
prompt_tokens = 2000
prompt_tokens_stdev = 800
prompt_tokens_min = 100
prompt_tokens_max = 6000
output_tokens = 120
[[pools]]
name = "p"
role = "prefill"
instances = 2
[[pools]]
name = "d"
role = "decode"
instances = 3
[pd]
decider = "prefix-threshold"
prefix_threshold = 300
prefix_min_prompt_tokens = 1200
[pd.prefill_routing]
policy = "weighted"
tie_break = "random"
scorers = [{ name = "waiting-queue", weight = 1.0 }]
[pd.decode_routing]
policy = "weighted"
tie_break = "random"
scorers = [
  { name = "prefix-affinity", weight = 2.0 },
  { name = "running-requests", weight = 1.0 },
]
[routing]
policy = "weighted"
tie_break = "random"
scorers = [{ name = "waiting-queue", weight = 1.0 }]
"#,
    );
    let report = String::from_utf8(run_ok(&dir, &["run", "pd.toml"]).stdout).unwrap();
    assert!(report.contains("\"kv_transfers\""), "{report}");
    converts_identically(&dir, "pd.toml");
    let e = run_bad(
        &dir,
        &[
            "convert",
            "to-epp-config",
            "pd.toml",
            "--set",
            "pd.decider=\"fixture::split\"",
        ],
    );
    assert!(
        e.contains("[pd] decider = \"fixture::split\"") && e.contains("llm-d cannot express"),
        "{e}"
    );
}

/// Must show 5: each mistake one clear error naming the file and key, exit 2.
#[test]
fn bad_tune_files_are_refused_by_name() {
    let dir = TestDir::new("tune_bad");
    dir.write("base.toml", &split_base(&artifacts().alpha(), 2400.0));
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "budget 0",
            SPLIT_TUNE.replace("budget = 110", "budget = 0"),
            "budget = 0",
        ),
        (
            "budget too small",
            SPLIT_TUNE.replace("budget = 110", "budget = 5"),
            "needs at least 22 simulations",
        ),
        (
            "a key the run file does not have",
            SPLIT_TUNE.replace("routing.params.threshold", "routing.paramz.threshold"),
            "routing.paramz.threshold",
        ),
        (
            "a parameter the policy does not have",
            SPLIT_TUNE.replace(
                "routing.params.threshold\"",
                "routing.params.treshold\"\nstart = 1.0",
            ),
            "treshold",
        ),
        (
            "a range outside the plugin's domain",
            SPLIT_TUNE
                .replace(
                    "min = 0.0\nmax = 2500.0",
                    "min = 0.0\nmax = 2500.0\nstart = 1000.0",
                )
                .replace("max = 2500.0\nstart", "max = 1600.0\nstart"),
            "outside what the policy takes",
        ),
        (
            "an objective metric that does not exist",
            SPLIT_TUNE.replace("\"kv_cache_hit_rate\"", "\"kv_cache_hit_ratio\""),
            "objective.metric 'kv_cache_hit_ratio'",
        ),
        (
            "no held-out set",
            SPLIT_TUNE.replace("[held_out]\nseeds = [11, 12, 13]\nrates = [3.0]", ""),
            "no [held_out]",
        ),
        (
            "a start outside the range",
            SPLIT_TUNE.replace("min = 0.0\nmax = 2500.0", "min = 0.0\nmax = 2000.0"),
            "start 2400 lies outside",
        ),
        (
            "log scale from 0",
            SPLIT_TUNE.replace("max = 2500.0", "max = 2500.0\nscale = \"log\""),
            "min > 0",
        ),
        (
            "unknown key",
            SPLIT_TUNE.replace("budget = 110", "budget = 110\nbugdet = 3"),
            "bugdet",
        ),
    ];
    for (what, text, needle) in cases {
        eprintln!("case: {what}");
        dir.write("bad.toml", &text);
        let e = run_bad(&dir, &["tune", "bad.toml", "--out", "o"]);
        assert!(e.contains("bad.toml"), "{what}: names the file: {e}");
        assert!(e.contains(needle), "{what}: expected '{needle}' in: {e}");
    }
    // A held-out set equal to the training set is a warning, not an error.
    let same = SPLIT_TUNE
        .replace("seeds = [11, 12, 13]\nrates = [3.0]", "seeds = [1, 2]")
        .replace("budget = 110", "budget = 22");
    dir.write("same.toml", &same);
    let o = run_ok(&dir, &["tune", "same.toml", "--out", "same"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("warning") && e.contains("held-out traffic is the training traffic"),
        "{e}"
    );
}

/// Workloads as run files: the training and held-out sets may be other
/// traffic (the held-out a workload the tune never saw), labelled by file
/// in the record; and a tune directory whose workload file has changed
/// since is another search's, refused rather than resumed.
#[test]
fn workload_files_train_and_judge_and_are_part_of_the_search() {
    let dir = TestDir::new("tune_workloads");
    let base = r#"
seed = 1
[instance]
count = 3
[workload]
aggregate_rate = 25.0
num_requests = 300
[routing]
policy = "weighted"
tie_break = "random"
scorers = [{ name = "waiting-queue", weight = 1.0 }, { name = "prefix-affinity", weight = 1.0 }]
"#;
    dir.write("base.toml", base);
    let shared = |len: u32| {
        format!(
            "[workload]\naggregate_rate = 25.0\nnum_requests = 300\n[[workload.clients]]\nid = \"chat\"\nrate_fraction = 1.0\nprefix_group = \"sys\"\nprefix_length = {len}\ninput = {{ type = \"gaussian\", mean = 200, std_dev = 50, min = 8, max = 600 }}\noutput = {{ type = \"gaussian\", mean = 100, std_dev = 30, min = 8, max = 300 }}\n"
        )
    };
    dir.write("short.toml", &shared(512));
    dir.write("long.toml", &shared(2048));
    dir.write(
        "tune.toml",
        r#"
base = "base.toml"
budget = 12
population = 4
seed = 3
[objective]
metric = "ttft_mean_ms"
[train]
seeds = [1, 2]
workloads = ["short.toml"]
[held_out]
seeds = [11, 12]
workloads = ["long.toml"]
[[param]]
key = "routing.scorers.1.weight"
name = "prefix_weight"
min = 0.0
max = 5.0
"#,
    );
    run_ok(&dir, &["tune", "tune.toml", "--out", "o"]);
    let t = json(&dir.path().join("o/tune.json"));
    assert_eq!(
        t["train"]["workloads"],
        serde_json::json!(["short"]),
        "{t:#}"
    );
    assert_eq!(
        t["held_out"]["workloads"],
        serde_json::json!(["long"]),
        "{t:#}"
    );
    // The held-out traffic is other traffic: another TTFT than training's.
    let start = |set: &str| t[set]["summary"]["start"].as_f64().unwrap();
    assert!((start("held_out") - start("train")).abs() > 0.5, "{t:#}");
    let results = std::fs::read_to_string(dir.path().join("o/results.csv")).unwrap();
    assert!(
        results.starts_with("run_id,status,error,prefix_weight,workload,seed,num_requests,"),
        "{results}"
    );
    assert!(
        results.lines().any(|l| l.contains(",long,"))
            && results.lines().any(|l| l.contains(",short,")),
        "{results}"
    );
    // Resuming into the same directory runs nothing …
    let again: Value =
        serde_json::from_slice(&run_ok(&dir, &["tune", "tune.toml", "--out", "o"]).stdout).unwrap();
    assert_eq!(again["simulations"]["ran"], 0, "{again:#}");
    // … but not once a workload file has changed: another search.
    dir.write("long.toml", &shared(3072));
    let e = run_bad(&dir, &["tune", "tune.toml", "--out", "o"]);
    assert!(e.contains("holds the results of another sweep"), "{e}");
}

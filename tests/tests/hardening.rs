//! Regression tests of issue 18 (hardening), each through the real `blis`:
//! the five defects (clock overflow, weight overflow, huge prompts, seeds
//! above i64::MAX, outputs clobbering inputs) and the edges (α2 and the
//! run's duration, `--rate -1`, zero prompt tokens, a workload that
//! generates nothing, a horizon before the first arrival, TP that does not
//! divide the model's heads).

use std::process::Output;

use serde_json::Value;

use crate::util::{artifacts, TestDir};

/// A small linear-model run (4 instances, 40 requests).
const BASE: &str = r#"
seed = 3
[model]
latency_model = "linear"
alpha = [100.0, 0.5, 20.0]
beta = [2000.0, 5.0, 30.0]
[instance]
count = 4
[workload]
aggregate_rate = 100.0
num_requests = 40
prompt_tokens = 200
output_tokens = 20
"#;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn blis(dir: &TestDir, args: &[&str]) -> Output {
    dir.blis().args(args).output().expect("run blis")
}

/// Exit 0; the report.
fn ok(dir: &TestDir, args: &[&str]) -> (Value, String) {
    let o = blis(dir, args);
    assert!(
        o.status.success(),
        "blis {args:?} failed: {}",
        text(&o.stderr)
    );
    let report = serde_json::from_slice(&o.stdout).expect("one JSON report");
    (report, text(&o.stderr))
}

/// Exit `code`, nothing on stdout, one short error without a panic.
fn fails(dir: &TestDir, code: i32, args: &[&str]) -> String {
    let o = blis(dir, args);
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "blis {args:?}: {e}");
    assert_eq!(text(&o.stdout), "", "nothing on stdout on error");
    assert!(!e.contains("panicked at"), "{e}");
    assert!(e.lines().count() <= 12, "a short error:\n{e}");
    e
}

fn count(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn absurd_delays_and_coefficients_are_refused_before_the_run() {
    let dir = TestDir::new("hardening_clock_bounds");
    let run = dir.write("run.toml", BASE);
    let run = run.to_str().unwrap();
    for (set, key) in [
        (
            "admission.latency_us=9223372036854775807",
            "admission.latency_us",
        ),
        (
            "routing.latency_us=9223372036854775807",
            "routing.latency_us",
        ),
        (
            "routing.snapshot_refresh_interval_us=9223372036854775807",
            "routing.snapshot_refresh_interval_us",
        ),
        ("model.alpha=[1e19,0,0]", "alpha[0]"),
        ("model.alpha=[0,1e308,0]", "alpha[1]"),
        ("model.alpha=[0,0,1e308]", "alpha[2]"),
        ("model.beta=[1e308,0,0]", "beta[0]"),
        ("model.beta=[0,0,1e308]", "beta[2]"),
    ] {
        let e = fails(&dir, 2, &["run", run, "--set", set]);
        assert!(e.contains(key), "--set {set}: the error names {key}:\n{e}");
    }
}

#[test]
fn time_past_the_limit_ends_the_run_with_an_error_not_wrapped_times() {
    // Every value is within its bound, but 5,000,000 prompt tokens at
    // 1e12 µs each put the request's queueing delay past 2^62 µs.
    let dir = TestDir::new("hardening_clock_runtime");
    let run = dir.write(
        "run.toml",
        r#"
[model]
latency_model = "linear"
alpha = [0.0, 1e12, 0.0]
beta = [1000.0, 0.0, 0.0]
[workload]
aggregate_rate = 1.0
num_requests = 1
prompt_tokens = 5000000
prompt_tokens_stdev = 0
prompt_tokens_max = 5000000
output_tokens = 2
"#,
    );
    let e = fails(&dir, 1, &["run", run.to_str().unwrap()]);
    assert!(e.contains("2^62") && e.contains("model.alpha"), "{e}");
}

#[test]
fn huge_scorer_weights_still_spread_requests() {
    let dir = TestDir::new("hardening_weights");
    let run = dir.write("run.toml", BASE);
    let (r, _) = ok(
        &dir,
        &[
            "run",
            run.to_str().unwrap(),
            "--routing-scorers",
            "queue-depth:1e308,kv-utilization:1e308",
        ],
    );
    let used = r["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| count(b, "injected_requests") > 0)
        .count();
    assert_eq!(used, 4, "every instance gets requests: {}", r["instances"]);
}

#[test]
fn seeds_above_i64_max_work_from_the_flag_and_the_file() {
    let dir = TestDir::new("hardening_seed");
    let run = dir.write("run.toml", BASE);
    let run = run.to_str().unwrap();
    let (flag, _) = ok(&dir, &["run", run, "--seed", "18446744073709551615"]);
    let in_file = dir.write(
        "seed.toml",
        &BASE.replace("seed = 3", "seed = \"18446744073709551615\""),
    );
    let (file, _) = ok(&dir, &["run", in_file.to_str().unwrap()]);
    assert_eq!(flag, file, "the same seed from the flag and the file");
    let (other, _) = ok(&dir, &["run", run, "--seed", "9223372036854775808"]);
    let (small, _) = ok(&dir, &["run", run, "--seed", "3"]);
    assert_ne!(
        other["cluster"], small["cluster"],
        "seeds differ above i64::MAX"
    );
    let e = fails(&dir, 2, &["run", run, "--seed", "-1"]);
    assert!(e.contains("--seed"), "{e}");
    let bad = dir.write("bad.toml", &BASE.replace("seed = 3", "seed = \"x\""));
    let e = fails(&dir, 2, &["run", bad.to_str().unwrap()]);
    assert!(e.contains("seed"), "{e}");
}

#[test]
fn outputs_never_overwrite_inputs_or_each_other() {
    let dir = TestDir::new("hardening_outputs");
    let body = format!("{BASE}[output]\nresults_path = \"run.toml\"\n");
    let run = dir.write("run.toml", &body);
    let run = run.to_str().unwrap();
    let e = fails(&dir, 2, &["run", run]);
    assert!(
        e.contains("output.results_path") && e.contains("run file"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(run).unwrap(),
        body,
        "the run file is intact"
    );
    // The same file under another spelling, from the command line.
    let plain = dir.write("plain.toml", BASE);
    let plain = plain.to_str().unwrap();
    let e = fails(&dir, 2, &["run", plain, "--results-path", "./plain.toml"]);
    assert!(e.contains("run file"), "{e}");
    let e = fails(
        &dir,
        2,
        &[
            "run",
            plain,
            "--results-path",
            "out.jsonl",
            "--trace-path",
            "./out.jsonl",
        ],
    );
    assert!(e.contains("same file"), "{e}");
    assert!(!dir.path().join("out.jsonl").exists(), "nothing written");
    // A trace the workload replays is an input too.
    dir.write(
        "t.csv",
        "arrival_us,input_tokens,output_tokens\n0,10,2\n5,10,2\n",
    );
    let replay = dir.write(
        "replay.toml",
        "[workload]\ntrace = \"t.csv\"\n[model]\nlatency_model = \"linear\"\nbeta = [1000.0, 1.0, 1.0]\n[output]\ntrace_path = \"t.csv\"\n",
    );
    let e = fails(&dir, 2, &["run", replay.to_str().unwrap()]);
    assert!(
        e.contains("output.trace_path") && e.contains("workload.trace"),
        "{e}"
    );
}

#[test]
fn a_failed_run_leaves_the_previous_outputs_whole() {
    let dir = TestDir::new("hardening_atomic");
    let run = dir.write("run.toml", BASE);
    let run = run.to_str().unwrap();
    dir.write("results.jsonl", "previous\n");
    let alpha = artifacts().alpha();
    let e = fails(
        &dir,
        1,
        &[
            "run",
            run,
            "--plugin",
            alpha.to_str().unwrap(),
            "--admission-policy",
            "panicky-admission",
            "--results-path",
            "results.jsonl",
        ],
    );
    assert!(e.contains("panic"), "{e}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap(),
        "previous\n"
    );
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
    // A successful run replaces it.
    ok(&dir, &["run", run, "--results-path", "results.jsonl"]);
    let lines = std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 40);
}

#[test]
fn the_duration_includes_tokens_delivered_after_the_last_step() {
    // One request at t = 1 s: 16 prompt tokens, 3 output tokens; every step
    // takes 1 ms and token k reaches the client k · 1 ms after its step.
    // Steps end at 1.001, 1.002, 1.003 s; tokens arrive at 1.002, 1.004,
    // 1.006 s: the run lasts 1.006 s, not 1.003 s.
    let dir = TestDir::new("hardening_alpha2");
    let run = dir.write(
        "run.toml",
        r#"
[model]
latency_model = "linear"
alpha = [0.0, 0.0, 1000.0]
beta = [1000.0, 0.0, 0.0]
[workload]
aggregate_rate = 1.0
num_requests = 1
prompt_tokens = 16
prompt_tokens_stdev = 0
output_tokens = 3
output_tokens_stdev = 0
"#,
    );
    let (r, _) = ok(&dir, &["run", run.to_str().unwrap()]);
    let c = &r["cluster"];
    assert_eq!(c["simulated_duration_s"], 1.006, "{c}");
    assert_eq!(c["e2e_mean_ms"], 6.0, "{c}");
    assert_eq!(c["responses_per_sec"], 1.0 / 1.006, "{c}");
    assert_eq!(c["tokens_per_sec"], 3.0 / 1.006, "{c}");
    assert_eq!(r["instances"][0]["simulated_duration_s"], 1.006);
}

#[test]
fn a_negative_rate_is_a_value_error() {
    let dir = TestDir::new("hardening_rate");
    let e = fails(&dir, 2, &["run", "--rate", "-1"]);
    assert!(e.contains("aggregate_rate") && e.contains("-1"), "{e}");
    let e = fails(&dir, 2, &["run", "--horizon", "-5"]);
    assert!(e.contains("horizon_us"), "{e}");
}

#[test]
fn surely_unmeant_runs_draw_warnings() {
    let dir = TestDir::new("hardening_warnings");
    let run = dir.write("run.toml", BASE);
    let run = run.to_str().unwrap();
    // Prompt lengths of 0 are raised to one token, and it says so.
    let (_, e) = ok(
        &dir,
        &[
            "run",
            run,
            "--prompt-tokens",
            "0",
            "--prompt-tokens-min",
            "0",
        ],
    );
    assert!(e.contains("warning") && e.contains("prompt_tokens"), "{e}");
    // A rate so low that no request ever arrives.
    let (r, e) = ok(
        &dir,
        &["run", run, "--set", "workload.aggregate_rate=1e-300"],
    );
    assert_eq!(count(&r["cluster"], "num_requests"), 0);
    assert!(e.contains("warning") && e.contains("no request"), "{e}");
    // A horizon before the first arrival (the first arrives at 10 ms).
    let (r, e) = ok(&dir, &["run", run, "--horizon", "5000"]);
    assert_eq!(count(&r["cluster"], "num_requests"), 0);
    assert!(e.contains("warning") && e.contains("horizon"), "{e}");
    // Without such a mistake: no warning.
    let (_, e) = ok(&dir, &["run", run]);
    assert!(!e.contains("warning"), "{e}");
}

#[test]
fn tensor_parallelism_must_divide_the_attention_heads() {
    let dir = TestDir::new("hardening_tp");
    // qwen3-14b has 40 attention heads.
    let e = fails(&dir, 2, &["run", "--set", "model.tp=3"]);
    assert!(e.contains("tp") && e.contains("40"), "{e}");
    let o = blis(&dir, &["validate", "--set", "model.tp=4"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[cfg(unix)]
#[test]
fn endless_inputs_are_refused_with_an_error_naming_the_file() {
    // Round 4, item 14: `--trace-data /dev/zero` aborted after 2.2 GB; every
    // other reader read ~2 GB before "out of memory".
    let dir = TestDir::new("hardening_endless_inputs");
    dir.write("h.yaml", "mode: generated\n");
    let e = fails(&dir, 2, &["run", "/dev/zero"]);
    assert!(
        e.contains("/dev/zero") && e.contains("larger than 256 MiB"),
        "{e}"
    );
    let e = fails(
        &dir,
        2,
        &[
            "replay",
            "--trace-header",
            "h.yaml",
            "--trace-data",
            "/dev/zero",
        ],
    );
    assert!(
        e.contains("/dev/zero:1") && e.contains("longer than 1 MiB"),
        "{e}"
    );
    let e = fails(
        &dir,
        2,
        &[
            "replay",
            "--trace-header",
            "/dev/zero",
            "--trace-data",
            "/dev/zero",
        ],
    );
    assert!(e.contains("larger than 256 MiB"), "{e}");
    dir.write(
        "trace.toml",
        "seed = 1\n[workload]\ntrace = \"/dev/zero\"\n",
    );
    let e = fails(&dir, 2, &["run", "trace.toml"]);
    assert!(
        e.contains("/dev/zero") && e.contains("longer than 1 MiB"),
        "{e}"
    );
    dir.write(
        "cal.toml",
        "seed = 1\n[model]\ncalibration = \"/dev/zero\"\n",
    );
    let e = fails(&dir, 2, &["run", "cal.toml"]);
    assert!(
        e.contains("/dev/zero") && e.contains("larger than 256 MiB"),
        "{e}"
    );
    for (key, value) in [
        ("model.config_path", "/dev/zero"),
        ("routing.epp_config", "/dev/zero"),
    ] {
        dir.write("run.toml", BASE);
        let set = format!("{key}=\"{value}\"");
        let e = fails(&dir, 2, &["run", "run.toml", "--set", &set]);
        assert!(
            e.contains("/dev/zero") && (e.contains("256 MiB") || e.contains("1 MiB")),
            "{key}: {e}"
        );
    }
}

#[test]
fn quoted_input_is_escaped_and_cut_to_a_screen() {
    // Round 4, item 16: an error on a 1.4 MB line quoted the whole line;
    // control characters reached the terminal raw.
    let dir = TestDir::new("hardening_quoted_input");
    let long = format!("seed = 1\nx = \"{}\" y\n", "a".repeat(1_400_000));
    dir.write("long.toml", &long);
    let e = fails(&dir, 2, &["run", "long.toml"]);
    assert!(
        e.len() < 1_000 && e.contains("long.toml:2:"),
        "{} bytes",
        e.len()
    );
    dir.write(
        "esc.toml",
        "seed = 1\n[model]\nname = \"\u{1b}]0;owned\u{7}\"\n",
    );
    let e = fails(&dir, 2, &["run", "esc.toml"]);
    assert!(e.contains("\\u{1b}]0;owned\\u{7}"), "{e}");
    assert!(!e.contains('\u{1b}') && !e.contains('\u{7}'), "{e:?}");
    // A trace field quoted in an error.
    dir.write("h.yaml", "mode: generated\n");
    let head = "request_id,client_id,tenant_id,slo_class,session_id,round_index,prefix_group,prefix_length,streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,reason_ratio,model,deadline_us,server_input_tokens,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,finish_reason";
    let status = format!("\u{1b}[2J{}", "k".repeat(500_000));
    let row = format!("0,c,t,,,0,,0,true,10,5,10,0,0,0,0,,0,0,0,0,0,0,0,{status},,");
    dir.write("t.csv", &format!("{head}\n{row}\n"));
    let e = fails(
        &dir,
        2,
        &[
            "replay",
            "--trace-header",
            "h.yaml",
            "--trace-data",
            "t.csv",
        ],
    );
    assert!(
        e.contains("column status") && e.contains("\\u{1b}[2J"),
        "{e}"
    );
    assert!(e.len() < 1_000, "{} bytes", e.len());
}

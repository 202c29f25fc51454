//! inference-perf workloads end to end: the report's `stages` array equals
//! the statistics recomputed from the per-request results file, the stages
//! add up to the cluster, and bad stages are rejected with their line.

use serde_json::Value;

use crate::util::TestDir;

/// A small two-stage inference-perf run on two instances.
fn run_file(chat: bool) -> String {
    format!(
        r#"
seed = 11
[model]
latency_model = "linear"
alpha = [100.0, 0.5, 20.0]
beta = [2000.0, 5.0, 30.0]
[instance]
count = 2
[routing]
policy = "weighted"
[workload.inference_perf]
client = "reference"
stages = [{{ rate = 40.0, duration = 3 }}, {{ rate = 90.0, duration = 2 }}]
[workload.inference_perf.shared_prefix]
num_unique_system_prompts = 3
num_users_per_system_prompt = 4
system_prompt_len = 96
question_len = 150
output_len = 40
enable_multi_turn_chat = {chat}
"#
    )
}

/// `blis run` of the dir's `run.toml`: its report and per-request results.
fn run_with_results(dir: &TestDir) -> (Value, Vec<Value>) {
    let o = dir
        .blis()
        .args(["run", "run.toml", "--results-path", "r.jsonl"])
        .output()
        .expect("run blis");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let results = std::fs::read_to_string(dir.path().join("r.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (report, results)
}

/// R-7 percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

fn close(what: &str, got: &Value, want: f64) {
    let g = got
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: not a number: {got}"));
    assert!(
        (g - want).abs() <= 1e-9 * want.abs().max(1.0),
        "{what}: report {g}, recomputed {want}"
    );
}

/// Checks `<prefix>mean_ms` … `<prefix>max_ms` of a stage against `values`.
fn check_stats(stage: &Value, prefix: &str, mut values: Vec<f64>) {
    assert!(!values.is_empty(), "{prefix}: empty population in the test");
    values.sort_by(f64::total_cmp);
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    close(
        &format!("{prefix}mean_ms"),
        &stage[format!("{prefix}mean_ms")],
        mean,
    );
    for p in [50.0, 90.0, 95.0, 99.0] {
        let key = format!("{prefix}p{p}_ms");
        close(&key, &stage[&key], percentile(&values, p));
    }
    close(
        &format!("{prefix}min_ms"),
        &stage[format!("{prefix}min_ms")],
        values[0],
    );
    close(
        &format!("{prefix}max_ms"),
        &stage[format!("{prefix}max_ms")],
        values[values.len() - 1],
    );
}

#[test]
fn stage_statistics_equal_those_recomputed_from_the_results_file() {
    for chat in [false, true] {
        let dir = TestDir::new(&format!("stages_recompute_{chat}"));
        dir.write("run.toml", &run_file(chat));
        let (report, results) = run_with_results(&dir);
        let stages = report["stages"].as_array().expect("a stages array");
        assert_eq!(stages.len(), 2);
        // ⌊40 × 3⌋ + ⌊90 × 2⌋ requests (chat rounds included: nothing is capped).
        assert_eq!(results.len(), 120 + 180);
        let starts = [0u64, 3_000_000];
        let stage_of = |r: &Value| usize::from(r["arrival_us"].as_u64().unwrap() >= starts[1]);
        let mut sum_requests = 0;
        for (s, stage) in stages.iter().enumerate() {
            assert_eq!(stage["stage_index"], s);
            let mine: Vec<&Value> = results.iter().filter(|r| stage_of(r) == s).collect();
            let done: Vec<&Value> = mine
                .iter()
                .copied()
                .filter(|r| r["status"] == "completed")
                .collect();
            assert_eq!(stage["num_requests"], mine.len());
            assert_eq!(stage["completed_requests"], done.len());
            assert!(!done.is_empty());
            sum_requests += mine.len();
            let f = |r: &Value, k: &str| r[k].as_f64().unwrap();
            check_stats(
                stage,
                "ttft_",
                mine.iter()
                    .filter(|r| !r["ttft_ms"].is_null())
                    .map(|r| f(r, "ttft_ms"))
                    .collect(),
            );
            check_stats(stage, "e2e_", done.iter().map(|r| f(r, "e2e_ms")).collect());
            check_stats(
                stage,
                "scheduling_delay_",
                done.iter().map(|r| f(r, "scheduling_delay_ms")).collect(),
            );
            let out: u64 = done
                .iter()
                .map(|r| r["output_tokens"].as_u64().unwrap())
                .sum();
            assert_eq!(stage["total_output_tokens"], out);
            let (itl_sum, gaps) = done.iter().fold((0.0, 0.0), |(s, n), r| {
                let g = f(r, "output_tokens") - 1.0;
                (s + f(r, "itl_mean_ms") * g, n + g)
            });
            close("itl_mean_ms", &stage["itl_mean_ms"], itl_sum / gaps);
            let last_done_us = done
                .iter()
                .map(|r| f(r, "arrival_us") + f(r, "e2e_ms") * 1000.0)
                .fold(0.0, f64::max);
            let span_s = (last_done_us - starts[s] as f64) / 1e6;
            let got_span = stage["simulated_duration_s"].as_f64().unwrap();
            assert!((got_span - span_s).abs() < 1e-6, "{got_span} vs {span_s}");
            close(
                "responses_per_sec",
                &stage["responses_per_sec"],
                done.len() as f64 / got_span,
            );
        }
        assert_eq!(report["cluster"]["num_requests"], sum_requests);
        if !chat {
            // Without chat every stage gets exactly ⌊rate × duration⌋, inside it.
            assert_eq!(stages[0]["num_requests"], 120);
            assert_eq!(stages[1]["num_requests"], 180);
        }
    }
}

#[test]
fn reports_without_stages_have_no_stages_key() {
    let dir = TestDir::new("stages_absent");
    dir.write(
        "run.toml",
        "[workload]\naggregate_rate = 50.0\nnum_requests = 20\n",
    );
    let o = dir.blis().args(["run", "run.toml"]).output().unwrap();
    assert!(o.status.success());
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(report.get("stages").is_none(), "{report}");
}

#[test]
fn a_bad_stage_is_an_error_naming_file_and_line() {
    let dir = TestDir::new("stages_bad");
    for (stage, what) in [
        ("{ rate = 5.0, duration = 0 }", "duration"),
        ("{ rate = -1.0, duration = 10 }", "rate"),
    ] {
        let text = run_file(false).replace("{ rate = 40.0, duration = 3 }", stage);
        dir.write("bad.toml", &text);
        let o = dir.blis().args(["run", "bad.toml"]).output().unwrap();
        assert_eq!(o.status.code(), Some(2));
        assert!(o.stdout.is_empty());
        let e = String::from_utf8_lossy(&o.stderr);
        let line = text.lines().position(|l| l.starts_with("stages")).unwrap() + 1;
        assert_contains!(e, &format!("bad.toml:{line}:"));
        assert_contains!(e, &format!("a stage's {what}"));
        assert!(!e.contains("panicked"), "{e}");
    }
}

#[test]
fn convert_inference_perf_prints_a_table_that_runs() {
    let dir = TestDir::new("stages_convert");
    dir.write(
        "ip.yaml",
        "load:\n  type: constant\n  stages:\n  - {rate: 20, duration: 2}\n\
         server:\n  type: vllm\n\
         data:\n  type: shared_prefix\n  shared_prefix:\n    num_groups: 2\n    \
         num_prompts_per_group: 2\n    system_prompt_len: 32\n    question_len: 16\n    \
         output_len: 8\n    enable_multi_turn_chat: true\n",
    );
    let o = dir
        .blis()
        .args(["convert", "inference-perf", "ip.yaml"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let toml_text = String::from_utf8(o.stdout).unwrap();
    assert_contains!(toml_text, "[workload.inference_perf]");
    assert_contains!(String::from_utf8_lossy(&o.stderr), "server: not simulated");
    dir.write("run.toml", &toml_text);
    let o = dir.blis().args(["run", "run.toml"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["cluster"]["completed_requests"], 40);
    assert_eq!(report["stages"][0]["num_requests"], 40);
    dir.write(
        "bad.yaml",
        "load: {stages: [{rate: 1, duration: 0}]}\n\
         data: {type: shared_prefix, shared_prefix: {num_groups: 1, num_prompts_per_group: 1}}\n",
    );
    let o = dir
        .blis()
        .args(["convert", "inference-perf", "bad.yaml"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    assert_contains!(
        String::from_utf8_lossy(&o.stderr),
        "load.stages[0].duration"
    );
}

#[test]
fn output_windows_report_the_requests_that_arrived_in_each_window() {
    let dir = TestDir::new("stages_windows");
    let base = "[model]\nlatency_model = \"linear\"\nalpha = [100.0, 0.5, 20.0]\n\
                beta = [2000.0, 5.0, 30.0]\n[workload]\naggregate_rate = 50.0\n\
                num_requests = 200\narrival = { process = \"poisson\" }\n[output]\n";
    dir.write(
        "run.toml",
        &format!(
            "{base}windows = [{{ start_us = 0, end_us = 1000000 }}, {{ start_us = 2000000, end_us = 3000000 }}]\n"
        ),
    );
    let o = dir
        .blis()
        .args(["run", "run.toml", "--results-path", "r.jsonl"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let results: Vec<Value> = std::fs::read_to_string(dir.path().join("r.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (i, (a, b)) in [(0u64, 1_000_000u64), (2_000_000, 3_000_000)]
        .into_iter()
        .enumerate()
    {
        let n = results
            .iter()
            .filter(|r| (a..b).contains(&r["arrival_us"].as_u64().unwrap()))
            .count();
        assert!(n > 20, "window {i}: {n} requests");
        assert_eq!(report["stages"][i]["num_requests"], n);
        assert_eq!(report["stages"][i]["start_s"], a as f64 / 1e6);
    }
    dir.write(
        "bad.toml",
        &format!(
            "{base}windows = [{{ start_us = 0, end_us = 10 }}, {{ start_us = 5, end_us = 20 }}]\n"
        ),
    );
    let o = dir.blis().args(["run", "bad.toml"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_contains!(String::from_utf8_lossy(&o.stderr), "output.windows[1]");
}

/// A real inference-perf client (0.2.0: per-line timestamps) whose 0.132 s
/// timeout aborts the slow requests: the report's `client` section equals
/// what the per-request results give, every failure is a timeout, and the
/// stages are the client's (one per stage, the second after the first drained).
#[test]
fn a_real_clients_timeouts_fail_requests_and_its_metrics_are_its_own() {
    let dir = TestDir::new("stages_real_client");
    let text = run_file(false)
        .replace(
            "client = \"reference\"",
            "client = \"inference-perf 0.2.0\"\nrequest_timeout = 0.132",
        )
        .replace("output_len = 40", "output_len = 60");
    dir.write("run.toml", &text);
    let (report, results) = run_with_results(&dir);
    let c = &report["client"];
    assert_eq!(c["name"], "inference-perf 0.2.0");
    assert_eq!(c["timestamps"], "per line");
    assert_eq!(results.len(), 120 + 180);
    assert_eq!(c["requests"], results.len());
    // A success reached the client within its timeout; a request the
    // server finished in a step the timeout fell into failed for it.
    let done: Vec<&Value> = results
        .iter()
        .filter(|r| r["status"] == "completed" && r["e2e_ms"].as_f64().unwrap() <= 132.0)
        .collect();
    let failed = results.len() - done.len();
    assert!(
        failed > 0 && !done.is_empty(),
        "{failed} failed of {}",
        results.len()
    );
    assert_eq!(c["successes"], done.len());
    assert_eq!(c["failures"], failed);
    assert_eq!(c["timed_out"], failed);
    let f = |r: &Value, k: &str| r[k].as_f64().unwrap();
    assert!(results.iter().any(|r| r["status"] == "dropped"));
    let mean = |v: Vec<f64>| v.iter().sum::<f64>() / v.len() as f64;
    close(
        "request_latency_mean_ms",
        &c["request_latency_mean_ms"],
        mean(done.iter().map(|r| f(r, "e2e_ms")).collect()),
    );
    close(
        "time_to_first_token_mean_ms",
        &c["time_to_first_token_mean_ms"],
        mean(done.iter().map(|r| f(r, "ttft_ms")).collect()),
    );
    // Per line: 2K + 1 gaps between the first token and [DONE].
    let k = 60.0;
    close(
        "time_per_output_token_mean_ms",
        &c["time_per_output_token_mean_ms"],
        mean(
            done.iter()
                .map(|r| (f(r, "e2e_ms") - f(r, "ttft_ms")) / (2.0 * k + 1.0))
                .collect(),
        ),
    );
    // Stage 1 started after stage 0's last request ended: clients are stages.
    let stages = report["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 2);
    let last0 = results
        .iter()
        .filter(|r| r["client_id"] == "stage-0")
        .map(|r| f(r, "arrival_us"))
        .fold(0.0, f64::max);
    let first1 = results
        .iter()
        .filter(|r| r["client_id"] == "stage-1")
        .map(|r| f(r, "arrival_us"))
        .fold(f64::MAX, f64::min);
    // At least: stage 0's last send, then a poll, 1 s interval, 1 s lead.
    assert!(first1 >= last0 + 2e6, "{last0} → {first1}");
    assert_eq!(stages[1]["num_requests"], 180);
}

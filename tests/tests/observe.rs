//! `blis observe` end to end: against llama.cpp's OpenAI-compatible server
//! (a real engine: tokenisation, SSE streaming) when `BLIS_TEST_LLAMA_URL`
//! names one — `.ci/run` starts it (tests/llama/) — and, always, against a
//! dead port and a tiny local server slower than `--timeout` that also
//! serves vLLM-style `/metrics` counters.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use blis_host::trace_v2::{
    read_header, KvMetricsSource, TraceHeader, TraceMode, TraceReader, TraceRecord, TraceStatus,
};
use serde_json::Value;

use crate::util::{code_out_err, run_bad, TestDir};

/// The llama.cpp server's URL and model alias, or `None` (the caller
/// prints that it skipped).
fn llama() -> Option<(String, String)> {
    let url = std::env::var("BLIS_TEST_LLAMA_URL").ok()?;
    let model = std::env::var("BLIS_TEST_LLAMA_MODEL").unwrap_or_else(|_| "tiny".into());
    Some((url, model))
}

fn skip_without_llama(test: &str) -> Option<(String, String)> {
    let s = llama();
    if s.is_none() {
        eprintln!(
            "skipped {test}: BLIS_TEST_LLAMA_URL is not set (.ci/run installs and starts llama.cpp's server; see tests/llama/README.md)"
        );
    }
    s
}

fn rows(path: &Path) -> Vec<TraceRecord> {
    TraceReader::open(path)
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|r| r.unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

/// `request_id → [(chunk_index, timestamp_us)]` of an ITL CSV.
fn itl(path: &Path) -> BTreeMap<u64, Vec<(u64, i64)>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("request_id,chunk_index,timestamp_us"));
    let mut out: BTreeMap<u64, Vec<(u64, i64)>> = BTreeMap::new();
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), 3, "{l}");
        out.entry(f[0].parse().unwrap())
            .or_default()
            .push((f[1].parse().unwrap(), f[2].parse().unwrap()));
    }
    out
}

/// Run `blis observe` in `dir` with `args`; returns (exit code, stdout, stderr).
fn observe(dir: &TestDir, args: &[&str]) -> (Option<i32>, String, String) {
    let o = dir
        .blis()
        .arg("observe")
        .args(args)
        .output()
        .expect("run blis");
    code_out_err(&o)
}

/// `blis observe RUN` on the llama.cpp server: `requests` dispatched, the
/// first 4 warm-up, ITL recorded, the trace in `t.yaml` / `t.csv`.
fn observe_llama_trace(dir: &TestDir, run: &str, url: &str, model: &str, requests: u32, rate: f64) {
    let (n, rate) = (requests.to_string(), rate.to_string());
    let (code, _, stderr) = observe(
        dir,
        &[
            run,
            "--server-url",
            url,
            "--model",
            model,
            "--rate",
            &rate,
            "--num-requests",
            &n,
            "--warmup-requests",
            "4",
            "--record-itl",
            "--quiet",
            "--trace-header",
            "t.yaml",
            "--trace-data",
            "t.csv",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
}

fn header(dir: &TestDir) -> TraceHeader {
    read_header(&dir.path().join("t.yaml")).unwrap_or_else(|e| panic!("{e}"))
}

const OUT: [&str; 4] = ["--trace-header", "t.yaml", "--trace-data", "t.csv"];

#[test]
fn observe_records_the_llama_cpp_server_streaming_with_itl() {
    let Some((url, model)) = skip_without_llama("observe_records_the_llama_cpp_server") else {
        return;
    };
    let dir = TestDir::new("observe-llama-stream");
    let mut args = vec![
        "--server-url",
        &url,
        "--model",
        &model,
        "--num-requests",
        "12",
        "--rate",
        "20",
        "--prompt-tokens",
        "40",
        "--output-tokens",
        "8",
        "--set",
        "workload.prompt_tokens_stdev=0",
        "--set",
        "workload.output_tokens_stdev=0",
        "--warmup-requests",
        "2",
        "--record-itl",
        "--scrape-kv-metrics",
        "--quiet",
    ];
    args.extend(OUT);
    let (code, stdout, stderr) = observe(&dir, &args);
    assert_eq!(code, Some(0), "{stderr}");
    // llama.cpp has no /metrics: the documented fallback is no block and a warning.
    assert!(
        stderr.contains("--scrape-kv-metrics: no observed_kv_metrics"),
        "{stderr}"
    );
    let h = header(&dir);
    assert_eq!(h.mode, TraceMode::Real);
    assert_eq!(h.time_unit, "us");
    assert_eq!(h.warm_up_requests, 2);
    assert!(h.created_at.is_some());
    assert_eq!(h.server.as_ref().unwrap().model, model);
    assert!(h.observed_kv_metrics.is_none());
    let rs = rows(&dir.path().join("t.csv"));
    // Warm-up dispatches 0 and 1 are not recorded.
    let mut ids: Vec<u64> = rs.iter().map(|r| r.request_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (2..12).collect::<Vec<u64>>());
    let chunks = itl(&dir.path().join("t.itl.csv"));
    assert_eq!(chunks.len(), 10);
    for r in &rs {
        assert_eq!(r.status, TraceStatus::Ok, "{r:?}");
        assert!(r.streaming);
        let ttft = r.first_chunk_time_us - r.send_time_us;
        let e2e = r.last_chunk_time_us - r.send_time_us;
        assert!(ttft > 0 && e2e >= ttft, "{r:?}");
        assert_eq!(r.x_request_id.len(), 36);
        // min_tokens = max_tokens: the server generates the planned length;
        // without a usage chunk the tokens are the chunks before the final
        // (finish-reason) chunk.
        assert!(r.output_tokens > 0);
        assert_eq!(r.num_chunks, r.output_tokens + 1, "{r:?}");
        assert_eq!(r.finish_reason, "length");
        let c = &chunks[&r.request_id];
        assert_eq!(c.len() as u64, r.num_chunks, "ITL rows = chunks");
        assert!(c.iter().enumerate().all(|(i, &(k, _))| k == i as u64));
        assert_eq!(c[0].1, r.first_chunk_time_us);
        assert_eq!(c[c.len() - 1].1, r.last_chunk_time_us);
        assert!(c.windows(2).all(|w| w[1].1 >= w[0].1));
    }
    let s: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(s["ok"], 10);
    assert_eq!(s["completed"], 10);
    assert_eq!(s["dispatched"], 12);
    assert!(s["ttft_ms"]["mean"].as_f64().unwrap() > 0.0, "{s}");
    assert!(s["itl_ms"]["p99"].as_f64().unwrap() > 0.0, "{s}");
}

#[test]
fn observe_chat_non_streaming_and_sessions_on_the_llama_cpp_server() {
    let Some((url, model)) = skip_without_llama("observe_chat_non_streaming_and_sessions") else {
        return;
    };
    let dir = TestDir::new("observe-llama-chat");
    let run = dir.write(
        "run.toml",
        r#"seed = 7
[workload]
aggregate_rate = 100.0
num_requests = 6
[[workload.clients]]
id = "chat"
arrival = { process = "constant" }
windows = [{ start_us = 0, end_us = 25000 }]
input = { type = "constant", value = 20 }
output = { type = "constant", value = 4 }
prefix_group = "system"
prefix_length = 10
slo_class = "critical"
tenant_id = "acme"
session = { max_rounds = 3, think_time_us = 20000 }
"#,
    );
    let run = run.to_str().unwrap();
    let mut args = vec![
        run,
        "--server-url",
        &url,
        "--model",
        &model,
        "--api-format",
        "chat",
        "--no-streaming",
        "--quiet",
    ];
    args.extend(OUT);
    let (code, _stdout, stderr) = observe(&dir, &args);
    assert_eq!(code, Some(0), "{stderr}");
    let mut rs = rows(&dir.path().join("t.csv"));
    assert_eq!(rs.len(), 6);
    rs.sort_by_key(|r| (r.session_id.clone(), r.round_index));
    for r in &rs {
        assert_eq!(r.status, TraceStatus::Ok, "{r:?}");
        assert!(!r.streaming);
        assert_eq!(r.num_chunks, 1);
        // min_tokens = 4 holds (this server's chat usage may count a few
        // tokens past max_tokens).
        assert!(r.output_tokens >= 4, "{r:?}");
        assert!(r.server_input_tokens > 0);
        assert_eq!((r.slo_class.as_str(), r.vllm_priority), ("critical", 0));
        assert_eq!(
            (r.tenant_id.as_str(), r.client_id.as_str()),
            ("acme", "chat")
        );
        assert_eq!((r.prefix_group.as_str(), r.prefix_length), ("system", 10));
        assert!(!r.session_id.is_empty());
    }
    // Two sessions of three rounds: later rounds carry the earlier context
    // (longer prompts at the server) and a recorded think time ≥ 20 ms.
    let mut sessions: BTreeMap<&str, Vec<&TraceRecord>> = BTreeMap::new();
    for r in &rs {
        sessions.entry(&r.session_id).or_default().push(r);
    }
    assert_eq!(sessions.len(), 2);
    for rounds in sessions.values() {
        let k: Vec<u64> = rounds.iter().map(|r| r.round_index).collect();
        assert_eq!(k, [0, 1, 2]);
        for w in rounds.windows(2) {
            assert!(w[1].server_input_tokens > w[0].server_input_tokens);
            assert!(w[1].think_time_us >= 20_000, "{:?}", w[1]);
            assert!(w[1].send_time_us >= w[0].last_chunk_time_us);
        }
    }
}

#[test]
fn observe_of_a_dead_port_records_error_rows_and_a_summary() {
    let dir = TestDir::new("observe-dead-port");
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let mut args = vec![
        "--server-url",
        &url,
        "--model",
        "m",
        "--num-requests",
        "4",
        "--rate",
        "200",
        "--prompt-tokens",
        "8",
        "--quiet",
        "--record-itl",
    ];
    args.extend(OUT);
    let (code, stdout, stderr) = observe(&dir, &args);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("calibration request"), "{stderr}");
    let rs = rows(&dir.path().join("t.csv"));
    assert_eq!(rs.len(), 4);
    for r in &rs {
        assert_eq!(r.status, TraceStatus::Error, "{r:?}");
        assert!(!r.error_message.is_empty());
        assert_eq!((r.num_chunks, r.first_chunk_time_us), (0, 0));
        assert!(r.send_time_us > 0);
    }
    // No ok request: the ITL CSV has its header only.
    assert!(itl(&dir.path().join("t.itl.csv")).is_empty());
    let s: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((s["ok"].as_u64(), s["error"].as_u64()), (Some(0), Some(4)));
    assert_eq!(s["completed"], 0);
    assert!(s["ttft_ms"].is_null());
}

/// A local server, bounded in time, that answers `GET /metrics` with vLLM
/// prefix-cache counters (10/20, then 25/50 on later scrapes) and holds
/// every other request `hold` without answering.
fn slow_server(hold: Duration) -> (String, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    l.set_nonblocking(true).unwrap();
    let h = std::thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(30);
        let mut scrapes = 0;
        let mut held: Vec<std::thread::JoinHandle<()>> = Vec::new();
        // Until the last scrape after the probe and the three requests (a retried scrape
        // must not end the server before the requests come).
        while Instant::now() < end && held.len() < 16 && (scrapes < 2 || held.len() < 4) {
            let mut s: TcpStream = match l.accept() {
                Ok((s, _)) => s,
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
            };
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            if buf[..n].starts_with(b"GET /metrics") {
                let (h, q) = if scrapes == 0 { (10, 20) } else { (25, 50) };
                scrapes += 1;
                let body = format!(
                    "# TYPE vllm:gpu_prefix_cache_hits counter\nvllm:gpu_prefix_cache_hits_total{{model_name=\"m\"}} {h}\nvllm:gpu_prefix_cache_queries_total{{model_name=\"m\"}} {q}\n"
                );
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                continue;
            }
            held.push(std::thread::spawn(move || {
                std::thread::sleep(hold);
                drop(s);
            }));
        }
        for t in held {
            let _ = t.join();
        }
    });
    (url, h)
}

#[test]
fn observe_of_a_server_slower_than_the_timeout_records_timeout_rows() {
    let dir = TestDir::new("observe-timeout");
    let (url, server) = slow_server(Duration::from_secs(3));
    let mut args = vec![
        "--server-url",
        &url,
        "--model",
        "m",
        "--num-requests",
        "3",
        "--rate",
        "100",
        "--timeout",
        "0.4",
        "--scrape-kv-metrics",
        "--vllm-commit",
        "abc123",
        "--quiet",
    ];
    args.extend(OUT);
    let (code, stdout, stderr) = observe(&dir, &args);
    assert_eq!(code, Some(0), "{stderr}");
    let rs = rows(&dir.path().join("t.csv"));
    assert_eq!(rs.len(), 3);
    for r in &rs {
        assert_eq!(r.status, TraceStatus::Timeout, "{r:?}");
        assert!(!r.error_message.is_empty());
    }
    let s: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(s["timeout"], 3);
    // The vLLM counters moved by 15 hits over 30 queries.
    let kv = header(&dir)
        .observed_kv_metrics
        .expect("observed_kv_metrics");
    assert_eq!(kv.source, KvMetricsSource::GpuPrefixCacheFallback);
    assert_eq!(
        (kv.block_hits, kv.block_queries, kv.hit_rate),
        (15.0, 30.0, 0.5)
    );
    assert_eq!(kv.vllm_commit.as_deref(), Some("abc123"));
    server.join().unwrap();
}

#[test]
fn observe_refuses_bad_input() {
    let dir = TestDir::new("observe-bad");
    let run = dir.write("run.toml", "[workload]\nnum_requests = 3\n");
    let e = run_bad(
        &dir,
        &[
            "observe",
            "--server-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--think-time-ms",
            "5",
            "--trace-header",
            "t.yaml",
            "--trace-data",
            "t.csv",
        ],
    );
    assert!(
        e.contains("--think-time-ms") && e.contains("--concurrency"),
        "{e}"
    );
    let e = run_bad(
        &dir,
        &[
            "observe",
            "--server-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--timeout",
            "0",
            "--trace-header",
            "t.yaml",
            "--trace-data",
            "t.csv",
        ],
    );
    assert!(e.contains("--timeout"), "{e}");
    let e = run_bad(
        &dir,
        &[
            "observe",
            run.to_str().unwrap(),
            "--server-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--trace-header",
            "t.yaml",
            "--trace-data",
            "run.toml",
        ],
    );
    assert!(
        e.contains("--trace-data") && e.contains("the run file"),
        "{e}"
    );
    let e = run_bad(
        &dir,
        &[
            "observe",
            "--server-url",
            "127.0.0.1:9",
            "--model",
            "m",
            "--trace-header",
            "t.yaml",
            "--trace-data",
            "t.csv",
        ],
    );
    assert!(e.contains("http://"), "{e}");
    // Durations past a day and round-trip times that are not one (issue 53,
    // items 4 and 11: 1e20 s panicked, NaN was recorded): a clear error
    // with the number in short form.
    for (flag, value, says) in [
        ("--timeout", "1e20", "--timeout 1e20"),
        ("--drain-timeout", "1e30", "--drain-timeout 1e30"),
        ("--prewarm-duration", "1e30", "--prewarm-duration 1e30"),
        ("--rtt-ms", "nan", "--rtt-ms NaN"),
        ("--rtt-ms=-5", "", "--rtt-ms -5"),
        ("--rtt-ms", "inf", "--rtt-ms inf"),
        ("--rtt-ms", "1e300", "--rtt-ms 1e300"),
    ] {
        let mut args = vec![
            "observe",
            "--server-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            flag,
        ];
        if !value.is_empty() {
            args.push(value);
        }
        args.extend(["--trace-header", "t.yaml", "--trace-data", "t.csv"]);
        let e = run_bad(&dir, &args);
        assert!(e.contains(says) && e.len() < 400, "{flag} {value}: {e}");
    }
    // Nothing was sent, nothing written.
    assert!(!dir.path().join("t.csv").exists());
}

/// A TraceV2 header whose measured round-trip time is not a number of ms
/// is refused by name wherever it is read (issue 53, item 11: `calibrate
/// fit` went on with `mape = nan`).
#[test]
fn a_header_with_a_nan_round_trip_time_is_refused() {
    let dir = TestDir::new("observe-nan-rtt");
    for rtt in [".nan", "-5", ".inf", "1e300"] {
        let text = format!("trace_version: 2\nmode: real\nnetwork:\n  measured_rtt_ms: {rtt}\n");
        let e = blis_host::trace_v2::parse_header(&text, "h.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("network.measured_rtt_ms") && e.contains("h.yaml"),
            "{rtt}: {e}"
        );
    }
    let ok = "trace_version: 2\nmode: real\nnetwork:\n  measured_rtt_ms: 1.5\n";
    blis_host::trace_v2::parse_header(ok, "h.yaml").unwrap();
    let _ = dir;
}

#[test]
fn the_example_run_file_is_valid() {
    let dir = TestDir::new("observe-example-valid");
    let run = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/observe-replay-calibrate/llama-cpp.toml");
    let o = dir
        .blis()
        .arg("validate")
        .arg(&run)
        .output()
        .expect("run blis");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// observe → replay → calibrate end to end on the real server (README
/// "Validating blis against your own cluster", the steps of
/// `examples/observe-replay-calibrate/run.sh`): every recorded request is
/// matched to a simulated one with its recorded token counts, and the
/// report's figures are finite and counted over those pairs.
#[test]
fn observe_then_replay_then_calibrate_on_the_llama_cpp_server() {
    let Some((url, model)) = skip_without_llama("observe_then_replay_then_calibrate") else {
        return;
    };
    let dir = TestDir::new("observe-replay-calibrate");
    let run = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/observe-replay-calibrate/llama-cpp.toml");
    let run = run.to_str().unwrap();
    observe_llama_trace(&dir, run, &url, &model, 16, 4.0);
    let rs = rows(&dir.path().join("t.csv"));
    assert_eq!(rs.len(), 12, "16 dispatched, 4 warm-up");
    let ok = rs.iter().filter(|r| r.status == TraceStatus::Ok).count();
    assert!(ok >= 10, "{rs:?}");
    let step = |args: &[&str]| {
        let o = dir.blis().args(args).output().expect("run blis");
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "blis {args:?}: {err}");
        serde_json::from_slice::<Value>(&o.stdout).unwrap_or_else(|e| panic!("{e}: {err}"))
    };
    let replay = step(&[
        "replay",
        run,
        "--trace-header",
        "t.yaml",
        "--trace-data",
        "t.csv",
        "--results-path",
        "sim.json",
        "--quiet",
    ]);
    assert_eq!(
        replay["cluster"]["completed_requests"], ok as u64,
        "{replay}"
    );
    let cal = step(&[
        "calibrate",
        "--trace-header",
        "t.yaml",
        "--trace-data",
        "t.csv",
        "--sim-results",
        "sim.json",
        "--itl-data",
        "t.itl.csv",
        "--report",
        "cal.json",
    ]);
    eprintln!("calibration report: {cal}");
    // observe does not record its warm-up requests: calibrate has none to exclude.
    assert_eq!(cal["trace_info"]["warm_up_excluded"], 0, "{cal}");
    assert_eq!(cal["trace_info"]["num_requests"], rs.len() as u64, "{cal}");
    assert_eq!(cal["trace_info"]["matched_pairs"], ok as u64, "{cal}");
    assert_eq!(cal["trace_info"]["token_mismatches"], 0, "{cal}");
    for m in ["ttft", "e2e", "itl"] {
        let rl = &cal["metrics"][m]["request_level"];
        let mape = rl["mape"].as_f64().unwrap_or_else(|| panic!("{m}: {cal}"));
        assert!(mape.is_finite() && mape >= 0.0, "{m}: {cal}");
        let r = rl["pearson_r"].as_f64().unwrap();
        assert!((-1.0..=1.0).contains(&r), "{m}: {cal}");
    }
    assert_eq!(cal["metrics"]["ttft"]["count"], ok as u64, "{cal}");
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("cal.json")).unwrap())
            .unwrap();
    assert_eq!(file, cal, "stdout is the report written");
}

/// Issue "fidelity on unseen deployments", server overhead: a fit on a real
/// server's observed trace predicts held-out traffic. `blis observe`
/// records 1,600 requests on the llama.cpp server at a rate set from the
/// server's own speed: a third of what it serves one request at a time
/// (40 requests at 2/s first; their mean E2E `s`, the rate `0.35 / s`).
/// Its capacity under load is well below `1 / s` (HTTP, tokenisation and
/// the client share two cores: on one machine `1 / s` ≈ 33/s and 30/s
/// saturated it) and differs between machines and days (mean TTFT at 20/s
/// 10 ms on one, 29 ms on another); near saturation the queue, and so
/// each half's mean TTFT, swings with the service time a step-time model
/// does not carry (a check machine at a fixed 20/s: the fit matched E2E,
/// missed ITL by 92 % and the held-out mean TTFT by 24 %). Its TTFT has
/// scheduling spikes — σ ≈ the mean — so two halves of 240 requests
/// differ in mean TTFT by 8 % (median) to 24 % (p95) from sampling alone,
/// of 720 by 5 % to 17 % (p99); 1,600 keep that noise well inside the
/// bound. `blis calibrate fit
/// --trace` fits the run file's linear model with the server's per-request
/// overheads, which the run file leaves at 0 (`alpha[0]`: before the first
/// token — HTTP, tokenisation, scheduling; `alpha[2]`: per token), started
/// inside the ranges given; `--holdout 2` predicts each half of the
/// requests by a fit on the other. The held-out means of TTFT and E2E must
/// be within 15 % (the figures are printed; the book quotes them). Timing
/// of a real CPU server: run alone.
#[test]
#[ignore = "timing-sensitive, needs llama.cpp's server: .ci/run runs it alone (--ignored --test-threads 1)"]
fn a_fit_on_an_observed_llama_cpp_trace_predicts_held_out_ttft_and_e2e() {
    let Some((url, model)) = skip_without_llama("a_fit_on_an_observed_llama_cpp_trace") else {
        return;
    };
    let run = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/observe-replay-calibrate/llama-cpp.toml");
    let run = run.to_str().unwrap();
    let probe = TestDir::new("observe-fit-probe");
    observe_llama_trace(&probe, run, &url, &model, 44, 2.0);
    let e2e: Vec<f64> = rows(&probe.path().join("t.csv"))
        .iter()
        .filter(|r| r.status == TraceStatus::Ok)
        .map(|r| (r.last_chunk_time_us - r.send_time_us) as f64 / 1e6)
        .collect();
    assert!(e2e.len() >= 30, "{} of 40 probe requests ok", e2e.len());
    let s = e2e.iter().sum::<f64>() / e2e.len() as f64;
    let rate = (0.35 / s).clamp(1.0, 40.0);
    eprintln!(
        "llama.cpp server: mean E2E {:.2} ms one request at a time; observing at {rate:.2}/s",
        s * 1e3
    );
    let dir = TestDir::new("observe-fit-holdout");
    observe_llama_trace(&dir, run, &url, &model, 1604, rate);
    let trace = format!("{run}=t.yaml,t.csv");
    let o = dir
        .blis()
        .args([
            "calibrate",
            "fit",
            "--trace",
            &trace,
            "--fit",
            "alpha[0],alpha[2],beta[0],beta[1]",
            "--bounds",
            "alpha[0]=100:100000",
            "--bounds",
            "alpha[2]=1:10000",
            "--holdout",
            "2",
            "--out",
            "p.toml",
        ])
        .output()
        .expect("run blis");
    let (code, out, err) = code_out_err(&o);
    assert_eq!(code, Some(0), "{err}");
    // The fit's stages, for a failure's message.
    eprintln!("{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    let profile: toml::Table = std::fs::read_to_string(dir.path().join("p.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let per_metric = &profile["error"]["per_metric"];
    let held = |m: &str| per_metric[m]["heldout_mape"].as_float().unwrap();
    eprintln!(
        "llama.cpp trace, fit {summary}: held-out mean TTFT {:.2} %, mean E2E {:.2} %, mean ITL {:.2} %; \
         per request (MAPE) TTFT {:.2} %, E2E {:.2} %, ITL {:.2} %",
        held("trace_ttft_mean_ms"),
        held("trace_e2e_mean_ms"),
        held("trace_itl_mean_ms"),
        held("request_ttft_ms"),
        held("request_e2e_ms"),
        held("request_itl_ms"),
    );
    // The overhead before the first token was fitted (the run file has 0).
    assert!(
        summary["fitted"]["alpha[0]"].as_f64().unwrap() > 100.0,
        "{summary}"
    );
    assert!(held("trace_ttft_mean_ms") <= 15.0, "{summary}");
    assert!(held("trace_e2e_mean_ms") <= 15.0, "{summary}");
}

//! `blis serve` end to end: the real binary's servers on loopback, spoken
//! to over plain HTTP/1.1 — completions streamed and not, chat, models,
//! health, metrics, vLLM's error answers — and `blis observe` driving the
//! gateway, compared with `blis run` of the same run file and workload.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::TestDir;

/// A small fleet: 2 instances, a context limit of 512 tokens.
const RUN: &str = r#"
seed = 11
[model]
name = "qwen3-14b"
hardware = "H100"
[instance]
count = 2
max_model_len = 512
[workload]
aggregate_rate = 20.0
num_requests = 100
[[workload.clients]]
id = "c"
input = { type = "constant", value = 64 }
output = { type = "constant", value = 8 }
[routing]
policy = "least-loaded"
"#;

/// A running `blis serve` and the addresses it printed.
pub(crate) struct Served {
    child: Child,
    pub(crate) instances: Vec<String>,
    pub(crate) gateway: Option<String>,
    stderr: BufReader<std::process::ChildStderr>,
}

/// A test that fails before [`Served::stop`] leaves no server running.
impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    pub(crate) fn start(dir: &TestDir, run: &str, extra: &[&str]) -> Served {
        let mut child = dir
            .blis()
            .args(["serve", run, "--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let (mut instances, mut gateway) = (Vec::new(), None);
        let mut line = String::new();
        let end = Instant::now() + Duration::from_secs(60);
        while Instant::now() < end {
            line.clear();
            if stderr.read_line(&mut line).unwrap() == 0 {
                panic!("blis serve ended before it was ready");
            }
            if let Some(rest) = line.trim().strip_prefix("serve: ") {
                if let Some((name, url)) = rest.split_once(" at ") {
                    let addr = url.trim_start_matches("http://").to_string();
                    if name == "gateway" {
                        gateway = Some(addr);
                    } else {
                        instances.push(addr);
                    }
                }
                if rest.starts_with("ready") {
                    break;
                }
            }
        }
        Served {
            child,
            instances,
            gateway,
            stderr,
        }
    }

    /// Ctrl-C; the report and the rest of stderr.
    pub(crate) fn stop(&mut self) -> (Option<i32>, Value, String) {
        let s = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(s.success());
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let mut err = String::new();
        self.stderr.read_to_string(&mut err).unwrap();
        let code = self.child.wait().unwrap().code();
        let report = serde_json::from_str(&out).unwrap_or(Value::Null);
        (code, report, err)
    }
}

/// One HTTP/1.1 exchange (Connection: close): status and body; status 0
/// when the server closed the connection without an answer.
pub(crate) fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    try_http(addr, method, path, body).unwrap_or_else(|| panic!("nothing listens at {addr}"))
}

/// [`http`], or `None` when nothing listens at `addr`.
pub(crate) fn try_http(addr: &str, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let sent = write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut bytes = Vec::new();
    if sent.is_err() || s.read_to_end(&mut bytes).is_err() && bytes.is_empty() {
        return Some((0, String::new()));
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Some((
        status,
        if chunked {
            dechunk(rest)
        } else {
            rest.to_string()
        },
    ))
}

/// The body of a chunked transfer.
fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

#[test]
fn the_servers_answer_as_vllm_does() {
    let dir = TestDir::new("serve-api");
    dir.write("run.toml", RUN);
    let mut srv = Served::start(&dir, "run.toml", &["--gateway", "0", "--speed", "20"]);
    assert_eq!(srv.instances.len(), 2);
    let i0 = srv.instances[0].clone();
    // A whole answer: as many tokens as asked, the prompt's words counted.
    let (code, body) = http(
        &i0,
        "POST",
        "/v1/completions",
        r#"{"model": "qwen3-14b", "prompt": "the sky is blue today", "max_tokens": 5, "ignore_eos": true, "unknown_field": 1}"#,
    );
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["usage"]["prompt_tokens"], 5);
    assert_eq!(v["usage"]["completion_tokens"], 5);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    // Streamed, with usage in the last chunk.
    let (code, body) = http(
        &srv.gateway.clone().unwrap(),
        "POST",
        "/v1/chat/completions",
        r#"{"model": "qwen3-14b", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}}"#,
    );
    assert_eq!(code, 200, "{body}");
    let data: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{body}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let tokens = chunks
        .iter()
        .filter(|c| c["choices"][0]["finish_reason"].is_null() && !c["choices"][0].is_null())
        .count();
    assert_eq!(tokens, 4, "{body}");
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 4);
    assert_eq!(chunks.last().unwrap()["usage"]["prompt_tokens"], 2);
    // vLLM's errors.
    let (code, body) = http(&i0, "POST", "/v1/completions", "{not json");
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["object"],
        "error"
    );
    let (code, body) = http(
        &i0,
        "POST",
        "/v1/completions",
        r#"{"model": "no-such-model", "prompt": "x"}"#,
    );
    assert_eq!(code, 404, "{body}");
    assert!(
        body.contains("The model `no-such-model` does not exist."),
        "{body}"
    );
    let long = "w ".repeat(600);
    let (code, body) = http(
        &i0,
        "POST",
        "/v1/completions",
        &format!(r#"{{"model": "qwen3-14b", "prompt": "{long}", "max_tokens": 10}}"#),
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("maximum context length is 512 tokens"),
        "{body}"
    );
    // Models, health, metrics.
    let (code, body) = http(&i0, "GET", "/v1/models", "");
    assert_eq!(code, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["data"][0]["id"],
        "qwen3-14b"
    );
    assert_eq!(http(&i0, "GET", "/health", "").0, 200);
    let (code, body) = http(&i0, "GET", "/metrics", "");
    assert_eq!(code, 200);
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        // Both requests ran on instance 0 (least-loaded breaks ties to the
        // lowest index): 5 + 2 prompt tokens, 5 + 4 output tokens.
        "vllm:request_success_total{model_name=\"qwen3-14b\"} 2\n",
        "vllm:prompt_tokens_total{model_name=\"qwen3-14b\"} 7\n",
        "vllm:generation_tokens_total{model_name=\"qwen3-14b\"} 9\n",
        "vllm:time_to_first_token_seconds_count{model_name=\"qwen3-14b\"} 2\n",
        "vllm:e2e_request_latency_seconds_count{model_name=\"qwen3-14b\"} 2\n",
        // 4 + 3 gaps between tokens.
        "vllm:inter_token_latency_seconds_count{model_name=\"qwen3-14b\"} 7\n",
        "vllm:request_queue_time_seconds_count{model_name=\"qwen3-14b\"} 2\n",
    ] {
        assert!(body.contains(name), "{name} in\n{body}");
    }
    let (code, report, err) = srv.stop();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(report["cluster"]["completed_requests"], 2, "{report}");
    assert!(
        report["serve"]["tokens_delivered"].as_u64() >= Some(9),
        "{report}"
    );
}

/// 4 instances, 2,000 requests at 50/s with 2,048-token prompts on average:
/// full batches (TTFT ~70 ms, so the HTTP hops, about a millisecond, are
/// not what is measured; E2E ~2.7 s, about 135 requests in flight).
pub(crate) const CLOSED_LOOP: &str = r#"
seed = 5
[model]
name = "qwen3-14b"
hardware = "H100"
[instance]
count = 4
[workload]
aggregate_rate = 50.0
num_requests = 2000
[[workload.clients]]
id = "c"
input = { type = "gaussian", mean = 2048, std_dev = 512, min = 256, max = 4096 }
output = { type = "gaussian", mean = 128, std_dev = 32, min = 16, max = 256 }
[routing]
policy = "least-loaded"
"#;

#[test]
#[ignore = "timing-sensitive: .ci/run runs it alone (cargo test --workspace -- --ignored --test-threads 1)"]
fn observe_through_the_gateway_reproduces_blis_run() {
    // Issue 50, must-show 1: `blis observe` driving `blis serve` (real time)
    // with the run file's workload measures what `blis run` simulates:
    // TTFT, ITL and E2E means within 5 %, p99 within 10 %.
    let dir = TestDir::new("serve-closed-loop");
    dir.write("run.toml", CLOSED_LOOP);
    let run = blis_run(&dir);
    let mut srv = Served::start(&dir, "run.toml", &["--gateway", "0", "--speed", "1"]);
    let seen = observe(&dir, &format!("http://{}", srv.gateway.clone().unwrap()));
    let (code, report, err) = srv.stop();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(seen["ok"], 2000, "{seen}");
    let table = observed_matches_run(&run, &seen);
    eprintln!("{table}");
    // Tokens reached the streams on time.
    let late = report["serve"]["delivery_lateness_ms"]["p99"]
        .as_f64()
        .unwrap();
    assert!(
        late <= 2.0,
        "token delivery p99 {late} ms late: {}",
        report["serve"]
    );
}

/// `blis run` of the test dir's `run.toml`: its report.
pub(crate) fn blis_run(dir: &TestDir) -> Value {
    let out = dir
        .blis()
        .args(["run", "run.toml", "--quiet"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `blis observe` of the run file's workload against `url`: its report.
pub(crate) fn observe(dir: &TestDir, url: &str) -> Value {
    let o = dir
        .blis()
        .args([
            "observe",
            "run.toml",
            "--server-url",
            url,
            "--model",
            "qwen3-14b",
            "--trace-header",
            "t.yaml",
            "--trace-data",
            "t.csv",
            "--record-itl",
            // No cap near the requests in flight (observe's default is 256:
            // a heavier load would be held back by it).
            "--max-concurrency",
            "1000",
            "--quiet",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// What `blis observe` measured (`seen`, its report) against `blis run`'s
/// report of the same run file (`run`): TTFT, ITL and E2E means within 5 %,
/// p99 within 10 % (issue 50's tolerances). The table of figures.
pub(crate) fn observed_matches_run(run: &Value, seen: &Value) -> String {
    let c = &run["cluster"];
    let mut rows = Vec::new();
    for (metric, key) in [("ttft", "ttft_ms"), ("e2e", "e2e_ms"), ("itl", "itl_ms")] {
        for stat in ["mean", "p99"] {
            rows.push((
                format!("{metric} {stat}"),
                c[format!("{metric}_{stat}_ms")].as_f64().unwrap(),
                seen[key][stat].as_f64().unwrap(),
            ));
        }
    }
    within_tolerances(&rows)
}

/// Rows of (what, blis run's figure, the measured figure): a mean within
/// 5 %, a p99 within 10 %; panics with the whole table otherwise.
pub(crate) fn within_tolerances(rows: &[(String, f64, f64)]) -> String {
    let mut table = String::new();
    let mut bad = Vec::new();
    for (what, want, got) in rows {
        let tol = if what.contains("p99") { 0.10 } else { 0.05 };
        let err = (got - want) / want;
        table.push_str(&format!(
            "{what}: run {want:.2} ms, measured {got:.2} ms ({:+.2} %)\n",
            err * 100.0
        ));
        if err.is_nan() || err.abs() > tol {
            bad.push(format!("{what} off by more than {} %", tol * 100.0));
        }
    }
    assert!(bad.is_empty(), "{}:\n{table}", bad.join(", "));
    table
}

#[test]
fn lora_adapters_load_and_unload_as_on_vllm() {
    let dir = TestDir::new("serve-lora");
    let run = format!(
        "{}adapter = \"fin\"\n[lora]\nadapter_capacity = 2\n[[lora.adapters]]\nid = \"fin\"\nrank = 8\n",
        RUN.replace("[routing]\npolicy = \"least-loaded\"\n", "")
    );
    dir.write("run.toml", &run);
    let mut srv = Served::start(&dir, "run.toml", &["--speed", "20"]);
    let i0 = srv.instances[0].clone();
    let ask = |model: &str| {
        http(
            &i0,
            "POST",
            "/v1/completions",
            &format!(r#"{{"model": "{model}", "prompt": "a b c", "max_tokens": 3}}"#),
        )
    };
    assert_eq!(ask("fin").0, 200);
    let (_, models) = http(&i0, "GET", "/v1/models", "");
    assert!(models.contains("\"fin\""), "{models}");
    let unload = |name: &str| {
        http(
            &i0,
            "POST",
            "/v1/unload_lora_adapter",
            &format!(r#"{{"lora_name": "{name}"}}"#),
        )
    };
    let load = |name: &str| {
        http(
            &i0,
            "POST",
            "/v1/load_lora_adapter",
            &format!(r#"{{"lora_name": "{name}", "lora_path": "/models/{name}"}}"#),
        )
    };
    assert_eq!(unload("fin").0, 200);
    let (code, body) = ask("fin");
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("The model `fin` does not exist."), "{body}");
    let (code, body) = unload("fin");
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("cannot be found"), "{body}");
    assert_eq!(load("fin").0, 200);
    let (code, body) = load("fin");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("has already been loaded"), "{body}");
    assert_eq!(load("other").0, 400);
    assert_eq!(ask("fin").0, 200);
    // The other instance never unloaded it.
    let (code, _) = http(
        &srv.instances[1],
        "POST",
        "/v1/completions",
        r#"{"model": "fin", "prompt": "x", "max_tokens": 2}"#,
    );
    assert_eq!(code, 200);
    // While a request of the adapter runs, /metrics says so as vLLM does.
    let mut s = TcpStream::connect(&i0).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = r#"{"model": "fin", "prompt": "a b c", "max_tokens": 400, "stream": true}"#;
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // Its first token: it runs.
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("\"text\"") {
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended");
        seen.extend_from_slice(&buf[..n]);
    }
    let (_, metrics) = http(&i0, "GET", "/metrics", "");
    assert!(
        metrics.contains(
            "vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"fin\",waiting_lora_adapters=\"\"}"
        ),
        "{metrics}"
    );
    drop(s);
    let (code, report, err) = srv.stop();
    assert_eq!(code, Some(0), "{err}");
    // The adapter ran in the simulation: the report counts its requests.
    assert_eq!(
        report["adapters"]["fin"]["completed_requests"], 3,
        "{}",
        report["adapters"]
    );
}

#[test]
fn a_full_server_answers_503_and_a_vanished_client_is_counted() {
    let dir = TestDir::new("serve-bounds");
    dir.write("run.toml", RUN);
    let mut srv = Served::start(&dir, "run.toml", &["--speed", "1", "--max-requests", "1"]);
    let i0 = srv.instances[0].clone();
    // A long stream: read its first token, then keep the connection open.
    let mut s = TcpStream::connect(&i0).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = r#"{"model": "qwen3-14b", "prompt": "a b c", "max_tokens": 400, "stream": true}"#;
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut first = [0u8; 256];
    let n = s.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    // The servers hold one request: the next is refused, as documented.
    let (code, body) = http(
        &srv.instances[1],
        "POST",
        "/v1/completions",
        r#"{"model": "qwen3-14b", "prompt": "x", "max_tokens": 2}"#,
    );
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("--max-requests"), "{body}");
    // The client goes away mid-stream; the server takes requests again.
    drop(s);
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, _) = http(
            &srv.instances[1],
            "POST",
            "/v1/completions",
            r#"{"model": "qwen3-14b", "prompt": "x", "max_tokens": 2}"#,
        );
        if code == 200 {
            break;
        }
        assert!(Instant::now() < end, "still refused after the client left");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A client that sends a whole (not streamed) request and leaves
    // before its answer: cancelled too.
    let mut s = TcpStream::connect(&i0).unwrap();
    let body = r#"{"model": "qwen3-14b", "prompt": "a b c", "max_tokens": 400}"#;
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(s);
    std::thread::sleep(Duration::from_millis(300));
    let (code, report, err) = srv.stop();
    assert_eq!(code, Some(0), "{err}");
    let serve = &report["serve"];
    assert_eq!(serve["disconnected_streams"], 2, "{serve}");
    assert!(serve["refused_full"].as_u64() >= Some(1));
    // Both left the simulation when their clients did (400 tokens take
    // seconds): cancelled, not completed, their KV released.
    assert_eq!(serve["cancelled_requests"], 2, "{serve}");
    assert_eq!(report["cluster"]["completed_requests"], 1, "{report}");
}

#[test]
fn connections_past_the_cap_are_answered_503_and_closed() {
    let dir = TestDir::new("serve-connections");
    dir.write("run.toml", RUN);
    for (flag, value) in [("--max-connections", "0"), ("--max-requests", "0")] {
        let err = crate::util::run_bad(&dir, &["serve", "run.toml", flag, value]);
        assert!(err.contains(&format!("{flag} 0: give")), "{err}");
    }
    // --metrics-log never writes over the run file.
    let err = crate::util::run_bad(&dir, &["serve", "run.toml", "--metrics-log", "run.toml"]);
    assert!(err.contains("--metrics-log"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("run.toml")).unwrap(),
        RUN
    );
    let mut srv = Served::start(
        &dir,
        "run.toml",
        &["--speed", "20", "--max-connections", "2"],
    );
    let (a, b) = (&srv.instances[0], &srv.instances[1]);
    // Two idle connections hold the cap (on two ports: the cap is shared).
    let held = [
        TcpStream::connect(a).unwrap(),
        TcpStream::connect(b).unwrap(),
    ];
    std::thread::sleep(Duration::from_millis(200));
    let (code, body) = http(a, "GET", "/health", "");
    assert_eq!(code, 503, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["object"], "error");
    assert!(body.contains("--max-connections"), "{body}");
    // One closes: the next connection is served.
    drop(held);
    let end = Instant::now() + Duration::from_secs(10);
    while http(a, "GET", "/health", "").0 != 200 {
        assert!(
            Instant::now() < end,
            "still refused after the connections closed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, body) = http(
        a,
        "POST",
        "/v1/completions",
        r#"{"model": "qwen3-14b", "prompt": "x y", "max_tokens": 3}"#,
    );
    assert_eq!(code, 200, "{body}");
    let (code, report, err) = srv.stop();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        report["serve"]["refused_connections"].as_u64() >= Some(1),
        "{}",
        report["serve"]
    );
    assert_eq!(report["cluster"]["completed_requests"], 1);
}

/// The fleet of [`RUN`] without its context limit, with faults: instance
/// 0 answers half its requests 503 for the first 30 simulated seconds and
/// is 4× slower from 50 s on; instance 1 is down from 30 s to 50 s.
const FAULTS: &str = r#"
[[serve.faults]]
instance = 0
kind = "errors"
rate = 0.5
until_s = 30
[[serve.faults]]
instance = 1
kind = "down"
at_s = 30
until_s = 50
[[serve.faults]]
instance = 0
kind = "slow"
factor = 4
at_s = 50
"#;

/// Wall seconds a completion of `tokens` tokens takes on `addr`.
fn timed(addr: &str, tokens: u32) -> f64 {
    let t = Instant::now();
    let (code, body) = http(
        addr,
        "POST",
        "/v1/completions",
        &format!(r#"{{"model": "qwen3-14b", "prompt": "a b", "max_tokens": {tokens}}}"#),
    );
    assert_eq!(code, 200, "{body}");
    t.elapsed().as_secs_f64()
}

#[test]
fn injected_faults_fail_cut_and_slow_their_instances() {
    let dir = TestDir::new("serve-faults");
    dir.write(
        "run.toml",
        &format!("{}{FAULTS}", RUN.replace("max_model_len = 512\n", "")),
    );
    // `blis run` accepts the section and says it injects nothing.
    let out = crate::util::run_ok(&dir, &["run", "run.toml"]);
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("[[serve.faults]] are injected by blis serve only"));
    let mut srv = Served::start(&dir, "run.toml", &["--speed", "10"]);
    let (i0, i1) = (srv.instances[0].clone(), srv.instances[1].clone());
    // A long stream on instance 1 (4,000 tokens: about 48 simulated s),
    // read until its connection ends.
    let addr = i1.clone();
    let long = std::thread::spawn(move || {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let body =
            r#"{"model": "qwen3-14b", "prompt": "a b c", "max_tokens": 4000, "stream": true}"#;
        write!(
            s,
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut bytes = Vec::new();
        let _ = s.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    });
    // `errors`: about half of instance 0's requests are answered 503.
    let mut failed = 0;
    for _ in 0..20 {
        let (code, body) = http(
            &i0,
            "POST",
            "/v1/completions",
            r#"{"model": "qwen3-14b", "prompt": "x", "max_tokens": 1}"#,
        );
        if code == 503 {
            assert!(body.contains("injected errors fault"), "{body}");
            failed += 1;
        } else {
            assert_eq!(code, 200, "{body}");
        }
    }
    assert!((3..=17).contains(&failed), "{failed} of 20 failed");
    // `down`: instance 1's connections close unanswered, its stream is cut
    // before its end; instance 0 serves on.
    let end = Instant::now() + Duration::from_secs(30);
    while http(&i1, "GET", "/health", "").0 == 200 {
        assert!(Instant::now() < end, "instance 1 never went down");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        http(&i1, "GET", "/health", "").0,
        0,
        "a down server answers nothing"
    );
    let cut = long.join().unwrap();
    assert!(cut.starts_with("HTTP/1.1 200"), "{cut}");
    assert!(cut.contains("\"text\""), "no token before the cut");
    assert!(!cut.contains("[DONE]"), "the stream ran to its end");
    assert_eq!(http(&i0, "GET", "/health", "").0, 200);
    // Back at 50 s, empty; instance 0 is 4× slower from then on.
    while http(&i1, "GET", "/health", "").0 != 200 {
        assert!(Instant::now() < end, "instance 1 never came back");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (slow, normal) = (timed(&i0, 40), timed(&i1, 40));
    assert!(
        slow > 2.5 * normal,
        "40 tokens took {slow:.3} s on the slowed instance, {normal:.3} s on the other"
    );
    let (code, report, err) = srv.stop();
    assert_eq!(code, Some(0), "{err}");
    let serve = &report["serve"];
    assert_eq!(serve["lost_requests"], 1, "{serve}");
    assert_eq!(serve["faulted_requests"], failed, "{serve}");
}

#[test]
fn a_tokenizer_json_counts_the_prompts() {
    // `[serve] tokenizer`: a Hugging Face tokenizer.json whose
    // pre-tokenizer splits punctuation off words — "the sky, blue" is four
    // tokens to it (three words without it).
    let dir = TestDir::new("serve-tokenizer");
    dir.write(
        "tokenizer.json",
        r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
"model":{"type":"WordLevel","vocab":{"[UNK]":0,"the":1,"sky":2,",":3},"unk_token":"[UNK]"}}"#,
    );
    dir.write(
        "bad.toml",
        &format!("{RUN}[serve]\ntokenizer = \"nope.json\"\n"),
    );
    let err = crate::util::run_bad(&dir, &["serve", "bad.toml"]);
    assert!(
        err.contains("serve.tokenizer") && err.contains("nope.json"),
        "{err}"
    );
    dir.write(
        "run.toml",
        &format!("{RUN}[serve]\ntokenizer = \"tokenizer.json\"\n"),
    );
    let mut srv = Served::start(&dir, "run.toml", &["--speed", "20"]);
    let (code, body) = http(
        &srv.instances[0],
        "POST",
        "/v1/completions",
        r#"{"model": "qwen3-14b", "prompt": "the sky, blue", "max_tokens": 2}"#,
    );
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["usage"]["prompt_tokens"], 4, "{body}");
    let (code, _, err) = srv.stop();
    assert_eq!(code, Some(0), "{err}");
}

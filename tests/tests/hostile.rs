//! `blis observe` against misbehaving OpenAI-compatible servers on
//! loopback (hardening round 4): streams that never end or drip a byte at
//! a time, truncated and failed answers, control characters in server
//! text, a `/metrics` that drips, and Ctrl-C while requests are in flight.
//! Each server is a few lines of `std::net`, bounded in time.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use blis_host::trace_v2::{TraceReader, TraceRecord, TraceStatus};
use serde_json::Value;

use crate::util::{code_out_err, TestDir};

/// How a server answers the `n`-th POST (counting from 0) on `s`.
type Answer = fn(&mut TcpStream, usize, &AtomicBool);

/// A local server answering every POST with `answer` and `GET /metrics`
/// with `metrics` (the scrape's index as argument); it stops when dropped
/// or after 90 s.
struct Server {
    url: String,
    stop: Arc<AtomicBool>,
    posts: Arc<AtomicUsize>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn server(answer: Answer, metrics: fn(&mut TcpStream, usize, &AtomicBool)) -> Server {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    l.set_nonblocking(true).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let posts = Arc::new(AtomicUsize::new(0));
    let (stop2, posts2) = (Arc::clone(&stop), Arc::clone(&posts));
    std::thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(90);
        let scrapes = Arc::new(AtomicUsize::new(0));
        while Instant::now() < end && !stop2.load(Ordering::SeqCst) {
            let Ok((mut s, _)) = l.accept() else {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            };
            let (stop3, posts3, scrapes3) = (
                Arc::clone(&stop2),
                Arc::clone(&posts2),
                Arc::clone(&scrapes),
            );
            std::thread::spawn(move || {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                // One request per connection, closed after the answer.
                if let Some(head) = read_request(&mut s) {
                    if head.starts_with("GET /metrics") {
                        metrics(&mut s, scrapes3.fetch_add(1, Ordering::SeqCst), &stop3);
                    } else if head.starts_with("POST") {
                        answer(&mut s, posts3.fetch_add(1, Ordering::SeqCst), &stop3);
                    } else {
                        let _ = s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
                    }
                }
                let _ = s.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    Server { url, stop, posts }
}

/// One request's head (its body read and dropped), or `None` at the end.
fn read_request(s: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    Some(head)
}

const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
const TOKEN: &str = "data: {\"choices\":[{\"text\":\" a\",\"finish_reason\":null}]}\n\n";
const FINISH: &str = "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n";

/// A whole, well-formed 4-token stream.
fn whole_stream(s: &mut TcpStream) {
    let _ = write!(s, "{SSE_HEAD}{}{FINISH}", TOKEN.repeat(4));
    let _ = s.shutdown(std::net::Shutdown::Both);
}

fn no_metrics(s: &mut TcpStream, _: usize, _: &AtomicBool) {
    let _ = s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
}

/// Sleep `d` unless the server is stopped meanwhile.
fn hold(d: Duration, stop: &AtomicBool) {
    let end = Instant::now() + d;
    while Instant::now() < end && !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn rows(dir: &TestDir) -> Vec<TraceRecord> {
    TraceReader::open(&dir.path().join("t.csv"))
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|r| r.unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

fn observe_args<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "observe",
        "--server-url",
        url,
        "--model",
        "m",
        "--trace-header",
        "t.yaml",
        "--trace-data",
        "t.csv",
        "--quiet",
    ];
    a.extend_from_slice(extra);
    a
}

/// `blis observe` to the end: (exit code, stdout, stderr, seconds taken).
fn observe(dir: &TestDir, url: &str, extra: &[&str]) -> (Option<i32>, String, String, f64) {
    let t = Instant::now();
    let o = dir.blis().args(observe_args(url, extra)).output().unwrap();
    let (code, out, err) = code_out_err(&o);
    (code, out, err, t.elapsed().as_secs_f64())
}

#[test]
fn streams_that_never_end_or_drip_end_as_timeout_rows() {
    // Items 2 and 3: a per-request deadline, checked before every read; the
    // scrape of a dripping /metrics ends at --timeout and the trace is kept.
    fn forever(s: &mut TcpStream, _: usize, stop: &AtomicBool) {
        let _ = s.write_all(SSE_HEAD.as_bytes());
        while !stop.load(Ordering::SeqCst) && s.write_all(TOKEN.as_bytes()).is_ok() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    fn drip(s: &mut TcpStream, _: usize, stop: &AtomicBool) {
        let _ = s.write_all(SSE_HEAD.as_bytes());
        for b in TOKEN.bytes().cycle() {
            if stop.load(Ordering::SeqCst) || s.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    fn dripping_metrics(s: &mut TcpStream, n: usize, stop: &AtomicBool) {
        let body = "vllm:gpu_prefix_cache_hits_total 1\nvllm:gpu_prefix_cache_queries_total 2\n";
        if n == 0 {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            return;
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
        while !stop.load(Ordering::SeqCst) && s.write_all(b"#").is_ok() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let dir = TestDir::new("hostile-forever");
    for (answer, name) in [(forever as Answer, "forever"), (drip as Answer, "drip")] {
        let srv = server(answer, dripping_metrics);
        let (code, _, err, secs) = observe(
            &dir,
            &srv.url,
            &[
                "--num-requests",
                "2",
                "--rate",
                "100",
                "--timeout",
                "2",
                "--request-timeout",
                "1",
                "--scrape-kv-metrics",
            ],
        );
        assert_eq!(code, Some(0), "{name}: {err}");
        assert!(secs < 20.0, "{name}: took {secs} s");
        let rs = rows(&dir);
        assert_eq!(rs.len(), 2, "{name}");
        for r in &rs {
            assert_eq!(r.status, TraceStatus::Timeout, "{name}: {r:?}");
            assert!(
                r.error_message.contains("--request-timeout"),
                "{name}: {r:?}"
            );
        }
        assert!(
            err.contains("warning: --scrape-kv-metrics") && err.contains("--timeout"),
            "{name}: {err}"
        );
    }
}

#[test]
fn truncated_and_failed_answers_are_error_rows_naming_why() {
    // Item 7, and item 16: server text is escaped and cut in the trace.
    fn reset(s: &mut TcpStream, _: usize, _: &AtomicBool) {
        let _ = write!(s, "{SSE_HEAD}{TOKEN}");
    }
    fn mid_error(s: &mut TcpStream, _: usize, _: &AtomicBool) {
        let _ = write!(
            s,
            "{SSE_HEAD}{TOKEN}data: {{\"error\": {{\"object\": \"error\", \"message\": \"EngineCore died \\u001b]0;owned\\u0007\", \"code\": 500}}}}\n\ndata: [DONE]\n\n"
        );
    }
    fn done_only(s: &mut TcpStream, _: usize, _: &AtomicBool) {
        let _ = write!(s, "{SSE_HEAD}data: [DONE]\n\n");
    }
    fn too_long(s: &mut TcpStream, _: usize, _: &AtomicBool) {
        let _ = write!(s, "{SSE_HEAD}{}{FINISH}", TOKEN.repeat(20_000));
    }
    fn json_error(s: &mut TcpStream, _: usize, _: &AtomicBool) {
        let body = "{\"error\": {\"message\": \"The model does not exist.\", \"code\": 404}}";
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
    }
    fn html(s: &mut TcpStream, _: usize, _: &AtomicBool) {
        let body = format!("<html>\u{1b}[2J\u{7}\0{}</html>", "x".repeat(100_000));
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
    }
    fn status_500(s: &mut TcpStream, _: usize, _: &AtomicBool) {
        let body = "\u{1b}]0;pwned\u{7}internal error";
        let _ = write!(
            s,
            "HTTP/1.1 500 Internal Server Error\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
    }
    let dir = TestDir::new("hostile-truncated");
    let cases: [(Answer, bool, &str); 7] = [
        (reset, true, "truncated"),
        (
            mid_error,
            true,
            "mid-stream: EngineCore died \\u{1b}]0;owned\\u{7}",
        ),
        (done_only, true, "no completion chunk"),
        (too_long, true, "more than max_tokens"),
        (json_error, false, "answered with an error"),
        (
            html,
            false,
            "not a JSON object: <html>\\u{1b}[2J\\u{7}\\u{0}xxx",
        ),
        (
            status_500,
            false,
            "HTTP 500: \\u{1b}]0;pwned\\u{7}internal error",
        ),
    ];
    for (answer, stream, why) in cases {
        let srv = server(answer, no_metrics);
        let mut extra = vec!["--num-requests", "2", "--rate", "100", "--timeout", "5"];
        if !stream {
            extra.push("--no-streaming");
        }
        let (code, out, err, _) = observe(&dir, &srv.url, &extra);
        assert_eq!(code, Some(0), "{why}: {err}");
        let rs = rows(&dir);
        assert_eq!(rs.len(), 2, "{why}");
        for r in &rs {
            assert_eq!(r.status, TraceStatus::Error, "{why}: {r:?}");
            assert!(r.error_message.contains(why), "{why}: {}", r.error_message);
            assert!(r.error_message.chars().count() < 500, "{why}: not cut");
            assert!(
                !r.error_message.chars().any(|c| c.is_control()),
                "{why}: {:?}",
                r.error_message
            );
        }
        let s: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (s["ok"].as_u64(), s["error"].as_u64()),
            (Some(0), Some(2)),
            "{why}"
        );
        assert!(
            !err.chars().any(|c| c == '\u{1b}' || c == '\u{7}'),
            "{why}: raw control characters on stderr"
        );
    }
    // The same server answering whole streams: ok rows.
    let srv = server(|s, _, _| whole_stream(s), no_metrics);
    let (code, _, err, _) = observe(&dir, &srv.url, &["--num-requests", "3", "--rate", "100"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(rows(&dir).iter().all(|r| r.status == TraceStatus::Ok));
}

/// Wait until `cond`, at most `limit`.
fn wait_until(what: &str, limit: Duration, cond: impl Fn() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn interrupt(child: &Child) {
    let s = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(s.success());
}

#[cfg(unix)]
#[test]
fn ctrl_c_drains_and_writes_every_recorded_request() {
    // Item 1: the first Ctrl-C stops dispatching and drains; requests
    // still in flight become `incomplete` rows; a second Ctrl-C ends the
    // drain at once and still writes the trace.
    fn first_five(s: &mut TcpStream, n: usize, stop: &AtomicBool) {
        // Request 0 is observe's tokens-per-word probe.
        if n < 6 {
            whole_stream(s);
        } else {
            hold(Duration::from_secs(60), stop);
        }
    }
    let dir = TestDir::new("hostile-ctrl-c");
    for (drain, signals) in [("1", 1), ("60", 2)] {
        let srv = server(first_five, no_metrics);
        let t = Instant::now();
        let child = dir
            .blis()
            .args(observe_args(
                &srv.url,
                &[
                    "--num-requests",
                    "100",
                    "--rate",
                    "50",
                    "--drain-timeout",
                    drain,
                ],
            ))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_until("requests in flight", Duration::from_secs(30), || {
            srv.posts.load(Ordering::SeqCst) >= 10
        });
        interrupt(&child);
        if signals == 2 {
            std::thread::sleep(Duration::from_millis(300));
            interrupt(&child);
        }
        let o = child.wait_with_output().unwrap();
        let (code, _, err) = code_out_err(&o);
        assert_eq!(code, Some(130), "{err}");
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "drain {drain}: {err}"
        );
        let rs = rows(&dir);
        let ok = rs.iter().filter(|r| r.status == TraceStatus::Ok).count();
        let cut: Vec<&TraceRecord> = rs
            .iter()
            .filter(|r| r.status == TraceStatus::Incomplete)
            .collect();
        assert_eq!(ok, 5, "drain {drain}: {err}");
        assert!(cut.len() >= 3, "drain {drain}: {rs:?}");
        assert_eq!(ok + cut.len(), rs.len());
        assert!(cut.iter().all(|r| r.error_message.contains("interrupted")));
        // Every dispatched request is a row.
        assert!(
            err.contains(&format!("{} requests written", rs.len())),
            "{err}"
        );
        drop(srv);
    }
}

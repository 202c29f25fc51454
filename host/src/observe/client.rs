//! One HTTP exchange with an OpenAI-compatible server (spec §2.5): the
//! request body and headers, then the streamed (SSE) or whole response,
//! stamped in Unix-epoch µs. Transport errors and non-200 answers become
//! `error` outcomes and time-outs `timeout` outcomes: nothing here fails
//! the command.

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// `--api-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiFormat {
    /// `POST /v1/completions` with `prompt`.
    Completions,
    /// `POST /v1/chat/completions` with `messages`.
    Chat,
}

/// Everything one request needs besides the shared client.
#[derive(Clone, Debug)]
pub struct Call {
    pub prompt: String,
    pub stream: bool,
    /// `max_tokens`; `None` leaves it out (chat with `--unconstrained-output`).
    pub max_tokens: Option<u64>,
    /// `min_tokens`; `None` leaves it out.
    pub min_tokens: Option<u64>,
    /// vLLM `priority` (lower = sooner); `None` leaves it out.
    pub priority: Option<u64>,
    pub x_request_id: String,
    pub tenant: String,
    pub slo_class: String,
    /// `x-slo-ttft-ms`, when the request has a TTFT target.
    pub slo_ttft_ms: Option<u64>,
    /// Keep every chunk's stamp (for the ITL CSV).
    pub keep_chunks: bool,
}

/// How the exchange ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    Error,
    Timeout,
}

/// What one exchange recorded. Times are Unix-epoch µs (0 = not reached).
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub status: Status,
    pub error_message: String,
    pub send_us: i64,
    pub first_chunk_us: i64,
    pub last_chunk_us: i64,
    pub num_chunks: u64,
    /// Every chunk's stamp, when asked for.
    pub chunks: Vec<i64>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub finish_reason: String,
}

impl Outcome {
    fn new(send_us: i64) -> Outcome {
        Outcome {
            status: Status::Ok,
            error_message: String::new(),
            send_us,
            first_chunk_us: 0,
            last_chunk_us: 0,
            num_chunks: 0,
            chunks: Vec::new(),
            prompt_tokens: 0,
            completion_tokens: 0,
            finish_reason: String::new(),
        }
    }
}

/// Unix-epoch µs now.
pub fn epoch_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The shared client: one connection pool, the endpoint, the model.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    url: String,
    model: String,
    format: ApiFormat,
    api_key: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.url)
            .field("model", &self.model)
            .finish()
    }
}

/// A request body (spec §2.5); keys in this order.
#[derive(serde::Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<[Message<'a>; 1]>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u64>,
}

#[derive(serde::Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(serde::Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// Longest error body kept in `error_message`, bytes.
const ERROR_BODY_LIMIT: usize = 2048;

impl Client {
    /// `base` is the server URL (`http://host:port`, a trailing `/` and a
    /// trailing `/v1` are accepted); `timeout` bounds connecting, each
    /// socket read and write (the wait for the response head included),
    /// and the whole exchange: a response still arriving `timeout` after
    /// the request was sent is cut off as a time-out (checked as each
    /// chunk arrives, so a stalled read ends within one more `timeout`).
    /// (Not ureq's overall or per-phase timeouts: with an overall one it
    /// resolves the host on a new thread for every request, and with
    /// either it resets the socket's timeout before every read — a thread
    /// spawn or a system call per read. A per-read timeout is a constant,
    /// set once per connection.)
    pub fn new(
        base: &str,
        model: &str,
        format: ApiFormat,
        api_key: Option<String>,
        timeout: Duration,
        pool: usize,
    ) -> Client {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_connect(Some(timeout))
            .timeout_per_read(Some(timeout))
            .timeout_per_write(Some(timeout))
            .http_status_as_error(false)
            .max_idle_connections(pool.max(1))
            .max_idle_connections_per_host(pool.max(1))
            .user_agent(concat!("blis-observe/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Client {
            agent,
            url: base_url(base),
            model: model.to_string(),
            format,
            api_key,
            timeout,
        }
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> String {
        match self.format {
            ApiFormat::Completions => format!("{}/v1/completions", self.url),
            ApiFormat::Chat => format!("{}/v1/chat/completions", self.url),
        }
    }

    /// The server's base URL (no trailing `/`, no `/v1`).
    pub fn base(&self) -> &str {
        &self.url
    }

    /// The JSON body of `call`, borrowing its strings.
    fn body_of<'a>(&'a self, call: &'a Call) -> Body<'a> {
        let (prompt, messages) = match self.format {
            ApiFormat::Completions => (Some(call.prompt.as_str()), None),
            ApiFormat::Chat => (
                None,
                Some([Message {
                    role: "user",
                    content: &call.prompt,
                }]),
            ),
        };
        Body {
            model: &self.model,
            prompt,
            messages,
            stream: call.stream,
            max_tokens: call.max_tokens,
            min_tokens: call.min_tokens,
            stream_options: call.stream.then_some(StreamOptions {
                include_usage: true,
            }),
            priority: call.priority,
        }
    }

    /// The JSON body of `call`.
    #[cfg(test)]
    pub fn body(&self, call: &Call) -> Value {
        serde_json::to_value(self.body_of(call)).unwrap_or(Value::Null)
    }

    /// Send `call` and read the whole answer.
    pub fn send(&self, call: &Call) -> Outcome {
        // Serialised straight from the borrowed strings (no JSON tree).
        let body = serde_json::to_vec(&self.body_of(call)).unwrap_or_default();
        let mut req = self
            .agent
            .post(self.endpoint())
            .header("Content-Type", "application/json")
            .header("x-request-id", &call.x_request_id);
        if let Some(k) = &self.api_key {
            req = req.header("Authorization", format!("Bearer {k}"));
        }
        if !call.tenant.is_empty() {
            req = req.header("x-gateway-inference-fairness-id", &call.tenant);
        }
        if !call.slo_class.is_empty() {
            req = req.header("x-gateway-inference-objective", &call.slo_class);
        }
        if let Some(ms) = call.slo_ttft_ms {
            req = req.header("x-slo-ttft-ms", ms.to_string());
        }
        let mut out = Outcome::new(epoch_us());
        let deadline = Instant::now() + self.timeout;
        let resp = match req.send(&body[..]) {
            Ok(r) => r,
            Err(e) => {
                fail(&mut out, &e);
                return out;
            }
        };
        let code = resp.status().as_u16();
        let mut reader = resp.into_body().into_reader();
        if code != 200 {
            let mut buf = Vec::new();
            let _ = (&mut reader)
                .take(ERROR_BODY_LIMIT as u64)
                .read_to_end(&mut buf);
            out.status = Status::Error;
            out.error_message = format!(
                "HTTP {code}: {}",
                String::from_utf8_lossy(&buf).replace(['\n', '\r'], " ")
            );
            return out;
        }
        let result = if call.stream {
            read_stream(reader, &mut out, call.keep_chunks, deadline)
        } else {
            read_whole(reader, &mut out, deadline)
        };
        if let Err(e) = result {
            io_fail(&mut out, &e);
        }
        out
    }

    /// GET `url` (the metrics endpoint): the body, or why not.
    pub fn get_text(&self, url: &str) -> Result<String, String> {
        let resp = self.agent.get(url).call().map_err(|e| e.to_string())?;
        let code = resp.status().as_u16();
        if code != 200 {
            return Err(format!("HTTP {code}"));
        }
        resp.into_body()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(|e| e.to_string())
    }
}

/// The base URL without trailing `/` or `/v1`.
pub fn base_url(s: &str) -> String {
    let mut u = s.trim().trim_end_matches('/').to_string();
    if u.ends_with("/v1") {
        u.truncate(u.len() - 3);
    }
    u.trim_end_matches('/').to_string()
}

fn fail(out: &mut Outcome, e: &ureq::Error) {
    if matches!(e, ureq::Error::Timeout(_)) {
        out.status = Status::Timeout;
    } else {
        out.status = Status::Error;
    }
    out.error_message = e.to_string();
}

fn io_fail(out: &mut Outcome, e: &std::io::Error) {
    let timeout = e.kind() == std::io::ErrorKind::TimedOut
        || e.get_ref()
            .and_then(|i| i.downcast_ref::<ureq::Error>())
            .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)));
    out.status = if timeout {
        Status::Timeout
    } else {
        Status::Error
    };
    out.error_message = e.to_string();
}

/// Read an SSE stream: every `data:` line other than `[DONE]` is a chunk,
/// stamped when read; usage and finish reason from the chunks that carry
/// them.
///
/// A server that sends no `usage` (llama-cpp-python's ignores
/// `include_usage`) gets `completion_tokens` = the chunks without a finish
/// reason (one per token on such servers); `prompt_tokens` stays 0.
fn read_stream(
    reader: impl Read,
    out: &mut Outcome,
    keep: bool,
    deadline: Instant,
) -> std::io::Result<()> {
    let mut r = BufReader::with_capacity(16 << 10, reader);
    let mut line = String::new();
    let mut usage_seen = false;
    let mut token_chunks = 0;
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            if !usage_seen {
                out.completion_tokens = token_chunks;
            }
            return Ok(());
        }
        past(deadline)?;
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let data = data.trim();
        if data == "[DONE]" {
            continue;
        }
        let now = epoch_us();
        if out.num_chunks == 0 {
            out.first_chunk_us = now;
        }
        out.last_chunk_us = now;
        out.num_chunks += 1;
        if keep {
            out.chunks.push(now);
        }
        let (usage, finish) = read_fields(data, out);
        usage_seen |= usage;
        if !finish && !usage {
            token_chunks += 1;
        }
    }
}

/// A non-streaming answer: first chunk at the first body byte, last after
/// the body, one chunk.
fn read_whole(reader: impl Read, out: &mut Outcome, deadline: Instant) -> std::io::Result<()> {
    let mut r = BufReader::with_capacity(16 << 10, reader);
    let first = r.fill_buf()?.len();
    out.first_chunk_us = epoch_us();
    let mut body = String::new();
    if first > 0 {
        r.read_to_string(&mut body)?;
    }
    out.last_chunk_us = epoch_us();
    past(deadline)?;
    out.num_chunks = 1;
    read_fields(&body, out);
    Ok(())
}

/// A time-out error once `deadline` has passed.
fn past(deadline: Instant) -> std::io::Result<()> {
    if Instant::now() > deadline {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the response took longer than --timeout",
        ));
    }
    Ok(())
}

/// Usage and finish reason from one JSON chunk (or a whole body); returns
/// whether it carried a usage object and a finish reason. Chunks that
/// carry neither are not parsed.
fn read_fields(data: &str, out: &mut Outcome) -> (bool, bool) {
    let usage = data.contains("\"usage\"") && !has_null(data, "\"usage\"");
    let finish = data.contains("\"finish_reason\"") && !has_null(data, "\"finish_reason\"");
    if !usage && !finish {
        return (false, false);
    }
    let Ok(v) = serde_json::from_str::<Value>(data) else {
        return (false, false);
    };
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        if let Some(p) = u.get("prompt_tokens").and_then(Value::as_u64) {
            out.prompt_tokens = p;
        }
        if let Some(c) = u.get("completion_tokens").and_then(Value::as_u64) {
            out.completion_tokens = c;
        }
    }
    if let Some(choices) = v.get("choices").and_then(Value::as_array) {
        for c in choices {
            if let Some(f) = c.get("finish_reason").and_then(Value::as_str) {
                if !f.is_empty() {
                    out.finish_reason = f.to_string();
                }
            }
        }
    }
    (usage, finish)
}

/// Whether every occurrence of `key` in `data` is followed by `: null`.
fn has_null(data: &str, key: &str) -> bool {
    data.match_indices(key).all(|(i, _)| {
        let rest = data[i + key.len()..].trim_start();
        let rest = rest.strip_prefix(':').unwrap_or(rest).trim_start();
        rest.starts_with("null")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(600)
    }

    #[test]
    fn a_response_past_the_deadline_times_out() {
        let text = "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n";
        let past = Instant::now() - Duration::from_millis(1);
        let mut o = Outcome::new(1);
        let e = read_stream(text.as_bytes(), &mut o, false, past).unwrap_err();
        io_fail(&mut o, &e);
        assert_eq!(o.status, Status::Timeout, "{o:?}");
        let mut o = Outcome::new(1);
        let e = read_whole(text.as_bytes(), &mut o, past).unwrap_err();
        io_fail(&mut o, &e);
        assert_eq!(o.status, Status::Timeout, "{o:?}");
    }

    fn call(stream: bool) -> Call {
        Call {
            prompt: "alpha bravo".into(),
            stream,
            max_tokens: Some(16),
            min_tokens: Some(16),
            priority: Some(1),
            x_request_id: "id".into(),
            tenant: "t".into(),
            slo_class: "standard".into(),
            slo_ttft_ms: None,
            keep_chunks: true,
        }
    }

    fn client(format: ApiFormat) -> Client {
        Client::new(
            "http://127.0.0.1:1/v1/",
            "m",
            format,
            None,
            Duration::from_secs(1),
            1,
        )
    }

    #[test]
    fn bodies_follow_the_spec() {
        let c = client(ApiFormat::Completions);
        assert_eq!(c.endpoint(), "http://127.0.0.1:1/v1/completions");
        assert_eq!(
            c.body(&call(true)),
            json!({"model": "m", "prompt": "alpha bravo", "stream": true, "max_tokens": 16,
                   "min_tokens": 16, "stream_options": {"include_usage": true}, "priority": 1})
        );
        let c = client(ApiFormat::Chat);
        assert_eq!(c.endpoint(), "http://127.0.0.1:1/v1/chat/completions");
        let mut k = call(false);
        k.max_tokens = None;
        k.min_tokens = None;
        k.priority = None;
        assert_eq!(
            c.body(&k),
            json!({"model": "m", "messages": [{"role": "user", "content": "alpha bravo"}], "stream": false})
        );
    }

    #[test]
    fn sse_chunks_usage_and_finish_reason() {
        let text = "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":null}],\"usage\":null}\n\n\
                    : comment\n\
                    data: {\"choices\":[{\"text\":\"b\",\"finish_reason\": \"length\"}]}\n\n\
                    data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\n\
                    data: [DONE]\n\n";
        let mut o = Outcome::new(1);
        read_stream(text.as_bytes(), &mut o, true, later()).unwrap();
        assert_eq!(o.num_chunks, 3);
        assert_eq!(o.chunks.len(), 3);
        assert!(o.first_chunk_us > 0 && o.last_chunk_us >= o.first_chunk_us);
        assert_eq!((o.prompt_tokens, o.completion_tokens), (7, 2));
        assert_eq!(o.finish_reason, "length");
    }

    #[test]
    fn without_usage_tokens_are_the_chunks_without_a_finish_reason() {
        // llama-cpp-python's stream: one chunk per token, then an empty
        // chunk with the finish reason, no usage.
        let text = "data: {\"choices\": [{\"text\": \" sky\", \"finish_reason\": null}]}\n\n\
                    data: {\"choices\": [{\"text\": \"7\", \"finish_reason\": null}]}\n\n\
                    data: {\"choices\": [{\"text\": \"\", \"finish_reason\": \"length\"}]}\n\n\
                    data: [DONE]\n\n";
        let mut o = Outcome::new(1);
        read_stream(text.as_bytes(), &mut o, false, later()).unwrap();
        assert_eq!(o.num_chunks, 3);
        assert!(o.chunks.is_empty());
        assert_eq!((o.prompt_tokens, o.completion_tokens), (0, 2));
        assert_eq!(o.finish_reason, "length");
    }

    #[test]
    fn whole_body_is_one_chunk() {
        let text = "{\"choices\":[{\"text\":\"ab\",\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9}}";
        let mut o = Outcome::new(1);
        read_whole(text.as_bytes(), &mut o, later()).unwrap();
        assert_eq!(o.num_chunks, 1);
        assert_eq!((o.prompt_tokens, o.completion_tokens), (5, 9));
        assert_eq!(o.finish_reason, "stop");
    }

    #[test]
    fn a_dead_port_is_an_error_outcome() {
        let c = client(ApiFormat::Completions);
        let o = c.send(&call(true));
        assert_eq!(o.status, Status::Error, "{o:?}");
        assert!(!o.error_message.is_empty());
        assert_eq!(o.num_chunks, 0);
    }

    #[test]
    fn base_urls_are_normalised() {
        assert_eq!(base_url("http://h:1/"), "http://h:1");
        assert_eq!(base_url("http://h:1/v1"), "http://h:1");
        assert_eq!(base_url("http://h:1/v1/"), "http://h:1");
    }
}

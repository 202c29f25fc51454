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
    /// Still in flight when observe stopped (an `incomplete` row).
    Cancelled,
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
    /// A request observe gave up on: no answer recorded.
    pub fn cancelled(why: &str) -> Outcome {
        Outcome {
            status: Status::Cancelled,
            error_message: why.to_string(),
            ..Outcome::new(0)
        }
    }

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
    /// The whole exchange's deadline, from the send (`--request-timeout`).
    request_timeout: Duration,
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

/// Longest server text quoted in `error_message`, characters (control
/// characters escaped).
const QUOTE_LIMIT: usize = 300;

/// Bytes read per requested token before a response is cut off as
/// runaway (an SSE chunk of vLLM's is a few hundred bytes), plus a fixed
/// allowance.
const BYTES_PER_TOKEN: u64 = 16 << 10;
const BYTES_BASE: u64 = 1 << 20;

/// Chunks streamed past `max_tokens` before a response is cut off as
/// runaway (a finish-reason chunk and a usage chunk are not tokens).
const CHUNKS_PAST_MAX: u64 = 16;

/// A whole `/metrics` answer, bytes.
const METRICS_LIMIT: u64 = 64 << 20;

/// The client's time limits.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// Each phase: connect, each socket read and write.
    pub phase: Duration,
    /// The whole exchange, from the send.
    pub request: Duration,
}

/// Server text fit for a message: control characters escaped, cut.
pub fn quote(text: &str) -> String {
    crate::text::clean(text.trim(), QUOTE_LIMIT)
}

/// A reader that fails once its deadline has passed or it has given
/// `left` bytes: the bound of one exchange whatever the server does.
struct Bounded<R> {
    inner: R,
    deadline: Instant,
    left: u64,
    limit: u64,
    what: &'static str,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        past(self.deadline, self.what)?;
        if self.left == 0 {
            return Err(std::io::Error::other(format!(
                "the response exceeded {} bytes: cut off (a runaway stream?)",
                self.limit
            )));
        }
        let n = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let got = self.inner.read(&mut buf[..n])?;
        self.left -= got as u64;
        Ok(got)
    }
}

impl Client {
    /// `base` is the server URL (`http://host:port`, a trailing `/` and a
    /// trailing `/v1` are accepted); `timeout` bounds connecting, each
    /// socket read and write (the wait for the response head included);
    /// `request_timeout` bounds the whole exchange: a response still
    /// arriving that long after the request was sent is cut off as a
    /// time-out (checked before every socket read, so a stream that never
    /// ends or drips a byte at a time ends within one more `timeout`).
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
        timeout: Timeouts,
        pool: usize,
    ) -> Client {
        let Timeouts {
            phase: timeout,
            request: request_timeout,
        } = timeout;
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
            request_timeout,
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
        let deadline = Instant::now() + self.request_timeout;
        let resp = match req.send(&body[..]) {
            Ok(r) => r,
            Err(e) => {
                fail(&mut out, &e);
                return out;
            }
        };
        let code = resp.status().as_u16();
        let limit = call
            .max_tokens
            .map_or(u64::MAX, |m| m.saturating_mul(BYTES_PER_TOKEN))
            .saturating_add(BYTES_BASE);
        let mut reader = Bounded {
            inner: resp.into_body().into_reader(),
            deadline,
            left: limit,
            limit,
            what: "--request-timeout",
        };
        if code != 200 {
            let mut buf = Vec::new();
            let _ = (&mut reader)
                .take(ERROR_BODY_LIMIT as u64)
                .read_to_end(&mut buf);
            out.status = Status::Error;
            out.error_message = format!("HTTP {code}: {}", quote(&String::from_utf8_lossy(&buf)));
            return out;
        }
        let result = if call.stream {
            read_stream(reader, &mut out, call.keep_chunks, call.max_tokens)
        } else {
            read_whole(reader, &mut out)
        };
        if let Err(e) = result {
            io_fail(&mut out, &e);
        }
        out
    }

    /// GET `url` (the metrics endpoint): the body, or why not.
    /// The whole answer must arrive within the phase timeout (`--timeout`)
    /// and an interrupt ends the wait.
    pub fn get_text(&self, url: &str) -> Result<String, String> {
        let deadline = Instant::now() + self.timeout;
        let resp = self
            .agent
            .get(url)
            .call()
            .map_err(|e| quote(&e.to_string()))?;
        let code = resp.status().as_u16();
        if code != 200 {
            return Err(format!("HTTP {code}"));
        }
        let mut r = Interruptible(Bounded {
            inner: resp.into_body().into_reader(),
            deadline,
            left: METRICS_LIMIT,
            limit: METRICS_LIMIT,
            what: "--timeout",
        });
        let mut body = String::new();
        r.read_to_string(&mut body)
            .map_err(|e| quote(&e.to_string()))?;
        Ok(body)
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

/// A reader an interrupt (Ctrl-C) ends.
struct Interruptible<R>(R);

impl<R: Read> Read for Interruptible<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if crate::output::stop_requested() {
            return Err(std::io::Error::other("interrupted"));
        }
        self.0.read(buf)
    }
}

fn fail(out: &mut Outcome, e: &ureq::Error) {
    if matches!(e, ureq::Error::Timeout(_)) {
        out.status = Status::Timeout;
    } else {
        out.status = Status::Error;
    }
    out.error_message = quote(&e.to_string());
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
    out.error_message = quote(&e.to_string());
}

/// Mark `out` an `error` row: the answer was not a whole, well-formed
/// completion.
fn bad(out: &mut Outcome, why: String) {
    out.status = Status::Error;
    out.error_message = why;
}

/// Read an SSE stream: every `data:` line other than `[DONE]` is a chunk,
/// stamped when read; usage and finish reason from the chunks that carry
/// them. Only a whole, well-formed stream is `ok`: it ends with `[DONE]`
/// or carries a finish reason, holds at least one chunk, every chunk is a
/// JSON object, none is an `error` object (vLLM's mid-stream error), and
/// it streams no more than `max_tokens` (+ a few) token chunks.
///
/// A server that sends no `usage` (llama-cpp-python's ignores
/// `include_usage`) gets `completion_tokens` = the chunks without a finish
/// reason (one per token on such servers); `prompt_tokens` stays 0.
fn read_stream(
    reader: impl Read,
    out: &mut Outcome,
    keep: bool,
    max_tokens: Option<u64>,
) -> std::io::Result<()> {
    let mut r = BufReader::with_capacity(16 << 10, reader);
    let mut line = String::new();
    let mut usage_seen = false;
    let mut done = false;
    let mut token_chunks = 0;
    let runaway = max_tokens.map_or(u64::MAX, |m| m.saturating_add(CHUNKS_PAST_MAX));
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            if !usage_seen {
                out.completion_tokens = token_chunks;
            }
            if out.num_chunks == 0 {
                bad(out, "the stream carried no completion chunk".into());
            } else if !done && out.finish_reason.is_empty() {
                bad(
                    out,
                    format!(
                    "the stream ended after {} chunks without a finish_reason or [DONE]: truncated",
                    out.num_chunks
                ),
                );
            }
            return Ok(());
        }
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let data = data.trim();
        if data == "[DONE]" {
            done = true;
            continue;
        }
        if !(data.starts_with('{') && data.ends_with('}')) {
            bad(
                out,
                format!("a stream chunk is not a JSON object: {}", quote(data)),
            );
            return Ok(());
        }
        if let Some(e) = error_object(data) {
            bad(out, format!("the server reported an error mid-stream: {e}"));
            return Ok(());
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
            if token_chunks > runaway {
                bad(out, format!(
                    "the server streamed more than max_tokens = {} tokens: cut off after {token_chunks} token chunks",
                    max_tokens.unwrap_or(0)
                ));
                return Ok(());
            }
        }
    }
}

/// A non-streaming answer: first chunk at the first body byte, last after
/// the body, one chunk. `ok` only for a JSON completion (an object with
/// `choices` and no `error`).
fn read_whole(reader: impl Read, out: &mut Outcome) -> std::io::Result<()> {
    let mut r = BufReader::with_capacity(16 << 10, reader);
    let first = r.fill_buf()?.len();
    out.first_chunk_us = epoch_us();
    let mut body = String::new();
    if first > 0 {
        r.read_to_string(&mut body)?;
    }
    out.last_chunk_us = epoch_us();
    out.num_chunks = 1;
    let v = match serde_json::from_str::<Value>(&body) {
        Ok(v) if v.is_object() => v,
        _ => {
            bad(
                out,
                format!(
                    "the answer (HTTP 200) is not a JSON object: {}",
                    quote(&body)
                ),
            );
            return Ok(());
        }
    };
    if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
        bad(
            out,
            format!(
                "the server answered with an error: {}",
                quote(&e.to_string())
            ),
        );
        return Ok(());
    }
    if v.get("choices")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        bad(
            out,
            format!("the answer (HTTP 200) holds no choices: {}", quote(&body)),
        );
        return Ok(());
    }
    fields_of(&v, out);
    Ok(())
}

/// The `error` of a chunk that is an error object (vLLM's mid-stream
/// `{"error": {...}}`), quoted.
fn error_object(data: &str) -> Option<String> {
    if !data.contains("\"error\"") {
        return None;
    }
    let v = serde_json::from_str::<Value>(data).ok()?;
    let e = v.get("error").filter(|e| !e.is_null())?;
    let text = e
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| e.to_string(), str::to_string);
    Some(quote(&text))
}

/// A time-out error once `deadline` (set by the `what` flag) has passed.
fn past(deadline: Instant, what: &str) -> std::io::Result<()> {
    if Instant::now() > deadline {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the response took longer than {what}"),
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
    fields_of(&v, out);
    (usage, finish)
}

/// Usage and finish reason from a parsed chunk or body.
fn fields_of(v: &Value, out: &mut Outcome) {
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
        let bounded = |t: &'static str| Bounded {
            inner: t.as_bytes(),
            deadline: Instant::now() - Duration::from_millis(1),
            left: 1 << 20,
            limit: 1 << 20,
            what: "--request-timeout",
        };
        let mut o = Outcome::new(1);
        let e = read_stream(bounded(text), &mut o, false, None).unwrap_err();
        io_fail(&mut o, &e);
        assert_eq!(o.status, Status::Timeout, "{o:?}");
        assert!(o.error_message.contains("--request-timeout"), "{o:?}");
        let mut o = Outcome::new(1);
        let e = read_whole(bounded(text), &mut o).unwrap_err();
        io_fail(&mut o, &e);
        assert_eq!(o.status, Status::Timeout, "{o:?}");
    }

    #[test]
    fn a_runaway_response_is_cut_at_its_byte_limit() {
        let big = "x".repeat(5000);
        let mut r = Bounded {
            inner: big.as_bytes(),
            deadline: later(),
            left: 1000,
            limit: 1000,
            what: "--request-timeout",
        };
        let mut sink = Vec::new();
        let e = r.read_to_end(&mut sink).unwrap_err();
        assert_eq!(sink.len(), 1000);
        assert!(e.to_string().contains("exceeded 1000 bytes"), "{e}");
    }

    /// The status and message `read_stream` gives `text`.
    fn stream_verdict(text: &str, max_tokens: Option<u64>) -> (Status, String) {
        let mut o = Outcome::new(1);
        read_stream(text.as_bytes(), &mut o, false, max_tokens).unwrap();
        (o.status, o.error_message)
    }

    #[test]
    fn only_whole_well_formed_streams_are_ok() {
        let tok = "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}\n\n";
        let fin = "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n";
        let done = "data: [DONE]\n\n";
        assert_eq!(
            stream_verdict(&format!("{tok}{fin}{done}"), Some(1)).0,
            Status::Ok
        );
        // A finish reason without [DONE], or [DONE] without one: whole.
        assert_eq!(
            stream_verdict(&format!("{tok}{fin}"), Some(1)).0,
            Status::Ok
        );
        assert_eq!(
            stream_verdict(&format!("{tok}{done}"), Some(1)).0,
            Status::Ok
        );
        for (text, why) in [
            (tok.to_string(), "truncated"),
            (done.to_string(), "no completion chunk"),
            (String::new(), "no completion chunk"),
            (
                format!("{tok}data: {{\"error\": {{\"message\": \"engine dead\\u001b[31m\", \"code\": 500}}}}\n\n{done}"),
                "mid-stream: engine dead\\u{1b}[31m",
            ),
            (format!("{tok}data: <html>oops</html>\n\n{done}"), "not a JSON object"),
            (format!("{}{done}", tok.repeat(20)), "more than max_tokens = 2"),
        ] {
            let (status, message) = stream_verdict(&text, Some(2));
            assert_eq!(status, Status::Error, "{text:?}");
            assert!(message.contains(why), "{text:?}: {message}");
        }
    }

    #[test]
    fn only_json_completions_are_ok_whole_answers() {
        for (body, why) in [
            (
                "{\"error\": {\"message\": \"bad\"}}",
                "answered with an error",
            ),
            (
                "<html><body>502 \u{7} Bad Gateway</body></html>",
                "not a JSON object: <html><body>502 \\u{7}",
            ),
            ("{\"choices\": []}", "holds no choices"),
            ("", "not a JSON object"),
        ] {
            let mut o = Outcome::new(1);
            read_whole(body.as_bytes(), &mut o).unwrap();
            assert_eq!(o.status, Status::Error, "{body}");
            assert!(o.error_message.contains(why), "{body}: {}", o.error_message);
        }
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
            Timeouts {
                phase: Duration::from_secs(1),
                request: Duration::from_secs(1),
            },
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
        read_stream(text.as_bytes(), &mut o, true, Some(2)).unwrap();
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
        read_stream(text.as_bytes(), &mut o, false, Some(2)).unwrap();
        assert_eq!(o.num_chunks, 3);
        assert!(o.chunks.is_empty());
        assert_eq!((o.prompt_tokens, o.completion_tokens), (0, 2));
        assert_eq!(o.finish_reason, "length");
    }

    #[test]
    fn whole_body_is_one_chunk() {
        let text = "{\"choices\":[{\"text\":\"ab\",\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9}}";
        let mut o = Outcome::new(1);
        read_whole(text.as_bytes(), &mut o).unwrap();
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

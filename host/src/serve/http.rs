//! The HTTP side of `blis serve`: each instance's own vLLM look-alike (and
//! the gateway, when asked), on axum. A handler turns the OpenAI request
//! into a simulated [`Request`], hands it to the engine thread and writes
//! the tokens the engine delivers as they come (SSE) or the whole answer.
//! Errors answer as vLLM does: its status codes and JSON error bodies.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

use super::engine::{Command, Delivery, Snapshot};
use super::faults::FaultState;
use super::prompt::{self, Prompted};
use crate::request::Request;

/// What every endpoint shares.
pub struct Shared {
    /// The engine thread's command channel.
    pub commands: Mutex<Sender<Command>>,
    /// The model name served.
    pub model: String,
    /// LoRA adapters the run knows (`Request::adapter` indexes this list).
    pub adapters: Vec<String>,
    /// Adapters each endpoint has unloaded (`/v1/unload_lora_adapter`);
    /// every other known adapter is loaded.
    pub unloaded: Mutex<std::collections::HashSet<(Option<u32>, String)>>,
    /// KV block size (prompt blocks become prefix-cache blocks).
    pub block_size: u32,
    /// How prompt text becomes tokens (`[serve] tokenizer`, or words).
    pub tokenize: prompt::Tokenize,
    /// The instances' context limit (`instance.max_model_len`), if any.
    pub max_model_len: Option<u32>,
    /// Requests refused as vLLM refuses them (bad input).
    pub refused: AtomicU64,
    /// Requests in the servers now, and the most there may be.
    pub in_flight: AtomicU64,
    pub max_requests: u64,
    /// Requests refused with 503 because the servers were full.
    pub full: AtomicU64,
    /// Streams whose client went away before the end.
    pub disconnected: AtomicU64,
    /// Seconds since the Unix epoch at start (`created`).
    pub created: u64,
    /// Next completion id.
    pub next_id: AtomicU64,
    /// `--metrics-log`: one JSON line per `/metrics` answered (its time and
    /// gauges), written at the end; at most [`METRICS_LOG_CAP`] lines.
    pub metrics_log: Option<Mutex<Vec<String>>>,
    /// `[[serve.faults]]` as the engine thread publishes them.
    pub faults: Arc<FaultState>,
    /// The run's seed (which requests an `errors` fault fails).
    pub seed: u64,
    /// Requests each instance's own server was sent (the `errors` draw).
    pub sent_to: Vec<AtomicU64>,
    /// Requests answered 503 by a fault (`down` or `errors`).
    pub faulted: AtomicU64,
}

/// The most `/metrics` answers `--metrics-log` keeps (a scrape a second
/// of 17 endpoints for about 16 hours).
pub const METRICS_LOG_CAP: usize = 1_000_000;

/// One endpoint: an instance's server, or the gateway (`None`).
#[derive(Clone)]
pub struct Endpoint {
    pub shared: Arc<Shared>,
    pub instance: Option<u32>,
}

/// The routes of one server.
pub fn router(endpoint: Endpoint) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/v1/load_lora_adapter", post(load_lora))
        .route("/v1/unload_lora_adapter", post(unload_lora))
        .route("/health", get(health))
        .route("/ready", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(endpoint)
}

/// vLLM's error body.
fn error(status: StatusCode, kind: &str, message: String) -> Response {
    let body = json!({
        "object": "error",
        "message": message,
        "type": kind,
        "param": null,
        "code": status.as_u16(),
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A refused request: status, vLLM's error type, message.
type Refusal = (StatusCode, &'static str, String);

fn bad_request(message: String) -> Refusal {
    (StatusCode::BAD_REQUEST, "BadRequestError", message)
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "NotFoundError", "Not Found".into())
}

async fn health(State(e): State<Endpoint>) -> StatusCode {
    match e.instance {
        Some(i) if e.shared.faults.is_down(i) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::OK,
    }
}

/// A request to an instance's own server that a fault answers 503: the
/// server is down (a connection opened before it went down), or an
/// `errors` fault drew it.
fn fault_answer(e: &Endpoint) -> Option<Response> {
    let i = e.instance?;
    let s = &e.shared;
    let n = s.sent_to.get(i as usize)?.fetch_add(1, Ordering::Relaxed);
    let message = if s.faults.is_down(i) {
        format!("blis serve: instance {i} is down (an injected fault)")
    } else if super::faults::draw_error(s.seed ^ (u64::from(i) << 40), n, s.faults.error_rate(i)) {
        format!("blis serve: instance {i} answered 503 (an injected errors fault)")
    } else {
        return None;
    };
    s.faulted.fetch_add(1, Ordering::Relaxed);
    Some(error(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailableError",
        message,
    ))
}

async fn models(State(e): State<Endpoint>) -> Response {
    let s = &e.shared;
    let mut data = vec![json!({
        "id": s.model, "object": "model", "created": s.created, "owned_by": "blis",
        "root": s.model, "parent": null, "max_model_len": s.max_model_len,
    })];
    for a in s.adapters.iter().filter(|a| loaded(&e, a)) {
        data.push(json!({
            "id": a, "object": "model", "created": s.created, "owned_by": "blis",
            "root": a, "parent": s.model,
        }));
    }
    axum::Json(json!({ "object": "list", "data": data })).into_response()
}

/// Whether endpoint `e` has adapter `name` loaded.
fn loaded(e: &Endpoint, name: &str) -> bool {
    e.shared.adapters.iter().any(|a| a == name)
        && !e
            .shared
            .unloaded
            .lock()
            .is_ok_and(|u| u.contains(&(e.instance, name.to_string())))
}

/// `lora_name` of a load or unload body.
fn lora_name(body: &[u8]) -> Result<String, Refusal> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        bad_request(format!(
            "Invalid JSON body: {}",
            crate::text::clean(&e.to_string(), 200)
        ))
    })?;
    v.get("lora_name")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| bad_request("lora_name is required".into()))
}

/// vLLM's `/v1/load_lora_adapter`: an adapter the run file declares.
async fn load_lora(State(e): State<Endpoint>, body: Bytes) -> Response {
    let name = match lora_name(&body) {
        Ok(n) => n,
        Err((st, k, m)) => return error(st, k, m),
    };
    let shown = crate::text::clean(&name, 200);
    if !e.shared.adapters.contains(&name) {
        return error(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            format!("The lora adapter '{shown}' is not one of the run file's (its workload names the adapters blis serve can load)"),
        );
    }
    let removed = e
        .shared
        .unloaded
        .lock()
        .is_ok_and(|mut u| u.remove(&(e.instance, name.clone())));
    if !removed {
        return error(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            format!("The lora adapter '{shown}' has already been loaded."),
        );
    }
    (
        StatusCode::OK,
        format!("Success: LoRA adapter '{shown}' added successfully."),
    )
        .into_response()
}

/// vLLM's `/v1/unload_lora_adapter`.
async fn unload_lora(State(e): State<Endpoint>, body: Bytes) -> Response {
    let name = match lora_name(&body) {
        Ok(n) => n,
        Err((st, k, m)) => return error(st, k, m),
    };
    let shown = crate::text::clean(&name, 200);
    if !loaded(&e, &name) {
        return error(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            format!("The lora adapter '{shown}' cannot be found."),
        );
    }
    if let Ok(mut u) = e.shared.unloaded.lock() {
        u.insert((e.instance, name.clone()));
    }
    (
        StatusCode::OK,
        format!("Success: LoRA adapter '{shown}' removed successfully."),
    )
        .into_response()
}

async fn completions(State(e): State<Endpoint>, headers: HeaderMap, body: Bytes) -> Response {
    generate(e, headers, body, false).await
}

async fn chat(State(e): State<Endpoint>, headers: HeaderMap, body: Bytes) -> Response {
    generate(e, headers, body, true).await
}

/// A request, checked as vLLM checks it.
struct Asked {
    prompted: Prompted,
    /// The LoRA adapter asked for (an index into `Shared::adapters`).
    adapter: Option<u32>,
    max_tokens: u32,
    stream: bool,
    usage_in_stream: bool,
    model: String,
}

/// Parse and check a body; the answer to send when it is refused.
fn parse(e: &Endpoint, body: &[u8], chat: bool) -> Result<Asked, Refusal> {
    let s = &*e.shared;
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        bad_request(format!(
            "Invalid JSON body: {}",
            crate::text::clean(&e.to_string(), 200)
        ))
    })?;
    let Some(o) = v.as_object() else {
        return Err(bad_request("The request body must be a JSON object".into()));
    };
    let model = o
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(&s.model)
        .to_string();
    if model != s.model && !loaded(e, &model) {
        return Err((
            StatusCode::NOT_FOUND,
            "NotFoundError",
            format!(
                "The model `{}` does not exist.",
                crate::text::clean(&model, 200)
            ),
        ));
    }
    if o.get("n").and_then(Value::as_u64).is_some_and(|n| n != 1) {
        return Err(bad_request("blis serve answers n = 1 only".into()));
    }
    let prompted = if chat {
        prompt::from_messages(o.get("messages"), s.block_size, &s.tokenize)
    } else {
        prompt::from_prompt(o.get("prompt"), s.block_size, &s.tokenize)
    }
    .map_err(bad_request)?;
    let asked = o
        .get(if chat {
            "max_completion_tokens"
        } else {
            "max_tokens"
        })
        .or_else(|| o.get("max_tokens"))
        .and_then(Value::as_u64);
    let room = s
        .max_model_len
        .map(|m| u64::from(m).saturating_sub(u64::from(prompted.tokens)));
    let max_tokens = match asked {
        Some(0) => return Err(bad_request("max_tokens must be at least 1, got 0.".into())),
        Some(m) => m,
        None if chat => room.unwrap_or(prompt::DEFAULT_CHAT_MAX_TOKENS),
        None => 16,
    };
    if let Some(limit) = s.max_model_len {
        let total = u64::from(prompted.tokens) + max_tokens;
        if total > u64::from(limit) {
            return Err(bad_request(format!(
                "This model's maximum context length is {limit} tokens. However, you requested {total} tokens ({} in the messages, {max_tokens} in the completion). Please reduce the length of the messages or completion.",
                prompted.tokens
            )));
        }
    }
    let stream = o.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let usage_in_stream = o
        .get("stream_options")
        .and_then(|so| so.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let adapter = s
        .adapters
        .iter()
        .position(|a| *a == model)
        .map(|i| i as u32);
    Ok(Asked {
        prompted,
        adapter,
        max_tokens: u32::try_from(max_tokens).unwrap_or(u32::MAX),
        stream,
        usage_in_stream,
        model,
    })
}

/// A request counted in the servers until it is dropped; a stream
/// dropped before its end (the client went away) is counted too.
struct InFlight {
    shared: Arc<Shared>,
    ended: bool,
}

impl InFlight {
    /// The request ended as it should (answered, refused or lost to a
    /// fault).
    fn finish(&mut self) {
        self.ended = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.shared.in_flight.fetch_sub(1, Ordering::Relaxed);
        if !self.ended {
            self.shared.disconnected.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn generate(e: Endpoint, headers: HeaderMap, body: Bytes, chat: bool) -> Response {
    let received = std::time::Instant::now();
    if let Some(r) = fault_answer(&e) {
        return r;
    }
    let s = Arc::clone(&e.shared);
    if s.in_flight.fetch_add(1, Ordering::Relaxed) >= s.max_requests {
        s.in_flight.fetch_sub(1, Ordering::Relaxed);
        s.full.fetch_add(1, Ordering::Relaxed);
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailableError",
            format!(
                "blis serve: {} requests are in the servers, the most --max-requests allows; try again later",
                s.max_requests
            ),
        );
    }
    let mut guard = InFlight {
        shared: Arc::clone(&s),
        ended: false,
    };
    let asked = match parse(&e, &body, chat) {
        Ok(a) => a,
        Err((status, kind, message)) => {
            s.refused.fetch_add(1, Ordering::Relaxed);
            guard.ended = true;
            return error(status, kind, message);
        }
    };
    let mut req = Request {
        input_len: asked.prompted.tokens,
        output_len: asked.max_tokens,
        output_seed: asked.prompted.seed,
        slo_class: prompt::slo_class(&headers),
        adapter: asked.adapter.into(),
        ..Request::default()
    };
    for seg in &asked.prompted.segments {
        req.prompt.push(*seg);
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let sent = s.commands.lock().is_ok_and(|c| {
        c.send(Command::Submit {
            req: Box::new(req),
            pin: e.instance,
            tx,
            received,
        })
        .is_ok()
    });
    if !sent {
        guard.ended = true;
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailableError",
            "the simulated engine has stopped".into(),
        );
    }
    let id = format!(
        "{}-{}",
        if chat { "chatcmpl" } else { "cmpl" },
        s.next_id.fetch_add(1, Ordering::Relaxed)
    );
    let chunk = Chunk {
        id,
        model: asked.model.clone(),
        created: s.created,
        chat,
    };
    let prompt_tokens = asked.prompted.tokens;
    if asked.stream {
        streamed(rx, chunk, guard, asked.usage_in_stream, prompt_tokens)
    } else {
        whole(rx, chunk, guard, prompt_tokens).await
    }
}

/// A whole (not streamed) answer, once the request ended. A client that
/// goes away drops this future: the guard counts it.
async fn whole(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Delivery>,
    chunk: Chunk,
    mut guard: InFlight,
    prompt_tokens: u32,
) -> Response {
    let mut generated = 0;
    let mut completed = false;
    let mut lost = false;
    while let Some(d) = rx.recv().await {
        match d {
            Delivery::Tokens { count, .. } => generated += count,
            Delivery::Lost => {
                lost = true;
                break;
            }
            Delivery::Done {
                completed: c,
                generated: g,
            } => {
                completed = c;
                generated = g;
                break;
            }
        }
    }
    guard.ended = true;
    if lost {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailableError",
            "blis serve: the instance running the request went down (an injected fault)".into(),
        );
    }
    if !completed {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailableError",
            "the request was dropped or rejected by the simulated cluster".into(),
        );
    }
    axum::Json(chunk.whole(generated, prompt_tokens)).into_response()
}

/// A streamed answer (SSE): a chunk per delivery, then the finish (with
/// `usage` when asked), or an error chunk, or a cut connection if the
/// instance went down.
fn streamed(
    rx: tokio::sync::mpsc::UnboundedReceiver<Delivery>,
    chunk: Chunk,
    guard: InFlight,
    usage: bool,
    prompt_tokens: u32,
) -> Response {
    let stream = futures_util::stream::unfold(
        (rx, chunk, 0u32, false, guard),
        move |(mut rx, chunk, mut generated, done, mut guard)| async move {
            if done {
                guard.finish();
                return None;
            }
            let d = rx.recv().await;
            let text = match d {
                // The instance went down: the connection is cut mid-answer.
                Some(Delivery::Lost) => {
                    guard.finish();
                    return Some((
                        Err(std::io::Error::other("the instance went down")),
                        (rx, chunk, generated, true, guard),
                    ));
                }
                Some(Delivery::Tokens { count, .. }) => {
                    generated += count;
                    (0..count).map(|_| chunk.token()).collect::<String>()
                }
                Some(Delivery::Done {
                    generated: g,
                    completed,
                }) => {
                    let mut t = String::new();
                    if completed {
                        t.push_str(&chunk.finish());
                        if usage {
                            t.push_str(&chunk.usage(prompt_tokens, g));
                        }
                    } else {
                        t.push_str(&chunk.failed());
                    }
                    t.push_str("data: [DONE]\n\n");
                    return Some((Ok(t), (rx, chunk, g, true, guard)));
                }
                None => return None,
            };
            Some((Ok(text), (rx, chunk, generated, false, guard)))
        },
    );
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The fixed parts of one answer's chunks.
struct Chunk {
    id: String,
    model: String,
    created: u64,
    chat: bool,
}

impl Chunk {
    fn choice(&self, text: &str, finish: Option<&str>) -> Value {
        if self.chat {
            json!({"index": 0, "delta": {"content": text}, "logprobs": null, "finish_reason": finish})
        } else {
            json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish, "stop_reason": null})
        }
    }

    fn frame(&self, choices: Value, usage: Value) -> String {
        let object = if self.chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        let v = json!({
            "id": self.id, "object": object, "created": self.created,
            "model": self.model, "choices": choices, "usage": usage,
        });
        format!("data: {v}\n\n")
    }

    /// One token's chunk (every token is the word " tok").
    fn token(&self) -> String {
        self.frame(json!([self.choice(" tok", None)]), Value::Null)
    }

    fn finish(&self) -> String {
        self.frame(json!([self.choice("", Some("length"))]), Value::Null)
    }

    fn failed(&self) -> String {
        let v = json!({"error": {"object": "error", "message": "the request was dropped by the simulated instance", "type": "ServiceUnavailableError", "code": 503}});
        format!("data: {v}\n\n")
    }

    fn usage(&self, prompt: u32, generated: u32) -> String {
        self.frame(
            json!([]),
            json!({"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}),
        )
    }

    /// A non-streamed answer.
    fn whole(&self, generated: u32, prompt: u32) -> Value {
        let text: String = (0..generated).map(|_| " tok").collect();
        let (object, choice) = if self.chat {
            (
                "chat.completion",
                json!({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": null, "finish_reason": "length"}),
            )
        } else {
            (
                "text_completion",
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": "length", "stop_reason": null}),
            )
        };
        json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model,
            "choices": [choice],
            "usage": {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated},
        })
    }
}

async fn metrics(State(e): State<Endpoint>) -> Response {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sent = e
        .shared
        .commands
        .lock()
        .is_ok_and(|c| c.send(Command::Load { reply: tx }).is_ok());
    let snap = match (sent, rx.await) {
        (true, Ok(s)) => s,
        _ => Snapshot::default(),
    };
    if let Some(log) = &e.shared.metrics_log {
        log_scrape(log, &snap, e.instance);
    }
    let text = super::metrics::render(&e.shared.model, &e.shared.adapters, &snap, e.instance);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// One `/metrics` answer for `--metrics-log`: wall time (ms since the Unix
/// epoch), simulated time (s), the endpoint and its gauges.
fn log_scrape(log: &Mutex<Vec<String>>, snap: &Snapshot, instance: Option<u32>) {
    let Ok(mut lines) = log.lock() else {
        return;
    };
    if lines.len() >= METRICS_LOG_CAP {
        return;
    }
    let wall_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3);
    let g = super::metrics::gauges(snap, instance);
    lines.push(
        json!({
            "wall_ms": wall_ms,
            "sim_s": snap.at as f64 / 1e6,
            "endpoint": instance.map_or_else(|| "gateway".to_string(), |i| format!("instance {i}")),
            "num_requests_running": g.running,
            "num_requests_waiting": g.waiting,
            "kv_cache_usage_perc": g.kv_usage,
        })
        .to_string(),
    );
}

//! `blis observe`: its flags, as [`crate::observe::ObserveArgs`].

use std::path::PathBuf;

use clap::Args;

use crate::observe::{ApiFormat, ObserveArgs};

/// `--api-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ApiFormatFlag {
    /// `POST /v1/completions` with `prompt`.
    Completions,
    /// `POST /v1/chat/completions` with `messages`.
    Chat,
}

/// `blis observe` flags (→ [`crate::observe::ObserveArgs`]).
#[derive(Debug, Args)]
pub struct ObserveFlags {
    /// TOML run file whose `[workload]` (and `seed`, `horizon_us`) give the
    /// requests (default: the built-in scenario's workload).
    pub run_file: Option<PathBuf>,
    /// Server base URL, e.g. `http://127.0.0.1:8000` (a trailing `/v1` is accepted).
    #[arg(long)]
    pub server_url: String,
    /// Model name sent in every request body.
    #[arg(long)]
    pub model: String,
    /// `completions` (POST /v1/completions) or `chat` (POST /v1/chat/completions).
    #[arg(long, value_enum, default_value = "completions")]
    pub api_format: ApiFormatFlag,
    /// Bearer token sent as `Authorization: Bearer KEY`.
    #[arg(long)]
    pub api_key: Option<String>,
    /// TraceV2 header file to write (YAML).
    #[arg(long)]
    pub trace_header: PathBuf,
    /// TraceV2 data file to write (CSV).
    #[arg(long)]
    pub trace_data: PathBuf,
    /// A reference workload-spec YAML (v1/v2) instead of the run file's `[workload]`.
    #[arg(long)]
    pub workload_spec: Option<PathBuf>,
    /// Workload preset: chatbot, contentgen, summarization, multidoc.
    #[arg(long)]
    pub workload: Option<String>,
    /// Aggregate request rate, req/s (`workload.aggregate_rate`).
    #[arg(long, allow_negative_numbers = true)]
    pub rate: Option<f64>,
    /// Closed-loop virtual users: each sends its next request when the
    /// previous one finished plus `--think-time-ms` (arrival times unused).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Think time of `--concurrency` users, ms.
    #[arg(long, allow_negative_numbers = true)]
    pub think_time_ms: Option<f64>,
    /// Requests to send (`workload.num_requests`; 0 = the workload's own).
    #[arg(long)]
    pub num_requests: Option<u64>,
    /// No request scheduled later than this offset is sent, µs (`horizon_us`).
    #[arg(long, allow_negative_numbers = true)]
    pub horizon: Option<i64>,
    /// Seed of the workload generator (default: the run file's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Mean prompt length, tokens (`workload.prompt_tokens`).
    #[arg(long)]
    pub prompt_tokens: Option<u32>,
    /// Mean output length, tokens (`workload.output_tokens`).
    #[arg(long)]
    pub output_tokens: Option<u32>,
    /// Set any run-file key: `section.key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Most requests in flight at once.
    #[arg(long, default_value_t = 256)]
    pub max_concurrency: usize,
    /// The first N dispatches are sent but not recorded (recorded ids start at N).
    #[arg(long, default_value_t = 0)]
    pub warmup_requests: u64,
    /// Before measuring, send unrecorded 256-word requests (max_tokens 64,
    /// 4 at a time) for this many seconds.
    #[arg(long, default_value_t = 0.0)]
    pub prewarm_duration: f64,
    /// Send every request non-streaming (wins over `--record-itl`).
    #[arg(long)]
    pub no_streaming: bool,
    /// Drop `min_tokens`; `max_tokens` 2³¹−1 (completions) or absent (chat).
    #[arg(long)]
    pub unconstrained_output: bool,
    /// HTTP timeout, s, of each phase of a request (connect, send, each wait
    /// for data) and of a `/metrics` scrape: a request over it is a `timeout` row.
    #[arg(long, default_value_t = 300.0)]
    pub timeout: f64,
    /// Deadline, s, of a whole request from its send (a stream that never
    /// ends, a server that drips bytes): a request over it is a `timeout` row.
    #[arg(long, default_value_t = 3600.0)]
    pub request_timeout: f64,
    /// Stream every request and write every chunk's time to the ITL CSV.
    #[arg(long)]
    pub record_itl: bool,
    /// ITL CSV path (default: the trace data path with `.itl.csv` for `.csv`).
    #[arg(long)]
    pub itl_output: Option<PathBuf>,
    /// Read vLLM's prefix-cache counters from `/metrics` before and after.
    #[arg(long)]
    pub scrape_kv_metrics: bool,
    /// Metrics URL (default `<server-url>/metrics`).
    #[arg(long)]
    pub kv_metrics_url: Option<String>,
    /// vLLM commit, recorded verbatim in `observed_kv_metrics`.
    #[arg(long)]
    pub vllm_commit: Option<String>,
    /// Server type recorded in the header.
    #[arg(long, default_value = "vllm")]
    pub server_type: String,
    /// Network round-trip time, ms: recorded in the header only.
    #[arg(long, default_value_t = 0.0)]
    pub rtt_ms: f64,
    /// After Ctrl-C, how long to wait for requests in flight, s.
    #[arg(long, default_value_t = 10.0)]
    pub drain_timeout: f64,
    /// Never show a progress bar.
    #[arg(long)]
    pub quiet: bool,
}

impl ObserveFlags {
    /// The flags as the library's observe description.
    pub fn options(&self) -> ObserveArgs {
        ObserveArgs {
            run_file: self.run_file.clone(),
            server_url: self.server_url.clone(),
            model: self.model.clone(),
            api_format: match self.api_format {
                ApiFormatFlag::Completions => ApiFormat::Completions,
                ApiFormatFlag::Chat => ApiFormat::Chat,
            },
            api_key: self.api_key.clone(),
            trace_header: self.trace_header.clone(),
            trace_data: self.trace_data.clone(),
            workload_spec: self.workload_spec.clone(),
            workload: self.workload.clone(),
            rate: self.rate,
            concurrency: self.concurrency,
            think_time_ms: self.think_time_ms,
            num_requests: self.num_requests,
            horizon: self.horizon,
            seed: self.seed,
            prompt_tokens: self.prompt_tokens,
            output_tokens: self.output_tokens,
            sets: self.sets.clone(),
            max_concurrency: self.max_concurrency,
            warmup_requests: self.warmup_requests,
            prewarm_duration: self.prewarm_duration,
            no_streaming: self.no_streaming,
            unconstrained_output: self.unconstrained_output,
            timeout: self.timeout,
            request_timeout: self.request_timeout,
            record_itl: self.record_itl,
            itl_output: self.itl_output.clone(),
            scrape_kv_metrics: self.scrape_kv_metrics,
            kv_metrics_url: self.kv_metrics_url.clone(),
            vllm_commit: self.vllm_commit.clone(),
            server_type: self.server_type.clone(),
            rtt_ms: self.rtt_ms,
            drain_timeout: self.drain_timeout,
            quiet: self.quiet,
        }
    }
}

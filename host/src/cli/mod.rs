//! The command line: clap definitions and the commands — the top layer.
//! Each command parses its flags into the library's descriptions
//! ([`crate::session`] and the modules behind it), calls the library and
//! prints; `main.rs` only dispatches and prints errors. Nothing below this
//! module imports it (`tests/tests/tidy.rs`).
//!
//! Exit codes: 0 success; 1 the run failed while running (a plugin panicked
//! or returned something invalid, an output file could not be written);
//! 2 bad input (command line, run file, trace, plugin library) — nothing ran;
//! 3 `blis plan` found no fleet that meets the SLOs (its outputs written);
//! 130 interrupted (what was recorded is kept).

mod calibrate;
mod commands;
mod load;
#[cfg(feature = "observe")]
mod observe;
mod plan;
mod replay;
mod scaffold;
#[cfg(feature = "serve")]
mod serve;
mod sweep;
mod tune;

use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

pub use commands::{dispatch, print_stdout, Failure};
pub use replay::ReplayArgs;

use crate::session::{self, ErrorKind};

/// The exit code of a failed command: 2 bad input (nothing ran), 1 a
/// failure while running, 3 a search with no answer (`blis plan`: nothing
/// in the space meets the SLOs), 130 an interrupt that kept what was
/// recorded.
pub fn exit_code(e: &Failure) -> i32 {
    match e.kind {
        ErrorKind::Input => 2,
        ErrorKind::Run => 1,
        ErrorKind::Infeasible => 3,
        ErrorKind::Interrupted => 130,
    }
}

/// Parse the command line (exits with clap's message and code 2 on a
/// mistake, prints help or version and exits 0 when asked).
pub fn parse() -> Cli {
    // clap keeps the version for the whole run: a short string leaked once.
    let version: &'static str = Box::leak(session::version().into_boxed_str());
    let matches = Cli::command().version(version).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// blis: a discrete-event simulator of LLM inference serving clusters with plugin policies.
#[derive(Debug, Parser)]
#[command(name = "blis", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a simulation and print the JSON report on stdout.
    Run(RunArgs),
    /// Check a run file (including plugins and their parameters) without running it.
    Validate(RunArgs),
    /// List or describe plugin policies.
    #[command(subcommand)]
    Plugins(PluginsCommand),
    /// Convert other formats to blis run-file TOML.
    #[command(subcommand)]
    Convert(ConvertCommand),
    /// Run a grid of runs from a sweep file (parallel, resumable, shardable), or merge shards.
    Sweep(sweep::SweepArgs),
    /// Write an HTML report with plots of a run's outputs or of a sweep directory.
    Report(sweep::ReportArgs),
    /// Replay a TraceV2 trace (header YAML + data CSV) on the cluster of a run file.
    Replay(replay::ReplayArgs),
    /// The cheapest fleet that meets the SLOs: search GPU types, TP, instance
    /// counts and policy variants by simulation (resumable, on all cores).
    Plan(plan::PlanArgs),
    /// Tune a policy's parameters on training traffic, judge them on held-out
    /// traffic, write the tuned run file (and llm-d file).
    Tune(tune::TuneArgs),
    /// Compare a real trace with a replay's SimResult array and write a calibration report.
    Calibrate(calibrate::CalibrateArgs),
    /// Drive a real OpenAI-compatible server (vLLM, llm-d, llama.cpp…) with a
    /// workload and record what it did as a TraceV2 (mode real).
    #[cfg(feature = "observe")]
    Observe(Box<observe::ObserveFlags>),
    /// Serve the run file's instances as simulated vLLM servers on real
    /// sockets (OpenAI API, /metrics), in wall-clock time.
    #[cfg(feature = "serve")]
    Serve(serve::ServeFlags),
}

/// `blis plugins …`
#[derive(Debug, Subcommand)]
pub enum PluginsCommand {
    /// Every library (name, version, origin) and its policies.
    List {
        /// Also load this plugin library (repeatable).
        #[arg(long = "plugin", value_name = "PATH")]
        plugins: Vec<PathBuf>,
    },
    /// Create a new plugin project NAME (in the current folder), one policy
    /// of every kind: a native crate (a `.so`) against this blis's exact
    /// plugin API, or with --wasm a WebAssembly component project (Rust or
    /// Python) against its WIT world.
    New {
        /// Project name, e.g. `my-scorer` (also the folder created).
        name: String,
        /// A WebAssembly component project (a portable, sandboxed `.wasm`)
        /// instead of a native crate.
        #[arg(long)]
        wasm: bool,
        /// The language of the --wasm project.
        #[arg(long, value_enum, value_name = "LANG", requires = "wasm")]
        lang: Option<WasmLang>,
    },
    /// One policy's summary and parameter documentation.
    Show {
        /// Policy name, or `library::name`.
        name: String,
        /// Also load this plugin library (repeatable).
        #[arg(long = "plugin", value_name = "PATH")]
        plugins: Vec<PathBuf>,
    },
}

/// The language of `blis plugins new --wasm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WasmLang {
    /// A Rust crate built for wasm32-unknown-unknown (the default).
    Rust,
    /// A Python module built with componentize-py.
    Python,
}

/// `blis convert …`
#[derive(Debug, Subcommand)]
pub enum ConvertCommand {
    /// Turn a reference-simulator v2 workload-spec YAML into a `[workload]` TOML table.
    WorkloadSpec {
        /// The YAML file.
        file: PathBuf,
    },
    /// Turn an inference-perf config (shared_prefix data, load stages), or a
    /// reference workload spec with an `inference_perf` block, into a
    /// `[workload]` table with `[workload.inference_perf]`; or the folder of
    /// an inference-perf run (results/config.yaml, profile.yaml,
    /// exp-config.yaml) into a whole run file of what its client ran.
    InferencePerf {
        /// The YAML file, or the run's folder.
        file: PathBuf,
    },
    /// Turn an llm-d EndpointPickerConfig YAML into a `[routing]` TOML section.
    EppConfig {
        /// The YAML file.
        file: PathBuf,
    },
    /// Write a run file's routing, P/D stages, admission and flow control as an llm-d
    /// EndpointPickerConfig YAML (stdout) that llm-d's loader accepts and
    /// `--epp-config` runs identically; a routing llm-d cannot express is
    /// refused by name.
    ToEppConfig {
        #[command(flatten)]
        run: Box<RunArgs>,
    },
}

/// A run file plus command-line overrides.
#[derive(Debug, Default, Args)]
pub struct RunArgs {
    /// TOML run file (default: the built-in scenario — 4 instances, weighted routing, chat-like workload).
    pub run_file: Option<PathBuf>,
    /// Master random seed.
    #[arg(long, allow_negative_numbers = true)]
    pub seed: Option<u64>,
    /// Number of instances (`instance.count`).
    #[arg(long)]
    pub num_instances: Option<u32>,
    /// Aggregate request rate in requests/s (`workload.aggregate_rate`).
    #[arg(long, allow_negative_numbers = true)]
    pub rate: Option<f64>,
    /// Number of requests (`workload.num_requests`).
    #[arg(long)]
    pub num_requests: Option<u64>,
    /// Simulated time limit in µs (`horizon_us`).
    #[arg(long, allow_negative_numbers = true)]
    pub horizon: Option<i64>,
    /// CPU KV tier capacity in blocks per instance (`instance.kv_offload.cpu_blocks`; 0 = none).
    #[arg(long)]
    pub kv_cpu_blocks: Option<u64>,
    /// P/D decider: never, always, prefix-threshold or a decider plugin (`pd.decider`; needs `[[pools]]`).
    #[arg(long)]
    pub pd_decider: Option<String>,
    /// Uncached prompt tokens above which `prefix-threshold` disaggregates (`pd.prefix_threshold`).
    #[arg(long, allow_negative_numbers = true)]
    pub pd_prefix_threshold: Option<i64>,
    /// KV transfer bandwidth per link in GB/s (`pd.transfer_bandwidth_gbps`).
    #[arg(long, allow_negative_numbers = true)]
    pub kv_transfer_bandwidth: Option<f64>,
    /// Admission policy (`admission.policy`).
    #[arg(long)]
    pub admission_policy: Option<String>,
    /// Routing policy: `weighted` or a router name (`routing.policy`).
    #[arg(long)]
    pub routing_policy: Option<String>,
    /// Weighted scorers as `name:weight,…` (sets `routing.scorers`, implies `--routing-policy weighted`).
    #[arg(long)]
    pub routing_scorers: Option<String>,
    /// An llm-d EndpointPickerConfig YAML read as llm-d reads it, in place of the run file's routing, admission and flow control (`routing.epp_config`).
    #[arg(long, value_name = "FILE.yaml")]
    pub epp_config: Option<PathBuf>,
    /// Load a plugin library (repeatable; added to `[[plugins]]`).
    #[arg(long = "plugin", value_name = "PATH")]
    pub plugins: Vec<PathBuf>,
    /// Per-request results file (`output.results_path`).
    #[arg(long)]
    pub results_path: Option<PathBuf>,
    /// Time series file, one JSON line per interval (`output.timeseries_path`).
    #[arg(long)]
    pub timeseries_path: Option<PathBuf>,
    /// Decision trace file (`output.trace_path`; implies trace level `decisions`).
    #[arg(long)]
    pub trace_path: Option<PathBuf>,
    /// TraceV2 export: writes P.yaml + P.csv, one row per arrival (`output.trace_v2`).
    #[arg(long, value_name = "P")]
    pub trace_output: Option<PathBuf>,
    /// Workload preset: chatbot, contentgen, summarization, multidoc (`workload.preset`).
    #[arg(long)]
    pub workload: Option<String>,
    /// Mean prompt length in tokens (`workload.prompt_tokens`).
    #[arg(long)]
    pub prompt_tokens: Option<u32>,
    /// Prompt length standard deviation (`workload.prompt_tokens_stdev`).
    #[arg(long)]
    pub prompt_tokens_stdev: Option<u32>,
    /// Minimum prompt length (`workload.prompt_tokens_min`).
    #[arg(long)]
    pub prompt_tokens_min: Option<u32>,
    /// Maximum prompt length (`workload.prompt_tokens_max`).
    #[arg(long)]
    pub prompt_tokens_max: Option<u32>,
    /// Mean output length in tokens (`workload.output_tokens`).
    #[arg(long)]
    pub output_tokens: Option<u32>,
    /// Output length standard deviation (`workload.output_tokens_stdev`).
    #[arg(long)]
    pub output_tokens_stdev: Option<u32>,
    /// Minimum output length (`workload.output_tokens_min`).
    #[arg(long)]
    pub output_tokens_min: Option<u32>,
    /// Maximum output length (`workload.output_tokens_max`).
    #[arg(long)]
    pub output_tokens_max: Option<u32>,
    /// Shared prefix length in tokens (`workload.prefix_tokens`).
    #[arg(long)]
    pub prefix_tokens: Option<u32>,
    /// Set any run-file key: `section.key=value` (TOML value syntax; repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Never show a progress bar.
    #[arg(long)]
    pub quiet: bool,
}

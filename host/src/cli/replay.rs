//! `blis replay --trace-header H --trace-data D [RUN_FILE] [flags]`: the run
//! file (or the built-in default) and the flags describe the cluster —
//! model, instances, pools, policies, plugins — and a TraceV2 trace gives
//! the requests. The run file's `[workload]` is replaced by
//! `[workload.trace_v2]` (`workload::TraceV2Spec`), so a replay is
//! exactly `blis run` of that run file: every plugin kind works, and the
//! report on stdout is blis's usual JSON.
//!
//! The run file is built by [`session::load_replay`] from the flags'
//! [`ReplayOptions`]; [`replay`] is the command.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;

use super::commands::Failure;
use crate::session::{self, Base, ReplayOptions};

/// `blis replay` flags.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// TraceV2 header YAML.
    #[arg(long, value_name = "FILE")]
    pub trace_header: PathBuf,
    /// TraceV2 data CSV.
    #[arg(long, value_name = "FILE")]
    pub trace_data: PathBuf,
    /// TOML run file describing the cluster (default: the built-in
    /// scenario's cluster); its `[workload]` is replaced by the trace.
    pub run_file: Option<PathBuf>,
    /// `fixed` (every row at its injection time) or `closed-loop` (session
    /// rounds follow completions plus think time).
    #[arg(long, value_name = "MODE", default_value = "fixed")]
    pub session_mode: String,
    /// Constant think time in ms between session rounds (closed-loop only).
    #[arg(long, allow_negative_numbers = true)]
    pub think_time_ms: Option<f64>,
    /// Think-time distribution, `lognormal:mu=M,sigma=S[,min=T][,max=T]` or
    /// `constant:value=T` (closed-loop only).
    #[arg(long)]
    pub think_time_dist: Option<String>,
    /// Seed of the token content (default: the run file's seed).
    #[arg(long, allow_negative_numbers = true)]
    pub seed: Option<u64>,
    /// Model name (`model.name`).
    #[arg(long)]
    pub model: Option<String>,
    /// Number of instances (`instance.count`).
    #[arg(long)]
    pub num_instances: Option<u32>,
    /// Simulated time limit in µs (default: none, the trace bounds the run; the
    /// reference's default is 2 × the largest injection time).
    #[arg(long, allow_negative_numbers = true)]
    pub horizon: Option<i64>,
    /// Admission policy (`admission.policy`).
    #[arg(long)]
    pub admission_policy: Option<String>,
    /// Routing policy (`routing.policy`).
    #[arg(long)]
    pub routing_policy: Option<String>,
    /// Weighted scorers as `name:weight,…` (implies `--routing-policy weighted`).
    #[arg(long)]
    pub routing_scorers: Option<String>,
    /// Load a plugin library (repeatable).
    #[arg(long = "plugin", value_name = "PATH")]
    pub plugins: Vec<PathBuf>,
    /// SimResult JSON array, one entry per completed trace row, sorted by request_id.
    #[arg(long)]
    pub results_path: Option<PathBuf>,
    /// Aggregate metrics JSON (the report's cluster block and `cache_hit_rate`).
    #[arg(long)]
    pub metrics_path: Option<PathBuf>,
    /// Write the replayed trace as P.yaml + P.csv (mode `replayed`).
    #[arg(long, value_name = "P")]
    pub trace_output: Option<PathBuf>,
    /// Set any run-file key: `section.key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Never show a progress bar.
    #[arg(long)]
    pub quiet: bool,
}

impl ReplayArgs {
    /// The flags as the library's replay description.
    pub fn options(&self) -> ReplayOptions {
        ReplayOptions {
            trace_header: self.trace_header.clone(),
            trace_data: self.trace_data.clone(),
            session_mode: self.session_mode.clone(),
            think_time_ms: self.think_time_ms,
            think_time_dist: self.think_time_dist.clone(),
            seed: self.seed,
            model: self.model.clone(),
            num_instances: self.num_instances,
            horizon: self.horizon,
            admission_policy: self.admission_policy.clone(),
            routing_policy: self.routing_policy.clone(),
            routing_scorers: self.routing_scorers.clone(),
            plugins: self.plugins.clone(),
            results_path: self.results_path.clone(),
            metrics_path: self.metrics_path.clone(),
            trace_output: self.trace_output.clone(),
            sets: self.sets.clone(),
        }
    }
}

/// Check the flags, build the run file and run it.
pub fn replay(args: &ReplayArgs) -> Result<String, Failure> {
    let base = args.run_file.clone().map_or(Base::Builtin, Base::File);
    let (run, source) = session::load_replay(&base, &args.options(), |n| eprintln!("note: {n}"))?;
    let progress = !args.quiet && std::io::stderr().is_terminal();
    let done = session::simulate(&run, &source, progress, |n| eprintln!("note: {n}"))?;
    eprintln!(
        "replayed {} requests, {:.3} s of simulated time, {} events",
        done.arrived,
        done.simulated_us as f64 / 1e6,
        done.events
    );
    Ok(done.report)
}

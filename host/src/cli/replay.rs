//! `blis replay --trace-header H --trace-data D [RUN_FILE] [flags]`: the run
//! file (or the built-in default) and the flags describe the cluster —
//! model, instances, pools, policies, plugins — and a TraceV2 trace gives
//! the requests. The run file's `[workload]` is replaced by
//! `[workload.trace_v2]` (`workload::TraceV2Spec`), so a replay is
//! exactly `blis run` of that run file: every plugin kind works, and the
//! report on stdout is blis's usual JSON.
//!
//! [`load_replay`] / [`load_replay_from`] build that run file from the
//! flags without running it (the Python package's `blis.replay` runs it
//! with [`super::simulate_with`]); [`replay`] is the command.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::Args;

use super::commands::{simulate, usage, Failure};
use crate::config::overrides::{self, Edit};
use crate::config::{self, RunFile, Source};

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

fn absolute(p: &Path) -> String {
    let a = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    };
    a.display().to_string()
}

/// Check the flags, build the run file and run it.
pub fn replay(args: &ReplayArgs) -> Result<String, Failure> {
    let (run, source) = load_replay(args, |n| eprintln!("note: {n}"))?;
    let progress = !args.quiet && std::io::stderr().is_terminal();
    let done = simulate(&run, &source, progress, |n| eprintln!("note: {n}"))?;
    eprintln!(
        "replayed {} requests, {:.3} s of simulated time, {} events",
        done.arrived,
        done.simulated_us as f64 / 1e6,
        done.events
    );
    Ok(done.report)
}

/// The run `blis replay ARGS` simulates: the run file (or the built-in
/// scenario) with its `[workload]` replaced by the trace and the flags
/// applied. Notes about it go to `note`.
pub fn load_replay(
    args: &ReplayArgs,
    note: impl FnMut(&str),
) -> Result<(RunFile, Source), Failure> {
    let source = match &args.run_file {
        Some(p) => Source::read(p).map_err(usage)?,
        None => Source::builtin(),
    };
    load_replay_from(source, args, note)
}

/// [`load_replay`] with the run file's text already read (`args.run_file`
/// is not used): the Python package's run files given as tables.
pub fn load_replay_from(
    source: Source,
    args: &ReplayArgs,
    mut note: impl FnMut(&str),
) -> Result<(RunFile, Source), Failure> {
    let closed = match args.session_mode.as_str() {
        "fixed" => false,
        "closed-loop" => true,
        other => {
            return Err(usage(format!(
                "--session-mode {other}: accepted values are fixed and closed-loop"
            )))
        }
    };
    if !closed {
        for (flag, set) in [
            ("--think-time-ms", args.think_time_ms.is_some()),
            ("--think-time-dist", args.think_time_dist.is_some()),
        ] {
            if set {
                return Err(usage(format!(
                    "{flag} needs --session-mode closed-loop: think times apply only to closed-loop session rounds"
                )));
            }
        }
    }
    if args.think_time_ms.is_some() && args.think_time_dist.is_some() {
        return Err(usage(
            "--think-time-ms and --think-time-dist are both given; give one (--think-time-ms N means constant:value=Nms)",
        ));
    }
    if let Some(ms) = args.think_time_ms {
        if !(ms.is_finite() && ms >= 0.0) {
            return Err(usage(format!("--think-time-ms {ms}: must be a number ≥ 0")));
        }
    }
    if let Some(d) = &args.think_time_dist {
        crate::workload::ThinkTime::parse(d)
            .map_err(|e| usage(format!("--think-time-dist: {e}")))?;
    }
    // The file must be valid on its own first (its own messages).
    config::parse(&source).map_err(usage)?;
    let mut table: toml::Table = source
        .text
        .parse()
        .map_err(|e: toml::de::Error| usage(e.to_string()))?;
    if table.remove("workload").is_some() && source.file().is_some() {
        note("the trace replaces the run file's [workload]");
    }
    let mut edits = Vec::new();
    let mut set = |path: &str, v: toml::Value| edits.push(Edit::Set(path.to_string(), v));
    let s = |x: &str| toml::Value::String(x.to_string());
    set("workload.trace_v2.header", s(&absolute(&args.trace_header)));
    set("workload.trace_v2.data", s(&absolute(&args.trace_data)));
    set("workload.trace_v2.session_mode", s(&args.session_mode));
    if let Some(v) = args.think_time_ms {
        set("workload.trace_v2.think_time_ms", toml::Value::Float(v));
    }
    if let Some(v) = &args.think_time_dist {
        set("workload.trace_v2.think_time_dist", s(v));
    }
    if let Some(v) = args.seed {
        set("seed", config::seed::to_value(v));
    }
    if let Some(v) = &args.model {
        set("model.name", s(v));
    }
    if let Some(v) = args.num_instances {
        set("instance.count", toml::Value::Integer(i64::from(v)));
    }
    if let Some(v) = args.horizon {
        set("horizon_us", toml::Value::Integer(v));
    }
    if let Some(v) = &args.admission_policy {
        set("admission.policy", s(v));
    }
    if let Some(v) = &args.routing_policy {
        set("routing.policy", s(v));
    }
    if let Some(v) = &args.routing_scorers {
        set(
            "routing.scorers",
            overrides::parse_scorers(v).map_err(usage)?,
        );
        if args.routing_policy.is_none() {
            set("routing.policy", s("weighted"));
        }
    }
    if let Some(v) = &args.results_path {
        set("output.sim_results_path", s(&absolute(v)));
    }
    if let Some(v) = &args.metrics_path {
        set("output.metrics_path", s(&absolute(v)));
    }
    if let Some(v) = &args.trace_output {
        set("output.trace_v2", s(&absolute(v)));
    }
    for x in &args.sets {
        let (p, v) = overrides::parse_set(x).map_err(usage)?;
        set(&p, v);
    }
    for p in &args.plugins {
        let mut t = toml::Table::new();
        t.insert("path".into(), s(&absolute(p)));
        edits.push(Edit::Push("plugins".into(), t));
    }
    let run = overrides::apply(&source, table, &edits).map_err(usage)?;
    Ok((run, source))
}

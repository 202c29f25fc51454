//! A replay description: a TraceV2 trace (header YAML + data CSV) in place
//! of a run file's `[workload]`, with `blis replay`'s options. The result
//! is a [`RunFile`] whose workload is `[workload.trace_v2]`
//! (`workload::TraceV2Spec`), so a replay is exactly a run of that file:
//! every plugin kind works and the report is blis's usual JSON.

use std::path::PathBuf;

use super::overrides::absolute;
use super::{Base, Error};
use crate::config::overrides::{self, Edit};
use crate::config::{self, RunFile, Source};

/// What `blis replay`'s flags set (the CLI's `--results-path` is
/// `output.sim_results_path` here, a SimResult array, and `--metrics-path`
/// `output.metrics_path`). Relative paths are against the current folder.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// TraceV2 header YAML.
    pub trace_header: PathBuf,
    /// TraceV2 data CSV.
    pub trace_data: PathBuf,
    /// `fixed` (every row at its injection time) or `closed-loop` (session
    /// rounds follow completions plus think time).
    pub session_mode: String,
    /// Constant think time in ms between session rounds (closed-loop only).
    pub think_time_ms: Option<f64>,
    /// Think-time distribution (closed-loop only), e.g. `constant:value=T`.
    pub think_time_dist: Option<String>,
    /// `seed` (the token content's).
    pub seed: Option<u64>,
    /// `model.name`.
    pub model: Option<String>,
    /// `instance.count`.
    pub num_instances: Option<u32>,
    /// `horizon_us`.
    pub horizon: Option<i64>,
    /// `admission.policy`.
    pub admission_policy: Option<String>,
    /// `routing.policy`.
    pub routing_policy: Option<String>,
    /// `routing.scorers` as `name:weight,…` (implies `routing.policy = "weighted"`).
    pub routing_scorers: Option<String>,
    /// Plugin libraries appended to `[[plugins]]`.
    pub plugins: Vec<PathBuf>,
    /// `output.sim_results_path`: the SimResult JSON array.
    pub results_path: Option<PathBuf>,
    /// `output.metrics_path`: the aggregate metrics JSON.
    pub metrics_path: Option<PathBuf>,
    /// `output.trace_v2`: the replayed trace as P.yaml + P.csv.
    pub trace_output: Option<PathBuf>,
    /// `section.key=value` edits, in order.
    pub sets: Vec<String>,
}

impl ReplayOptions {
    /// A fixed-mode replay of the trace with nothing else changed.
    pub fn new(trace_header: PathBuf, trace_data: PathBuf) -> Self {
        Self {
            trace_header,
            trace_data,
            session_mode: "fixed".into(),
            think_time_ms: None,
            think_time_dist: None,
            seed: None,
            model: None,
            num_instances: None,
            horizon: None,
            admission_policy: None,
            routing_policy: None,
            routing_scorers: None,
            plugins: Vec::new(),
            results_path: None,
            metrics_path: None,
            trace_output: None,
            sets: Vec::new(),
        }
    }
}

/// The run `blis replay` simulates: the base run file (or the built-in
/// scenario) with its `[workload]` replaced by the trace and the options
/// applied. Notes about it go to `note`.
pub fn load_replay(
    base: &Base,
    args: &ReplayOptions,
    mut note: impl FnMut(&str),
) -> Result<(RunFile, Source), Error> {
    let source = base.source()?;
    check_options(args)?;
    // The file must be valid on its own first (its own messages).
    config::parse(&source).map_err(Error::input)?;
    let mut table: toml::Table = source
        .text
        .parse()
        .map_err(|e: toml::de::Error| Error::input(e.to_string()))?;
    if table.remove("workload").is_some() && source.file().is_some() {
        note("the trace replaces the run file's [workload]");
    }
    let edits = replay_edits(args)?;
    let run = overrides::apply(&source, table, &edits).map_err(Error::input)?;
    Ok((run, source))
}

/// The session mode and think-time options agree with each other.
fn check_options(args: &ReplayOptions) -> Result<(), Error> {
    let closed = match args.session_mode.as_str() {
        "fixed" => false,
        "closed-loop" => true,
        other => {
            return Err(Error::input(format!(
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
                return Err(Error::input(format!(
                    "{flag} needs --session-mode closed-loop: think times apply only to closed-loop session rounds"
                )));
            }
        }
    }
    if args.think_time_ms.is_some() && args.think_time_dist.is_some() {
        return Err(Error::input(
            "--think-time-ms and --think-time-dist are both given; give one (--think-time-ms N means constant:value=Nms)",
        ));
    }
    if let Some(ms) = args.think_time_ms {
        if !(ms.is_finite() && ms >= 0.0) {
            return Err(Error::input(format!(
                "--think-time-ms {ms}: must be a number ≥ 0"
            )));
        }
    }
    if let Some(d) = &args.think_time_dist {
        crate::workload::ThinkTime::parse(d)
            .map_err(|e| Error::input(format!("--think-time-dist: {e}")))?;
    }
    Ok(())
}

/// Every option, as an edit of the run file, in a fixed order.
fn replay_edits(args: &ReplayOptions) -> Result<Vec<Edit>, Error> {
    let mut edits = Vec::new();
    let mut set = |path: &str, v: toml::Value| edits.push(Edit::Set(path.to_string(), v));
    let s = |x: &str| toml::Value::String(x.to_string());
    set("workload.trace_v2.header", s(&shown(&args.trace_header)));
    set("workload.trace_v2.data", s(&shown(&args.trace_data)));
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
            overrides::parse_scorers(v).map_err(Error::input)?,
        );
        if args.routing_policy.is_none() {
            set("routing.policy", s("weighted"));
        }
    }
    if let Some(v) = &args.results_path {
        set("output.sim_results_path", s(&shown(v)));
    }
    if let Some(v) = &args.metrics_path {
        set("output.metrics_path", s(&shown(v)));
    }
    if let Some(v) = &args.trace_output {
        set("output.trace_v2", s(&shown(v)));
    }
    for x in &args.sets {
        let (p, v) = overrides::parse_set(x).map_err(Error::input)?;
        set(&p, v);
    }
    for p in &args.plugins {
        let mut t = toml::Table::new();
        t.insert("path".into(), s(&shown(p)));
        edits.push(Edit::Push("plugins".into(), t));
    }
    Ok(edits)
}

/// An absolute path as run-file text.
fn shown(p: &std::path::Path) -> String {
    absolute(p).display().to_string()
}

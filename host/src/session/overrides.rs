//! A run description — a [`Base`] run file plus [`Overrides`] — loaded as one
//! [`RunFile`]. Each override becomes an [`Edit`] of the file's TOML table
//! (applied by [`overrides::apply`]), so an override and the key it
//! replaces are validated alike.

use std::path::{Path, PathBuf};

use super::Error;
use crate::config::overrides::{self, drop_keys, Edit};
use crate::config::{self, RunFile, Source};

/// What `blis run`'s flags set: each `Some` replaces one run-file key (named
/// in its doc); `sets` are `section.key=value` edits in order, `plugins`
/// libraries appended to `[[plugins]]`. Relative paths are against the
/// current folder. The default changes nothing.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `seed`.
    pub seed: Option<u64>,
    /// `instance.count`.
    pub num_instances: Option<u32>,
    /// `workload.aggregate_rate`.
    pub rate: Option<f64>,
    /// `workload.num_requests`.
    pub num_requests: Option<u64>,
    /// `horizon_us`.
    pub horizon: Option<i64>,
    /// `instance.kv_offload.cpu_blocks`.
    pub kv_cpu_blocks: Option<u64>,
    /// `pd.decider`.
    pub pd_decider: Option<String>,
    /// `pd.prefix_threshold`.
    pub pd_prefix_threshold: Option<i64>,
    /// `pd.transfer_bandwidth_gbps`.
    pub kv_transfer_bandwidth: Option<f64>,
    /// `admission.policy` (replaces the file's policy and its params).
    pub admission_policy: Option<String>,
    /// `routing.policy` (replaces the file's policy and its params/scorers).
    pub routing_policy: Option<String>,
    /// `routing.scorers` as `name:weight,…` (implies `routing.policy = "weighted"`).
    pub routing_scorers: Option<String>,
    /// `routing.epp_config`.
    pub epp_config: Option<PathBuf>,
    /// `output.results_path`.
    pub results_path: Option<PathBuf>,
    /// `output.timeseries_path`.
    pub timeseries_path: Option<PathBuf>,
    /// `output.trace_path`.
    pub trace_path: Option<PathBuf>,
    /// `output.trace_v2`.
    pub trace_output: Option<PathBuf>,
    /// `workload.preset` (replaces the file's length keys).
    pub workload: Option<String>,
    /// `workload.prompt_tokens`.
    pub prompt_tokens: Option<u32>,
    /// `workload.prompt_tokens_stdev`.
    pub prompt_tokens_stdev: Option<u32>,
    /// `workload.prompt_tokens_min`.
    pub prompt_tokens_min: Option<u32>,
    /// `workload.prompt_tokens_max`.
    pub prompt_tokens_max: Option<u32>,
    /// `workload.output_tokens`.
    pub output_tokens: Option<u32>,
    /// `workload.output_tokens_stdev`.
    pub output_tokens_stdev: Option<u32>,
    /// `workload.output_tokens_min`.
    pub output_tokens_min: Option<u32>,
    /// `workload.output_tokens_max`.
    pub output_tokens_max: Option<u32>,
    /// `workload.prefix_tokens`.
    pub prefix_tokens: Option<u32>,
    /// `section.key=value` edits (TOML value syntax), in order.
    pub sets: Vec<String>,
    /// Plugin libraries appended to `[[plugins]]`, in order.
    pub plugins: Vec<PathBuf>,
}

/// The prompt/output length keys of `[workload]` and their flags' values.
fn length_flags(args: &Overrides) -> [(&'static str, Option<u32>); 8] {
    [
        ("prompt_tokens", args.prompt_tokens),
        ("prompt_tokens_stdev", args.prompt_tokens_stdev),
        ("prompt_tokens_min", args.prompt_tokens_min),
        ("prompt_tokens_max", args.prompt_tokens_max),
        ("output_tokens", args.output_tokens),
        ("output_tokens_stdev", args.output_tokens_stdev),
        ("output_tokens_min", args.output_tokens_min),
        ("output_tokens_max", args.output_tokens_max),
    ]
}

/// `p` against the current folder.
pub(super) fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

/// Where a run file comes from.
#[derive(Clone, Debug, Default)]
pub enum Base {
    /// The built-in scenario (4 instances, weighted routing, chat-like workload).
    #[default]
    Builtin,
    /// A run file on disk (relative paths in it against its folder).
    File(PathBuf),
    /// Run-file text already read (`blis observe`'s generated file, the
    /// Python package's tables): its name for messages and its folder.
    Text(Source),
}

impl Base {
    /// The run file's text and where it came from.
    pub fn source(&self) -> Result<Source, Error> {
        match self {
            Base::Builtin => Ok(Source::builtin()),
            Base::File(p) => Source::read(p).map_err(Error::input),
            Base::Text(s) => Ok(s.clone()),
        }
    }
}

/// Read the run file and apply the overrides. Notes about keys an override
/// replaces as a whole (a policy with its parameters, a workload preset)
/// go to `note`.
pub fn load_run(
    base: &Base,
    args: &Overrides,
    note: impl FnMut(&str),
) -> Result<(RunFile, Source), Error> {
    let source = base.source()?;
    let parsed = config::parse(&source).map_err(Error::input)?;
    let edits = flag_edits(args)?;
    if edits.is_empty() {
        return Ok((parsed, source));
    }
    let mut table: toml::Table = source
        .text
        .parse()
        .map_err(|e: toml::de::Error| Error::input(e.to_string()))?;
    drop_replaced_keys(&mut table, args, &parsed, note);
    let run = overrides::apply(&source, table, &edits).map_err(Error::input)?;
    Ok((run, source))
}

/// Keys of the file that a flag replaces as a whole: a policy given on the
/// command line replaces the file's policy together with the parameters
/// that belonged to it; length flags replace a workload preset, and
/// `--workload NAME` replaces length keys.
fn drop_replaced_keys(
    table: &mut toml::Table,
    args: &Overrides,
    parsed: &RunFile,
    mut note: impl FnMut(&str),
) {
    if let Some(v) = &args.admission_policy {
        if *v != parsed.admission.policy && drop_keys(table, "admission", &["params", "then"]) {
            note(&format!(
                "--admission-policy {v} replaces the run file's policy and its params"
            ));
        }
    }
    if let Some(v) = &args.routing_policy {
        if *v != parsed.routing.policy {
            let keys: &[&str] = if v == "weighted" {
                &["params"]
            } else {
                &["params", "scorers"]
            };
            if drop_keys(table, "routing", keys) {
                note(&format!(
                    "--routing-policy {v} replaces the run file's policy and its params/scorers"
                ));
            }
        }
    }
    let lengths = length_flags(args);
    if args.workload.is_none()
        && lengths.iter().any(|(_, v)| v.is_some())
        && drop_keys(table, "workload", &["preset"])
    {
        note("the --prompt-tokens/--output-tokens flags replace the run file's workload preset");
    }
    let keys: Vec<&str> = lengths.iter().map(|(k, _)| *k).collect();
    if args.workload.is_some() && drop_keys(table, "workload", &keys) {
        note("--workload replaces the run file's prompt/output length keys");
    }
}

/// Every flag given, as an edit of the run file, in a fixed order (named
/// flags, then `--set` in order, then `--plugin` in order).
fn flag_edits(args: &Overrides) -> Result<Vec<Edit>, Error> {
    let mut edits = Vec::new();
    let mut set = |path: &str, v: toml::Value| edits.push(Edit::Set(path.to_string(), v));
    let int = |v: u64| toml::Value::Integer(v as i64);
    let string = |s: &str| toml::Value::String(s.to_string());
    let path = |p: &Path| toml::Value::String(absolute(p).display().to_string());
    if let Some(v) = args.seed {
        set("seed", config::seed::to_value(v));
    }
    if let Some(v) = args.num_instances {
        set("instance.count", int(u64::from(v)));
    }
    if let Some(v) = args.rate {
        set("workload.aggregate_rate", toml::Value::Float(v));
    }
    if let Some(v) = args.num_requests {
        set("workload.num_requests", int(v));
    }
    if let Some(v) = args.horizon {
        set("horizon_us", toml::Value::Integer(v));
    }
    if let Some(v) = args.kv_cpu_blocks {
        set("instance.kv_offload.cpu_blocks", int(v));
    }
    if let Some(v) = &args.pd_decider {
        set("pd.decider", string(v));
    }
    if let Some(v) = args.pd_prefix_threshold {
        set("pd.prefix_threshold", toml::Value::Integer(v));
    }
    if let Some(v) = args.kv_transfer_bandwidth {
        set("pd.transfer_bandwidth_gbps", toml::Value::Float(v));
    }
    if let Some(v) = &args.admission_policy {
        set("admission.policy", string(v));
    }
    if let Some(v) = &args.routing_policy {
        set("routing.policy", string(v));
    }
    if let Some(v) = &args.routing_scorers {
        set(
            "routing.scorers",
            overrides::parse_scorers(v).map_err(Error::input)?,
        );
        if args.routing_policy.is_none() {
            set("routing.policy", string("weighted"));
        }
    }
    if let Some(v) = &args.epp_config {
        set("routing.epp_config", path(v));
    }
    if let Some(v) = &args.results_path {
        set("output.results_path", path(v));
    }
    if let Some(v) = &args.timeseries_path {
        set("output.timeseries_path", path(v));
    }
    if let Some(v) = &args.trace_path {
        set("output.trace_path", path(v));
    }
    if let Some(v) = &args.trace_output {
        set("output.trace_v2", path(v));
    }
    if let Some(v) = &args.workload {
        set("workload.preset", string(v));
    }
    for (key, v) in length_flags(args)
        .into_iter()
        .chain([("prefix_tokens", args.prefix_tokens)])
    {
        if let Some(v) = v {
            set(&format!("workload.{key}"), int(u64::from(v)));
        }
    }
    for s in &args.sets {
        let (p, v) = overrides::parse_set(s).map_err(Error::input)?;
        set(&p, v);
    }
    for p in &args.plugins {
        let mut t = toml::Table::new();
        t.insert("path".into(), path(p));
        edits.push(Edit::Push("plugins".into(), t));
    }
    Ok(edits)
}

//! `blis run`/`validate`: the run file plus the command-line flags, as one
//! [`RunFile`]. Each flag becomes an [`Edit`] of the file's TOML table
//! (applied by [`overrides::apply`]), so a flag and the key it overrides are
//! validated alike.

use std::path::{Path, PathBuf};

use super::commands::{usage, Failure};
use super::RunArgs;
use crate::config::overrides::{self, drop_keys, Edit};
use crate::config::{self, RunFile, Source};

/// The prompt/output length keys of `[workload]` and their flags' values.
fn length_flags(args: &RunArgs) -> [(&'static str, Option<u32>); 8] {
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

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

/// Read the run file (or the default) and apply the command-line overrides.
pub fn load_run(args: &RunArgs) -> Result<(RunFile, Source), Failure> {
    let source = match &args.run_file {
        Some(p) => Source::read(p).map_err(usage)?,
        None => Source::builtin(),
    };
    load_run_from(source, args)
}

/// [`load_run`] with the run file's text already read (`args.run_file` is
/// not used): `blis observe`, and the Python package's run files given as
/// tables.
pub fn load_run_from(source: Source, args: &RunArgs) -> Result<(RunFile, Source), Failure> {
    let parsed = config::parse(&source).map_err(usage)?;
    let edits = flag_edits(args)?;
    if edits.is_empty() {
        return Ok((parsed, source));
    }
    let mut table: toml::Table = source
        .text
        .parse()
        .map_err(|e: toml::de::Error| usage(e.to_string()))?;
    drop_replaced_keys(&mut table, args, &parsed);
    let run = overrides::apply(&source, table, &edits).map_err(usage)?;
    Ok((run, source))
}

/// Keys of the file that a flag replaces as a whole: a policy given on the
/// command line replaces the file's policy together with the parameters
/// that belonged to it; length flags replace a workload preset, and
/// `--workload NAME` replaces length keys.
fn drop_replaced_keys(table: &mut toml::Table, args: &RunArgs, parsed: &RunFile) {
    if let Some(v) = &args.admission_policy {
        if *v != parsed.admission.policy && drop_keys(table, "admission", &["params", "then"]) {
            eprintln!("note: --admission-policy {v} replaces the run file's policy and its params");
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
                eprintln!("note: --routing-policy {v} replaces the run file's policy and its params/scorers");
            }
        }
    }
    let lengths = length_flags(args);
    if args.workload.is_none()
        && lengths.iter().any(|(_, v)| v.is_some())
        && drop_keys(table, "workload", &["preset"])
    {
        eprintln!("note: the --prompt-tokens/--output-tokens flags replace the run file's workload preset");
    }
    let keys: Vec<&str> = lengths.iter().map(|(k, _)| *k).collect();
    if args.workload.is_some() && drop_keys(table, "workload", &keys) {
        eprintln!("note: --workload replaces the run file's prompt/output length keys");
    }
}

/// Every flag given, as an edit of the run file, in a fixed order (named
/// flags, then `--set` in order, then `--plugin` in order).
fn flag_edits(args: &RunArgs) -> Result<Vec<Edit>, Failure> {
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
            overrides::parse_scorers(v).map_err(usage)?,
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
        let (p, v) = overrides::parse_set(s).map_err(usage)?;
        set(&p, v);
    }
    for p in &args.plugins {
        let mut t = toml::Table::new();
        t.insert("path".into(), path(p));
        edits.push(Edit::Push("plugins".into(), t));
    }
    Ok(edits)
}

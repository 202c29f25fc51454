//! The subcommands.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{Cli, Command, ConvertCommand, PluginsCommand, RunArgs};
use crate::cluster::Cluster;
use crate::config::{self, overrides, RunFile, Source};
use crate::metrics::report;
use crate::plugins::{registry::Added, Registry};

/// A failed command: what to print and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

fn usage(message: impl Into<String>) -> Failure {
    Failure {
        code: 2,
        message: message.into(),
    }
}

fn runtime(message: impl Into<String>) -> Failure {
    Failure {
        code: 1,
        message: message.into(),
    }
}

/// Run the command line; returns the report to print on stdout, if any.
pub fn dispatch(cli: Cli) -> Result<Option<String>, Failure> {
    match cli.command {
        Command::Run(args) => run(&args).map(Some),
        Command::Validate(args) => validate(&args).map(|()| None),
        Command::Plugins(PluginsCommand::List { plugins }) => plugins_list(&plugins).map(Some),
        Command::Plugins(PluginsCommand::Show { name, plugins }) => {
            plugins_show(&name, &plugins).map(Some)
        }
        Command::Convert(ConvertCommand::WorkloadSpec { file }) => {
            convert_workload_spec(&file).map(Some)
        }
    }
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
fn load_run(args: &RunArgs) -> Result<(RunFile, Source), Failure> {
    let source = match &args.run_file {
        Some(p) => Source::read(p).map_err(usage)?,
        None => Source::builtin(),
    };
    let parsed = config::parse(&source).map_err(usage)?;
    let mut table: toml::Table = source
        .text
        .parse()
        .map_err(|e: toml::de::Error| usage(e.to_string()))?;
    let mut changed = false;
    // A policy given on the command line replaces the file's policy together
    // with the parameters that belonged to it.
    if let Some(v) = &args.admission_policy {
        if *v != parsed.admission.policy && drop_keys(&mut table, "admission", &["params"]) {
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
            if drop_keys(&mut table, "routing", keys) {
                eprintln!("note: --routing-policy {v} replaces the run file's policy and its params/scorers");
            }
        }
    }
    // Workload flags override the file's workload source of the same kind:
    // length flags replace a preset, `--workload NAME` replaces length keys.
    let length_flags = [
        args.prompt_tokens,
        args.prompt_tokens_stdev,
        args.prompt_tokens_min,
        args.prompt_tokens_max,
        args.output_tokens,
        args.output_tokens_stdev,
        args.output_tokens_min,
        args.output_tokens_max,
    ];
    const LENGTH_KEYS: [&str; 8] = [
        "prompt_tokens",
        "prompt_tokens_stdev",
        "prompt_tokens_min",
        "prompt_tokens_max",
        "output_tokens",
        "output_tokens_stdev",
        "output_tokens_min",
        "output_tokens_max",
    ];
    if args.workload.is_none()
        && length_flags.iter().any(Option::is_some)
        && drop_keys(&mut table, "workload", &["preset"])
    {
        eprintln!("note: the --prompt-tokens/--output-tokens flags replace the run file's workload preset");
    }
    if args.workload.is_some() && drop_keys(&mut table, "workload", &LENGTH_KEYS) {
        eprintln!("note: --workload replaces the run file's prompt/output length keys");
    }
    let mut set = |path: &str, v: toml::Value| -> Result<(), Failure> {
        changed = true;
        overrides::set(&mut table, path, v).map_err(usage)
    };
    let int = |v: u64| toml::Value::Integer(v as i64);
    if let Some(v) = args.seed {
        set("seed", int(v))?;
    }
    if let Some(v) = args.num_instances {
        set("instance.count", int(u64::from(v)))?;
    }
    if let Some(v) = args.rate {
        set("workload.aggregate_rate", toml::Value::Float(v))?;
    }
    if let Some(v) = args.num_requests {
        set("workload.num_requests", int(v))?;
    }
    if let Some(v) = args.horizon {
        set("horizon_us", toml::Value::Integer(v))?;
    }
    if let Some(v) = &args.admission_policy {
        set("admission.policy", toml::Value::String(v.clone()))?;
    }
    if let Some(v) = &args.routing_policy {
        set("routing.policy", toml::Value::String(v.clone()))?;
    }
    if let Some(v) = &args.routing_scorers {
        set(
            "routing.scorers",
            overrides::parse_scorers(v).map_err(usage)?,
        )?;
        if args.routing_policy.is_none() {
            set("routing.policy", toml::Value::String("weighted".into()))?;
        }
    }
    if let Some(v) = &args.results_path {
        set(
            "output.results_path",
            toml::Value::String(absolute(v).display().to_string()),
        )?;
    }
    if let Some(v) = &args.trace_path {
        set(
            "output.trace_path",
            toml::Value::String(absolute(v).display().to_string()),
        )?;
    }
    if let Some(v) = &args.workload {
        set("workload.preset", toml::Value::String(v.clone()))?;
    }
    for (key, v) in [
        ("prompt_tokens", args.prompt_tokens),
        ("prompt_tokens_stdev", args.prompt_tokens_stdev),
        ("prompt_tokens_min", args.prompt_tokens_min),
        ("prompt_tokens_max", args.prompt_tokens_max),
        ("output_tokens", args.output_tokens),
        ("output_tokens_stdev", args.output_tokens_stdev),
        ("output_tokens_min", args.output_tokens_min),
        ("output_tokens_max", args.output_tokens_max),
        ("prefix_tokens", args.prefix_tokens),
    ] {
        if let Some(v) = v {
            set(&format!("workload.{key}"), int(u64::from(v)))?;
        }
    }
    for s in &args.sets {
        let (path, v) = overrides::parse_set(s).map_err(usage)?;
        set(&path, v)?;
    }
    for p in &args.plugins {
        changed = true;
        let mut t = toml::Table::new();
        t.insert(
            "path".into(),
            toml::Value::String(absolute(p).display().to_string()),
        );
        overrides::push(&mut table, "plugins", t).map_err(usage)?;
    }
    if !changed {
        return Ok((parsed, source));
    }
    // Re-parse the merged table as text so a mistake points at its key.
    let merged = toml::to_string(&table).map_err(|e| usage(format!("{}: {e}", source.name)))?;
    let run = toml::from_str::<RunFile>(&merged).map_err(|e| {
        usage(format!(
            "{}: after applying command-line overrides: {}{}",
            source.name,
            e.message().trim(),
            e.span()
                .map(|sp| offending_key(&merged, sp.start))
                .unwrap_or_default()
        ))
    })?;
    Ok((run, source))
}

/// ` (at section.key = value)` for the line of `text` holding byte `pos`.
fn offending_key(text: &str, pos: usize) -> String {
    let pos = pos.min(text.len());
    let line_start = text[..pos].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("").trim();
    let section = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').to_string());
    match section {
        Some(sec) if !line.starts_with('[') => format!(" (at [{sec}] {line})"),
        _ => format!(" (at {line})"),
    }
}

/// Remove `keys` from table `section`; true if something was removed.
fn drop_keys(table: &mut toml::Table, section: &str, keys: &[&str]) -> bool {
    let Some(toml::Value::Table(t)) = table.get_mut(section) else {
        return false;
    };
    let mut removed = false;
    for k in keys {
        removed |= t.remove(*k).is_some();
    }
    removed
}

fn validate(args: &RunArgs) -> Result<(), Failure> {
    let (run, source) = load_run(args)?;
    let mut registry = Registry::standard();
    let built = config::build(&run, &source.base_dir, &mut registry, false)
        .map_err(|m| usage(format!("{}: {m}", source.name)))?;
    for n in &built.notes {
        eprintln!("note: {n}");
    }
    eprintln!("{}: ok", source.name);
    Ok(())
}

fn run(args: &RunArgs) -> Result<String, Failure> {
    let started = Instant::now();
    let (run, source) = load_run(args)?;
    let mut registry = Registry::standard();
    let built = config::build(&run, &source.base_dir, &mut registry, true)
        .map_err(|m| usage(format!("{}: {m}", source.name)))?;
    for n in &built.notes {
        eprintln!("note: {n}");
    }
    let planned = built.setup.workload.planned_requests();
    let bar = if !args.quiet && std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(planned.unwrap_or(0));
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {pos}/{len} requests arrived, simulated {msg} [{elapsed}]",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(b)
    } else {
        None
    };
    let fitness = built.fitness_weights.clone();
    let outcome = Cluster::new(built.setup)
        .run(|t, arrived| {
            if let Some(b) = &bar {
                b.set_position(arrived);
                b.set_message(format!("{:.1} s", t as f64 / 1e6));
            }
        })
        .map_err(|e| runtime(e.to_string()))?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(e) = &outcome.workload_error {
        return Err(runtime(format!("the workload stopped early: {e}")));
    }
    if let Some(e) = &outcome.collector.write_error {
        return Err(runtime(format!(
            "cannot write the per-request results file: {e}"
        )));
    }
    if let Some(e) = outcome.trace.as_ref().and_then(|t| t.error.as_ref()) {
        return Err(runtime(format!(
            "cannot write the decision trace file: {e}"
        )));
    }
    let mut outcome = outcome;
    let report = report::build(&mut outcome, fitness.as_ref());
    let text = serde_json::to_string_pretty(&report).map_err(|e| runtime(e.to_string()))?;
    let wall = started.elapsed().as_secs_f64();
    eprintln!(
        "simulated {} requests, {:.3} s of simulated time, {} events in {:.3} s wall ({:.0} events/s)",
        outcome.arrived,
        outcome.end_time as f64 / 1e6,
        outcome.events,
        wall,
        outcome.events as f64 / wall.max(1e-9)
    );
    Ok(text)
}

fn load_plugins(paths: &[PathBuf]) -> Result<Registry, Failure> {
    let mut registry = Registry::standard();
    for p in paths {
        if registry.load(p).map_err(|e| usage(e.to_string()))? == Added::ReplacedEmbedded {
            eprintln!(
                "note: {} replaces the embedded library of the same name",
                p.display()
            );
        }
    }
    Ok(registry)
}

fn plugins_list(paths: &[PathBuf]) -> Result<String, Failure> {
    let registry = load_plugins(paths)?;
    let mut out = String::new();
    for lib in registry.libraries() {
        out.push_str(&format!("{} {} ({})\n", lib.name, lib.version, lib.origin));
        for p in &lib.policies {
            out.push_str(&format!(
                "  {:<10} {:<18} {}\n",
                p.kind.name(),
                p.name,
                p.summary
            ));
        }
    }
    Ok(out.trim_end().to_string())
}

fn plugins_show(name: &str, paths: &[PathBuf]) -> Result<String, Failure> {
    let registry = load_plugins(paths)?;
    let found = registry.find_any(name);
    if found.is_empty() {
        let mut all: Vec<String> = registry
            .libraries()
            .iter()
            .flat_map(|l| l.policies.iter().map(|p| p.name.clone()))
            .collect();
        all.sort();
        all.dedup();
        return Err(usage(format!(
            "no policy named '{name}'. Available: {}. Load more with --plugin PATH.",
            all.join(", ")
        )));
    }
    let mut out = String::new();
    for (lib, p) in found {
        out.push_str(&format!(
            "{} '{}' from {} {} ({})\n  {}\n\nParameters:\n{}\n\n",
            p.kind.name(),
            p.name,
            lib.name,
            lib.version,
            lib.origin,
            p.summary,
            p.params_doc
                .lines()
                .map(|l| format!("  {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    Ok(out.trim_end().to_string())
}

fn convert_workload_spec(file: &Path) -> Result<String, Failure> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| usage(format!("cannot read {}: {e}", file.display())))?;
    let (toml_text, unimplemented) = crate::workload::convert_workload_spec(&text)
        .map_err(|e| usage(format!("{}: {e}", file.display())))?;
    for u in &unimplemented {
        eprintln!("warning: {}: {u}", file.display());
    }
    Ok(toml_text.trim_end().to_string())
}

/// Write `text` and a newline to stdout; a closed pipe is not an error.
pub fn print_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

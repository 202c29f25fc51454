//! The subcommands.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::load::load_run;
use super::{Cli, Command, ConvertCommand, PluginsCommand, RunArgs};
use crate::config;
use crate::plugins::{registry::Added, Registry};
use crate::session::{self, Error};

/// A failed command: the library's error, which [`super::exit_code`] maps
/// to the exit code.
pub type Failure = Error;

/// Bad input (exit 2).
pub fn usage(message: impl Into<String>) -> Failure {
    Error::input(message)
}

/// A failure while running (exit 1).
pub(crate) fn runtime(message: impl Into<String>) -> Failure {
    Error::run(message)
}

/// Run the command line; returns the report to print on stdout, if any.
pub fn dispatch(cli: Cli) -> Result<Option<String>, Failure> {
    match cli.command {
        Command::Run(args) => run(&args).map(Some),
        Command::Validate(args) => validate(&args).map(|()| None),
        Command::Plugins(PluginsCommand::List { plugins }) => plugins_list(&plugins).map(Some),
        Command::Plugins(PluginsCommand::New { name, wasm, lang }) => {
            if wasm {
                plugins_new_wasm(&name, lang.unwrap_or(super::WasmLang::Rust)).map(Some)
            } else {
                plugins_new(&name).map(Some)
            }
        }
        Command::Plugins(PluginsCommand::Show { name, plugins }) => {
            plugins_show(&name, &plugins).map(Some)
        }
        Command::Convert(ConvertCommand::WorkloadSpec { file }) => {
            convert_yaml(&file, crate::workload::convert_workload_spec).map(Some)
        }
        Command::Convert(ConvertCommand::InferencePerf { file }) if file.is_dir() => {
            convert_results_dir(&file).map(Some)
        }
        Command::Convert(ConvertCommand::InferencePerf { file }) => {
            convert_yaml(&file, crate::workload::convert_inference_perf).map(Some)
        }
        Command::Convert(ConvertCommand::EppConfig { file }) => convert_epp_config(&file).map(Some),
        Command::Convert(ConvertCommand::ToEppConfig { run }) => to_epp_config(&run).map(Some),
        Command::Sweep(args) => super::sweep::sweep_command(&args).map(|()| None),
        Command::Report(args) => super::sweep::report_command(&args).map(|()| None),
        Command::Replay(args) => super::replay::replay(&args).map(Some),
        Command::Calibrate(args) => super::calibrate::calibrate(&args).map(Some),
        Command::Plan(args) => super::plan::plan(&args).map(Some),
        Command::Tune(args) => super::tune::tune(&args).map(Some),
        #[cfg(feature = "observe")]
        Command::Observe(args) => crate::observe::observe_command(&args.options()),
        #[cfg(feature = "serve")]
        Command::Serve(flags) => super::serve::serve(&flags).map(Some),
    }
}

fn validate(args: &RunArgs) -> Result<(), Failure> {
    let (run, source) = load_run(args)?;
    session::check_outputs_against_run_file(&run, &source)?;
    let mut registry = Registry::standard();
    let built = config::build(&run, &source.base_dir, &mut registry, false)
        .map_err(|m| usage(format!("{}: {m}", source.name)))?;
    for n in &built.notes {
        eprintln!("note: {n}");
    }
    for w in &built.warnings {
        eprintln!("warning: {w}");
    }
    eprintln!("{}: ok", source.name);
    Ok(())
}

fn run(args: &RunArgs) -> Result<String, Failure> {
    let started = Instant::now();
    let (run, source) = load_run(args)?;
    let show_progress = !args.quiet && std::io::stderr().is_terminal();
    let done = session::simulate(&run, &source, show_progress, |n| eprintln!("note: {n}"))?;
    let wall = started.elapsed().as_secs_f64();
    eprintln!(
        "simulated {} requests, {:.3} s of simulated time, {} events in {:.3} s wall ({:.0} events/s)",
        done.arrived,
        done.simulated_us as f64 / 1e6,
        done.events,
        wall,
        done.events as f64 / wall.max(1e-9)
    );
    Ok(done.report)
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
    let policies = registry.libraries().iter().flat_map(|l| &l.policies);
    let kind_w = policies
        .clone()
        .map(|p| p.kind.name().len())
        .max()
        .unwrap_or(0);
    let name_w = policies.map(|p| p.name.chars().count()).max().unwrap_or(0);
    let mut out = format!(
        "plugin ABI of this blis: {}\n",
        blis_plugin_api::ABI_VERSION
    );
    for lib in registry.libraries() {
        let abi = if lib.is_wasm() {
            format!("WebAssembly {}", lib.abi_label())
        } else {
            format!("ABI {}", lib.abi)
        };
        out.push_str(&format!(
            "{} {} ({abi}, {})\n",
            lib.name, lib.version, lib.origin
        ));
        for p in &lib.policies {
            let flags = policy_flags(p);
            out.push_str(&format!(
                "  {:<kind_w$}  {:<name_w$}  {}{}\n",
                p.kind.name(),
                p.name,
                p.summary,
                if flags.is_empty() {
                    String::new()
                } else {
                    format!("  [{}]", flags.join("; "))
                }
            ));
        }
    }
    Ok(out.trim_end().to_string())
}

/// What a policy declares beyond its kind: its hooks (`hooks: completed,
/// run_end`), and the flags that change how blis calls it.
fn policy_flags(p: &crate::plugins::registry::PolicyEntry) -> Vec<String> {
    let mut flags = Vec::new();
    let hooks: Vec<&str> = (0..32u8)
        .map(blis_plugin_api::EventKind)
        .filter(|&k| p.hooks.contains(k))
        .map(|k| k.name())
        .collect();
    if !hooks.is_empty() {
        flags.push(format!("hooks: {}", hooks.join(", ")));
    }
    if p.uses_state && !p.prefix_query {
        flags.push("uses state".to_string());
    }
    if p.prefix_query {
        flags.push("prefix query".to_string());
    }
    flags
}

fn plugins_new(name: &str) -> Result<String, Failure> {
    let here = std::env::current_dir().map_err(|e| usage(format!("no current folder: {e}")))?;
    let root = super::scaffold::create(&here, name).map_err(usage)?;
    Ok(format!(
        "created {} (plugin ABI {}): one policy of every kind in src/, a run file for each in runs/, the plugin API in blis-plugin-api/.\n\
         Build it:  cd {name} && cargo build --release   (downloads abi_stable, serde and toml once; no network at all: see `cargo vendor` in README.md)\n\
         Try it:    blis plugins list --plugin {name}/target/release/lib{}.so",
        root.display(),
        blis_plugin_api::ABI_VERSION,
        name.replace('-', "_")
    ))
}

fn plugins_new_wasm(name: &str, lang: super::WasmLang) -> Result<String, Failure> {
    let here = std::env::current_dir().map_err(|e| usage(format!("no current folder: {e}")))?;
    let root = super::scaffold::create_wasm(&here, name, lang).map_err(usage)?;
    let (what, needs) = match lang {
        super::WasmLang::Rust => (
            "a Rust crate",
            "a rustc with the wasm32-unknown-unknown standard library and wasm-tools; see README.md",
        ),
        super::WasmLang::Python => ("a Python module", "componentize-py; see README.md"),
    };
    Ok(format!(
        "created {} ({what}, WIT world {}): one policy of every kind, a run file for each in runs/, the WIT file in wit/.\n\
         Build it:  cd {name} && ./build.sh   (needs {needs})\n\
         Try it:    blis plugins list --plugin {name}/{name}.wasm",
        root.display(),
        super::scaffold::WIT_WORLD,
    ))
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
        let flags = policy_flags(p);
        let hooks = flags
            .iter()
            .find_map(|f| f.strip_prefix("hooks: "))
            .unwrap_or("none");
        let mut calls = Vec::new();
        if p.uses_state {
            calls.push("uses state (blis calls score_candidates with the 0.2 cluster state)");
        }
        if p.prefix_query {
            calls.push("prefix query (blis runs the prefix-cache query for its decisions)");
        }
        out.push_str(&format!(
            "{} '{}' from {} {} ({})\n  {}\n  Hooks: {hooks}\n  Flags: {}\n\nParameters:\n{}\n\n",
            p.kind.name(),
            p.name,
            lib.name,
            lib.version,
            lib.origin,
            p.summary,
            if calls.is_empty() {
                "none".to_string()
            } else {
                calls.join("; ")
            },
            p.params_doc
                .lines()
                .map(|l| format!("  {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    Ok(out.trim_end().to_string())
}

/// Reads `file`, converts it, prints the notes on stderr and returns the TOML.
fn convert_yaml(
    file: &Path,
    convert: fn(&str) -> crate::workload::Conversion,
) -> Result<String, Failure> {
    let text = crate::input::read_to_string(file)
        .map_err(|e| usage(format!("cannot read {}: {e}", file.display())))?;
    let (toml_text, unimplemented) =
        convert(&text).map_err(|e| usage(format!("{}: {e}", file.display())))?;
    for u in &unimplemented {
        eprintln!("warning: {}: {u}", file.display());
    }
    Ok(toml_text.trim_end().to_string())
}

/// `blis convert inference-perf RESULTS_DIR`: a whole run file.
fn convert_results_dir(dir: &Path) -> Result<String, Failure> {
    let (toml_text, notes) = crate::workload::convert_inference_perf_dir(dir)
        .map_err(|e| usage(format!("{}: {e}", dir.display())))?;
    for n in &notes {
        eprintln!("note: {}: {n}", dir.display());
    }
    Ok(toml_text.trim_end().to_string())
}

fn convert_epp_config(file: &Path) -> Result<String, Failure> {
    let text = crate::input::read_to_string(file)
        .map_err(|e| usage(format!("cannot read {}: {e}", file.display())))?;
    let (toml_text, notes) = config::epp_config::convert(&text)
        .map_err(|e| usage(format!("{}: {e}", file.display())))?;
    for n in &notes {
        eprintln!("note: {}: {n}", file.display());
    }
    Ok(format!(
        "# Converted from {} by `blis convert epp-config`.\n{}",
        file.display(),
        toml_text.trim_end()
    ))
}

fn to_epp_config(args: &RunArgs) -> Result<String, Failure> {
    let (run, source) = load_run(args)?;
    let w = config::epp_config::write(&run, &source.base_dir)
        .map_err(|e| usage(format!("{}: {e}", source.name)))?;
    for n in &w.notes {
        eprintln!("note: {}: {n}", source.name);
    }
    Ok(format!(
        "# Written from {} by `blis convert to-epp-config` (blis {}).\n{}",
        source.name,
        env!("CARGO_PKG_VERSION"),
        w.yaml.trim_end()
    ))
}

/// Write `text` and a newline to stdout; a closed pipe is not an error.
pub fn print_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

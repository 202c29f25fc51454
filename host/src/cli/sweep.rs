//! `blis sweep`, `blis sweep merge` and `blis report`: the flags of
//! [`session::sweep`] (a sweep's run is what `blis run BASE --set
//! KEY=VALUE…` does, in-process) and [`crate::html_report`].

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use super::commands::{runtime, usage, Failure};
use crate::html_report::{self, SloTargets};
use crate::session;
use crate::sweep::{self, Shard};

/// `blis sweep …`
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SweepArgs {
    #[command(subcommand)]
    pub command: Option<SweepCommand>,
    /// The sweep file (TOML: base, seeds, [set], [[axis]]; see README.md, "Studying a policy").
    #[arg(required = true)]
    pub sweep_file: Option<PathBuf>,
    /// Output directory (created; a directory of the same sweep is resumed).
    #[arg(long, required = true)]
    pub out: Option<PathBuf>,
    /// Runs at once (default: the number of CPUs).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Run only part i of N of the grid (1 <= i <= N; every N-th run).
    #[arg(long, value_name = "i/N", value_parser = parse_shard)]
    pub shard: Option<Shard>,
    /// Never show a progress bar.
    #[arg(long)]
    pub quiet: bool,
}

fn parse_shard(s: &str) -> Result<Shard, String> {
    s.parse()
}

/// `blis sweep merge …`
#[derive(Debug, Subcommand)]
pub enum SweepCommand {
    /// Merge the output directories of a sweep's shards into one.
    Merge {
        /// Shard directories (written by `blis sweep --shard i/N --out DIR`).
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// The merged directory.
        #[arg(long)]
        out: PathBuf,
        /// Merge even if some runs of the grid are in no directory (a
        /// warning names them).
        #[arg(long)]
        allow_partial: bool,
    },
}

/// `blis report …`
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A sweep directory, a run folder (report.json plus results.jsonl,
    /// trace.jsonl, timeseries.jsonl if present), or a report file.
    pub path: PathBuf,
    /// The HTML file to write.
    #[arg(short, long)]
    pub output: PathBuf,
    /// TTFT target for SLO attainment in a sweep report (ms).
    #[arg(long, default_value_t = 500.0)]
    pub ttft_slo_ms: f64,
    /// E2E target for SLO attainment in a sweep report (ms; default: completed).
    #[arg(long)]
    pub e2e_slo_ms: Option<f64>,
}

/// `blis sweep SWEEP --out DIR` and `blis sweep merge DIR… --out DIR`.
pub fn sweep_command(args: &SweepArgs) -> Result<(), Failure> {
    if let Some(SweepCommand::Merge {
        dirs,
        out,
        allow_partial,
    }) = &args.command
    {
        let m = session::sweep_merge(dirs, out, *allow_partial)?;
        if !m.missing.is_empty() {
            eprintln!(
                "warning: {} runs of the sweep are in none of the directories (--allow-partial): {}",
                m.missing.len(),
                m.missing.join("; ")
            );
        }
        eprintln!(
            "merged {} runs from {} directories into {}",
            m.runs,
            dirs.len(),
            out.display()
        );
        return Ok(());
    }
    let (Some(file), Some(out)) = (&args.sweep_file, &args.out) else {
        return Err(usage("blis sweep: give a sweep file and --out DIR"));
    };
    crate::alloc::keep_freed_memory();
    let progress = !args.quiet && std::io::stderr().is_terminal();
    // Ctrl-C: running simulations stop, the finished ones and the tables
    // are written, exit 130; the sweep resumes from them.
    let graceful = crate::output::GracefulStop::begin();
    let s = session::sweep(
        file,
        out,
        args.jobs,
        args.shard,
        progress,
        Some(graceful.flag()),
    )?;
    let jobs = session::resolve_jobs(args.jobs)?;
    eprintln!(
        "sweep: {} runs{} ({} already done), ran {} in {:.2} s ({:.1} runs/s) with {jobs} jobs; results in {}",
        s.planned,
        args.shard.map_or(String::new(), |sh| format!(" in shard {}/{}", sh.index, sh.count)),
        s.skipped,
        s.ran,
        s.wall_s,
        s.ran as f64 / s.wall_s.max(1e-9),
        out.join("results.csv").display()
    );
    if s.failed > 0 {
        return Err(runtime(format!(
            "{} of {} runs failed; their errors are in the error column of {}",
            s.failed,
            s.ran,
            out.join("results.csv").display()
        )));
    }
    Ok(())
}

/// `blis report PATH -o report.html`.
pub fn report_command(args: &ReportArgs) -> Result<(), Failure> {
    for (flag, v) in [
        ("--ttft-slo-ms", Some(args.ttft_slo_ms)),
        ("--e2e-slo-ms", args.e2e_slo_ms),
    ] {
        if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(usage(format!(
                "{flag} {v}: give a target in milliseconds, a finite number > 0 (e.g. {flag} 500)"
            )));
        }
    }
    let input = html_report::Input::detect(&args.path).map_err(usage)?;
    check_report_output(&args.path, &input, &args.output)?;
    let targets = SloTargets {
        ttft_ms: args.ttft_slo_ms,
        e2e_ms: args.e2e_slo_ms,
    };
    let html = html_report::render(&input, targets).map_err(usage)?;
    crate::output::write_atomic(&args.output, html.as_bytes()).map_err(runtime)?;
    eprintln!("wrote {}", args.output.display());
    Ok(())
}

/// `blis report`'s output may not be a file it reads (nor anything in a
/// sweep's `runs/`), nor a non-regular file (see [`crate::output`]).
fn check_report_output(
    path: &Path,
    input: &html_report::Input,
    output: &Path,
) -> Result<(), Failure> {
    let mut inputs: Vec<(String, PathBuf)> = Vec::new();
    match input {
        html_report::Input::Sweep(dir)
        | html_report::Input::Plan(dir)
        | html_report::Input::Tune(dir) => {
            let runs = dir.join("runs");
            if crate::output::inside(output, &runs) {
                return Err(usage(format!(
                    "-o {}: inside the sweep's runs folder {}, which the report reads; write the report elsewhere (e.g. {})",
                    output.display(),
                    runs.display(),
                    dir.join("report.html").display()
                )));
            }
            let files = [
                sweep::store::MANIFEST,
                "results.csv",
                "results.jsonl",
                "plan.json",
                "candidates.csv",
                "tune.json",
                "evaluations.csv",
            ];
            for f in files {
                inputs.push((
                    format!("{} (read by the report)", dir.join(f).display()),
                    dir.join(f),
                ));
            }
        }
        html_report::Input::Run(files) => {
            let opt = [&files.results, &files.trace, &files.timeseries];
            for f in std::iter::once(&files.report).chain(opt.into_iter().flatten()) {
                inputs.push((format!("{} (read by the report)", f.display()), f.clone()));
            }
        }
    }
    let errors = crate::output::check_paths(&[("-o", output.to_path_buf())], &inputs);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(usage(format!(
            "blis report {}: {}",
            path.display(),
            errors.join("\n")
        )))
    }
}

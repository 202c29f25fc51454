//! `blis plan PLAN_FILE --out DIR`: the flags of [`crate::plan::plan`].

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::commands::{usage, Failure};
use crate::plan::{self, PlanSpec};
use crate::search::Options;
use crate::session;
use crate::sweep::Shard;

/// `blis plan` flags.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct PlanArgs {
    #[command(subcommand)]
    pub command: Option<PlanCommand>,
    /// The plan file (TOML: base, traffic, slo, space, prices; see the book, "Planning a fleet").
    #[arg(required = true)]
    pub plan_file: Option<PathBuf>,
    /// Output directory (created; a directory of the same plan is resumed).
    #[arg(long, required = true)]
    pub out: Option<PathBuf>,
    /// Search only part i of N of the shapes (every N-th, from the i-th);
    /// `blis plan merge` takes the cheapest of the parts' answers.
    #[arg(long, value_name = "i/N", value_parser = parse_shard)]
    pub shard: Option<Shard>,
    /// Simulations at once (default: the number of CPUs).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Never show a progress bar (the per-shape lines stay).
    #[arg(long)]
    pub quiet: bool,
}

fn parse_shard(s: &str) -> Result<Shard, String> {
    s.parse()
}

/// `blis plan merge …`
#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Merge the output directories of a plan's shards (`--shard i/N`) into one.
    Merge {
        /// The shards' --out directories, every shard of the split once.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// The merged directory.
        #[arg(long)]
        out: PathBuf,
    },
}

/// Run the plan (or merge shards); the summary for stdout.
pub fn plan(args: &PlanArgs) -> Result<String, Failure> {
    if let Some(PlanCommand::Merge { dirs, out }) = &args.command {
        let m = crate::plan::merge::merge(dirs, out)?;
        eprintln!("plan: merged {} shards into {}", dirs.len(), out.display());
        return match m.answer {
            Some(_) => Ok(m.summary),
            None => Err(session::Error::infeasible(format!(
                "{}: no shard has a configuration that meets the SLOs; every simulation is in {}",
                out.display(),
                out.join("candidates.csv").display()
            ))),
        };
    }
    let (Some(plan_file), Some(out)) = (&args.plan_file, &args.out) else {
        return Err(usage("blis plan: give a plan file and --out DIR"));
    };
    let spec = PlanSpec::load(plan_file).map_err(usage)?;
    crate::alloc::keep_freed_memory();
    // Ctrl-C: the finished simulations stay stored; the search resumes.
    let graceful = crate::output::GracefulStop::begin();
    let options = Options {
        jobs: session::resolve_jobs(args.jobs)?,
        progress: !args.quiet && std::io::stderr().is_terminal(),
        cancel: Some(graceful.flag()),
    };
    let traffic = if spec.rates.is_empty() {
        "the base's own arrivals".to_string()
    } else {
        format!("{} rate(s)", spec.rates.len())
    };
    eprintln!(
        "plan: {} shapes × instances {}–{} × {} seed(s) × {traffic} = {} simulations in the grid",
        spec.shape_count(),
        spec.min_instances,
        spec.max_instances,
        spec.seeds.len(),
        spec.grid_simulations()
    );
    let (outcome, written) =
        plan::plan(&spec, out, options, args.shard, &|line| eprintln!("{line}"))?;
    eprintln!(
        "plan: {} simulations ({} run now, {} reused) of the grid's {}; wrote {}, {}{}",
        outcome.counts.asked,
        outcome.counts.ran,
        outcome.counts.reused,
        spec.grid_simulations(),
        written.plan_json.display(),
        written.candidates_csv.display(),
        written
            .best_toml
            .as_ref()
            .map_or(String::new(), |p| format!(" and {}", p.display()))
    );
    Ok(written.summary)
}

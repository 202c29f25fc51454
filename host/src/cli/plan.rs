//! `blis plan PLAN_FILE --out DIR`: the flags of [`crate::plan::plan`].

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;

use super::commands::{usage, Failure};
use crate::plan::{self, PlanSpec};
use crate::search::Options;
use crate::session;

/// `blis plan` flags.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The plan file (TOML: base, traffic, slo, space, prices; see the book, "Planning a fleet").
    pub plan_file: PathBuf,
    /// Output directory (created; a directory of the same plan is resumed).
    #[arg(long)]
    pub out: PathBuf,
    /// Simulations at once (default: the number of CPUs).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Never show a progress bar (the per-shape lines stay).
    #[arg(long)]
    pub quiet: bool,
}

/// Run the plan; the summary for stdout.
pub fn plan(args: &PlanArgs) -> Result<String, Failure> {
    let spec = PlanSpec::load(&args.plan_file).map_err(usage)?;
    crate::alloc::keep_freed_memory();
    let options = Options {
        jobs: session::resolve_jobs(args.jobs)?,
        progress: !args.quiet && std::io::stderr().is_terminal(),
        cancel: None,
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
    let (outcome, written) = plan::plan(&spec, &args.out, options, &|line| eprintln!("{line}"))?;
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

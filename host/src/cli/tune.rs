//! `blis tune TUNE_FILE --out DIR`: the flags of [`crate::tune::tune`].

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;

use super::commands::{usage, Failure};
use crate::search::Options;
use crate::session;
use crate::tune::{self, TuneSpec};

/// `blis tune` flags.
#[derive(Debug, Args)]
pub struct TuneArgs {
    /// The tune file (TOML: base, param, objective, train, held_out, budget; see the book, "Tuning a policy").
    pub tune_file: PathBuf,
    /// Output directory (created; a directory of the same tune is resumed).
    #[arg(long)]
    pub out: PathBuf,
    /// Simulations at once (default: the number of CPUs).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Never show a progress bar (the per-generation lines stay).
    #[arg(long)]
    pub quiet: bool,
}

/// Run the tune; the summary for stdout.
pub fn tune(args: &TuneArgs) -> Result<String, Failure> {
    let spec = TuneSpec::load(&args.tune_file).map_err(usage)?;
    crate::alloc::keep_freed_memory();
    if spec.held_out_is_train {
        eprintln!(
            "warning: {}: the held-out traffic is the training traffic: the verdict cannot tell a real gain from overfitting; give other seeds or rates in [held_out]",
            spec.name
        );
    }
    // Ctrl-C: the finished simulations stay stored; the search resumes.
    let graceful = crate::output::GracefulStop::begin();
    let options = Options {
        jobs: session::resolve_jobs(args.jobs)?,
        progress: !args.quiet && std::io::stderr().is_terminal(),
        cancel: Some(graceful.flag()),
    };
    eprintln!(
        "tune: {} parameter(s), {} training simulation(s) per candidate, population {}, budget {} simulations",
        spec.params.len(),
        spec.train.size(),
        spec.population,
        spec.budget
    );
    let (outcome, written) = tune::tune(&spec, &args.out, options, &|line| eprintln!("{line}"))?;
    eprintln!(
        "tune: {} simulations ({} run now, {} reused); {}; wrote {}, {} and {}{}",
        outcome.counts.asked,
        outcome.counts.ran,
        outcome.counts.reused,
        if outcome.verdict.gain {
            "gain on the held-out traffic"
        } else {
            "no gain on the held-out traffic: the recommended run file keeps the start"
        },
        written.tune_json.display(),
        written.evaluations_csv.display(),
        written.tuned_toml.display(),
        written
            .tuned_epp
            .as_ref()
            .map_or(String::new(), |p| format!(" and {}", p.display()))
    );
    Ok(written.summary)
}

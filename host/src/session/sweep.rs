//! A sweep in-process: [`crate::sweep`]'s executor with each run simulated
//! here, exactly as `blis run BASE --set KEY=VALUE…`.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use super::{simulate_with, Error, Notice};
use crate::config::overrides::{self, Edit};
use crate::config::{self, Source};
use crate::sweep::{self, Shard, SweepError};

/// A sweep's runs: each is `blis run BASE --set KEY=VALUE…`, in-process and
/// quiet. The base run file is read and parsed once (at the first run) and
/// each run applies its overrides to a copy of the parsed table, which is
/// what [`super::load_run`] does for overrides that are only `sets` (none of
/// its replacements apply): the same [`overrides::apply`] on the same table
/// with the same edits, so the run is the one `blis run` makes, byte for
/// byte.
#[derive(Default)]
pub(crate) struct SweepRunner {
    base: OnceLock<Result<(Source, toml::Table), String>>,
    /// Handed to each run's simulation ([`simulate_with`]).
    cancel: Option<Arc<AtomicBool>>,
}

impl SweepRunner {
    /// The base run file read, checked alone (as `blis run` checks it), and parsed.
    fn prepare(base: Option<&Path>) -> Result<(Source, toml::Table), String> {
        let source = match base {
            Some(p) => Source::read(p)?,
            None => Source::builtin(),
        };
        config::parse(&source)?;
        let table = source
            .text
            .parse()
            .map_err(|e: toml::de::Error| e.to_string())?;
        Ok((source, table))
    }

    /// A runner whose simulations stop once `cancel` is set.
    pub(crate) fn new(cancel: Option<Arc<AtomicBool>>) -> Self {
        Self {
            cancel,
            ..Self::default()
        }
    }

    /// One run: `base` (or the built-in scenario) with `sets` applied, as
    /// `blis run BASE --set KEY=VALUE…`; the report's text or the error.
    pub(crate) fn run(
        &self,
        base: Option<&Path>,
        sets: &[(String, toml::Value)],
    ) -> Result<String, String> {
        let (source, table) = self
            .base
            .get_or_init(|| Self::prepare(base))
            .as_ref()
            .map_err(Clone::clone)?;
        let run = if sets.is_empty() {
            config::parse(source)?
        } else {
            let edits: Vec<Edit> = sets
                .iter()
                .map(|(k, v)| Edit::Set(k.clone(), v.clone()))
                .collect();
            overrides::apply(source, table.clone(), &edits)?
        };
        simulate_with(&run, source, false, self.cancel.clone(), |kind, text| {
            if kind == Notice::Warning {
                eprintln!("warning: {text}");
            }
        })
        .map(|s| s.report)
        .map_err(|f| f.message)
    }
}

/// A sweep error as the library's error.
fn to_error(e: SweepError) -> Error {
    match e {
        SweepError::BadInput(m) => Error::input(m),
        SweepError::Failed(m) => Error::run(m),
        SweepError::Cancelled => Error::interrupted(
            "the sweep was cancelled; the finished runs are stored, the others run when it is resumed (the same sweep file and output directory)",
        ),
    }
}

/// Runs at once: at least 1 (default: the number of CPUs).
pub fn resolve_jobs(jobs: Option<usize>) -> Result<usize, Error> {
    match jobs {
        Some(0) => Err(Error::input("--jobs 0: give at least 1")),
        Some(j) => Ok(j),
        None => Ok(std::thread::available_parallelism().map_or(1, usize::from)),
    }
}

/// `blis sweep SWEEP_FILE --out DIR [--jobs N] [--shard i/N]` without the
/// summary line: runs the sweep (resuming what `out` holds) and writes
/// `results.csv` and `results.jsonl` in `out`. Failed runs are rows with an
/// error (counted in [`sweep::Summary::failed`]), not an `Err`. Once `cancel`
/// is set no run starts, the finished ones are stored, and the result is an
/// [`Error`] of kind `Run`.
pub fn sweep(
    sweep_file: &Path,
    out: &Path,
    jobs: Option<usize>,
    shard: Option<Shard>,
    progress: bool,
    cancel: Option<Arc<AtomicBool>>,
) -> Result<sweep::Summary, Error> {
    let opts = sweep::Options {
        sweep_file,
        out,
        jobs: resolve_jobs(jobs)?,
        shard,
        progress,
        cancel: cancel.as_deref(),
    };
    let runner = SweepRunner::new(cancel.clone());
    sweep::run(&opts, &|base, sets| runner.run(base, sets)).map_err(to_error)
}

/// `blis sweep merge`: the shards' directories merged into `out`.
pub fn sweep_merge(
    dirs: &[std::path::PathBuf],
    out: &Path,
    allow_partial: bool,
) -> Result<sweep::Merged, Error> {
    sweep::merge(dirs, out, allow_partial).map_err(to_error)
}

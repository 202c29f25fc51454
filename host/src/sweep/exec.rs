//! Running a sweep's runs: in-process on `--jobs` threads (each run is
//! single-threaded and independent), skipping runs already finished in the
//! output directory, with a progress bar and ETA on a terminal.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::spec::{Plan, PlannedRun};
use super::store::SweepDir;
use super::table::RunRow;

/// Runs one run: the base run file (or `None` for the built-in scenario)
/// and the overrides, applied exactly as `blis run --set KEY=VALUE…` would.
/// Returns the report text or the error message.
pub type RunFn<'a> =
    dyn Fn(Option<&Path>, &[(String, toml::Value)]) -> Result<String, String> + Sync + 'a;

/// Output-path keys a run file may set; in a sweep each points into the run's folder.
pub(crate) const OUTPUT_FILES: [(&str, &str); 3] = [
    ("output.results_path", "results.jsonl"),
    ("output.trace_path", "trace.jsonl"),
    ("output.timeseries_path", "timeseries.jsonl"),
];

/// The output keys the base run file sets (read once per sweep).
pub(crate) fn base_outputs(plan: &Plan) -> Vec<&'static str> {
    let base: toml::Table = plan.base_text.parse().unwrap_or_default();
    OUTPUT_FILES
        .iter()
        .map(|(key, _)| *key)
        .filter(|key| {
            let (section, name) = key.split_once('.').expect("dotted");
            base.get(section).and_then(|s| s.get(name)).is_some()
        })
        .collect()
}

/// The run's overrides plus its output files redirected into `folder`
/// (the report does not depend on where outputs go).
fn with_outputs(run: &PlannedRun, in_base: &[&str], folder: &Path) -> Vec<(String, toml::Value)> {
    let mut sets = run.sets.clone();
    for (key, file) in OUTPUT_FILES {
        if in_base.contains(&key) || run.sets.iter().any(|(k, _)| k == key) {
            sets.push((
                key.to_string(),
                toml::Value::String(folder.join(file).display().to_string()),
            ));
        }
    }
    sets
}

/// What a sweep did.
#[derive(Debug, Default)]
pub struct Summary {
    /// Runs in this shard.
    pub planned: usize,
    /// Finished before this invocation (skipped).
    pub skipped: usize,
    pub ran: usize,
    pub failed: usize,
    pub wall_s: f64,
}

/// Run one run into its folder; `Err` only if the result cannot be stored,
/// `None` if `cancel` was set meanwhile (the run is not stored: it runs
/// again when the sweep is resumed).
fn run_into_folder(
    worker: usize,
    run: &PlannedRun,
    in_base: &[&str],
    dir: &SweepDir,
    run_one: &RunFn,
    base: Option<&Path>,
    cancel: Option<&AtomicBool>,
) -> Result<Option<RunRow>, String> {
    let folder = dir.begin(worker, &run.id)?;
    let sets = with_outputs(run, in_base, &folder);
    let result = run_one(base, &sets);
    if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
        let _ = std::fs::remove_dir_all(&folder);
        return Ok(None);
    }
    dir.commit(worker, &run.id, &result).map(Some)
}

/// Run the runs of `runs` not in `done` on `jobs` threads; adds their rows
/// to `done`. Once `cancel` is set no run starts, and runs that end are not
/// stored ([`Summary::ran`] counts the stored ones).
#[allow(clippy::too_many_arguments)]
pub fn execute(
    plan: &Plan,
    runs: &[&PlannedRun],
    done: &mut HashMap<String, RunRow>,
    dir: &SweepDir,
    jobs: usize,
    progress: bool,
    run_one: &RunFn,
    cancel: Option<&AtomicBool>,
) -> Result<Summary, String> {
    let started = Instant::now();
    let todo: Vec<&PlannedRun> = runs
        .iter()
        .copied()
        .filter(|r| !done.contains_key(&r.id))
        .collect();
    let mut summary = Summary {
        planned: runs.len(),
        skipped: runs.len() - todo.len(),
        ..Summary::default()
    };
    let in_base = base_outputs(plan);
    let bar = progress.then(|| {
        let b = indicatif::ProgressBar::new(todo.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} runs [{elapsed} elapsed, ETA {eta}] {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    // A result that cannot be stored stops the sweep (the disk is the problem).
    let stop = AtomicBool::new(false);
    let fatal: Mutex<Option<String>> = Mutex::new(None);
    // Each thread keeps the rows of its runs; they are joined at the end.
    let workers = jobs.max(1).min(todo.len().max(1));
    let rows: Vec<Vec<(String, RunRow)>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..workers)
            .map(|worker| {
                let (stop, next, failed, fatal, bar, todo, in_base) =
                    (&stop, &next, &failed, &fatal, &bar, &todo, &in_base);
                s.spawn(move || {
                    let _staging = crate::output::register_temp_dir(&dir.worker_dir(worker));
                    let mut mine = Vec::new();
                    while !stop.load(Ordering::Relaxed)
                        && !cancel.is_some_and(|c| c.load(Ordering::Relaxed))
                    {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(run) = todo.get(i) else {
                            break;
                        };
                        match run_into_folder(
                            worker,
                            run,
                            in_base,
                            dir,
                            run_one,
                            plan.base.as_deref(),
                            cancel,
                        ) {
                            Ok(None) => break,
                            Ok(Some(row)) => {
                                if row.error.is_some() {
                                    failed.fetch_add(1, Ordering::Relaxed);
                                }
                                mine.push((run.id.clone(), row));
                            }
                            Err(e) => {
                                stop.store(true, Ordering::Relaxed);
                                if let Ok(mut f) = fatal.lock() {
                                    f.get_or_insert(e);
                                }
                                break;
                            }
                        }
                        if let Some(b) = bar {
                            b.inc(1);
                            let n = failed.load(Ordering::Relaxed);
                            if n > 0 {
                                b.set_message(format!("{n} failed"));
                            }
                        }
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    for w in 0..workers {
        dir.end_staging(w);
    }
    if let Some(e) = fatal.into_inner().ok().flatten() {
        return Err(e);
    }
    let rows: Vec<(String, RunRow)> = rows.into_iter().flatten().collect();
    summary.ran = rows.len();
    done.extend(rows);
    summary.failed = failed.load(Ordering::Relaxed);
    summary.wall_s = started.elapsed().as_secs_f64();
    Ok(summary)
}

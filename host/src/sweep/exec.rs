//! Running a sweep's runs: in-process on `--jobs` threads (each run is
//! single-threaded and independent), skipping runs already finished in the
//! output directory, with a progress bar and ETA on a terminal.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::spec::{Plan, PlannedRun};
use super::store::SweepDir;

/// Runs one run: the base run file (or `None` for the built-in scenario)
/// and the overrides, applied exactly as `blis run --set KEY=VALUE…` would.
/// Returns the report text or the error message.
pub type RunFn<'a> =
    dyn Fn(Option<&Path>, &[(String, toml::Value)]) -> Result<String, String> + Sync + 'a;

/// Output-path keys a run file may set; in a sweep each points into the run's folder.
const OUTPUT_FILES: [(&str, &str); 3] = [
    ("output.results_path", "results.jsonl"),
    ("output.trace_path", "trace.jsonl"),
    ("output.timeseries_path", "timeseries.jsonl"),
];

/// The run's overrides plus its output files redirected into its folder
/// (the report does not depend on where outputs go).
fn with_outputs(plan: &Plan, run: &PlannedRun, dir: &SweepDir) -> Vec<(String, toml::Value)> {
    let base: toml::Table = plan.base_text.parse().unwrap_or_default();
    let mut sets = run.sets.clone();
    let run_dir = dir.run_dir(&run.id);
    for (key, file) in OUTPUT_FILES {
        let (section, name) = key.split_once('.').expect("dotted");
        let in_base = base.get(section).and_then(|s| s.get(name)).is_some();
        let in_sets = run.sets.iter().any(|(k, _)| k == key);
        if in_base || in_sets {
            sets.push((
                key.to_string(),
                toml::Value::String(run_dir.join(file).display().to_string()),
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

/// Run the not-yet-finished runs of `runs` on `jobs` threads.
pub fn execute(
    plan: &Plan,
    runs: &[&PlannedRun],
    dir: &SweepDir,
    jobs: usize,
    progress: bool,
    run_one: &RunFn,
) -> Result<Summary, String> {
    let started = Instant::now();
    let todo: Vec<&PlannedRun> = runs
        .iter()
        .copied()
        .filter(|r| dir.record(&r.id).is_none())
        .collect();
    let mut summary = Summary {
        planned: runs.len(),
        skipped: runs.len() - todo.len(),
        ..Summary::default()
    };
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
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1).min(todo.len().max(1)) {
            s.spawn(|| loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(run) = todo.get(i) else {
                    return;
                };
                let sets = with_outputs(plan, run, dir);
                let result = std::fs::create_dir_all(dir.run_dir(&run.id))
                    .map_err(|e| format!("cannot create {}: {e}", dir.run_dir(&run.id).display()))
                    .and_then(|()| run_one(plan.base.as_deref(), &sets));
                if result.is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                if let Err(e) = dir.finish(&run.id, &result) {
                    stop.store(true, Ordering::Relaxed);
                    if let Ok(mut f) = fatal.lock() {
                        f.get_or_insert(e);
                    }
                    return;
                }
                if let Some(b) = &bar {
                    b.inc(1);
                    let n = failed.load(Ordering::Relaxed);
                    if n > 0 {
                        b.set_message(format!("{n} failed"));
                    }
                }
            });
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(e) = fatal.into_inner().ok().flatten() {
        return Err(e);
    }
    summary.ran = todo.len();
    summary.failed = failed.load(Ordering::Relaxed);
    summary.wall_s = started.elapsed().as_secs_f64();
    Ok(summary)
}

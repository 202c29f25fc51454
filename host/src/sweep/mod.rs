//! Parameter sweeps: a grid of runs from one sweep file, run in parallel,
//! resumable and shardable, with a tidy results table.
//!
//! * [`spec`] — the sweep file, its checks and the grid (run ids, shards).
//! * [`store`] — the output directory: manifest, one folder per run, each put in place whole.
//! * [`exec`] — running the runs on threads, skipping finished ones, progress.
//! * [`table`] — `results.csv` / `results.jsonl`, from rows made as runs finish.
//!
//! Each run is exactly `blis run BASE --set KEY=VALUE…` (the CLI hands in a
//! [`exec::RunFn`] that goes through the same parsing and overrides), so a
//! sweep's per-run report has the bytes `blis run` prints. Knows nothing of
//! the simulation itself.

pub mod exec;
pub mod spec;
pub mod store;
pub mod table;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

pub use exec::{RunFn, Summary};
pub use spec::{Plan, Shard};
use store::SweepDir;
use table::RunRow;

/// A sweep that could not be done: bad input (nothing ran) or a failure while running.
#[derive(Debug)]
pub enum SweepError {
    BadInput(String),
    Failed(String),
    /// [`Options::cancel`] was set: the finished runs are stored and in the
    /// tables; the others run when the sweep is resumed.
    Cancelled,
}

/// Write `results.csv` and `results.jsonl` of `dir` from the rows of its
/// finished runs; returns the number of rows.
pub fn write_tables(
    dir: &SweepDir,
    manifest: &serde_json::Value,
    finished: &HashMap<String, RunRow>,
) -> Result<usize, String> {
    let t = table::build(manifest, finished);
    store::write_atomic(&dir.root.join("results.csv"), &t.to_csv()?)?;
    store::write_atomic(&dir.root.join("results.jsonl"), &t.to_jsonl())?;
    Ok(t.rows.len())
}

/// The ids of a manifest's runs, in grid order.
fn manifest_ids(manifest: &serde_json::Value) -> impl Iterator<Item = &str> {
    manifest["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["id"].as_str().unwrap_or_default())
}

/// Options of `blis sweep`.
pub struct Options<'a> {
    pub sweep_file: &'a Path,
    pub out: &'a Path,
    pub jobs: usize,
    pub shard: Option<Shard>,
    pub progress: bool,
    /// Stop starting runs once set (the Python package sets it on Ctrl-C).
    pub cancel: Option<&'a AtomicBool>,
}

/// Run a sweep (or one shard of it) into `opts.out`, resuming what is there.
pub fn run(opts: &Options, run_one: &RunFn) -> Result<Summary, SweepError> {
    let plan = Plan::load(opts.sweep_file).map_err(SweepError::BadInput)?;
    note_if_large(&plan);
    // Absolute: runs' output paths are resolved against the base run file's folder.
    let out = std::path::absolute(opts.out).unwrap_or_else(|_| opts.out.to_path_buf());
    let dir = SweepDir::new(&out);
    let manifest = store::manifest(&plan);
    dir.open(&manifest).map_err(SweepError::BadInput)?;
    let scan = dir.scan(manifest_ids(&manifest));
    for id in &scan.broken {
        eprintln!(
            "note: {} holds no whole report (the machine stopped while writing it?); run {id} runs again",
            dir.run_dir(id).display()
        );
        dir.discard(id).map_err(SweepError::Failed)?;
    }
    let mut finished = scan.finished;
    let runs = plan.shard(opts.shard);
    let summary = exec::execute(
        &plan,
        &runs,
        &mut finished,
        &dir,
        opts.jobs,
        opts.progress,
        run_one,
        opts.cancel,
    )
    .map_err(SweepError::Failed)?;
    write_tables(&dir, &manifest, &finished).map_err(SweepError::Failed)?;
    if opts.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
        return Err(SweepError::Cancelled);
    }
    Ok(summary)
}

/// Runs in a grid past which `blis sweep` says what its size costs.
pub const LARGE_GRID: usize = 20_000;

/// A note on stderr for a grid of more than [`LARGE_GRID`] runs: every
/// invocation (each shard too) plans the whole grid and writes its
/// manifest, about 300 bytes and a few KB of memory a run.
fn note_if_large(plan: &Plan) {
    let n = plan.runs.len();
    if n > LARGE_GRID {
        eprintln!(
            "note: {}: a grid of {n} runs; every invocation, each shard too, plans all of them and writes their manifest (sweep.json, about {} MB) before running its part — fewer axis values or several sweeps start faster",
            plan.name,
            (n * 300) >> 20
        );
    }
}

/// What `merge` did.
#[derive(Debug)]
pub struct Merged {
    /// Runs in the merged table.
    pub runs: usize,
    /// Runs of the grid no directory holds (`id (axis=value, …)`), merged
    /// only with `allow_partial`.
    pub missing: Vec<String>,
}

/// Merge shard directories of one sweep into `out`. Every run of the grid
/// must be in some directory, unless `allow_partial`.
pub fn merge(dirs: &[PathBuf], out: &Path, allow_partial: bool) -> Result<Merged, SweepError> {
    let bad = SweepError::BadInput;
    let mut manifest: Option<(PathBuf, serde_json::Value)> = None;
    let mut sources = Vec::new();
    for d in dirs {
        let sd = SweepDir::new(d);
        let m = sd.read_manifest().map_err(bad)?.ok_or_else(|| {
            SweepError::BadInput(format!(
                "{}: not a sweep directory (no {}); give directories written by `blis sweep --out`",
                d.display(),
                store::MANIFEST
            ))
        })?;
        if let Some((first, fm)) = &manifest {
            if fm["fingerprint"] != m["fingerprint"] {
                return Err(SweepError::BadInput(format!(
                    "{} and {} hold different sweeps ({} has fingerprint {}, {} has {}); merge only the shards of one sweep file",
                    first.display(),
                    d.display(),
                    first.display(),
                    fm["fingerprint"].as_str().unwrap_or("?"),
                    d.display(),
                    m["fingerprint"].as_str().unwrap_or("?")
                )));
            }
        } else {
            manifest = Some((d.clone(), m));
        }
        sources.push(sd);
    }
    let Some((_, manifest)) = manifest else {
        return Err(SweepError::BadInput(
            "blis sweep merge: give at least one sweep directory".into(),
        ));
    };
    let dst = SweepDir::new(out);
    let ids: Vec<&str> = manifest_ids(&manifest).collect();
    // Before writing anything: which runs no directory holds.
    let mut held: HashSet<String> = HashSet::new();
    let already = dst
        .read_manifest()
        .ok()
        .flatten()
        .filter(|m| m["fingerprint"] == manifest["fingerprint"])
        .map(|_| dst.scan(ids.iter().copied()).finished);
    for scan in sources
        .iter()
        .map(|s| s.scan(ids.iter().copied()).finished)
        .chain(already)
    {
        held.extend(scan.into_keys());
    }
    let missing: Vec<String> = manifest["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| !held.contains(r["id"].as_str().unwrap_or_default()))
        .map(|r| {
            let axes: Vec<String> = r["axes"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v}"))
                .chain(r["seed"].as_u64().map(|s| format!("seed={s}")))
                .collect();
            format!("{} ({})", r["id"].as_str().unwrap_or("?"), axes.join(", "))
        })
        .collect();
    if !missing.is_empty() && !allow_partial {
        let shown: Vec<&str> = missing.iter().take(5).map(String::as_str).collect();
        return Err(SweepError::BadInput(format!(
            "the directories hold {} of the sweep's {} runs; {} are missing, e.g. {}{}. Give the directories of every shard, or --allow-partial to merge what is there",
            ids.len() - missing.len(),
            ids.len(),
            missing.len(),
            shown.join("; "),
            if missing.len() > shown.len() { "; …" } else { "" }
        )));
    }
    dst.open(&manifest).map_err(bad)?;
    let scan = dst.scan(ids.iter().copied());
    for id in &scan.broken {
        dst.discard(id).map_err(SweepError::Failed)?;
    }
    let mut finished = scan.finished;
    let _staging = crate::output::register_temp_dir(&dst.worker_dir(0));
    let scans: Vec<store::Scan> = sources
        .iter()
        .map(|s| s.scan(ids.iter().copied()))
        .collect();
    for id in &ids {
        if finished.contains_key(*id) {
            continue;
        }
        let from = sources
            .iter()
            .zip(&scans)
            .find_map(|(src, scan)| scan.finished.get(*id).map(|row| (src, row)));
        if let Some((src, row)) = from {
            dst.copy_run_from(src, id).map_err(SweepError::Failed)?;
            finished.insert(id.to_string(), row.clone());
        }
    }
    dst.end_staging(0);
    let runs = write_tables(&dst, &manifest, &finished).map_err(SweepError::Failed)?;
    Ok(Merged { runs, missing })
}

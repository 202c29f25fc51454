//! The evaluation engine `blis plan` and `blis tune` share: a candidate
//! (a set of run-file overrides) → its simulations over seeds and
//! workloads → their metrics, with caching, resumption, progress and
//! parallelism.
//!
//! An [`Engine`] owns an output directory that is a sweep directory
//! ([`crate::sweep::store`]): every simulation is a run of it, identified by
//! a hash of its overrides, written whole into `runs/<id>/` by the sweep
//! executor ([`crate::sweep::exec::execute`]) on `--jobs` threads and
//! simulated exactly as `blis run BASE --set KEY=VALUE…`
//! ([`crate::session`]). So the guarantees are the sweep's:
//!
//! * **Caching**: a simulation asked for twice (two candidates that share a
//!   run, a search that comes back to a point) runs once.
//! * **Resumption**: a killed or interrupted search, started again with the
//!   same inputs into the same directory, finds its finished simulations
//!   there and runs only the others; a directory of another search (another
//!   fingerprint: the search file, the base run file and every file they
//!   read) is refused.
//! * **Determinism**: a simulation's report depends on its overrides only,
//!   never on the order or the thread it ran in, so a search whose next
//!   step depends on the metrics it has seen takes the same steps however
//!   its batches were scheduled, interrupted or resumed.
//! * **Failures**: a simulation that fails (a plugin refusing a parameter
//!   value) is an [`Evaluation`] with its error, never a failed search.
//!
//! The searches themselves (`plan/`, `tune/`) only decide which batch of
//! simulations to ask for next.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde_json::Value;

use crate::session::{Error, SweepRunner};
use crate::sweep::spec::{fnv64, toml_text, Plan, PlannedRun};
use crate::sweep::store::{self, SweepDir};
use crate::sweep::table::RunRow;

/// One simulation: the base run file with these overrides, in order (the
/// seed and the workload are overrides like any other).
pub type Sets = Vec<(String, toml::Value)>;

/// Labels of a simulation for the sweep table and report (shape, count,
/// seed, …): the manifest's axes of its run.
pub type Labels = Vec<(String, toml::Value)>;

/// A simulation to run: its labels and its overrides.
#[derive(Clone, Debug)]
pub struct Trial {
    pub labels: Labels,
    pub sets: Sets,
}

/// The result of one simulation.
#[derive(Clone, Debug)]
pub struct Evaluation {
    /// The simulation's run id in the directory (`runs/<id>/`).
    pub id: String,
    /// `None` when it succeeded.
    pub error: Option<String>,
    /// The report's metric columns, as `results.csv` names them.
    metrics: HashMap<String, Value>,
}

impl Evaluation {
    /// An evaluation with these metric columns (`error` for a failed one).
    pub fn new(id: &str, error: Option<String>, metrics: Vec<(String, Value)>) -> Self {
        Evaluation {
            id: id.to_string(),
            error,
            metrics: metrics.into_iter().collect(),
        }
    }

    fn of(id: &str, row: &RunRow) -> Self {
        Evaluation {
            id: id.to_string(),
            error: row.error.clone(),
            metrics: row.metrics.iter().cloned().collect(),
        }
    }

    /// A metric of the report by its `results.csv` column name
    /// (`ttft_p99_ms`, `slo_classes.critical.slo.attainment`, …), or one of
    /// the derived metrics [`DERIVED`]; `None` when the report has none (a
    /// distribution with no sample is null).
    pub fn metric(&self, name: &str) -> Option<f64> {
        let get = |n: &str| self.metrics.get(n).and_then(Value::as_f64);
        match name {
            "rejected_fraction" => {
                let n = get("num_requests")?;
                (n > 0.0).then(|| get("rejected_requests").unwrap_or(0.0) / n)
            }
            "completed_fraction" => {
                let n = get("num_requests")?;
                (n > 0.0).then(|| get("completed_requests").unwrap_or(0.0) / n)
            }
            _ => get(name),
        }
    }

    /// Whether the report has a column of that name (null or not).
    pub fn has(&self, name: &str) -> bool {
        DERIVED.contains(&name) || self.metrics.contains_key(name)
    }
}

/// Metrics the engine derives from the report's counts.
pub const DERIVED: [&str; 2] = ["rejected_fraction", "completed_fraction"];

/// What a search did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Simulations asked for (distinct).
    pub asked: usize,
    /// Simulations run by this invocation.
    pub ran: usize,
    /// Simulations found finished in the directory (an earlier invocation).
    pub reused: usize,
}

/// How an [`Engine`] runs its simulations.
pub struct Options {
    /// Threads (at least 1).
    pub jobs: usize,
    /// A progress bar on stderr for each batch.
    pub progress: bool,
    /// Once set no simulation starts and the engine returns an error; the
    /// finished ones are stored.
    pub cancel: Option<Arc<AtomicBool>>,
}

/// The engine: a search's directory and its simulations.
pub struct Engine {
    dir: SweepDir,
    /// The directory's runs (every simulation asked for, in order asked).
    plan: Plan,
    /// id → position in `plan.runs`.
    index: HashMap<String, usize>,
    /// Finished simulations (this invocation's and the directory's).
    done: HashMap<String, RunRow>,
    /// Simulations the directory held when it was opened (not yet asked).
    stored: HashMap<String, RunRow>,
    runner: SweepRunner,
    options: Options,
    counts: Counts,
}

impl Engine {
    /// Open (or resume) the search directory `out` for simulations of the
    /// base run file `base` (`None`: the built-in scenario). `name` names
    /// the search in messages and the manifest; `fingerprint` is a hash of
    /// everything that decides its simulations' reports (the search file,
    /// the base's text and the files they read): a directory holding
    /// another fingerprint is refused.
    pub fn open(
        name: &str,
        fingerprint: &str,
        base: Option<PathBuf>,
        base_text: String,
        axis_names: Vec<String>,
        out: &Path,
        options: Options,
    ) -> Result<Engine, Error> {
        let root = std::path::absolute(out).unwrap_or_else(|_| out.to_path_buf());
        let dir = SweepDir::new(&root);
        let plan = Plan {
            name: name.to_string(),
            base,
            base_text,
            axis_names,
            runs: Vec::new(),
            fingerprint: fingerprint.to_string(),
        };
        // Read before the manifest is written anew (it lists the runs).
        let stored = stored_runs(&dir, fingerprint);
        dir.open(&store::manifest(&plan)).map_err(Error::input)?;
        let runner = SweepRunner::new(options.cancel.clone());
        Ok(Engine {
            dir,
            plan,
            index: HashMap::new(),
            done: HashMap::new(),
            stored,
            runner,
            options,
            counts: Counts::default(),
        })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.dir.root
    }

    /// The simulations so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// The report of a finished, successful simulation.
    pub fn report(&self, e: &Evaluation) -> Option<String> {
        std::fs::read_to_string(self.dir.run_dir(&e.id).join("report.json")).ok()
    }

    /// Run the trials not run yet (on `jobs` threads) and return every
    /// trial's evaluation, in order.
    pub fn evaluate(&mut self, trials: &[Trial]) -> Result<Vec<Evaluation>, Error> {
        let ids: Vec<String> = trials.iter().map(|t| trial_id(&t.sets)).collect();
        let mut todo = Vec::new();
        for (t, id) in trials.iter().zip(&ids) {
            if self.index.contains_key(id) {
                continue;
            }
            let index = self.plan.runs.len();
            self.index.insert(id.clone(), index);
            self.plan.runs.push(PlannedRun {
                index,
                id: id.clone(),
                axes: t.labels.clone(),
                seed: None,
                sets: t.sets.clone(),
            });
            self.counts.asked += 1;
            match self.stored.remove(id) {
                Some(row) => {
                    self.done.insert(id.clone(), row);
                    self.counts.reused += 1;
                }
                None => todo.push(index),
            }
        }
        if !todo.is_empty() {
            self.run(&todo)?;
        }
        ids.iter()
            .map(|id| {
                self.done
                    .get(id)
                    .map(|row| Evaluation::of(id, row))
                    .ok_or_else(|| Error::run(format!("simulation {id} did not finish")))
            })
            .collect()
    }

    /// Run the planned runs at `todo` (positions in `plan.runs`).
    fn run(&mut self, todo: &[usize]) -> Result<(), Error> {
        // The manifest lists every simulation asked for so far, so the
        // directory reads as a sweep (`blis report`, `sweep merge`).
        self.dir
            .open(&store::manifest(&self.plan))
            .map_err(Error::run)?;
        let runs: Vec<&PlannedRun> = todo.iter().map(|&i| &self.plan.runs[i]).collect();
        let runner = &self.runner;
        let summary = crate::sweep::exec::execute(
            &self.plan,
            &runs,
            &mut self.done,
            &self.dir,
            self.options.jobs,
            self.options.progress,
            &|base, sets| runner.run(base, sets),
            self.options.cancel.as_deref(),
        )
        .map_err(Error::run)?;
        self.counts.ran += summary.ran;
        if summary.ran < runs.len() {
            return Err(Error::interrupted(format!(
                "{}: interrupted; the {} finished simulations are stored in {}, and the search resumes from them when run again with the same --out",
                self.plan.name,
                self.counts.ran + self.counts.reused,
                self.dir.root.display()
            )));
        }
        Ok(())
    }

    /// Write the directory's `results.csv` and `results.jsonl` (one row
    /// per simulation asked for), as a sweep's.
    pub fn write_tables(&self) -> Result<(), Error> {
        let manifest = store::manifest(&self.plan);
        self.dir.open(&manifest).map_err(Error::run)?;
        crate::sweep::write_tables(&self.dir, &manifest, &self.done).map_err(Error::run)?;
        Ok(())
    }
}

/// The finished runs a directory holds, by id (its manifest lists them).
fn stored_runs(dir: &SweepDir, fingerprint: &str) -> HashMap<String, RunRow> {
    let Ok(Some(manifest)) = dir.read_manifest() else {
        return HashMap::new();
    };
    if manifest["fingerprint"] != fingerprint {
        // (another search's: `open` refuses the directory)
        return HashMap::new();
    }
    let ids: Vec<&str> = manifest["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["id"].as_str())
        .collect();
    let scan = dir.scan(ids);
    for id in &scan.broken {
        let _ = dir.discard(id);
    }
    scan.finished
}

/// A simulation's id: a hash of its overrides, in order.
pub fn trial_id(sets: &[(String, toml::Value)]) -> String {
    let mut canon = String::new();
    for (k, v) in sets {
        canon.push_str(k);
        canon.push('=');
        canon.push_str(&toml_text(v));
        canon.push('\n');
    }
    format!("{:016x}", fnv64(canon.as_bytes()))
}

pub use crate::config::{get_str, PATH_KEYS};

/// The files a run file reads (its path keys, resolved), each with a label
/// for messages: inputs a search's outputs must never overwrite.
pub fn files_read(source: &crate::config::Source) -> Vec<(String, PathBuf)> {
    let table: toml::Table = source.text.parse().unwrap_or_default();
    PATH_KEYS
        .iter()
        .filter_map(|key| {
            let p = get_str(&table, key)?;
            Some((
                format!("the base's {key}"),
                crate::config::resolve(&source.base_dir, Path::new(&p)),
            ))
        })
        .collect()
}

/// A run file's table with every path it holds (path keys, plugin
/// libraries) made absolute, so it runs the same from another folder, and
/// `sets` applied: the run file a search writes for its answer.
pub fn standalone_table(
    source: &crate::config::Source,
    sets: &[(String, toml::Value)],
) -> Result<toml::Table, Error> {
    let mut table: toml::Table = source
        .text
        .parse()
        .map_err(|e: toml::de::Error| Error::run(e.to_string()))?;
    absolute_paths(&mut table, &source.base_dir)?;
    for (k, v) in sets {
        crate::config::overrides::set(&mut table, k, v.clone()).map_err(Error::run)?;
    }
    Ok(table)
}

/// Make the paths of a run-file table absolute against `base_dir`.
pub fn absolute_paths(table: &mut toml::Table, base_dir: &Path) -> Result<(), Error> {
    for key in PATH_KEYS {
        let Some(p) = get_str(table, key) else {
            continue;
        };
        let abs = crate::config::resolve(base_dir, Path::new(&p));
        crate::config::overrides::set(table, key, toml::Value::String(abs.display().to_string()))
            .map_err(Error::run)?;
    }
    if let Some(toml::Value::Array(plugins)) = table.get_mut("plugins") {
        for p in plugins.iter_mut() {
            if let Some(toml::Value::String(path)) = p.get_mut("path") {
                *path = crate::config::resolve(base_dir, Path::new(path.as_str()))
                    .display()
                    .to_string();
            }
        }
    }
    Ok(())
}

/// A search file's `base` (relative to the search file's folder `dir`):
/// its absolute path and text, or the built-in scenario when none is given.
/// `name` is the search file, for messages.
pub fn read_base(
    name: &str,
    dir: &Path,
    base: Option<&Path>,
) -> Result<(Option<PathBuf>, crate::config::Source), String> {
    let Some(b) = base else {
        return Ok((None, crate::config::Source::builtin()));
    };
    let p = dir.join(b);
    let p = std::path::absolute(&p).unwrap_or(p);
    let source = crate::config::Source::read(&p)
        .map_err(|e| format!("{name}: base = \"{}\": {e}", b.display()))?;
    Ok((Some(p), source))
}

/// A search's output files in `out` (`files`) checked against each other
/// and against its inputs, as every command's outputs are
/// ([`crate::output::check_paths`]): an error of kind `Input` naming `--out`.
pub fn check_outputs(
    out: &Path,
    files: &[&str],
    inputs: &[(String, PathBuf)],
) -> Result<(), Error> {
    let outputs: Vec<(&str, PathBuf)> = files.iter().map(|f| (*f, out.join(f))).collect();
    let errors = crate::output::check_paths(&outputs, inputs);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::input(format!(
            "--out {}: {}",
            out.display(),
            errors.join("\n")
        )))
    }
}

/// Write one of a search's output files atomically.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    crate::output::write_atomic(path, bytes).map_err(Error::run)
}

//! A sweep's output directory: the manifest and one folder per finished
//! run, each put in place whole.
//!
//! ```text
//! DIR/sweep.json             the manifest: fingerprint, axes, every run of the grid
//! DIR/runs/<id>/report.json  a run that succeeded: its report (the bytes `blis run` prints)
//! DIR/runs/<id>/error.json   a run that failed: {"run_id", "status": "failed", "error"}
//! DIR/runs/<id>/…            the run's other outputs (results, trace, time series)
//! DIR/runs/.tmp-<k>/<id>/    a run being written by worker k (removed when the sweep is opened again)
//! DIR/results.csv, .jsonl    the tidy table (see `table`)
//! ```
//!
//! # Why a run is never read half-written, with no fsync
//!
//! A run is written into its staging folder `runs/.tmp-<k>/<id>/` — its output
//! files while it runs, then its report (or error) — and the folder is
//! renamed to `runs/<id>/` after the last write ([`SweepDir::commit`]). A
//! rename is atomic, so `runs/<id>/` is either absent or whole: a run is
//! finished exactly when its folder exists. That costs two new files per run
//! (the folder and the report), where a temporary file renamed into place per
//! file plus a completion record cost three; creating files is the largest
//! part of a short run's cost after the simulation itself.
//!
//! * **The process is killed** (SIGKILL, the OOM killer, a scheduler's
//!   preemption): every write that returned is in the kernel's page cache,
//!   which every later reader sees, and the rename comes after the last
//!   write; so a killed sweep leaves whole run folders and staging folders,
//!   never a partial run folder. An fsync adds nothing against this.
//! * **The machine crashes** (power loss): without fsync the rename may reach
//!   the disk before the report's data (delayed allocation), leaving a folder
//!   with an empty or short report. An fsync per run would prevent that at
//!   the price of a disk flush per run, more than a short run costs; instead,
//!   opening a sweep again parses every finished run's report or error (the
//!   table needs them anyway), and a folder whose file does not parse is
//!   removed and its run done again ([`SweepDir::scan`]).
//!
//! Either way no partial file is taken as complete. The manifest and the
//! tables are written with [`write_atomic`] (temporary file, then rename).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::spec::{Plan, PlannedRun};
use super::table::RunRow;

pub use crate::output::write_atomic;

/// The manifest's file name.
pub const MANIFEST: &str = "sweep.json";

/// Quote one shell word (for the reproduction command).
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The `blis run` command line that reproduces a run. The output files the
/// sweep wrote into the run's folder (`in_base`: those the base run file
/// sets; or set by the sweep) go to the current folder, by the flags
/// (`--results-path results.jsonl` …), so running the command never writes
/// beside the base run file.
pub fn command_line(plan: &Plan, run: &PlannedRun, in_base: &[&str]) -> String {
    let outputs = super::exec::OUTPUT_FILES;
    let mut words = vec!["blis".to_string(), "run".to_string()];
    if let Some(b) = &plan.base {
        words.push(shell_word(&b.display().to_string()));
    }
    for (k, v) in &run.sets {
        if outputs.iter().any(|(key, _)| key == k) {
            continue;
        }
        words.push("--set".into());
        words.push(shell_word(&format!("{k}={}", super::spec::toml_text(v))));
    }
    for (key, file) in outputs {
        if in_base.contains(&key) || run.sets.iter().any(|(k, _)| k == key) {
            let name = key.trim_start_matches("output.").trim_end_matches("_path");
            words.push(format!("--{name}-path"));
            words.push(file.to_string());
        }
    }
    words.join(" ")
}

/// The manifest of a plan: everything `merge` and the report need.
pub fn manifest(plan: &Plan) -> Value {
    let in_base = super::exec::base_outputs(plan);
    let runs: Vec<Value> = plan
        .runs
        .iter()
        .map(|r| {
            let mut axes = Map::new();
            for (k, v) in &r.axes {
                axes.insert(k.clone(), serde_json::to_value(v).unwrap_or(Value::Null));
            }
            json!({
                "index": r.index,
                "id": r.id,
                "axes": axes,
                "seed": r.seed,
                "command": command_line(plan, r, &in_base),
            })
        })
        .collect();
    json!({
        "sweep": plan.name,
        "fingerprint": plan.fingerprint,
        "base": plan.base.as_ref().map(|b| b.display().to_string()),
        "axes": plan.axis_names,
        "runs": runs,
    })
}

/// A sweep directory.
pub struct SweepDir {
    pub root: PathBuf,
}

/// A run's report in its folder.
const REPORT: &str = "report.json";
/// A failed run's error in its folder.
const ERROR: &str = "error.json";
/// Prefix of staging folders (and of temporary files).
const STAGING: &str = ".tmp";

/// What is on disk of some runs of a sweep.
#[derive(Debug, Default)]
pub struct Scan {
    /// Finished runs, by id.
    pub finished: HashMap<String, RunRow>,
    /// Run folders whose report or error does not parse (see the module docs).
    pub broken: Vec<String>,
}

/// The row of a finished run folder: `None` if it holds no whole report or error.
fn read_run(folder: &Path) -> Option<RunRow> {
    match std::fs::read_to_string(folder.join(REPORT)) {
        Ok(text) => RunRow::succeeded(&text).ok(),
        Err(_) => {
            let text = std::fs::read_to_string(folder.join(ERROR)).ok()?;
            let v: Value = serde_json::from_str(&text).ok()?;
            Some(RunRow::failed(v["error"].as_str()?.to_string()))
        }
    }
}

impl SweepDir {
    pub fn new(root: &Path) -> SweepDir {
        SweepDir {
            root: root.to_path_buf(),
        }
    }

    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// Folder of one finished run.
    pub fn run_dir(&self, id: &str) -> PathBuf {
        self.runs_dir().join(id)
    }

    /// Folder a run is written into by worker `worker` before it is put in
    /// place. Each worker stages in a folder of its own, so creating run
    /// folders (which locks their parent folder) never makes workers wait
    /// for each other.
    pub fn staging_dir(&self, worker: usize, id: &str) -> PathBuf {
        self.worker_dir(worker).join(id)
    }

    /// Worker `worker`'s staging folder (registered for removal on an
    /// interrupt while the worker runs, see [`crate::output`]).
    pub fn worker_dir(&self, worker: usize) -> PathBuf {
        self.runs_dir().join(format!("{STAGING}-{worker}"))
    }

    /// Read the manifest, if the directory has one.
    pub fn read_manifest(&self) -> Result<Option<Value>, String> {
        let p = self.root.join(MANIFEST);
        match std::fs::read_to_string(&p) {
            Ok(t) => serde_json::from_str(&t)
                .map(Some)
                .map_err(|e| format!("{}: not a sweep manifest: {e}", p.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read {}: {e}", p.display())),
        }
    }

    /// Create the directory for `manifest`, or check that it already holds
    /// the same sweep (then its finished runs are kept and the staging
    /// folders of a killed sweep are removed).
    pub fn open(&self, manifest: &Value) -> Result<(), String> {
        self.refuse_foreign()?;
        std::fs::create_dir_all(self.runs_dir())
            .map_err(|e| format!("cannot create {}: {e}", self.runs_dir().display()))?;
        if let Some(old) = self.read_manifest()? {
            if old["fingerprint"] != manifest["fingerprint"] {
                return Err(format!(
                    "{} holds the results of another sweep ({} with fingerprint {}; this one is {}). Give another --out, or delete that directory.",
                    self.root.display(),
                    old["sweep"].as_str().unwrap_or("?"),
                    old["fingerprint"].as_str().unwrap_or("?"),
                    manifest["fingerprint"].as_str().unwrap_or("?")
                ));
            }
        }
        let text = serde_json::to_string_pretty(manifest).map_err(|e| e.to_string())? + "\n";
        write_atomic(&self.root.join(MANIFEST), text.as_bytes())?;
        // Temporary tables or manifests a killed sweep left (SIGKILL; an
        // interrupt removes its own).
        if let Ok(entries) = std::fs::read_dir(&self.root) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let ours = ["results.csv", "results.jsonl", MANIFEST]
                    .iter()
                    .any(|f| name.starts_with(&format!(".{f}.")));
                if ours && crate::output::is_temp_name(&name) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        if let Ok(entries) = std::fs::read_dir(self.runs_dir()) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(STAGING) {
                    let p = e.path();
                    let _ = if p.is_dir() {
                        std::fs::remove_dir_all(&p)
                    } else {
                        std::fs::remove_file(&p)
                    };
                }
            }
        }
        Ok(())
    }

    /// `Err` if the folder exists, holds files and is not a sweep's (no
    /// manifest): a sweep replaces `results.csv`, `results.jsonl` and
    /// `runs/` in its folder, which would destroy the user's own files.
    fn refuse_foreign(&self) -> Result<(), String> {
        if self.root.as_os_str().is_empty() {
            return Err("the output folder is an empty path, which names no folder (it would write into the current folder and replace its results files); give a folder to --out".into());
        }
        if self.root.join(MANIFEST).exists() {
            return Ok(());
        }
        let Ok(mut entries) = std::fs::read_dir(&self.root) else {
            return Ok(());
        };
        if entries.next().is_none() {
            return Ok(());
        }
        Err(format!(
            "{} exists and is not a sweep's output folder (no {MANIFEST}), and it is not empty: a sweep writes results.csv, results.jsonl and runs/ there and would replace files of the same name. Give a new or empty folder to --out.",
            self.root.display()
        ))
    }

    /// The finished runs among `ids`, read from their folders (one listing
    /// of `runs/`, then one read per finished run).
    pub fn scan<'a>(&self, ids: impl IntoIterator<Item = &'a str>) -> Scan {
        let present: HashSet<String> = std::fs::read_dir(self.runs_dir())
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let mut scan = Scan::default();
        for id in ids.into_iter().filter(|id| present.contains(*id)) {
            match read_run(&self.run_dir(id)) {
                Some(row) => {
                    scan.finished.insert(id.to_string(), row);
                }
                None => scan.broken.push(id.to_string()),
            }
        }
        scan
    }

    /// Remove the folder of a run whose files did not parse, so it runs again.
    pub fn discard(&self, id: &str) -> Result<(), String> {
        let p = self.run_dir(id);
        std::fs::remove_dir_all(&p).map_err(|e| format!("cannot remove {}: {e}", p.display()))
    }

    /// Start run `id` on worker `worker`: an empty staging folder, where its outputs go.
    pub fn begin(&self, worker: usize, id: &str) -> Result<PathBuf, String> {
        let p = self.staging_dir(worker, id);
        let made = match std::fs::create_dir(&p) {
            // The worker's first run: make its staging folder.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => p
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::create_dir(&p)),
            // Left over (a sweep stops only at a run's end, so never expected).
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                std::fs::remove_dir_all(&p).and_then(|()| std::fs::create_dir(&p))
            }
            r => r,
        };
        made.map_err(|e| format!("cannot create {}: {e}", p.display()))?;
        Ok(p)
    }

    /// Remove worker `worker`'s staging folder once it has no run left in it.
    pub fn end_staging(&self, worker: usize) {
        let _ = std::fs::remove_dir(self.worker_dir(worker));
    }

    /// Finish run `id` (started with [`begin`](Self::begin)): write its
    /// report or error into the staging folder and move the folder into
    /// place. Returns the run's row.
    pub fn commit(
        &self,
        worker: usize,
        id: &str,
        result: &Result<String, String>,
    ) -> Result<RunRow, String> {
        let staging = self.staging_dir(worker, id);
        let (row, file, text) = match result {
            Ok(report) => {
                let row = RunRow::succeeded(report)
                    .map_err(|e| format!("run {id}: the report is not JSON: {e}"))?;
                (row, REPORT, format!("{report}\n"))
            }
            Err(e) => {
                let record = json!({ "run_id": id, "status": "failed", "error": e });
                (RunRow::failed(e.clone()), ERROR, format!("{record}\n"))
            }
        };
        let p = staging.join(file);
        std::fs::write(&p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        self.put_in_place(&staging, id)?;
        Ok(row)
    }

    /// Rename a complete staging folder to run `id`'s folder.
    fn put_in_place(&self, staging: &Path, id: &str) -> Result<(), String> {
        let dst = self.run_dir(id);
        std::fs::rename(staging, &dst).map_err(|e| {
            format!(
                "cannot move {} to {}: {e}",
                staging.display(),
                dst.display()
            )
        })
    }

    /// Copy run `id`'s folder from `from` (whole, as [`commit`](Self::commit) does).
    pub fn copy_run_from(&self, from: &SweepDir, id: &str) -> Result<(), String> {
        let src = from.run_dir(id);
        let staging = self.begin(0, id)?;
        let entries =
            std::fs::read_dir(&src).map_err(|e| format!("cannot read {}: {e}", src.display()))?;
        for e in entries.flatten() {
            if e.path().is_file() {
                std::fs::copy(e.path(), staging.join(e.file_name()))
                    .map_err(|err| format!("cannot copy {}: {err}", e.path().display()))?;
            }
        }
        self.put_in_place(&staging, id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT_TEXT: &str = "{\n  \"cluster\": {\n    \"ttft_p99_ms\": 5.0\n  }\n}";

    fn manifest() -> Value {
        json!({ "fingerprint": "f", "runs": [] })
    }

    #[test]
    fn a_run_is_finished_once_its_folder_is_in_place() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SweepDir::new(tmp.path());
        dir.open(&manifest()).unwrap();
        // Worker 1 has started run "a" (its outputs are there), not finished it.
        let staging = dir.begin(1, "a").unwrap();
        std::fs::write(staging.join("results.jsonl"), "{}\n").unwrap();
        assert!(dir.scan(["a"]).finished.is_empty());
        let row = dir.commit(1, "a", &Ok(REPORT_TEXT.into())).unwrap();
        assert_eq!(row.error, None);
        assert_eq!(row.metrics, vec![("ttft_p99_ms".to_string(), json!(5.0))]);
        assert_eq!(
            std::fs::read_to_string(dir.run_dir("a").join(REPORT)).unwrap(),
            format!("{REPORT_TEXT}\n")
        );
        assert!(dir.run_dir("a").join("results.jsonl").is_file());
        // A failed run keeps its error.
        dir.begin(0, "b").unwrap();
        dir.commit(0, "b", &Err("bad \"count\"".into())).unwrap();
        let scan = dir.scan(["a", "b", "c"]);
        assert_eq!(scan.finished.len(), 2);
        assert_eq!(scan.finished["a"], row);
        assert_eq!(scan.finished["b"], RunRow::failed("bad \"count\"".into()));
        assert!(scan.broken.is_empty());
        // A killed sweep's staging (run "c" in progress) is cleared on reopening.
        dir.begin(0, "c").unwrap();
        dir.open(&manifest()).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(dir.runs_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["a", "b"]);
    }

    #[test]
    fn a_folder_without_a_whole_report_is_not_finished() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SweepDir::new(tmp.path());
        dir.open(&manifest()).unwrap();
        for (id, file, text) in [
            ("short", REPORT, &REPORT_TEXT[..20]),
            ("empty", REPORT, ""),
            ("error", ERROR, "{\"run_id\": \"error\", \"err"),
        ] {
            std::fs::create_dir(dir.run_dir(id)).unwrap();
            std::fs::write(dir.run_dir(id).join(file), text).unwrap();
        }
        std::fs::create_dir(dir.run_dir("none")).unwrap();
        let scan = dir.scan(["short", "empty", "error", "none"]);
        assert!(scan.finished.is_empty());
        assert_eq!(scan.broken, ["short", "empty", "error", "none"]);
        for id in &scan.broken {
            dir.discard(id).unwrap();
        }
        // The run can then be done again.
        dir.begin(0, "short").unwrap();
        dir.commit(0, "short", &Ok(REPORT_TEXT.into())).unwrap();
        assert_eq!(dir.scan(["short"]).finished.len(), 1);
    }

    #[test]
    fn a_copied_run_is_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (
            SweepDir::new(&tmp.path().join("a")),
            SweepDir::new(&tmp.path().join("b")),
        );
        a.open(&manifest()).unwrap();
        b.open(&manifest()).unwrap();
        let staging = a.begin(0, "r").unwrap();
        std::fs::write(staging.join("trace.jsonl"), "t\n").unwrap();
        let row = a.commit(0, "r", &Ok(REPORT_TEXT.into())).unwrap();
        b.copy_run_from(&a, "r").unwrap();
        assert_eq!(b.scan(["r"]).finished["r"], row);
        assert_eq!(
            std::fs::read_to_string(b.run_dir("r").join("trace.jsonl")).unwrap(),
            "t\n"
        );
    }
}

//! A sweep's output directory: the manifest, one record and one report per
//! run, written atomically.
//!
//! ```text
//! DIR/sweep.json             the manifest: fingerprint, axes, every run of the grid
//! DIR/runs/<id>/report.json  the run's report (the bytes `blis run` prints)
//! DIR/runs/<id>/…            the run's other outputs (results, trace, time series)
//! DIR/runs/<id>.json         the run's record: status and error — written last
//! DIR/results.csv, .jsonl    the tidy table (see `table`)
//! ```
//!
//! Every file is written to a temporary file in the same folder and renamed
//! into place ([`write_atomic`]), so a sweep killed at any moment leaves
//! either a whole file or none; a run counts as done only once its record
//! exists, and the record is written after the report.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::spec::{Plan, PlannedRun};

/// Write `bytes` to `path` atomically (temp file in the same folder, then rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut f = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| format!("cannot create a file in {}: {e}", dir.display()))?;
    f.write_all(bytes)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    // Temporary files are private (0600); results are ordinary files.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = f
            .as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644));
    }
    f.persist(path)
        .map_err(|e| format!("cannot write {}: {}", path.display(), e.error))?;
    Ok(())
}

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

/// The `blis run` command line that reproduces a run (without output paths).
pub fn command_line(plan: &Plan, run: &PlannedRun) -> String {
    let mut words = vec!["blis".to_string(), "run".to_string()];
    if let Some(b) = &plan.base {
        words.push(shell_word(&b.display().to_string()));
    }
    for (k, v) in &run.sets {
        words.push("--set".into());
        words.push(shell_word(&format!("{k}={}", super::spec::toml_text(v))));
    }
    words.join(" ")
}

/// The manifest of a plan: everything `merge` and the report need.
pub fn manifest(plan: &Plan) -> Value {
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
                "command": command_line(plan, r),
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

/// A run's record (its completion marker).
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub ok: bool,
    pub error: Option<String>,
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

    /// Folder of one run's outputs.
    pub fn run_dir(&self, id: &str) -> PathBuf {
        self.runs_dir().join(id)
    }

    fn record_path(&self, id: &str) -> PathBuf {
        self.runs_dir().join(format!("{id}.json"))
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
    /// the same sweep (then its finished runs are kept).
    pub fn open(&self, manifest: &Value) -> Result<(), String> {
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
        // Temporary files of a killed sweep are never read; remove them.
        if let Ok(entries) = std::fs::read_dir(self.runs_dir()) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(".tmp") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        Ok(())
    }

    /// The record of run `id`, if it finished.
    pub fn record(&self, id: &str) -> Option<Record> {
        let text = std::fs::read_to_string(self.record_path(id)).ok()?;
        let v: Value = serde_json::from_str(&text).ok()?;
        Some(Record {
            ok: v["status"] == "ok",
            error: v["error"].as_str().map(str::to_string),
        })
    }

    /// The report of a finished run.
    pub fn report(&self, id: &str) -> Result<Value, String> {
        let p = self.run_dir(id).join("report.json");
        let text =
            std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
    }

    /// Store a finished run: the report first, then the record.
    pub fn finish(&self, id: &str, result: &Result<String, String>) -> Result<(), String> {
        let record = match result {
            Ok(report) => {
                let dir = self.run_dir(id);
                std::fs::create_dir_all(&dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                write_atomic(&dir.join("report.json"), format!("{report}\n").as_bytes())?;
                json!({ "run_id": id, "status": "ok", "error": null })
            }
            Err(e) => json!({ "run_id": id, "status": "failed", "error": e }),
        };
        write_atomic(&self.record_path(id), format!("{record}\n").as_bytes())
    }

    /// Copy run `id` (record, report and outputs) from `from`.
    pub fn copy_run_from(&self, from: &SweepDir, id: &str) -> Result<(), String> {
        let src = from.run_dir(id);
        if src.is_dir() {
            let dst = self.run_dir(id);
            std::fs::create_dir_all(&dst)
                .map_err(|e| format!("cannot create {}: {e}", dst.display()))?;
            let entries = std::fs::read_dir(&src)
                .map_err(|e| format!("cannot read {}: {e}", src.display()))?;
            for e in entries.flatten() {
                if e.path().is_file() {
                    let bytes = std::fs::read(e.path())
                        .map_err(|err| format!("cannot read {}: {err}", e.path().display()))?;
                    write_atomic(&dst.join(e.file_name()), &bytes)?;
                }
            }
        }
        let rec = from.record_path(id);
        let bytes =
            std::fs::read(&rec).map_err(|e| format!("cannot read {}: {e}", rec.display()))?;
        write_atomic(&self.record_path(id), &bytes)
    }
}

//! Run one generated scenario twice through the real config layer and
//! cluster (with the [`Auditor`]), and check everything.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::audit::Auditor;
use super::checks;
use super::generators::Scenario;
use crate::cluster::Cluster;
use crate::config::{self, RunFile, Source};
use crate::metrics::report;
use crate::plugins::Registry;

/// A fresh scratch directory for this process.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("blis-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch directory");
    d
}

/// Everything one run produced.
pub struct RunOutput {
    pub run: RunFile,
    pub report: Value,
    pub report_text: String,
    pub results: String,
    pub trace: String,
    pub audit: Auditor,
}

fn run_once(text: &str, dir: &Path) -> Result<RunOutput, String> {
    let source = Source {
        name: "campaign.toml".into(),
        base_dir: dir.to_path_buf(),
        text: text.to_string(),
    };
    let run: RunFile = config::parse(&source)?;
    let mut registry = Registry::standard();
    let built = config::build(&run, dir, &mut registry, true)
        .map_err(|e| format!("the config layer rejected a generated run: {e}"))?;
    let fitness = built.fitness_weights.clone();
    let mut audit = Auditor::default();
    let mut outcome = Cluster::new(built.setup)
        .run_audited(|_, _| {}, &mut audit)
        .map_err(|e| format!("the run failed: {e}"))?;
    for output in built.outputs {
        output
            .commit()
            .map_err(|e| format!("cannot commit an output: {e}"))?;
    }
    if let Some(e) = &outcome.workload_error {
        return Err(format!("the workload stopped: {e}"));
    }
    if let Some(v) = audit.violation.take() {
        return Err(v);
    }
    let report = report::build(&mut outcome, fitness.as_ref());
    let read =
        |name: &str| std::fs::read_to_string(dir.join(name)).map_err(|e| format!("{name}: {e}"));
    Ok(RunOutput {
        report_text: serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?,
        report,
        results: read("results.jsonl")?,
        trace: read("trace.jsonl")?,
        run,
        audit,
    })
}

/// Run `s` twice in `dir`; check INV-1..8, the results and the trace.
pub fn run_and_check(s: &Scenario, dir: &Path) -> Result<(), String> {
    let text = toml::to_string(&s.table).map_err(|e| e.to_string())?;
    if let Some(csv) = &s.trace_csv {
        std::fs::write(dir.join("trace.csv"), csv).map_err(|e| e.to_string())?;
    }
    if let Some(yaml) = &s.trace_yaml {
        std::fs::write(dir.join("trace.yaml"), yaml).map_err(|e| e.to_string())?;
    }
    let first = run_once(&text, dir).map_err(|e| format!("{e}\nrun file:\n{text}"))?;
    let second = run_once(&text, dir).map_err(|e| format!("{e}\nrun file:\n{text}"))?;
    let same = first.report_text == second.report_text
        && first.results == second.results
        && first.trace == second.trace;
    if !same {
        return Err(format!(
            "INV-6: two runs of the same file differ\nrun file:\n{text}"
        ));
    }
    checks::check(&first).map_err(|e| format!("{e}\nrun file:\n{text}"))
}

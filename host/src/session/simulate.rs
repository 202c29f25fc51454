//! A loaded run → the cluster built, simulated, and the JSON report with
//! the requested output files committed.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::Error;
use crate::cluster::{Cluster, ClusterOutcome as Outcome};
use crate::config::{self, RunFile, Source};
use crate::metrics::report;
use crate::plugins::Registry;

/// A finished simulation: the report's text and what it cost.
pub struct Simulated {
    /// The JSON report, as `blis run` prints it on stdout.
    pub report: String,
    /// Requests that arrived.
    pub arrived: u64,
    /// The run's duration, µs: its last event or last delivered token.
    pub simulated_us: i64,
    /// Events executed.
    pub events: u64,
}

/// What [`simulate_with`] tells about a run's setup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A fact about the setup (`note:` on the command line).
    Note,
    /// A setting that is probably a mistake (`warning:` on the command line).
    Warning,
}

/// Build and run one simulation of `run` (its relative paths against
/// `source`'s folder), exactly as `blis run` does. Notes about the setup go
/// to `note`, warnings to stderr; a progress bar is drawn on stderr when
/// `progress`.
pub fn simulate(
    run: &RunFile,
    source: &Source,
    progress: bool,
    mut note: impl FnMut(&str),
) -> Result<Simulated, Error> {
    simulate_with(run, source, progress, None, |kind, text| match kind {
        Notice::Note => note(text),
        Notice::Warning => eprintln!("warning: {text}"),
    })
}

/// Check a run file with overrides as `blis validate` does — the file
/// parsed, every section built, every plugin created with its parameters —
/// without simulating; the build's notes.
pub fn validate_with(
    source: &Source,
    sets: &[(String, toml::Value)],
) -> Result<Vec<String>, Error> {
    let table: toml::Table = source
        .text
        .parse()
        .map_err(|e: toml::de::Error| Error::input(format!("{}: {e}", source.name)))?;
    let edits: Vec<config::overrides::Edit> = sets
        .iter()
        .map(|(k, v)| config::overrides::Edit::Set(k.clone(), v.clone()))
        .collect();
    let run = config::overrides::apply(source, table, &edits).map_err(Error::input)?;
    let mut registry = Registry::standard();
    let built = config::build(&run, &source.base_dir, &mut registry, false)
        .map_err(|m| Error::input(format!("{}: {m}", source.name)))?;
    Ok(built.notes)
}

/// [`simulate`] with the setup's notes and warnings handed to `notice`, and
/// a flag that stops the run (an [`Error`] of kind `Run` with the message of
/// [`crate::cluster::RunError::Cancelled`]) once set.
pub fn simulate_with(
    run: &RunFile,
    source: &Source,
    progress: bool,
    cancel: Option<Arc<AtomicBool>>,
    mut notice: impl FnMut(Notice, &str),
) -> Result<Simulated, Error> {
    check_outputs_against_run_file(run, source)?;
    let mut registry = Registry::standard();
    let built = config::build(run, &source.base_dir, &mut registry, true)
        .map_err(|m| Error::input(format!("{}: {m}", source.name)))?;
    for n in &built.notes {
        notice(Notice::Note, n);
    }
    for w in &built.warnings {
        notice(Notice::Warning, w);
    }
    let bar = progress.then(|| progress_bar(built.setup.workload.planned_requests()));
    let fitness = built.fitness_weights.clone();
    let calibration = built.calibration.clone();
    let mut outputs = built.outputs;
    let mut cluster = Cluster::new(built.setup);
    if let Some(flag) = cancel {
        cluster = cluster.cancel_on(flag);
    }
    let mut outcome = cluster
        .run(|t, arrived| {
            if let Some(b) = &bar {
                b.set_position(arrived);
                b.set_message(format!("{:.1} s", t as f64 / 1e6));
            }
        })
        .map_err(|e| Error::run(e.to_string()))?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    check_outcome(&mut outcome)?;
    warn_unroutable_models(&outcome, &mut notice);
    let mut report = report::build(&mut outcome, fitness.as_ref());
    if let (Some(files), Some(map)) = (registry.provenance(), report.as_object_mut()) {
        map.insert("plugins".into(), files);
    }
    if let (Some((path, sha256)), Some(map)) = (&calibration, report.as_object_mut()) {
        map.insert(
            "calibration".into(),
            serde_json::json!({ "profile": path, "sha256": sha256 }),
        );
    }
    let text = serde_json::to_string_pretty(&report).map_err(|e| Error::run(e.to_string()))?;
    if let Some(p) = &run.output.metrics_path {
        outputs.push(write_metrics(
            &config::resolve(&source.base_dir, p),
            &report,
        )?);
    }
    // Only a run that succeeded puts its output files in place.
    for o in outputs {
        o.commit().map_err(|e| Error::run(e.to_string()))?;
    }
    Ok(Simulated {
        report: text,
        arrived: outcome.arrived,
        simulated_us: outcome.duration,
        events: outcome.events,
    })
}

/// The progress bar of a run that plans `planned` requests (or an unknown
/// number).
fn progress_bar(planned: Option<u64>) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(planned.unwrap_or(0));
    let template = if planned.is_some() {
        "{spinner} {pos}/{len} requests arrived, simulated {msg} [{elapsed}, ETA {eta}]"
    } else {
        "{spinner} {pos} requests arrived, simulated {msg} [{elapsed}]"
    };
    b.set_style(
        indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    b
}

/// The run ended, but did every part of it? A workload that stopped early
/// or an output file that could not be written fails the run; the
/// streaming sinks are finished here.
fn check_outcome(outcome: &mut Outcome) -> Result<(), Error> {
    if let Some(e) = &outcome.workload_error {
        return Err(Error::run(format!("the workload stopped early: {e}")));
    }
    if let Some(e) = &outcome.collector.write_error {
        return Err(Error::run(format!(
            "cannot write the per-request results file: {e}"
        )));
    }
    if let Some(e) = outcome.trace.as_ref().and_then(|t| t.error.as_ref()) {
        return Err(Error::run(format!(
            "cannot write the decision trace file: {e}"
        )));
    }
    if let Some(e) = outcome.timeseries.as_ref().and_then(|t| t.error.as_ref()) {
        return Err(Error::run(format!(
            "cannot write the time series file: {e}"
        )));
    }
    for s in &mut outcome.collector.sinks {
        s.finish().map_err(Error::run)?;
    }
    Ok(())
}

/// A warning for each model whose requests no instance served.
fn warn_unroutable_models(outcome: &Outcome, notice: &mut impl FnMut(Notice, &str)) {
    let Some(m) = &outcome.collector.models else {
        return;
    };
    for (name, &n) in m.names.iter().zip(&m.unroutable) {
        if n > 0 {
            notice(
                Notice::Warning,
                &format!(
                    "{n} request(s) for model \"{name}\" were rejected: no instance serves that model \
                     (models.\"{name}\".unroutable_by_model; give those clients a served model, or add a pool)"
                ),
            );
        }
    }
}

/// `output.metrics_path`: the report's `cluster` block plus `cache_hit_rate`
/// (the name the reference's aggregate metrics and `blis calibrate
/// --sim-metrics` use), written to a temporary file committed with the others.
fn write_metrics(
    path: &Path,
    report: &serde_json::Value,
) -> Result<crate::output::PendingOutput, Error> {
    let mut m = report
        .get("cluster")
        .and_then(|c| c.as_object())
        .cloned()
        .unwrap_or_default();
    let hit = m
        .get("kv_cache_hit_rate")
        .cloned()
        .unwrap_or(serde_json::json!(0.0));
    m.insert("cache_hit_rate".into(), hit);
    let text = serde_json::to_string_pretty(&serde_json::Value::Object(m))
        .map_err(|e| Error::run(e.to_string()))?;
    let (mut f, pending) = crate::output::PendingOutput::create(path).map_err(|e| {
        Error::run(format!(
            "cannot create the metrics file {}: {e}",
            path.display()
        ))
    })?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.write_all(b"\n"))
        .map_err(|e| {
            Error::run(format!(
                "cannot write the metrics file {}: {e}",
                path.display()
            ))
        })?;
    Ok(pending)
}

/// The output files may not overwrite the run file itself (the other
/// inputs are checked by [`config::build`]).
pub(crate) fn check_outputs_against_run_file(run: &RunFile, source: &Source) -> Result<(), Error> {
    let Some(file) = source.file() else {
        return Ok(());
    };
    let errors = crate::output::check_paths(
        &config::outputs::output_paths(run, &source.base_dir),
        &[("the run file".to_string(), file.to_path_buf())],
    );
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::input(format!(
            "{}: {}",
            source.name,
            errors.join("\n")
        )))
    }
}

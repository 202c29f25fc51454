//! `blis report`: one self-contained HTML file (inline SVG plots, inline
//! CSS, no scripts, no network) from one run's outputs or from a sweep
//! directory.
//!
//! * [`run_page`] — one run: latency CDFs, queue depth and KV utilisation
//!   over time, routing-regret histogram, per-instance / SLO-class / tenant tables.
//! * [`sweep_page`] — a sweep: latency vs rate per variant, throughput vs
//!   latency, SLO attainment vs rate, seeds aggregated.
//! * [`charts`] — the plots (plotters' SVG backend); [`page`] — the HTML around them.
//!
//! Reads only files blis wrote; knows nothing of the simulation. (The JSON
//! report itself is `metrics::report`.)

pub mod charts;
pub mod page;
pub mod plan_page;
pub mod run_page;
pub mod sweep_page;
pub mod tune_page;

use std::path::Path;

pub use run_page::RunFiles;
pub use sweep_page::SloTargets;

/// What to render a report of.
pub enum Input<'a> {
    /// A `blis plan` directory (has `plan.json` and `sweep.json`).
    Plan(&'a Path),
    /// A `blis tune` directory (has `tune.json` and `evaluations.csv`).
    Tune(&'a Path),
    /// A sweep directory (has `sweep.json`).
    Sweep(&'a Path),
    /// One run's files.
    Run(RunFiles),
}

impl Input<'_> {
    /// Decide from a path: a sweep directory, a run folder (with
    /// `report.json`), or a report file (its siblings `results.jsonl`,
    /// `trace.jsonl`, `timeseries.jsonl` are used if present).
    pub fn detect(path: &Path) -> Result<Input<'_>, String> {
        if path.is_dir() {
            if path.join("plan.json").is_file() && path.join("candidates.csv").is_file() {
                return Ok(Input::Plan(path));
            }
            if path.join("tune.json").is_file() && path.join("evaluations.csv").is_file() {
                return Ok(Input::Tune(path));
            }
            if path.join(crate::sweep::store::MANIFEST).is_file() {
                return Ok(Input::Sweep(path));
            }
            if path.join("report.json").is_file() {
                return Ok(Input::Run(RunFiles::in_dir(path)));
            }
            return Err(format!(
                "{}: neither a sweep directory (no sweep.json) nor a run folder (no report.json). Give a sweep's --out directory, a report file, or a folder with report.json.",
                path.display()
            ));
        }
        if !path.is_file() {
            return Err(format!("{}: no such file or directory", path.display()));
        }
        let mut files = RunFiles::in_dir(path.parent().unwrap_or(Path::new(".")));
        files.report = path.to_path_buf();
        Ok(Input::Run(files))
    }
}

/// Render the HTML page.
pub fn render(input: &Input, targets: SloTargets) -> Result<String, String> {
    match input {
        Input::Plan(dir) => Ok(page::document("blis plan report", &plan_page::body(dir)?)),
        Input::Tune(dir) => Ok(page::document("blis tune report", &tune_page::body(dir)?)),
        Input::Sweep(dir) => {
            let m = crate::sweep::store::SweepDir::new(dir)
                .read_manifest()?
                .ok_or_else(|| format!("{}: no sweep.json", dir.display()))?;
            let body = sweep_page::body(dir, &m, targets)?;
            let title = format!(
                "blis sweep report — {}",
                m["sweep"].as_str().unwrap_or("sweep")
            );
            Ok(page::document(&title, &body))
        }
        Input::Run(files) => {
            let body = run_page::body(files)?;
            Ok(page::document("blis run report", &body))
        }
    }
}

//! `blis calibrate fit`: the latency model's coefficients fitted to a
//! user's measurements, with the simulator in the loop.
//!
//! * [`table`] — the measurements table (`run_file,metric,value`);
//! * [`traces`] — `--trace`: an observed trace's requests as measurements,
//!   predicted by a replay of the trace;
//! * [`eval`] — each run file parsed once, simulated in-process with
//!   candidate coefficients, on threads;
//! * [`params`] — which coefficients move, their bounds, the optimiser's
//!   coordinates;
//! * [`search`] — the minimisation: Levenberg–Marquardt on the weighted
//!   MAPE (iteratively reweighted squares), first over one factor per
//!   family, then per group (each alpha, the betas), then over every coefficient, then an optional
//!   Nelder–Mead (argmin) polish; the held-out folds; the uncertainty (a bootstrap over the
//!   experiments, and blocks of a trace's requests, of the fit linearised at its optimum);
//! * [`profile`] — the profile written, read back by
//!   `[model] calibration = "PROFILE.toml"`;
//! * [`html`] — `--html`: measured against predicted, before and after.
//!
//! Input errors (table, run files, flags, a fit that cannot improve) exit 2
//! before anything is written; the profile and the page are written
//! atomically through [`crate::output`].

pub mod eval;
pub mod html;
pub mod params;
pub mod profile;
pub mod search;
pub mod table;
#[cfg(test)]
mod tests;
pub mod traces;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde_json::json;

use eval::Experiment;
use params::Space;
use search::{Objective, Progress};
use table::Row;

/// What `blis calibrate fit` fits and writes (its flags, as the command
/// line gives them; the Python package's keywords).
#[derive(Debug, Clone)]
pub struct FitArgs {
    /// The calibration profile to write (TOML).
    pub out: PathBuf,
    /// Measurements: a CSV table with header `run_file,metric,value`
    /// (`run_file` relative to the table; `metric` a report field such as
    /// `ttft_mean_ms` or `stages[0].e2e_p90_ms`).
    pub measurements: Option<PathBuf>,
    /// An observed TraceV2 trace with the run file of the server that
    /// produced it (repeatable): errors per request (TTFT, E2E, ITL) between
    /// its ok rows and a replay of it through the run file.
    pub traces: Vec<String>,
    /// Coefficients to fit, comma separated: `alpha`, `beta`, `alpha[i]`,
    /// `beta[i]` (default: every nonzero coefficient of the latency model).
    pub fit: Option<String>,
    /// Bounds of one coefficient, `NAME=LO:HI` (repeatable; default
    /// start/20 to start·20).
    pub bounds: Vec<String>,
    /// Weight of a metric in the objective, `METRIC=W` (repeatable; default 1;
    /// a bare field such as `ttft_mean_ms` also weighs it in every stage).
    pub weights: Vec<String>,
    /// Held-out folds, by experiment (the table's run files) and by request
    /// (a trace's): each fold is predicted by a fit on the others (0 = none;
    /// at least 2 otherwise).
    pub holdout: u32,
    /// Held-out errors by deployment (each recorded in the profile):
    /// `experiment` (leave-one-experiment-out), `model`
    /// (leave-one-model-out), `gpu` (leave-one-GPU-out): every experiment,
    /// model or GPU type in turn predicted by a fit on the others.
    pub holdout_by: Vec<String>,
    /// Seed of the fold assignment and the bootstrap.
    pub seed: u64,
    /// Workload seeds each measured deployment is simulated at: its run
    /// file's `seed`, then seed + 1, …; a prediction is the mean over them
    /// (the same seeds for every candidate). A measurement is one draw of
    /// its workload's randomness and so is one simulation; averaging the
    /// simulations removes the simulator's share of that noise, at K times
    /// the cost (default 1: the run file's seed only).
    pub sim_seeds: u32,
    /// Simulations run at once (default: every core).
    pub jobs: Option<usize>,
    /// Nelder–Mead iterations on the weighted MAPE after the two
    /// Levenberg–Marquardt stages (default 0: none): a polish of the error
    /// itself, at one simulation set or more per iteration.
    pub iterations: u64,
    /// `--prior-sd SD`: fit every coefficient with a Gaussian prior of
    /// standard deviation SD (log units: 0.1 ≈ ±10 %) around the
    /// one-factor-per-group point — the shipped coefficients' shape at the
    /// scale the data chose — instead of keeping all of them only if they
    /// pay for their freedom (None: that).
    pub prior_sd: Option<f64>,
    /// Also write an HTML page: measured against predicted per experiment
    /// and metric, before and after, held-out points marked.
    pub html: Option<PathBuf>,
    /// No progress on stderr.
    pub quiet: bool,
}

/// Why a fit stopped: bad input (exit 2) or a failure while running (exit 1).
#[derive(Debug)]
pub enum FitError {
    Input(String),
    Runtime(String),
}

/// One table row's figures after the fit.
#[derive(Clone, Debug)]
pub struct RowResult {
    pub start: f64,
    pub fitted: f64,
    /// Predicted by the fold's fit that did not see this row's experiment.
    pub heldout: Option<f64>,
    pub fold: Option<usize>,
}

/// Parse `METRIC=W` weights.
fn parse_weights(list: &[String]) -> Result<BTreeMap<String, f64>, String> {
    let mut out = BTreeMap::new();
    for w in list {
        let (m, v) = w
            .split_once('=')
            .ok_or_else(|| format!("--weight {w}: write METRIC=W, e.g. ttft_mean_ms=2"))?;
        let m = m.trim();
        if table::Metric::parse(m).is_err()
            && !table::stage_metrics().iter().any(|s| s == m)
            && !traces::METRICS.contains(&m)
            && !traces::MEANS.contains(&m)
        {
            return Err(format!(
                "--weight {w}: {}",
                table::Metric::parse(m).unwrap_err()
            ));
        }
        let v: f64 = v
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("--weight {w}: the weight must be a number ≥ 0"))?;
        out.insert(m.to_string(), v);
    }
    Ok(out)
}

/// The default weight of a trace's means ([`traces::MEANS`], each
/// metric's mean rows together) against its requests' 1: the mean sets the
/// level a plan reads, the requests how it moves with their lengths. On a
/// real server whose TTFT is a few ms plus scheduling spikes, the requests
/// alone fit the typical request and miss the mean (a llama.cpp trace of
/// the book: mean TTFT 18 % off held out at weight 1, 5.7 % at 3, 4.2 % at 10).
pub const TRACE_MEAN_WEIGHT: f64 = 10.0;

/// The weight of a row's metric.
fn weight_of(weights: &BTreeMap<String, f64>, m: &table::Metric) -> f64 {
    weights
        .get(&m.name())
        .or_else(|| weights.get(&m.field))
        .copied()
        .unwrap_or(if traces::MEANS.contains(&m.field.as_str()) {
            TRACE_MEAN_WEIGHT
        } else {
            1.0
        })
}

/// Run `blis calibrate fit`; returns the summary printed on stdout.
pub fn fit_command(args: &FitArgs) -> Result<String, FitError> {
    run_fit(args).map(|o| o.summary)
}

/// What a fit produced (the profile and page are written already).
pub struct Outcome {
    /// The JSON summary for stdout.
    pub summary: String,
    pub profile: profile::Profile,
    pub rows: Vec<Row>,
    /// Per row: start, fitted and held-out predictions.
    pub results: Vec<RowResult>,
}

/// Fit, write the profile (and page), and return everything.
pub fn run_fit(args: &FitArgs) -> Result<Outcome, FitError> {
    run_fit_with(args, None)
}

/// What a fit is fitted to: the measured rows (the table's, then each
/// trace's requests) and the experiments that predict them.
struct Measured {
    trace_args: Vec<traces::TraceArg>,
    rows: Vec<Row>,
    experiments: Vec<Experiment>,
    /// Per row: its experiment.
    row_exp: Vec<usize>,
    /// Per row: its unit (a table row's experiment; a trace's request).
    row_unit: Vec<usize>,
    /// Per trace: (first row, rows) of its requests.
    trace_spans: Vec<(usize, usize)>,
    /// Experiments and rows of the table (they come first).
    table_experiments: usize,
    table_rows: usize,
    /// `--weight` as given, and per row.
    weights: BTreeMap<String, f64>,
    row_weights: Vec<f64>,
}

/// [`run_fit`] stopped once `cancel` is set: the simulations running stop,
/// no other starts, and the fit fails ([`FitError::Runtime`]) with nothing
/// written. For embedding blis (the Python package's `calibrate_fit`).
pub fn run_fit_with(args: &FitArgs, cancel: Option<Arc<AtomicBool>>) -> Result<Outcome, FitError> {
    let m = read_measurements(args)?;
    check_one_start(&m.experiments)?;
    let space = Space::new(
        m.experiments[0].start.clone(),
        args.fit.as_deref(),
        &args.bounds,
        m.experiments[0].latency_model,
    )
    .map_err(FitError::Input)?;
    let fold_unit = fold_units(args, &m)?;
    let by_folds = by_folds(&args.holdout_by, &m)?;
    let boot_unit = bootstrap_units(&m);
    let inputs = check_outputs(args, &m)?;
    let jobs = check_runs(args)?;
    let progress = Progress::new(!args.quiet, !args.quiet && std::io::stderr().is_terminal());
    let all: Vec<usize> = (0..m.rows.len()).collect();
    let objective = Objective {
        experiments: &m.experiments,
        rows: &m.rows,
        row_exp: &m.row_exp,
        row_unit: &boot_unit,
        dof_unit: &m.row_unit,
        weights: &m.row_weights,
        space: &space,
        jobs,
        sim_seeds: args.sim_seeds,
        progress: &progress,
        cancel,
        prior_sd: args.prior_sd,
    };

    // The start: every row must be readable from its run's report.
    let start_pred = objective.predict(&all, &vec![0.0; space.fitted.len()])?;
    let start_err = search::mape(&m.rows, &m.row_weights, &all, &start_pred);
    progress.note(&format!(
        "{} measurements of {} experiments ({} from {} traces); start: weighted MAPE {:.3} %; fitting {}",
        m.rows.len(),
        m.experiments.len(),
        m.rows.len() - m.table_rows,
        m.trace_args.len(),
        start_err,
        fitted_names(&space)
    ));

    let best = search::fit(&objective, &all, args.iterations, "fit")?;
    let fitted_pred = objective.predict(&all, &best)?;
    let train_err = search::mape(&m.rows, &m.row_weights, &all, &fitted_pred);
    if train_err >= start_err * (1.0 - 1e-9) {
        return Err(FitError::Input(format!(
            "the fit cannot improve on its start: weighted MAPE {start_err:.4} % at the start and \
             {train_err:.4} % after {} simulations. The measured metrics may not depend on the \
             fitted coefficients ({}); fit others (--fit) or measure metrics they change. No profile written.",
            progress.evaluations(),
            fitted_names(&space)
        )));
    }
    let (heldout, fold_of_row) = held_out(args, &objective, &fold_unit)?;
    let mut heldout_by = BTreeMap::new();
    for (by, folds) in &by_folds {
        heldout_by.insert(by.clone(), held_out_by(args, &objective, &m, by, folds)?);
    }

    // Uncertainty: bootstrap over experiments of the linearised fit.
    let unc = search::uncertainty(&objective, &all, &best, &fitted_pred, args.seed)?;

    let results: Vec<RowResult> = (0..m.rows.len())
        .map(|r| RowResult {
            start: start_pred[r],
            fitted: fitted_pred[r],
            heldout: heldout[r],
            fold: fold_of_row[r],
        })
        .collect();
    let prof = build_profile(BuildInputs {
        args,
        rows: &m.rows,
        experiments: &m.experiments,
        weights: &m.row_weights,
        weights_given: &m.weights,
        space: &space,
        best: &best,
        unc: &unc,
        results: &results,
        inputs: &inputs,
        evaluations: progress.evaluations(),
        heldout_by,
    })
    .map_err(FitError::Input)?;
    write_profile(args, &m, &results, &prof)?;
    progress.finish(&format!(
        "wrote {}: weighted MAPE {:.3} % → {:.3} % (train){}; {} simulations",
        args.out.display(),
        start_err,
        train_err,
        prof.error
            .heldout_mape
            .map_or(String::new(), |h| format!(", {h:.3} % held out")),
        progress.evaluations()
    ));
    Ok(Outcome {
        summary: summary(args, &prof)?,
        profile: prof,
        rows: m.rows,
        results,
    })
}

/// The fitted coefficients' names, for messages.
fn fitted_names(space: &Space) -> String {
    space
        .fitted
        .iter()
        .map(params::Fitted::name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The table's rows (each distinct run file once, in table order, as an
/// experiment), then one experiment per trace with a row per request and
/// metric; and each row's weight.
fn read_measurements(args: &FitArgs) -> Result<Measured, FitError> {
    let input = FitError::Input;
    if args.measurements.is_none() && args.traces.is_empty() {
        return Err(input(
            "nothing to fit to: give --measurements M.csv (an aggregate table), \
             --trace RUN_FILE=HEADER.yaml,DATA.csv (an observed trace, repeatable), or both"
                .into(),
        ));
    }
    let trace_args: Vec<traces::TraceArg> = args
        .traces
        .iter()
        .map(|t| traces::parse_arg(t))
        .collect::<Result<_, _>>()
        .map_err(input)?;
    let mut rows = match &args.measurements {
        Some(m) => table::read(m).map_err(input)?,
        None => Vec::new(),
    };
    let table_name = args
        .measurements
        .as_ref()
        .map_or_else(String::new, |m| m.display().to_string());
    let weights = parse_weights(&args.weights).map_err(FitError::Input)?;
    let mut experiments: Vec<Experiment> = Vec::new();
    let mut row_exp: Vec<usize> = Vec::new();
    for r in &rows {
        let i = match experiments.iter().position(|e| e.path == r.path) {
            Some(i) => i,
            None => {
                experiments.push(
                    Experiment::load(&r.run_file, &r.path, r.line, &table_name)
                        .map_err(FitError::Input)?,
                );
                experiments.len() - 1
            }
        };
        row_exp.push(i);
    }
    let table_experiments = experiments.len();
    let table_rows = rows.len();
    let mut row_unit: Vec<usize> = row_exp.clone();
    let mut next_unit = table_experiments;
    let mut trace_spans: Vec<(usize, usize)> = Vec::new();
    for (t, arg) in trace_args.iter().enumerate() {
        let (trows, rtt) = traces::read_rows(arg).map_err(input)?;
        experiments.push(Experiment::load_trace(arg, rtt).map_err(input)?);
        let e = experiments.len() - 1;
        let mut unit_of: BTreeMap<u64, usize> = BTreeMap::new();
        let units: Vec<usize> = trows
            .iter()
            .map(|r| {
                let n = unit_of.len();
                *unit_of.entry(r.request.unwrap_or(0)).or_insert(n)
            })
            .collect();
        // The means per held-out fold (the folds [`fold_units`] deals).
        let folds = if args.holdout >= 2 {
            args.holdout as usize
        } else {
            1
        };
        let fold_of = trace_folds(unit_of.len(), folds, args.seed, t);
        let means = traces::mean_rows(&trows, &units, &fold_of, folds);
        trace_spans.push((rows.len(), trows.len() + means.len()));
        for (r, u) in trows.into_iter().zip(units).chain(means) {
            row_exp.push(e);
            row_unit.push(next_unit + u);
            rows.push(r);
        }
        next_unit += unit_of.len();
    }
    let row_weights = row_weights(&rows, &weights, &trace_spans)?;
    Ok(Measured {
        trace_args,
        rows,
        experiments,
        row_exp,
        row_unit,
        trace_spans,
        table_experiments,
        table_rows,
        weights,
        row_weights,
    })
}

/// Each row's weight. A trace's rows weigh like one table row per metric:
/// its requests' weights of a metric sum to the metric's weight.
fn row_weights(
    rows: &[Row],
    weights: &BTreeMap<String, f64>,
    trace_spans: &[(usize, usize)],
) -> Result<Vec<f64>, FitError> {
    let mut row_weights: Vec<f64> = rows.iter().map(|r| weight_of(weights, &r.metric)).collect();
    for &(first, n) in trace_spans {
        for m in traces::METRICS.iter().chain(&traces::MEANS) {
            let count = rows[first..first + n]
                .iter()
                .filter(|r| r.metric.field == *m)
                .count();
            for (r, w) in rows[first..first + n].iter().zip(&mut row_weights[first..]) {
                if r.metric.field == *m {
                    *w /= count as f64;
                }
            }
        }
    }
    if row_weights.iter().all(|w| *w == 0.0) {
        return Err(FitError::Input(
            "every measurement has weight 0 (--weight); give some metric a weight > 0".into(),
        ));
    }
    Ok(row_weights)
}

/// One profile fits one latency model from one set of coefficients.
fn check_one_start(experiments: &[Experiment]) -> Result<(), FitError> {
    let first = &experiments[0];
    for e in &experiments[1..] {
        if e.latency_model != first.latency_model {
            return Err(FitError::Input(format!(
                "run file {} ({}) uses the {} latency model and {} ({}) uses {}; \
                 one profile fits one latency model",
                first.name, first.origin, first.latency_model, e.name, e.origin, e.latency_model
            )));
        }
        if let Some((key, a, b)) = first.variant.difference(&e.variant) {
            return Err(FitError::Input(format!(
                "run file {} ({}) sets model.{key} = \"{a}\" and {} ({}) \"{b}\"; \
                 one profile fits one step-time model: give every run file the same setting",
                first.name, first.origin, e.name, e.origin
            )));
        }
        if e.start != first.start {
            return Err(FitError::Input(format!(
                "run files {} ({}) and {} ({}) start from different coefficients \
                 (model.alpha/model.beta or a calibration); a fit starts from one set",
                first.name, first.origin, e.name, e.origin
            )));
        }
    }
    Ok(())
}

/// Per row: its held-out fold. Folds: the table's experiments dealt among
/// them, and each trace's requests.
fn fold_units(args: &FitArgs, m: &Measured) -> Result<Vec<usize>, FitError> {
    let smallest_trace = m
        .trace_spans
        .iter()
        .map(|&(f, n)| span_units(m, f, n).1)
        .min();
    let max_folds = match smallest_trace {
        Some(n) => n,
        None => m.table_experiments,
    };
    if args.holdout == 1 || args.holdout as usize > max_folds {
        return Err(FitError::Input(match smallest_trace {
            None => format!(
                "--holdout {}: folds are by experiment; give 0 (none) or 2 to {} (the run files of the table)",
                args.holdout, m.table_experiments
            ),
            Some(n) => format!(
                "--holdout {}: a trace's folds are by request; give 0 (none) or 2 to {n} (the usable requests of the smallest trace)",
                args.holdout
            ),
        }));
    }
    let mut fold_unit: Vec<usize> = vec![0; m.rows.len()];
    if args.holdout >= 2 {
        let k = args.holdout as usize;
        let f = search::folds(m.table_experiments, k, args.seed);
        for r in 0..m.table_rows {
            fold_unit[r] = f[m.row_exp[r]];
        }
        for (t, &(first, n)) in m.trace_spans.iter().enumerate() {
            let (base, units) = span_units(m, first, n);
            let f = trace_folds(units, k, args.seed, t);
            for r in first..first + n {
                fold_unit[r] = f[m.row_unit[r] - base];
            }
        }
    }
    Ok(fold_unit)
}

/// The held-out fold of each of a trace's `units` requests (trace `t`, `k`
/// folds): the same deal for its request rows and its mean rows.
fn trace_folds(units: usize, k: usize, seed: u64, t: usize) -> Vec<usize> {
    search::folds(units, k, seed.wrapping_add(1 + t as u64))
}

/// A trace's rows `first..first + n`: their first request unit and how many.
fn span_units(m: &Measured, first: usize, n: usize) -> (usize, usize) {
    let span = &m.row_unit[first..first + n];
    let base = span.iter().copied().min().unwrap_or(0);
    let last = span.iter().copied().max().unwrap_or(base);
    (base, last - base + 1)
}

/// Per row: the bootstrap's unit. A table row's experiment; for a trace,
/// blocks of ⌈√R⌉ consecutive requests (of R). Requests that overlap in
/// time share queues and batches, so their errors are not independent:
/// resampling them one by one understates the spread (a block bootstrap
/// keeps the dependence within a block).
fn bootstrap_units(m: &Measured) -> Vec<usize> {
    let mut boot_unit = m.row_unit.clone();
    let mut next_block = m.table_experiments;
    for &(first, n) in &m.trace_spans {
        let (base, requests) = span_units(m, first, n);
        let len = (requests as f64).sqrt().ceil().max(1.0) as usize;
        let span = first..first + n;
        for (b, &u) in boot_unit[span.clone()].iter_mut().zip(&m.row_unit[span]) {
            *b = next_block + (u - base) / len;
        }
        next_block += requests.div_ceil(len);
    }
    boot_unit
}

/// The fit's inputs (hashed into the profile), checked against its outputs:
/// no output may overwrite an input.
fn check_outputs(args: &FitArgs, m: &Measured) -> Result<Vec<(String, PathBuf)>, FitError> {
    let mut inputs: Vec<(String, PathBuf)> = Vec::new();
    if let Some(t) = &args.measurements {
        inputs.push(("the measurements table".into(), t.clone()));
    }
    for t in &m.trace_args {
        inputs.push((format!("trace header ({})", t.spec), t.header.clone()));
        inputs.push((format!("trace data ({})", t.spec), t.data.clone()));
    }
    for e in &m.experiments {
        if inputs.iter().any(|(_, p)| *p == e.path) {
            continue;
        }
        inputs.push((format!("run file {}", e.name), e.path.clone()));
        if let Some(c) = &e.model_config {
            inputs.push((format!("model config {}", c.display()), c.clone()));
        }
    }
    let mut outputs: Vec<(&str, PathBuf)> = vec![("--out", args.out.clone())];
    if let Some(h) = &args.html {
        outputs.push(("--html", h.clone()));
    }
    let problems = crate::output::check_paths(&outputs, &inputs);
    if !problems.is_empty() {
        return Err(FitError::Input(problems.join("\n")));
    }
    Ok(inputs)
}

/// `--jobs` (default: the CPUs), `--sim-seeds` and `--prior-sd`, checked.
fn check_runs(args: &FitArgs) -> Result<usize, FitError> {
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    if jobs == 0 {
        return Err(FitError::Input("--jobs must be ≥ 1".into()));
    }
    if args.sim_seeds == 0 {
        return Err(FitError::Input(
            "--sim-seeds must be ≥ 1 (the workload seeds each deployment is simulated at)".into(),
        ));
    }
    if let Some(sd) = args.prior_sd.filter(|sd| !(sd.is_finite() && *sd > 0.0)) {
        return Err(FitError::Input(format!(
            "--prior-sd {sd}: the prior's standard deviation is in log units and must be a \
             positive number (0.1: each coefficient within about ±10 % of its group's factor; \
             leave it out to keep every coefficient only if it pays for its freedom)"
        )));
    }
    Ok(jobs)
}

/// Per row: its held-out prediction and fold (`--holdout K`: each fold
/// predicted by a fit on the others).
#[allow(clippy::type_complexity)]
fn held_out(
    args: &FitArgs,
    objective: &Objective,
    fold_unit: &[usize],
) -> Result<(Vec<Option<f64>>, Vec<Option<usize>>), FitError> {
    if args.holdout < 2 {
        return Ok((vec![None; fold_unit.len()], vec![None; fold_unit.len()]));
    }
    let k = args.holdout as usize;
    let heldout = predict_held_out(args, objective, fold_unit, k, |f| {
        format!("fold {}/{k}", f + 1)
    })?;
    let fold_of_row = heldout
        .iter()
        .zip(fold_unit)
        .map(|(h, &f)| h.map(|_| f))
        .collect();
    Ok((heldout, fold_of_row))
}

/// Each row predicted by the fit on the rows of the other folds
/// (`fold_of_row[r]` in `0..folds`, `label` names a fold in the progress);
/// `None` for a row of a fold that has no rows to fit without it.
fn predict_held_out(
    args: &FitArgs,
    objective: &Objective,
    fold_of_row: &[usize],
    folds: usize,
    label: impl Fn(usize) -> String,
) -> Result<Vec<Option<f64>>, FitError> {
    let rows = fold_of_row.len();
    let mut heldout: Vec<Option<f64>> = vec![None; rows];
    for k in 0..folds {
        let train: Vec<usize> = (0..rows).filter(|&r| fold_of_row[r] != k).collect();
        let test: Vec<usize> = (0..rows).filter(|&r| fold_of_row[r] == k).collect();
        if test.is_empty() || train.is_empty() {
            continue;
        }
        let x = search::fit(objective, &train, args.iterations, &label(k))?;
        let pred = objective.predict(&test, &x)?;
        for &r in &test {
            heldout[r] = Some(pred[r]);
        }
    }
    Ok(heldout)
}

/// The rows of each metric, by the metric's name (in name order).
fn rows_by_metric(rows: &[Row]) -> BTreeMap<String, Vec<usize>> {
    let mut out: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (r, row) in rows.iter().enumerate() {
        out.entry(row.metric.name()).or_default().push(r);
    }
    out
}

/// `--holdout-by`: per way of leaving out (`experiment`, `model`, `gpu`),
/// the name of each unit left out in turn and, per row, its unit.
type ByFolds = Vec<(String, (Vec<String>, Vec<usize>))>;

/// `--holdout-by` checked: each a known key with at least two units among
/// the experiments (a trace is one experiment).
fn by_folds(list: &[String], m: &Measured) -> Result<ByFolds, FitError> {
    let mut out: ByFolds = Vec::new();
    for by in list {
        let key = |e: &Experiment| -> String {
            match by.as_str() {
                "model" => e.model.to_ascii_lowercase(),
                "gpu" => e.hardware.to_ascii_lowercase(),
                _ => e.name.clone(),
            }
        };
        if !["experiment", "model", "gpu"].contains(&by.as_str()) {
            return Err(FitError::Input(format!(
                "--holdout-by {by}: give experiment, model or gpu (comma separated): \
                 leave out each run file, each model or each GPU type in turn"
            )));
        }
        if out.iter().any(|(b, _)| b == by) {
            continue;
        }
        let mut units: Vec<String> = m.experiments.iter().map(key).collect();
        units.sort();
        units.dedup();
        if units.len() < 2 {
            return Err(FitError::Input(format!(
                "--holdout-by {by}: every measured experiment has the same {by} ({}); \
                 leaving it out leaves nothing to fit. Measure a second {by}, or leave {by} out of --holdout-by",
                units.first().map_or("none", String::as_str)
            )));
        }
        let row_unit = m
            .row_exp
            .iter()
            .map(|&e| {
                let k = key(&m.experiments[e]);
                units.iter().position(|u| *u == k).unwrap_or(0)
            })
            .collect();
        out.push((by.clone(), (units, row_unit)));
    }
    Ok(out)
}

/// The held-out error of leaving out each unit of `by` in turn: every
/// row predicted by the fit on the other units' rows.
fn held_out_by(
    args: &FitArgs,
    objective: &Objective,
    m: &Measured,
    by: &str,
    (units, row_unit): &(Vec<String>, Vec<usize>),
) -> Result<profile::HeldOutBy, FitError> {
    let rows = row_unit.len();
    let pred: Vec<f64> = predict_held_out(args, objective, row_unit, units.len(), |k| {
        format!(
            "leave-one-{by}-out {}/{} ({})",
            k + 1,
            units.len(),
            units[k]
        )
    })?
    .into_iter()
    .map(|p| p.unwrap_or(f64::NAN))
    .collect();
    let all: Vec<usize> = (0..rows).collect();
    let ones = vec![1.0; rows];
    let per_metric = rows_by_metric(&m.rows)
        .into_iter()
        .map(|(name, rs)| (name, search::mape(&m.rows, &ones, &rs, &pred)))
        .collect();
    let per_unit = units
        .iter()
        .enumerate()
        .map(|(k, u)| {
            let rs: Vec<usize> = all.iter().copied().filter(|&r| row_unit[r] == k).collect();
            (u.clone(), search::mape(&m.rows, &m.row_weights, &rs, &pred))
        })
        .collect();
    Ok(profile::HeldOutBy {
        folds: units.len() as u32,
        mape: search::mape(&m.rows, &m.row_weights, &all, &pred),
        per_metric,
        per_unit,
    })
}

/// The profile (and `--html` page), each written atomically.
fn write_profile(
    args: &FitArgs,
    m: &Measured,
    results: &[RowResult],
    prof: &profile::Profile,
) -> Result<(), FitError> {
    let text = format!(
        "# blis calibration profile: written by `blis calibrate fit`; apply with\n\
         # [model] calibration = \"{}\" in a run file.\n{}",
        args.out
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        toml::to_string(prof).map_err(|e| FitError::Runtime(e.to_string()))?
    );
    let page = args.html.as_ref().map(|_| {
        html::page(
            &m.rows,
            &m.experiments,
            &m.row_exp,
            results,
            prof,
            &args.out.display().to_string(),
        )
    });
    write_file(&args.out, text.as_bytes()).map_err(FitError::Runtime)?;
    if let (Some(path), Some(page)) = (&args.html, page) {
        write_file(path, page.as_bytes()).map_err(FitError::Runtime)?;
    }
    Ok(())
}

/// The JSON summary `blis calibrate fit` prints.
fn summary(args: &FitArgs, prof: &profile::Profile) -> Result<String, FitError> {
    let fitted: serde_json::Map<String, serde_json::Value> = prof
        .fitted
        .iter()
        .map(|f| (f.name.clone(), json!(f.value)))
        .collect();
    let summary = json!({
        "profile": args.out.display().to_string(),
        "latency_model": prof.latency_model,
        "start_mape": prof.error.start_mape,
        "train_mape": prof.error.train_mape,
        "heldout_mape": prof.error.heldout_mape,
        "fitted": fitted,
        "evaluations": prof.fit.evaluations,
    });
    serde_json::to_string_pretty(&summary).map_err(|e| FitError::Runtime(e.to_string()))
}

/// Write `bytes` to `path` atomically.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let (mut file, pending) = crate::output::PendingOutput::create(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    file.write_all(bytes)
        .and_then(|_| file.flush())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    drop(file);
    pending
        .commit()
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The method's description, with `--sim-seeds` when it is more than one.
fn with_seeds(seeds: u32, method: String) -> String {
    if seeds > 1 {
        format!("{method}; each prediction the mean of {seeds} simulations (workload seeds: the run file's, then +1, …)")
    } else {
        method
    }
}

struct BuildInputs<'a> {
    args: &'a FitArgs,
    rows: &'a [Row],
    experiments: &'a [Experiment],
    weights: &'a [f64],
    weights_given: &'a BTreeMap<String, f64>,
    space: &'a Space,
    best: &'a [f64],
    unc: &'a [search::Uncertainty],
    results: &'a [RowResult],
    inputs: &'a [(String, PathBuf)],
    evaluations: u64,
    heldout_by: BTreeMap<String, profile::HeldOutBy>,
}

fn build_profile(b: BuildInputs) -> Result<profile::Profile, String> {
    let (coeffs, _) = b.space.at(b.best);
    let all: Vec<usize> = (0..b.rows.len()).collect();
    let col = |f: fn(&RowResult) -> Option<f64>| -> Vec<f64> {
        b.results.iter().map(|r| f(r).unwrap_or(f64::NAN)).collect()
    };
    let start = col(|r| Some(r.start));
    let fitted = col(|r| Some(r.fitted));
    let held = col(|r| r.heldout);
    let any_held = b.results.iter().any(|r| r.heldout.is_some());
    let held_rows: Vec<usize> = all
        .iter()
        .copied()
        .filter(|&r| b.results[r].heldout.is_some())
        .collect();
    let mut per_metric = BTreeMap::new();
    for (name, rs) in rows_by_metric(b.rows) {
        let hr: Vec<usize> = rs
            .iter()
            .copied()
            .filter(|&r| b.results[r].heldout.is_some())
            .collect();
        let ones = vec![1.0; b.rows.len()];
        per_metric.insert(
            name,
            profile::MetricError {
                rows: rs.len() as u64,
                start_mape: search::mape(b.rows, &ones, &rs, &start),
                train_mape: search::mape(b.rows, &ones, &rs, &fitted),
                heldout_mape: (!hr.is_empty()).then(|| search::mape(b.rows, &ones, &hr, &held)),
            },
        );
    }
    let mut deployments: Vec<profile::Deployment> = b
        .experiments
        .iter()
        .map(|e| profile::Deployment {
            model: e.model.clone(),
            hardware: e.hardware.clone(),
            tp: e.tp,
        })
        .collect();
    deployments.sort();
    deployments.dedup();
    let mut inputs = Vec::new();
    for (role, path) in b.inputs {
        inputs.push(profile::Input {
            role: role.clone(),
            path: path.display().to_string(),
            sha256: profile::sha256_file(path)?,
        });
    }
    let fitted_list = b
        .space
        .fitted
        .iter()
        .zip(b.unc)
        .zip(b.best)
        .map(|((f, u), &x)| {
            let value = f.start * x.exp();
            let value = value.clamp(f.lo, f.hi);
            profile::FittedCoefficient {
                name: f.name(),
                start: f.start,
                value,
                bounds: [f.lo, f.hi],
                std: u.std,
                interval_95: u.interval,
                identifiable: u.identifiable,
                note: u.note.clone(),
            }
        })
        .collect();
    let [moe_expert_load, geometry] = b.experiments[0].variant.recorded();
    Ok(profile::Profile {
        blis_calibration_profile: profile::FORMAT,
        blis_version: env!("CARGO_PKG_VERSION").to_string(),
        created: profile::now_utc(),
        latency_model: b.experiments[0].latency_model.to_string(),
        moe_expert_load,
        geometry,
        coefficients: profile::Coefficients {
            alpha: coeffs.alpha,
            beta: coeffs.beta,
        },
        deployments,
        fitted: fitted_list,
        error: profile::Errors {
            start_mape: search::mape(b.rows, b.weights, &all, &start),
            train_mape: search::mape(b.rows, b.weights, &all, &fitted),
            heldout_mape: any_held.then(|| search::mape(b.rows, b.weights, &held_rows, &held)),
            per_metric,
            heldout_by: b.heldout_by,
        },
        fit: profile::Settings {
            objective: format!("weighted mean absolute percentage error (%) over the table's rows and the traces' requests and means (a trace's requests of one metric weigh as one row, its means of one metric as {TRACE_MEAN_WEIGHT})"),
            method: with_seeds(b.args.sim_seeds, {
                let stages = "Levenberg-Marquardt on log-factors (iteratively reweighted squares of the relative errors): one factor per family (every alpha, every beta), then from there one per group (each alpha, every beta together), then every coefficient";
                let stages = match b.args.prior_sd {
                    Some(sd) => format!("{stages}, with a Gaussian prior of standard deviation {sd} (log units) around the one-per-group point"),
                    None => stages.to_string(),
                };
                if b.args.iterations > 0 {
                    format!(
                        "{stages}; then {} Nelder-Mead (argmin) iterations on the weighted MAPE",
                        b.args.iterations
                    )
                } else {
                    stages
                }
            }),
            seed: b.args.seed,
            sim_seeds: b.args.sim_seeds,
            holdout_folds: b.args.holdout,
            holdout_by: b.args.holdout_by.clone(),
            evaluations: b.evaluations,
            weights: b.weights_given.clone(),
        },
        inputs,
    })
}

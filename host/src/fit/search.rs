//! The minimisation of `blis calibrate fit` and what it reports.
//!
//! **Objective.** The weighted mean absolute percentage error over the
//! table's rows, `100 · Σ wᵢ |predᵢ − measᵢ| / measᵢ / Σ wᵢ`, where a
//! prediction is the metric in the report of the row's run file simulated
//! with the candidate coefficients (every run file of the rows at once, on
//! threads).
//!
//! **Method.** On the coordinates of [`super::params`] (log-factors of
//! the starting values), Levenberg–Marquardt, in two stages: one factor
//! per family, then from there one per group — each alpha alone (the overheads before the first token,
//! after the last, per token), every beta by one factor (the step time's
//! scale), which is what most miscalibration is — then every coefficient
//! from there, kept only if it pays for its freedom counted in independent
//! units (experiments, a trace's requests). Each iteration takes the relative residuals' Jacobian by
//! finite differences of 2 % (a simulation's metrics are piecewise constant
//! only at the scale of a tick, far below that), weighs each squared
//! residual by 1 / |residual| (floored at the median: iteratively
//! reweighted least squares, so that the squares' step is a step on the
//! absolute errors), solves for the step at a few dampings and lengths, and
//! keeps the best trial only if it lowers the weighted MAPE. The Jacobian's
//! simulation sets, then the trials', run as one batch each on every core.
//! `--iterations N` adds N Nelder–Mead (argmin) iterations on the weighted
//! MAPE itself from there (derivative-free, deterministic). (Until
//! 2026-12-03 both stages were Nelder–Mead: one simulation set at a time,
//! 146 s for the 15-experiment fit of `examples/bench/fit-sim-to-real.sh`
//! on an idle machine, against 44 s now.)
//!
//! **Uncertainty.** At the optimum, the relative residuals' Jacobian in the
//! coordinates is taken by finite differences (one simulation set per
//! coefficient). The experiments (for a trace, its requests) are
//! resampled with replacement and the
//! linearised weighted least-squares step is solved for each resample; a
//! coefficient's standard deviation and 95 % interval are those of the
//! resampled steps. A coefficient the metrics do not determine (the
//! Jacobian's columns are (nearly) dependent: pivoted Cholesky drops it) is
//! marked not identifiable.

use std::cell::Cell;
use std::sync::Mutex;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use argmin::core::{CostFunction, Error as ArgminError, Executor, State};
use argmin::solver::neldermead::NelderMead;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::eval::{run_all, Experiment, Job, Sim};
use super::params::{Family, Space};
use super::table::Row;
use super::FitError;

/// Progress on stderr: a spinner with the current error on a terminal,
/// otherwise a line at each stage's end.
pub struct Progress {
    enabled: bool,
    bar: Option<indicatif::ProgressBar>,
    evals: Mutex<u64>,
}

impl Progress {
    pub fn new(enabled: bool, terminal: bool) -> Progress {
        let bar = (enabled && terminal).then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            b
        });
        Progress {
            enabled,
            bar,
            evals: Mutex::new(0),
        }
    }

    /// A line on stderr (above the spinner).
    pub fn note(&self, line: &str) {
        if !self.enabled {
            return;
        }
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn evaluated(&self, stage: &str, current: f64, best: f64) {
        let n = self.evaluations_add();
        if let Some(b) = &self.bar {
            b.set_message(format!(
                "{stage}: simulation set {n}, error {current:.3} %, best {best:.3} %"
            ));
            b.tick();
        }
    }

    fn evaluations_add(&self) -> u64 {
        match self.evals.lock() {
            Ok(mut n) => {
                *n += 1;
                *n
            }
            Err(_) => 0,
        }
    }

    /// Simulation sets run so far (one per candidate coefficient vector).
    pub fn evaluations(&self) -> u64 {
        self.evals.lock().map_or(0, |n| *n)
    }

    pub fn finish(&self, line: &str) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        if self.enabled {
            eprintln!("{line}");
        }
    }
}

/// Everything an evaluation needs.
pub struct Objective<'a> {
    pub experiments: &'a [Experiment],
    pub rows: &'a [Row],
    pub row_exp: &'a [usize],
    /// The unit each row is resampled with in the bootstrap: its experiment
    /// for a table row, its block of consecutive requests for a trace row.
    pub row_unit: &'a [usize],
    /// The independent unit of each row, what a coordinate's freedom is
    /// counted in: its experiment for a table row (an experiment's metrics
    /// are one draw of its workload and deployment), its request for a
    /// trace row.
    pub dof_unit: &'a [usize],
    pub weights: &'a [f64],
    pub space: &'a Space,
    pub jobs: usize,
    /// Workload seeds per experiment (`--sim-seeds`, ≥ 1).
    pub sim_seeds: u32,
    pub progress: &'a Progress,
    /// Stops every simulation once set (the fit then fails).
    pub cancel: Option<Arc<AtomicBool>>,
    /// `--prior-sd`: the every-coefficient stage shrunk toward the
    /// one-factor-per-group point ([`Prior`]) instead of judged by its
    /// freedom.
    pub prior_sd: Option<f64>,
}

impl Objective<'_> {
    /// The experiments some of `rows` name, in order.
    fn experiments_of(&self, rows: &[usize]) -> Vec<usize> {
        let mut e: Vec<usize> = rows.iter().map(|&r| self.row_exp[r]).collect();
        e.sort_unstable();
        e.dedup();
        e
    }

    /// Predictions of `rows` at each of `xs` (each experiment simulated
    /// at its `sim_seeds` seeds per point, all at once; a prediction is the
    /// mean over the seeds). A run that fails or lacks a metric is an error
    /// naming the table row.
    pub fn predict_many(&self, rows: &[usize], xs: &[Vec<f64>]) -> Result<Vec<Vec<f64>>, FitError> {
        let exps = self.experiments_of(rows);
        let seeds = self.sim_seeds.max(1);
        let coeffs: Vec<_> = xs.iter().map(|x| self.space.at(x).0).collect();
        let jobs: Vec<Job> = coeffs
            .iter()
            .flat_map(|c| {
                exps.iter()
                    .flat_map(move |&e| (0..seeds).map(move |j| (e, j, c)))
            })
            .collect();
        let reports = run_all(self.experiments, &jobs, self.jobs, self.cancel.as_ref());
        let mut out = Vec::with_capacity(xs.len());
        for (p, _) in xs.iter().enumerate() {
            let mut pred = vec![f64::NAN; self.rows.len()];
            for &r in rows {
                let k = exps.iter().position(|&e| e == self.row_exp[r]).unwrap_or(0);
                let first = (p * exps.len() + k) * seeds as usize;
                let mut sum = 0.0;
                for (j, sim) in reports[first..first + seeds as usize].iter().enumerate() {
                    sum += self.read(r, j as u32, sim)?;
                }
                pred[r] = sum / f64::from(seeds);
            }
            out.push(pred);
        }
        Ok(out)
    }

    /// Row `r`'s metric in one simulation (seed replica `j`) of its experiment.
    fn read(&self, r: usize, j: u32, sim: &Result<Sim, String>) -> Result<f64, FitError> {
        let row = &self.rows[r];
        let exp = &self.experiments[self.row_exp[r]];
        // Named in messages only (built when one is).
        let at_seed = || {
            if self.sim_seeds > 1 {
                format!(" at seed {}", exp.seed(j))
            } else {
                String::new()
            }
        };
        let sim = sim.as_ref().map_err(|e| {
            FitError::Runtime(format!(
                "{}, line {} (run file {}): the run{} failed: {e}",
                row.source,
                row.line,
                row.run_file,
                at_seed()
            ))
        })?;
        // One replayed request's value of a per-request metric (`field`).
        let request = |id: u64, field: &str| -> Result<f64, FitError> {
            sim.requests
                .get(&id)
                .and_then(|s| s.read(field, exp.trace.unwrap_or(0.0)))
                .ok_or_else(|| {
                    FitError::Input(format!(
                        "{}:{}: the replay of the trace through run file {}{} did not \
                         complete request_id {id} (or it generated one token: no {field}); \
                         check that the run file describes the server that produced the trace",
                        row.source,
                        row.line,
                        row.run_file,
                        at_seed(),
                    ))
                })
        };
        if let Some(ids) = &row.mean_of {
            let field = super::traces::per_request(&row.metric.field).unwrap_or_default();
            let mut sum = 0.0;
            for &id in ids.iter() {
                sum += request(id, field)?;
            }
            return Ok(sum / ids.len().max(1) as f64);
        }
        match row.request {
            None => row.metric.read(&sim.report).ok_or_else(|| {
                FitError::Input(format!(
                    "{}, line {}: the report of run file {}{} has no value for {} \
                     (no such stage, or no request completed); measure a metric the run reports",
                    row.source,
                    row.line,
                    row.run_file,
                    at_seed(),
                    row.metric.name()
                ))
            }),
            Some(id) => request(id, &row.metric.field),
        }
    }

    /// Predictions of `rows` at `x` (other rows NaN).
    pub fn predict(&self, rows: &[usize], x: &[f64]) -> Result<Vec<f64>, FitError> {
        let mut v = self.predict_many(rows, &[x.to_vec()])?;
        Ok(v.pop().unwrap_or_default())
    }
}

/// Weighted MAPE (%) of `pred` over `rows`.
pub fn mape(rows: &[Row], weights: &[f64], idx: &[usize], pred: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for &r in idx {
        let w = weights[r];
        num += w * ((pred[r] - rows[r].value) / rows[r].value).abs();
        den += w;
    }
    if den > 0.0 {
        100.0 * num / den
    } else {
        0.0
    }
}

/// The cost argmin minimises: the weighted MAPE of `rows` at a point of the
/// stage's coordinates (mapped to the full coordinates by `expand`), plus a
/// penalty outside the bounds. A failed simulation costs +∞ and is kept to
/// be reported.
struct Stage<'a, 'o> {
    obj: &'a Objective<'o>,
    rows: &'a [usize],
    expand: &'a dyn Fn(&[f64]) -> Vec<f64>,
    name: &'a str,
    prior: Option<&'a Prior>,
    best: Cell<f64>,
    failure: Mutex<Option<FitError>>,
}

impl CostFunction for Stage<'_, '_> {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, p: &Vec<f64>) -> Result<f64, ArgminError> {
        let x = (self.expand)(p);
        let (_, outside) = self.obj.space.at(&x);
        let value = match self.obj.predict(self.rows, &x) {
            Ok(pred) => {
                mape(self.obj.rows, self.obj.weights, self.rows, &pred)
                    + 1e3 * outside
                    + self.prior.map_or(0.0, |p| p.penalty(&x))
            }
            Err(e) => {
                if let Ok(mut f) = self.failure.lock() {
                    f.get_or_insert(e);
                }
                f64::INFINITY
            }
        };
        if value < self.best.get() {
            self.best.set(value);
        }
        self.obj
            .progress
            .evaluated(self.name, value, self.best.get());
        Ok(value)
    }
}

/// Nelder–Mead over `dim` coordinates from `x0` with an initial simplex of
/// `step` along each axis, at most `iters` iterations.
fn nelder_mead(
    stage: Stage,
    x0: Vec<f64>,
    step: f64,
    iters: u64,
) -> Result<(Vec<f64>, f64), FitError> {
    let mut simplex = vec![x0.clone()];
    for i in 0..x0.len() {
        let mut v = x0.clone();
        // Towards smaller values first for even axes, larger for odd: the
        // simplex straddles the start.
        v[i] += if i % 2 == 0 { -step } else { step };
        simplex.push(v);
    }
    let solver = NelderMead::new(simplex)
        .with_sd_tolerance(1e-3)
        .map_err(|e| FitError::Runtime(e.to_string()))?;
    let res = Executor::new(&stage, solver)
        .configure(|s| s.max_iters(iters))
        .run();
    if let Some(e) = stage.failure.lock().ok().and_then(|mut f| f.take()) {
        return Err(e);
    }
    let res = res.map_err(|e| FitError::Runtime(format!("the optimiser failed: {e}")))?;
    let state = res.state();
    let best = state.get_best_param().cloned().unwrap_or(x0);
    Ok((best, state.get_best_cost()))
}

impl CostFunction for &Stage<'_, '_> {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, p: &Vec<f64>) -> Result<f64, ArgminError> {
        (**self).cost(p)
    }
}

/// A Gaussian prior on every fitted coordinate around `anchor` (the
/// one-factor-per-group point: the shipped coefficients' shape at the
/// scale the data chose), `--prior-sd SD` in log units. In the objective's
/// units it adds `kappa · Σ (xᵢ − anchorᵢ)²` with
/// `kappa = anchor's weighted MAPE / (2 · SD² · m)`, m the independent units
/// (experiments) fitted: the negative log posterior of a Laplace likelihood
/// of each unit's relative error, its scale the anchor's mean error, and
/// the prior, divided by the likelihood's weight per unit of MAPE. So a
/// coefficient moves off its group's factor by SD only where that lowers
/// the error by anchor MAPE / (2 m) or more, and the more experiments
/// there are, the freer it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Prior {
    pub anchor: Vec<f64>,
    pub kappa: f64,
}

impl Prior {
    /// The prior of standard deviation `sd` around `anchor`, whose
    /// weighted MAPE is `anchor_cost`, for a fit on `units` units.
    pub fn new(anchor: Vec<f64>, sd: f64, anchor_cost: f64, units: usize) -> Prior {
        let kappa = anchor_cost.max(1e-9) / (2.0 * sd * sd * units.max(1) as f64);
        Prior { anchor, kappa }
    }

    /// The penalty at full coordinates `x` (weighted-MAPE units).
    pub fn penalty(&self, x: &[f64]) -> f64 {
        self.kappa
            * x.iter()
                .zip(&self.anchor)
                .map(|(xi, ai)| (xi - ai).powi(2))
                .sum::<f64>()
    }
}

/// The independent units of the rows that count (weight > 0): what an
/// extra coordinate is paid for with. Not the rows: an experiment's dozen
/// metrics move together with its deployment's physics, and twelve
/// coefficients fitted to twelve experiments' 200 metrics fit those
/// experiments, not the next one.
fn count_units(obj: &Objective, rows: &[usize]) -> usize {
    let mut units: Vec<usize> = rows
        .iter()
        .filter(|&&r| obj.weights[r] > 0.0)
        .map(|&r| obj.dof_unit[r])
        .collect();
    units.sort_unstable();
    units.dedup();
    units.len()
}

/// "alpha[0] ×0.5000, …" of full coordinates `x`.
fn factors(space: &Space, x: &[f64]) -> String {
    space
        .fitted
        .iter()
        .zip(x)
        .map(|(f, v)| format!("{} ×{:.4}", f.name(), v.exp()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Stages 1a and 1 of [`fit`]: one factor per family, then one per group.
/// The point, its cost and its free coordinates (0: the model has no
/// coarser grouping than its coefficients; the start).
fn coarse_stages(
    obj: &Objective,
    rows: &[usize],
    label: &str,
) -> Result<(Vec<f64>, f64, usize), FitError> {
    let n = obj.space.fitted.len();
    let (groups, member) = obj.space.groups();
    if groups.len() >= n {
        return Ok((vec![0.0; n], f64::INFINITY, 0));
    }
    let expand = |g: &[f64]| -> Vec<f64> { member.iter().map(|&m| g[m]).collect() };
    // First every alpha by one factor and every beta by another (the
    // coarsest miscalibration), then each group from there: from the
    // start itself, a nearly free α₂ can trade against the betas into
    // a worse optimum (the golden fit: 1.24 % with α₂ ×2.9, against
    // 1.09 % from the families' point).
    let mut g0 = vec![0.0; groups.len()];
    let (families, family_member) = obj.space.families();
    if families < groups.len() {
        let expand_f = |f: &[f64]| -> Vec<f64> { family_member.iter().map(|&m| f[m]).collect() };
        let name = format!("{label}, stage 1a (one factor per family)");
        let (f, c) = levenberg_marquardt(
            obj,
            rows,
            &expand_f,
            vec![0.0; families],
            LM_ITERS_FAMILIES,
            None,
            &name,
        )?;
        let xf = expand_f(&f);
        for (k, &grp) in member.iter().enumerate() {
            g0[grp] = xf[k];
        }
        obj.progress.note(&format!(
            "{name}: weighted MAPE {c:.3} % ({})",
            factors(obj.space, &xf)
        ));
    }
    let name = format!("{label}, stage 1 (one factor per group: each alpha, the betas)");
    let (g, c) = levenberg_marquardt(obj, rows, &expand, g0, LM_ITERS_FAMILIES, None, &name)?;
    let x = expand(&g);
    obj.progress.note(&format!(
        "{name}: weighted MAPE {c:.3} % ({})",
        factors(obj.space, &x)
    ));
    Ok((x, c, groups.len()))
}

/// Fit the coordinates on `rows` from the start (0): Levenberg–Marquardt
/// on one factor per family (every alpha, every beta), then from there on
/// one factor per group ([`super::params::Group`]: each alpha, the betas),
/// then on every coefficient — kept only if it pays for its freedom, or,
/// with `--prior-sd`, shrunk toward the group point by [`Prior`] — then
/// Nelder–Mead on the weighted MAPE itself (plus the prior's penalty) for
/// at most `iters` iterations. Returns the best coordinates.
pub fn fit(obj: &Objective, rows: &[usize], iters: u64, label: &str) -> Result<Vec<f64>, FitError> {
    let n = obj.space.fitted.len();
    let m = count_units(obj, rows);
    let (mut x, mut best_cost, mut best_params) = coarse_stages(obj, rows, label)?;
    let ident = |p: &[f64]| p.to_vec();
    let prior = match obj.prior_sd {
        Some(sd) => {
            let anchor_cost = if best_params == 0 {
                mape(obj.rows, obj.weights, rows, &obj.predict(rows, &x)?)
            } else {
                best_cost
            };
            Some(Prior::new(x.clone(), sd, anchor_cost, m))
        }
        None => None,
    };
    let name = match obj.prior_sd.zip(prior.as_ref()) {
        Some((sd, p)) => format!(
            "{label}, stage 2 (every coefficient, prior sd {sd} around stage 1, {:.4} per log unit²)",
            p.kappa
        ),
        None => format!("{label}, stage 2 (every coefficient)"),
    };
    let (x2, c2) = levenberg_marquardt(
        obj,
        rows,
        &ident,
        x.clone(),
        LM_ITERS_EVERY,
        prior.as_ref(),
        &name,
    )?;
    obj.progress.note(&format!(
        "{name}: weighted MAPE {:.3} %{} ({})",
        c2,
        if prior.is_some() {
            " with the prior's penalty"
        } else {
            ""
        },
        factors(obj.space, &x2)
    ));
    // With a prior the penalty guards the freedom (LM keeps only steps that
    // lower the penalised error); without, the freedom is counted.
    if prior.is_some() || best_params == 0 || better_per_freedom(c2, n, best_cost, best_params, m) {
        x = x2;
        best_cost = c2;
        best_params = n;
    } else {
        obj.progress.note(&format!(
            "{name}: kept stage 1: {n} coefficients on {m} measurements lower the error too little to pay for their freedom"
        ));
    }
    if iters > 0 {
        let name = format!("{label}, stage 3 (Nelder–Mead on the MAPE)");
        let stage = Stage {
            obj,
            rows,
            expand: &ident,
            name: &name,
            prior: prior.as_ref(),
            best: Cell::new(f64::INFINITY),
            failure: Mutex::new(None),
        };
        let (x3, c3) = nelder_mead(stage, x.clone(), 0.05, iters)?;
        obj.progress
            .note(&format!("{name}: weighted MAPE {c3:.3} %"));
        if better_per_freedom(c3, n, best_cost, best_params, m) {
            x = x3;
        }
    }
    Ok(x)
}

/// Whether an error `c` with `p` free coordinates beats `best` with
/// `best_p`, on `m` measurements: per degree of freedom, `c / (m − p)`
/// against `best / (m − best_p)` (as the adjusted R² or the reduced χ²
/// compare fits). Freeing coordinates always lowers the error on the
/// measurements themselves, down to fitting their noise; a stage that frees
/// more of them is kept only if the error falls faster than the freedom it
/// uses (never with as many coordinates as measurements).
fn better_per_freedom(c: f64, p: usize, best: f64, best_p: usize, m: usize) -> bool {
    if p == best_p {
        return c <= best;
    }
    if m <= p {
        return false;
    }
    if m <= best_p {
        return true;
    }
    c / (m - p) as f64 <= best / (m - best_p) as f64
}

/// Fold of each of `n` experiments: a seeded shuffle dealt round-robin.
pub fn folds(n: usize, k: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for i in (1..n).rev() {
        let j = rng.random_range(0..=i);
        order.swap(i, j);
    }
    let mut fold = vec![0; n];
    for (pos, &e) in order.iter().enumerate() {
        fold[e] = pos % k;
    }
    fold
}

/// A fitted coefficient's uncertainty.
#[derive(Clone, Debug)]
pub struct Uncertainty {
    /// Bootstrap standard deviation (coefficient units).
    pub std: f64,
    /// Bootstrap 95 % interval (coefficient units).
    pub interval: [f64; 2],
    pub identifiable: bool,
    pub note: String,
}

/// The relative residuals `(pred − meas) / meas` of `rows` and their
/// derivatives by finite differences: `shifted[p]` are the predictions with
/// coordinate `p` moved by `steps[p]` ([`fd_step`]).
fn linearise(
    obj: &Objective,
    rows: &[usize],
    pred: &[f64],
    shifted: &[Vec<f64>],
    steps: &[f64],
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let n = shifted.len();
    let mut res = vec![0.0; rows.len()];
    let mut jac = vec![vec![0.0; n]; rows.len()];
    for (i, &r) in rows.iter().enumerate() {
        let meas = obj.rows[r].value;
        res[i] = (pred[r] - meas) / meas;
        for p in 0..n {
            jac[i][p] = (shifted[p][r] - pred[r]) / meas / steps[p];
        }
    }
    (res, jac)
}

/// Levenberg–Marquardt iterations at most: of the one-factor-per-group
/// stage (cheap: a few simulation sets each) and of the every-coefficient
/// stage.
const LM_ITERS_FAMILIES: usize = 12;
const LM_ITERS_EVERY: usize = 6;
/// The steps tried at each iteration (one batch of simulations): (damping,
/// length) from twice the Gauss–Newton step (queueing makes the metrics
/// convex in the coefficients, so a linearised step falls short) to a
/// short step along the gradient.
const TRIALS: [(f64, f64); 4] = [(1e-3, 2.0), (1e-3, 1.0), (0.1, 1.0), (1.0, 1.0)];
/// The median of the absolute values.
fn median_abs(v: &[f64]) -> f64 {
    let mut a: Vec<f64> = v.iter().map(|x| x.abs()).collect();
    if a.is_empty() {
        return 0.0;
    }
    let mid = a.len() / 2;
    *a.select_nth_unstable_by(mid, f64::total_cmp).1
}

/// The smallest relative error a row's reweighting divides by.
const IRLS_FLOOR: f64 = 1e-3;
/// The largest move of one coordinate in one step (log units: × e).
const MAX_LOG_STEP: f64 = 1.0;

/// The prior's rows appended to a linearised least-squares problem at
/// group coordinates `g`: per full coordinate its distance from the anchor,
/// its derivative in `g` (`expand` is linear: a coordinate is its group's),
/// and a weight that makes the rows' weighted squares, on the scale the
/// reweighted errors have (½ · Σ w|r|/|r₀| · r² ≈ Σ w|r|), the penalty:
/// 2 · Σw · kappa / 100.
#[allow(clippy::type_complexity)]
fn prior_rows(
    p: &Prior,
    expand: &dyn Fn(&[f64]) -> Vec<f64>,
    g: &[f64],
    w_sum: f64,
    (res, jac, w): (&mut Vec<f64>, &mut Vec<Vec<f64>>, &mut Vec<f64>),
) {
    let x = expand(g);
    let zero = expand(&vec![0.0; g.len()]);
    let unit: Vec<Vec<f64>> = (0..g.len())
        .map(|q| {
            let mut e = vec![0.0; g.len()];
            e[q] = 1.0;
            expand(&e)
        })
        .collect();
    for (i, (xi, ai)) in x.iter().zip(&p.anchor).enumerate() {
        res.push(xi - ai);
        jac.push(unit.iter().map(|u| u[i] - zero[i]).collect());
        w.push(2.0 * w_sum * p.kappa / 100.0);
    }
}

/// Levenberg–Marquardt on the weighted squared relative errors of `rows`,
/// over coordinates `g` (mapped to the full coordinates by `expand`) from
/// `g0`; a step is kept only if it lowers the weighted MAPE (plus the
/// bounds' penalty). Per iteration the Jacobian (one simulation set per
/// coordinate) and then the [`TRIALS`]' steps run as two batches on every
/// core. Stops when no trial lowers the error, or the best gains less than
/// 0.2 % of it.
fn levenberg_marquardt(
    obj: &Objective,
    rows: &[usize],
    expand: &dyn Fn(&[f64]) -> Vec<f64>,
    g0: Vec<f64>,
    iters: usize,
    prior: Option<&Prior>,
    name: &str,
) -> Result<(Vec<f64>, f64), FitError> {
    let n = g0.len();
    let w: Vec<f64> = rows.iter().map(|&r| obj.weights[r]).collect();
    let cost_of = |g: &[f64], pred: &[f64]| {
        let x = expand(g);
        mape(obj.rows, obj.weights, rows, pred)
            + 1e3 * obj.space.at(&x).1
            + prior.map_or(0.0, |p| p.penalty(&x))
    };
    let mut g = g0;
    let mut pred = obj.predict(rows, &expand(&g))?;
    let mut cost = cost_of(&g, &pred);
    obj.progress.evaluated(name, cost, cost);
    for _ in 0..iters {
        let steps: Vec<f64> = (0..n).map(|p| fd_step(obj.space, expand, &g, p)).collect();
        let points: Vec<Vec<f64>> = (0..n)
            .map(|p| {
                let mut y = g.clone();
                y[p] += steps[p];
                expand(&y)
            })
            .collect();
        let shifted = obj.predict_many(rows, &points)?;
        for _ in 0..n {
            obj.progress.evaluated(name, f64::NAN, cost);
        }
        let (mut res, mut jac) = linearise(obj, rows, &pred, &shifted, &steps);
        // Iteratively reweighted: each squared error weighed by 1 / |error|
        // makes the squares' step a step on the absolute errors, the
        // objective. The errors below the median (at least 0.1 %) weigh
        // alike, so that the rows a start happens to fit do not pin it.
        let floor = median_abs(&res).max(IRLS_FLOOR);
        let mut w_abs: Vec<f64> = w
            .iter()
            .zip(&res)
            .map(|(wi, ri)| wi / ri.abs().max(floor))
            .collect();
        if let Some(p) = prior {
            prior_rows(
                p,
                expand,
                &g,
                w.iter().sum(),
                (&mut res, &mut jac, &mut w_abs),
            );
        }
        let ones = vec![1.0; res.len()];
        let trials: Vec<Vec<f64>> = TRIALS
            .iter()
            .map(|&(l, len)| {
                let (d, _) = solve_damped(&jac, &res, &w_abs, &ones, None, l);
                g.iter()
                    .zip(&d)
                    .map(|(gi, di)| gi + (len * di).clamp(-MAX_LOG_STEP, MAX_LOG_STEP))
                    .collect()
            })
            .collect();
        let full: Vec<Vec<f64>> = trials.iter().map(|t| expand(t)).collect();
        let preds = obj.predict_many(rows, &full)?;
        let (k, c) = trials
            .iter()
            .zip(&preds)
            .map(|(t, p)| cost_of(t, p))
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, f64::INFINITY));
        for _ in &trials {
            obj.progress.evaluated(name, c, cost.min(c));
        }
        if c.is_nan() || c >= cost {
            break;
        }
        let gain = cost - c;
        g = trials[k].clone();
        pred = preds[k].clone();
        cost = c;
        if gain < 2e-3 * cost {
            break;
        }
    }
    Ok((g, cost))
}

/// Resamples of the bootstrap.
const BOOTSTRAP: usize = 400;
/// Finite-difference step in log units (≈ 2 %).
const STEP: f64 = 0.02;
/// The least an alpha moves in a finite difference (µs): an alpha is a
/// delay rounded to a whole tick, so a 2 % step of α₂ ≈ 46 µs can leave its
/// tick, and every metric, unchanged (a zero derivative: "not identifiable").
const ALPHA_MIN_MOVE_US: f64 = 1.5;
/// The largest finite-difference step (log units).
const MAX_STEP: f64 = 0.25;

/// The finite-difference step of coordinate `p` of `g` (mapped to the
/// fitted coefficients by `expand`): [`STEP`], or more where that would
/// move an alpha it moves by less than [`ALPHA_MIN_MOVE_US`] (at most
/// [`MAX_STEP`]).
fn fd_step(space: &Space, expand: &dyn Fn(&[f64]) -> Vec<f64>, g: &[f64], p: usize) -> f64 {
    let x = expand(g);
    let mut y = g.to_vec();
    y[p] += STEP;
    let moved = expand(&y);
    let mut step = STEP;
    for (q, f) in space.fitted.iter().enumerate() {
        if f.family != Family::Alpha || moved[q] == x[q] {
            continue;
        }
        let v = (f.start * x[q].exp()).max(f64::MIN_POSITIVE);
        step = step.max((1.0 + ALPHA_MIN_MOVE_US / v).ln());
    }
    step.min(MAX_STEP)
}

/// The uncertainty of each fitted coefficient at `best` (see the module
/// docs).
pub fn uncertainty(
    obj: &Objective,
    rows: &[usize],
    best: &[f64],
    pred: &[f64],
    seed: u64,
) -> Result<Vec<Uncertainty>, FitError> {
    let n = best.len();
    let ident = |x: &[f64]| x.to_vec();
    let steps: Vec<f64> = (0..n)
        .map(|p| fd_step(obj.space, &ident, best, p))
        .collect();
    let points: Vec<Vec<f64>> = (0..n)
        .map(|p| {
            let mut x = best.to_vec();
            x[p] += steps[p];
            x
        })
        .collect();
    obj.progress.note(&format!(
        "uncertainty: {n} simulation sets for the Jacobian, {BOOTSTRAP} bootstrap resamples of the experiments (blocks of a trace's requests)"
    ));
    let shifted = obj.predict_many(rows, &points)?;
    for _ in 0..n {
        obj.progress.evaluated("uncertainty", f64::NAN, f64::NAN);
    }
    let m = rows.len();
    let (res, jac) = linearise(obj, rows, pred, &shifted, &steps);
    let w: Vec<f64> = rows.iter().map(|&r| obj.weights[r]).collect();
    let exp_of: Vec<usize> = rows.iter().map(|&r| obj.row_unit[r]).collect();
    let mut exps = exp_of.clone();
    exps.sort_unstable();
    exps.dedup();

    let counts_all = vec![1.0; m];
    let (full, kept) = solve_step(&jac, &res, &w, &counts_all, None);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_b007);
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(BOOTSTRAP); n];
    for _ in 0..BOOTSTRAP {
        let mut mult = vec![0.0; exps.len()];
        for _ in 0..exps.len() {
            mult[rng.random_range(0..exps.len())] += 1.0;
        }
        let counts: Vec<f64> = exp_of
            .iter()
            .map(|e| mult[exps.binary_search(e).unwrap_or(0)])
            .collect();
        let (d, _) = solve_step(&jac, &res, &w, &counts, Some(&kept));
        for p in 0..n {
            samples[p].push(d[p] - full[p]);
        }
    }
    let mut out = Vec::with_capacity(n);
    for (p, f) in obj.space.fitted.iter().enumerate() {
        let value = (f.start * best[p].exp()).clamp(f.lo, f.hi);
        let col_norm = jac.iter().map(|row| row[p] * row[p]).sum::<f64>().sqrt();
        if !kept[p] {
            out.push(Uncertainty {
                std: f64::INFINITY,
                interval: [f.lo, f.hi],
                identifiable: false,
                note: if col_norm < 1e-9 {
                    "the measured metrics do not change with it".into()
                } else {
                    "the measured metrics change with it only as they change with other fitted coefficients (collinear)".into()
                },
            });
            continue;
        }
        let mut vals: Vec<f64> = samples[p]
            .iter()
            .map(|d| (value * d.exp()).clamp(f.lo, f.hi))
            .collect();
        vals.sort_by(f64::total_cmp);
        let mean = vals.iter().sum::<f64>() / vals.len() as f64;
        let var =
            vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (vals.len() - 1).max(1) as f64;
        let q = |t: f64| vals[((vals.len() - 1) as f64 * t).round() as usize];
        let std = var.sqrt();
        let loose = std > 0.5 * value;
        let mut interval = [q(0.025), q(0.975)];
        if rounded_alone(obj.experiments[0].latency_model, f) {
            // Every value that rounds to the same tick runs the same simulation.
            let tick = value.round();
            interval[0] = interval[0].min((tick - 0.5).max(f.lo));
            interval[1] = interval[1].max((tick + 0.5).min(f.hi));
        }
        out.push(Uncertainty {
            std,
            interval,
            identifiable: !loose,
            note: if loose {
                "weakly determined: its bootstrap spread exceeds half its value".into()
            } else {
                String::new()
            },
        });
    }
    Ok(out)
}

/// Whether the latency model uses coefficient `f` alone as a delay rounded
/// to a whole tick: α₂ (per output token) in every model, and α₀ (queueing)
/// and α₁ (post-decode) in trained-physics (elsewhere α₀ + α₁·input length
/// is rounded together).
fn rounded_alone(model: &str, f: &super::params::Fitted) -> bool {
    f.family == Family::Alpha && (f.index == 2 || model == "trained-physics")
}

/// The weighted least-squares step `δ` minimising
/// `Σ cᵢ wᵢ (rᵢ + Jᵢ·δ)²` (cᵢ the resample's multiplicity), by pivoted
/// Cholesky of the normal equations: coordinates whose pivot falls below a
/// relative tolerance are dropped (δ = 0) and reported `false`. With `only`,
/// the kept set is fixed (a bootstrap resample uses the full data's).
fn solve_step(
    jac: &[Vec<f64>],
    res: &[f64],
    w: &[f64],
    counts: &[f64],
    only: Option<&[bool]>,
) -> (Vec<f64>, Vec<bool>) {
    solve_damped(jac, res, w, counts, only, 0.0)
}

/// [`solve_step`] with Levenberg–Marquardt damping: each kept diagonal of
/// the normal equations is multiplied by `1 + damping` (0: Gauss–Newton;
/// larger: shorter steps, towards steepest descent).
fn solve_damped(
    jac: &[Vec<f64>],
    res: &[f64],
    w: &[f64],
    counts: &[f64],
    only: Option<&[bool]>,
    damping: f64,
) -> (Vec<f64>, Vec<bool>) {
    let n = jac.first().map_or(0, Vec::len);
    let mut a = vec![vec![0.0; n]; n];
    let mut b = vec![0.0; n];
    for (i, row) in jac.iter().enumerate() {
        let c = counts[i] * w[i];
        if c == 0.0 {
            continue;
        }
        for p in 0..n {
            b[p] -= c * row[p] * res[i];
            for q in 0..n {
                a[p][q] += c * row[p] * row[q];
            }
        }
    }
    let max_diag = (0..n).map(|p| a[p][p]).fold(0.0, f64::max);
    let tol = max_diag * 1e-8 + 1e-300;
    // Rank by symmetric elimination with diagonal pivoting (pivoted
    // Cholesky): a coordinate whose remaining diagonal (its Schur
    // complement) is below the tolerance is (nearly) a combination of the
    // kept ones.
    let mut kept = vec![false; n];
    match only {
        Some(o) => kept.copy_from_slice(o),
        None => {
            let mut sc = a.clone();
            loop {
                let piv = (0..n)
                    .filter(|&p| !kept[p])
                    .max_by(|&x, &y| sc[x][x].total_cmp(&sc[y][y]));
                let Some(p) = piv else { break };
                if sc[p][p] <= tol {
                    break;
                }
                kept[p] = true;
                let d = sc[p][p];
                for q in 0..n {
                    for r in 0..n {
                        if !kept[q] && !kept[r] {
                            sc[q][r] -= sc[q][p] * sc[p][r] / d;
                        }
                    }
                }
            }
        }
    }
    let order: Vec<usize> = (0..n).filter(|&p| kept[p]).collect();
    // Solve the kept subsystem directly (Gaussian elimination, it is small).
    let k = order.len();
    let mut m = vec![vec![0.0; k + 1]; k];
    for (i, &p) in order.iter().enumerate() {
        for (j, &q) in order.iter().enumerate() {
            m[i][j] = a[p][q];
        }
        m[i][k] = b[p];
        m[i][i] += tol + damping * a[p][p];
    }
    for c in 0..k {
        let piv = (c..k)
            .max_by(|&x, &y| m[x][c].abs().total_cmp(&m[y][c].abs()))
            .unwrap_or(c);
        m.swap(c, piv);
        let d = m[c][c];
        if d.abs() < 1e-300 {
            continue;
        }
        let pivot_row = m[c].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != c {
                let f = row[c] / d;
                if f != 0.0 {
                    for (x, p) in row.iter_mut().zip(&pivot_row).skip(c) {
                        *x -= f * p;
                    }
                }
            }
        }
    }
    let mut delta = vec![0.0; n];
    for (i, &p) in order.iter().enumerate() {
        if m[i][i].abs() > 1e-300 {
            delta[p] = m[i][k] / m[i][i];
        }
    }
    (delta, kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prior's scale by hand: anchor MAPE 8 %, sd 0.1, 4 experiments:
    /// kappa = 8 / (2 · 0.01 · 4) = 100 per log unit²; at (0.1, 0.3)
    /// around (0, 0.5) the penalty is 100 · (0.01 + 0.04) = 5. Its rows at
    /// a group point (both coordinates one group at 0.2) are the distances
    /// (0.2, −0.3) with derivative 1 each, and on the reweighted squares'
    /// scale — 100 / Σw · ½ · Σ wᵢ rᵢ² — they are the penalty there, 13.
    #[test]
    fn the_prior_penalty_and_its_rows() {
        let p = Prior::new(vec![0.0, 0.5], 0.1, 8.0, 4);
        assert!((p.kappa - 100.0).abs() < 1e-9, "{}", p.kappa);
        assert!((p.penalty(&[0.1, 0.3]) - 5.0).abs() < 1e-9);
        assert_eq!(p.penalty(&[0.0, 0.5]), 0.0);
        let expand = |g: &[f64]| vec![g[0], g[0]];
        let (mut res, mut jac, mut w) = (vec![0.07], vec![vec![0.5]], vec![1.0]);
        let w_sum = 3.0;
        prior_rows(&p, &expand, &[0.2], w_sum, (&mut res, &mut jac, &mut w));
        assert_eq!(res.len(), 3);
        assert!((res[1] - 0.2).abs() < 1e-12 && (res[2] + 0.3).abs() < 1e-12);
        assert_eq!(jac[1..], [vec![1.0], vec![1.0]]);
        let squares: f64 = (1..3).map(|i| w[i] * res[i] * res[i]).sum();
        let on_scale = 100.0 / w_sum * 0.5 * squares;
        assert!(
            (on_scale - p.penalty(&[0.2, 0.2])).abs() < 1e-9,
            "{on_scale}"
        );
        assert!((on_scale - 13.0).abs() < 1e-9);
    }

    /// A 2 % step of α₂ ≈ 46 µs stays inside one tick (46.5 and 47.4 both
    /// round to 47): the step grows until α₂ moves by 1.5 µs; large alphas
    /// and the betas keep 2 %, in both stages.
    #[test]
    fn finite_differences_move_an_alpha_by_a_tick() {
        use super::super::params::Coefficients;
        let space = Space::new(
            Coefficients {
                alpha: [15_000.0, 800.0, 46.0],
                beta: Some(vec![0.15, 0.0, 1.36, 0.75, 32.0, 4.4, 126.0]),
            },
            None,
            &[],
            "trained-physics",
        )
        .unwrap();
        let names: Vec<String> = space.fitted.iter().map(|f| f.name()).collect();
        let a2 = names.iter().position(|n| n == "alpha[2]").unwrap();
        let b0 = names.iter().position(|n| n == "beta[0]").unwrap();
        let a0 = names.iter().position(|n| n == "alpha[0]").unwrap();
        let x = vec![0.0; names.len()];
        let ident = |g: &[f64]| g.to_vec();
        let h = fd_step(&space, &ident, &x, a2);
        assert!((h - (1.0 + 1.5 / 46.0_f64).ln()).abs() < 1e-12, "{h}");
        assert!((46.0 * h.exp()).round() > 46.0, "the step moves α₂'s tick");
        assert_eq!(fd_step(&space, &ident, &x, b0), STEP);
        assert_eq!(fd_step(&space, &ident, &x, a0), STEP);
        // Stage 1: one coordinate moves every alpha; α₂ decides.
        let (fams, member) = space.groups();
        let expand = |g: &[f64]| -> Vec<f64> { member.iter().map(|&m| g[m]).collect() };
        let g = vec![0.0; fams.len()];
        let hs: Vec<f64> = (0..fams.len())
            .map(|p| fd_step(&space, &expand, &g, p))
            .collect();
        assert!(hs.contains(&h) && hs.contains(&STEP), "{hs:?}");
        // A tiny alpha is capped.
        let mut x = x;
        x[a2] = (0.01_f64 / 46.0).ln();
        assert_eq!(fd_step(&space, &ident, &x, a2), MAX_STEP);
    }

    #[test]
    fn more_coordinates_must_pay_for_their_freedom() {
        // 45 measurements: 2 coordinates at 1.30 % against 12 at 1.09 %:
        // 1.30/43 = 0.0302 < 1.09/33 = 0.0330, the two factors stay.
        assert!(!better_per_freedom(1.09, 12, 1.30, 2, 45));
        // A larger gain pays: 0.90/33 = 0.0273.
        assert!(better_per_freedom(0.90, 12, 1.30, 2, 45));
        // As many coordinates as measurements: never.
        assert!(!better_per_freedom(0.0, 12, 0.35, 2, 12));
        // Same coordinates: the lower error.
        assert!(better_per_freedom(0.2, 12, 0.3, 12, 12));
        assert!(!better_per_freedom(0.4, 12, 0.3, 12, 45));
    }

    #[test]
    fn folds_are_balanced_and_seeded() {
        let f = folds(15, 5, 7);
        for k in 0..5 {
            assert_eq!(f.iter().filter(|&&x| x == k).count(), 3);
        }
        assert_eq!(f, folds(15, 5, 7));
        assert_ne!(f, folds(15, 5, 8));
    }

    #[test]
    fn least_squares_step_and_rank() {
        // r = J·x_true − y with J = [[1, 0], [0, 2], [1, 1]]: residuals at 0
        // are −y; the step recovers x_true exactly.
        let jac = vec![vec![1.0, 0.0], vec![0.0, 2.0], vec![1.0, 1.0]];
        let x_true = [0.5, -0.25];
        let res: Vec<f64> = jac
            .iter()
            .map(|r| -(r[0] * x_true[0] + r[1] * x_true[1]))
            .collect();
        let (d, kept) = solve_step(&jac, &res, &[1.0; 3], &[1.0; 3], None);
        assert_eq!(kept, [true, true]);
        assert!(
            (d[0] - 0.5).abs() < 1e-6 && (d[1] + 0.25).abs() < 1e-6,
            "{d:?}"
        );
        // Two identical columns: one is dropped.
        let jac = vec![vec![1.0, 1.0], vec![2.0, 2.0]];
        let (d, kept) = solve_step(&jac, &[-1.0, -2.0], &[1.0; 2], &[1.0; 2], None);
        assert_eq!(kept.iter().filter(|k| **k).count(), 1);
        assert!((d[0] + d[1] - 1.0).abs() < 1e-6, "{d:?}");
        // A zero column is dropped.
        let jac = vec![vec![1.0, 0.0], vec![3.0, 0.0]];
        let (_, kept) = solve_step(&jac, &[-1.0, -3.0], &[1.0; 2], &[1.0; 2], None);
        assert_eq!(kept, [true, false]);
    }

    #[test]
    fn mape_weights_rows() {
        let row = |v: f64| Row {
            source: "m.csv".into(),
            request: None,
            mean_of: None,
            line: 2,
            run_file: "a".into(),
            path: "a".into(),
            metric: super::super::table::Metric::parse("ttft_mean_ms").unwrap(),
            value: v,
        };
        let rows = vec![row(10.0), row(20.0)];
        // 10 % and 50 % errors, weights 1 and 3: (10 + 150) / 4 = 40 %.
        let m = mape(&rows, &[1.0, 3.0], &[0, 1], &[11.0, 30.0]);
        assert!((m - 40.0).abs() < 1e-9, "{m}");
    }
}

//! `blis tune`: a policy's parameters tuned on training traffic, judged on
//! held-out traffic, written back as a run file (and as an llm-d file when
//! the base was one).
//!
//! A tune file ([`file`]) names the base, the parameters (any run-file key:
//! a scorer's weight, a plugin's parameter — std, native, WebAssembly or
//! Python — or a key of the llm-d file's sections), each with a range and a
//! scale, the objective (a report metric to minimise or maximise, with
//! constraints on the mean over the set), the training and held-out
//! traffic (seeds × rates × workloads) and a budget of simulations.
//!
//! # The search
//!
//! Each parameter is a coordinate in [0, 1] (linear, logarithmic, rounded
//! to a whole number, or a choice's cell). A *candidate* is a point; its
//! score is the mean of the objective over the training simulations, all
//! at the same seeds (common random numbers: two candidates are compared on
//! the same arrivals, so the score is a deterministic function of the
//! point and differences between candidates are not seed noise).
//!
//! The optimiser is particle swarm optimisation (argmin's `ParticleSwarm`,
//! already blis's optimisation crate for `calibrate fit`): derivative-free,
//! bounded by construction (the unit box), indifferent to the flat steps
//! that integer and choice parameters and a discrete-event simulation make,
//! and population-based, so each generation is one batch of simulations on
//! every core. Its generator is seeded (`seed`), so a tune is repeatable.
//! CMA-ES was weighed: the Rust crate for it has no ask/tell interface (it
//! calls the objective one point at a time), no bounds, and brings nalgebra
//! and a second `rand`; a swarm over the unit box needs neither.
//!
//! The start (the base's values) is evaluated first; the answer is the best
//! of every candidate, the start included, so a tune never reports worse
//! than the start on its training traffic. Infeasible candidates (a
//! constraint missed on the mean) rank after every feasible one, by how far
//! they miss; a candidate whose simulation fails (a plugin refusing a
//! value) is recorded with its error and ranks last.
//!
//! # Judging
//!
//! The start and the answer are simulated on the held-out traffic. The
//! improvement is the mean of the paired differences (same seed, rate,
//! workload); it counts as a gain only when it is more than twice its
//! standard error and the answer meets the constraints there. Otherwise the
//! verdict is "no gain" and the recommended run file keeps the start: the
//! search found nothing that carries beyond its training traffic.
//! Sensitivity: the answer's objective with each parameter moved by
//! `sensitivity_step` of its range either way (each other value of a
//! choice), on the training traffic.
//!
//! Simulations go through the shared evaluation engine
//! ([`crate::search`]): cached, parallel, resumable.

pub mod file;
mod output;
#[cfg(test)]
mod tests;

use std::cell::RefCell;

use argmin::core::{CostFunction, Error as ArgminError, Executor};
use argmin::solver::particleswarm::ParticleSwarm;
use rand_xoshiro::rand_core::SeedableRng;

pub use file::{Goal, Param, Scale, Traffic, TuneSpec, Workload};
pub use output::Written;

use crate::plan::Slo;
use crate::search::{Engine, Evaluation, Options, Sets, Trial};
use crate::session::Error;

/// Why a candidate was simulated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Start,
    Search,
    Sensitivity,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Start => "start",
            Phase::Search => "search",
            Phase::Sensitivity => "sensitivity",
        }
    }
}

/// A candidate's result over a traffic set.
#[derive(Clone, Debug)]
pub struct Score {
    /// The objective per simulation (in the set's order).
    pub values: Vec<Option<f64>>,
    /// The mean objective (`None`: a simulation failed or had no value).
    pub mean: Option<f64>,
    /// Each constraint's metric, mean over the set.
    pub constraints: Vec<Option<f64>>,
    pub feasible: bool,
    /// A failed simulation's error.
    pub error: Option<String>,
    /// What the optimiser minimises (lower is better).
    pub cost: f64,
}

/// One evaluated candidate.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub phase: Phase,
    pub generation: usize,
    pub values: Vec<toml::Value>,
    pub score: Score,
}

/// The held-out comparison.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub start: Score,
    pub tuned: Score,
    /// Mean paired improvement (positive: the tuned parameters are better).
    pub improvement: f64,
    /// Its standard error.
    pub standard_error: f64,
    /// Whether the improvement is a gain (> 2 standard errors, constraints met).
    pub gain: bool,
    pub reason: String,
}

/// The objective's response to one parameter around the answer.
#[derive(Clone, Debug)]
pub struct Sensitivity {
    /// (value, mean objective) of each probe.
    pub probes: Vec<(toml::Value, Option<f64>)>,
    /// The largest change of the objective, relative to the answer's (%).
    pub change_pct: Option<f64>,
}

/// Everything a tune found.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub candidates: Vec<Candidate>,
    /// Index of the answer in `candidates`.
    pub best: usize,
    pub train_start: Score,
    pub train_best: Score,
    pub verdict: Verdict,
    pub sensitivity: Vec<Sensitivity>,
    /// Simulations: (asked, run now, reused).
    pub counts: crate::search::Counts,
    /// Simulations of each phase (search includes the start).
    pub phase_simulations: [usize; 3],
}

impl Outcome {
    /// The recommended values: the answer's on a gain, else the start's.
    pub fn recommended(&self) -> &[toml::Value] {
        if self.verdict.gain {
            &self.candidates[self.best].values
        } else {
            &self.candidates[0].values
        }
    }
}

/// The overrides of a candidate at one traffic point.
fn trial(spec: &TuneSpec, values: &[toml::Value], labels: &Sets, point: &Sets) -> Trial {
    let mut sets = spec.fixed.clone();
    sets.extend(point.iter().cloned());
    let mut all_labels = Sets::new();
    for (p, v) in spec.params.iter().zip(values) {
        sets.push((p.key.clone(), v.clone()));
        all_labels.push((p.name.clone(), v.clone()));
    }
    all_labels.extend(labels.iter().cloned());
    Trial {
        labels: all_labels,
        sets,
    }
}

/// The score of a candidate's evaluations.
fn score(spec: &TuneSpec, evals: &[Evaluation]) -> Score {
    let error = evals.iter().find_map(|e| e.error.clone());
    let values: Vec<Option<f64>> = evals.iter().map(|e| e.metric(&spec.metric)).collect();
    let mean_of = |xs: &[Option<f64>]| -> Option<f64> {
        let v: Option<Vec<f64>> = xs.iter().copied().collect();
        v.filter(|v| !v.is_empty())
            .map(|v| v.iter().sum::<f64>() / v.len() as f64)
    };
    let mean = if error.is_some() {
        None
    } else {
        mean_of(&values)
    };
    let constraints: Vec<Option<f64>> = spec
        .constraints
        .iter()
        .map(|c| {
            mean_of(
                &evals
                    .iter()
                    .map(|e| e.metric(&c.metric))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let excess: f64 = spec
        .constraints
        .iter()
        .zip(&constraints)
        .map(|(c, v)| match v {
            Some(v) if c.met(*v) => 0.0,
            Some(v) => c.excess(*v) - 1.0 + 1e-9,
            None => 1e6,
        })
        .sum();
    let feasible = error.is_none() && excess == 0.0;
    let cost = match (&error, mean) {
        (Some(_), _) | (None, None) => 1e300,
        (None, Some(m)) if !feasible => 1e250 * (1.0 + excess.min(1e40)) + m.abs().min(1e40),
        (None, Some(m)) => match spec.goal {
            Goal::Minimize => m,
            Goal::Maximize => -m,
        },
    };
    Score {
        values,
        mean,
        constraints,
        feasible,
        error,
        cost,
    }
}

/// A tune in progress: the spec, the engine and every candidate so far.
pub struct Tuner<'a> {
    spec: &'a TuneSpec,
    engine: &'a mut Engine,
    candidates: Vec<Candidate>,
    generation: usize,
    progress: &'a dyn Fn(&str),
    /// An engine error met inside the optimiser (it stops the search).
    failure: Option<Error>,
}

impl<'a> Tuner<'a> {
    pub fn new(spec: &'a TuneSpec, engine: &'a mut Engine, progress: &'a dyn Fn(&str)) -> Self {
        Tuner {
            spec,
            engine,
            candidates: Vec::new(),
            generation: 0,
            progress,
            failure: None,
        }
    }

    /// Evaluate candidates (their values) on a traffic set in one batch.
    fn evaluate(
        &mut self,
        points: &[Vec<toml::Value>],
        traffic: &Traffic,
    ) -> Result<Vec<Score>, Error> {
        let tp = traffic.points();
        let mut trials = Vec::new();
        for values in points {
            for (labels, sets) in &tp {
                trials.push(trial(self.spec, values, labels, sets));
            }
        }
        let evals = self.engine.evaluate(&trials)?;
        Ok(evals
            .chunks(tp.len())
            .map(|chunk| score(self.spec, chunk))
            .collect())
    }

    /// Evaluate and record candidates on the training set.
    fn record(&mut self, phase: Phase, points: Vec<Vec<toml::Value>>) -> Result<Vec<f64>, Error> {
        let spec = self.spec;
        let scores = self.evaluate(&points, &spec.train)?;
        let costs = scores.iter().map(|s| s.cost).collect();
        for (values, score) in points.into_iter().zip(scores) {
            self.candidates.push(Candidate {
                phase,
                generation: self.generation,
                values,
                score,
            });
        }
        Ok(costs)
    }

    /// The values at unit coordinates.
    fn values(&self, u: &[f64]) -> Vec<toml::Value> {
        self.spec
            .params
            .iter()
            .zip(u)
            .map(|(p, &x)| p.value(x))
            .collect()
    }

    /// The start, checked: a report metric the objective or a constraint
    /// names must exist.
    fn start(&mut self) -> Result<(), Error> {
        let start: Vec<toml::Value> = self.spec.params.iter().map(|p| p.start.clone()).collect();
        let tp = self.spec.train.points();
        let (labels, sets) = &tp[0];
        let first = self
            .engine
            .evaluate(&[trial(self.spec, &start, labels, sets)])?;
        if let Some(e) = first.iter().find(|e| e.error.is_none()) {
            self.check_metrics(e)?;
        }
        self.record(Phase::Start, vec![start])?;
        if let Some(err) = &self.candidates[0].score.error {
            return Err(Error::input(format!(
                "{}: the starting parameters fail: {err}",
                self.spec.name
            )));
        }
        Ok(())
    }

    fn check_metrics(&self, e: &Evaluation) -> Result<(), Error> {
        let names = std::iter::once(("objective.metric", &self.spec.metric)).chain(
            self.spec
                .constraints
                .iter()
                .map(|c: &Slo| ("objective.constraints", &c.metric)),
        );
        for (key, m) in names {
            if !e.has(m) {
                return Err(Error::input(format!(
                    "{}: {key} '{m}': the report has no such metric. Give a column of a sweep's results.csv (e.g. ttft_p99_ms, e2e_mean_ms, goodput_rps, slo.attainment, fitness) or a derived metric ({}); a section's metric needs that section in the base run file",
                    self.spec.name,
                    crate::search::DERIVED.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Generations the budget allows after the start.
    fn generations(&self) -> u64 {
        let per = self.spec.train.size();
        let candidates = self.spec.budget / per;
        ((candidates - 1) / self.spec.population) as u64
    }

    /// The search: the start, then the swarm.
    fn search(&mut self) -> Result<(), Error> {
        self.start()?;
        let generations = self.generations();
        let d = self.spec.params.len();
        let spec = self.spec;
        let solver = ParticleSwarm::new((vec![0.0; d], vec![1.0; d]), spec.population)
            .with_rng_generator(rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(spec.seed));
        let problem = Swarm {
            tuner: RefCell::new(self),
        };
        // The first batch initialises the swarm; each iteration is one more.
        let result = Executor::new(problem, solver)
            .configure(|state| state.max_iters(generations.saturating_sub(1)))
            .run()
            .map(|_| ())
            .map_err(|e| e.to_string());
        if let Some(e) = self.failure.take() {
            return Err(e);
        }
        result.map_err(|e| Error::run(format!("{}: the optimiser failed: {e}", spec.name)))
    }

    /// The index of the best candidate (lowest cost; the earliest of equals).
    fn best(&self) -> usize {
        let mut best = 0;
        for (i, c) in self.candidates.iter().enumerate() {
            if c.phase != Phase::Sensitivity && c.score.cost < self.candidates[best].score.cost {
                best = i;
            }
        }
        best
    }

    /// Each parameter moved around the answer.
    fn sensitivity(&mut self, best: usize) -> Result<Vec<Sensitivity>, Error> {
        let bv = self.candidates[best].values.clone();
        let base = self.candidates[best].score.mean;
        let mut probes: Vec<(usize, Vec<toml::Value>)> = Vec::new();
        for (i, p) in self.spec.params.iter().enumerate() {
            let others: Vec<toml::Value> = match &p.scale {
                Scale::Choice(vs) => vs.iter().filter(|v| **v != bv[i]).cloned().collect(),
                _ => {
                    let u = p.unit(&bv[i]);
                    let step = self.spec.sensitivity_step;
                    let mut out: Vec<toml::Value> = Vec::new();
                    for x in [u - step, u + step] {
                        let v = p.value(x);
                        if v != bv[i] && !out.contains(&v) {
                            out.push(v);
                        }
                    }
                    out
                }
            };
            for v in others {
                let mut values = bv.clone();
                values[i] = v;
                probes.push((i, values));
            }
        }
        self.generation += 1;
        let points: Vec<Vec<toml::Value>> = probes.iter().map(|(_, v)| v.clone()).collect();
        let first = self.candidates.len();
        self.record(Phase::Sensitivity, points)?;
        let mut out = vec![
            Sensitivity {
                probes: Vec::new(),
                change_pct: None
            };
            self.spec.params.len()
        ];
        for (k, (i, values)) in probes.iter().enumerate() {
            let s = &self.candidates[first + k].score;
            out[*i].probes.push((values[*i].clone(), s.mean));
            if let (Some(b), Some(m)) = (base, s.mean) {
                let pct = if b != 0.0 {
                    100.0 * (m - b).abs() / b.abs()
                } else {
                    0.0
                };
                let c = out[*i].change_pct.get_or_insert(0.0);
                *c = c.max(pct);
            }
        }
        Ok(out)
    }

    /// The start and the answer on the held-out traffic.
    fn judge(&mut self, best: usize) -> Result<Verdict, Error> {
        let points = vec![
            self.candidates[0].values.clone(),
            self.candidates[best].values.clone(),
        ];
        let spec = self.spec;
        let mut scores = self.evaluate(&points, &spec.held_out)?;
        let tuned = scores.pop().expect("two scores");
        let start = scores.pop().expect("two scores");
        Ok(verdict(self.spec, start, tuned, best == 0))
    }

    /// Run the tune.
    pub fn run(mut self) -> Result<Outcome, Error> {
        self.search()?;
        let best = self.best();
        let verdict = self.judge(best)?;
        let sensitivity = self.sensitivity(best)?;
        let counts = self.engine.counts();
        let per = self.spec.train.size();
        let sens = self
            .candidates
            .iter()
            .filter(|c| c.phase == Phase::Sensitivity)
            .count()
            * per;
        let search = (self.candidates.len() * per).saturating_sub(sens);
        Ok(Outcome {
            train_start: self.candidates[0].score.clone(),
            train_best: self.candidates[best].score.clone(),
            best,
            verdict,
            sensitivity,
            counts,
            phase_simulations: [search, sens, 2 * self.spec.held_out.size()],
            candidates: self.candidates,
        })
    }
}

/// The held-out verdict from the start's and the answer's scores.
fn verdict(spec: &TuneSpec, start: Score, tuned: Score, same: bool) -> Verdict {
    let sign = match spec.goal {
        Goal::Minimize => 1.0,
        Goal::Maximize => -1.0,
    };
    let diffs: Vec<f64> = start
        .values
        .iter()
        .zip(&tuned.values)
        .filter_map(|(a, b)| Some(sign * (a.as_ref()? - b.as_ref()?)))
        .collect();
    let (improvement, sd) = mean_sd(&diffs);
    let standard_error = sd / (diffs.len().max(1) as f64).sqrt();
    let (gain, reason) = if same {
        (
            false,
            "the search found nothing better than the start on the training traffic".to_string(),
        )
    } else if tuned.error.is_some() {
        (
            false,
            format!(
                "the tuned parameters fail on the held-out traffic: {}",
                tuned.error.clone().unwrap_or_default()
            ),
        )
    } else if !tuned.feasible && start.feasible {
        (
            false,
            "the tuned parameters miss a constraint on the held-out traffic, which the start meets"
                .to_string(),
        )
    } else if diffs.len() < start.values.len() {
        (
            false,
            "a held-out simulation had no value of the objective".to_string(),
        )
    } else if improvement <= 0.0 {
        (false, format!("on the held-out traffic the tuned parameters are not better (mean change {} in the objective's favour)", crate::plan::short(improvement)))
    } else if diffs.len() > 1 && improvement <= 2.0 * standard_error {
        (false, format!("the held-out improvement {} is within twice its standard error ({}): not distinguishable from noise", crate::plan::short(improvement), crate::plan::short(standard_error)))
    } else {
        (
            true,
            format!(
                "the held-out improvement {} is more than twice its standard error ({})",
                crate::plan::short(improvement),
                crate::plan::short(standard_error)
            ),
        )
    };
    Verdict {
        start,
        tuned,
        improvement,
        standard_error,
        gain,
        reason,
    }
}

/// Mean and sample standard deviation (0 for fewer than two).
pub fn mean_sd(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (mean, 0.0);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// The swarm's view of the tuner: a batch of points → their costs.
struct Swarm<'t, 'a> {
    tuner: RefCell<&'t mut Tuner<'a>>,
}

impl CostFunction for Swarm<'_, '_> {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, p: &Vec<f64>) -> Result<f64, ArgminError> {
        Ok(self.bulk_cost(std::slice::from_ref(p))?[0])
    }

    fn bulk_cost<P>(&self, params: &[P]) -> Result<Vec<f64>, ArgminError>
    where
        P: std::borrow::Borrow<Vec<f64>> + argmin::core::SyncAlias,
        f64: argmin::core::SendAlias,
    {
        let mut t = self.tuner.borrow_mut();
        t.generation += 1;
        let points: Vec<Vec<toml::Value>> = params.iter().map(|p| t.values(p.borrow())).collect();
        match t.record(Phase::Search, points) {
            Ok(costs) => {
                let best = t.best();
                let c = &t.candidates[best];
                let line = format!(
                    "tune: generation {}: best {} = {} ({})",
                    t.generation,
                    t.spec.metric,
                    c.score.mean.map_or("none".into(), crate::plan::short),
                    describe(&t.spec.params, &c.values)
                );
                (t.progress)(&line);
                Ok(costs)
            }
            Err(e) => {
                t.failure = Some(e);
                Err(ArgminError::msg("stopped"))
            }
        }
    }
}

/// `key = value, …`.
pub fn describe(params: &[Param], values: &[toml::Value]) -> String {
    params
        .iter()
        .zip(values)
        .map(|(p, v)| format!("{} = {}", p.name, crate::sweep::spec::toml_text(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Run a tune: checks, the search on an engine in `out`, the outputs.
pub fn tune(
    spec: &TuneSpec,
    out: &std::path::Path,
    options: Options,
    progress: &dyn Fn(&str),
) -> Result<(Outcome, Written), Error> {
    output::check_outputs(spec, out)?;
    check_domains(spec)?;
    let mut engine = Engine::open(
        &spec.name,
        &output::fingerprint(spec),
        spec.base.clone(),
        spec.base_source.text.clone(),
        output::axis_names(spec),
        out,
        options,
    )?;
    let outcome = Tuner::new(spec, &mut engine, progress).run()?;
    let written = output::write(spec, &engine, &outcome)?;
    Ok((outcome, written))
}

/// Each parameter's range ends (every value of a choice) are values the
/// policy takes: the run file with them is built (plugins created with
/// their parameters) without simulating. A refusal names the parameter.
fn check_domains(spec: &TuneSpec) -> Result<(), Error> {
    let start: Vec<toml::Value> = spec.params.iter().map(|p| p.start.clone()).collect();
    for (i, p) in spec.params.iter().enumerate() {
        let ends: Vec<toml::Value> = match &p.scale {
            Scale::Choice(vs) => vs.clone(),
            _ => vec![p.value(0.0), p.value(1.0)],
        };
        for v in ends {
            let mut values = start.clone();
            values[i] = v.clone();
            let mut sets = spec.fixed.clone();
            for (q, x) in spec.params.iter().zip(&values) {
                sets.push((q.key.clone(), x.clone()));
            }
            if let Err(e) = crate::session::validate_with(&spec.base_source, &sets) {
                return Err(Error::input(format!(
                    "{}: param '{}': the value {} is outside what the policy takes: {}",
                    spec.name,
                    p.name,
                    crate::sweep::spec::toml_text(&v),
                    e.message
                )));
            }
        }
    }
    Ok(())
}

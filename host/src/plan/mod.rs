//! `blis plan`: the cheapest fleet that meets the user's SLOs.
//!
//! A plan file ([`file`]) names a base run file, the traffic, the SLOs, a
//! search space — GPU types × tensor-parallel degrees × further axes
//! (routing variants, batch limits, KV tiers …) × an instance range — and
//! prices. A *shape* is one point of the space without the instance count;
//! a *candidate* is a shape at a count.
//!
//! # The search
//!
//! The SLO metrics are (close to) monotone in the instance count for a
//! fixed shape: more instances, less queueing. So each shape's smallest
//! feasible count is found by search, not by a grid:
//!
//! 1. **Prune by cost.** Candidates are ordered by a key (objective, GPUs,
//!    cost, shape order); a shape is searched only up to the largest count
//!    that would beat the best answer so far (its *cap*). A shape whose
//!    smallest fleet already costs more is not simulated at all.
//! 2. **Screen on one seed.** The cap is simulated at the first seed
//!    (every traffic rate): if it misses an SLO the shape cannot beat the
//!    best (or, before any answer, cannot meet the SLOs in the range) — one
//!    simulation per rate. Otherwise a ternary search (two counts per step,
//!    simulated at once) narrows [min, cap] to the smallest count feasible
//!    at that seed. Meeting the SLOs at one seed is necessary for meeting
//!    them at every seed, so nothing feasible is skipped.
//! 3. **Confirm on every seed.** That count is simulated at every seed; if
//!    one misses, the search continues above it on the every-seed verdict.
//!    The answer's lower neighbour is known to miss (at the first seed).
//!
//! With `judge = "mean"` or `"fraction:F"` every step is judged on all
//! seeds (meeting the SLOs on one seed is then not necessary).
//!
//! **Where monotonicity can fail**: a routing artefact (a policy that
//! herds requests onto one instance), sessions that lock into step, or
//! seed noise near an SLO bound can make a count feasible while a larger
//! one is not. The search then returns a feasible count that may not be
//! the smallest; the answer is always feasible (it was simulated), and its
//! lower neighbour was simulated and missed. `candidates.csv` lists every
//! simulation, so a suspicious answer can be checked with a sweep of the
//! shape around it.
//!
//! # Simulations
//!
//! Through the shared evaluation engine ([`crate::search`]): cached,
//! parallel (`--jobs`), resumable (an interrupted plan, run again with the
//! same `--out`, reuses its finished simulations and returns the same
//! answer). Each step's simulations come back in any order; the next step
//! depends only on their metrics, so the search is the same however they
//! were scheduled.

pub mod file;
pub mod merge;
mod output;
pub use output::GpuCalibration;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

pub use file::{Judge, MixPool, Objective, PlanSpec, Slo};
pub use output::Written;

use crate::search::{Engine, Evaluation, Labels, Sets, Trial};
use crate::session::Error;
use crate::sweep::Shard;

/// One shape of the space.
#[derive(Clone, Debug)]
pub struct Shape {
    pub index: usize,
    pub gpu: String,
    pub tp: u32,
    /// (axis name, label) per further axis.
    pub labels: Labels,
    /// The overrides of the shape (without count, rate or seed).
    pub sets: Sets,
    /// Dollars per hour of one unit: an instance (its TP GPUs), or for a
    /// mix one share of each pool.
    pub unit_cost: f64,
    /// GPUs of one unit.
    pub unit_gpus: u32,
    /// A heterogeneous fleet (or prefill and decode pools): its pools; the
    /// candidate's count is its number of units.
    pub pools: Option<Vec<MixPool>>,
}

impl Shape {
    /// `7 instance(s)`, or for a mix `2 unit(s) (6 instances)`.
    pub fn count(&self, n: u32) -> String {
        match &self.pools {
            None => format!("{n} instance(s)"),
            Some(pools) => format!(
                "{n} unit(s) ({} instances)",
                n * pools.iter().map(|p| p.share).sum::<u32>()
            ),
        }
    }

    /// `H100 tp2 routing=round-robin`, or `mix h100+l40s (1×H100 tp1 +
    /// 2×L40S tp1)`.
    pub fn describe(&self) -> String {
        let mut s = match &self.pools {
            None => format!("{} tp{}", self.gpu, self.tp),
            Some(pools) => format!(
                "mix {} ({})",
                self.gpu,
                pools
                    .iter()
                    .map(|p| {
                        let role = if p.role == "both" {
                            String::new()
                        } else {
                            format!(" {}", p.role)
                        };
                        format!("{}×{} tp{}{role}", p.share, p.gpu, p.tp)
                    })
                    .collect::<Vec<_>>()
                    .join(" + ")
            ),
        };
        for (k, v) in &self.labels {
            let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            s.push_str(&format!(" {k}={v}"));
        }
        s
    }
}

/// The verdict on one candidate over a set of simulations.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub feasible: bool,
    /// Per SLO: the judged value (the worst over the simulations for
    /// every-seed, the mean for `mean`); `None` when no simulation had it.
    pub values: Vec<Option<f64>>,
    /// The SLO that binds: the one missed by most (or, when feasible, the
    /// one closest to its bound).
    pub binding: Option<usize>,
    /// A simulation that failed, with its error.
    pub failure: Option<String>,
}

/// One simulation of the plan, for `candidates.csv`.
#[derive(Clone, Debug)]
pub struct Simulated {
    pub shape: usize,
    pub instances: u32,
    /// The rate set (`None`: the base's own arrivals).
    pub rate: Option<f64>,
    pub seed: u64,
    pub eval: Evaluation,
}

/// What the search found for one shape.
#[derive(Clone, Debug)]
pub struct ShapeResult {
    pub shape: usize,
    /// The smallest count meeting the SLOs on every seed, when searched.
    pub answer: Option<(u32, Verdict)>,
    /// `feasible`, `infeasible` (no count in the range meets the SLOs),
    /// `cannot-beat` (not below the best's cost) or `pruned` (its smallest
    /// fleet already costs more than the best: not simulated).
    pub status: &'static str,
    /// Why it is not the answer: the binding SLO at the largest count tried.
    pub why: String,
    /// The largest count that missed, and its verdict (closest candidates).
    pub missed: Option<(u32, Verdict)>,
}

/// The outcome of a plan.
pub struct Outcome {
    pub shapes: Vec<Shape>,
    pub results: Vec<ShapeResult>,
    /// The winning shape and count.
    pub best: Option<(usize, u32)>,
    pub simulations: Vec<Simulated>,
    pub counts: crate::search::Counts,
}

/// The order of candidates: objective, then GPUs, cost, shape order.
type Key = (f64, u32, f64, usize);

/// The plan's search over a spec, on an engine.
pub struct Planner<'a> {
    spec: &'a PlanSpec,
    engine: &'a mut Engine,
    shapes: Vec<Shape>,
    simulations: Vec<Simulated>,
    /// (shape, count, every seed) → verdict, so no candidate is judged twice.
    verdicts: HashMap<(usize, u32, bool), Verdict>,
    /// Ids of the simulations in `simulations` (each listed once).
    recorded: std::collections::HashSet<String>,
    progress: &'a dyn Fn(&str),
    /// Search only every `count`-th shape, from the `index`-th.
    shard: Option<Shard>,
}

impl<'a> Planner<'a> {
    /// A planner over `spec`'s shapes; `progress` receives one line per
    /// shape searched.
    pub fn new(spec: &'a PlanSpec, engine: &'a mut Engine, progress: &'a dyn Fn(&str)) -> Self {
        Planner {
            spec,
            engine,
            shapes: shapes(spec),
            simulations: Vec::new(),
            verdicts: HashMap::new(),
            recorded: Default::default(),
            progress,
            shard: None,
        }
    }

    /// Search only the shapes of shard `i` of `N` (every N-th, from the
    /// i-th): its answer is the cheapest of those shapes; `blis plan merge`
    /// takes the cheapest of the shards' answers.
    pub fn shard(mut self, shard: Option<Shard>) -> Self {
        self.shard = shard;
        self
    }

    /// Search every shape; the cheapest feasible candidate.
    pub fn run(mut self) -> Result<Outcome, Error> {
        let mut best: Option<(usize, u32)> = None;
        let mut results = Vec::new();
        let shard = self.shard;
        let mine =
            (0..self.shapes.len()).filter(|s| shard.is_none_or(|sh| s % sh.count == sh.index - 1));
        for s in mine {
            let r = self.search_shape(s, best)?;
            if let Some((n, _)) = &r.answer {
                best = Some((s, *n));
            }
            (self.progress)(&self.describe_result(&r));
            results.push(r);
        }
        Ok(Outcome {
            shapes: self.shapes,
            results,
            best,
            simulations: self.simulations,
            counts: self.engine.counts(),
        })
    }

    /// The key of shape `s` at `n` instances.
    fn key(&self, s: usize, n: u32) -> Key {
        let shape = &self.shapes[s];
        let gpus = n * shape.unit_gpus;
        let cost = f64::from(n) * shape.unit_cost;
        let objective = match self.spec.objective {
            Objective::Cost | Objective::CostPerMtok => cost,
            Objective::Gpus => f64::from(gpus),
        };
        (objective, gpus, cost, s)
    }

    /// The largest count of shape `s` whose key is below `best`'s.
    fn cap(&self, s: usize, best: Option<(usize, u32)>) -> Option<u32> {
        let (lo, hi) = (self.spec.min_instances, self.spec.max_instances);
        let Some((bs, bn)) = best else {
            return Some(hi);
        };
        let bk = self.key(bs, bn);
        (lo..=hi)
            .rev()
            .find(|&n| self.key(s, n).partial_cmp(&bk) == Some(std::cmp::Ordering::Less))
    }

    fn search_shape(&mut self, s: usize, best: Option<(usize, u32)>) -> Result<ShapeResult, Error> {
        let lo = self.spec.min_instances;
        let mut result = ShapeResult {
            shape: s,
            answer: None,
            status: "infeasible",
            why: String::new(),
            missed: None,
        };
        let Some(cap) = self.cap(s, best) else {
            result.status = "pruned";
            result.why = format!(
                "{} already cost {} (the best: {})",
                self.shapes[s].count(lo),
                money(f64::from(lo) * self.shapes[s].unit_cost),
                best.map_or(String::new(), |(bs, bn)| money(
                    f64::from(bn) * self.shapes[bs].unit_cost
                ))
            );
            return Ok(result);
        };
        // Meeting the SLOs on the first seed is necessary for every seed,
        // not for a mean or a fraction: those are judged on all seeds.
        let screen_all = self.spec.judge != Judge::EverySeed || self.spec.seeds.len() == 1;
        // The first seed's verdict (every seed's when they are the same test).
        let at_cap = self.judge(s, &[cap], screen_all)?.remove(0);
        if !at_cap.feasible {
            self.missed(&mut result, cap, at_cap, best.is_some());
            return Ok(result);
        }
        let first = self.smallest(s, lo - 1, cap, screen_all)?;
        let answer = if screen_all {
            first
        } else {
            let v = self.judge(s, &[first], true)?.remove(0);
            if v.feasible {
                first
            } else {
                let top = self.judge(s, &[cap], true)?.remove(0);
                if !top.feasible {
                    self.missed(&mut result, cap, top, best.is_some());
                    return Ok(result);
                }
                self.smallest(s, first, cap, true)?
            }
        };
        let verdict = self.judge(s, &[answer], true)?.remove(0);
        if answer > lo {
            // The lower neighbour, for the record (it missed on the first seed).
            let below = self.judge(s, &[answer - 1], screen_all)?.remove(0);
            result.missed = Some((answer - 1, below));
        }
        result.status = "feasible";
        result.answer = Some((answer, verdict));
        Ok(result)
    }

    /// Record a shape whose count `n` (its cap) misses.
    fn missed(&self, result: &mut ShapeResult, n: u32, v: Verdict, had_best: bool) {
        result.status = if had_best && n < self.spec.max_instances {
            "cannot-beat"
        } else {
            "infeasible"
        };
        result.why = format!(
            "at {}: {}",
            self.shapes[result.shape].count(n),
            self.why(&v)
        );
        result.missed = Some((n, v));
    }

    /// The smallest count in (bad, good] meeting the SLOs (on the first
    /// seed, or on every seed when `all`), given that `bad` misses (or is
    /// below the range) and `good` meets them: a ternary search, two counts
    /// simulated per step.
    fn smallest(&mut self, s: usize, bad: u32, good: u32, all: bool) -> Result<u32, Error> {
        let (mut bad, mut good) = (bad, good);
        while good - bad > 1 {
            let width = good - bad;
            let mut points = vec![bad + width.div_ceil(3)];
            let p2 = bad + (2 * width).div_ceil(3);
            if p2 > points[0] && p2 < good {
                points.push(p2);
            }
            points.retain(|&p| p > bad && p < good);
            if points.is_empty() {
                break;
            }
            let verdicts = self.judge(s, &points, all)?;
            for (p, v) in points.iter().zip(&verdicts) {
                if v.feasible {
                    good = good.min(*p);
                    break;
                }
                bad = bad.max(*p);
            }
        }
        Ok(good)
    }

    /// The verdicts on shape `s` at each count of `counts`, simulated at once:
    /// at every seed when `all`, else at the first.
    fn judge(&mut self, s: usize, counts: &[u32], all: bool) -> Result<Vec<Verdict>, Error> {
        let seeds: Vec<u64> = if all {
            self.spec.seeds.clone()
        } else {
            self.spec.seeds[..1].to_vec()
        };
        let all = all || self.spec.seeds.len() == 1;
        let mut trials = Vec::new();
        let mut what = Vec::new();
        for &n in counts {
            if self.verdicts.contains_key(&(s, n, all)) {
                continue;
            }
            for rate in self.spec.rate_points() {
                for &seed in &seeds {
                    trials.push(self.trial(s, n, rate, seed));
                    what.push((n, rate, seed));
                }
            }
        }
        let evals = self.engine.evaluate(&trials)?;
        let mut by_count: HashMap<u32, Vec<Evaluation>> = HashMap::new();
        for ((n, rate, seed), eval) in what.into_iter().zip(evals) {
            by_count.entry(n).or_default().push(eval.clone());
            if !self.recorded.insert(eval.id.clone()) {
                continue;
            }
            self.simulations.push(Simulated {
                shape: s,
                instances: n,
                rate,
                seed,
                eval,
            });
        }
        for (n, evals) in by_count {
            let v = self.verdict(&evals)?;
            self.verdicts.insert((s, n, all), v);
        }
        Ok(counts
            .iter()
            .map(|&n| self.verdicts[&(s, n, all)].clone())
            .collect())
    }

    /// One simulation of shape `s` at `n` instances, `rate` and `seed`.
    fn trial(&self, s: usize, n: u32, rate: Option<f64>, seed: u64) -> Trial {
        let shape = &self.shapes[s];
        let mut sets = self.spec.fixed.clone();
        sets.extend(shape.sets.iter().cloned());
        sets.extend(count_sets(shape, n));
        if let Some(rate) = rate {
            sets.push(("workload.aggregate_rate".into(), toml::Value::Float(rate)));
        }
        sets.push(("seed".into(), crate::config::seed::to_value(seed)));
        let mut labels: Labels = vec![
            ("gpu".into(), toml::Value::String(shape.gpu.clone())),
            ("tp".into(), toml::Value::Integer(i64::from(shape.tp))),
        ];
        labels.extend(shape.labels.iter().cloned());
        labels.push(("instances".into(), toml::Value::Integer(i64::from(n))));
        if let Some(rate) = rate {
            labels.push(("rate".into(), toml::Value::Float(rate)));
        }
        Trial { labels, sets }
    }

    /// The verdict on a candidate from its simulations.
    fn verdict(&self, evals: &[Evaluation]) -> Result<Verdict, Error> {
        judge(&self.spec.slos, self.spec.judge, evals, &self.spec.name)
    }

    /// `ttft_p99_ms = 1204.3 > 1000`.
    fn why(&self, v: &Verdict) -> String {
        if let Some(f) = &v.failure {
            return format!("a simulation failed: {f}");
        }
        match v.binding {
            Some(i) => describe_slo(&self.spec.slos[i], v.values[i]),
            None => "every SLO met".into(),
        }
    }

    fn describe_result(&self, r: &ShapeResult) -> String {
        let shape = &self.shapes[r.shape];
        match (&r.answer, r.status) {
            (Some((n, v)), _) => format!(
                "plan: {}: {}, {} — {}{}",
                shape.describe(),
                shape.count(*n),
                money(f64::from(*n) * shape.unit_cost),
                v.binding.map_or(String::new(), |i| format!(
                    "binding {}",
                    describe_slo(&self.spec.slos[i], v.values[i])
                )),
                r.missed.as_ref().map_or(String::new(), |(m, mv)| format!(
                    "; {m} miss: {}",
                    self.why(mv)
                ))
            ),
            (None, status) => format!("plan: {}: {status}: {}", shape.describe(), r.why),
        }
    }
}

/// The overrides that give shape `shape` its count `n`: `instance.count`,
/// or for a mix its pools (`instance.count = 1`, as pools require; each
/// pool's calibration profile is `[calibration]`'s for its GPU).
fn count_sets(shape: &Shape, n: u32) -> Sets {
    let int = |v: u32| toml::Value::Integer(i64::from(v));
    let Some(pools) = &shape.pools else {
        return vec![("instance.count".into(), int(n))];
    };
    let tables = pools
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut model = toml::Table::new();
            model.insert("hardware".into(), toml::Value::String(p.gpu.clone()));
            model.insert("tp".into(), int(p.tp));
            if let Some(c) = &p.calibration {
                model.insert(
                    "calibration".into(),
                    toml::Value::String(c.display().to_string()),
                );
            }
            let mut t = toml::Table::new();
            let name = format!("{}-{}-{i}", p.role, p.gpu.to_lowercase());
            t.insert("name".into(), toml::Value::String(name));
            t.insert("role".into(), toml::Value::String(p.role.clone()));
            t.insert("instances".into(), int(n * p.share));
            t.insert("model".into(), toml::Value::Table(model));
            toml::Value::Table(t)
        })
        .collect();
    vec![
        ("instance.count".into(), int(1)),
        ("pools".into(), toml::Value::Array(tables)),
    ]
}

/// The shapes of a spec: GPU (slowest) × TP, then the mixes, each × every
/// axis, in file order.
pub fn shapes(spec: &PlanSpec) -> Vec<Shape> {
    let mut bases: Vec<Shape> = Vec::new();
    for gpu in &spec.gpus {
        for &tp in &spec.tps {
            bases.push(Shape {
                index: 0,
                gpu: gpu.clone(),
                tp,
                labels: Labels::new(),
                sets: [
                    ("model.hardware".into(), toml::Value::String(gpu.clone())),
                    ("model.tp".into(), toml::Value::Integer(i64::from(tp))),
                ]
                .into_iter()
                .chain(spec.calibration.get(gpu).map(|p| {
                    let p = toml::Value::String(p.display().to_string());
                    ("model.calibration".to_string(), p)
                }))
                .collect(),
                unit_cost: f64::from(tp) * spec.prices[gpu],
                unit_gpus: tp,
                pools: None,
            });
        }
    }
    for m in &spec.mixes {
        bases.push(Shape {
            index: 0,
            gpu: m.name.clone(),
            tp: 0,
            labels: Labels::new(),
            sets: m.sets.clone(),
            unit_cost: m
                .pools
                .iter()
                .map(|p| f64::from(p.tp * p.share) * spec.prices[&p.gpu])
                .sum(),
            unit_gpus: m.pools.iter().map(|p| p.tp * p.share).sum(),
            pools: Some(m.pools.clone()),
        });
    }
    let axis_lens: Vec<usize> = spec.axes.iter().map(|a| a.points.len()).collect();
    let cells: usize = axis_lens.iter().product();
    let mut out = Vec::new();
    for base in bases {
        for cell in 0..cells {
            let mut rem = cell;
            let mut pick = vec![0; axis_lens.len()];
            for a in (0..axis_lens.len()).rev() {
                pick[a] = rem % axis_lens[a];
                rem /= axis_lens[a];
            }
            let mut shape = base.clone();
            shape.index = out.len();
            for (a, &p) in spec.axes.iter().zip(&pick) {
                let point = &a.points[p];
                shape.labels.push((a.name.clone(), point.label.clone()));
                shape.sets.extend(point.sets.iter().cloned());
            }
            out.push(shape);
        }
    }
    out
}

/// The verdict of the SLOs over a candidate's simulations. A metric the
/// report does not have at all is an input error (the plan asks for
/// something this run cannot measure); a null one (no request completed)
/// misses.
pub fn judge(slos: &[Slo], how: Judge, evals: &[Evaluation], plan: &str) -> Result<Verdict, Error> {
    let failure = evals.iter().find_map(|e| e.error.clone());
    let mut values = Vec::with_capacity(slos.len());
    let mut feasible = failure.is_none();
    let mut binding: Option<(usize, f64)> = None;
    for (i, slo) in slos.iter().enumerate() {
        let ok: Vec<&Evaluation> = evals.iter().filter(|e| e.error.is_none()).collect();
        if let Some(e) = ok.iter().find(|e| !e.has(&slo.metric)) {
            let _ = e;
            return Err(Error::input(format!(
                "{plan}: slo \"{}\": the report has no {} (a metric of a section this run does not have, e.g. slo.* needs [slo] in the base run file, slo_classes.CLASS.* a client of that class)",
                slo.text, slo.metric
            )));
        }
        let xs: Vec<Option<f64>> = ok.iter().map(|e| e.metric(&slo.metric)).collect();
        let value = if xs.is_empty() || xs.iter().any(Option::is_none) {
            None
        } else {
            let xs: Vec<f64> = xs.into_iter().flatten().collect();
            Some(match how {
                Judge::Mean => xs.iter().sum::<f64>() / xs.len() as f64,
                Judge::EverySeed => worst(slo, xs.iter().cloned()),
                Judge::Fraction(f) => {
                    // The m-th best value, m = ⌈f·k⌉: met iff at least m of
                    // the k simulations meet the bound.
                    let mut sorted = xs.clone();
                    sorted.sort_by(|a, b| {
                        if slo.upper {
                            a.total_cmp(b)
                        } else {
                            b.total_cmp(a)
                        }
                    });
                    let m = ((f * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
                    sorted[m - 1]
                }
            })
        };
        let excess = value.map_or(f64::INFINITY, |v| slo.excess(v));
        if !value.is_some_and(|v| slo.met(v)) {
            feasible = false;
        }
        if binding.is_none_or(|(_, x)| excess > x) {
            binding = Some((i, excess));
        }
        values.push(value);
    }
    Ok(Verdict {
        feasible,
        values,
        binding: binding.map(|(i, _)| i),
        failure,
    })
}

/// The worst of `xs` for `slo` (the largest for an upper bound).
fn worst(slo: &Slo, xs: impl Iterator<Item = f64>) -> f64 {
    if slo.upper {
        xs.fold(f64::MIN, f64::max)
    } else {
        xs.fold(f64::MAX, f64::min)
    }
}

/// `ttft_p99_ms = 1204.3 > 1000` (or `≤` when met; `no value` when null).
pub fn describe_slo(slo: &Slo, value: Option<f64>) -> String {
    match value {
        None => format!("{} has no value (no request finished)", slo.metric),
        Some(v) => {
            let op = match (slo.upper, slo.met(v)) {
                (true, true) => "≤",
                (true, false) => ">",
                (false, true) => "≥",
                (false, false) => "<",
            };
            format!("{} = {} {op} {}", slo.metric, short(v), short(slo.bound))
        }
    }
}

/// A number in short form (4 significant digits).
pub fn short(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (3 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    format!("{v:.digits$}")
}

/// `$12.50/h`.
pub fn money(v: f64) -> String {
    format!("${v:.2}/h")
}

/// Run a plan: the search on an engine in `out`, then its outputs written
/// there. An infeasible plan is an error of kind
/// [`crate::session::ErrorKind::Infeasible`] naming the closest candidates.
pub fn plan(
    spec: &PlanSpec,
    out: &std::path::Path,
    options: crate::search::Options,
    shard: Option<Shard>,
    progress: &dyn Fn(&str),
) -> Result<(Outcome, Written), Error> {
    output::check_outputs(spec, out)?;
    // Each GPU type's calibration error, read once: on stderr before the
    // search, in plan.json after it.
    let calibration = output::calibration_errors(spec);
    if !spec.calibration.is_empty() {
        for c in &calibration {
            progress(&c.line);
        }
    }
    let fingerprint = output::fingerprint(spec);
    let mut engine = Engine::open(
        &spec.name,
        &fingerprint,
        spec.base.clone(),
        spec.base_source.text.clone(),
        output::axis_names(spec),
        out,
        options,
    )?;
    let outcome = Planner::new(spec, &mut engine, progress)
        .shard(shard)
        .run()?;
    let written = output::write(spec, &engine, &outcome, &calibration, shard)?;
    if outcome.best.is_none() {
        return Err(Error::infeasible(output::infeasible_message(
            spec, &outcome,
        )));
    }
    Ok((outcome, written))
}

//! The tune file (TOML) as written, checked into a [`TuneSpec`]: the base
//! run file (or an llm-d file applied to it), the parameters and their
//! ranges, the objective and constraints, the training and held-out
//! traffic, the budget. Every error names the tune file and the key, and
//! says what to do.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::{self, RunFile, Source};
use crate::plan::Slo;
use crate::search::Sets;
use crate::sweep::spec::{check_key, flatten_sets, SeedValue};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TuneFile {
    /// Base run file, relative to the tune file (default: built-in scenario).
    #[serde(default)]
    base: Option<PathBuf>,
    /// An llm-d EndpointPickerConfig applied to the base (its routing and
    /// admission become the base's; the tuned file is written back as one).
    #[serde(default)]
    epp_config: Option<PathBuf>,
    /// Simulations the search may run (the start's included).
    budget: Option<i64>,
    /// The optimiser's seed.
    #[serde(default)]
    seed: Option<SeedValue>,
    /// Candidates per generation.
    #[serde(default)]
    population: Option<i64>,
    objective: ObjectiveFile,
    #[serde(default)]
    train: TrafficFile,
    #[serde(default)]
    held_out: Option<TrafficFile>,
    #[serde(default, rename = "param")]
    params: Vec<ParamFile>,
    /// Sensitivity step, a fraction of each range (default 0.1).
    #[serde(default)]
    sensitivity_step: Option<f64>,
    #[serde(default)]
    set: toml::Table,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectiveFile {
    metric: String,
    /// `minimize` (default) or `maximize`.
    #[serde(default)]
    goal: Option<String>,
    /// `"METRIC <= BOUND"` / `"METRIC >= BOUND"` on the mean over the set.
    #[serde(default)]
    constraints: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrafficFile {
    #[serde(default)]
    seeds: Option<Vec<SeedValue>>,
    #[serde(default)]
    rates: Option<Vec<f64>>,
    /// Run files whose `[workload]` replaces the base's.
    #[serde(default)]
    workloads: Option<Vec<PathBuf>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParamFile {
    key: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    min: Option<f64>,
    #[serde(default)]
    max: Option<f64>,
    /// `linear` (default), `log`, `integer` or `choice`.
    #[serde(default)]
    scale: Option<String>,
    /// The values of a `choice` parameter.
    #[serde(default)]
    values: Option<Vec<toml::Value>>,
    /// The starting value (default: the base's value at `key`).
    #[serde(default)]
    start: Option<toml::Value>,
}

/// How a parameter's range is searched.
#[derive(Clone, Debug, PartialEq)]
pub enum Scale {
    Linear,
    /// Uniform in the logarithm (min > 0).
    Log,
    /// Whole numbers.
    Integer,
    /// One of these values.
    Choice(Vec<toml::Value>),
}

/// One tuned parameter.
#[derive(Clone, Debug)]
pub struct Param {
    /// Run-file key.
    pub key: String,
    /// Column name (default: the key).
    pub name: String,
    pub min: f64,
    pub max: f64,
    pub scale: Scale,
    /// The starting value.
    pub start: toml::Value,
}

impl Param {
    /// The value at the unit coordinate `u` ∈ [0, 1].
    pub fn value(&self, u: f64) -> toml::Value {
        let u = u.clamp(0.0, 1.0);
        match &self.scale {
            Scale::Linear => toml::Value::Float(self.min + u * (self.max - self.min)),
            Scale::Log => {
                toml::Value::Float((self.min.ln() + u * (self.max.ln() - self.min.ln())).exp())
            }
            Scale::Integer => {
                toml::Value::Integer((self.min + u * (self.max - self.min)).round() as i64)
            }
            Scale::Choice(vs) => {
                vs[((u * vs.len() as f64).floor() as usize).min(vs.len() - 1)].clone()
            }
        }
    }

    /// The unit coordinate of a value (the middle of its cell for a choice).
    pub fn unit(&self, v: &toml::Value) -> f64 {
        let x = v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
        let u = match (&self.scale, x) {
            (Scale::Choice(vs), _) => {
                let i = vs.iter().position(|c| c == v).unwrap_or(0);
                (i as f64 + 0.5) / vs.len() as f64
            }
            (Scale::Log, Some(x)) => (x.ln() - self.min.ln()) / (self.max.ln() - self.min.ln()),
            (_, Some(x)) if self.max > self.min => (x - self.min) / (self.max - self.min),
            _ => 0.0,
        };
        u.clamp(0.0, 1.0)
    }
}

/// Minimise or maximise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Goal {
    Minimize,
    Maximize,
}

/// A set of traffic points: every workload × rate × seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Traffic {
    pub seeds: Vec<u64>,
    /// Empty: the base's own rate.
    pub rates: Vec<f64>,
    /// Empty: the base's workload.
    pub workloads: Vec<Workload>,
}

/// A run file's `[workload]`, replacing the base's.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Its label (the file's stem).
    pub name: String,
    /// The run file (absolute).
    pub path: PathBuf,
    /// Its `[workload]` table, paths made absolute.
    pub table: toml::Value,
}

impl Traffic {
    /// Each point's labels and overrides.
    pub fn points(&self) -> Vec<(Sets, Sets)> {
        let rates: Vec<Option<f64>> = if self.rates.is_empty() {
            vec![None]
        } else {
            self.rates.iter().copied().map(Some).collect()
        };
        let workloads: Vec<Option<&Workload>> = if self.workloads.is_empty() {
            vec![None]
        } else {
            self.workloads.iter().map(Some).collect()
        };
        let mut out = Vec::new();
        for w in &workloads {
            for r in &rates {
                for &s in &self.seeds {
                    let mut labels = Sets::new();
                    let mut sets = Sets::new();
                    if let Some(w) = w {
                        labels.push(("workload".into(), toml::Value::String(w.name.clone())));
                        sets.push(("workload".into(), w.table.clone()));
                    }
                    if let Some(r) = r {
                        labels.push(("rate".into(), toml::Value::Float(*r)));
                        sets.push(("workload.aggregate_rate".into(), toml::Value::Float(*r)));
                    }
                    labels.push(("seed".into(), toml::Value::Integer(s as i64)));
                    sets.push(("seed".into(), toml::Value::Integer(s as i64)));
                    out.push((labels, sets));
                }
            }
        }
        out
    }

    /// Simulations per candidate.
    pub fn size(&self) -> usize {
        self.seeds.len() * self.rates.len().max(1) * self.workloads.len().max(1)
    }
}

/// A checked tune file.
#[derive(Debug)]
pub struct TuneSpec {
    /// The tune file (for messages).
    pub name: String,
    pub text: String,
    /// The base run file (absolute), `None` for the built-in scenario.
    pub base: Option<PathBuf>,
    pub base_source: Source,
    /// The llm-d file applied to the base (absolute), and its text.
    pub epp: Option<(PathBuf, String)>,
    /// Overrides of every simulation: the llm-d file's sections, then `[set]`.
    pub fixed: Sets,
    pub params: Vec<Param>,
    pub metric: String,
    pub goal: Goal,
    pub constraints: Vec<Slo>,
    pub train: Traffic,
    pub held_out: Traffic,
    /// Whether the held-out set is the training set (warned).
    pub held_out_is_train: bool,
    pub budget: usize,
    pub seed: u64,
    pub population: usize,
    pub sensitivity_step: f64,
}

impl TuneSpec {
    /// Read and check a tune file.
    pub fn load(path: &Path) -> Result<TuneSpec, String> {
        let text = crate::input::read_to_string(path)
            .map_err(|e| format!("cannot read the tune file {}: {e}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new(""));
        TuneSpec::from_text(&path.display().to_string(), dir, &text)
    }

    /// Check a tune file's text; `dir` resolves its paths.
    pub fn from_text(name: &str, dir: &Path, text: &str) -> Result<TuneSpec, String> {
        let file: TuneFile =
            toml::from_str(text).map_err(|e| config::describe_toml_error(name, text, &e))?;
        let (base, base_source) = crate::search::read_base(name, dir, file.base.as_deref())?;
        let run = config::parse(&base_source).map_err(|e| format!("{name}: base run file: {e}"))?;
        let mut base_table: toml::Table = base_source
            .text
            .parse()
            .map_err(|e: toml::de::Error| format!("{name}: base run file: {e}"))?;
        let mut fixed = Sets::new();
        let epp = match &file.epp_config {
            None => None,
            Some(p) => Some(epp_sets(name, dir, p, &run, &base_source, &mut fixed)?),
        };
        let mut user = Sets::new();
        flatten_sets("", &file.set, &mut user);
        fixed.extend(user);
        for (k, v) in &fixed {
            check_key(&base_table, k, v, &format!("{name}: [set]"))?;
            config::overrides::set(&mut base_table, k, v.clone())
                .map_err(|e| format!("{name}: [set] {k}: {e}"))?;
        }
        let params = params(name, &file.params, &base_table)?;
        let (metric, goal, constraints) = objective(name, &file.objective)?;
        let train = traffic(name, "train", dir, &file.train, &run)?;
        let (held_out, held_out_is_train) = match &file.held_out {
            None => {
                return Err(format!(
                    "{name}: no [held_out]: give the traffic the tuned parameters are judged on, other than the training traffic (e.g. [held_out] seeds = [101, 102, 103] and rates = [...])"
                ))
            }
            Some(h) => {
                let h = traffic(name, "held_out", dir, h, &run)?;
                let same = h == train;
                (h, same)
            }
        };
        let budget = match file.budget {
            None => {
                return Err(format!(
                    "{name}: no budget: give the most simulations the search may run, e.g. budget = 300"
                ))
            }
            Some(b) if b < 1 => {
                return Err(format!(
                    "{name}: budget = {b}: give at least one simulation (the search needs a few generations: budget = 300 is a good start)"
                ))
            }
            Some(b) => b as usize,
        };
        let population = match file.population {
            None => (4 + (3.0 * (params.len() as f64).ln()).floor() as usize).max(8),
            Some(p) if p < 2 => {
                return Err(format!(
                    "{name}: population = {p}: give at least 2 candidates per generation"
                ))
            }
            Some(p) => p as usize,
        };
        let needed = (population + 1) * train.size();
        if budget < needed {
            return Err(format!(
                "{name}: budget = {budget}: the search needs at least {needed} simulations (the start and one generation of {population} candidates, each over the {} training simulations); raise the budget or lower population",
                train.size()
            ));
        }
        let sensitivity_step = match file.sensitivity_step {
            None => 0.1,
            Some(s) if s > 0.0 && s <= 0.5 => s,
            Some(s) => {
                return Err(format!(
                    "{name}: sensitivity_step = {s}: give a fraction of each range in (0, 0.5], e.g. 0.1"
                ))
            }
        };
        Ok(TuneSpec {
            name: name.to_string(),
            text: text.to_string(),
            base,
            base_source,
            epp,
            fixed,
            params,
            metric,
            goal,
            constraints,
            train,
            held_out,
            held_out_is_train,
            budget,
            seed: file.seed.map_or(1, |s| s.0),
            population,
            sensitivity_step,
        })
    }
}

/// The llm-d file applied to the base: its sections as overrides that
/// replace the base's (`routing`, `admission`, `flow_control`, `pd`).
fn epp_sets(
    name: &str,
    dir: &Path,
    rel: &Path,
    run: &RunFile,
    base: &Source,
    fixed: &mut Sets,
) -> Result<(PathBuf, String), String> {
    let p = std::path::absolute(dir.join(rel)).unwrap_or_else(|_| dir.join(rel));
    let text = crate::input::read_to_string(&p).map_err(|e| {
        format!(
            "{name}: epp_config = \"{}\": cannot read it: {e}",
            rel.display()
        )
    })?;
    let mut with = run.clone();
    with.routing.epp_config = Some(p.clone());
    let (expanded, _) = config::epp_config::expand(&with, &base.base_dir)
        .map_err(|e| format!("{name}: epp_config = \"{}\": {e}", rel.display()))?
        .ok_or_else(|| format!("{name}: epp_config: internal: not applied"))?;
    let table = |v: Result<toml::Table, toml::ser::Error>| {
        v.map(toml::Value::Table)
            .map_err(|e| format!("{name}: epp_config: internal: {e}"))
    };
    fixed.push((
        "routing".into(),
        table(toml::Table::try_from(&expanded.routing))?,
    ));
    fixed.push((
        "admission".into(),
        table(toml::Table::try_from(&expanded.admission))?,
    ));
    if let Some(fc) = &expanded.flow_control {
        fixed.push(("flow_control".into(), table(toml::Table::try_from(fc))?));
    }
    if let Some(pd) = &expanded.pd {
        fixed.push(("pd".into(), table(toml::Table::try_from(pd))?));
    }
    Ok((p, text))
}

fn params(name: &str, files: &[ParamFile], base: &toml::Table) -> Result<Vec<Param>, String> {
    if files.is_empty() {
        return Err(format!(
            "{name}: no [[param]]: give each parameter to tune, e.g. [[param]] key = \"routing.scorers.0.weight\", min = 0.0, max = 10.0"
        ));
    }
    let mut out: Vec<Param> = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let what = format!("{name}: param {} ('{}')", i + 1, f.key);
        let p = param(&what, f, base)?;
        if out.iter().any(|q| q.key == p.key || q.name == p.name) {
            return Err(format!("{what}: tuned twice; give each key once"));
        }
        out.push(p);
    }
    Ok(out)
}

fn param(what: &str, f: &ParamFile, base: &toml::Table) -> Result<Param, String> {
    let scale = match (f.scale.as_deref(), &f.values) {
        (None | Some("choice"), Some(vs)) => {
            if vs.len() < 2 {
                return Err(format!("{what}: a choice needs at least two values"));
            }
            Scale::Choice(vs.clone())
        }
        (Some("choice"), None) => {
            return Err(format!("{what}: scale = \"choice\" needs values = [...]"))
        }
        (None | Some("linear"), None) => Scale::Linear,
        (Some("log"), None) => Scale::Log,
        (Some("integer"), None) => Scale::Integer,
        (Some(s), None) => {
            return Err(format!(
                "{what}: scale = \"{s}\": give \"linear\" (the default), \"log\", \"integer\" or \"choice\" (with values)"
            ))
        }
        (Some(s), Some(_)) => {
            return Err(format!(
                "{what}: values are for scale = \"choice\", not \"{s}\""
            ))
        }
    };
    let (min, max) = match (&scale, f.min, f.max) {
        (Scale::Choice(_), None, None) => (0.0, 1.0),
        (Scale::Choice(_), _, _) => {
            return Err(format!("{what}: a choice has values, not min and max"))
        }
        (_, Some(a), Some(b)) if a.is_finite() && b.is_finite() && a < b => (a, b),
        (_, Some(a), Some(b)) => {
            return Err(format!(
                "{what}: min = {a}, max = {b}: give finite bounds with min < max"
            ))
        }
        _ => return Err(format!("{what}: give the range: min = …, max = …")),
    };
    if scale == Scale::Log && min <= 0.0 {
        return Err(format!(
            "{what}: scale = \"log\" needs min > 0 (min = {min})"
        ));
    }
    let current = config::overrides::get(base, &f.key);
    let start = match (&f.start, current) {
        (Some(s), _) => s.clone(),
        (None, Some(v)) => v,
        (None, None) => {
            return Err(format!(
                "{what}: the base run file sets no value at '{}'; give start = … (the value the policy uses now, its default)",
                f.key
            ))
        }
    };
    let p = Param {
        key: f.key.clone(),
        name: f.name.clone().unwrap_or_else(|| f.key.clone()),
        min,
        max,
        scale,
        start,
    };
    check_key(base, &p.key, &p.value(0.0), what)?;
    check_start(what, &p)?;
    Ok(p)
}

/// The start must lie in the range (a choice: be one of the values).
fn check_start(what: &str, p: &Param) -> Result<(), String> {
    let x = p
        .start
        .as_float()
        .or_else(|| p.start.as_integer().map(|i| i as f64));
    match (&p.scale, x) {
        (Scale::Choice(vs), _) if vs.contains(&p.start) => Ok(()),
        (Scale::Choice(_), _) => Err(format!(
            "{what}: the start {} is not one of the values",
            p.start
        )),
        (_, Some(x)) if x >= p.min && x <= p.max => Ok(()),
        (_, Some(x)) => Err(format!(
            "{what}: the start {x} lies outside [{}, {}]; widen the range or give start = …",
            p.min, p.max
        )),
        (_, None) => Err(format!(
            "{what}: the start {} is not a number; a numeric range needs a numeric parameter (use values = [...] for a choice)",
            p.start
        )),
    }
}

fn objective(name: &str, f: &ObjectiveFile) -> Result<(String, Goal, Vec<Slo>), String> {
    let goal = match f.goal.as_deref() {
        None | Some("minimize" | "minimise") => Goal::Minimize,
        Some("maximize" | "maximise") => Goal::Maximize,
        Some(g) => {
            return Err(format!(
                "{name}: objective.goal = \"{g}\": give \"minimize\" or \"maximize\""
            ))
        }
    };
    if f.metric.trim().is_empty() {
        return Err(format!(
            "{name}: objective.metric is empty: give a report metric, e.g. \"ttft_p99_ms\""
        ));
    }
    let mut constraints = Vec::new();
    for c in &f.constraints {
        match Slo::parse(c) {
            Some(Ok(s)) => constraints.push(s),
            Some(Err(e)) => return Err(format!("{name}: objective.constraints \"{c}\": {e}")),
            None => {
                return Err(format!(
                    "{name}: objective.constraints \"{c}\": write \"METRIC <= BOUND\" or \"METRIC >= BOUND\""
                ))
            }
        }
    }
    Ok((f.metric.trim().to_string(), goal, constraints))
}

fn traffic(
    name: &str,
    section: &str,
    dir: &Path,
    f: &TrafficFile,
    run: &RunFile,
) -> Result<Traffic, String> {
    let seeds = match &f.seeds {
        Some(s) if s.is_empty() => {
            return Err(format!(
                "{name}: [{section}] seeds = []: give at least one seed"
            ))
        }
        Some(s) => s.iter().map(|v| v.0).collect(),
        None => vec![run.seed],
    };
    let rates = f.rates.clone().unwrap_or_default();
    if let Some(r) = rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        return Err(format!(
            "{name}: [{section}] rates: {r} is not a positive rate (requests/s)"
        ));
    }
    let mut workloads = Vec::new();
    for w in f.workloads.iter().flatten() {
        workloads.push(workload(name, section, dir, w)?);
    }
    Ok(Traffic {
        seeds,
        rates,
        workloads,
    })
}

/// A run file's `[workload]`, its paths made absolute.
fn workload(name: &str, section: &str, dir: &Path, rel: &Path) -> Result<Workload, String> {
    let p = std::path::absolute(dir.join(rel)).unwrap_or_else(|_| dir.join(rel));
    let what = format!("{name}: [{section}] workloads \"{}\"", rel.display());
    let source = Source::read(&p).map_err(|e| format!("{what}: {e}"))?;
    config::parse(&source).map_err(|e| format!("{what}: {e}"))?;
    let mut table: toml::Table = source.text.parse().map_err(|e| format!("{what}: {e}"))?;
    crate::search::absolute_paths(&mut table, &source.base_dir).map_err(|e| e.message)?;
    let w = table.remove("workload").ok_or_else(|| {
        format!("{what}: the file has no [workload] section to replace the base's with")
    })?;
    let name = p.file_stem().map_or_else(
        || rel.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    );
    Ok(Workload {
        name,
        path: p,
        table: w,
    })
}

//! The plan file (TOML) as written, checked into a [`PlanSpec`]: the base
//! run file, the traffic, the SLOs, the search space and the prices. Every
//! error names the plan file and the key, and says what to do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::{self, RunFile, Source};
use crate::sweep::spec::{check_axis, check_key, Axis, AxisFile, SeedValue};

/// The plan file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    /// Base run file, relative to the plan file (default: the built-in scenario).
    #[serde(default)]
    base: Option<PathBuf>,
    /// Seeds every candidate is simulated at (default: the base's seed).
    #[serde(default)]
    seeds: Option<Vec<SeedValue>>,
    /// `every-seed` (default) or `mean`.
    #[serde(default)]
    judge: Option<String>,
    #[serde(default)]
    traffic: TrafficFile,
    /// `"METRIC <= BOUND"` or `"METRIC >= BOUND"`.
    #[serde(default)]
    slo: Vec<String>,
    space: SpaceFile,
    /// Dollars per GPU-hour by GPU type (added to, or replacing, the defaults).
    #[serde(default)]
    prices: BTreeMap<String, f64>,
    /// `cost` (default) or `gpus`.
    #[serde(default)]
    objective: Option<String>,
    /// A calibration profile per GPU type (relative to the plan file),
    /// applied to that GPU's candidates (`model.calibration`).
    #[serde(default)]
    calibration: BTreeMap<String, PathBuf>,
    /// Overrides applied to every candidate (dotted keys or nested tables).
    #[serde(default)]
    set: toml::Table,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrafficFile {
    #[serde(default)]
    rate: Option<f64>,
    #[serde(default)]
    rates: Option<Vec<f64>>,
    #[serde(default)]
    scale: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpaceFile {
    #[serde(default)]
    gpu: Vec<String>,
    #[serde(default)]
    tp: Option<Vec<i64>>,
    /// `[min, max]` instances.
    instances: Vec<i64>,
    /// Further axes (routing variants, batch limits, KV tiers…), each a
    /// sweep axis: `key` and `values`, or `name` and `[[…variants]]`.
    #[serde(default, rename = "axis")]
    axes: Vec<AxisFile>,
    /// Heterogeneous fleets: pools of several GPU types in fixed shares.
    #[serde(default, rename = "mix")]
    mixes: Vec<MixFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MixFile {
    name: String,
    pools: Vec<MixPoolFile>,
    /// Overrides of this mix's candidates (e.g. `"pd.decider"` for pools
    /// of roles prefill and decode).
    #[serde(default)]
    set: toml::Table,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MixPoolFile {
    gpu: String,
    /// `both` (default: serves whole requests), `prefill` or `decode`.
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    tp: Option<i64>,
    #[serde(default)]
    share: Option<i64>,
}

/// A heterogeneous fleet: a unit of it is `share` instances of each pool
/// (GPU type at a TP degree); a candidate is a number of units.
#[derive(Clone, Debug, PartialEq)]
pub struct Mix {
    pub name: String,
    pub pools: Vec<MixPool>,
    /// The mix's own overrides.
    pub sets: Vec<(String, toml::Value)>,
}

/// One pool of a mix.
#[derive(Clone, Debug, PartialEq)]
pub struct MixPool {
    pub gpu: String,
    pub tp: u32,
    /// Instances per unit of the mix.
    pub share: u32,
    /// `both`, `prefill` or `decode`.
    pub role: String,
    /// `[calibration]`'s profile for its GPU type.
    pub calibration: Option<PathBuf>,
}

/// Default prices, dollars per GPU-hour: round figures of on-demand cloud
/// prices in 2026 for the bundled GPU types. Illustrative only: give your
/// own in `[prices]`.
pub const DEFAULT_PRICES: [(&str, f64); 4] = [
    ("H100", 4.0),
    ("A100-SXM", 2.5),
    ("A100-80", 2.5),
    ("L40S", 1.5),
];

/// The most instances a plan searches.
pub const MAX_INSTANCES: i64 = 4096;

/// A bound on a report metric.
#[derive(Clone, Debug, PartialEq)]
pub struct Slo {
    pub metric: String,
    /// `true` for `<=` (an upper bound), `false` for `>=`.
    pub upper: bool,
    pub bound: f64,
    /// As written.
    pub text: String,
}

impl Slo {
    /// `"METRIC <= BOUND"` or `"METRIC >= BOUND"` split (the metric not yet
    /// checked against the report): `None` when the text has neither form
    /// or the bound is not a number.
    pub fn parse(text: &str) -> Option<Result<Slo, String>> {
        let (metric, upper, bound) = if let Some((m, b)) = text.split_once("<=") {
            (m, true, b)
        } else if let Some((m, b)) = text.split_once(">=") {
            (m, false, b)
        } else {
            return None;
        };
        let bound = match bound.trim().parse::<f64>() {
            Ok(b) => b,
            Err(_) => return Some(Err(format!("\"{}\" is not a number", bound.trim()))),
        };
        Some(Ok(Slo {
            metric: metric.trim().to_string(),
            upper,
            bound,
            text: text.to_string(),
        }))
    }

    /// Whether `value` meets the bound.
    pub fn met(&self, value: f64) -> bool {
        if self.upper {
            value <= self.bound
        } else {
            value >= self.bound
        }
    }

    /// How far `value` is from meeting the bound, as a ratio (≤ 1 when met).
    pub fn excess(&self, value: f64) -> f64 {
        let ratio = |a: f64, b: f64| {
            if b > 0.0 {
                a / b
            } else if a <= b {
                1.0
            } else {
                f64::INFINITY
            }
        };
        if self.upper {
            ratio(value, self.bound)
        } else {
            ratio(self.bound, value)
        }
    }
}

/// How the SLOs are judged over seeds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Judge {
    /// Every seed's simulation meets every SLO.
    EverySeed,
    /// The mean over seeds of each metric meets its SLO.
    Mean,
    /// Each SLO is met by at least this fraction of the simulations (seeds
    /// × rates), in (0, 1].
    Fraction(f64),
}

/// What a plan minimises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    /// Dollars per hour of the fleet.
    Cost,
    /// GPUs in the fleet.
    Gpus,
    /// Dollars per million output tokens. For a plan's fixed traffic every
    /// candidate that meets the SLOs serves the same tokens, so this picks
    /// the fleet `Cost` picks; the figure is reported.
    CostPerMtok,
}

/// A checked plan file.
#[derive(Debug)]
pub struct PlanSpec {
    /// The plan file (for messages).
    pub name: String,
    /// Its text (part of the fingerprint).
    pub text: String,
    /// The base run file (absolute) or `None` for the built-in scenario.
    pub base: Option<PathBuf>,
    pub base_source: Source,
    pub seeds: Vec<u64>,
    pub judge: Judge,
    /// The rates to plan for (requests/s), each a traffic point every
    /// candidate must serve; empty: the base's own arrivals (a trace, or a
    /// workload without an aggregate rate), not overridden.
    pub rates: Vec<f64>,
    pub slos: Vec<Slo>,
    pub gpus: Vec<String>,
    pub tps: Vec<u32>,
    pub min_instances: u32,
    pub max_instances: u32,
    pub axes: Vec<Axis>,
    /// Heterogeneous fleets (shapes besides GPU × TP).
    pub mixes: Vec<Mix>,
    /// Dollars per GPU-hour of each GPU of the space.
    pub prices: BTreeMap<String, f64>,
    /// Calibration profile (absolute) per GPU type of the space.
    pub calibration: BTreeMap<String, PathBuf>,
    pub objective: Objective,
    /// `[set]`: overrides of every candidate.
    pub fixed: Vec<(String, toml::Value)>,
}

impl PlanSpec {
    /// Read and check a plan file.
    pub fn load(path: &Path) -> Result<PlanSpec, String> {
        let text = crate::input::read_to_string(path)
            .map_err(|e| format!("cannot read the plan file {}: {e}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new(""));
        PlanSpec::from_text(&path.display().to_string(), dir, &text)
    }

    /// Check a plan file's text; `dir` resolves `base`.
    pub fn from_text(name: &str, dir: &Path, text: &str) -> Result<PlanSpec, String> {
        let file: PlanFile =
            toml::from_str(text).map_err(|e| config::describe_toml_error(name, text, &e))?;
        let (base, base_source) = crate::search::read_base(name, dir, file.base.as_deref())?;
        let run = config::parse(&base_source).map_err(|e| format!("{name}: base run file: {e}"))?;
        let base_table: toml::Table = base_source
            .text
            .parse()
            .map_err(|e: toml::de::Error| format!("{name}: base run file: {e}"))?;
        let mut fixed = Vec::new();
        crate::sweep::spec::flatten_sets("", &file.set, &mut fixed);
        for (k, v) in &fixed {
            check_key(&base_table, k, v, &format!("{name}: [set]"))?;
        }
        let seeds = match &file.seeds {
            Some(s) if s.is_empty() => {
                return Err(format!(
                    "{name}: seeds = []: give at least one seed (e.g. seeds = [1, 2, 3]), or leave `seeds` out to use the base run file's seed"
                ))
            }
            Some(s) => s.iter().map(|v| v.0).collect(),
            None => vec![run.seed],
        };
        let judge = match file.judge.as_deref() {
            None | Some("every-seed") => Judge::EverySeed,
            Some("mean") => Judge::Mean,
            Some(f) if f.starts_with("fraction:") => {
                match f["fraction:".len()..].trim().parse::<f64>() {
                    Ok(x) if x > 0.0 && x <= 1.0 => Judge::Fraction(x),
                    _ => {
                        return Err(format!(
                            "{name}: judge = \"{f}\": the fraction of seeds on which each SLO must hold is a number in (0, 1], e.g. \"fraction:0.9\""
                        ))
                    }
                }
            }
            Some(other) => {
                return Err(format!(
                    "{name}: judge = \"{other}\": give \"every-seed\" (each seed's simulation meets every SLO), \"mean\" (the mean over seeds does) or \"fraction:F\" (each SLO holds on at least a fraction F of the seeds)"
                ))
            }
        };
        let rates = rates(name, &file.traffic, &run)?;
        let slos = slos(name, &file.slo)?;
        let space = space(name, &file.space, &run, &base_table, &base_source.base_dir)?;
        let mixes = mixes(name, &file.space, &run, &base_source.base_dir, &base_table)?;
        let mut priced: Vec<String> = space.0.clone();
        priced.extend(
            mixes
                .iter()
                .flat_map(|m| m.pools.iter().map(|p| p.gpu.clone())),
        );
        let prices = prices(name, &file.prices, &priced, &run)?;
        let calibration = calibration(name, dir, &file.calibration, &priced)?;
        let mut mixes = mixes;
        for p in mixes.iter_mut().flat_map(|m| m.pools.iter_mut()) {
            p.calibration = calibration.get(&p.gpu).cloned();
        }
        let objective = match file.objective.as_deref() {
            None | Some("cost") => Objective::Cost,
            Some("gpus") => Objective::Gpus,
            Some("cost_per_mtok") => Objective::CostPerMtok,
            Some(other) => {
                return Err(format!(
                    "{name}: objective = \"{other}\": give \"cost\" (dollars per hour of the fleet, the default), \"gpus\" or \"cost_per_mtok\" (dollars per million output tokens)"
                ))
            }
        };
        let (gpus, tps, (min_instances, max_instances), axes) = space;
        Ok(PlanSpec {
            name: name.to_string(),
            text: text.to_string(),
            base,
            base_source,
            seeds,
            judge,
            rates,
            slos,
            gpus,
            tps,
            min_instances,
            max_instances,
            axes,
            mixes,
            prices,
            calibration,
            objective,
            fixed,
        })
    }

    /// Shapes in the space: (GPU × TP + mixes) × every axis's points.
    pub fn shape_count(&self) -> usize {
        (self.gpus.len() * self.tps.len() + self.mixes.len())
            * self.axes.iter().map(|a| a.points.len()).product::<usize>()
    }

    /// Simulations an exhaustive grid of the space takes.
    pub fn grid_simulations(&self) -> u64 {
        let counts = u64::from(self.max_instances - self.min_instances + 1);
        self.shape_count() as u64 * counts * (self.seeds.len() * self.rate_points().len()) as u64
    }

    /// The traffic points: each rate, or the base's own arrivals (`None`).
    pub fn rate_points(&self) -> Vec<Option<f64>> {
        if self.rates.is_empty() {
            vec![None]
        } else {
            self.rates.iter().copied().map(Some).collect()
        }
    }
}

/// The traffic points: `rate`, `rates`, or `scale` × the base's rate
/// (default: the base's own rate, or none — its own arrivals).
fn rates(name: &str, t: &TrafficFile, run: &RunFile) -> Result<Vec<f64>, String> {
    let given = [t.rate.is_some(), t.rates.is_some(), t.scale.is_some()];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err(format!(
            "{name}: [traffic]: give one of rate, rates and scale (they all set the request rate)"
        ));
    }
    let base_rate = || {
        run.workload.aggregate_rate.ok_or_else(|| {
            format!(
                "{name}: [traffic]: the base run file has no workload.aggregate_rate to scale; give traffic.rate (requests/s)"
            )
        })
    };
    let rates = match (t.rate, &t.rates, t.scale) {
        (Some(r), _, _) => vec![r],
        (_, Some(rs), _) => {
            if rs.is_empty() {
                return Err(format!(
                    "{name}: traffic.rates = []: give at least one rate in requests/s"
                ));
            }
            rs.clone()
        }
        (_, _, Some(s)) => {
            if !(s.is_finite() && s > 0.0) {
                return Err(format!(
                    "{name}: traffic.scale = {s}: give a finite factor > 0 (2.0 plans for twice the base's rate)"
                ));
            }
            vec![base_rate()? * s]
        }
        // No traffic given: the base's rate, or its own arrivals when it
        // has none (a trace replayed, explicit client rates).
        _ => run.workload.aggregate_rate.into_iter().collect(),
    };
    for r in &rates {
        if !(r.is_finite() && *r > 0.0) {
            return Err(format!(
                "{name}: [traffic]: rate {r}: give a finite rate > 0 in requests/s"
            ));
        }
    }
    Ok(rates)
}

/// `slo = ["ttft_p99_ms <= 1000", …]`: each a report metric (a
/// `results.csv` column, or a derived one) and a bound.
fn slos(name: &str, texts: &[String]) -> Result<Vec<Slo>, String> {
    if texts.is_empty() {
        return Err(format!(
            "{name}: no slo: give at least one, e.g. slo = [\"ttft_p99_ms <= 1000\", \"itl_p99_ms <= 50\"]"
        ));
    }
    let mut out: Vec<Slo> = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        let key = format!("{name}: slo[{i}] = \"{t}\"");
        let Some(slo) = Slo::parse(t) else {
            return Err(format!(
                "{key}: write METRIC <= BOUND or METRIC >= BOUND, e.g. \"ttft_p99_ms <= 1000\""
            ));
        };
        let Slo {
            metric,
            upper,
            bound,
            ..
        } = slo.map_err(|e| format!("{key}: {e}"))?;
        if !bound.is_finite() {
            return Err(format!("{key}: the bound must be a finite number"));
        }
        let known = crate::sweep::table::is_report_column(&metric)
            || crate::search::DERIVED.contains(&metric.as_str());
        if !known || metric.contains(char::is_whitespace) || metric.is_empty() {
            return Err(format!(
                "{key}: '{metric}' is not a metric of the report; use a results.csv column of a sweep (ttft_p99_ms, e2e_p95_ms, itl_p99_ms, tokens_per_sec, slo.attainment, slo_classes.critical.slo.attainment, …) or {}",
                crate::search::DERIVED.join(", ")
            ));
        }
        if out.iter().any(|s| s.metric == metric && s.upper == upper) {
            return Err(format!(
                "{key}: {metric} has two bounds of the same direction; keep one"
            ));
        }
        out.push(Slo {
            metric,
            upper,
            bound,
            text: t.clone(),
        });
    }
    Ok(out)
}

/// GPUs, TPs, the instance range and the axes, checked.
type Space = (Vec<String>, Vec<u32>, (u32, u32), Vec<Axis>);

fn space(
    name: &str,
    s: &SpaceFile,
    run: &RunFile,
    base_table: &toml::Table,
    base_dir: &Path,
) -> Result<Space, String> {
    if s.gpu.is_empty() && s.mixes.is_empty() {
        return Err(format!(
            "{name}: space.gpu = []: give at least one GPU type, e.g. gpu = [\"H100\", \"A100-SXM\", \"L40S\"] (or a [[space.mix]])"
        ));
    }
    let mut gpus: Vec<String> = Vec::new();
    for g in &s.gpu {
        let k = known_gpu(name, "space.gpu", g, run, base_dir)?;
        if gpus.contains(&k) {
            return Err(format!("{name}: space.gpu lists \"{g}\" twice"));
        }
        gpus.push(k);
    }
    let tps = match &s.tp {
        None => vec![run.model.tp.unwrap_or(1)],
        Some(t) if t.is_empty() => {
            return Err(format!(
                "{name}: space.tp = []: give at least one degree, e.g. tp = [1, 2, 4]"
            ))
        }
        Some(t) => {
            let mut out = Vec::new();
            for &v in t {
                if !(1..=64).contains(&v) {
                    return Err(format!(
                        "{name}: space.tp: {v}: a tensor-parallel degree is in [1, 64]"
                    ));
                }
                if out.contains(&(v as u32)) {
                    return Err(format!("{name}: space.tp lists {v} twice"));
                }
                out.push(v as u32);
            }
            out
        }
    };
    let range = match s.instances.as_slice() {
        [lo, hi] if *lo >= 1 && lo <= hi && *hi <= MAX_INSTANCES => (*lo as u32, *hi as u32),
        [lo, hi] if lo > hi => {
            return Err(format!(
                "{name}: space.instances = [{lo}, {hi}]: the range is upside down; give [min, max] with min ≤ max, e.g. [{hi}, {lo}]"
            ))
        }
        _ => {
            return Err(format!(
                "{name}: space.instances = {:?}: give [min, max] instance counts, 1 ≤ min ≤ max ≤ {MAX_INSTANCES}, e.g. [1, 64]",
                s.instances
            ))
        }
    };
    let mut axes: Vec<Axis> = Vec::new();
    for (i, a) in s.axes.iter().enumerate() {
        let what = format!("{name}: space.axis[{i}]");
        let axis = check_axis(a, base_table, &what)?;
        if ["gpu", "tp", "instances", "seed", "rate"].contains(&axis.name.as_str())
            || axes.iter().any(|x| x.name == axis.name)
        {
            return Err(format!(
                "{what}: the name '{}' is taken (gpu, tp, instances, seed, rate and the other axes); give the axis another `name`",
                axis.name
            ));
        }
        for p in &axis.points {
            for (k, _) in &p.sets {
                if [
                    "model.hardware",
                    "model.tp",
                    "instance.count",
                    "seed",
                    "workload.aggregate_rate",
                ]
                .contains(&k.as_str())
                {
                    return Err(format!(
                        "{what}: sets {k}, which the plan itself sets (space.gpu, space.tp, space.instances, space.mix, seeds, [traffic])"
                    ));
                }
            }
        }
        axes.push(axis);
    }
    Ok((gpus, tps, range, axes))
}

/// The price of each GPU of the space: the plan's `[prices]`, else the base
/// run file's `[[node_pools]]` of that GPU type (a node's `cost_per_hour`
/// over its `gpus_per_node`), else the default table; a GPU with none is
/// an error.
fn prices(
    name: &str,
    given: &BTreeMap<String, f64>,
    gpus: &[String],
    run: &RunFile,
) -> Result<BTreeMap<String, f64>, String> {
    for (g, p) in given {
        if !(p.is_finite() && *p >= 0.0) {
            return Err(format!(
                "{name}: prices.\"{g}\" = {p}: give dollars per GPU-hour, a finite number ≥ 0"
            ));
        }
    }
    let mut out = BTreeMap::new();
    for g in gpus {
        let price = given
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(g))
            .map(|(_, p)| *p)
            .or_else(|| {
                run.node_pools
                    .iter()
                    .find(|n| n.gpu_type.eq_ignore_ascii_case(g) && n.gpus_per_node > 0)
                    .map(|n| n.cost_per_hour / f64::from(n.gpus_per_node))
            })
            .or_else(|| {
                DEFAULT_PRICES
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(g))
                    .map(|(_, p)| *p)
            });
        let Some(price) = price else {
            return Err(format!(
                "{name}: no price for GPU type \"{g}\": add it to [prices] in dollars per GPU-hour, e.g. [prices] \"{g}\" = 2.0"
            ));
        };
        out.insert(g.clone(), price);
    }
    Ok(out)
}

/// The hardware table's name of GPU type `g` (case aside).
fn known_gpu(
    name: &str,
    key: &str,
    g: &str,
    run: &RunFile,
    base_dir: &Path,
) -> Result<String, String> {
    let known = match &run.model.hardware_config {
        Some(p) => crate::instance::latency::hardware_file_names(&config::resolve(base_dir, p))
            .map_err(|e| e.to_string()),
        None => Ok(crate::instance::latency::bundled_gpu_names()),
    }
    .map_err(|e| format!("{name}: base run file's model.hardware_config: {e}"))?;
    known
        .iter()
        .find(|k| k.eq_ignore_ascii_case(g))
        .cloned()
        .ok_or_else(|| {
            format!(
                "{name}: {key}: unknown GPU type \"{g}\"; the hardware table has {} (add yours with model.hardware_config in the base run file)",
                known.join(", ")
            )
        })
}

/// `[[space.mix]]`: heterogeneous fleets, each a named list of pools.
fn mixes(
    name: &str,
    s: &SpaceFile,
    run: &RunFile,
    base_dir: &Path,
    base_table: &toml::Table,
) -> Result<Vec<Mix>, String> {
    let mut out: Vec<Mix> = Vec::new();
    for (i, m) in s.mixes.iter().enumerate() {
        let key = format!("space.mix[{i}] ({})", m.name);
        if m.name.trim().is_empty() || out.iter().any(|x| x.name == m.name) {
            return Err(format!("{name}: {key}: give each mix a name of its own"));
        }
        if m.pools.len() < 2 {
            return Err(format!(
                "{name}: {key}: a mix has at least two pools (one GPU type alone is space.gpu)"
            ));
        }
        let mut pools = Vec::new();
        for (j, p) in m.pools.iter().enumerate() {
            let gpu = known_gpu(
                name,
                &format!("{key}.pools[{j}].gpu"),
                &p.gpu,
                run,
                base_dir,
            )?;
            let tp = p.tp.unwrap_or(1);
            let share = p.share.unwrap_or(1);
            if !(1..=64).contains(&tp) {
                return Err(format!(
                    "{name}: {key}.pools[{j}].tp = {tp}: a tensor-parallel degree is in [1, 64]"
                ));
            }
            if !(1..=64).contains(&share) {
                return Err(format!(
                    "{name}: {key}.pools[{j}].share = {share}: instances of this pool per unit of the mix, in [1, 64]"
                ));
            }
            let role = p.role.clone().unwrap_or_else(|| "both".into());
            if !["both", "prefill", "decode"].contains(&role.as_str()) {
                return Err(format!(
                    "{name}: {key}.pools[{j}].role = \"{role}\": give \"both\" (the default), \"prefill\" or \"decode\""
                ));
            }
            pools.push(MixPool {
                gpu,
                tp: tp as u32,
                share: share as u32,
                role,
                calibration: None,
            });
        }
        let mut sets = Vec::new();
        crate::sweep::spec::flatten_sets("", &m.set, &mut sets);
        for (k, v) in &sets {
            check_key(base_table, k, v, &format!("{name}: {key}.set"))?;
        }
        out.push(Mix {
            name: m.name.clone(),
            pools,
            sets,
        });
    }
    Ok(out)
}

/// `[calibration]`: a profile per GPU type of the space, made absolute.
fn calibration(
    name: &str,
    dir: &Path,
    given: &BTreeMap<String, PathBuf>,
    gpus: &[String],
) -> Result<BTreeMap<String, PathBuf>, String> {
    let mut out = BTreeMap::new();
    for (g, p) in given {
        let Some(gpu) = gpus.iter().find(|x| x.eq_ignore_ascii_case(g)) else {
            return Err(format!(
                "{name}: calibration.\"{g}\": no such GPU type in the space ({}); remove it or add the GPU to space.gpu",
                gpus.join(", ")
            ));
        };
        let abs = std::path::absolute(dir.join(p)).unwrap_or_else(|_| dir.join(p));
        if !abs.is_file() {
            return Err(format!(
                "{name}: calibration.\"{g}\" = \"{}\": no such file ({}); give a profile written by `blis calibrate fit`",
                p.display(),
                abs.display()
            ));
        }
        out.insert(gpu.clone(), abs);
    }
    Ok(out)
}

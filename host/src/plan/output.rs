//! A plan's outputs in its directory, each written atomically:
//!
//! ```text
//! DIR/plan.json         the answer, every shape's result (why each rejected one failed), the frontier
//! DIR/candidates.csv    every simulation: shape, count, rate, seed, each SLO metric, feasible, cost
//! DIR/best.toml         the winning configuration as a run file for `blis run`
//! DIR/best-report.json  its report (first seed, first rate)
//! DIR/sweep.json, runs/, results.csv, results.jsonl   the simulations as a sweep (`blis report DIR`)
//! ```

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{describe_slo, money, short, Outcome, PlanSpec, Verdict};
use crate::search::{write_file, Engine};
use crate::session::Error;
use crate::sweep::spec::{fnv64, inputs_digest, PlannedRun, Shard};

/// What a plan wrote, and its summary for stdout.
pub struct Written {
    /// The JSON summary printed on stdout.
    pub summary: String,
    pub plan_json: PathBuf,
    pub candidates_csv: PathBuf,
    /// The winner's run file (none when infeasible).
    pub best_toml: Option<PathBuf>,
}

/// A hash of everything that decides the plan's simulations: the plan
/// file, the base run file and the files they read.
pub(super) fn fingerprint(spec: &PlanSpec) -> String {
    let base_table: toml::Table = spec.base_source.text.parse().unwrap_or_default();
    let variants: Vec<PlannedRun> = spec
        .axes
        .iter()
        .flat_map(|a| a.points.iter())
        .map(|p| PlannedRun {
            index: 0,
            id: String::new(),
            axes: Vec::new(),
            seed: None,
            sets: p.sets.clone(),
        })
        .collect();
    let canon = format!(
        "plan:\n{}\nbase:\n{}\n{}",
        spec.text,
        spec.base_source.text,
        inputs_digest(&base_table, &variants, &spec.base_source.base_dir)
    );
    format!("plan-{:016x}", fnv64(canon.as_bytes()))
}

/// The files a plan writes in its directory besides the sweep's.
pub(super) const OUTPUTS: [&str; 4] = [
    "plan.json",
    "candidates.csv",
    "best.toml",
    "best-report.json",
];

/// The plan's outputs checked against its inputs (the plan file, the base
/// run file, the calibration profiles and the files the base reads) and
/// each other, as every command's outputs are ([`crate::output::check_paths`]).
pub(super) fn check_outputs(spec: &PlanSpec, out: &Path) -> Result<(), Error> {
    let mut inputs = vec![("the plan file".to_string(), PathBuf::from(&spec.name))];
    if let Some(b) = &spec.base {
        inputs.push(("the base run file".to_string(), b.clone()));
    }
    inputs.extend(crate::search::files_read(&spec.base_source));
    for (gpu, p) in &spec.calibration {
        inputs.push((format!("calibration.\"{gpu}\""), p.clone()));
    }
    crate::search::check_outputs(out, &OUTPUTS, &inputs)
}

/// The label columns of the plan's simulations in the sweep table.
pub(super) fn axis_names(spec: &PlanSpec) -> Vec<String> {
    let mut names = vec!["gpu".to_string(), "tp".to_string()];
    names.extend(spec.axes.iter().map(|a| a.name.clone()));
    names.push("instances".to_string());
    if !spec.rates.is_empty() {
        names.push("rate".to_string());
    }
    names
}

/// Write every output; returns what was written.
pub(super) fn write(
    spec: &PlanSpec,
    engine: &Engine,
    o: &Outcome,
    calibration: &[GpuCalibration],
    shard: Option<Shard>,
) -> Result<Written, Error> {
    let root = engine.root();
    engine.write_tables()?;
    let candidates_csv = root.join("candidates.csv");
    write_file(&candidates_csv, &candidates(spec, o)?)?;
    let best_toml = match o.best {
        Some((s, n)) => {
            let p = root.join("best.toml");
            write_file(&p, best_run_file(spec, o, s, n)?.as_bytes())?;
            if let Some(report) = winner_report(engine, o, s, n) {
                write_file(&root.join("best-report.json"), report.as_bytes())?;
            }
            Some(p)
        }
        None => None,
    };
    let mut plan = plan_json(spec, o, calibration, best_toml.as_deref());
    plan["fingerprint"] = json!(fingerprint(spec));
    if let Some(sh) = shard {
        plan["shard"] = json!(format!("{}/{}", sh.index, sh.count));
    }
    let plan_json = root.join("plan.json");
    let text = serde_json::to_string_pretty(&plan).map_err(|e| Error::run(e.to_string()))?;
    write_file(&plan_json, format!("{text}\n").as_bytes())?;
    let summary = serde_json::to_string_pretty(&json!({
        "plan": spec.name,
        "answer": plan["answer"],
        "run_file": best_toml.as_ref().map(|p| p.display().to_string()),
        "simulations": plan["simulations"],
        "out": root.display().to_string(),
    }))
    .map_err(|e| Error::run(e.to_string()))?;
    Ok(Written {
        summary,
        plan_json,
        candidates_csv,
        best_toml,
    })
}

/// The shape's columns: gpu, tp, each axis.
fn shape_object(o: &Outcome, s: usize) -> serde_json::Map<String, Value> {
    let shape = &o.shapes[s];
    let mut m = serde_json::Map::new();
    m.insert("gpu".into(), json!(shape.gpu));
    m.insert("tp".into(), json!(shape.tp));
    for (k, v) in &shape.labels {
        m.insert(k.clone(), serde_json::to_value(v).unwrap_or(Value::Null));
    }
    m
}

/// A candidate as JSON: its shape, count, cost, GPUs and SLO values.
fn candidate(spec: &PlanSpec, o: &Outcome, s: usize, n: u32, v: &Verdict) -> Value {
    let mut m = shape_object(o, s);
    let shape = &o.shapes[s];
    m.insert("shape".into(), json!(s));
    m.insert("instances".into(), json!(n));
    m.insert("gpus".into(), json!(n * shape.unit_gpus));
    if let Some(pools) = &shape.pools {
        let p: Vec<Value> = pools
            .iter()
            .map(|p| json!({ "gpu": p.gpu, "tp": p.tp, "role": p.role, "instances": n * p.share }))
            .collect();
        m.insert("pools".into(), Value::Array(p));
    }
    m.insert(
        "cost_per_hour".into(),
        json!(f64::from(n) * shape.unit_cost),
    );
    let mut slos = serde_json::Map::new();
    for (slo, value) in spec.slos.iter().zip(&v.values) {
        slos.insert(slo.metric.clone(), json!(value));
    }
    m.insert("slo_values".into(), Value::Object(slos));
    m.insert("feasible".into(), json!(v.feasible));
    if let Some(i) = v.binding {
        m.insert(
            "binding".into(),
            json!(describe_slo(&spec.slos[i], v.values[i])),
        );
    }
    Value::Object(m)
}

/// `plan.json`.
fn plan_json(
    spec: &PlanSpec,
    o: &Outcome,
    calibration: &[GpuCalibration],
    best_toml: Option<&Path>,
) -> Value {
    let answer = o.best.and_then(|(s, n)| {
        let (_, v) = o.results.iter().find(|r| r.shape == s)?.answer.as_ref()?;
        Some(candidate(spec, o, s, n, v))
    });
    let shapes: Vec<Value> = o
        .results
        .iter()
        .map(|r| {
            let mut m = shape_object(o, r.shape);
            m.insert("index".into(), json!(r.shape));
            m.insert("status".into(), json!(r.status));
            if let Some((n, v)) = &r.answer {
                m.insert("answer".into(), candidate(spec, o, r.shape, *n, v));
            }
            if !r.why.is_empty() {
                m.insert("why".into(), json!(r.why));
            }
            m.insert(
                "simulations".into(),
                json!(o.simulations.iter().filter(|x| x.shape == r.shape).count()),
            );
            Value::Object(m)
        })
        .collect();
    json!({
        "plan": spec.name,
        "objective": match spec.objective {
            super::Objective::Cost => "cost",
            super::Objective::Gpus => "gpus",
            super::Objective::CostPerMtok => "cost_per_mtok",
        },
        "slo": spec.slos.iter().map(|s| s.text.clone()).collect::<Vec<_>>(),
        "judge": match spec.judge {
            super::Judge::EverySeed => "every-seed".to_string(),
            super::Judge::Mean => "mean".to_string(),
            super::Judge::Fraction(f) => format!("fraction:{f}"),
        },
        "seeds": spec.seeds,
        "rates": spec.rates,
        "prices": spec.prices,
        "answer": answer,
        "run_file": best_toml.map(|p| p.display().to_string()),
        "frontier": frontier(spec, o),
        "calibration": calibration.iter().map(GpuCalibration::to_json).collect::<Vec<_>>(),
        "shapes": shapes,
        "simulations": {
            "distinct": o.counts.asked,
            "ran": o.counts.ran,
            "reused": o.counts.reused,
            "grid": spec.grid_simulations(),
        },
    })
}

/// The calibration a plan's GPU type runs with and the error that applies
/// to its predictions.
pub struct GpuCalibration {
    pub gpu: String,
    /// `[calibration]`'s profile for it, if any.
    pub profile: Option<PathBuf>,
    /// The deployments the profile was fitted on.
    pub fitted_on: Vec<String>,
    /// Which held-out error applies: `experiment` (the GPU and model were
    /// measured), `gpu` (the profile is extrapolated to this GPU), `model`
    /// (to this model); none without a profile.
    pub applies: Option<&'static str>,
    /// That error as the profile recorded it (weighted MAPE, % and per
    /// metric), when it did.
    pub mape: Option<f64>,
    pub per_metric: std::collections::BTreeMap<String, f64>,
    /// One line for stderr.
    pub line: String,
}

impl GpuCalibration {
    fn to_json(&self) -> Value {
        json!({
            "gpu": self.gpu,
            "profile": self.profile.as_ref().map(|p| p.display().to_string()),
            "fitted_on": self.fitted_on,
            "error_applies": self.applies.map(|a| format!("leave-one-{a}-out")),
            "heldout_mape": self.mape,
            "heldout_per_metric": self.per_metric,
        })
    }
}

/// Per GPU type of the space: its profile and the measured held-out error
/// that applies to it — leave-one-experiment-out where the profile was
/// fitted on this GPU and model, leave-one-GPU-out (or -model-out) where it
/// is extrapolated, none where the GPU runs uncalibrated.
pub fn calibration_errors(spec: &PlanSpec) -> Vec<GpuCalibration> {
    let base: toml::Table = spec.base_source.text.parse().unwrap_or_default();
    let model = crate::config::get_str(&base, "model.name").unwrap_or_else(|| "qwen3-14b".into());
    spec.gpus
        .iter()
        .map(|gpu| {
            let Some(path) = spec.calibration.get(gpu) else {
                return GpuCalibration {
                    gpu: gpu.clone(),
                    profile: None,
                    fitted_on: Vec::new(),
                    applies: None,
                    mape: None,
                    per_metric: Default::default(),
                    line: format!(
                        "plan: {gpu}: uncalibrated (the latency model's own coefficients; their error on your cluster is unmeasured: see [calibration])"
                    ),
                };
            };
            let loaded = crate::fit::profile::load(path);
            let Ok(loaded) = loaded else {
                return GpuCalibration {
                    gpu: gpu.clone(),
                    profile: Some(path.clone()),
                    fitted_on: Vec::new(),
                    applies: None,
                    mape: None,
                    per_metric: Default::default(),
                    line: format!("plan: {gpu}: {}", loaded.err().unwrap_or_default()),
                };
            };
            let p = &loaded.profile;
            let unseen = p.unseen(&crate::fit::profile::Deployment {
                model: model.clone(),
                hardware: gpu.clone(),
                tp: 0,
            });
            let by = unseen.heldout_by();
            let held = p.heldout_for(by);
            GpuCalibration {
                gpu: gpu.clone(),
                profile: Some(path.clone()),
                fitted_on: p.deployments.iter().map(ToString::to_string).collect(),
                applies: Some(by),
                mape: held.as_ref().map(|h| h.mape),
                per_metric: held.map(|h| h.per_metric).unwrap_or_default(),
                line: format!(
                    "plan: {gpu}: calibrated by {}{}",
                    path.display(),
                    p.heldout_clause(by)
                ),
            }
        })
        .collect()
}

/// The cost/latency Pareto frontier across shapes: each shape's answer,
/// kept when no other answer is both cheaper (or as cheap) and better on
/// the first SLO.
pub(super) fn frontier(spec: &PlanSpec, o: &Outcome) -> Vec<Value> {
    let first = |v: &Verdict| v.values.first().copied().flatten();
    let better = |a: f64, b: f64| {
        if spec.slos[0].upper {
            a <= b
        } else {
            a >= b
        }
    };
    let points: Vec<(usize, u32, f64, &Verdict)> = o
        .results
        .iter()
        .filter_map(|r| {
            let (n, v) = r.answer.as_ref()?;
            Some((r.shape, *n, f64::from(*n) * o.shapes[r.shape].unit_cost, v))
        })
        .collect();
    let mut kept: Vec<&(usize, u32, f64, &Verdict)> = points
        .iter()
        .filter(|(s, _, cost, v)| {
            !points.iter().any(|(s2, _, cost2, v2)| {
                s2 != s
                    && match (first(v), first(v2)) {
                        (Some(a), Some(b)) => {
                            cost2 <= cost && better(b, a) && (cost2 < cost || b != a)
                        }
                        _ => false,
                    }
            })
        })
        .collect();
    kept.sort_by(|a, b| a.2.total_cmp(&b.2).then(a.0.cmp(&b.0)));
    kept.into_iter()
        .map(|(s, n, _, v)| candidate(spec, o, *s, *n, v))
        .collect()
}

/// `candidates.csv`: one row per simulation.
fn candidates(spec: &PlanSpec, o: &Outcome) -> Result<Vec<u8>, Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = vec!["gpu".into(), "tp".into()];
    header.extend(spec.axes.iter().map(|a| a.name.clone()));
    header.extend(["instances", "rate", "seed", "gpus", "cost_per_hour"].map(String::from));
    header.extend(spec.slos.iter().map(|s| s.metric.clone()));
    header.extend(["feasible", "run_id", "error"].map(String::from));
    w.write_record(&header)
        .map_err(|e| Error::run(e.to_string()))?;
    for x in &o.simulations {
        let shape = &o.shapes[x.shape];
        let mut row: Vec<String> = vec![shape.gpu.clone(), shape.tp.to_string()];
        for (_, v) in &shape.labels {
            row.push(v.as_str().map_or_else(|| v.to_string(), str::to_string));
        }
        row.push(x.instances.to_string());
        row.push(x.rate.map_or(String::new(), short));
        row.push(x.seed.to_string());
        row.push((x.instances * shape.unit_gpus).to_string());
        row.push(format!("{:.4}", f64::from(x.instances) * shape.unit_cost));
        let v = super::judge(
            &spec.slos,
            spec.judge,
            std::slice::from_ref(&x.eval),
            &spec.name,
        )?;
        for value in &v.values {
            row.push(value.map_or(String::new(), |v| v.to_string()));
        }
        row.push(v.feasible.to_string());
        row.push(x.eval.id.clone());
        row.push(x.eval.error.clone().unwrap_or_default());
        w.write_record(&row)
            .map_err(|e| Error::run(e.to_string()))?;
    }
    w.into_inner().map_err(|e| Error::run(e.to_string()))
}

/// The winner's run file: the base with the plan's `[set]`, the shape's
/// overrides, its count and the (first) rate; paths made absolute.
fn best_run_file(spec: &PlanSpec, o: &Outcome, s: usize, n: u32) -> Result<String, Error> {
    let mut sets = spec.fixed.clone();
    sets.extend(o.shapes[s].sets.iter().cloned());
    sets.extend(super::count_sets(&o.shapes[s], n));
    if let Some(&rate) = spec.rates.first() {
        sets.push(("workload.aggregate_rate".into(), toml::Value::Float(rate)));
    }
    let table = crate::search::standalone_table(&spec.base_source, &sets)?;
    let shape = &o.shapes[s];
    let body = toml::to_string(&table).map_err(|e| Error::run(e.to_string()))?;
    let rates = if spec.rates.len() > 1 {
        format!(
            " (rate {} req/s set; the plan also checked {})",
            short(spec.rates[0]),
            spec.rates[1..]
                .iter()
                .map(|r| short(*r))
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        String::new()
    };
    Ok(format!(
        "# Written by `blis plan {}`: the cheapest configuration meeting {}.\n# {}, {}, {}{rates}.\n{body}",
        spec.name,
        spec.slos.iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join(", "),
        shape.describe(),
        shape.count(n),
        money(f64::from(n) * shape.unit_cost),
    ))
}

/// The winner's report at the first seed and rate.
fn winner_report(engine: &Engine, o: &Outcome, s: usize, n: u32) -> Option<String> {
    let x = o
        .simulations
        .iter()
        .find(|x| x.shape == s && x.instances == n && x.eval.error.is_none())?;
    engine.report(&x.eval)
}

/// The error of an infeasible plan: the closest candidates and what binds.
pub(super) fn infeasible_message(spec: &PlanSpec, o: &Outcome) -> String {
    let mut missed: Vec<(f64, String)> = o
        .results
        .iter()
        .filter_map(|r| {
            let (n, v) = r.missed.as_ref()?;
            let excess = v
                .binding
                .and_then(|i| v.values[i].map(|x| spec.slos[i].excess(x)))
                .unwrap_or(f64::INFINITY);
            let why = match (&v.failure, v.binding) {
                (Some(f), _) => format!("a simulation failed: {f}"),
                (None, Some(i)) => describe_slo(&spec.slos[i], v.values[i]),
                (None, None) => "every SLO met".into(),
            };
            Some((
                excess,
                format!(
                    "{} at {}: {why}",
                    o.shapes[r.shape].describe(),
                    o.shapes[r.shape].count(*n)
                ),
            ))
        })
        .collect();
    missed.sort_by(|a, b| a.0.total_cmp(&b.0));
    let closest: Vec<String> = missed.into_iter().take(5).map(|(_, s)| s).collect();
    format!(
        "{}: no configuration in the space meets {} (up to {} instances, or units of a mix). Closest:\n  {}\nWiden the space (more instances, other GPUs or TP), relax an SLO, or lower the traffic; every simulation is in candidates.csv.",
        spec.name,
        spec.slos.iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join(", "),
        spec.max_instances,
        if closest.is_empty() {
            "(none simulated)".to_string()
        } else {
            closest.join("\n  ")
        }
    )
}

//! A tune's outputs in its directory, each written atomically:
//!
//! ```text
//! DIR/tune.json          the answer, the start and the answer on the training and held-out
//!                        traffic with their spreads, the verdict, the sensitivity
//! DIR/evaluations.csv    every candidate: phase, generation, parameters, objective, constraints
//! DIR/tuned.toml         the recommended run file (the start's values when there is no gain)
//! DIR/tuned-epp.yaml     the same as an llm-d EndpointPickerConfig (when the base was an llm-d file)
//! DIR/sweep.json, runs/, results.csv, results.jsonl   the simulations as a sweep
//! ```

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{mean_sd, Goal, Outcome, Phase, Score, TuneSpec};
use crate::search::{write_file, Engine};
use crate::session::Error;
use crate::sweep::spec::{fnv64, inputs_digest, toml_text};

/// What a tune wrote, and its summary for stdout.
pub struct Written {
    pub summary: String,
    pub tune_json: PathBuf,
    pub evaluations_csv: PathBuf,
    pub tuned_toml: PathBuf,
    pub tuned_epp: Option<PathBuf>,
}

/// The files a tune writes besides the sweep's.
pub(super) const OUTPUTS: [&str; 4] = [
    "tune.json",
    "evaluations.csv",
    "tuned.toml",
    "tuned-epp.yaml",
];

/// A hash of everything that decides the tune's simulations.
pub(super) fn fingerprint(spec: &TuneSpec) -> String {
    let base_table: toml::Table = spec.base_source.text.parse().unwrap_or_default();
    // The workload files' traffic and the files it reads (traces), by content.
    let workloads: Vec<String> = spec
        .train
        .workloads
        .iter()
        .chain(&spec.held_out.workloads)
        .map(|w| {
            let mut t = toml::Table::new();
            t.insert("workload".into(), w.table.clone());
            format!(
                "{}: {}\n{}",
                w.name,
                w.table,
                inputs_digest(&t, &[], Path::new("/"))
            )
        })
        .collect();
    let canon = format!(
        "tune:\n{}\nbase:\n{}\nepp:\n{}\nsets:\n{:?}\n{}\nworkloads:\n{}",
        spec.text,
        spec.base_source.text,
        spec.epp.as_ref().map_or("", |e| e.1.as_str()),
        spec.fixed,
        inputs_digest(&base_table, &[], &spec.base_source.base_dir),
        workloads.join("\n")
    );
    format!("tune-{:016x}", fnv64(canon.as_bytes()))
}

/// The tune's outputs checked against its inputs (the tune file, the base,
/// the llm-d file, the workload files and the files the base reads) and
/// each other.
pub(super) fn check_outputs(spec: &TuneSpec, out: &Path) -> Result<(), Error> {
    let mut inputs = vec![("the tune file".to_string(), PathBuf::from(&spec.name))];
    if let Some(b) = &spec.base {
        inputs.push(("the base run file".to_string(), b.clone()));
    }
    if let Some((p, _)) = &spec.epp {
        inputs.push(("epp_config".to_string(), p.clone()));
    }
    inputs.extend(crate::search::files_read(&spec.base_source));
    for w in spec.train.workloads.iter().chain(&spec.held_out.workloads) {
        inputs.push((format!("the workload {}", w.name), w.path.clone()));
    }
    crate::search::check_outputs(out, &OUTPUTS, &inputs)
}

/// The label columns of the simulations in the sweep table.
pub(super) fn axis_names(spec: &TuneSpec) -> Vec<String> {
    let mut names: Vec<String> = spec.params.iter().map(|p| p.name.clone()).collect();
    let any_workloads = !spec.train.workloads.is_empty() || !spec.held_out.workloads.is_empty();
    if any_workloads {
        names.push("workload".into());
    }
    if !spec.train.rates.is_empty() || !spec.held_out.rates.is_empty() {
        names.push("rate".into());
    }
    names.push("seed".into());
    names
}

/// Write every output.
pub(super) fn write(spec: &TuneSpec, engine: &Engine, o: &Outcome) -> Result<Written, Error> {
    let root = engine.root();
    engine.write_tables()?;
    let evaluations_csv = root.join("evaluations.csv");
    write_file(&evaluations_csv, evaluations(spec, o)?.as_bytes())?;
    let tuned_toml = root.join("tuned.toml");
    let (text, run_table) = tuned_run_file(spec, o)?;
    write_file(&tuned_toml, text.as_bytes())?;
    let mut epp_note = Value::Null;
    let tuned_epp = match &spec.epp {
        None => None,
        Some(_) => match epp_file(spec, &run_table) {
            Ok(yaml) => {
                let p = root.join("tuned-epp.yaml");
                write_file(&p, yaml.as_bytes())?;
                Some(p)
            }
            Err(e) => {
                epp_note = json!(e);
                None
            }
        },
    };
    let mut doc = tune_json(spec, o);
    doc["files"] = json!({
        "tuned_run_file": tuned_toml.display().to_string(),
        "tuned_epp_config": tuned_epp.as_ref().map(|p| p.display().to_string()),
        "epp_config_not_written": epp_note,
    });
    let tune_json = root.join("tune.json");
    let text = serde_json::to_string_pretty(&doc).map_err(|e| Error::run(e.to_string()))?;
    write_file(&tune_json, format!("{text}\n").as_bytes())?;
    let summary = serde_json::to_string_pretty(&json!({
        "tune": spec.name,
        "objective": doc["objective"],
        "verdict": doc["verdict"],
        "recommended": doc["recommended"],
        "train": doc["train"]["summary"],
        "held_out": doc["held_out"]["summary"],
        "run_file": tuned_toml.display().to_string(),
        "epp_config": tuned_epp.as_ref().map(|p| p.display().to_string()),
        "simulations": doc["simulations"],
        "out": root.display().to_string(),
    }))
    .map_err(|e| Error::run(e.to_string()))?;
    Ok(Written {
        summary,
        tune_json,
        evaluations_csv,
        tuned_toml,
        tuned_epp,
    })
}

/// A score's summary: mean, spread over the set, each value.
fn score_json(s: &Score) -> Value {
    let vals: Vec<f64> = s.values.iter().flatten().copied().collect();
    let (_, sd) = mean_sd(&vals);
    json!({
        "mean": s.mean,
        "sd": sd,
        "values": s.values,
        "feasible": s.feasible,
        "constraints": s.constraints,
        "error": s.error,
    })
}

fn values_json(spec: &TuneSpec, values: &[toml::Value]) -> Value {
    let mut m = serde_json::Map::new();
    for (p, v) in spec.params.iter().zip(values) {
        m.insert(
            p.name.clone(),
            serde_json::to_value(v).unwrap_or(Value::Null),
        );
    }
    Value::Object(m)
}

fn tune_json(spec: &TuneSpec, o: &Outcome) -> Value {
    let best = &o.candidates[o.best];
    let v = &o.verdict;
    let params: Vec<Value> = spec
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            json!({
                "key": p.key,
                "name": p.name,
                "min": p.min,
                "max": p.max,
                "scale": match &p.scale {
                    super::Scale::Linear => json!("linear"),
                    super::Scale::Log => json!("log"),
                    super::Scale::Integer => json!("integer"),
                    super::Scale::Choice(vs) => json!({"choice": vs}),
                },
                "start": serde_json::to_value(&p.start).unwrap_or(Value::Null),
                "tuned": serde_json::to_value(&best.values[i]).unwrap_or(Value::Null),
                "sensitivity": {
                    "change_pct": o.sensitivity[i].change_pct,
                    "probes": o.sensitivity[i].probes.iter().map(|(v, m)| json!({"value": serde_json::to_value(v).unwrap_or(Value::Null), "objective": m})).collect::<Vec<_>>(),
                },
            })
        })
        .collect();
    let summary = |a: &Score, b: &Score| {
        let (_, sa) = mean_sd(&a.values.iter().flatten().copied().collect::<Vec<_>>());
        let (_, sb) = mean_sd(&b.values.iter().flatten().copied().collect::<Vec<_>>());
        json!({"start": a.mean, "start_sd": sa, "tuned": b.mean, "tuned_sd": sb})
    };
    json!({
        "tune": spec.name,
        "objective": {
            "metric": spec.metric,
            "goal": match spec.goal { Goal::Minimize => "minimize", Goal::Maximize => "maximize" },
            "constraints": spec.constraints.iter().map(|c| c.text.clone()).collect::<Vec<_>>(),
        },
        "params": params,
        "start": values_json(spec, &o.candidates[0].values),
        "tuned": values_json(spec, &best.values),
        "recommended": values_json(spec, o.recommended()),
        "verdict": {
            "gain": v.gain,
            "improvement": v.improvement,
            "standard_error": v.standard_error,
            "reason": v.reason,
        },
        "train": {
            "seeds": spec.train.seeds, "rates": spec.train.rates,
            "workloads": spec.train.workloads.iter().map(|w| w.name.clone()).collect::<Vec<_>>(),
            "summary": summary(&o.train_start, &o.train_best),
            "start": score_json(&o.train_start),
            "tuned": score_json(&o.train_best),
        },
        "held_out": {
            "seeds": spec.held_out.seeds, "rates": spec.held_out.rates,
            "workloads": spec.held_out.workloads.iter().map(|w| w.name.clone()).collect::<Vec<_>>(),
            "same_as_train": spec.held_out_is_train,
            "summary": summary(&v.start, &v.tuned),
            "start": score_json(&v.start),
            "tuned": score_json(&v.tuned),
        },
        "search": {
            "optimiser": "particle swarm (argmin)",
            "seed": spec.seed,
            "population": spec.population,
            "budget": spec.budget,
            "candidates": o.candidates.iter().filter(|c| c.phase != Phase::Sensitivity).count(),
            "failed": o.candidates.iter().filter(|c| c.score.error.is_some()).count(),
        },
        "simulations": {
            "search": o.phase_simulations[0],
            "sensitivity": o.phase_simulations[1],
            "held_out": o.phase_simulations[2],
            "distinct": o.counts.asked,
            "ran": o.counts.ran,
            "reused": o.counts.reused,
        },
    })
}

/// `evaluations.csv`: one row per candidate, with the best so far.
fn evaluations(spec: &TuneSpec, o: &Outcome) -> Result<String, Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = vec!["evaluation".into(), "phase".into(), "generation".into()];
    header.extend(spec.params.iter().map(|p| p.name.clone()));
    header.push(spec.metric.clone());
    header.extend(spec.constraints.iter().map(|c| c.metric.clone()));
    header.extend(["feasible", "best_so_far", "error"].map(String::from));
    w.write_record(&header)
        .map_err(|e| Error::run(e.to_string()))?;
    let mut best: Option<f64> = None;
    let mut best_cost = f64::INFINITY;
    let num = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v}"));
    for (i, c) in o.candidates.iter().enumerate() {
        if c.phase != Phase::Sensitivity && c.score.cost < best_cost {
            best_cost = c.score.cost;
            best = c.score.mean;
        }
        let mut row = vec![
            i.to_string(),
            c.phase.name().to_string(),
            c.generation.to_string(),
        ];
        row.extend(c.values.iter().map(|v| match v {
            toml::Value::String(s) => s.clone(),
            other => toml_text(other),
        }));
        row.push(num(c.score.mean));
        row.extend(c.score.constraints.iter().map(|x| num(*x)));
        row.push(c.score.feasible.to_string());
        row.push(num(best));
        row.push(c.score.error.clone().unwrap_or_default());
        w.write_record(&row)
            .map_err(|e| Error::run(e.to_string()))?;
    }
    let bytes = w.into_inner().map_err(|e| Error::run(e.to_string()))?;
    String::from_utf8(bytes).map_err(|e| Error::run(e.to_string()))
}

/// The recommended run file: the base (paths absolute) with the fixed
/// overrides (the llm-d file's sections) and the recommended values.
fn tuned_run_file(spec: &TuneSpec, o: &Outcome) -> Result<(String, toml::Table), Error> {
    let mut sets = spec.fixed.clone();
    for (p, v) in spec.params.iter().zip(o.recommended()) {
        sets.push((p.key.clone(), v.clone()));
    }
    let table = crate::search::standalone_table(&spec.base_source, &sets)?;
    let body = toml::to_string(&table).map_err(|e| Error::run(e.to_string()))?;
    let what = if o.verdict.gain {
        format!(
            "the tuned parameters ({})",
            super::describe(&spec.params, o.recommended())
        )
    } else {
        format!(
            "the starting parameters: no gain on the held-out traffic ({})",
            o.verdict.reason
        )
    };
    let header = format!(
        "# Written by `blis tune {}`: {what}.\n# Objective: {} {} (see tune.json).\n",
        spec.name,
        match spec.goal {
            Goal::Minimize => "minimize",
            Goal::Maximize => "maximize",
        },
        spec.metric
    );
    Ok((format!("{header}{body}"), table))
}

/// The recommended run file's routing and admission as an llm-d file.
fn epp_file(spec: &TuneSpec, table: &toml::Table) -> Result<String, String> {
    let text = toml::to_string(table).map_err(|e| e.to_string())?;
    let run: crate::config::RunFile = toml::from_str(&text).map_err(|e| e.to_string())?;
    let w = crate::config::epp_config::to_epp_config(&run)?;
    let mut notes = String::new();
    for n in &w.notes {
        notes.push_str(&format!("# note: {n}\n"));
    }
    Ok(format!(
        "# Written by `blis tune {}` from {} with the recommended parameters (see tune.json).\n{notes}{}",
        spec.name,
        spec.epp.as_ref().map_or(String::new(), |e| e.0.display().to_string()),
        w.yaml
    ))
}

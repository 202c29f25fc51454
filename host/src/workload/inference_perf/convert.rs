//! `blis convert inference-perf FILE.yaml`: an inference-perf workload to a
//! `[workload]` table with `[workload.inference_perf]`.
//!
//! Two inputs are accepted:
//!
//! * an **inference-perf config** (`load.stages`, `data.type: shared_prefix`
//!   with `data.shared_prefix.num_groups`, `num_prompts_per_group`, …), the
//!   file inference-perf itself runs;
//! * a **reference-simulator workload spec** with an `inference_perf:` block
//!   (`stages`, `shared_prefix.num_unique_system_prompts`, …).
//!
//! The YAML is walked as a generic value, so no input can panic the
//! converter. Every key that blis does not simulate (servers, API settings,
//! reports, …) or does not know is listed in the returned notes; a value that
//! is wrong (a zero duration, a negative rate, another data type) is an error
//! naming its key path. The result is checked by parsing it back and
//! building the workload.

use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

use crate::workload::{Workload, WorkloadConfig, WorkloadError};

fn err(msg: impl Into<String>) -> WorkloadError {
    WorkloadError::Spec(msg.into())
}

/// The mapping at `path`, or an error naming it.
fn mapping<'a>(v: &'a Value, path: &str) -> Result<&'a Mapping, WorkloadError> {
    v.as_mapping()
        .ok_or_else(|| err(format!("{path}: expected a mapping of keys")))
}

/// Splits `m` into the known keys' values (in `known` order) and notes for
/// every other key.
fn take<'a>(
    m: &'a Mapping,
    path: &str,
    known: &[&str],
    why_unused: &str,
    notes: &mut Vec<String>,
) -> Vec<Option<&'a Value>> {
    let mut out = vec![None; known.len()];
    for (k, v) in m {
        let name = match k {
            Value::String(s) => s.clone(),
            other => format!("{other:?}"),
        };
        match known.iter().position(|&n| n == name) {
            Some(i) => out[i] = Some(v),
            None => notes.push(format!("{path}{name}: {why_unused}; dropped")),
        }
    }
    out
}

/// A whole number in `[min, max]`.
fn whole(v: Option<&Value>, path: &str, min: i64, max: i64) -> Result<i64, WorkloadError> {
    let v = v.ok_or_else(|| err(format!("{path}: missing (a whole number ≥ {min})")))?;
    let n = match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                .map(|f| f as i64)
        }),
        _ => None,
    };
    match n {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(err(format!(
            "{path}: must be a whole number in [{min}, {max}], got {}",
            show(v)
        ))),
    }
}

fn show(v: &Value) -> String {
    serde_yaml_ng::to_string(v)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| format!("{v:?}"))
}

/// The names of the shared-prefix keys in one input format.
struct Names {
    prompts: &'static str,
    users: &'static str,
}

/// Stages and shared prefix from their YAML values, as TOML lines.
fn convert_block(
    stages: Option<&Value>,
    stages_path: &str,
    shared: Option<&Value>,
    shared_path: &str,
    names: &Names,
    notes: &mut Vec<String>,
) -> Result<String, WorkloadError> {
    let stages = stages.ok_or_else(|| {
        err(format!(
            "{stages_path}: missing (a list of {{rate, duration}})"
        ))
    })?;
    let list = stages.as_sequence().ok_or_else(|| {
        err(format!(
            "{stages_path}: expected a list of {{rate, duration}}"
        ))
    })?;
    if list.is_empty() {
        return Err(err(format!("{stages_path}: needs at least one stage")));
    }
    let mut out = String::from("\n[workload.inference_perf]\nstages = [");
    for (i, st) in list.iter().enumerate() {
        let p = format!("{stages_path}[{i}]");
        let m = mapping(st, &p)?;
        let f = take(
            m,
            &format!("{p}."),
            &["rate", "duration"],
            "not a stage setting blis simulates",
            notes,
        );
        let rate = f[0]
            .and_then(Value::as_f64)
            .filter(|r| r.is_finite() && *r > 0.0)
            .ok_or_else(|| {
                err(format!(
                    "{p}.rate: must be a finite number of requests per second > 0, got {}",
                    f[0].map_or("nothing".into(), show)
                ))
            })?;
        let duration = whole(f[1], &format!("{p}.duration (s)"), 1, 1 << 42)?;
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(out, "{sep}{{ rate = {rate:?}, duration = {duration} }}");
    }
    out.push_str("]\n\n[workload.inference_perf.shared_prefix]\n");
    let shared = shared.ok_or_else(|| err(format!("{shared_path}: missing")))?;
    let m = mapping(shared, shared_path)?;
    let keys = [
        names.prompts,
        names.users,
        "system_prompt_len",
        "question_len",
        "output_len",
        "enable_multi_turn_chat",
    ];
    let f = take(
        m,
        &format!("{shared_path}."),
        &keys,
        "not a shared-prefix setting blis simulates",
        notes,
    );
    let u32_max = i64::from(u32::MAX);
    let prompts = whole(
        f[0],
        &format!("{shared_path}.{}", names.prompts),
        1,
        u32_max,
    )?;
    let users = whole(f[1], &format!("{shared_path}.{}", names.users), 1, u32_max)?;
    let _ = writeln!(out, "num_unique_system_prompts = {prompts}");
    let _ = writeln!(out, "num_users_per_system_prompt = {users}");
    for (i, key) in keys.iter().enumerate().skip(2).take(3) {
        // Absent lengths are 0, as in both tools.
        let n = match f[i] {
            None => 0,
            v => whole(v, &format!("{shared_path}.{key}"), 0, u32_max)?,
        };
        let _ = writeln!(out, "{key} = {n}");
    }
    let chat = match f[5] {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(err(format!(
                "{shared_path}.enable_multi_turn_chat: expected true or false, got {}",
                show(v)
            )))
        }
    };
    let _ = writeln!(out, "enable_multi_turn_chat = {chat}");
    Ok(out)
}

/// Converts an inference-perf config or a reference spec with an
/// `inference_perf:` block. Returns the TOML text and the notes (what was
/// dropped or changed, one line each).
pub fn convert_inference_perf(yaml_text: &str) -> Result<(String, Vec<String>), WorkloadError> {
    let doc: Value = serde_yaml_ng::from_str(yaml_text).map_err(|e| err(e.to_string()))?;
    let top = mapping(&doc, "the file")?;
    let mut notes = Vec::new();
    let has = |k: &str| top.contains_key(k);
    let mut head = String::from("[workload]\n");
    let body = if has("inference_perf") {
        let f = take(
            top,
            "",
            &[
                "inference_perf",
                "version",
                "seed",
                "num_requests",
                "horizon",
                "aggregate_rate",
                "category",
            ],
            "not part of an inference-perf workload",
            &mut notes,
        );
        if let Some(v) = f[2] {
            notes.push(format!(
                "seed: {} is a run-level setting: set `seed` in the run file or pass --seed",
                show(v)
            ));
        }
        if let Some(v) = f[3] {
            let n = whole(Some(v), "num_requests", 0, i64::MAX)?;
            if n > 0 {
                let _ = writeln!(head, "num_requests = {n}");
            }
        }
        if let Some(v) = f[4] {
            notes.push(format!(
                "horizon: {} µs is a run-level setting: set `horizon_us` in the run file or pass --horizon",
                show(v)
            ));
        }
        if f[5].is_some() {
            notes.push("aggregate_rate: the stages' rates give the load; dropped".into());
        }
        if f[6].is_some() {
            notes.push("category: a label with no effect on simulation; dropped".into());
        }
        let block = mapping(f[0].expect("present"), "inference_perf")?;
        let b = take(
            block,
            "inference_perf.",
            &["stages", "shared_prefix"],
            "unknown key",
            &mut notes,
        );
        convert_block(
            b[0],
            "inference_perf.stages",
            b[1],
            "inference_perf.shared_prefix",
            &Names {
                prompts: "num_unique_system_prompts",
                users: "num_users_per_system_prompt",
            },
            &mut notes,
        )?
    } else if has("load") || has("data") {
        let f = take(
            top,
            "",
            &["load", "data"],
            "not simulated by blis",
            &mut notes,
        );
        let load = mapping(
            f[0].ok_or_else(|| err("load: missing (load.stages gives the rates)"))?,
            "load",
        )?;
        let l = take(
            load,
            "load.",
            &["type", "stages"],
            "not simulated by blis",
            &mut notes,
        );
        match l[0].and_then(Value::as_str) {
            None | Some("constant") | Some("poisson") => {}
            Some(t) => {
                return Err(err(format!(
                    "load.type: \"{t}\" is not supported (blis converts constant or poisson load stages)"
                )))
            }
        }
        let data = mapping(
            f[1].ok_or_else(|| err("data: missing (data.type: shared_prefix)"))?,
            "data",
        )?;
        let d = take(
            data,
            "data.",
            &["type", "shared_prefix"],
            "not simulated by blis",
            &mut notes,
        );
        match d[0].and_then(Value::as_str) {
            Some("shared_prefix") => {}
            other => {
                return Err(err(format!(
                    "data.type: {} is not supported; blis converts data.type: shared_prefix",
                    other.map_or("missing".to_string(), |t| format!("\"{t}\""))
                )))
            }
        }
        convert_block(
            l[1],
            "load.stages",
            d[1],
            "data.shared_prefix",
            &Names {
                prompts: "num_groups",
                users: "num_prompts_per_group",
            },
            &mut notes,
        )?
    } else {
        return Err(err(
            "neither an inference-perf config (load, data) nor a workload spec with an inference_perf block",
        ));
    };
    let toml_text = head + &body;
    // Check the result: it parses as a [workload] table and builds.
    #[derive(Deserialize)]
    struct File {
        workload: WorkloadConfig,
    }
    let cfg = toml::from_str::<File>(&toml_text)
        .map_err(|e| err(format!("converted table is invalid: {e}")))?;
    Workload::new(&cfg.workload, 0, Path::new("."))
        .map_err(|e| err(format!("converted workload is invalid: {e}")))?;
    Ok((toml_text, notes))
}

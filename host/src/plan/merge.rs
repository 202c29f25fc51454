//! `blis plan merge DIR… --out DIR`: the shards of one plan (`blis plan
//! --shard i/N`, run anywhere — a Slurm array, Kubernetes jobs) merged
//! into one plan directory. Each shard searched its own shapes, so the
//! plan's answer is the cheapest of the shards' answers, by the same order
//! as within one plan (objective, GPUs, cost, shape order); the shapes,
//! frontier, counts and `candidates.csv` are the shards' together, and
//! `best.toml` / `best-report.json` come from the winning shard.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::session::Error;

/// What a merge wrote.
pub struct Merged {
    /// The summary for stdout (as `blis plan` prints).
    pub summary: String,
    /// `None` when no shard had an answer.
    pub answer: Option<Value>,
}

/// One shard's directory, read.
struct ShardDir {
    dir: PathBuf,
    plan: Value,
    index: usize,
    count: usize,
}

/// Merge the shard directories `dirs` into `out`.
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<Merged, Error> {
    let shards = read_shards(dirs, out)?;
    check_out(&shards, out)?;
    let first = &shards[0].plan;
    // The winner: the least key among the shards' answers.
    let objective = first["objective"].as_str().unwrap_or("cost").to_string();
    let key = |a: &Value| {
        let cost = a["cost_per_hour"].as_f64().unwrap_or(f64::INFINITY);
        let gpus = a["gpus"].as_f64().unwrap_or(f64::INFINITY);
        let shape = a["shape"].as_f64().unwrap_or(f64::INFINITY);
        let value = if objective == "gpus" { gpus } else { cost };
        (value, gpus, cost, shape)
    };
    let mut best: Option<(&ShardDir, Value)> = None;
    for s in &shards {
        let a = &s.plan["answer"];
        if a.is_null() {
            continue;
        }
        let a = a.clone();
        if best
            .as_ref()
            .is_none_or(|(_, b)| key(&a).partial_cmp(&key(b)) == Some(std::cmp::Ordering::Less))
        {
            best = Some((s, a));
        }
    }
    std::fs::create_dir_all(out)
        .map_err(|e| Error::run(format!("cannot create {}: {e}", out.display())))?;
    let mut shapes: Vec<Value> = shards
        .iter()
        .flat_map(|s| s.plan["shapes"].as_array().cloned().unwrap_or_default())
        .collect();
    shapes.sort_by(|a, b| a["index"].as_u64().cmp(&b["index"].as_u64()));
    let sum = |k: &str| -> u64 {
        shards
            .iter()
            .map(|s| s.plan["simulations"][k].as_u64().unwrap_or(0))
            .sum()
    };
    let answer = best.as_ref().map(|(_, a)| a.clone());
    if let Some((s, _)) = &best {
        for f in ["best.toml", "best-report.json"] {
            let src = s.dir.join(f);
            if src.is_file() {
                let bytes = std::fs::read(&src)
                    .map_err(|e| Error::run(format!("cannot read {}: {e}", src.display())))?;
                crate::output::write_atomic(&out.join(f), &bytes).map_err(Error::run)?;
            }
        }
    }
    let mut plan = first.clone();
    if let Some(m) = plan.as_object_mut() {
        m.remove("shard");
    }
    plan["answer"] = answer.clone().unwrap_or(Value::Null);
    plan["run_file"] = match &answer {
        Some(_) => json!(out.join("best.toml").display().to_string()),
        None => Value::Null,
    };
    plan["shapes"] = Value::Array(shapes);
    plan["frontier"] = Value::Array(frontier(&shards));
    plan["merged_from"] = json!(shards
        .iter()
        .map(|s| s.dir.display().to_string())
        .collect::<Vec<_>>());
    plan["simulations"] = json!({
        "distinct": sum("distinct"),
        "ran": sum("ran"),
        "reused": sum("reused"),
        "grid": first["simulations"]["grid"],
    });
    let text = serde_json::to_string_pretty(&plan).map_err(|e| Error::run(e.to_string()))?;
    crate::output::write_atomic(&out.join("plan.json"), format!("{text}\n").as_bytes())
        .map_err(Error::run)?;
    merge_candidates(&shards, out)?;
    let summary = serde_json::to_string_pretty(&json!({
        "plan": plan["plan"],
        "answer": plan["answer"],
        "run_file": plan["run_file"],
        "simulations": plan["simulations"],
        "out": out.display().to_string(),
    }))
    .map_err(|e| Error::run(e.to_string()))?;
    Ok(Merged { summary, answer })
}

/// `out` is new, empty, or an earlier merge (its `plan.json` says
/// `merged_from`): a merge replaces `plan.json`, `candidates.csv` and
/// `best.toml` there and must not replace a user's files of those names.
/// Its files are checked against the shards' (inputs) as every command's
/// outputs are.
fn check_out(shards: &[ShardDir], out: &Path) -> Result<(), Error> {
    let earlier_merge = std::fs::read_to_string(out.join("plan.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .is_some_and(|p| p.get("merged_from").is_some());
    let empty = std::fs::read_dir(out).map_or(true, |mut d| d.next().is_none());
    if !empty && !earlier_merge {
        return Err(Error::input(format!(
            "--out {}: the folder exists, is not empty and holds no earlier merge; a merge writes plan.json, candidates.csv and best.toml there. Give a new or empty folder.",
            out.display()
        )));
    }
    let inputs: Vec<(String, PathBuf)> = shards
        .iter()
        .flat_map(|s| {
            super::output::OUTPUTS
                .iter()
                .map(move |f| (format!("{} of shard {}", f, s.dir.display()), s.dir.join(f)))
        })
        .collect();
    let outputs: Vec<(&str, PathBuf)> = super::output::OUTPUTS
        .iter()
        .map(|f| (*f, out.join(f)))
        .collect();
    let errors = crate::output::check_paths(&outputs, &inputs);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::input(errors.join("\n")))
    }
}

/// Every shard's `plan.json`, checked: one plan (same fingerprint), shards
/// 1…N of the same N each exactly once; `out` none of them.
fn read_shards(dirs: &[PathBuf], out: &Path) -> Result<Vec<ShardDir>, Error> {
    let mut shards: Vec<ShardDir> = Vec::new();
    for d in dirs {
        if crate::output::inside(out, d) || crate::output::inside(d, out) {
            return Err(Error::input(format!(
                "--out {}: it is (or holds) the shard directory {}; give a new folder",
                out.display(),
                d.display()
            )));
        }
        let p = d.join("plan.json");
        let text = std::fs::read_to_string(&p).map_err(|e| {
            Error::input(format!(
                "{}: cannot read it ({e}); give the --out folders of `blis plan --shard i/N`",
                p.display()
            ))
        })?;
        let plan: Value = serde_json::from_str(&text)
            .map_err(|e| Error::input(format!("{}: not a plan's plan.json: {e}", p.display())))?;
        let Some((i, n)) = plan["shard"].as_str().and_then(parse_shard) else {
            return Err(Error::input(format!(
                "{}: not a shard (plan.json has no \"shard\"); merge the --out folders of `blis plan --shard i/N`",
                d.display()
            )));
        };
        shards.push(ShardDir {
            dir: d.clone(),
            plan,
            index: i,
            count: n,
        });
    }
    let Some(first) = shards.first() else {
        return Err(Error::input("blis plan merge: give the shard directories"));
    };
    let (n, fp) = (first.count, first.plan["fingerprint"].clone());
    for s in &shards {
        if s.plan["fingerprint"] != fp {
            return Err(Error::input(format!(
                "{} is a shard of another plan (fingerprint {} vs {}); merge the shards of one plan file",
                s.dir.display(),
                s.plan["fingerprint"],
                fp
            )));
        }
        if s.count != n {
            return Err(Error::input(format!(
                "{} is shard {}/{} but {} is of {n}; merge the shards of one --shard i/N split",
                s.dir.display(),
                s.index,
                s.count,
                first.dir.display()
            )));
        }
    }
    for i in 1..=n {
        let k = shards.iter().filter(|s| s.index == i).count();
        if k != 1 {
            return Err(Error::input(format!(
                "shard {i}/{n} is given {k} times; give each of the {n} shards once (the plan's answer is the cheapest of all of them)"
            )));
        }
    }
    shards.sort_by_key(|s| s.index);
    Ok(shards)
}

fn parse_shard(s: &str) -> Option<(usize, usize)> {
    let (i, n) = s.split_once('/')?;
    Some((i.parse().ok()?, n.parse().ok()?))
}

/// The cost/latency frontier over every shard's shapes' answers (cost, then
/// the first SLO's value: lower is better for `<=`, higher for `>=`).
fn frontier(shards: &[ShardDir]) -> Vec<Value> {
    let first = &shards[0].plan;
    let slo = first["slo"][0].as_str().and_then(crate::plan::Slo::parse);
    let Some(Ok(crate::plan::Slo { metric, upper, .. })) = slo else {
        return Vec::new();
    };
    let answers: Vec<Value> = shards
        .iter()
        .flat_map(|s| s.plan["shapes"].as_array().cloned().unwrap_or_default())
        .filter(|s| !s["answer"].is_null())
        .map(|s| s["answer"].clone())
        .collect();
    let v = |a: &Value| {
        (
            a["cost_per_hour"].as_f64().unwrap_or(f64::INFINITY),
            a["slo_values"][&metric].as_f64(),
        )
    };
    let better = |x: f64, y: f64| if upper { x <= y } else { x >= y };
    let mut kept: Vec<Value> = answers
        .iter()
        .filter(|a| {
            let (c, m) = v(a);
            !answers.iter().any(|b| {
                let (c2, m2) = v(b);
                match (m, m2) {
                    (Some(x), Some(y)) => c2 <= c && better(y, x) && (c2 < c || y != x),
                    _ => false,
                }
            })
        })
        .cloned()
        .collect();
    kept.sort_by(|a, b| v(a).0.total_cmp(&v(b).0));
    kept
}

/// `candidates.csv`: the shards' rows, the header once.
fn merge_candidates(shards: &[ShardDir], out: &Path) -> Result<(), Error> {
    let mut text = String::new();
    for (k, s) in shards.iter().enumerate() {
        let p = s.dir.join("candidates.csv");
        let t = std::fs::read_to_string(&p)
            .map_err(|e| Error::input(format!("cannot read {}: {e}", p.display())))?;
        let mut lines = t.lines();
        let header = lines.next().unwrap_or("");
        if k == 0 {
            text.push_str(header);
            text.push('\n');
        }
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
    }
    crate::output::write_atomic(&out.join("candidates.csv"), text.as_bytes()).map_err(Error::run)
}

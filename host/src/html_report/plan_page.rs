//! The page of a `blis plan` directory: per SLO metric, cost against the
//! metric for every simulation, one series per GPU type (mixes by name);
//! each shape's knee (its smallest feasible fleet) and the winner marked;
//! the SLO bound as a line; then the shapes' table (status and why).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::charts::{self, Series, Style};
use super::page::{escape, num, table};

/// The body of a plan's report, from `plan.json` and `candidates.csv`.
pub fn body(dir: &Path) -> Result<String, String> {
    let plan: Value = read_json(&dir.join("plan.json"))?;
    let rows = read_candidates(&dir.join("candidates.csv"))?;
    let mut s = String::new();
    let slos: Vec<String> = plan["slo"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    s.push_str(&format!(
        "<p class=\"meta\">Plan {} · SLOs: {} · {} simulations of the grid's {} · answer: {}</p>\n",
        escape(plan["plan"].as_str().unwrap_or("?")),
        escape(&slos.join(", ")),
        num(&plan["simulations"]["distinct"]),
        num(&plan["simulations"]["grid"]),
        escape(&describe(&plan["answer"])),
    ));
    s.push_str("<h2>Cost against each SLO metric</h2>\n<div class=\"plots\">\n");
    for slo in &slos {
        let Some(Ok(slo)) = crate::plan::Slo::parse(slo) else {
            continue;
        };
        s.push_str(&cost_plot(&plan, &rows, &slo.metric, slo.bound));
    }
    s.push_str("</div>\n<h2>Shapes</h2>\n");
    s.push_str(&shapes_table(&plan));
    Ok(s)
}

fn read_json(p: &Path) -> Result<Value, String> {
    let t = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    serde_json::from_str(&t).map_err(|e| format!("{}: not JSON: {e}", p.display()))
}

/// `candidates.csv` as maps of column → text.
fn read_candidates(p: &Path) -> Result<Vec<BTreeMap<String, String>>, String> {
    let mut r =
        csv::Reader::from_path(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    let header = r.headers().map_err(|e| e.to_string())?.clone();
    let mut out = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| format!("{}: {e}", p.display()))?;
        out.push(
            header
                .iter()
                .map(str::to_string)
                .zip(rec.iter().map(str::to_string))
                .collect(),
        );
    }
    Ok(out)
}

/// `H100 tp1 routing=round-robin, 7 instances, $28.00/h`.
fn describe(c: &Value) -> String {
    if c.is_null() {
        return "none (no configuration meets the SLOs)".into();
    }
    let mut parts = vec![format!(
        "{} tp{}",
        c["gpu"].as_str().unwrap_or("?"),
        c["tp"].as_u64().unwrap_or(0)
    )];
    if let Some(m) = c.as_object() {
        for (k, v) in m {
            if ![
                "gpu",
                "tp",
                "instances",
                "gpus",
                "cost_per_hour",
                "slo_values",
                "feasible",
                "binding",
                "pools",
            ]
            .contains(&k.as_str())
            {
                parts.push(format!(
                    "{k}={}",
                    v.as_str().map_or_else(|| v.to_string(), str::to_string)
                ));
            }
        }
    }
    format!(
        "{}, {} instances, ${:.2}/h",
        parts.join(" "),
        c["instances"].as_u64().unwrap_or(0),
        c["cost_per_hour"].as_f64().unwrap_or(0.0)
    )
}

/// Cost per hour against one SLO metric: every simulation by GPU type,
/// the shapes' knees, the winner, the bound.
fn cost_plot(plan: &Value, rows: &[BTreeMap<String, String>], metric: &str, bound: f64) -> String {
    let mut by_gpu: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        let (Some(cost), Some(y)) = (
            r.get("cost_per_hour").and_then(|v| v.parse::<f64>().ok()),
            r.get(metric).and_then(|v| v.parse::<f64>().ok()),
        ) else {
            continue;
        };
        let gpu = r.get("gpu").cloned().unwrap_or_default();
        by_gpu.entry(gpu).or_default().push((cost, y));
    }
    let mut series: Vec<Series> = by_gpu
        .into_iter()
        .map(|(g, mut p)| {
            p.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
            Series::new(g, p)
        })
        .collect();
    let knees: Vec<(f64, f64)> = plan["shapes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let a = &s["answer"];
            Some((
                a["cost_per_hour"].as_f64()?,
                a["slo_values"][metric].as_f64()?,
            ))
        })
        .collect();
    if !knees.is_empty() {
        series.push(Series::new("knee of each shape", knees));
    }
    if let (Some(c), Some(y)) = (
        plan["answer"]["cost_per_hour"].as_f64(),
        plan["answer"]["slo_values"][metric].as_f64(),
    ) {
        series.push(Series::new("winner", vec![(c, y)]));
    }
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    if let (Some(lo), Some(hi)) = (
        xs.iter().cloned().reduce(f64::min),
        xs.iter().cloned().reduce(f64::max),
    ) {
        series.push(Series::new("SLO bound", vec![(lo, bound), (hi, bound)]));
    }
    if series.is_empty() {
        return charts::missing(
            &format!("cost-vs-{metric}"),
            &format!("cost vs {metric}"),
            "no simulation has this metric",
        );
    }
    charts::lines(
        &format!("cost-vs-{metric}"),
        &format!("{metric} against the fleet's cost"),
        "cost ($/h)",
        metric,
        &series,
        Style::Points,
        "One point per simulation (seed, rate); the knee of a shape is its smallest fleet meeting every SLO on every seed; the winner is the cheapest knee.",
    )
}

/// Every shape: status, answer and why it lost.
fn shapes_table(plan: &Value) -> String {
    let rows: Vec<Vec<String>> = plan["shapes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let a = &s["answer"];
            vec![
                escape(&describe(s).replace(", 0 instances, $0.00/h", "")),
                escape(s["status"].as_str().unwrap_or("")),
                if a.is_null() {
                    "–".into()
                } else {
                    format!(
                        "{} (${:.2}/h)",
                        num(&a["instances"]),
                        a["cost_per_hour"].as_f64().unwrap_or(0.0)
                    )
                },
                escape(s["why"].as_str().unwrap_or("")),
                num(&s["simulations"]),
            ]
        })
        .collect();
    table(
        &[
            "shape",
            "status",
            "answer",
            "why not the answer",
            "simulations",
        ],
        &rows,
    )
}

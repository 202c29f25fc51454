//! The page of a `blis tune` directory: the objective of every evaluation
//! with the best so far, each parameter's trajectory over the evaluations,
//! the start and the answer on the training and held-out traffic (with
//! their spreads and the verdict), and the sensitivity of the objective to
//! each parameter around the answer.

use std::path::Path;

use serde_json::Value;

use super::charts::{self, Series, Style};
use super::page::{escape, num, table};

/// The body of a tune's report, from `tune.json` and `evaluations.csv`.
pub fn body(dir: &Path) -> Result<String, String> {
    let t: Value = read_json(&dir.join("tune.json"))?;
    let (header, rows) = read_csv(&dir.join("evaluations.csv"))?;
    let metric = t["objective"]["metric"].as_str().unwrap_or("objective");
    let col = |name: &str| header.iter().position(|h| h == name);
    let mut s = String::new();
    s.push_str(&format!(
        "<p class=\"meta\">Tune {} · {} {} · {} candidates, {} simulations · verdict: {}</p>\n",
        escape(t["tune"].as_str().unwrap_or("?")),
        escape(t["objective"]["goal"].as_str().unwrap_or("")),
        escape(metric),
        num(&t["search"]["candidates"]),
        num(&t["simulations"]["distinct"]),
        escape(t["verdict"]["reason"].as_str().unwrap_or("")),
    ));
    s.push_str("<h2>Convergence</h2>\n<div class=\"plots\">\n");
    let at = |r: &Vec<String>, c: Option<usize>| c.and_then(|c| r.get(c)?.parse::<f64>().ok());
    let (m, b) = (col(metric), col("best_so_far"));
    let points: Vec<(f64, f64)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((i as f64, at(r, m)?)))
        .collect();
    let best: Vec<(f64, f64)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((i as f64, at(r, b)?)))
        .collect();
    s.push_str(&charts::lines(
        "objective",
        &format!("{metric} per evaluation"),
        "evaluation",
        metric,
        &[
            Series::new("evaluation", points),
            Series::new("best so far", best),
        ],
        Style::Points,
        "each candidate's mean over the training simulations; failed candidates have no point",
    ));
    for p in t["params"].as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or("?");
        let c = col(name);
        let traj: Vec<(f64, f64)> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i as f64, at(r, c)?)))
            .collect();
        if traj.is_empty() {
            continue;
        }
        s.push_str(&charts::lines(
            &format!("param-{name}"),
            &format!("{name} per evaluation"),
            "evaluation",
            name,
            &[Series::new(name, traj)],
            Style::Points,
            "",
        ));
    }
    s.push_str("</div>\n<h2>Start and answer</h2>\n");
    s.push_str(&comparison(&t));
    s.push_str("<h2>Sensitivity around the answer</h2>\n");
    s.push_str(&sensitivity(&t));
    Ok(s)
}

fn comparison(t: &Value) -> String {
    let cell = |v: &Value, sd: &Value| format!("{} ± {}", num(v), num(sd));
    let row = |label: &str, set: &Value| {
        vec![
            label.to_string(),
            cell(&set["summary"]["start"], &set["summary"]["start_sd"]),
            cell(&set["summary"]["tuned"], &set["summary"]["tuned_sd"]),
        ]
    };
    let mut s = table(
        &["traffic", "start (mean ± sd)", "answer (mean ± sd)"],
        &[
            row("training", &t["train"]),
            row("held-out", &t["held_out"]),
        ],
    );
    s.push_str(&format!(
        "<p>Held-out improvement {} (standard error {}): {}.</p>\n",
        num(&t["verdict"]["improvement"]),
        num(&t["verdict"]["standard_error"]),
        escape(t["verdict"]["reason"].as_str().unwrap_or(""))
    ));
    s
}

fn sensitivity(t: &Value) -> String {
    let rows: Vec<Vec<String>> = t["params"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            vec![
                escape(p["name"].as_str().unwrap_or("?")),
                num(&p["start"]),
                num(&p["tuned"]),
                num(&p["sensitivity"]["change_pct"]),
            ]
        })
        .collect();
    table(
        &[
            "parameter",
            "start",
            "answer",
            "largest change of the objective (%)",
        ],
        &rows,
    )
}

fn read_json(p: &Path) -> Result<Value, String> {
    let t = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    serde_json::from_str(&t).map_err(|e| format!("{}: not JSON: {e}", p.display()))
}

fn read_csv(p: &Path) -> Result<(Vec<String>, Vec<Vec<String>>), String> {
    let mut r =
        csv::Reader::from_path(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    let header: Vec<String> = r
        .headers()
        .map_err(|e| e.to_string())?
        .iter()
        .map(str::to_string)
        .collect();
    let mut rows = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| format!("{}: {e}", p.display()))?;
        rows.push(rec.iter().map(str::to_string).collect());
    }
    Ok((header, rows))
}

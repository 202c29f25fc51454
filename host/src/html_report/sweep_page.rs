//! The report of a sweep: latency (p50/p99) vs request rate per variant,
//! throughput vs latency, and SLO attainment vs rate, with seeds (and any
//! other repeat) aggregated as the mean with a min–max bar.
//!
//! The x axis is the sweep's rate axis (the first axis whose name contains
//! `rate`, else the first numeric axis); one series per combination of the
//! other axes' values.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::charts::{self, Series, Style};
use super::page::{escape, num, table};
use super::run_page::read_jsonl;

/// SLO targets for attainment computed from per-request results.
#[derive(Clone, Copy, Debug)]
pub struct SloTargets {
    pub ttft_ms: f64,
    pub e2e_ms: Option<f64>,
}

/// Mean, min and max of samples.
fn summary(v: &[f64]) -> (f64, f64, f64) {
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, lo, hi)
}

/// Rows grouped: series name → x → samples of `y`.
type Groups = BTreeMap<String, BTreeMap<OrdF64, Vec<f64>>>;

/// An x value as a map key (total order).
#[derive(Clone, Copy, Debug)]
struct OrdF64(f64);
impl PartialEq for OrdF64 {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

fn to_series(g: &Groups) -> Vec<Series> {
    g.iter()
        .map(|(name, xs)| {
            let mut s = Series::new(name.clone(), Vec::new());
            for (x, ys) in xs {
                let (m, lo, hi) = summary(ys);
                s.points.push((x.0, m));
                s.spread.push((lo, hi));
            }
            s
        })
        .collect()
}

/// A cell's label for series names.
fn label(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The finished runs of a sweep, grouped by series (the axes other than
/// the x axis) and x value.
struct Grid<'a> {
    ok: Vec<&'a Value>,
    x_axis: String,
    others: Vec<&'a String>,
}

impl Grid<'_> {
    /// A run's series name.
    fn series_of(&self, r: &Value) -> String {
        if self.others.is_empty() {
            "all".into()
        } else if self.others.len() == 1 {
            label(&r[self.others[0].as_str()])
        } else {
            self.others
                .iter()
                .map(|a| format!("{a}={}", label(&r[a.as_str()])))
                .collect::<Vec<_>>()
                .join(", ")
        }
    }

    /// `y` of every run that has it, by series and x.
    fn group(&self, y: &dyn Fn(&Value) -> Option<f64>) -> Groups {
        let mut g = Groups::new();
        for r in &self.ok {
            if let (Some(x), Some(v)) = (r[self.x_axis.as_str()].as_f64(), y(r)) {
                g.entry(self.series_of(r))
                    .or_default()
                    .entry(OrdF64(x))
                    .or_default()
                    .push(v);
            }
        }
        g
    }
}

const SPREAD_NOTE: &str = "Mean over seeds; bars span min to max.";

/// The body of a sweep's report.
pub fn body(dir: &Path, manifest: &Value, targets: SloTargets) -> Result<String, String> {
    let rows = read_jsonl(&dir.join("results.jsonl"))?;
    let axes: Vec<String> = manifest["axes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let ok: Vec<&Value> = rows.iter().filter(|r| r["status"] == "ok").collect();
    let failed: Vec<&Value> = rows.iter().filter(|r| r["status"] != "ok").collect();
    let numeric = |a: &String| ok.iter().all(|r| r[a].is_number()) && !ok.is_empty();
    let x_axis = axes
        .iter()
        .find(|a| a.contains("rate") && numeric(a))
        .or_else(|| axes.iter().find(|a| numeric(a)))
        .cloned();

    let mut s = String::new();
    s.push_str(&format!(
        "<p class=\"meta\">Sweep {} · {} runs in the grid · {} finished ({} failed) · axes: {} · fingerprint {}</p>\n",
        escape(manifest["sweep"].as_str().unwrap_or("?")),
        manifest["runs"].as_array().map_or(0, Vec::len),
        rows.len(),
        failed.len(),
        escape(&axes.join(", ")),
        escape(manifest["fingerprint"].as_str().unwrap_or("?")),
    ));
    let Some(x_axis) = x_axis else {
        s.push_str("<p>No numeric axis to plot against (add an axis such as workload.aggregate_rate).</p>\n");
        return Ok(s);
    };
    let others: Vec<&String> = axes.iter().filter(|a| **a != x_axis).collect();
    let grid = Grid { ok, x_axis, others };
    s.push_str("<h2>Latency vs load</h2>\n<div class=\"plots\">\n");
    s.push_str(&latency_plots(&grid));
    s.push_str("</div>\n<h2>Throughput and SLO attainment</h2>\n<div class=\"plots\">\n");
    s.push_str(&throughput_plot(&grid));
    s.push_str(&slo_plot(&grid, dir, targets));
    s.push_str("</div>\n<h2>Summary</h2>\n");
    s.push_str(&summary_table(&grid));
    if !failed.is_empty() {
        s.push_str("<h2>Failed runs</h2>\n");
        let frows: Vec<Vec<String>> = failed
            .iter()
            .map(|r| {
                vec![
                    escape(r["run_id"].as_str().unwrap_or("?")),
                    escape(r["error"].as_str().unwrap_or("")),
                ]
            })
            .collect();
        s.push_str(&table(&["run", "error"], &frows));
    }
    Ok(s)
}

/// TTFT and E2E p50/p99 against the x axis.
fn latency_plots(grid: &Grid) -> String {
    let x_axis = &grid.x_axis;
    let mut s = String::new();
    for (field, title) in [
        ("ttft_p50_ms", "TTFT p50"),
        ("ttft_p99_ms", "TTFT p99"),
        ("e2e_p50_ms", "E2E p50"),
        ("e2e_p99_ms", "E2E p99"),
    ] {
        let g = grid.group(&|r: &Value| r[field].as_f64());
        let id = format!(
            "{}-vs-rate",
            field.trim_end_matches("_ms").replace('_', "-")
        );
        s.push_str(&charts::lines(
            &id,
            &format!("{title} vs {x_axis}"),
            x_axis,
            &format!("{title} (ms)"),
            &to_series(&g),
            Style::Lines,
            SPREAD_NOTE,
        ));
    }
    s
}

/// Throughput vs latency: one point per (series, x), mean over seeds.
fn throughput_plot(grid: &Grid) -> String {
    let mut tl: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let tput = grid.group(&|r: &Value| r["tokens_per_sec"].as_f64());
    let lat = grid.group(&|r: &Value| r["e2e_p99_ms"].as_f64());
    for (name, xs) in &tput {
        for (x, ys) in xs {
            if let Some(ls) = lat.get(name).and_then(|m| m.get(x)) {
                tl.entry(name.clone())
                    .or_default()
                    .push((summary(ys).0, summary(ls).0));
            }
        }
    }
    let tl_series: Vec<Series> = tl.into_iter().map(|(n, p)| Series::new(n, p)).collect();
    charts::lines(
        "throughput-vs-latency",
        "Throughput vs E2E p99",
        "output tokens/s",
        "E2E p99 (ms)",
        &tl_series,
        Style::Lines,
        &format!(
            "One point per {} value, in increasing order; means over seeds.",
            grid.x_axis
        ),
    )
}

/// SLO attainment: a report column if the reports have one, else from
/// per-request results.
fn slo_plot(grid: &Grid, dir: &Path, targets: SloTargets) -> String {
    let x_axis = &grid.x_axis;
    let column = grid
        .ok
        .first()
        .and_then(|r| r.as_object())
        .and_then(|m| m.keys().find(|k| k.ends_with("slo_attainment")).cloned());
    let (g, note) = match column {
        Some(c) => (
            grid.group(&|r: &Value| r[c.as_str()].as_f64()),
            format!("From the reports' `{c}`. {SPREAD_NOTE}"),
        ),
        None => {
            let attain = |r: &Value| -> Option<f64> {
                let id = r["run_id"].as_str()?;
                let lines = read_jsonl(&dir.join("runs").join(id).join("results.jsonl")).ok()?;
                if lines.is_empty() {
                    return None;
                }
                let met = lines
                    .iter()
                    .filter(|l| {
                        l["ttft_ms"].as_f64().is_some_and(|t| t <= targets.ttft_ms)
                            && match targets.e2e_ms {
                                Some(e) => l["e2e_ms"].as_f64().is_some_and(|x| x <= e),
                                None => l["status"] == "completed",
                            }
                    })
                    .count();
                Some(met as f64 / lines.len() as f64)
            };
            (
                grid.group(&attain),
                format!(
                    "Fraction of all requests (rejected and unfinished count as misses) with TTFT ≤ {} ms{}, from each run's results.jsonl. {SPREAD_NOTE}",
                    targets.ttft_ms,
                    targets.e2e_ms.map_or(" that completed".into(), |e| format!(" and E2E ≤ {e} ms"))
                ),
            )
        }
    };
    if g.is_empty() {
        charts::missing(
            "slo-attainment-vs-rate",
            "SLO attainment vs rate",
            "the runs have no per-request results: set output.results_path in the base run file or in [set]",
        )
    } else {
        charts::lines(
            "slo-attainment-vs-rate",
            &format!("SLO attainment vs {x_axis}"),
            x_axis,
            "fraction meeting the SLO",
            &to_series(&g),
            Style::Lines,
            &note,
        )
    }
}

/// Per series and x: runs, mean TTFT p99, E2E p99 and tokens/s.
fn summary_table(grid: &Grid) -> String {
    let p99 = grid.group(&|r: &Value| r["ttft_p99_ms"].as_f64());
    let e99 = grid.group(&|r: &Value| r["e2e_p99_ms"].as_f64());
    let tput = grid.group(&|r: &Value| r["tokens_per_sec"].as_f64());
    let mut trows = Vec::new();
    for (name, xs) in &p99 {
        for (x, ys) in xs {
            let e = e99.get(name).and_then(|m| m.get(x)).map(|v| summary(v).0);
            let t = tput.get(name).and_then(|m| m.get(x)).map(|v| summary(v).0);
            trows.push(vec![
                escape(name),
                num(&serde_json::json!(x.0)),
                ys.len().to_string(),
                num(&serde_json::json!(summary(ys).0)),
                e.map_or("–".into(), |e| num(&serde_json::json!(e))),
                t.map_or("–".into(), |t| num(&serde_json::json!(t))),
            ]);
        }
    }
    table(
        &[
            "series",
            grid.x_axis.as_str(),
            "runs",
            "TTFT p99 ms (mean)",
            "E2E p99 ms (mean)",
            "tokens/s (mean)",
        ],
        &trows,
    )
}

//! The report of one run: from its JSON report and, where present, its
//! per-request results (latency CDFs), decision trace (regret histogram)
//! and time series (queue depth and KV utilisation per instance over time).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::charts::{self, Series, Style};
use super::page::{escape, num, table};

/// One run's output files.
pub struct RunFiles {
    pub report: PathBuf,
    pub results: Option<PathBuf>,
    pub trace: Option<PathBuf>,
    pub timeseries: Option<PathBuf>,
}

impl RunFiles {
    /// The files of a run folder: `report.json` and whichever of
    /// `results.jsonl`, `trace.jsonl`, `timeseries.jsonl` exist.
    pub fn in_dir(dir: &Path) -> RunFiles {
        let opt = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
        RunFiles {
            report: dir.join("report.json"),
            results: opt("results.jsonl"),
            trace: opt("trace.jsonl"),
            timeseries: opt("timeseries.jsonl"),
        }
    }
}

/// Read a JSON-lines file.
pub fn read_jsonl(path: &Path) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| format!("{}:{}: not a JSON line: {e}", path.display(), i + 1))
        })
        .collect()
}

/// Read a JSON report.
pub fn read_report(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a blis JSON report: {e}", path.display()))?;
    if !v["cluster"].is_object() {
        return Err(format!(
            "{}: not a blis JSON report (no \"cluster\" block); give the output of `blis run`",
            path.display()
        ));
    }
    Ok(v)
}

const SUMMARY_KEYS: [&str; 14] = [
    "num_requests",
    "completed_requests",
    "rejected_requests",
    "dropped_unservable",
    "responses_per_sec",
    "tokens_per_sec",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "kv_cache_hit_rate",
    "mean_regret",
];

/// Latency CDFs: all requests, and each SLO class when there are several.
fn latency_cdfs(results: &[Value]) -> String {
    let mut out = String::new();
    for (id, field, title) in [
        ("ttft-cdf", "ttft_ms", "TTFT CDF"),
        ("e2e-cdf", "e2e_ms", "E2E latency CDF"),
        ("itl-cdf", "itl_mean_ms", "ITL CDF (per-request mean)"),
    ] {
        let mut pops: Vec<(String, Vec<f64>)> = vec![("all".into(), Vec::new())];
        for r in results {
            let Some(x) = r[field].as_f64() else { continue };
            pops[0].1.push(x);
            let class = r["slo_class"].as_str().unwrap_or("").to_string();
            match pops[1..].iter_mut().find(|(n, _)| *n == class) {
                Some((_, v)) => v.push(x),
                None => pops.push((class, vec![x])),
            }
        }
        if pops.len() == 2 {
            pops.truncate(1);
        }
        out.push_str(&charts::cdf(id, title, field, &pops, ""));
    }
    out
}

/// Per-instance lines of a time-series field.
fn per_instance(ts: &[Value], field: &str) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    for line in ts {
        let t = line["time_us"].as_f64().unwrap_or(0.0) / 1e6;
        for inst in line["instances"].as_array().into_iter().flatten() {
            let i = inst["instance"].as_u64().unwrap_or(0) as usize;
            while series.len() <= i {
                series.push(Series::new(
                    format!("instance {}", series.len()),
                    Vec::new(),
                ));
            }
            if let Some(y) = inst[field].as_f64() {
                series[i].points.push((t, y));
            }
        }
    }
    series
}

fn over_time(ts: Option<&[Value]>) -> String {
    let Some(ts) = ts.filter(|t| !t.is_empty()) else {
        let why =
            "no time series: run with --timeseries-path timeseries.jsonl (output.timeseries_path)";
        return charts::missing("queue-depth", "Queue depth per instance", why)
            + &charts::missing("kv-utilization", "KV utilisation per instance", why);
    };
    let mut out = String::new();
    out.push_str(&charts::lines(
        "queue-depth",
        "Queue depth per instance",
        "simulated time (s)",
        "waiting requests",
        &per_instance(ts, "queue_depth"),
        Style::Plain,
        "",
    ));
    out.push_str(&charts::lines(
        "kv-utilization",
        "KV utilisation per instance",
        "simulated time (s)",
        "used / total KV blocks",
        &per_instance(ts, "kv_utilization"),
        Style::Plain,
        "",
    ));
    let rate = |field: &str, name: &str| {
        Series::new(
            name,
            ts.iter()
                .filter_map(|l| Some((l["time_us"].as_f64()? / 1e6, l[field].as_f64()?)))
                .collect(),
        )
    };
    out.push_str(&charts::lines(
        "cluster-rates",
        "Arrival and completion rate",
        "simulated time (s)",
        "requests/s",
        &[
            rate("arrival_rate", "arrivals"),
            rate("completion_rate", "completions"),
        ],
        Style::Plain,
        "",
    ));
    out
}

fn class_table(report: &Value) -> String {
    let Some(classes) = report["slo_classes"].as_object().filter(|c| !c.is_empty()) else {
        return "<p class=\"meta\">No SLO classes.</p>\n".into();
    };
    let rows: Vec<Vec<String>> = classes
        .iter()
        .map(|(name, c)| {
            vec![
                escape(name),
                num(&c["num_requests"]),
                num(&c["completed_requests"]),
                num(&c["rejected_requests"]),
                num(&c["ttft"]["p50_ms"]),
                num(&c["ttft"]["p99_ms"]),
                num(&c["e2e"]["p50_ms"]),
                num(&c["e2e"]["p99_ms"]),
            ]
        })
        .collect();
    table(
        &[
            "SLO class",
            "requests",
            "completed",
            "rejected",
            "TTFT p50 ms",
            "TTFT p99 ms",
            "E2E p50 ms",
            "E2E p99 ms",
        ],
        &rows,
    )
}

fn tenant_table(report: &Value) -> String {
    let Some(tenants) = report["tenants"].as_object().filter(|t| !t.is_empty()) else {
        return "<p class=\"meta\">No tenants.</p>\n".into();
    };
    let rows: Vec<Vec<String>> = tenants
        .iter()
        .map(|(name, t)| {
            vec![
                escape(name),
                num(&t["num_requests"]),
                num(&t["completed_requests"]),
                num(&t["rejected_requests"]),
                num(&t["total_output_tokens"]),
                num(&t["tokens_per_sec"]),
            ]
        })
        .collect();
    table(
        &[
            "tenant",
            "requests",
            "completed",
            "rejected",
            "output tokens",
            "tokens/s",
        ],
        &rows,
    )
}

fn instance_table(report: &Value) -> String {
    let rows: Vec<Vec<String>> = report["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            vec![
                num(&i["instance"]),
                num(&i["completed_requests"]),
                num(&i["preemption_count"]),
                num(&i["ttft_p99_ms"]),
                num(&i["e2e_p99_ms"]),
                num(&i["kv_cache_hit_rate"]),
                num(&i["peak_kv_blocks"]),
            ]
        })
        .collect();
    table(
        &[
            "instance",
            "completed",
            "preemptions",
            "TTFT p99 ms",
            "E2E p99 ms",
            "KV hit rate",
            "peak KV blocks",
        ],
        &rows,
    )
}

/// The body of one run's report (sections with plots and tables).
pub fn body(files: &RunFiles) -> Result<String, String> {
    let report = read_report(&files.report)?;
    let results = files.results.as_deref().map(read_jsonl).transpose()?;
    let trace = files.trace.as_deref().map(read_jsonl).transpose()?;
    let ts = files.timeseries.as_deref().map(read_jsonl).transpose()?;
    let mut s = String::new();
    s.push_str(&format!(
        "<p class=\"meta\">Report: {}</p>\n",
        escape(&files.report.display().to_string())
    ));
    let c = &report["cluster"];
    let mut rows: Vec<Vec<String>> = Vec::new();
    for k in SUMMARY_KEYS.iter().filter(|k| c.get(**k).is_some()) {
        rows.push(vec![escape(k), num(&c[*k])]);
        // The rejections by cause, one row each (reports before the split
        // have no `rejected_by`).
        if *k == "rejected_requests" {
            for (cause, n) in c["rejected_by"].as_object().into_iter().flatten() {
                rows.push(vec![format!("… rejected by {}", escape(cause)), num(n)]);
            }
        }
    }
    s.push_str("<h2>Cluster</h2>\n");
    s.push_str(&table(&["metric", "value"], &rows));

    s.push_str("<h2>Latency distributions</h2>\n<div class=\"plots\">\n");
    match &results {
        Some(r) => s.push_str(&latency_cdfs(r)),
        None => {
            let why = "no per-request results: run with --results-path results.jsonl";
            for (id, t) in [
                ("ttft-cdf", "TTFT CDF"),
                ("e2e-cdf", "E2E latency CDF"),
                ("itl-cdf", "ITL CDF"),
            ] {
                s.push_str(&charts::missing(id, t, why));
            }
        }
    }
    s.push_str("</div>\n<h2>Over time</h2>\n<div class=\"plots\">\n");
    s.push_str(&over_time(ts.as_deref()));
    s.push_str("</div>\n<h2>Routing</h2>\n<div class=\"plots\">\n");
    match &trace {
        Some(t) => {
            let regrets: Vec<f64> = t
                .iter()
                .filter(|l| l["kind"] == "routing")
                .filter_map(|l| l["regret"].as_f64())
                .collect();
            let zero = regrets.iter().filter(|r| **r == 0.0).count();
            s.push_str(&charts::histogram(
                "regret-histogram",
                "Routing regret per decision",
                "regret (best candidate's score − chosen score)",
                &regrets,
                30,
                &format!(
                    "{zero} of {} decisions chose the best-scored candidate (regret 0).",
                    regrets.len()
                ),
            ));
        }
        None => s.push_str(&charts::missing(
            "regret-histogram",
            "Routing regret per decision",
            "no decision trace: run with --trace-path trace.jsonl",
        )),
    }
    s.push_str("</div>\n<h2>Instances</h2>\n");
    s.push_str(&instance_table(&report));
    s.push_str("<h2>SLO classes</h2>\n");
    s.push_str(&class_table(&report));
    s.push_str("<h2>Tenants</h2>\n");
    s.push_str(&tenant_table(&report));
    Ok(s)
}

//! The tidy results table of a sweep: `results.csv` and `results.jsonl`,
//! one row per finished run, readable by pandas or polars as they are.
//!
//! Columns, in this order: `run_id`, `status`, `error`, one column per axis
//! (in axis order), `seed`, then the report flattened generically — the
//! `cluster` block's scalars under their own names (`ttft_p99_ms`), every
//! other object under its dotted path (`slo_classes.critical.ttft.p99_ms`,
//! `tenants.acme.tokens_per_sec`, `fitness.score`), array elements under
//! their index (`stages.0.ttft_p99_ms`) — except the per-instance blocks,
//! which grow with the fleet and stay in each run's `report.json`. A field a
//! future report adds appears as a column without a change here. Metric columns
//! are ordered by first appearance walking the runs in grid order, so the
//! table is a function of the grid and the reports only: the same bytes
//! from one process, from `--jobs N`, or from merged shards.

use serde_json::{Map, Value};

use super::store::SweepDir;

/// Top-level report blocks left out of the table (they grow with the fleet).
const LEFT_OUT: [&str; 1] = ["instances"];

/// Flatten `v` under `prefix` into `out` (array elements under their index).
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, x, out);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                flatten(&format!("{prefix}.{i}"), x, out);
            }
        }
        _ => out.push((prefix.to_string(), v.clone())),
    }
}

/// A report's metric columns: the cluster block without prefix, then the rest.
pub fn metric_columns(report: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    if let Value::Object(top) = report {
        for (k, v) in top.iter().filter(|(k, _)| !LEFT_OUT.contains(&k.as_str())) {
            let prefix = if k == "cluster" { "" } else { k.as_str() };
            flatten(prefix, v, &mut out);
        }
    }
    out
}

/// The table: column names and rows (each a full map of column → value).
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Map<String, Value>>,
}

/// Build the table of the runs in `manifest` that finished in `dir`.
pub fn build(manifest: &Value, dir: &SweepDir) -> Result<Table, String> {
    let axes: Vec<String> = manifest["axes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut columns: Vec<String> = ["run_id", "status", "error"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    columns.extend(axes.iter().cloned());
    columns.push("seed".into());
    let mut seen: std::collections::HashSet<String> = columns.iter().cloned().collect();
    let mut rows = Vec::new();
    for run in manifest["runs"].as_array().into_iter().flatten() {
        let id = run["id"].as_str().unwrap_or_default();
        let Some(record) = dir.record(id) else {
            continue;
        };
        let mut row = Map::new();
        row.insert("run_id".into(), Value::String(id.to_string()));
        row.insert(
            "status".into(),
            Value::String(if record.ok { "ok" } else { "failed" }.into()),
        );
        row.insert(
            "error".into(),
            record.error.clone().map_or(Value::Null, Value::String),
        );
        for a in &axes {
            row.insert(a.clone(), run["axes"][a].clone());
        }
        row.insert("seed".into(), run["seed"].clone());
        if record.ok {
            for (k, v) in metric_columns(&dir.report(id)?) {
                if seen.insert(k.clone()) {
                    columns.push(k.clone());
                }
                row.entry(k).or_insert(v);
            }
        }
        rows.push(row);
    }
    Ok(Table { columns, rows })
}

/// A CSV cell: strings as they are, numbers and booleans as JSON writes them, null empty.
fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

impl Table {
    /// `results.csv`.
    pub fn to_csv(&self) -> Result<Vec<u8>, String> {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(&self.columns).map_err(|e| e.to_string())?;
        for row in &self.rows {
            w.write_record(self.columns.iter().map(|c| cell(row.get(c))))
                .map_err(|e| e.to_string())?;
        }
        w.into_inner().map_err(|e| e.to_string())
    }

    /// `results.jsonl`: one object per row with every column (null when absent).
    pub fn to_jsonl(&self) -> Vec<u8> {
        let mut out = String::new();
        for row in &self.rows {
            let mut m = Map::new();
            for c in &self.columns {
                m.insert(c.clone(), row.get(c).cloned().unwrap_or(Value::Null));
            }
            out.push_str(&Value::Object(m).to_string());
            out.push('\n');
        }
        out.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flattening_is_generic() {
        let report = json!({
            "cluster": {"ttft_p99_ms": 5.0, "mean_regret": null, "new_block": {"x": 1}},
            "instances": [{"instance": 0}],
            "slo_classes": {"critical": {"ttft": {"p99_ms": 3.0}}},
            "fitness": null,
            "stages": [{"stage_index": 0, "ttft": {"p99_ms": 1.0}}],
        });
        let cols: Vec<(String, Value)> = metric_columns(&report);
        let names: Vec<&str> = cols.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "ttft_p99_ms",
                "mean_regret",
                "new_block.x",
                "slo_classes.critical.ttft.p99_ms",
                "fitness",
                "stages.0.stage_index",
                "stages.0.ttft.p99_ms"
            ]
        );
    }

    #[test]
    fn csv_quotes_and_blanks() {
        let mut row = Map::new();
        row.insert("a".into(), json!("x,y"));
        row.insert("b".into(), json!(1.5));
        let t = Table {
            columns: vec!["a".into(), "b".into(), "c".into()],
            rows: vec![row],
        };
        assert_eq!(
            String::from_utf8(t.to_csv().unwrap()).unwrap(),
            "a,b,c\n\"x,y\",1.5,\n"
        );
        assert_eq!(
            String::from_utf8(t.to_jsonl()).unwrap(),
            "{\"a\":\"x,y\",\"b\":1.5,\"c\":null}\n"
        );
    }
}

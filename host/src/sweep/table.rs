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

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::Value;

/// Top-level report blocks left out of the table (they grow with the fleet).
const LEFT_OUT: [&str; 1] = ["instances"];

/// The `cluster` block's fields (columns without prefix) and the report's
/// other top-level blocks (columns `BLOCK.…`), for refusing an axis named
/// like a report column. The tests crate holds this list to the report of
/// the built-in scenario.
pub const CLUSTER_COLUMNS: &[&str] = &[
    "num_requests",
    "rejected_requests",
    "still_in_pipeline",
    "completed_requests",
    "injected_requests",
    "still_queued",
    "still_running",
    "dropped_unservable",
    "preemption_count",
    "total_input_tokens",
    "total_output_tokens",
    "simulated_duration_s",
    "responses_per_sec",
    "tokens_per_sec",
    "ttft_mean_ms",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p95_ms",
    "ttft_p99_ms",
    "ttft_min_ms",
    "ttft_max_ms",
    "e2e_mean_ms",
    "e2e_p50_ms",
    "e2e_p90_ms",
    "e2e_p95_ms",
    "e2e_p99_ms",
    "e2e_min_ms",
    "e2e_max_ms",
    "itl_mean_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p95_ms",
    "itl_p99_ms",
    "itl_min_ms",
    "itl_max_ms",
    "scheduling_delay_mean_ms",
    "scheduling_delay_p50_ms",
    "scheduling_delay_p90_ms",
    "scheduling_delay_p95_ms",
    "scheduling_delay_p99_ms",
    "scheduling_delay_min_ms",
    "scheduling_delay_max_ms",
    "kv_cache_hit_rate",
    "peak_kv_blocks",
    "steps",
    "jain_fairness_index",
    "routing_decisions",
    "mean_regret",
    "max_regret",
    "in_transfer",
    "slo",
    "kv_offload",
    "flow_control",
    "rejected_by",
];

/// The report's top-level blocks other than `cluster` (their columns are `BLOCK.…`).
pub const REPORT_BLOCKS: &[&str] = &[
    "slo_classes",
    "tenants",
    "fitness",
    "stages",
    "plugins",
    "pd",
    "control",
    "saturation",
    "adapters",
    "calibration",
    "models",
];

/// Whether `name` is (or may be) a column of a report in the table.
pub fn is_report_column(name: &str) -> bool {
    let first = name.split('.').next().unwrap_or(name);
    CLUSTER_COLUMNS.contains(&first) || (name.contains('.') && REPORT_BLOCKS.contains(&first))
}

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

/// A finished run as the table sees it: its error, or its report's metric
/// columns. Made where the run finishes (on its worker thread) or from its
/// folder when a sweep resumes, so the table never reads a report twice.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRow {
    /// `None` for a run that succeeded.
    pub error: Option<String>,
    /// The report's metric columns ([`metric_columns`]); empty for a failed run.
    pub metrics: Vec<(String, Value)>,
}

impl RunRow {
    /// The row of a run that succeeded, from its report's text.
    pub fn succeeded(report: &str) -> Result<RunRow, serde_json::Error> {
        let v: Value = serde_json::from_str(report)?;
        Ok(RunRow {
            error: None,
            metrics: metric_columns(&v),
        })
    }

    /// The row of a run that failed.
    pub fn failed(error: String) -> RunRow {
        RunRow {
            error: Some(error),
            metrics: Vec::new(),
        }
    }
}

/// A cell: a value, or `None` where the run has no such column.
type Cell<'a> = Option<Cow<'a, Value>>;

/// The table: column names and, per row, its cells by column position (a
/// row made before a later run added columns is shorter).
pub struct Table<'a> {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell<'a>>>,
}

/// Put `v` in column `pos` of `row` unless the row has that column already
/// (the first of two same-named columns wins).
fn put<'a>(row: &mut Vec<Cell<'a>>, pos: usize, v: Cow<'a, Value>) {
    if row.len() <= pos {
        row.resize(pos + 1, None);
    }
    row[pos].get_or_insert(v);
}

/// Build the table of the runs in `manifest` that have a row in `finished`,
/// in the manifest's (grid) order.
pub fn build<'a>(manifest: &'a Value, finished: &'a HashMap<String, RunRow>) -> Table<'a> {
    let axes: Vec<&str> = manifest["axes"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut columns: Vec<String> = ["run_id", "status", "error"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    columns.extend(axes.iter().map(|a| a.to_string()));
    // A search that labels its runs by seed (plan, tune) has the column.
    let seed_column = !axes.contains(&"seed");
    if seed_column {
        columns.push("seed".into());
    }
    let mut position: HashMap<String, usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| (c.clone(), i))
        .collect();
    let mut rows = Vec::new();
    for run in manifest["runs"].as_array().into_iter().flatten() {
        let id = run["id"].as_str().unwrap_or_default();
        let Some(done) = finished.get(id) else {
            continue;
        };
        let mut row: Vec<Cell<'a>> = Vec::with_capacity(columns.len());
        row.push(Some(Cow::Owned(Value::String(id.to_string()))));
        let status = if done.error.is_none() { "ok" } else { "failed" };
        row.push(Some(Cow::Owned(Value::String(status.into()))));
        row.push(Some(Cow::Owned(
            done.error.clone().map_or(Value::Null, Value::String),
        )));
        for a in &axes {
            row.push(Some(Cow::Borrowed(&run["axes"][*a])));
        }
        if seed_column {
            row.push(Some(Cow::Borrowed(&run["seed"])));
        }
        // Reports list their metrics in the same order, so the column after
        // the last one placed is nearly always the next one's.
        let mut guess = usize::MAX;
        for (k, v) in &done.metrics {
            let pos = match columns.get(guess.wrapping_add(1)) {
                Some(c) if c == k => guess + 1,
                _ => match position.get(k.as_str()) {
                    Some(&p) => p,
                    None => {
                        columns.push(k.clone());
                        position.insert(k.clone(), columns.len() - 1);
                        columns.len() - 1
                    }
                },
            };
            put(&mut row, pos, Cow::Borrowed(v));
            guess = pos;
        }
        rows.push(row);
    }
    Table { columns, rows }
}

/// A CSV cell: strings as they are, numbers and booleans as JSON writes them, null empty.
fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

impl Table<'_> {
    /// Row `r`'s cell of column `c`.
    fn get(&self, r: usize, c: usize) -> Option<&Value> {
        self.rows[r].get(c).and_then(|x| x.as_deref())
    }

    /// `results.csv`.
    pub fn to_csv(&self) -> Result<Vec<u8>, String> {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(&self.columns).map_err(|e| e.to_string())?;
        for r in 0..self.rows.len() {
            w.write_record((0..self.columns.len()).map(|c| cell(self.get(r, c))))
                .map_err(|e| e.to_string())?;
        }
        w.into_inner().map_err(|e| e.to_string())
    }

    /// `results.jsonl`: one object per row with every column (null when
    /// absent), keys in column order — the bytes serde_json writes for
    /// that object, written without building it.
    pub fn to_jsonl(&self) -> Vec<u8> {
        let keys: Vec<String> = self
            .columns
            .iter()
            .map(|c| Value::String(c.clone()).to_string())
            .collect();
        let mut out = Vec::new();
        for r in 0..self.rows.len() {
            out.push(b'{');
            for (c, key) in keys.iter().enumerate() {
                if c > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(key.as_bytes());
                out.push(b':');
                match self.get(r, c) {
                    Some(v) => {
                        let _ = serde_json::to_writer(&mut out, v);
                    }
                    None => out.extend_from_slice(b"null"),
                }
            }
            out.extend_from_slice(b"}\n");
        }
        out
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
        let t = Table {
            columns: vec!["a".into(), "b".into(), "c".into(), "d\"".into()],
            rows: vec![vec![
                Some(Cow::Owned(json!("x,y"))),
                Some(Cow::Owned(json!(1.5))),
            ]],
        };
        assert_eq!(
            String::from_utf8(t.to_csv().unwrap()).unwrap(),
            "a,b,c,\"d\"\"\"\n\"x,y\",1.5,,\n"
        );
        assert_eq!(
            String::from_utf8(t.to_jsonl()).unwrap(),
            "{\"a\":\"x,y\",\"b\":1.5,\"c\":null,\"d\\\"\":null}\n"
        );
    }

    #[test]
    fn rows_follow_the_grid_and_columns_first_appearance() {
        let manifest = json!({
            "axes": ["rate"],
            "runs": [
                {"id": "r1", "axes": {"rate": 1.0}, "seed": 7},
                {"id": "r2", "axes": {"rate": 2.0}, "seed": 7},
                {"id": "r3", "axes": {"rate": 3.0}, "seed": 7},
                {"id": "r4", "axes": {"rate": 4.0}, "seed": 7},
            ]
        });
        let ok = |m: Value| RunRow::succeeded(&m.to_string()).unwrap();
        let finished: HashMap<String, RunRow> = [
            ("r4", ok(json!({"cluster": {"x": 4, "y": [1, {"z": "q"}]}}))),
            ("r1", ok(json!({"cluster": {"x": 1, "seed": 99}}))),
            ("r2", RunRow::failed("boom".into())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let t = build(&manifest, &finished);
        assert_eq!(
            t.columns,
            ["run_id", "status", "error", "rate", "seed", "x", "y.0", "y.1.z"]
        );
        assert_eq!(
            String::from_utf8(t.to_csv().unwrap()).unwrap(),
            "run_id,status,error,rate,seed,x,y.0,y.1.z\n\
             r1,ok,,1.0,7,1,,\n\
             r2,failed,boom,2.0,7,,,\n\
             r4,ok,,4.0,7,4,1,q\n"
        );
        // Each line is what serde_json writes for the row as one object.
        let jsonl = String::from_utf8(t.to_jsonl()).unwrap();
        let first = jsonl.lines().next().unwrap();
        let mut m = serde_json::Map::new();
        for (c, v) in t.columns.iter().zip([
            json!("r1"),
            json!("ok"),
            Value::Null,
            json!(1.0),
            json!(7),
            json!(1),
            Value::Null,
            Value::Null,
        ]) {
            m.insert(c.clone(), v);
        }
        assert_eq!(first, Value::Object(m).to_string());
    }
}

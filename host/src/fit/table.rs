//! The measurements table of `blis calibrate fit --measurements M.csv`:
//! header `run_file,metric,value`, one measured value a row. `run_file` is
//! relative to the table's folder; `metric` is a numeric field of the
//! report's `cluster` block (`ttft_mean_ms`), of one stage
//! (`stages[1].e2e_p90_ms`) or of a real inference-perf client's own
//! metrics (`client.request_latency_mean_ms`: what its summary reports).

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Percentile suffixes of the latency populations in the report.
const STATS: [&str; 7] = ["mean", "p50", "p90", "p95", "p99", "min", "max"];

/// The report's `cluster` fields a measurement may name.
pub fn cluster_metrics() -> Vec<String> {
    let mut out = Vec::new();
    for pop in ["ttft", "e2e", "itl", "scheduling_delay"] {
        for s in STATS {
            out.push(format!("{pop}_{s}_ms"));
        }
    }
    for f in [
        "responses_per_sec",
        "tokens_per_sec",
        "simulated_duration_s",
        "kv_cache_hit_rate",
    ] {
        out.push(f.to_string());
    }
    out
}

/// The fields of one entry of the report's `stages` array a measurement may
/// name (as `stages[i].<field>`).
pub fn stage_metrics() -> Vec<String> {
    let mut out = Vec::new();
    for pop in ["ttft", "e2e", "scheduling_delay"] {
        for s in STATS {
            out.push(format!("{pop}_{s}_ms"));
        }
    }
    for f in [
        "itl_mean_ms",
        "responses_per_sec",
        "tokens_per_sec",
        "simulated_duration_s",
    ] {
        out.push(f.to_string());
    }
    out
}

/// The fields of the report's `client` section (a real inference-perf
/// client's metrics) a measurement may name (as `client.<field>`): the
/// names of its summary's fields.
pub fn client_metrics() -> Vec<String> {
    let mut out = Vec::new();
    for pop in [
        "request_latency",
        "time_to_first_token",
        "time_per_output_token",
        "normalized_time_per_output_token",
    ] {
        for s in ["mean", "p50", "p90", "p99"] {
            out.push(format!("{pop}_{s}_ms"));
        }
    }
    for f in [
        "inter_token_latency_mean_ms",
        "successes",
        "failures",
        "timed_out",
    ] {
        out.push(f.to_string());
    }
    out
}

/// A metric of the report: a cluster field, a stage's field or a client's.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Metric {
    /// `None` for the cluster block, else the stage index.
    pub stage: Option<usize>,
    /// The field name (`ttft_mean_ms`).
    pub field: String,
    /// A field of the report's `client` section (then `stage` is `None`).
    pub client: bool,
}

impl Metric {
    /// Parse `ttft_mean_ms` or `stages[2].ttft_mean_ms`; the error lists the
    /// valid names.
    pub fn parse(s: &str) -> Result<Metric, String> {
        let s = s.trim();
        if let Some(field) = s.strip_prefix("client.") {
            if !client_metrics().iter().any(|m| m == field) {
                return Err(format!(
                    "unknown client metric '{field}' in '{s}'; the client section (a real inference-perf client's own metrics) has: {}",
                    client_metrics().join(", ")
                ));
            }
            return Ok(Metric {
                stage: None,
                field: field.to_string(),
                client: true,
            });
        }
        if let Some(rest) = s.strip_prefix("stages[") {
            let Some((index, field)) = rest.split_once("].") else {
                return Err(format!(
                    "metric '{s}': a stage metric is written stages[i].<field>, e.g. stages[0].ttft_mean_ms"
                ));
            };
            let stage: usize = index.parse().map_err(|_| {
                format!("metric '{s}': the stage index '{index}' is not a number ≥ 0")
            })?;
            if !stage_metrics().iter().any(|m| m == field) {
                return Err(format!(
                    "unknown stage metric '{field}' in '{s}'; a stage has: {}",
                    stage_metrics().join(", ")
                ));
            }
            return Ok(Metric {
                stage: Some(stage),
                field: field.to_string(),
                client: false,
            });
        }
        if cluster_metrics().iter().any(|m| m == s) {
            Ok(Metric {
                stage: None,
                field: s.to_string(),
                client: false,
            })
        } else {
            Err(format!(
                "unknown metric '{s}'; valid metrics: {}, per stage stages[i].<field> with field one of {}, and with a real inference-perf client client.<field> with field one of {}",
                cluster_metrics().join(", "),
                stage_metrics().join(", "),
                client_metrics().join(", ")
            ))
        }
    }

    /// The value of this metric in a report (`None` when the report has no
    /// such stage or the value is null, e.g. no request completed).
    pub fn read(&self, report: &Value) -> Option<f64> {
        let block = match self.stage {
            None if self.client => report.get("client")?,
            None => report.get("cluster")?,
            Some(i) => report.get("stages")?.get(i)?,
        };
        block.get(&self.field)?.as_f64().filter(|v| v.is_finite())
    }

    /// The metric as the table spells it.
    pub fn name(&self) -> String {
        match self.stage {
            None if self.client => format!("client.{}", self.field),
            None => self.field.clone(),
            Some(i) => format!("stages[{i}].{}", self.field),
        }
    }
}

/// One measured value: a row of the table, or one request's latency in an
/// observed trace (`--trace`).
#[derive(Clone, Debug)]
pub struct Row {
    /// The file the value comes from as given (the table, or the trace's
    /// data CSV), for messages.
    pub source: String,
    /// Line in that file (1-based, the header is line 1).
    pub line: u64,
    /// `run_file` as written.
    pub run_file: String,
    /// The run file, resolved against the table's folder.
    pub path: PathBuf,
    pub metric: Metric,
    pub value: f64,
    /// A trace row: the trace's `request_id` (the metric is then one of
    /// [`super::traces::METRICS`], read from the replay's requests).
    pub request: Option<u64>,
    /// A trace's mean row: the mean of a per-request metric over these
    /// requests (the metric is one of [`super::traces::MEANS`]).
    pub mean_of: Option<std::sync::Arc<[u64]>>,
}

/// Read and check the table: the header, every metric, every value finite
/// and > 0, every run file present. Errors name the table and line.
pub fn read(table: &Path) -> Result<Vec<Row>, String> {
    let text = crate::input::read_to_string(table).map_err(|e| {
        format!(
            "cannot read the measurements table {}: {e}",
            table.display()
        )
    })?;
    let base = table.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = table.display();
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_reader(text.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| format!("{name}: cannot read the header: {e}"))?
        .iter()
        .map(str::to_string)
        .collect();
    if header != ["run_file", "metric", "value"] {
        return Err(format!(
            "{name}, line 1: the header is '{}'; it must be exactly run_file,metric,value (one measured value a row)",
            header.join(",")
        ));
    }
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            format!("{name}, line {line}: {e}; each row is run_file,metric,value")
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let at = |m: String| format!("{name}, line {line}: {m}");
        let run_file = record.get(0).unwrap_or("").to_string();
        if run_file.is_empty() {
            return Err(at("the run_file column is empty".into()));
        }
        let metric = Metric::parse(record.get(1).unwrap_or("")).map_err(at)?;
        let raw = record.get(2).unwrap_or("");
        let value: f64 = raw.parse().map_err(|_| {
            at(format!(
                "value '{raw}' of {} is not a number; give the measured value (ms for latencies, per second for rates)",
                metric.name()
            ))
        })?;
        if !(value.is_finite() && value > 0.0) {
            return Err(at(format!(
                "value {raw} of {} must be a finite number > 0 (the error is relative to it)",
                metric.name()
            )));
        }
        let path = if Path::new(&run_file).is_absolute() {
            PathBuf::from(&run_file)
        } else {
            base.join(&run_file)
        };
        if let Some(prev) = rows
            .iter()
            .find(|r: &&Row| r.path == path && r.metric == metric)
        {
            return Err(at(format!(
                "{} of {run_file} is measured twice (line {} too); keep one row per run file and metric",
                metric.name(),
                prev.line
            )));
        }
        rows.push(Row {
            source: name.to_string(),
            line,
            run_file,
            path,
            metric,
            value,
            request: None,
            mean_of: None,
        });
    }
    if rows.is_empty() {
        return Err(format!(
            "{name}: no measurements; add rows run_file,metric,value under the header"
        ));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metrics_parse_and_read() {
        let m = Metric::parse("ttft_mean_ms").unwrap();
        assert_eq!(m.stage, None);
        let c = Metric::parse("client.request_latency_mean_ms").unwrap();
        assert!(c.client && c.stage.is_none());
        assert_eq!(c.name(), "client.request_latency_mean_ms");
        let report = serde_json::json!({"cluster": {"e2e_mean_ms": 1.0}, "client": {"request_latency_mean_ms": 2.0}});
        assert_eq!(c.read(&report), Some(2.0));
        assert!(Metric::parse("client.e2e_mean_ms")
            .unwrap_err()
            .contains("request_latency_mean_ms"));
        let s = Metric::parse("stages[1].e2e_p90_ms").unwrap();
        assert_eq!(s.stage, Some(1));
        assert_eq!(s.name(), "stages[1].e2e_p90_ms");
        let r = json!({"cluster": {"ttft_mean_ms": 12.5, "itl_mean_ms": null},
                       "stages": [{"e2e_p90_ms": 1.0}, {"e2e_p90_ms": 2.0}]});
        assert_eq!(m.read(&r), Some(12.5));
        assert_eq!(s.read(&r), Some(2.0));
        assert_eq!(Metric::parse("itl_mean_ms").unwrap().read(&r), None);
        assert_eq!(
            Metric::parse("stages[5].e2e_p90_ms").unwrap().read(&r),
            None
        );
    }

    #[test]
    fn unknown_metric_lists_the_valid_ones() {
        let e = Metric::parse("ttft_avg").unwrap_err();
        assert!(e.contains("unknown metric 'ttft_avg'"), "{e}");
        assert!(e.contains("ttft_mean_ms") && e.contains("responses_per_sec"));
        let e = Metric::parse("stages[0].itl_p99_ms").unwrap_err();
        assert!(e.contains("itl_mean_ms"), "{e}");
        assert!(Metric::parse("stages[x].ttft_mean_ms").is_err());
    }

    #[test]
    fn table_rows_are_checked_with_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("m.csv");
        std::fs::write(&t, "run_file,metric,value\na.toml,ttft_mean_ms,10\n").unwrap();
        let rows = read(&t).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].line, 2);
        assert_eq!(rows[0].path, dir.path().join("a.toml"));
        for (body, want) in [
            ("a.toml,ttft_mean_ms,0\n", "line 3: value 0"),
            ("a.toml,ttft_mean_ms,NaN\n", "line 3: value NaN"),
            ("a.toml,ttft_mean_ms,-1\n", "line 3: value -1"),
            ("a.toml,ttft_mean,3\n", "line 3: unknown metric"),
            ("a.toml,e2e_mean_ms,x\n", "line 3: value 'x'"),
        ] {
            std::fs::write(
                &t,
                format!("run_file,metric,value\nb.toml,e2e_mean_ms,5\n{body}"),
            )
            .unwrap();
            let e = read(&t).unwrap_err();
            assert!(e.contains(want), "{body}: {e}");
        }
        std::fs::write(&t, "file,metric,value\n").unwrap();
        assert!(read(&t).unwrap_err().contains("line 1"));
    }
}

//! The traces route of `blis calibrate fit`: `--trace
//! RUN_FILE=HEADER.yaml,DATA.csv`, an observed TraceV2 trace with the run
//! file of the server that produced it.
//!
//! Each `ok` row past the header's `warm_up_requests` gives up to three
//! measured values (rows of the objective, like the table's):
//!
//! * `request_ttft_ms` = `first_chunk_time_us − send_time_us`;
//! * `request_e2e_ms` = `last_chunk_time_us − send_time_us`;
//! * `request_itl_ms` = `(last_chunk_time_us − first_chunk_time_us) /
//!   (output_tokens − 1)`, where the trace has it: `output_tokens ≥ 2`, the
//!   last chunk after the first, and not a single chunk (`num_chunks` ≠ 1;
//!   blis's own traces write 0, not recorded).
//!
//! A value ≤ 0 (a relative error needs a positive measurement) is left
//! out. The prediction is the same request in a replay of the trace
//! through the run file (exactly `blis replay RUN_FILE`, fixed session
//! mode), with the header's `network.measured_rtt_ms` added to TTFT and
//! E2E, as `blis calibrate` does. The replay simulates every request (they
//! interact through queueing); held-out folds split only the error terms.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::table::{Metric, Row};
use crate::metrics::trace_export::completed_trace_row;
use crate::metrics::RequestSink;
use crate::request::Request;
use crate::trace_v2::{TraceReader, TraceRecord, TraceStatus};
use crate::workload::SharedLedger;

/// The per-request metrics of a trace.
pub const METRICS: [&str; 3] = ["request_ttft_ms", "request_e2e_ms", "request_itl_ms"];

/// A trace's means: per held-out fold of its requests (one fold without
/// `--holdout`), the mean of each per-request metric ([`METRICS`], in
/// order). A fit on requests alone matches the typical request (a relative
/// error is least where the prediction sits below the median of a
/// right-skewed spread); with the means it matches what a capacity plan
/// reads, the mean, too.
pub const MEANS: [&str; 3] = [
    "trace_ttft_mean_ms",
    "trace_e2e_mean_ms",
    "trace_itl_mean_ms",
];

/// The per-request metric a mean row averages.
pub fn per_request(mean: &str) -> Option<&'static str> {
    MEANS.iter().position(|m| *m == mean).map(|i| METRICS[i])
}

/// A trace's mean rows: for each fold (`fold_of[i]` of request unit `i`,
/// `folds` of them) and metric, the mean of its requests' values; each
/// row's unit is one of its fold's requests (it is held out with them).
/// `rows` are the trace's request rows and `units` their request units
/// (0-based within the trace).
pub fn mean_rows(
    rows: &[Row],
    units: &[usize],
    fold_of: &[usize],
    folds: usize,
) -> Vec<(Row, usize)> {
    let mut out = Vec::new();
    for k in 0..folds {
        for (m, mean) in METRICS.iter().zip(MEANS) {
            let members: Vec<(&Row, usize)> = rows
                .iter()
                .zip(units)
                .filter(|(r, &u)| r.metric.field == *m && fold_of[u] == k)
                .map(|(r, &u)| (r, u))
                .collect();
            let Some(&(first, unit)) = members.first() else {
                continue;
            };
            let value = members.iter().map(|(r, _)| r.value).sum::<f64>() / members.len() as f64;
            let ids: Vec<u64> = members.iter().filter_map(|(r, _)| r.request).collect();
            out.push((
                Row {
                    source: first.source.clone(),
                    line: first.line,
                    run_file: first.run_file.clone(),
                    path: first.path.clone(),
                    metric: metric(mean),
                    value,
                    request: None,
                    mean_of: Some(ids.into()),
                },
                unit,
            ));
        }
    }
    out
}

/// One `--trace RUN_FILE=HEADER.yaml,DATA.csv`.
#[derive(Clone, Debug)]
pub struct TraceArg {
    /// The flag's value as given.
    pub spec: String,
    pub run_file: PathBuf,
    pub header: PathBuf,
    pub data: PathBuf,
}

/// Parse a `--trace` value and check its three files exist.
pub fn parse_arg(spec: &str) -> Result<TraceArg, String> {
    let form = "write --trace RUN_FILE=HEADER.yaml,DATA.csv (the run file of the server that \
                produced the trace, then the trace's TraceV2 header and data)";
    let (run, files) = spec
        .split_once('=')
        .ok_or_else(|| format!("--trace {spec}: no '='; {form}"))?;
    let (header, data) = files
        .split_once(',')
        .ok_or_else(|| format!("--trace {spec}: no ',' between the header and the data; {form}"))?;
    let (run, header, data) = (run.trim(), header.trim(), data.trim());
    if run.is_empty() || header.is_empty() || data.is_empty() || data.contains(',') {
        return Err(format!("--trace {spec}: {form}"));
    }
    let arg = TraceArg {
        spec: spec.to_string(),
        run_file: PathBuf::from(run),
        header: PathBuf::from(header),
        data: PathBuf::from(data),
    };
    for (what, p) in [
        ("run file", &arg.run_file),
        ("trace header", &arg.header),
        ("trace data", &arg.data),
    ] {
        if !p.is_file() {
            return Err(format!(
                "--trace {spec}: the {what} {} does not exist (or is not a file)",
                p.display()
            ));
        }
    }
    Ok(arg)
}

fn metric(field: &str) -> Metric {
    Metric {
        stage: None,
        field: field.to_string(),
        client: false,
    }
}

/// The measured rows of a trace (see the module docs), and the RTT (µs)
/// added to the simulated TTFT and E2E.
pub fn read_rows(arg: &TraceArg) -> Result<(Vec<Row>, f64), String> {
    let header = crate::trace_v2::read_header(&arg.header).map_err(|e| e.to_string())?;
    let mut reader = TraceReader::open(&arg.data).map_err(|e| e.to_string())?;
    let data = arg.data.display().to_string();
    let run_file = arg.run_file.display().to_string();
    let warm = header.warm_up_requests;
    let rtt = header
        .network
        .as_ref()
        .map_or(0.0, |n| (n.measured_rtt_ms * 1000.0).trunc());
    let mut rec = TraceRecord::default();
    let mut rows = Vec::new();
    let (mut total, mut ok) = (0u64, 0u64);
    let mut seen: HashMap<u64, u64> = HashMap::new();
    while let Some(line) = reader.read_into(&mut rec).map_err(|e| e.to_string())? {
        total += 1;
        if let Some(prev) = seen.insert(rec.request_id, line) {
            return Err(format!(
                "{data}:{line}: request_id {} appears twice (line {prev} too); a trace names each request once",
                rec.request_id
            ));
        }
        if rec.status != TraceStatus::Ok || rec.request_id < warm {
            continue;
        }
        ok += 1;
        let send = rec.send_time_us;
        let (first, last) = (rec.first_chunk_time_us, rec.last_chunk_time_us);
        let mut push = |field: &str, us: f64| {
            if us > 0.0 && us.is_finite() {
                rows.push(Row {
                    source: data.clone(),
                    line,
                    run_file: run_file.clone(),
                    path: arg.run_file.clone(),
                    metric: metric(field),
                    value: us / 1000.0,
                    request: Some(rec.request_id),
                    mean_of: None,
                });
            }
        };
        push(METRICS[0], (first - send) as f64);
        push(METRICS[1], (last - send) as f64);
        if rec.output_tokens >= 2 && last > first && rec.num_chunks != 1 {
            push(
                METRICS[2],
                (last - first) as f64 / (rec.output_tokens - 1) as f64,
            );
        }
    }
    if rows.is_empty() {
        return Err(format!(
            "--trace {}: {data} has no usable row: {total} rows, {ok} with status ok past the \
             header's warm_up_requests ({warm}) and a positive TTFT or E2E; a fit needs completed \
             requests (status ok) with their chunk times",
            arg.spec
        ));
    }
    Ok((rows, rtt))
}

/// One replayed request's latencies (µs, as simulated).
#[derive(Clone, Copy, Debug)]
pub struct Simulated {
    pub ttft_us: f64,
    pub e2e_us: f64,
    pub itl_us: Option<f64>,
}

impl Simulated {
    /// The prediction of a trace metric (ms), the RTT added to TTFT and E2E.
    pub fn read(&self, field: &str, rtt_us: f64) -> Option<f64> {
        match field {
            "request_ttft_ms" => Some((self.ttft_us + rtt_us) / 1000.0),
            "request_e2e_ms" => Some((self.e2e_us + rtt_us) / 1000.0),
            "request_itl_ms" => self.itl_us.map(|x| x / 1000.0),
            _ => None,
        }
    }
}

/// The replay's completed trace requests, by trace `request_id`.
pub type Requests = Arc<Mutex<HashMap<u64, Simulated>>>;

/// A per-request sink collecting completed trace rows in memory.
#[derive(Debug)]
pub struct Collect {
    pub ledger: SharedLedger,
    pub out: Requests,
}

impl RequestSink for Collect {
    fn record(&mut self, req: &Request, _tenants: &[String], _clients: &[String]) {
        let Some(id) = completed_trace_row(&self.ledger, req) else {
            return;
        };
        let s = Simulated {
            ttft_us: (req.first_token_at - req.arrival) as f64,
            e2e_us: (req.completed_at - req.arrival) as f64,
            itl_us: (req.generated > 1).then(|| {
                (req.completed_at - req.first_token_at) as f64 / f64::from(req.generated - 1)
            }),
        };
        if let Ok(mut m) = self.out.lock() {
            m.insert(id, s);
        }
    }

    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// The run file of a trace: `arg.run_file` with its `[workload]` replaced
/// by the trace, as `blis replay` builds it.
pub fn replay_source(
    arg: &TraceArg,
) -> Result<(crate::config::RunFile, crate::config::Source), String> {
    let options = crate::session::ReplayOptions::new(arg.header.clone(), arg.data.clone());
    let base = crate::session::Base::File(arg.run_file.clone());
    crate::session::load_replay(&base, &options, |_| {})
        .map_err(|f| format!("--trace {}: {}", arg.spec, f.message))
}

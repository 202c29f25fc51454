//! Warnings (stderr) for runs that are valid but surely not what was
//! meant: a workload that generates no request, a horizon before the first
//! arrival, token lengths of 0 raised to the 1-token minimum; and the size
//! of a run before it starts ([`scale`]): a warning past 10^8 requests or
//! 10^7 time-series lines, an error past 10^11 requests or 10^10 lines
//! (days of CPU, terabytes of disk: a run that cannot finish).

use crate::workload::{LengthDist, Workload};

use super::RunFile;

/// The warnings for `run` with its assembled `workload` (before it runs).
pub fn warnings(run: &RunFile, workload: &Workload) -> Vec<String> {
    let mut w = Vec::new();
    match workload.peek_time() {
        None => w.push(
            "the workload generates no request (is workload.aggregate_rate so low that the first \
             arrival lies past 2^62 µs, or does every client's window lie in the past?): \
             the report will be empty"
                .to_string(),
        ),
        Some(first) => {
            if let Some(h) = run.horizon_us {
                if first > h {
                    w.push(format!(
                        "horizon_us = {h} is before the first arrival at {first} µs: no request \
                         will reach the cluster (horizon_us is in µs)"
                    ));
                }
            }
        }
    }
    let wl = &run.workload;
    for (key, v) in [
        ("prompt_tokens", wl.prompt_tokens),
        ("prompt_tokens_min", wl.prompt_tokens_min),
        ("output_tokens", wl.output_tokens),
        ("output_tokens_min", wl.output_tokens_min),
    ] {
        if v == Some(0) {
            w.push(zero_length(&format!("workload.{key}")));
        }
    }
    for (i, c) in wl.clients.iter().flatten().enumerate() {
        for (side, d) in [("input", &c.input), ("output", &c.output)] {
            if let LengthDist::Gaussian { mean, min, .. } = d {
                if *min == 0 || *mean < 0.5 {
                    w.push(zero_length(&format!(
                        "workload.clients[{i}] ({}).{side}",
                        c.id
                    )));
                }
            }
        }
    }
    w
}

fn zero_length(key: &str) -> String {
    format!("{key} allows 0 tokens: every prompt and output has at least 1 token, so lengths below 1 are raised to 1")
}

/// Expected requests past which a run draws a warning (minutes to hours).
pub const WARN_REQUESTS: f64 = 1e8;
/// Expected requests past which a run is refused: at about 10^6 simulated
/// requests per second of CPU, 10^11 requests is more than a day.
pub const MAX_REQUESTS: f64 = 1e11;
/// Time-series lines past which a run draws a warning (gigabytes).
pub const WARN_SAMPLES: f64 = 1e7;
/// Time-series lines past which a run is refused (terabytes).
pub const MAX_SAMPLES: f64 = 1e10;

/// The expected number of requests and simulated seconds of `run`, when
/// the workload says (`num_requests`, `aggregate_rate` with `horizon_us`,
/// or an inference-perf workload's stages).
fn expected_size(run: &RunFile, workload: &Workload) -> (Option<f64>, Option<f64>) {
    let horizon_s = run.horizon_us.map(|h| h as f64 / 1e6);
    if let Some(ip) = &run.workload.inference_perf {
        let n: f64 = ip.stages.iter().map(|s| s.rate * s.duration as f64).sum();
        let d: f64 = ip.stages.iter().map(|s| s.duration as f64).sum();
        return (Some(n), Some(horizon_s.map_or(d, |h| h.min(d))));
    }
    let planned = workload.planned_requests().map(|n| n as f64);
    match run.workload.aggregate_rate.filter(|r| *r > 0.0) {
        Some(rate) => {
            let by_horizon = horizon_s.map(|h| h * rate);
            let n = match (planned, by_horizon) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            (n, n.map(|n| n / rate))
        }
        None => (planned, None),
    }
}

/// Warnings and errors about the size of `run` with `instances` instances:
/// see the module docs for the rule.
pub fn scale(run: &RunFile, workload: &Workload, instances: u32) -> (Vec<String>, Vec<String>) {
    let (mut warn, mut err) = (Vec::new(), Vec::new());
    let (requests, seconds) = expected_size(run, workload);
    if let Some(n) = requests {
        let what = format!(
            "the workload generates about {n:.2e} requests (workload.num_requests, or workload.aggregate_rate × horizon_us, or the inference-perf stages)"
        );
        if n > MAX_REQUESTS {
            err.push(format!(
                "{what}: more than {MAX_REQUESTS:.0e}, which cannot finish (blis simulates about 10^6 requests per second of CPU). Lower workload.num_requests or horizon_us"
            ));
        } else if n > WARN_REQUESTS {
            warn.push(format!(
                "{what}: at about 10^6 requests per second this takes {:.0} minutes or more",
                n / 1e6 / 60.0
            ));
        }
    }
    if let (Some(_), Some(s)) = (&run.output.timeseries_path, seconds) {
        let interval = run
            .output
            .timeseries_interval_us
            .unwrap_or(crate::config::build::TIMESERIES_DEFAULT_INTERVAL_US)
            .max(1) as f64;
        let lines = s * 1e6 / interval;
        let what = format!(
            "output.timeseries_interval_us = {interval} over about {s:.3e} simulated seconds is about {lines:.2e} time-series lines of {instances} instances each"
        );
        if lines > MAX_SAMPLES {
            err.push(format!(
                "{what}: more than {MAX_SAMPLES:.0e}, which cannot be written. Raise output.timeseries_interval_us"
            ));
        } else if lines > WARN_SAMPLES {
            warn.push(format!("{what} (gigabytes or more)"));
        }
    }
    (warn, err)
}

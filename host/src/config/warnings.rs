//! Warnings (stderr) for runs that are valid but surely not what was
//! meant: a workload that generates no request, a horizon before the first
//! arrival, token lengths of 0 raised to the 1-token minimum.

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

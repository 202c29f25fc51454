//! Upper bounds on run-file delays: past them a value cannot be meant, and
//! simulated times built from it would overflow (α and β coefficients are
//! bounded by the latency module, `MAX_COEFFICIENT_US`).

use super::RunFile;

/// Largest admission/routing latency or snapshot refresh interval, µs:
/// 10^15 µs, about 31.7 years.
pub const MAX_DELAY_US: i64 = 1_000_000_000_000_000;

/// Every delay of `run` outside [0, [`MAX_DELAY_US`]], as errors naming the key.
pub fn check_delays(run: &RunFile) -> Vec<String> {
    let mut errors = Vec::new();
    for (k, v) in [
        ("admission.latency_us", run.admission.latency_us),
        ("routing.latency_us", run.routing.latency_us),
        (
            "routing.snapshot_refresh_interval_us",
            run.routing.snapshot_refresh_interval_us,
        ),
    ] {
        if v < 0 {
            errors.push(format!("{k} = {v}: must be ≥ 0"));
        } else if v > MAX_DELAY_US {
            errors.push(format!(
                "{k} = {v}: must be at most 10^15 µs (about 31.7 years); a longer delay cannot be meant"
            ));
        }
    }
    errors
}

/// `v` as a message shows it: plain from 10^-6 to 10^9, in exponent form
/// beyond (never a 300-digit decimal).
pub fn short_number(v: f64) -> String {
    if v.is_finite() && (v.abs() >= 1e9 || (v != 0.0 && v.abs() < 1e-6)) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

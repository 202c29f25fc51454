//! `[saturation]`: which post-hoc detectors run and their settings → the
//! collector's event stream (see `metrics::saturation`).

use super::{one_of, Problems};
use crate::config::SaturationSection;
use crate::metrics::saturation::{SaturationConfig, SaturationRecorder};

/// Default threshold of the `threshold` detector, ms.
const DEFAULT_THRESHOLD_MS: f64 = 5000.0;
/// Default bucket width of `backlog-drift`, s.
const DEFAULT_WINDOW_S: f64 = 60.0;
/// Default final window without a backlog-drift window, µs.
const DEFAULT_FINAL_WINDOW_US: i64 = 30_000_000;

const NAMES: [&str; 4] = ["composite", "threshold", "backlog-drift", "all"];

pub(super) fn check(
    sat: Option<&SaturationSection>,
    problems: &mut Problems,
) -> Option<SaturationRecorder> {
    let sat = sat?;
    let (mut composite, mut threshold, mut backlog) = (false, false, false);
    if sat.detectors.is_empty() {
        problems.error(
            "saturation.detectors is empty: name at least one of composite, threshold, backlog-drift (or \"all\"), or remove [saturation]",
        );
    }
    for d in &sat.detectors {
        match d.as_str() {
            "composite" => composite = true,
            "threshold" => threshold = true,
            "backlog-drift" => backlog = true,
            "all" => (composite, threshold, backlog) = (true, true, true),
            other => problems.error(one_of("saturation.detectors", other, &NAMES)),
        }
    }
    if sat.threshold.is_some() && !threshold {
        problems.error("[saturation.threshold] is given but the threshold detector is not in saturation.detectors: add \"threshold\" or remove the table");
    }
    if sat.backlog_drift.is_some() && !backlog {
        problems.error("[saturation.backlog_drift] is given but the backlog-drift detector is not in saturation.detectors: add \"backlog-drift\" or remove the table");
    }
    let threshold_ms = sat
        .threshold
        .as_ref()
        .and_then(|t| t.threshold_ms)
        .unwrap_or(DEFAULT_THRESHOLD_MS);
    if !(threshold_ms.is_finite() && threshold_ms > 0.0) {
        problems.error(format!(
            "saturation.threshold.threshold_ms = {threshold_ms}: must be a finite number of milliseconds > 0 (default 5000)"
        ));
    }
    let given_window = sat.backlog_drift.as_ref().and_then(|b| b.window_size_sec);
    let window_s = given_window.unwrap_or(DEFAULT_WINDOW_S);
    let window_ok = (1e-6..=1e9).contains(&window_s);
    if !window_ok {
        problems.error(format!(
            "saturation.backlog_drift.window_size_sec = {window_s}: must be a number of seconds in [0.000001, 10^9] (default 60)"
        ));
    }
    let window_us = (window_s * 1e6).round() as i64;
    let final_window = match sat.final_window_us {
        Some(w) if w <= 0 => {
            problems.error(format!(
                "saturation.final_window_us = {w}: must be > 0 (µs of simulated time before the last event)"
            ));
            DEFAULT_FINAL_WINDOW_US
        }
        Some(w) => w,
        None if given_window.is_some() && window_ok => window_us,
        None => DEFAULT_FINAL_WINDOW_US,
    };
    Some(SaturationRecorder::new(SaturationConfig {
        composite,
        threshold_ms: threshold.then_some(threshold_ms),
        backlog_window: (backlog && window_ok).then_some(window_us),
        final_window,
    }))
}

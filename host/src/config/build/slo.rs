//! `[slo]`: targets per SLO class → the collector's attainment and goodput
//! recorder (see `metrics::slo`).

use super::Problems;
use crate::config::{SloSection, SloTarget};
use crate::metrics::slo::{SloRecorder, Targets};
use crate::request::SloClass;

/// A target in ms → µs, or an error naming the key.
fn target(key: String, ms: Option<f64>, problems: &mut Problems) -> Option<i64> {
    let ms = ms?;
    if !(ms.is_finite() && ms > 0.0 && ms <= 1e12) {
        problems.error(format!(
            "{key} = {ms}: must be a finite number of milliseconds > 0 (e.g. 500)"
        ));
        return None;
    }
    Some((ms * 1e3).round() as i64)
}

/// The recorder, when `[slo]` is present and valid.
pub(super) fn check(slo: Option<&SloSection>, problems: &mut Problems) -> Option<SloRecorder> {
    let slo = slo?;
    let mut targets = [Targets::default(); 5];
    for (i, t) in slo.by_class().into_iter().enumerate() {
        let Some(SloTarget { ttft_ms, e2e_ms }) = t else {
            continue;
        };
        let name = SloClass::ALL[i].name();
        if ttft_ms.is_none() && e2e_ms.is_none() {
            problems.error(format!(
                "[slo.{name}] has no target: give ttft_ms and/or e2e_ms, or remove the table"
            ));
        }
        targets[i] = Targets {
            ttft: target(format!("slo.{name}.ttft_ms"), *ttft_ms, problems),
            e2e: target(format!("slo.{name}.e2e_ms"), *e2e_ms, problems),
        };
    }
    Some(SloRecorder::new(targets))
}

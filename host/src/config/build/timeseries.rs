//! `output.timeseries_path` and `output.timeseries_interval_us`: the time
//! series (see `metrics::timeseries`).

use std::io::BufWriter;
use std::path::{Path, PathBuf};

use super::{resolve, Problems};
use crate::config::OutputSection;
use crate::engine::Tick;
use crate::metrics::timeseries::TimeSeries;
use crate::output::PendingOutput;

/// The interval without `output.timeseries_interval_us`: one line per simulated second.
pub const DEFAULT_INTERVAL_US: Tick = 1_000_000;

/// What the time-series keys resolved to.
pub(super) struct CheckedTimeSeries {
    path: Option<PathBuf>,
    interval: Tick,
}

pub(super) fn check(out: &OutputSection, problems: &mut Problems) -> CheckedTimeSeries {
    let interval = out.timeseries_interval_us.unwrap_or(DEFAULT_INTERVAL_US);
    if interval <= 0 {
        problems.error(format!(
            "output.timeseries_interval_us = {interval}: must be > 0 (µs of simulated time between lines, e.g. 1000000)"
        ));
    } else if out.timeseries_path.is_none() && out.timeseries_interval_us.is_some() {
        problems.note("output.timeseries_interval_us is set but output.timeseries_path is not: no time series is written");
    }
    CheckedTimeSeries {
        path: out.timeseries_path.clone(),
        interval,
    }
}

impl CheckedTimeSeries {
    /// The writer, when a path is set and `open_outputs` (not for `blis
    /// validate`): a temporary file put in place by committing the
    /// returned [`PendingOutput`] once the run succeeded.
    pub(super) fn create(
        self,
        base_dir: &Path,
        open_outputs: bool,
    ) -> Result<Option<(TimeSeries, PendingOutput)>, String> {
        let Some(p) = self.path.filter(|_| open_outputs) else {
            return Ok(None);
        };
        let p = resolve(base_dir, &p);
        let (f, pending) = PendingOutput::create(&p).map_err(|e| {
            format!(
                "cannot create the time series file {}: {e}\n  Check that its folder exists and is writable.",
                p.display()
            )
        })?;
        Ok(Some((
            TimeSeries::new(Box::new(BufWriter::new(f)), self.interval),
            pending,
        )))
    }
}

//! Why a cluster run can stop before its end: a plugin failed, simulated
//! time ran past [`TIME_LIMIT`](crate::engine::TIME_LIMIT), or the run was
//! cancelled from outside.

use crate::engine::{Tick, TIME_LIMIT};
use crate::plugins::PluginError;

/// A run that could not finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A plugin panicked or returned something invalid.
    #[error(transparent)]
    Plugin(#[from] Box<PluginError>),
    /// A delay, step time or token delivery time reached the time limit.
    #[error("simulated time reached the limit of 2^62 µs (about 146,000 years) at {what}.\n  A delay or step time is absurdly large: check model.alpha, model.beta, admission.latency_us, routing.latency_us and the workload's arrival times (the last scheduled time was {at} µs).")]
    TimeLimit { at: Tick, what: String },
    /// The run was stopped from outside ([`super::Cluster::cancel_on`]).
    #[error("the run was cancelled (interrupted)")]
    Cancelled,
}

impl RunError {
    /// The time-limit error for time `at`, if it is past the limit.
    pub fn check_time(at: Tick, what: impl FnOnce() -> String) -> Result<(), RunError> {
        if at >= TIME_LIMIT {
            Err(RunError::TimeLimit { at, what: what() })
        } else {
            Ok(())
        }
    }
}

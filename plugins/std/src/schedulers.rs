//! Instance-side policies (ABI 0.2): wait-queue orders (`scheduler` kind:
//! the sort key of a request entering an instance's wait queue; equal keys
//! go by arrival, then id) and preemption victims (`preemption` kind).
//!
//! These are the policies blis also implements natively (`[instance]
//! scheduler = "sjf"` uses the native one, `"blis-std::sjf"` this plugin);
//! tests check both give byte-identical reports.

use blis_plugin_api::{Params, PolicyDef, Preemption, RequestView, RunningRequest, Scheduler};

macro_rules! scheduler {
    ($ty:ident, $name:literal, $summary:literal, |$r:ident| $key:expr) => {
        #[doc = $summary]
        pub struct $ty;

        impl PolicyDef for $ty {
            const NAME: &'static str = $name;
            const SUMMARY: &'static str = $summary;
            fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
                params.expect_none()?;
                Ok($ty)
            }
        }

        impl Scheduler for $ty {
            fn key(&mut self, $r: &RequestView<'_>) -> i64 {
                $key
            }
        }
    };
}

scheduler!(
    Fcfs,
    "fcfs",
    "first come, first served: arrival time, then id",
    |_r| 0
);
scheduler!(
    PriorityFcfs,
    "priority-fcfs",
    "SLO-class priority (high first), then arrival, then id",
    |r| -i64::from(r.slo_class.priority())
);
scheduler!(
    Sjf,
    "sjf",
    "shortest prompt first, then arrival, then id",
    |r| i64::from(r.input_tokens)
);
scheduler!(
    ReversePriority,
    "reverse-priority",
    "SLO-class priority (low first), then arrival, then id",
    |r| i64::from(r.slo_class.priority())
);

/// Preempt the most recently admitted request (the tail of the batch), as
/// vLLM does — blis's native `fcfs` preemption.
pub struct PreemptTail;

impl PolicyDef for PreemptTail {
    const NAME: &'static str = "fcfs";
    const SUMMARY: &'static str = "preempt the tail of the batch (latest admitted), as vLLM";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(PreemptTail)
    }
}

impl Preemption for PreemptTail {
    fn victim(&mut self, running: &[RunningRequest]) -> usize {
        running.len() - 1
    }
}

/// Preempt the lowest-priority request, the latest arrival (then highest
/// id) among equals — blis's native `priority` preemption.
pub struct PreemptLowestPriority;

impl PolicyDef for PreemptLowestPriority {
    const NAME: &'static str = "priority";
    const SUMMARY: &'static str = "preempt the lowest SLO priority, latest arrival among equals";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(PreemptLowestPriority)
    }
}

impl Preemption for PreemptLowestPriority {
    fn victim(&mut self, running: &[RunningRequest]) -> usize {
        let key = |r: &RunningRequest| {
            (
                r.slo_class.priority(),
                std::cmp::Reverse(r.arrival_us),
                std::cmp::Reverse(r.id),
            )
        };
        let mut best = 0;
        for (j, r) in running.iter().enumerate().skip(1) {
            if key(r) < key(&running[best]) {
                best = j;
            }
        }
        best
    }
}

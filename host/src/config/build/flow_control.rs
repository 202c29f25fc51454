//! `[flow_control]`: the gateway queue's settings, checked → a
//! [`Gateway`](crate::gateway::Gateway).

use super::{one_of, Problems};
use crate::config::bounds::MAX_DELAY_US;
use crate::config::FlowControlSection;
use crate::gateway::{BandQueue, Detector, Eviction, Fairness, Gateway, GatewayCounts};

/// The checked settings.
pub(super) struct CheckedFlowControl {
    detector: Detector,
    usage_limit: f64,
    per_band_capacity: Option<u64>,
    max_depth: Option<u64>,
    shedding: bool,
    fairness: Fairness,
    ttl: Option<i64>,
    tick: i64,
    in_flight_eviction: bool,
}

fn positive(key: &str, v: f64, example: &str, problems: &mut Problems) {
    if !(v.is_finite() && v > 0.0) {
        problems.error(format!(
            "flow_control.{key} = {v}: must be a finite number > 0 (e.g. {example})"
        ));
    }
}

fn unit_interval(key: &str, v: f64, problems: &mut Problems) {
    if !(v > 0.0 && v <= 1.0) {
        problems.error(format!(
            "flow_control.{key} = {v}: must be in (0, 1] (a fraction, e.g. 0.8)"
        ));
    }
}

fn delay(key: &str, v: i64, problems: &mut Problems) {
    if v <= 0 || v > MAX_DELAY_US {
        problems.error(format!(
            "flow_control.{key} = {v}: must be > 0 and at most 10^15 µs"
        ));
    }
}

fn capacity(key: &str, v: Option<u64>, problems: &mut Problems) {
    if v == Some(0) {
        problems.error(format!(
            "flow_control.{key} = 0: a queue that holds nothing rejects every request; give a capacity ≥ 1, or remove the key for no limit"
        ));
    }
}

/// `pd`: the run disaggregates prefill and decode (`[[pools]]`).
pub(super) fn check(
    fc: Option<&FlowControlSection>,
    pd: bool,
    problems: &mut Problems,
) -> Option<CheckedFlowControl> {
    let fc = fc?;
    if fc.in_flight_eviction && pd {
        problems.error(
            "flow_control.in_flight_eviction = true cannot be combined with [[pools]] (prefill/decode disaggregation): a disaggregated request lives on two instances and in a KV transfer between them, which eviction does not handle; remove one of the two",
        );
    }
    positive(
        "queue_depth_threshold",
        fc.queue_depth_threshold,
        "5",
        problems,
    );
    unit_interval(
        "kv_cache_util_threshold",
        fc.kv_cache_util_threshold,
        problems,
    );
    positive("max_concurrency", fc.max_concurrency, "100", problems);
    unit_interval("usage_limit_threshold", fc.usage_limit_threshold, problems);
    capacity("per_band_capacity", fc.per_band_capacity, problems);
    capacity("max_depth", fc.max_depth, problems);
    if fc.shedding && fc.max_depth.is_none() {
        problems.error(
            "flow_control.shedding = true needs flow_control.max_depth: shedding happens when the queue is full",
        );
    }
    if let Some(ttl) = fc.request_ttl_us {
        delay("request_ttl_us", ttl, problems);
    }
    delay("dispatch_tick_us", fc.dispatch_tick_us, problems);
    let detector = match fc.saturation_detector.as_str() {
        "utilization" => Detector::Utilization {
            queue_depth: fc.queue_depth_threshold,
            kv: fc.kv_cache_util_threshold,
        },
        "concurrency" => Detector::Concurrency {
            max_per_instance: fc.max_concurrency,
        },
        "never" => Detector::Never,
        other => {
            problems.error(one_of(
                "flow_control.saturation_detector",
                other,
                &["utilization", "concurrency", "never"],
            ));
            Detector::Never
        }
    };
    let fairness = match fc.fairness.as_str() {
        "global-strict" => Fairness::GlobalStrict,
        "round-robin" => Fairness::RoundRobin,
        other => {
            problems.error(one_of(
                "flow_control.fairness",
                other,
                &["global-strict", "round-robin"],
            ));
            Fairness::GlobalStrict
        }
    };
    Some(CheckedFlowControl {
        detector,
        usage_limit: fc.usage_limit_threshold,
        per_band_capacity: fc.per_band_capacity,
        max_depth: fc.max_depth,
        shedding: fc.shedding,
        fairness,
        ttl: fc.request_ttl_us,
        tick: fc.dispatch_tick_us,
        in_flight_eviction: fc.in_flight_eviction,
    })
}

impl CheckedFlowControl {
    /// The gateway for a workload with these tenant names.
    pub(super) fn create(self, tenant_names: &[String]) -> Gateway {
        Gateway {
            queue: BandQueue::new(
                tenant_names.len(),
                self.usage_limit,
                self.per_band_capacity,
                self.max_depth,
                self.shedding,
                self.fairness,
            ),
            detector: self.detector,
            ttl: self.ttl,
            tick: self.tick,
            tick_pending: false,
            in_transit: 0,
            tenant_rank: Gateway::ranks(tenant_names),
            counts: GatewayCounts::default(),
            eviction: self.in_flight_eviction.then(Eviction::default),
        }
    }
}

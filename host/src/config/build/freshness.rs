//! `[routing.freshness]` and `routing.cache_signal_delay_us`: how old the
//! signals a routing decision sees may be (see `cluster::snapshot` and
//! `cluster::cache_signal` for the models).

use super::Problems;
use crate::cluster::Freshness;
use crate::config::bounds::MAX_DELAY_US;
use crate::config::RoutingSection;
use crate::engine::Tick;

/// The checked intervals (errors go to `problems`).
pub(super) fn check(routing: &RoutingSection, problems: &mut Problems) -> Freshness {
    let mut delay = |key: &str, v: i64| -> Tick {
        if v < 0 {
            problems.error(format!(
                "routing.{key} = {v}: must be ≥ 0 (µs; 0 reads the signal live)"
            ));
            0
        } else if v > MAX_DELAY_US {
            problems.error(format!(
                "routing.{key} = {v}: must be at most 10^15 µs (about 31.7 years); a longer delay cannot be meant"
            ));
            0
        } else {
            v
        }
    };
    delay("cache_signal_delay_us", routing.cache_signal_delay_us);
    let tiers = Freshness::tiers(routing.snapshot_refresh_interval_us.max(0));
    let Some(f) = &routing.freshness else {
        return tiers;
    };
    let fresh = Freshness {
        queue_depth: delay("freshness.queue_depth_us", f.queue_depth_us.unwrap_or(0)),
        batch_size: delay("freshness.batch_size_us", f.batch_size_us.unwrap_or(0)),
        kv: match f.kv_utilization_us {
            Some(v) => delay("freshness.kv_utilization_us", v),
            None => tiers.kv,
        },
        resident_adapters: delay(
            "freshness.resident_adapters_us",
            f.resident_adapters_us.unwrap_or(0),
        ),
    };
    if let Some(v) = f.kv_utilization_us {
        let legacy = routing.snapshot_refresh_interval_us;
        if legacy != 0 && legacy != v {
            problems.error(format!(
                "routing.freshness.kv_utilization_us = {v} and routing.snapshot_refresh_interval_us = \
                 {legacy} both set the KV signals' refresh interval; keep one of them"
            ));
        }
    }
    fresh
}

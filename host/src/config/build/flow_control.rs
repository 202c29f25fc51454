//! `[flow_control]`: the gateway queue's settings, checked → a
//! [`Gateway`](crate::gateway::Gateway).

use super::{one_of, Problems};
use crate::config::bounds::MAX_DELAY_US;
use crate::config::FlowControlSection;
use crate::gateway::{BandQueue, Detector, Eviction, Fairness, Gateway, GatewayCounts, Las, BANDS};
use crate::request::SloClass;

/// The checked settings.
pub(super) struct CheckedFlowControl {
    detector: Detector,
    usage_limit: f64,
    per_band_capacity: Option<u64>,
    max_depth: Option<u64>,
    shedding: bool,
    fairness: Fairness,
    /// Bands with their own (capacity, fairness): (band, capacity, fairness).
    bands: Vec<(usize, Option<u64>, Fairness)>,
    las: Las,
    ceilings: Ceilings,
    ttl: Option<i64>,
    tick: i64,
    in_flight_eviction: bool,
}

/// How the bands' ceilings follow `usage_limit_threshold`.
#[derive(Clone, Copy)]
enum Ceilings {
    /// From the top ceiling (band 0) down to the threshold (the lowest
    /// band), by rank.
    Linear(f64),
    /// Between the same two, by the bands' priorities (llm-d's
    /// priority-holdback-policy, domain value).
    ByPriority(f64),
    /// Every band at the threshold (llm-d's static-usage-limit-policy).
    Static,
    /// llm-d's soft-reflective-ceiling-policy.
    SoftReflective,
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

fn fairness_of(key: &str, name: &str, problems: &mut Problems) -> Fairness {
    match name {
        "global-strict" => Fairness::GlobalStrict,
        "round-robin" => Fairness::RoundRobin,
        "program-aware" => Fairness::ProgramAware,
        other => {
            problems.error(one_of(
                key,
                other,
                &["global-strict", "round-robin", "program-aware"],
            ));
            Fairness::GlobalStrict
        }
    }
}

/// `band_capacity` / `band_fairness`: the bands (SLO classes) with their
/// own settings, the others keeping `per_band_capacity` and `fairness`.
fn bands(
    fc: &FlowControlSection,
    fairness: Fairness,
    problems: &mut Problems,
) -> Vec<(usize, Option<u64>, Fairness)> {
    let names: Vec<&str> = SloClass::ALL.iter().map(|c| c.name()).collect();
    for key in fc.band_capacity.keys().chain(fc.band_fairness.keys()) {
        if !names.contains(&key.as_str()) {
            let section = if fc.band_capacity.contains_key(key) {
                "band_capacity"
            } else {
                "band_fairness"
            };
            problems.error(one_of(&format!("flow_control.{section} key"), key, &names));
        }
    }
    let mut out = Vec::new();
    for (band, class) in SloClass::ALL.iter().enumerate() {
        let cap = fc.band_capacity.get(class.name()).copied();
        let fair = fc.band_fairness.get(class.name());
        if cap.is_none() && fair.is_none() {
            continue;
        }
        capacity(&format!("band_capacity.{}", class.name()), cap, problems);
        let fair = match fair {
            Some(f) => fairness_of(
                &format!("flow_control.band_fairness.{}", class.name()),
                f,
                problems,
            ),
            None => fairness,
        };
        out.push((band, cap.or(fc.per_band_capacity), fair));
    }
    out
}

/// `pd`: the run has `[[pools]]` (P/D, or serve pools of several models).
pub(super) fn check(
    fc: Option<&FlowControlSection>,
    pd: bool,
    problems: &mut Problems,
) -> Option<CheckedFlowControl> {
    let fc = fc?;
    if fc.in_flight_eviction && pd {
        problems.error(
            "flow_control.in_flight_eviction = true cannot be combined with [[pools]]: a disaggregated request lives on two instances and in a KV transfer between them, which eviction does not handle, and eviction across the pools of several models is not supported yet; remove one of the two",
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
    let detector = detector(fc, problems);
    let fairness = fairness_of("flow_control.fairness", &fc.fairness, problems);
    let bands = bands(fc, fairness, problems);
    let program_aware =
        fairness == Fairness::ProgramAware || bands.iter().any(|b| b.2 == Fairness::ProgramAware);
    let las = Las {
        w_service: fc.las_weight_service.unwrap_or(0.8),
        w_wait: fc.las_weight_head_wait.unwrap_or(0.2),
        half_life_us: fc.las_half_life_s.unwrap_or(60.0) * 1e6,
    };
    let las_keys = [
        ("las_weight_service", fc.las_weight_service),
        ("las_weight_head_wait", fc.las_weight_head_wait),
        ("las_half_life_s", fc.las_half_life_s),
    ];
    for (key, v) in las_keys {
        if let Some(v) = v {
            if !program_aware {
                problems.error(format!(
                    "flow_control.{key} is given but flow_control.fairness = \"{}\" and no band_fairness is \"program-aware\"; it is used only by program-aware fairness",
                    fc.fairness
                ));
            } else if !(v.is_finite() && (0.0..=1e9).contains(&v)) {
                problems.error(format!(
                    "flow_control.{key} = {v}: must be a finite number ≥ 0"
                ));
            }
        }
    }
    let ceilings = ceilings(fc, problems);
    Some(CheckedFlowControl {
        detector,
        usage_limit: fc.usage_limit_threshold,
        per_band_capacity: fc.per_band_capacity,
        max_depth: fc.max_depth,
        shedding: fc.shedding,
        fairness,
        bands,
        las,
        ceilings,
        ttl: fc.request_ttl_us,
        tick: fc.dispatch_tick_us,
        in_flight_eviction: fc.in_flight_eviction,
    })
}

/// The saturation detector and its keys.
fn detector(fc: &FlowControlSection, problems: &mut Problems) -> Detector {
    let detector = match fc.saturation_detector.as_str() {
        "utilization" => Detector::Utilization {
            queue_depth: fc.queue_depth_threshold,
            kv: fc.kv_cache_util_threshold,
        },
        "concurrency" => {
            let max_tokens = fc.max_token_concurrency.unwrap_or(1e6);
            match fc.concurrency_mode.as_deref() {
                None | Some("requests") => Detector::Concurrency {
                    max_per_instance: fc.max_concurrency,
                },
                Some(mode @ ("tokens" | "hybrid")) => {
                    positive("max_token_concurrency", max_tokens, "1000000", problems);
                    Detector::Tokens {
                        max_tokens,
                        hybrid: (mode == "hybrid").then_some(fc.max_concurrency),
                    }
                }
                Some(other) => {
                    problems.error(one_of(
                        "flow_control.concurrency_mode",
                        other,
                        &["requests", "tokens", "hybrid"],
                    ));
                    Detector::Never
                }
            }
        }
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
    if fc.saturation_detector != "concurrency"
        && (fc.concurrency_mode.is_some() || fc.max_token_concurrency.is_some())
    {
        problems.error(format!(
            "flow_control.concurrency_mode / max_token_concurrency belong to saturation_detector = \"concurrency\", not \"{}\"; remove them or change the detector",
            fc.saturation_detector
        ));
    }
    detector
}

/// The bands' usage-limit ceilings and `usage_limit_max`.
fn ceilings(fc: &FlowControlSection, problems: &mut Problems) -> Ceilings {
    let top = fc.usage_limit_max.unwrap_or(1.0);
    let ceilings = match fc.usage_limit.as_deref() {
        None | Some("linear") => Ceilings::Linear(top),
        Some("by-priority") => Ceilings::ByPriority(top),
        Some("static") => Ceilings::Static,
        Some("soft-reflective") => Ceilings::SoftReflective,
        Some(other) => {
            problems.error(one_of(
                "flow_control.usage_limit",
                other,
                &["linear", "by-priority", "static", "soft-reflective"],
            ));
            Ceilings::Linear(top)
        }
    };
    if let Some(max) = fc.usage_limit_max {
        if !matches!(ceilings, Ceilings::Linear(_) | Ceilings::ByPriority(_)) {
            problems.error(format!(
                "flow_control.usage_limit_max = {max}: only the linear and by-priority ceilings have a top (usage_limit = \"{}\" sets every band from usage_limit_threshold); remove it",
                fc.usage_limit.as_deref().unwrap_or("")
            ));
        } else if !(max > 0.0 && max <= 1.0) || max <= fc.usage_limit_threshold {
            problems.error(format!(
                "flow_control.usage_limit_max = {max}: must be in (0, 1] and above usage_limit_threshold ({})",
                fc.usage_limit_threshold
            ));
        }
    }
    ceilings
}

impl CheckedFlowControl {
    /// The gateway for a workload with these tenant names.
    pub(super) fn create(self, tenant_names: &[String]) -> Gateway {
        let mut queue = BandQueue::new(
            tenant_names.len(),
            self.usage_limit,
            self.per_band_capacity,
            self.max_depth,
            self.shedding,
            self.fairness,
        );
        for &(band, capacity, fairness) in &self.bands {
            queue = queue.with_band(band, capacity, fairness);
        }
        queue = queue.with_las(self.las);
        match self.ceilings {
            Ceilings::Linear(top) => {
                if top != 1.0 {
                    queue = queue.with_ceilings(linear_ceilings(top, self.usage_limit));
                }
            }
            Ceilings::ByPriority(top) => {
                queue = queue.with_ceilings(priority_ceilings(top, self.usage_limit));
            }
            Ceilings::Static => queue = queue.with_static_ceilings(),
            Ceilings::SoftReflective => queue = queue.with_soft_reflective(),
        }
        Gateway {
            queue,
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

/// Band `i`'s ceiling `top − i·(top − bottom)/(B − 1)` (llm-d's
/// priority-holdback-policy by rank).
fn linear_ceilings(top: f64, bottom: f64) -> [f64; BANDS] {
    std::array::from_fn(|i| top - i as f64 * (top - bottom) / (BANDS - 1) as f64)
}

/// Band `i`'s ceiling `bottom + (p_i − p_min)/(p_max − p_min)·(top −
/// bottom)`, `p_i` its SLO class's priority (llm-d's
/// priority-holdback-policy by value).
fn priority_ceilings(top: f64, bottom: f64) -> [f64; BANDS] {
    let p = SloClass::ALL.map(|c| f64::from(c.priority()));
    let (lo, hi) = (p[BANDS - 1], p[0]);
    std::array::from_fn(|i| bottom + (p[i] - lo) / (hi - lo) * (top - bottom))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By hand over blis's five bands (priorities 4, 3, −1, −2, −3), from
    /// 0.9 down to 0.2: by rank 0.9, 0.725, 0.55, 0.375, 0.2; by value
    /// 0.2 + (p + 3)/7·0.7 = 0.9, 0.8, 0.4, 0.3, 0.2.
    #[test]
    fn holdback_ceilings_by_hand() {
        let close =
            |a: [f64; BANDS], b: [f64; BANDS]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
        assert!(close(
            linear_ceilings(0.9, 0.2),
            [0.9, 0.725, 0.55, 0.375, 0.2]
        ));
        assert!(close(
            priority_ceilings(0.9, 0.2),
            [0.9, 0.8, 0.4, 0.3, 0.2]
        ));
        // Top 1 by rank is the queue's own default.
        assert!(close(linear_ceilings(1.0, 0.6), [1.0, 0.9, 0.8, 0.7, 0.6]));
    }
}

//! Filters of a routing profile (ABI 0.2): each keeps a subset of the
//! candidate instances; the profile's scorers see only the survivors.

use blis_plugin_api::serde::Deserialize;
use blis_plugin_api::{ClusterState, Kept, Params, PolicyDef, RequestView};

#[derive(Deserialize)]
#[serde(crate = "blis_plugin_api::serde", deny_unknown_fields)]
struct QueueParams {
    #[serde(default = "default_queue_threshold")]
    threshold: u32,
}

fn default_queue_threshold() -> u32 {
    128
}

/// Keeps instances whose wait queue holds at most `threshold` requests
/// (llm-d's former `low-queue-filter`).
pub struct LowQueue {
    threshold: u32,
}

impl PolicyDef for LowQueue {
    const NAME: &'static str = "low-queue";
    const SUMMARY: &'static str = "keep instances with queue depth ≤ threshold";
    const PARAMS_DOC: &'static str =
        "threshold  (integer ≥ 0, requests, default 128)  keep instances whose queue_depth is at most this.";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: QueueParams = params.parse()?;
        Ok(LowQueue {
            threshold: p.threshold,
        })
    }
}

impl blis_plugin_api::Filter for LowQueue {
    fn filter(&mut self, _: &RequestView<'_>, cluster: &ClusterState<'_>, keep: &mut Kept) {
        let snaps = cluster.instances();
        for &i in cluster.candidates() {
            if snaps[i as usize].queue_depth <= self.threshold {
                keep.push(i);
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(crate = "blis_plugin_api::serde", deny_unknown_fields)]
struct KvParams {
    #[serde(default = "default_kv_threshold")]
    threshold: f64,
}

fn default_kv_threshold() -> f64 {
    0.9
}

/// Keeps instances whose KV utilisation is below `threshold`.
pub struct LowKvUtilization {
    threshold: f64,
}

impl PolicyDef for LowKvUtilization {
    const NAME: &'static str = "low-kv-utilization";
    const SUMMARY: &'static str = "keep instances with KV utilisation < threshold";
    const PARAMS_DOC: &'static str =
        "threshold  (float in (0, 1], default 0.9)  keep instances whose kv_utilization is below this.";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: KvParams = params.parse()?;
        if !(p.threshold > 0.0 && p.threshold <= 1.0) {
            return Err(format!(
                "params.threshold = {}: must be in (0, 1]",
                p.threshold
            ));
        }
        Ok(LowKvUtilization {
            threshold: p.threshold,
        })
    }
}

impl blis_plugin_api::Filter for LowKvUtilization {
    fn filter(&mut self, _: &RequestView<'_>, cluster: &ClusterState<'_>, keep: &mut Kept) {
        let snaps = cluster.instances();
        for &i in cluster.candidates() {
            if snaps[i as usize].kv_utilization < self.threshold {
                keep.push(i);
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(crate = "blis_plugin_api::serde", deny_unknown_fields)]
struct UtilizationParams {
    #[serde(default = "default_qd")]
    queue_depth_threshold: f64,
    #[serde(default = "default_kv")]
    kv_threshold: f64,
    #[serde(default)]
    headroom: f64,
}

fn default_qd() -> f64 {
    5.0
}
fn default_kv() -> f64 {
    0.8
}

/// llm-d's `utilization-detector` in its filter role: keeps instances with
/// queue depth < QD·(1 + headroom) and KV utilisation < KV·(1 + headroom);
/// when that keeps none, keeps every candidate.
pub struct Unsaturated {
    queue_limit: f64,
    kv_limit: f64,
}

impl PolicyDef for Unsaturated {
    const NAME: &'static str = "unsaturated";
    const SUMMARY: &'static str =
        "keep instances below the utilization detector's thresholds, or all when none is (llm-d's utilization-detector as a filter)";
    const PARAMS_DOC: &'static str = "\
queue_depth_threshold  (float > 0, default 5)  wait-queue depth QD
kv_threshold           (float in (0, 1], default 0.8)  KV utilisation KV
headroom               (float ≥ 0, default 0)  h: keep queue_depth < QD·(1 + h) and
                       kv_utilization < KV·(1 + h); none kept → every candidate.";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: UtilizationParams = params.parse()?;
        if !(p.queue_depth_threshold.is_finite() && p.queue_depth_threshold > 0.0) {
            return Err(format!(
                "params.queue_depth_threshold = {}: must be a finite number > 0",
                p.queue_depth_threshold
            ));
        }
        if !(p.kv_threshold > 0.0 && p.kv_threshold <= 1.0) {
            return Err(format!(
                "params.kv_threshold = {}: must be in (0, 1]",
                p.kv_threshold
            ));
        }
        if !(p.headroom.is_finite() && p.headroom >= 0.0) {
            return Err(format!(
                "params.headroom = {}: must be a finite number ≥ 0",
                p.headroom
            ));
        }
        Ok(Unsaturated {
            queue_limit: p.queue_depth_threshold * (1.0 + p.headroom),
            kv_limit: p.kv_threshold * (1.0 + p.headroom),
        })
    }
}

impl blis_plugin_api::Filter for Unsaturated {
    fn filter(&mut self, _: &RequestView<'_>, cluster: &ClusterState<'_>, keep: &mut Kept) {
        let snaps = cluster.instances();
        for &i in cluster.candidates() {
            let s = &snaps[i as usize];
            if f64::from(s.queue_depth) < self.queue_limit && s.kv_utilization < self.kv_limit {
                keep.push(i);
            }
        }
        if keep.is_empty() {
            for &i in cluster.candidates() {
                keep.push(i);
            }
        }
    }
}

/// One condition of [`Utilization`]: drop an instance whose `metric` is
/// above `max`.
#[derive(Deserialize)]
#[serde(crate = "blis_plugin_api::serde", deny_unknown_fields)]
struct Condition {
    metric: String,
    max: f64,
}

#[derive(Deserialize)]
#[serde(crate = "blis_plugin_api::serde", deny_unknown_fields)]
struct UtilizationFilterParams {
    #[serde(default)]
    conditions: Vec<Condition>,
    #[serde(default)]
    fallback_on_empty: bool,
}

/// What a [`Utilization`] condition reads.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Metric {
    /// Requests routed to the instance and not finished (the router's own
    /// count, live: llm-d's EPP in-flight count).
    ActiveRequests,
    /// Requests in the running batch (the snapshot).
    RunningRequests,
    /// Requests in the wait queue (the snapshot).
    WaitingQueue,
    /// KV utilisation in [0, 1] (the snapshot).
    KvCacheUtilization,
}

/// llm-d's `utilization-filter`: drops an instance when any condition's
/// metric exceeds its maximum; with `fallback_on_empty`, keeps every
/// candidate when that drops them all.
pub struct Utilization {
    conditions: Vec<(Metric, f64)>,
    fallback_on_empty: bool,
}

impl PolicyDef for Utilization {
    const NAME: &'static str = "utilization";
    const SUMMARY: &'static str =
        "drop instances whose load metric exceeds a maximum (llm-d's utilization-filter)";
    const PARAMS_DOC: &'static str = "\
conditions         (array of { metric, max }, at least one)  drop an instance when any
                   metric is above its max: active-requests (routed, not finished:
                   live), running-requests (batch size), waiting-queue (queue depth),
                   kv-cache-utilization (in [0, 1], so max ≤ 1); max ≥ 0.
fallback_on_empty  (bool, default false)  keep every candidate when all are dropped.";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: UtilizationFilterParams = params.parse()?;
        if p.conditions.is_empty() {
            return Err("params.conditions is empty: give at least one { metric, max }".into());
        }
        let mut conditions = Vec::with_capacity(p.conditions.len());
        for (k, c) in p.conditions.iter().enumerate() {
            let metric = match c.metric.as_str() {
                "active-requests" => Metric::ActiveRequests,
                "running-requests" => Metric::RunningRequests,
                "waiting-queue" => Metric::WaitingQueue,
                "kv-cache-utilization" => Metric::KvCacheUtilization,
                other => {
                    return Err(format!(
                        "params.conditions[{k}].metric = \"{other}\": not a metric (active-requests, running-requests, waiting-queue, kv-cache-utilization)"
                    ))
                }
            };
            let kv = metric == Metric::KvCacheUtilization;
            if !(c.max.is_finite() && c.max >= 0.0 && (!kv || c.max <= 1.0)) {
                return Err(format!(
                    "params.conditions[{k}].max = {}: must be ≥ 0{}",
                    c.max,
                    if kv {
                        " and ≤ 1 for kv-cache-utilization"
                    } else {
                        ""
                    }
                ));
            }
            conditions.push((metric, c.max));
        }
        Ok(Utilization {
            conditions,
            fallback_on_empty: p.fallback_on_empty,
        })
    }
}

impl blis_plugin_api::Filter for Utilization {
    fn filter(&mut self, _: &RequestView<'_>, cluster: &ClusterState<'_>, keep: &mut Kept) {
        let snaps = cluster.instances();
        let info = cluster.info();
        for &i in cluster.candidates() {
            let s = &snaps[i as usize];
            let over = self.conditions.iter().any(|&(m, max)| {
                let v = match m {
                    Metric::ActiveRequests => {
                        info.get(i as usize).map_or(0.0, |x| f64::from(x.in_flight))
                    }
                    Metric::RunningRequests => f64::from(s.batch_size),
                    Metric::WaitingQueue => f64::from(s.queue_depth),
                    Metric::KvCacheUtilization => s.kv_utilization,
                };
                v > max
            });
            if !over {
                keep.push(i);
            }
        }
        if keep.is_empty() && self.fallback_on_empty {
            for &i in cluster.candidates() {
                keep.push(i);
            }
        }
    }
}

#[cfg(test)]
mod params_doc_tests {
    use super::*;

    /// `PARAMS_DOC` documents exactly the keys of the params struct.
    #[test]
    fn params_docs_match_the_params_structs() {
        blis_plugin_api::check_params_doc::<QueueParams>(LowQueue::PARAMS_DOC).unwrap();
        blis_plugin_api::check_params_doc::<KvParams>(LowKvUtilization::PARAMS_DOC).unwrap();
        blis_plugin_api::check_params_doc::<UtilizationParams>(Unsaturated::PARAMS_DOC).unwrap();
        blis_plugin_api::check_params_doc::<UtilizationFilterParams>(Utilization::PARAMS_DOC)
            .unwrap();
    }

    /// Conditions waiting-queue ≤ 2 and active-requests ≤ 3 over four
    /// instances (queues 2, 3, 0, 1; in flight 3, 1, 4, 0): instance 1's
    /// queue and instance 2's in-flight count are over, so 0 and 3 stay.
    /// With every candidate over, none stays, unless fallback_on_empty.
    #[test]
    fn utilization_drops_instances_over_any_condition() {
        use blis_plugin_api::testing::Fixture;
        use blis_plugin_api::Filter;
        let p = "conditions = [{ metric = \"waiting-queue\", max = 2 }, { metric = \"active-requests\", max = 3 }]";
        let mut f = Utilization::create(Params::new(p), 0).unwrap();
        let mut fx = Fixture::idle(4).queue_depths(&[2, 3, 0, 1]);
        for (x, n) in fx.info.iter_mut().zip([3, 1, 4, 0]) {
            x.in_flight = n;
        }
        let mut kept = Kept::new();
        f.filter(&fx.request(0), &fx.state(), &mut kept);
        assert_eq!(kept.as_slice(), &[0, 3]);
        let fx = fx.candidates(&[1, 2]);
        let mut kept = Kept::new();
        f.filter(&fx.request(0), &fx.state(), &mut kept);
        assert!(kept.as_slice().is_empty());
        let p = format!("{p}\nfallback_on_empty = true");
        let mut f = Utilization::create(Params::new(&p), 0).unwrap();
        let mut kept = Kept::new();
        f.filter(&fx.request(0), &fx.state(), &mut kept);
        assert_eq!(kept.as_slice(), &[1, 2]);
        // kv ≤ 1, a known metric, at least one condition.
        for (bad, says) in [
            (
                "conditions = [{ metric = \"kv-cache-utilization\", max = 1.5 }]",
                "≤ 1",
            ),
            (
                "conditions = [{ metric = \"gpu\", max = 1 }]",
                "not a metric",
            ),
            ("conditions = []", "at least one"),
        ] {
            let e = Utilization::create(Params::new(bad), 0).err().unwrap();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    /// QD 4, KV 0.5, headroom 0.5: limits 6 and 0.75 (strict). Queues
    /// 5, 6, 0, 1 with KV 0.1, 0.1, 0.8, 0.74 keep instances 0 and 3; when
    /// every candidate is over, all of them are kept.
    #[test]
    fn unsaturated_keeps_instances_below_the_detector_limits_or_all() {
        use blis_plugin_api::testing::Fixture;
        use blis_plugin_api::Filter;
        let p = "queue_depth_threshold = 4.0\nkv_threshold = 0.5\nheadroom = 0.5";
        let mut f = Unsaturated::create(Params::new(p), 0).unwrap();
        let fx = Fixture::idle(4)
            .queue_depths(&[5, 6, 0, 1])
            .kv_utilizations(&[0.1, 0.1, 0.8, 0.74]);
        let mut kept = Kept::new();
        f.filter(&fx.request(0), &fx.state(), &mut kept);
        assert_eq!(kept.as_slice(), &[0, 3]);
        let fx = fx.candidates(&[1, 2]);
        let mut kept = Kept::new();
        f.filter(&fx.request(0), &fx.state(), &mut kept);
        assert_eq!(kept.as_slice(), &[1, 2]);
        assert!(Unsaturated::create(Params::new("headroom = -1.0"), 0).is_err());
    }
}

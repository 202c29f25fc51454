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

#[cfg(test)]
mod params_doc_tests {
    use super::*;

    /// `PARAMS_DOC` documents exactly the keys of the params struct.
    #[test]
    fn params_docs_match_the_params_structs() {
        blis_plugin_api::check_params_doc::<QueueParams>(LowQueue::PARAMS_DOC).unwrap();
        blis_plugin_api::check_params_doc::<KvParams>(LowKvUtilization::PARAMS_DOC).unwrap();
        blis_plugin_api::check_params_doc::<UtilizationParams>(Unsaturated::PARAMS_DOC).unwrap();
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

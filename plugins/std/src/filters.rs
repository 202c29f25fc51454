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

#[cfg(test)]
mod params_doc_tests {
    use super::*;

    /// `PARAMS_DOC` documents exactly the keys of the params struct.
    #[test]
    fn params_docs_match_the_params_structs() {
        blis_plugin_api::check_params_doc::<QueueParams>(LowQueue::PARAMS_DOC).unwrap();
        blis_plugin_api::check_params_doc::<KvParams>(LowKvUtilization::PARAMS_DOC).unwrap();
    }
}

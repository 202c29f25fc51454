//! Autoscalers (ABI 0.2, kind `autoscaler`): the scaling decision of every
//! tick. `kv-saturation` is the reference's KV supply/demand analyzer (its
//! "V2 saturation analyzer" with the unlimited optimizer, for one variant:
//! blis fleets are homogeneous).

use blis_plugin_api::serde::Deserialize;
use blis_plugin_api::{Autoscaler, ClusterState, InstanceState, Params, PolicyDef};

#[derive(Deserialize)]
#[serde(crate = "blis_plugin_api::serde", deny_unknown_fields)]
struct KvSaturationParams {
    #[serde(default = "d_kv")]
    kv_cache_threshold: f64,
    #[serde(default = "d_up")]
    scale_up_threshold: f64,
    #[serde(default = "d_down")]
    scale_down_boundary: f64,
    #[serde(default = "d_avg")]
    avg_input_tokens: f64,
}

fn d_kv() -> f64 {
    0.8
}
fn d_up() -> f64 {
    0.8
}
fn d_down() -> f64 {
    0.4
}
fn d_avg() -> f64 {
    512.0
}

/// The reference's KV supply/demand analyzer.
///
/// Per routable (active or warming-up) instance with KV capacity:
/// `supply = kv_capacity_tokens × kv_cache_threshold`,
/// `demand = kv_tokens_in_use + queue_depth × avg_input_tokens`. Loading and
/// pending instances add `kv_capacity_tokens × kv_cache_threshold` of
/// pending supply.
///
/// * `required = demand / scale_up_threshold − (supply + pending)`; if > 0,
///   add `max(1, ceil(required / (supply / replicas)))` instances;
/// * else with more than one replica, `spare = supply − demand /
///   scale_down_boundary`; if `spare > 0` and removing the largest replica
///   still leaves `supply − max_replica_supply > demand /
///   scale_down_boundary`, remove `clamp(floor(spare / (supply /
///   replicas)), 1, replicas)`;
/// * no replica: no decision (no scale-up from zero).
pub struct KvSaturation {
    kv_cache_threshold: f64,
    scale_up_threshold: f64,
    scale_down_boundary: f64,
    avg_input_tokens: f64,
}

impl PolicyDef for KvSaturation {
    const NAME: &'static str = "kv-saturation";
    const SUMMARY: &'static str =
        "the reference's KV supply/demand analyzer: scale up when demand nears supply, down when supply is spare";
    const PARAMS_DOC: &'static str = "\
kv_cache_threshold   (float in (0, 1], default 0.8)  usable fraction of each instance's KV capacity (supply).
scale_up_threshold   (float > 0, default 0.8)  scale up when demand / scale_up_threshold exceeds supply + pending supply.
scale_down_boundary  (float > 0 and < scale_up_threshold, default 0.4)  scale down while supply exceeds demand / scale_down_boundary.
avg_input_tokens     (float > 0, tokens, default 512)  KV demand counted per queued request.";

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: KvSaturationParams = params.parse()?;
        let finite_pos = |k: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("params.{k} = {v}: must be a finite number > 0"))
            }
        };
        if !(p.kv_cache_threshold > 0.0 && p.kv_cache_threshold <= 1.0) {
            return Err(format!(
                "params.kv_cache_threshold = {}: must be in (0, 1]",
                p.kv_cache_threshold
            ));
        }
        finite_pos("scale_up_threshold", p.scale_up_threshold)?;
        finite_pos("scale_down_boundary", p.scale_down_boundary)?;
        finite_pos("avg_input_tokens", p.avg_input_tokens)?;
        if p.scale_down_boundary >= p.scale_up_threshold {
            return Err(format!(
                "params.scale_down_boundary = {} must be below params.scale_up_threshold = {}",
                p.scale_down_boundary, p.scale_up_threshold
            ));
        }
        Ok(KvSaturation {
            kv_cache_threshold: p.kv_cache_threshold,
            scale_up_threshold: p.scale_up_threshold,
            scale_down_boundary: p.scale_down_boundary,
            avg_input_tokens: p.avg_input_tokens,
        })
    }
}

impl Autoscaler for KvSaturation {
    fn decide(&mut self, cluster: &ClusterState<'_>) -> i32 {
        let (mut supply, mut demand, mut pending, mut max_supply) = (0.0, 0.0, 0.0, 0.0f64);
        let mut replicas = 0u32;
        for (snap, info) in cluster.instances().iter().zip(cluster.info()) {
            let cap = info.kv_capacity_tokens as f64 * self.kv_cache_threshold;
            if info.state.is_routable() && info.kv_capacity_tokens > 0 {
                replicas += 1;
                supply += cap;
                max_supply = max_supply.max(cap);
                demand += info.kv_tokens_in_use as f64
                    + f64::from(snap.queue_depth) * self.avg_input_tokens;
            } else if info.state == InstanceState::LOADING || info.state == InstanceState::PENDING {
                pending += cap;
            }
        }
        if replicas == 0 {
            return 0;
        }
        let per_replica = supply / f64::from(replicas);
        let required = demand / self.scale_up_threshold - (supply + pending);
        if required > 0.0 {
            let n = if per_replica > 0.0 {
                (required / per_replica).ceil().max(1.0)
            } else {
                1.0
            };
            return n.min(f64::from(i32::MAX)) as i32;
        }
        if replicas <= 1 {
            return 0;
        }
        let floor = demand / self.scale_down_boundary;
        let spare = supply - floor;
        if spare > 0.0 && supply - max_supply > floor {
            let n = (spare / per_replica)
                .floor()
                .clamp(1.0, f64::from(replicas));
            return -(n as i32);
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_plugin_api::testing::Fixture;

    fn kv() -> KvSaturation {
        KvSaturation::create(Params::new(""), 0).unwrap()
    }

    #[test]
    fn scale_up_by_hand() {
        // Two active instances of 10,000 KV tokens: supply = 2 × 8,000 =
        // 16,000. Demand = 7,000 + 2 × 512 + 6,000 + 4 × 512 = 16,072.
        // required = 16,072 / 0.8 − 16,000 = 4,090 → ceil(4,090 / 8,000) = 1.
        let f = Fixture::idle(2)
            .kv_tokens(&[(10_000, 7_000), (10_000, 6_000)])
            .queue_depths(&[2, 4]);
        assert_eq!(kv().decide(&f.state()), 1);
        // Queues of 20 each: demand = 13,000 + 40 × 512 = 33,480;
        // required = 41,850 − 16,000 = 25,850 → ceil(3.23) = 4.
        let f = f.queue_depths(&[20, 20]);
        assert_eq!(kv().decide(&f.state()), 4);
        // A loading instance of 10,000 tokens adds 8,000 of pending supply:
        // required = 41,850 − 24,000 = 17,850 → 3.
        let f = Fixture::idle(3)
            .kv_tokens(&[(10_000, 7_000), (10_000, 6_000), (10_000, 0)])
            .queue_depths(&[20, 20, 0])
            .states(&[
                InstanceState::ACTIVE,
                InstanceState::ACTIVE,
                InstanceState::LOADING,
            ]);
        assert_eq!(kv().decide(&f.state()), 3);
    }

    #[test]
    fn scale_down_by_hand_and_never_below_one_replica_or_from_zero() {
        // Four idle-ish instances: supply 32,000; demand 1,000 → floor =
        // 2,500; spare = 29,500; supply − 8,000 > 2,500 → floor(29,500 /
        // 8,000) = 3 removed.
        let f =
            Fixture::idle(4).kv_tokens(&[(10_000, 1_000), (10_000, 0), (10_000, 0), (10_000, 0)]);
        assert_eq!(kv().decide(&f.state()), -3);
        // Demand 5,000 → floor 12,500, spare 19,500 → 2.
        let f =
            Fixture::idle(4).kv_tokens(&[(10_000, 5_000), (10_000, 0), (10_000, 0), (10_000, 0)]);
        assert_eq!(kv().decide(&f.state()), -2);
        // One replica: never scaled down.
        let f = Fixture::idle(1).kv_tokens(&[(10_000, 0)]);
        assert_eq!(kv().decide(&f.state()), 0);
        // Terminated and draining instances are not replicas; no replica → 0.
        let f = Fixture::idle(2)
            .kv_tokens(&[(10_000, 0), (10_000, 9_000)])
            .queue_depths(&[0, 50])
            .states(&[InstanceState::TERMINATED, InstanceState::DRAINING]);
        assert_eq!(kv().decide(&f.state()), 0);
    }

    #[test]
    fn thresholds_out_of_range_are_errors_naming_the_key() {
        for (toml, key) in [
            ("kv_cache_threshold = 1.5", "kv_cache_threshold"),
            ("kv_cache_threshold = 0.0", "kv_cache_threshold"),
            ("scale_up_threshold = -1.0", "scale_up_threshold"),
            ("scale_down_boundary = 0.9", "scale_down_boundary"),
            ("avg_input_tokens = 0.0", "avg_input_tokens"),
        ] {
            let e = KvSaturation::create(Params::new(toml), 0)
                .err()
                .unwrap_or_else(|| panic!("{toml} accepted"));
            assert!(e.contains(key), "{toml}: {e}");
        }
    }
}

//! # blis-std — the standard blis policies, as a plugin library
//!
//! Every policy the cluster architecture names, built against
//! `blis-plugin-api` only, exactly like a third-party plugin:
//!
//! * admission: `always-admit`, `token-bucket`, `reject-all`, and the
//!   reference's load shedding `tier-shed`, `gaie-legacy`, and llm-d's
//!   `probabilistic` ([`admission`]);
//! * routing: `round-robin`, `least-loaded`, `prefix-affinity`,
//!   `always-busiest` ([`routing`]);
//! * scorers for the host's weighted router: `prefix-affinity`,
//!   `queue-depth`, `kv-utilization`, `load-balance`, and the reference's
//!   newer `running-requests`, `load-aware`, `vllm-dp`, `active-requests`,
//!   llm-d's `waiting-queue`, `lora-affinity` (through the host's LoRA
//!   queries) ([`scorers`]), and `precise-prefix-cache`, `no-hit-lru`,
//!   which read the host's prefix-cache query ([`cache_scorers`]);
//! * filters of a routing profile: `low-queue`, `low-kv-utilization`,
//!   `unsaturated` (llm-d's utilization-detector as a filter),
//!   `utilization` (llm-d's utilization-filter)
//!   ([`filters`]);
//! * llm-d's predicted-latency routing: the `latency` scorer, the
//!   `slo-headroom-tier` and `prefix-cache-affinity` filters and the
//!   `latency-slo` admission, each with an online-trained latency predictor
//!   ([`predicted_latency`]);
//! * pickers of a routing profile: `max-score`, `random`,
//!   `weighted-random` ([`pickers`]);
//! * wait-queue orders of an instance: `fcfs`, `priority-fcfs`, `sjf`,
//!   `reverse-priority`, and preemption victims `fcfs`, `priority`
//!   ([`schedulers`]);
//! * the autoscaler `kv-saturation` ([`autoscalers`]).
//!
//! The crate builds as `cdylib` (`libblis_std.so`, loadable with
//! `--plugin`) and as `rlib` (linked into the `blis` binary so a bare
//! `blis run` needs no files). Both paths call the policies through the same
//! ABI types, so they give byte-identical results.
//!
//! Effective load, used by every load-based policy, is
//! `queue_depth + batch_size + pending_requests`
//! ([`InstanceSnapshot::effective_load`](blis_plugin_api::InstanceSnapshot::effective_load)).

pub mod admission;
pub mod autoscalers;
pub mod cache_scorers;
pub mod filters;
pub mod pickers;
pub mod predicted_latency;
mod prefix_index;
pub mod routing;
pub mod schedulers;
pub mod scorers;
pub mod session_affinity;
pub mod token_load;

use admission::{
    AlwaysAdmit, ConcurrencyShed, GaieLegacy, Probabilistic, RejectAll, TierShed, TokenBucket,
};
use autoscalers::KvSaturation;
use cache_scorers::{NoHitLru, PrecisePrefixCache};
use filters::{LowKvUtilization, LowQueue, Unsaturated, Utilization};
use pickers::{MaxScore, RandomPick, WeightedRandom};
use predicted_latency::{Latency, LatencySlo, PrefixCacheAffinity, SloHeadroomTier};
use routing::{AlwaysBusiest, LeastLoaded, PrefixAffinityRouter, RoundRobin};
use schedulers::{Fcfs, PreemptLowestPriority, PreemptTail, PriorityFcfs, ReversePriority, Sjf};
use scorers::{
    ActiveRequests, Constant, KvUtilization, LoadAware, LoadBalance, LoraAffinity,
    PrefixAffinityScorer, QueueDepth, RunningRequests, VllmDp, WaitingQueue,
};
use session_affinity::{SessionAffinityFilter, SessionAffinityScorer};
use token_load::{InFlightLimit, TokenLoad};

blis_plugin_api::export_plugin! {
    library: "blis-std",
    admission: [
        AlwaysAdmit,
        TokenBucket,
        RejectAll,
        TierShed,
        GaieLegacy,
        Probabilistic,
        LatencySlo,
        ConcurrencyShed,
    ],
    routers: [RoundRobin, LeastLoaded, PrefixAffinityRouter, AlwaysBusiest],
    scorers: [
        PrefixAffinityScorer,
        QueueDepth,
        KvUtilization,
        LoadBalance,
        RunningRequests,
        LoadAware,
        VllmDp,
        ActiveRequests,
        PrecisePrefixCache,
        NoHitLru,
        WaitingQueue,
        LoraAffinity,
        TokenLoad,
        SessionAffinityScorer,
        Latency,
        Constant,
    ],
    filters: [
        LowQueue,
        LowKvUtilization,
        Unsaturated,
        Utilization,
        SessionAffinityFilter,
        SloHeadroomTier,
        PrefixCacheAffinity,
        InFlightLimit,
    ],
    pickers: [MaxScore, RandomPick, WeightedRandom],
    schedulers: [Fcfs, PriorityFcfs, Sjf, ReversePriority],
    preemption: [PreemptTail, PreemptLowestPriority],
    autoscalers: [KvSaturation],
}

#[cfg(test)]
pub(crate) mod testutil {
    use blis_plugin_api::abi_stable::std_types::{RSlice, RStr};
    use blis_plugin_api::{ClusterView, InstanceSnapshot, RequestView, SloClass};

    /// A snapshot with the given effective-load parts and KV utilisation.
    pub fn snap(queue: u32, batch: u32, pending: u32, kv: f64) -> InstanceSnapshot {
        InstanceSnapshot {
            queue_depth: queue,
            batch_size: batch,
            pending_requests: pending,
            kv_utilization: kv,
            ..Default::default()
        }
    }

    pub fn cluster(clock_us: i64, snaps: &[InstanceSnapshot]) -> ClusterView<'_> {
        ClusterView {
            clock_us,
            instances: RSlice::from_slice(snaps),
        }
    }

    pub fn request(id: u64, input_tokens: u32, hashes: &[u64]) -> RequestView<'_> {
        RequestView {
            id,
            arrival_us: 0,
            input_tokens,
            slo_class: SloClass::STANDARD,
            tenant: RStr::from(""),
            block_hashes: RSlice::from_slice(hashes),
        }
    }
}

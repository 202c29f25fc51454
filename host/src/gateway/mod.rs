//! Traffic control in front of routing: tenant budgets (`[tenants]`,
//! [`tenants`]) and the gateway queue.
//!
//! The gateway queue (`[flow_control]`): admitted requests wait here, in
//! priority bands and per-tenant flows ([`bands`]), until the cluster's
//! saturation signal lets their band dispatch them to routing.
//!
//! With `in_flight_eviction`, a saturated cluster with a non-sheddable
//! request waiting evicts a dispatched sheddable one instead ([`eviction`]).
//!
//! ```text
//! admission ─► enqueue ─┬─ rejected (band full / queue full)   ─► counted rejected
//!                       ├─ accepted (+ a sheddable victim shed) ─► counted rejected
//!                       ▼
//!          bands: critical │ standard │ batch │ sheddable │ background
//!                       │  (TTL expiry ─► counted rejected)
//!   dispatch attempt ◄──┘  after an admission, a completion, or a tick
//!   (one request, gated by saturation) ─► routing
//! ```
//!
//! The cluster owns the timers and calls the gateway only when the run has
//! `[flow_control]`; without it nothing here exists. The saturation signal
//! is instantaneous, over every instance, and counts the requests the
//! gateway dispatched that routing has not placed yet (`in_transit`, spread
//! evenly), so requests dispatched at the same instant see each other:
//! `utilization` = mean of max((queue depth + pending + in_transit / N) /
//! queue_depth_threshold, KV utilisation / kv_threshold); `concurrency` =
//! (Σ in flight + in_transit) / (N × max_concurrency); `never` = 0.

mod bands;
mod eviction;
mod tenants;

pub use bands::{BandQueue, Enqueued, Fairness, Las, BANDS, FIRST_SHEDDABLE};
pub use eviction::Eviction;
pub use tenants::TenantBudgets;

use blis_plugin_api::InstanceSnapshot;

use crate::engine::Tick;

/// The saturation signal gating dispatch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Detector {
    /// Never saturated: every attempt dispatches.
    Never,
    Utilization {
        queue_depth: f64,
        kv: f64,
    },
    Concurrency {
        max_per_instance: f64,
    },
    /// llm-d's concurrency detector in `tokens` mode: the router's
    /// in-flight tokens over `max_tokens` per instance; `hybrid`: per
    /// instance the larger of that ratio and requests over this many.
    Tokens {
        max_tokens: f64,
        hybrid: Option<f64>,
    },
}

impl Detector {
    /// Whether the signal reads the router's in-flight tokens.
    pub fn counts_tokens(&self) -> bool {
        matches!(self, Detector::Tokens { .. })
    }

    /// The signal over `snaps` with `in_flight` requests and `tokens`
    /// router in-flight tokens per instance (empty unless
    /// [`Detector::counts_tokens`]) and `in_transit` requests dispatched by
    /// the gateway and not routed yet (counted as spread evenly over the
    /// instances; they carry no tokens yet: llm-d charges them when it has
    /// picked their endpoint), 1 when there is no instance.
    pub fn saturation(
        &self,
        snaps: &[InstanceSnapshot],
        in_flight: &[u32],
        tokens: &[u64],
        in_transit: u64,
    ) -> f64 {
        if snaps.is_empty() {
            return 1.0;
        }
        let n = snaps.len() as f64;
        let transit = in_transit as f64;
        match *self {
            Detector::Never => 0.0,
            Detector::Utilization { queue_depth, kv } => {
                snaps
                    .iter()
                    .map(|s| {
                        let q =
                            f64::from(s.queue_depth) + f64::from(s.pending_requests) + transit / n;
                        (q / queue_depth).max(s.kv_utilization / kv)
                    })
                    .sum::<f64>()
                    / n
            }
            Detector::Concurrency { max_per_instance } => {
                let total: u64 = in_flight.iter().map(|&x| u64::from(x)).sum();
                (total as f64 + transit) / (n * max_per_instance)
            }
            Detector::Tokens { max_tokens, hybrid } => {
                let tok = |i: usize| tokens.get(i).copied().unwrap_or(0) as f64 / max_tokens;
                match hybrid {
                    None => (0..snaps.len()).map(tok).sum::<f64>() / n,
                    Some(max_req) => {
                        (0..snaps.len())
                            .map(|i| {
                                let r = (f64::from(in_flight.get(i).copied().unwrap_or(0))
                                    + transit / n)
                                    / max_req;
                                r.max(tok(i))
                            })
                            .sum::<f64>()
                            / n
                    }
                }
            }
        }
    }
}

/// The gateway's counters, reported under `cluster.flow_control`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatewayCounts {
    /// Requests accepted into the queue.
    pub queued: u64,
    /// Requests the queue refused (band or queue full).
    pub rejected: u64,
    /// Queued sheddable requests removed for a more important newcomer.
    pub shed: u64,
    /// Queued requests whose TTL ran out.
    pub expired: u64,
    /// Requests handed to routing.
    pub dispatched: u64,
    /// Dispatched sheddable requests removed from their instance for a
    /// waiting non-sheddable one (in-flight eviction).
    pub evicted: u64,
    /// Largest queue depth seen.
    pub peak_depth: u64,
}

/// The gateway queue with its settings and counters.
#[derive(Debug)]
pub struct Gateway {
    pub queue: BandQueue,
    pub detector: Detector,
    /// Queued requests expire this long after they were queued.
    pub ttl: Option<Tick>,
    /// Dispatch attempts this far apart while the queue is not empty.
    pub tick: Tick,
    /// A dispatch tick is scheduled.
    pub tick_pending: bool,
    /// Requests dispatched and not routed yet (routing latency).
    pub in_transit: u64,
    /// Rank of each tenant index in name order (the flow order).
    pub tenant_rank: Vec<usize>,
    pub counts: GatewayCounts,
    /// In-flight eviction of sheddable requests, when on.
    pub eviction: Option<Eviction>,
}

impl Gateway {
    /// Tenant ranks by name for the workload's tenant names.
    pub fn ranks(tenant_names: &[String]) -> Vec<usize> {
        let mut order: Vec<usize> = (0..tenant_names.len()).collect();
        order.sort_by(|&a, &b| tenant_names[a].cmp(&tenant_names[b]).then(a.cmp(&b)));
        let mut rank = vec![0; tenant_names.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i] = r;
        }
        rank
    }

    /// The flow of tenant index `tenant`.
    pub fn flow(&self, tenant: u32) -> usize {
        self.tenant_rank
            .get(tenant as usize)
            .copied()
            .unwrap_or(tenant as usize)
    }

    /// Count an enqueue outcome.
    pub fn count(&mut self, outcome: Enqueued) {
        match outcome {
            Enqueued::Accepted => self.counts.queued += 1,
            Enqueued::AcceptedShed(_) => {
                self.counts.queued += 1;
                self.counts.shed += 1;
            }
            Enqueued::Rejected => self.counts.rejected += 1,
        }
        self.counts.peak_depth = self.counts.peak_depth.max(self.queue.depth());
    }

    /// A non-sheddable request waits in the queue.
    pub fn non_sheddable_waiting(&self) -> bool {
        (0..FIRST_SHEDDABLE).any(|b| self.queue.band_len(b) > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(queue: u32, pending: u32, kv: f64) -> InstanceSnapshot {
        InstanceSnapshot {
            queue_depth: queue,
            pending_requests: pending,
            kv_utilization: kv,
            batch_size: 99,
            ..Default::default()
        }
    }

    #[test]
    fn saturation_signals_by_hand() {
        let snaps = [snap(3, 1, 0.2), snap(0, 0, 0.9)];
        let u = Detector::Utilization {
            queue_depth: 5.0,
            kv: 0.8,
        };
        // max(4/5, 0.25) = 0.8 and max(0, 0.9/0.8 = 1.125) → mean 0.9625.
        assert!((u.saturation(&snaps, &[0, 0], &[], 0) - 0.9625).abs() < 1e-12);
        // 2 in transit: one more per instance: max(5/5, ·) = 1, max(1/5, 1.125) → 1.0625.
        assert!((u.saturation(&snaps, &[0, 0], &[], 2) - 1.0625).abs() < 1e-12);
        let c = Detector::Concurrency {
            max_per_instance: 10.0,
        };
        assert_eq!(c.saturation(&snaps, &[7, 8], &[], 0), 0.75);
        assert_eq!(c.saturation(&snaps, &[7, 8], &[], 1), 0.8);
        assert_eq!(Detector::Never.saturation(&snaps, &[7, 8], &[], 5), 0.0);
        assert_eq!(u.saturation(&[], &[], &[], 0), 1.0);
        // Tokens: (300 + 100)/(2·1000) = 0.2; hybrid over 10 requests:
        // max(7/10, 0.3) and max(8/10, 0.1) → 0.75; 2 in transit add one
        // request each: max(0.8, ·), max(0.9, ·) → 0.85.
        let t = Detector::Tokens {
            max_tokens: 1000.0,
            hybrid: None,
        };
        assert!((t.saturation(&snaps, &[7, 8], &[300, 100], 0) - 0.2).abs() < 1e-12);
        let h = Detector::Tokens {
            max_tokens: 1000.0,
            hybrid: Some(10.0),
        };
        assert!((h.saturation(&snaps, &[7, 8], &[300, 100], 0) - 0.75).abs() < 1e-12);
        assert!((h.saturation(&snaps, &[7, 8], &[300, 100], 2) - 0.85).abs() < 1e-12);
    }

    #[test]
    fn tenant_flows_follow_name_order() {
        let names: Vec<String> = ["zeta", "", "acme"].iter().map(|s| s.to_string()).collect();
        assert_eq!(Gateway::ranks(&names), vec![2, 0, 1]);
    }
}

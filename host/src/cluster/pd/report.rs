//! What a P/D run hands to the report (the JSON is `metrics::pd_report`'s).

use super::{PdState, PoolInfo, TransferCounts};

/// End-of-run P/D counts.
#[derive(Debug)]
pub struct PdReport {
    pub pools: Vec<PoolInfo>,
    pub decider: String,
    pub contention: bool,
    /// Requests the decider sent to a prefill instance.
    pub disaggregated: u64,
    /// Requests whose decode instance could not reserve their prompt's KV
    /// (also in that instance's `dropped_unservable`).
    pub dropped_at_decode_kv: u64,
    pub transfers: TransferCounts,
    /// Per instance: prefill legs handed off.
    pub handoffs: Vec<u64>,
    /// Per instance: requests received by transfer (or dropped at reservation).
    pub transfers_in: Vec<u64>,
    /// The encode stage's decider, when the run has an encode pool.
    pub encode_decider: Option<&'static str>,
    /// Per instance: requests whose input it encoded.
    pub encodes: Vec<u64>,
}

impl PdReport {
    pub(super) fn new(pd: PdState) -> Self {
        PdReport {
            decider: pd.setup.decider.name(),
            contention: pd.setup.transfer.contention,
            pools: pd.setup.pools,
            disaggregated: pd.disaggregated,
            dropped_at_decode_kv: pd.dropped_at_decode_kv,
            transfers: pd.transfers,
            handoffs: pd.handoffs,
            transfers_in: pd.transfers_in,
            encode_decider: pd.setup.encode.as_ref().map(|e| e.decider.name()),
            encodes: pd.encodes,
        }
    }

    /// Requests between a hand-off and their decode instance's queue.
    pub fn in_transfer(&self) -> u64 {
        self.handoffs.iter().sum::<u64>() - self.transfers_in.iter().sum::<u64>()
    }

    /// Requests that entered an instance by transfer (counted once more in
    /// the per-instance `injected_requests`, not in the cluster's).
    pub fn transfers_in_total(&self) -> u64 {
        self.transfers_in.iter().sum()
    }
}

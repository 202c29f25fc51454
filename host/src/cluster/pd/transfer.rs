//! The KV transfer between a prefill and a decode instance: its duration
//! (bandwidth, base latency, optional fair-share contention) and the counts
//! the report shows.
//!
//! `bytes = blocks × block_size × kv_bytes_per_token(model, TP)` where
//! `blocks` are the prompt blocks the decode instance does not already hold
//! and the per-token bytes are those of one GPU at the smaller TP of the two
//! instances: each GPU of the narrower side moves its shard over its own link
//! at `bandwidth`, in parallel (with equal TPs this is the reference's
//! "prefill TP" rule). `duration = ⌈base + bytes / bandwidth⌉` µs (never
//! below one µs). With contention, a transfer that starts while k − 1
//! others are in flight gets `bandwidth / k` for its whole duration (the
//! share is frozen at the start).

use crate::engine::Tick;

/// The transfer model of a run.
#[derive(Clone, Debug)]
pub struct TransferModel {
    /// Bytes per µs of one link (`GB/s × 1000`).
    pub bandwidth_bytes_per_us: f64,
    /// Fixed latency of every transfer, µs (fractional).
    pub base_us: f64,
    /// Fair-share contention among concurrent transfers.
    pub contention: bool,
    /// Tokens per KV block.
    pub block_size: u32,
    /// KV bytes of one token at TP 1.
    pub kv_bytes_per_token: f64,
    /// Whether the KV is split across TP ranks (false for a latent KV (MLA),
    /// which every rank holds whole).
    pub split_by_tp: bool,
    /// Tensor parallelism of every instance.
    pub tp: Vec<u32>,
}

/// Transfers in flight and what they added up to.
#[derive(Clone, Debug, Default)]
pub struct TransferCounts {
    pub active: u32,
    pub peak: u32,
    /// Sum over starts of the transfers in flight at that start (itself included).
    pub depth_sum: u64,
    pub started: u64,
    pub completed: u64,
    pub bytes: f64,
    /// Duration of every transfer, µs.
    pub durations: Vec<Tick>,
}

impl TransferModel {
    /// Bytes moved for `blocks` blocks from instance `from` to `to`.
    pub fn bytes(&self, blocks: u32, from: u32, to: u32) -> f64 {
        let tp = self.tp[from as usize].min(self.tp[to as usize]).max(1);
        let per_token = if self.split_by_tp {
            self.kv_bytes_per_token / f64::from(tp)
        } else {
            self.kv_bytes_per_token
        };
        f64::from(blocks) * f64::from(self.block_size) * per_token
    }

    /// Duration of a transfer of `bytes` sharing the link with `sharers`
    /// transfers (itself included; 1 = alone).
    pub fn duration(&self, bytes: f64, sharers: u32) -> Tick {
        let bw = self.bandwidth_bytes_per_us / f64::from(sharers.max(1));
        let t = if bw > 0.0 {
            self.base_us + bytes / bw
        } else {
            self.base_us
        };
        (t.ceil() as Tick).max(1)
    }

    /// Start a transfer of `blocks` blocks from `from` to `to`: its duration.
    pub fn start(&self, counts: &mut TransferCounts, blocks: u32, from: u32, to: u32) -> Tick {
        let bytes = self.bytes(blocks, from, to);
        counts.started += 1;
        counts.bytes += bytes;
        counts.active += 1;
        counts.peak = counts.peak.max(counts.active);
        counts.depth_sum += u64::from(counts.active);
        let sharers = if self.contention { counts.active } else { 1 };
        let d = self.duration(bytes, sharers);
        counts.durations.push(d);
        d
    }

    /// A transfer arrived.
    pub fn finish(counts: &mut TransferCounts) {
        counts.completed += 1;
        counts.active -= 1;
    }
}

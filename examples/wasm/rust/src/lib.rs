//! The policies of `examples/wasm` as a Rust WebAssembly component: the
//! same formulas as blis-std's `token-bucket`, `least-loaded`,
//! `queue-depth`, `kv-utilization`, `prefix-affinity`, `lora-affinity`,
//! `session-affinity` and `low-queue`, so `rust.toml` gives the report
//! `native.toml` gives (and
//! `examples/bench/wasm-64x1m-weighted.toml` the report of
//! `e-64x1m-weighted.toml`; `lora-rust.toml` the report of
//! `examples/lora.toml`), and `header-gate`, an admission policy keyed on
//! a request header. Built by `examples/wasm/build.sh`.

mod prefix_index;

use std::collections::HashMap;

use blis_wasm_guest::lora::{self, Residency};
use blis_wasm_guest::request;
use blis_wasm_guest::{
    Admission, ClusterState, ClusterView, Filter, InstanceSnapshot, Kept, Params, PolicyDef,
    RequestView, Router, Scorer, Scores,
};

/// Rate limiting by prompt tokens with a refilling bucket.
pub struct TokenBucket {
    capacity: f64,
    refill_rate: f64,
    tokens: f64,
    last_refill_us: i64,
}

impl PolicyDef for TokenBucket {
    const NAME: &'static str = "token-bucket";
    const SUMMARY: &'static str = "rate-limit by prompt tokens with a refilling token bucket";
    const PARAMS_DOC: &'static str = "\
capacity     (float, tokens, default 10000)  bucket size; the bucket starts full.
refill_rate  (float, tokens per second of simulated time, default 1000)";

    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.only(&["capacity", "refill_rate"])?;
        let capacity = params.f64_or("capacity", 10_000.0)?;
        let refill_rate = params.f64_or("refill_rate", 1_000.0)?;
        if !(capacity.is_finite() && capacity > 0.0) {
            return Err(format!(
                "params.capacity = {capacity} must be a finite number > 0"
            ));
        }
        if !(refill_rate.is_finite() && refill_rate > 0.0) {
            return Err(format!(
                "params.refill_rate = {refill_rate} must be a finite number > 0 (tokens per second)"
            ));
        }
        Ok(TokenBucket {
            capacity,
            refill_rate,
            tokens: capacity,
            last_refill_us: 0,
        })
    }
}

impl Admission for TokenBucket {
    fn admit(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> bool {
        let elapsed = cluster.clock_us - self.last_refill_us;
        if elapsed > 0 {
            self.tokens =
                (self.tokens + elapsed as f64 * self.refill_rate / 1e6).min(self.capacity);
            self.last_refill_us = cluster.clock_us;
        }
        let cost = f64::from(request.input_tokens);
        if self.tokens >= cost {
            self.tokens -= cost;
            true
        } else {
            false
        }
    }
}

/// The instance with the least effective load (ties: lowest index).
pub struct LeastLoaded;

impl PolicyDef for LeastLoaded {
    const NAME: &'static str = "least-loaded";
    const SUMMARY: &'static str = "instance with the minimum effective load (ties: lowest index)";
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(LeastLoaded)
    }
}

impl Router for LeastLoaded {
    fn route(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>) -> usize {
        let s = cluster.instances();
        let mut best = 0;
        for (i, x) in s.iter().enumerate() {
            if x.effective_load() < s[best].effective_load() {
                best = i;
            }
        }
        best
    }
}

/// Min-max normalised effective load, lower is better.
pub struct QueueDepth;

impl PolicyDef for QueueDepth {
    const NAME: &'static str = "queue-depth";
    const SUMMARY: &'static str = "min-max normalised effective load (lower load → higher score)";
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(QueueDepth)
    }
}

impl Scorer for QueueDepth {
    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        let all: Vec<u32> = (0..cluster.len() as u32).collect();
        min_max_low_is_best(cluster.instances(), &all, scores);
    }

    fn score_candidates(&mut self, _: &RequestView<'_>, c: &ClusterState<'_>, scores: &mut Scores) {
        min_max_low_is_best(c.instances(), c.candidates(), scores);
    }
}

fn min_max_low_is_best(snaps: &[InstanceSnapshot], candidates: &[u32], scores: &mut Scores) {
    let load = |i: u32| snaps[i as usize].effective_load();
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for &i in candidates {
        lo = lo.min(load(i));
        hi = hi.max(load(i));
    }
    for &i in candidates {
        scores.push(if hi == lo {
            1.0
        } else {
            (hi - load(i)) as f64 / (hi - lo) as f64
        });
    }
}

/// `1 − KV utilisation`.
pub struct KvUtilization;

impl PolicyDef for KvUtilization {
    const NAME: &'static str = "kv-utilization";
    const SUMMARY: &'static str = "1 − KV utilisation (less memory pressure → higher score)";
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(KvUtilization)
    }
}

impl Scorer for KvUtilization {
    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        for x in cluster.instances() {
            scores.push(1.0 - x.kv_utilization);
        }
    }
}

/// Fraction of the request's block hashes found in the router-side index
/// of each instance; `observe` records the request's hashes for the chosen
/// instance (blis-std's `prefix-affinity`, the same index).
pub struct PrefixAffinity {
    index: prefix_index::PrefixIndex,
    counts: Vec<u32>,
}

impl PolicyDef for PrefixAffinity {
    const NAME: &'static str = "prefix-affinity";
    const SUMMARY: &'static str =
        "fraction of the request's prefix blocks recently routed to each instance";
    const PARAMS_DOC: &'static str = "\
capacity  (integer ≥ 1, block hashes per instance, default 10000)  size of each
          instance's LRU set in the router-side prefix index.";
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.only(&["capacity"])?;
        let capacity = params.u32_or("capacity", 10_000)?;
        if capacity == 0 {
            return Err("params.capacity must be at least 1".to_string());
        }
        Ok(PrefixAffinity {
            index: prefix_index::PrefixIndex::new(capacity as usize),
            counts: Vec::new(),
        })
    }
}

impl Scorer for PrefixAffinity {
    fn score(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        let hashes = request.block_hashes;
        self.counts.clear();
        self.counts.resize(cluster.len(), 0);
        self.index.count_matches(hashes, &mut self.counts);
        let total = hashes.len();
        for &c in &self.counts {
            scores.push(if total == 0 {
                0.0
            } else {
                f64::from(c) / total as f64
            });
        }
    }

    fn observe(&mut self, request: &RequestView<'_>, _cluster: &ClusterView<'_>, chosen: usize) {
        self.index.record(request.block_hashes, chosen);
    }
}

/// Keeps the candidates whose queue depth is at most `threshold`.
pub struct LowQueue {
    threshold: u32,
}

impl PolicyDef for LowQueue {
    const NAME: &'static str = "low-queue";
    const SUMMARY: &'static str = "keep instances with queue depth ≤ threshold";
    const PARAMS_DOC: &'static str =
        "threshold  (integer ≥ 0, requests, default 128)  keep instances whose queue_depth is at most this.";
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.only(&["threshold"])?;
        Ok(LowQueue {
            threshold: params.u32_or("threshold", 128)?,
        })
    }
}

impl Filter for LowQueue {
    fn filter(&mut self, _: &RequestView<'_>, cluster: &ClusterState<'_>, keep: &mut Kept) {
        let snaps = cluster.instances();
        for &i in cluster.candidates() {
            if snaps[i as usize].queue_depth <= self.threshold {
                keep.push(i);
            }
        }
    }
}

/// blis-std's `lora-affinity`, through the host's LoRA queries: 1 where
/// the request's adapter is resident or loading, 0 elsewhere (all 1 for a
/// base-model request or when every instance agrees).
pub struct LoraAffinity;

impl PolicyDef for LoraAffinity {
    const NAME: &'static str = "lora-affinity";
    const SUMMARY: &'static str =
        "1 where the request's LoRA adapter is resident or loading, else 0 (all 1 when all agree)";
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(LoraAffinity)
    }
}

impl Scorer for LoraAffinity {
    fn score(&mut self, req: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        let n = cluster.len() as u32;
        let adapter = match lora::request_adapter(req) {
            Some(a) => a,
            None => {
                scores.extend((0..n).map(|_| 1.0));
                return;
            }
        };
        let start = scores.len();
        scores.extend((0..n).map(|i| {
            if lora::residency(cluster, i, adapter.index) == Residency::Absent {
                0.0
            } else {
                1.0
            }
        }));
        let mine = &mut scores[start..];
        let first = mine[0];
        if mine.iter().all(|&x| x == first) {
            for x in mine.iter_mut() {
                *x = 1.0;
            }
        }
    }
}

/// blis-std's `session-affinity` scorer (bindings that never expire),
/// through the host's request queries: 1 for the instance the request's
/// session was last routed to, else 0.
pub struct SessionAffinity {
    bound: HashMap<u64, u32>,
}

impl PolicyDef for SessionAffinity {
    const NAME: &'static str = "session-affinity";
    const SUMMARY: &'static str =
        "1 for the instance the request's session was last routed to, else 0";
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(SessionAffinity {
            bound: HashMap::new(),
        })
    }
}

impl Scorer for SessionAffinity {
    fn score(&mut self, req: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        let bound = request::request_session(req).and_then(|s| self.bound.get(&s).copied());
        scores.extend((0..cluster.len() as u32).map(|i| if bound == Some(i) { 1.0 } else { 0.0 }));
    }

    fn observe(&mut self, req: &RequestView<'_>, _cluster: &ClusterView<'_>, chosen: usize) {
        if let Some(s) = request::request_session(req) {
            self.bound.insert(s, chosen as u32);
        }
    }
}

/// Rejects the requests whose client sends the header `header` with the
/// value `value` (say, a tier a deployment turns away under load).
pub struct HeaderGate {
    header: String,
    value: String,
}

impl PolicyDef for HeaderGate {
    const NAME: &'static str = "header-gate";
    const SUMMARY: &'static str = "reject the requests whose client sends header = value";
    const PARAMS_DOC: &'static str = "\
header  (string, required)  the header's name (any case).
value   (string, required)  the value that is rejected.";
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.only(&["header", "value"])?;
        let header = params.str_or("header", "")?;
        let value = params.str_or("value", "")?;
        if header.is_empty() {
            return Err("params.header is required: the header's name".to_string());
        }
        Ok(HeaderGate { header, value })
    }
}

impl Admission for HeaderGate {
    fn admit(&mut self, request: &RequestView<'_>, _cluster: &ClusterView<'_>) -> bool {
        match request::request_header(request, &self.header) {
            Some(v) if v == self.value => {
                blis_wasm_guest::reason(&format!("{}: {v}", self.header));
                false
            }
            _ => true,
        }
    }
}

blis_wasm_guest::export_plugin! {
    library: "wasm-example",
    version: "0.1.0",
    admission: [TokenBucket, HeaderGate],
    routers: [LeastLoaded],
    scorers: [QueueDepth, KvUtilization, PrefixAffinity, LoraAffinity, SessionAffinity],
    filters: [LowQueue],
}

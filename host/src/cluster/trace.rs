//! Decision traces: one JSON line per admission rejection and per routing
//! decision, with counterfactual regret.
//!
//! Regret of a routing decision = best candidate score − chosen score (≥ 0).
//! Candidate scores are the weighted composite for weighted routing, and
//! −(effective load) for a router plugin (so lower load ranks higher).
//! Candidates are ranked by score, ties by instance index.

use std::io::Write;

use blis_plugin_api::InstanceSnapshot;

use crate::engine::Tick;

/// Writes decision records and keeps the regret totals.
pub struct TraceWriter {
    out: Box<dyn Write>,
    k: usize,
    order: Vec<u32>,
    scores: Vec<f64>,
    line: String,
    pub decisions: u64,
    pub regret_sum: f64,
    pub regret_max: f64,
    pub error: Option<std::io::Error>,
}

impl std::fmt::Debug for TraceWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceWriter")
            .field("decisions", &self.decisions)
            .finish_non_exhaustive()
    }
}

impl TraceWriter {
    /// Records to `out`, with the top `k` candidates per routing decision.
    pub fn new(out: Box<dyn Write>, k: usize) -> Self {
        TraceWriter {
            out,
            k,
            order: Vec::new(),
            scores: Vec::new(),
            line: String::new(),
            decisions: 0,
            regret_sum: 0.0,
            regret_max: 0.0,
            error: None,
        }
    }

    fn emit(&mut self) {
        self.line.push('\n');
        if let Err(e) = self.out.write_all(self.line.as_bytes()) {
            self.error.get_or_insert(e);
        }
        self.line.clear();
    }

    /// An admission decision that rejected the request.
    pub fn rejection(&mut self, request_id: u64, time: Tick, policy: &str) {
        let v = serde_json::json!({
            "kind": "admission",
            "request_id": request_id,
            "time_us": time,
            "admitted": false,
            "policy": policy,
        });
        self.line = v.to_string();
        self.emit();
    }

    /// A routing decision. `composite` is the weighted scores, if any.
    pub fn routing(
        &mut self,
        request_id: u64,
        time: Tick,
        chosen: u32,
        composite: Option<&[f64]>,
        snaps: &[InstanceSnapshot],
    ) {
        self.scores.clear();
        match composite {
            Some(c) => self.scores.extend_from_slice(c),
            None => self
                .scores
                .extend(snaps.iter().map(|s| -(s.effective_load() as f64))),
        }
        self.order.clear();
        self.order.extend(0..snaps.len() as u32);
        let scores = &self.scores;
        self.order.sort_by(|&a, &b| {
            scores[b as usize]
                .partial_cmp(&scores[a as usize])
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.cmp(&b))
        });
        let best = self.scores[self.order[0] as usize];
        let chosen_score = self.scores[chosen as usize];
        let regret = (best - chosen_score).max(0.0);
        self.decisions += 1;
        self.regret_sum += regret;
        self.regret_max = self.regret_max.max(regret);
        let candidates: Vec<serde_json::Value> = self
            .order
            .iter()
            .take(self.k)
            .map(|&i| {
                let s = &snaps[i as usize];
                serde_json::json!({
                    "instance": i,
                    "score": self.scores[i as usize],
                    "queue_depth": s.queue_depth,
                    "batch_size": s.batch_size,
                    "pending": s.pending_requests,
                    "kv_utilization": s.kv_utilization,
                    "free_kv_blocks": s.free_kv_blocks,
                })
            })
            .collect();
        let v = serde_json::json!({
            "kind": "routing",
            "request_id": request_id,
            "time_us": time,
            "chosen": chosen,
            "chosen_score": chosen_score,
            "regret": regret,
            "candidates": candidates,
        });
        self.line = v.to_string();
        self.emit();
    }

    /// Flush the file.
    pub fn finish(&mut self) {
        if let Err(e) = self.out.flush() {
            self.error.get_or_insert(e);
        }
    }
}

//! Decision traces: one JSON line per admission rejection and per routing
//! decision, with counterfactual regret.
//!
//! Regret of a routing decision = best candidate score − chosen score (≥ 0).
//! Candidate scores are the weighted composite for weighted routing, and
//! −(effective load) for a router plugin (so lower load ranks higher).
//! Candidates are ranked by score, ties by instance index. With a profile
//! that has filters, only the candidates that survived them are ranked, and
//! the record says which filter removed which instances (`filtered`); a
//! decision whose filters left nothing is a `routing` record with
//! `"chosen": null` and the filter that emptied the set.
//!
//! With a scheduling profile (weighted routing included), every candidate
//! of a routing record also carries `"scorer_scores"`: each scorer's own
//! score of it, clamped to [0, 1] and before its weight.
//!
//! Reasons (ABI 0.2, given by a policy with `blis_plugin_api::reason`): an
//! admission record carries `"reason"` when the policy gave one for the
//! rejection; a filter's entry in `"filtered"` carries `"reason"` when the
//! filter removed instances and gave one. Records without reasons are
//! unchanged. A P/D decider plugin that gives a reason adds a
//! `"kind": "pd_decider"` record (its answer, the decode instance, the
//! reason).

use std::io::Write;

use blis_plugin_api::InstanceSnapshot;

use super::routing::Profile;
use crate::engine::Tick;

/// Writes decision records and keeps the regret totals.
pub struct TraceWriter {
    out: Box<dyn Write>,
    k: usize,
    order: Vec<u32>,
    scores: Vec<f64>,
    line: String,
    /// The routing record being built (written by [`TraceWriter::emit`]).
    record: Option<serde_json::Map<String, serde_json::Value>>,
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
            record: None,
            decisions: 0,
            regret_sum: 0.0,
            regret_max: 0.0,
            error: None,
        }
    }

    fn write_line(&mut self) {
        self.line.push('\n');
        if let Err(e) = self.out.write_all(self.line.as_bytes()) {
            self.error.get_or_insert(e);
        }
        self.line.clear();
    }

    /// An admission decision that rejected the request, with the reason
    /// the policy gave, if any.
    pub fn rejection(&mut self, request_id: u64, time: Tick, policy: &str, reason: Option<String>) {
        let mut v = serde_json::json!({
            "kind": "admission",
            "request_id": request_id,
            "time_us": time,
            "admitted": false,
            "policy": policy,
        });
        if let Some(r) = reason {
            v["reason"] = serde_json::Value::String(r);
        }
        self.line = v.to_string();
        self.write_line();
    }

    /// A P/D decider plugin's decision for which it gave a reason (ABI
    /// 0.2, kind `decider`): whether it disaggregates the request routed to
    /// decode instance `decode`, and why.
    pub fn pd_decision(
        &mut self,
        request_id: u64,
        time: Tick,
        policy: &str,
        disaggregate: bool,
        decode: u32,
        reason: String,
    ) {
        let v = serde_json::json!({
            "kind": "pd_decider",
            "request_id": request_id,
            "time_us": time,
            "policy": policy,
            "disaggregate": disaggregate,
            "decode_instance": decode,
            "reason": reason,
        });
        self.line = v.to_string();
        self.write_line();
    }

    /// A routing decision, written by the next [`TraceWriter::emit`].
    /// `composite` is the weighted scores, if any: per instance, or per
    /// candidate when `candidates` is given.
    pub fn routing(
        &mut self,
        request_id: u64,
        time: Tick,
        chosen: u32,
        composite: Option<&[f64]>,
        candidates: Option<&[u32]>,
        snaps: &[InstanceSnapshot],
    ) {
        self.scores.clear();
        match composite {
            Some(c) => match candidates {
                // Scores by instance index; only candidates are ranked.
                Some(cands) => {
                    self.scores.resize(snaps.len(), f64::NEG_INFINITY);
                    for (&i, &x) in cands.iter().zip(c) {
                        self.scores[i as usize] = x;
                    }
                }
                None => self.scores.extend_from_slice(c),
            },
            None => self
                .scores
                .extend(snaps.iter().map(|s| -(s.effective_load() as f64))),
        }
        self.order.clear();
        match candidates {
            Some(cands) => self.order.extend_from_slice(cands),
            None => self.order.extend(0..snaps.len() as u32),
        }
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
        let serde_json::Value::Object(map) = v else {
            unreachable!("json! of an object literal")
        };
        self.record = Some(map);
    }

    /// Add to the pending routing record which filter of `profile` removed
    /// which instances (filters after `upto`, when given, did not run).
    pub fn filtered(&mut self, profile: &Profile, upto: Option<usize>) {
        self.filtered_from(profile, upto, 0);
    }

    /// [`TraceWriter::filtered`] for a profile that saw the instances from
    /// `first` on (a P/D stage): its indices are shifted by `first`.
    fn filtered_from(&mut self, profile: &Profile, upto: Option<usize>, first: u32) {
        let Some(rec) = self.record.as_mut() else {
            return;
        };
        let list: Vec<serde_json::Value> = profile
            .removed()
            .take(upto.map_or(usize::MAX, |k| k + 1))
            .map(|(f, removed, reason)| {
                let removed: Vec<u32> = removed.iter().map(|&i| i + first).collect();
                let mut entry = serde_json::json!({
                    "filter": format!("{}::{}", f.label().library, f.label().name),
                    "removed": removed,
                });
                if let Some(r) = reason {
                    entry["reason"] = serde_json::Value::String(r.to_string());
                }
                entry
            })
            .collect();
        rec.insert("filtered".into(), serde_json::Value::Array(list));
    }

    /// Add to each candidate of the pending routing record the score every
    /// scorer of `profile` gave it (`"scorer_scores"`: scorer name → its
    /// score in [0, 1] before weighting; a scorer named twice gets `#2`).
    pub fn scorer_scores(&mut self, profile: &Profile, n_instances: usize) {
        let Some(rec) = self.record.as_mut() else {
            return;
        };
        let mut names: Vec<String> = Vec::with_capacity(profile.scorers.len());
        for ws in &profile.scorers {
            let base = ws.scorer.label().name.clone();
            let mut name = base.clone();
            let mut n = 1;
            while names.contains(&name) {
                n += 1;
                name = format!("{base}#{n}");
            }
            names.push(name);
        }
        let Some(serde_json::Value::Array(cands)) = rec.get_mut("candidates") else {
            return;
        };
        for c in cands.iter_mut() {
            let Some(i) = c["instance"].as_u64() else {
                continue;
            };
            let mut per = serde_json::Map::new();
            for (k, name) in names.iter().enumerate() {
                if let Some(x) = profile.last_score(k, i as u32, n_instances) {
                    per.insert(name.clone(), serde_json::json!(x));
                }
            }
            c["scorer_scores"] = serde_json::Value::Object(per);
        }
    }

    /// A decision whose filters left no candidate (`filter` emptied the set).
    pub fn no_candidate(&mut self, request_id: u64, time: Tick, profile: &Profile, filter: usize) {
        self.no_candidate_from(request_id, time, profile, filter, 0);
    }

    /// [`TraceWriter::no_candidate`] for a profile that saw the instances
    /// from `first` on (a P/D stage).
    pub fn no_candidate_from(
        &mut self,
        request_id: u64,
        time: Tick,
        profile: &Profile,
        filter: usize,
        first: u32,
    ) {
        let v = serde_json::json!({
            "kind": "routing",
            "request_id": request_id,
            "time_us": time,
            "chosen": null,
            "rejected": "no candidate left after the profile's filters",
        });
        let serde_json::Value::Object(map) = v else {
            unreachable!("json! of an object literal")
        };
        self.record = Some(map);
        self.filtered_from(profile, Some(filter), first);
        self.emit();
    }

    /// Write the pending routing record.
    pub fn emit(&mut self) {
        if let Some(rec) = self.record.take() {
            self.line = serde_json::Value::Object(rec).to_string();
            self.write_line();
        }
    }

    /// Flush the file.
    pub fn finish(&mut self) {
        if let Err(e) = self.out.flush() {
            self.error.get_or_insert(e);
        }
    }
}

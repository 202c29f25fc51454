//! Per-request sinks that write traces of a run: the TraceV2 export of
//! `output.trace_v2` / `--trace-output` (mode `generated` for a run,
//! `replayed` for a TraceV2 replay) and the SimResult JSON array of
//! `output.sim_results_path` (replay's `--results-path`).
//!
//! TraceV2 rows (spec §2.3): one per arrival at the cluster, in arrival
//! order (a reorder buffer: memory follows the requests in flight);
//! `request_id` = the row index for a run, the trace's own `request_id`
//! for a replay (whose rows are only the injected trace rows, not
//! closed-loop follow-ups); prefix and suffix split into `prefix_length`
//! and `input_tokens` (a round ≥ 1 of an accumulating session records its
//! new tokens only, and the header says `session_context_growth:
//! accumulate`); `send_time_us` = arrival; `first_chunk_time_us` =
//! arrival + TTFT (0 without a token); `last_chunk_time_us` = the last
//! token seen; `num_chunks` 0; status `ok` when completed, else
//! `incomplete` (blis has no per-request timeout, so it never writes
//! `timeout`); `think_time_us` (written when the workload has sessions) =
//! a round's arrival − the previous round's completion; `model` = the
//! model the request named (empty: the default model); `adapter` (written
//! when the workload names adapters) = its LoRA adapter (empty: the base
//! model).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::engine::Tick;
use crate::output::PendingOutput;
use crate::request::{Request, RequestState};
use crate::trace_v2::{
    prefix_paths, SessionContextGrowth, TraceColumns, TraceHeader, TraceMode, TraceRecord,
    TraceStatus, TraceV2Writer,
};
use crate::workload::{SharedLedger, FOLLOW_UP};

use super::RequestSink;

/// The TraceV2 export of a run.
pub struct TraceExport {
    writer: Option<TraceV2Writer>,
    header: TraceHeader,
    pending: BTreeMap<u64, TraceRecord>,
    next_id: u64,
    prefix_names: HashMap<u64, String>,
    accumulate: bool,
    last_end: HashMap<u32, Tick>,
    ledger: Option<SharedLedger>,
    error: Option<String>,
    adapters: Vec<String>,
    models: Vec<String>,
}

impl std::fmt::Debug for TraceExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceExport")
            .field("next_id", &self.next_id)
            .finish_non_exhaustive()
    }
}

impl TraceExport {
    /// Open `P.yaml` / `P.csv` for prefix `prefix`. `ledger` is set for a
    /// replay (mode `replayed`); `sessions`: the workload has sessions (the
    /// `think_time_us` column is written); `accumulate`: their prompts
    /// accumulate; `adapters` and `models`: the workload's adapter and
    /// model names (`Request::adapter`, `Request::model` index them; the
    /// `adapter` column is written when there are adapters).
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        prefix: &Path,
        seed: u64,
        prefix_names: HashMap<u64, String>,
        sessions: bool,
        accumulate: bool,
        ledger: Option<SharedLedger>,
        adapters: Vec<String>,
        models: Vec<String>,
    ) -> Result<TraceExport, String> {
        let (hp, dp) = prefix_paths(prefix);
        let columns = TraceColumns {
            adapter: !adapters.is_empty(),
            think_time_us: sessions,
            ..TraceColumns::default()
        };
        let writer = TraceV2Writer::create(&hp, &dp, columns).map_err(|e| e.to_string())?;
        let mode = if ledger.is_some() {
            TraceMode::Replayed
        } else {
            TraceMode::Generated
        };
        let mut header = TraceHeader::new(mode);
        header.workload_seed = i64::try_from(seed).ok();
        if accumulate {
            header.session_context_growth = Some(SessionContextGrowth::Accumulate);
        }
        if let Some(l) = &ledger {
            if let Ok(l) = l.lock() {
                if let Some(h) = &l.header {
                    header.observed_kv_metrics = h.observed_kv_metrics.clone();
                    header.goodput_slo_targets = h.goodput_slo_targets.clone();
                    header.session_context_growth = h.session_context_growth;
                }
            }
        }
        Ok(TraceExport {
            writer: Some(writer),
            header,
            pending: BTreeMap::new(),
            next_id: 0,
            prefix_names,
            accumulate,
            last_end: HashMap::new(),
            ledger,
            error: None,
            adapters,
            models,
        })
    }

    fn row(&mut self, req: &Request, tenants: &[String], clients: &[String]) -> TraceRecord {
        let prefix = req
            .prompt
            .first()
            .and_then(|s| self.prefix_names.get(&s.seed).map(|n| (n.clone(), s.len)));
        let plen = prefix.as_ref().map_or(0, |p| p.1);
        let mut r = TraceRecord {
            request_id: req.id,
            client_id: clients
                .get(req.client as usize)
                .cloned()
                .unwrap_or_default(),
            tenant_id: tenants
                .get(req.tenant as usize)
                .cloned()
                .unwrap_or_default(),
            slo_class: req.slo_class.name().to_string(),
            prefix_group: prefix.map(|p| p.0).unwrap_or_default(),
            prefix_length: u64::from(plen),
            input_tokens: u64::from(req.input_len.saturating_sub(plen)),
            output_tokens: u64::from(req.output_len),
            text_tokens: u64::from(req.input_len),
            arrival_time_us: req.arrival,
            send_time_us: req.arrival,
            status: if req.state == RequestState::Completed {
                TraceStatus::Ok
            } else {
                TraceStatus::Incomplete
            },
            ..TraceRecord::default()
        };
        if let Some(a) = req
            .adapter
            .get()
            .and_then(|a| self.adapters.get(a as usize))
        {
            r.adapter.clone_from(a);
        }
        if let Some(m) = req.model.get().and_then(|m| self.models.get(m as usize)) {
            r.model.clone_from(m);
        }
        if req.first_token_at >= 0 {
            r.first_chunk_time_us = req.first_token_at;
            r.last_chunk_time_us = if req.state == RequestState::Completed {
                req.completed_at
            } else {
                req.last_token_at.max(req.first_token_at)
            };
        }
        if let Some((sid, round)) = req.session {
            r.session_id = sid.to_string();
            r.round_index = u64::from(round);
            if round > 0 {
                if self.accumulate {
                    let new = req.prompt.last().map_or(0, |s| s.len);
                    r.input_tokens = u64::from(new);
                    r.text_tokens = u64::from(new);
                }
                if let Some(end) = self.last_end.remove(&sid) {
                    r.think_time_us = (req.arrival - end).max(0) as u64;
                }
            }
            if req.state == RequestState::Completed {
                self.last_end.insert(sid, req.completed_at);
            }
        }
        r
    }

    fn flush_ready(&mut self) {
        while let Some(r) = self.pending.remove(&self.next_id) {
            self.next_id += 1;
            self.write(&r);
        }
    }

    fn write(&mut self, r: &TraceRecord) {
        if self.error.is_some() {
            return;
        }
        if let Some(w) = self.writer.as_mut() {
            if let Err(e) = w.write(r) {
                self.error = Some(e.to_string());
            }
        }
    }
}

impl RequestSink for TraceExport {
    fn record(&mut self, req: &Request, tenants: &[String], clients: &[String]) {
        let mut r = self.row(req, tenants, clients);
        match &self.ledger {
            None => {
                self.pending.insert(req.id, r);
                self.flush_ready();
            }
            Some(l) => {
                // A row's trace id; a closed-loop follow-up round's is the
                // id of its round's row in the trace.
                let trace_id = l.lock().ok().and_then(|l| {
                    let id = *l.ids.get(req.id as usize)?;
                    if id == FOLLOW_UP {
                        l.follow_ups.get(&req.id).copied()
                    } else {
                        Some(id)
                    }
                });
                if let Some(id) = trace_id {
                    r.request_id = id;
                }
                // Keyed by blis id (arrival order).
                self.pending.insert(req.id, r);
                self.flush_ready();
            }
        }
    }

    fn finish(&mut self) -> Result<(), String> {
        let rest = std::mem::take(&mut self.pending);
        for (_, r) in rest {
            self.write(&r);
        }
        if let Some(e) = &self.error {
            return Err(format!("cannot write the TraceV2 export: {e}"));
        }
        match self.writer.take() {
            Some(w) => w
                .finish(&self.header)
                .map_err(|e| format!("cannot write the TraceV2 export: {e}")),
            None => Ok(()),
        }
    }
}

/// One SimResult entry (spec §2.4).
#[derive(Debug)]
struct SimEntry {
    request_id: u64,
    ttft_us: f64,
    e2e_us: f64,
    input_tokens: u32,
    output_tokens: u32,
    slo_class: &'static str,
    itl_mean_us: Option<f64>,
}

/// The SimResult JSON array of a replay: completed injected rows, sorted
/// by `request_id`.
pub struct SimResults {
    ledger: SharedLedger,
    entries: Vec<SimEntry>,
    out: Option<(BufWriter<std::fs::File>, PendingOutput)>,
}

impl std::fmt::Debug for SimResults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimResults")
            .field("entries", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl SimResults {
    /// Open `path` (a temporary file renamed into place by the caller's commit).
    pub fn create(path: &Path, ledger: SharedLedger) -> Result<SimResults, String> {
        let (f, pending) = PendingOutput::create(path).map_err(|e| {
            format!(
                "cannot create the SimResult file {}: {e}\n  Check that its folder exists and is writable.",
                path.display()
            )
        })?;
        Ok(SimResults {
            ledger,
            entries: Vec::new(),
            out: Some((BufWriter::new(f), pending)),
        })
    }
}

/// The trace `request_id` of a completed request that a trace row
/// injected (not a closed-loop follow-up round), or `None`: what a replay's
/// per-request sinks (the results file here, `calibrate fit`'s in-memory
/// collector) record.
pub(crate) fn completed_trace_row(ledger: &SharedLedger, req: &Request) -> Option<u64> {
    if req.state != RequestState::Completed || req.first_token_at < 0 {
        return None;
    }
    let id = ledger
        .lock()
        .ok()
        .and_then(|l| l.ids.get(req.id as usize).copied())?;
    (id != FOLLOW_UP).then_some(id)
}

impl RequestSink for SimResults {
    fn record(&mut self, req: &Request, _tenants: &[String], _clients: &[String]) {
        let Some(id) = completed_trace_row(&self.ledger, req) else {
            return;
        };
        self.entries.push(SimEntry {
            request_id: id,
            ttft_us: (req.first_token_at - req.arrival) as f64,
            e2e_us: (req.completed_at - req.arrival) as f64,
            input_tokens: req.input_len.saturating_sub(req.cached_tokens),
            output_tokens: req.generated,
            slo_class: req.slo_class.name(),
            itl_mean_us: (req.generated > 1).then(|| {
                (req.completed_at - req.first_token_at) as f64 / f64::from(req.generated - 1)
            }),
        });
    }

    fn finish(&mut self) -> Result<(), String> {
        self.entries.sort_by_key(|e| e.request_id);
        let models = self
            .ledger
            .lock()
            .map(|l| l.models.clone())
            .unwrap_or_default();
        let Some((mut w, pending)) = self.out.take() else {
            return Ok(());
        };
        let mut write = || -> std::io::Result<()> {
            w.write_all(b"[")?;
            for (i, e) in self.entries.iter().enumerate() {
                let mut v = serde_json::json!({
                    "request_id": e.request_id,
                    "ttft_us": e.ttft_us,
                    "e2e_us": e.e2e_us,
                    "input_tokens": e.input_tokens,
                    "output_tokens": e.output_tokens,
                    "slo_class": e.slo_class,
                });
                if let Some(m) = models.get(&e.request_id) {
                    v["model"] = serde_json::json!(m);
                }
                if let Some(x) = e.itl_mean_us {
                    v["itl_mean_us"] = serde_json::json!(x);
                }
                if i > 0 {
                    w.write_all(b",\n")?;
                }
                w.write_all(v.to_string().as_bytes())?;
            }
            w.write_all(b"]\n")?;
            w.flush()
        };
        write().map_err(|e| format!("cannot write the SimResult file: {e}"))?;
        drop(w);
        pending
            .commit()
            .map_err(|e| format!("cannot write the SimResult file: {e}"))
    }
}

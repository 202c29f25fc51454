//! Prefill/decode disaggregation: pools of instances with roles, the
//! decider, the KV transfer, and the `pd` report section.
//!
//! ```text
//! Routing ─► [routing] or [pd.decode_routing] over decode + both pools ─► decider ─┬─ no ─► decode instance (whole request)
//!                                                             └─ yes ─► prefill routing (prefill + both pools)
//!   prefill instance: the request with 1 output token ─► hand-off ─► reserve the prompt's KV on the
//!   decode instance (none free: dropped, counted) ─► KvTransferDone (after the transfer time) ─►
//!   decode instance's wait queue, prompt computed ─► decode (first token = the client's TTFT)
//! ```
//!
//! The cluster calls into this module only when `[[pools]]` exist
//! (`Cluster::pd` is `None` otherwise), so a run without pools executes
//! exactly the code it always did. A disaggregated request is one request
//! record on one timeline: arrival, the prefill instance's enqueue and
//! scheduling times, then the decode instance's first token, tokens and
//! completion. Instances are numbered pool by pool — prefill pools, then
//! `both` pools, then decode pools — so each stage's candidates are one
//! contiguous range and its routing sees exactly those instances.

mod decider;
mod observer;
mod report;
#[cfg(test)]
mod tests;
mod transfer;

use std::collections::HashMap;
use std::ops::Range;

use abi_stable::std_types::RSlice;
use blis_plugin_api::{
    ClusterState, ClusterView, EventKind, InstanceInfo, InstanceSnapshot, PdView, RequestView,
};

pub use decider::{Decider, PdDecider};
pub use report::PdReport;
pub use transfer::{TransferCounts, TransferModel};

use super::lora_view::LoraDecision;
use super::{decision_view, Cluster, Decision, Routing, TraceWriter};
use crate::engine::{later, Event, Tick};
use crate::instance::InstanceObserver;
use crate::plugins::host_queries::with_lora;
use crate::plugins::{DeciderPolicy, PluginError};
use crate::request::{RequestState, RequestStore, Slot, UNSET};
use observer::PdObserver;

/// What a pool does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolRole {
    Prefill,
    Decode,
    Both,
    /// Encoders of multimodal input: routed to, never given work (the
    /// reference's encode stage takes no time).
    Encode,
}

impl PoolRole {
    /// The run-file name.
    pub fn name(self) -> &'static str {
        match self {
            PoolRole::Prefill => "prefill",
            PoolRole::Decode => "decode",
            PoolRole::Both => "both",
            PoolRole::Encode => "encode",
        }
    }
}

/// One pool: instances `first .. first + count`.
#[derive(Clone, Debug)]
pub struct PoolInfo {
    pub name: String,
    pub role: PoolRole,
    pub first: u32,
    pub count: u32,
}

/// Everything the P/D path needs, assembled by the config layer.
pub struct PdSetup {
    pub pools: Vec<PoolInfo>,
    /// Instances that can run a prefill leg (prefill and both pools).
    pub prefill: Range<u32>,
    /// Instances that can decode (both and decode pools).
    pub decode: Range<u32>,
    /// Routing of the prefill stage (the decode stage uses the cluster's
    /// routing, which also receives the lifecycle events).
    pub prefill_routing: Routing,
    pub decider: PdDecider,
    /// The `prefix-threshold` decider disaggregates no prompt shorter than
    /// this (0: no floor).
    pub min_prompt: u32,
    pub transfer: TransferModel,
    /// The encode stage, when the run has an encode pool.
    pub encode: Option<EncodeStage>,
}

/// The encode stage: a routing decision over the encode pools for each
/// request the decider picks, before its prefill and decode (llm-d's
/// encode profile; the reference's zero-duration encode).
pub struct EncodeStage {
    pub instances: Range<u32>,
    pub routing: Routing,
    /// Which requests are encoded (`pd.encode_decider`: a standard P/D
    /// decider, llm-d's prefix-based decider as its prefix-threshold).
    pub decider: Decider,
    /// `PrefixThreshold`: no prompt shorter than this is encoded.
    pub min_prompt: u32,
}

impl PdSetup {
    /// Whether the per-instance prefix-cache query must run at routing
    /// decisions for the P/D stages (the prefill routing or the decider).
    pub fn needs_prefix_query(&self) -> bool {
        self.prefill_routing.needs_prefix_query() || self.decider.needs_prefix_query()
    }

    /// Whether a policy of the P/D stages may read the prompt's block hashes.
    pub fn reads_block_hashes(&self) -> bool {
        self.prefill_routing.reads_block_hashes() || self.decider.reads_block_hashes()
    }
}

/// A request in its prefill leg.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PrefillLeg {
    /// The request's own output length (the leg runs with 1).
    output_len: u32,
    prefill: u32,
    decode: u32,
}

/// The P/D state of a running cluster.
pub struct PdState {
    setup: PdSetup,
    /// The prefill-capable instances, as the candidates a decider plugin sees.
    prefill_candidates: Vec<u32>,
    /// Requests in their prefill leg, by id.
    prefilling: HashMap<u64, PrefillLeg>,
    /// Prefill legs that finished during the current step.
    done: Vec<Slot>,
    transfers: TransferCounts,
    /// Requests the decider sent to a prefill instance.
    disaggregated: u64,
    /// Requests whose decode instance could not reserve their prompt's KV.
    dropped_at_decode_kv: u64,
    /// Per instance: prefill legs handed off, transfers received (or
    /// dropped at reservation).
    handoffs: Vec<u64>,
    transfers_in: Vec<u64>,
    /// Per instance: requests whose input it encoded.
    encodes: Vec<u64>,
}

impl PdState {
    /// The state of a run on `n` instances.
    pub fn new(setup: PdSetup, n: usize) -> Self {
        PdState {
            prefill_candidates: setup.prefill.clone().collect(),
            setup,
            prefilling: HashMap::new(),
            done: Vec::new(),
            transfers: TransferCounts::default(),
            disaggregated: 0,
            dropped_at_decode_kv: 0,
            handoffs: vec![0; n],
            transfers_in: vec![0; n],
            encodes: vec![0; n],
        }
    }

    /// Put back the own output length of requests still in their prefill
    /// leg (their result lines), and build the report.
    pub fn finish(self, store: &mut RequestStore) -> PdReport {
        let mut live: Vec<Slot> = (0..store.capacity() as Slot)
            .filter(|&s| store.is_live(s))
            .collect();
        live.sort_unstable();
        for s in live {
            let id = store[s].id;
            if let Some(leg) = self.prefilling.get(&id) {
                store[s].output_len = leg.output_len;
            }
        }
        PdReport::new(self)
    }
}

/// Route `req` within `range` with `routing`: the chosen instance (global
/// index), or `None` when the profile's filters left no candidate (then
/// written to `trace`, instances numbered as the cluster does).
#[allow(clippy::too_many_arguments)]
fn route_stage(
    routing: &mut Routing,
    rv: &RequestView<'_>,
    t: Tick,
    snaps: &[InstanceSnapshot],
    info: &[InstanceInfo<'static>],
    prefix_blocks: &[u32],
    range: &Range<u32>,
    lora: Option<LoraDecision<'_>>,
    trace: Option<&mut TraceWriter>,
) -> Result<Option<u32>, Box<PluginError>> {
    let (a, b) = (range.start as usize, range.end as usize);
    let view = ClusterView {
        clock_us: t,
        instances: RSlice::from_slice(&snaps[a..b]),
    };
    let needs_state = routing.needs_state();
    let state = ClusterState {
        view,
        candidates: RSlice::from_slice(&[]),
        info: RSlice::from_slice(if needs_state { &info[a..b] } else { &[] }),
        prefix_blocks: RSlice::from_slice(if prefix_blocks.is_empty() {
            &[]
        } else {
            &prefix_blocks[a..b]
        }),
    };
    // The stage's view holds its instances only: the LoRA answers are
    // given over the same range, so indices agree.
    let decide = || -> Result<Result<u32, usize>, Box<PluginError>> {
        Ok(
            match routing.route(rv, &view, needs_state.then_some(&state))? {
                Decision::Routed { chosen, .. } => Ok(chosen),
                Decision::NoCandidate { filter } => Err(filter),
            },
        )
    };
    let chosen = match with_lora(lora.as_ref(), decide)? {
        Ok(c) => c,
        Err(filter) => {
            if let (Some(tr), Some(p)) = (trace, routing.profile()) {
                tr.no_candidate_from(rv.id, t, p, filter, range.start);
            }
            return Ok(None);
        }
    };
    routing.observe(rv, &view, chosen)?;
    Ok(Some(range.start + chosen))
}

/// A decider plugin's answer for one request (with the request's LoRA
/// queries answered), its reason traced.
fn ask_decider(
    p: &mut DeciderPolicy,
    rv: &RequestView,
    view: &PdView,
    state: &ClusterState,
    lora: Option<LoraDecision>,
    trace: Option<&mut TraceWriter>,
    t: Tick,
) -> Result<bool, Box<PluginError>> {
    let yes = with_lora(lora.as_ref(), || p.decide(rv, view, state))?;
    if let Some(tr) = trace {
        if let Some(reason) = p.take_reason() {
            let desc = format!("{}::{}", p.label().library, p.label().name);
            tr.pd_decision(rv.id, t, &desc, yes, view.decode_instance, reason);
        }
    }
    Ok(yes)
}

impl Cluster {
    /// The routing event of a P/D run: decode-first routing, the decider,
    /// and the prefill routing of a disaggregated request.
    pub(super) fn pd_route(&mut self, t: Tick, slot: Slot) -> Result<(), Box<PluginError>> {
        let mut pd = self.pd.take().expect("a P/D run");
        let r = self.pd_route_with(&mut pd, t, slot);
        self.pd = Some(pd);
        r
    }

    fn pd_route_with(
        &mut self,
        pd: &mut PdState,
        t: Tick,
        slot: Slot,
    ) -> Result<(), Box<PluginError>> {
        let s = &mut pd.setup;
        let plugin_decider = matches!(s.decider, PdDecider::Plugin(_));
        let needs_state =
            s.prefill_routing.needs_state() || self.routing.needs_state() || plugin_decider;
        self.snapshots.build(t, &self.instances, &self.pending);
        if needs_state {
            self.snapshots
                .build_info(&self.instances, &self.in_flight, &self.store);
        }
        let req = &self.store[slot];
        let prefix: &[u32] = match self.cache_signal.as_mut() {
            Some(cs) => cs.query(t, &self.instances, &req.prompt_hashes),
            None => &[],
        };
        let snaps = self.snapshots.snaps();
        let info = self.snapshots.info();
        let rv = decision_view(req, &self.tenant_names);
        let Some(decode) = route_stage(
            &mut self.routing,
            &rv,
            t,
            snaps,
            info,
            prefix,
            &s.decode,
            self.lora
                .as_deref_mut()
                .map(|l| l.decision(t, req, &self.instances, &self.workload, Some(&s.decode))),
            self.trace.as_mut(),
        )?
        else {
            return self.reject(t, slot, super::Reject::Filter);
        };
        if let Some(e) = s.encode.as_mut() {
            let yes = req.input_len >= e.min_prompt && {
                let cached = if e.decider.needs_cache_query() {
                    self.instances[decode as usize].cached_prompt_blocks(req)
                } else {
                    0
                };
                e.decider
                    .decide(req.input_len, req.multimodal, cached, self.block_size)
            };
            if yes {
                let lora = self.lora.as_deref_mut().map(|l| {
                    l.decision(t, req, &self.instances, &self.workload, Some(&e.instances))
                });
                let Some(enc) = route_stage(
                    &mut e.routing,
                    &rv,
                    t,
                    snaps,
                    info,
                    prefix,
                    &e.instances,
                    lora,
                    self.trace.as_mut(),
                )?
                else {
                    return self.reject(t, slot, super::Reject::Filter);
                };
                pd.encodes[enc as usize] += 1;
            }
        }
        let (input_len, output_len, multimodal) = (req.input_len, req.output_len, req.multimodal);
        let cached = if s.decider.needs_cache_query() {
            self.instances[decode as usize].cached_prompt_blocks(req)
        } else {
            0
        };
        let block_size = self.block_size;
        let disaggregate = match &mut s.decider {
            PdDecider::Standard(d) => {
                input_len >= s.min_prompt && d.decide(input_len, multimodal, cached, block_size)
            }
            PdDecider::Plugin(p) => {
                let view = PdView {
                    decode_instance: decode,
                    decode_cached_blocks: cached,
                    block_size,
                    prefill_first: s.prefill.start,
                    prefill_end: s.prefill.end,
                };
                let state = ClusterState {
                    view: ClusterView {
                        clock_us: t,
                        instances: RSlice::from_slice(snaps),
                    },
                    candidates: RSlice::from_slice(&pd.prefill_candidates),
                    info: RSlice::from_slice(info),
                    prefix_blocks: RSlice::from_slice(prefix),
                };
                let lora = self
                    .lora
                    .as_deref_mut()
                    .map(|l| l.decision(t, req, &self.instances, &self.workload, None));
                ask_decider(p, &rv, &view, &state, lora, self.trace.as_mut(), t)?
            }
        };
        let mut target = decode;
        if disaggregate {
            let Some(prefill) = route_stage(
                &mut s.prefill_routing,
                &rv,
                t,
                snaps,
                info,
                prefix,
                &s.prefill,
                self.lora
                    .as_deref_mut()
                    .map(|l| l.decision(t, req, &self.instances, &self.workload, Some(&s.prefill))),
                self.trace.as_mut(),
            )?
            else {
                return self.reject(t, slot, super::Reject::Filter);
            };
            // A leg an instance could never serve stays whole on its decode instance.
            if prefill != decode
                && self.instances[prefill as usize].can_serve(input_len, 1)
                && self.instances[decode as usize].can_serve(input_len, output_len)
            {
                pd.prefilling.insert(
                    req.id,
                    PrefillLeg {
                        output_len,
                        prefill,
                        decode,
                    },
                );
                pd.disaggregated += 1;
                target = prefill;
            }
        }
        let view = ClusterView {
            clock_us: t,
            instances: RSlice::from_slice(snaps),
        };
        self.admission.observe(&rv, &view, target)?;
        self.pd_dispatch(t, slot, target, decode)
    }

    /// Send a routed request to `target`: its decode instance, or the
    /// prefill instance of a disaggregated request (which produces one
    /// token there).
    fn pd_dispatch(
        &mut self,
        t: Tick,
        slot: Slot,
        target: u32,
        decode: u32,
    ) -> Result<(), Box<PluginError>> {
        self.pending[target as usize] += 1;
        self.in_flight[target as usize] += 1;
        if self.epp_tokens.is_some() {
            // On the prefill instance of a disaggregated request: released
            // at its hand-off (llm-d releases the prefill target's entry at
            // the first chunk).
            self.charge_tokens(slot, target);
        }
        let req = &mut self.store[slot];
        req.instance = target;
        if target != decode {
            req.output_len = 1;
        }
        self.dispatched(t, slot, target)
    }

    /// The step event of a P/D run: the instance steps behind the observer
    /// that hides prefill legs, then finished legs start their transfers.
    pub(super) fn pd_step(&mut self, t: Tick, instance: u32) -> Result<(), Box<PluginError>> {
        let mut pd = self.pd.take().expect("a P/D run");
        let first_tokens = self.hooks.contains(EventKind::FIRST_TOKEN) || self.epp_tokens.is_some();
        {
            let PdState {
                prefilling, done, ..
            } = &mut *pd;
            let inst = &mut self.instances[instance as usize];
            if first_tokens {
                let mut ft = super::FirstTokens {
                    collector: &mut self.collector,
                    seen: &mut self.first_tokens,
                };
                let mut obs = PdObserver {
                    inner: &mut ft,
                    prefilling,
                    done,
                };
                inst.on_step(t, &mut self.store, &mut self.queue, &mut obs);
            } else {
                let mut obs = PdObserver {
                    inner: &mut self.collector,
                    prefilling,
                    done,
                };
                inst.on_step(t, &mut self.store, &mut self.queue, &mut obs);
            }
        }
        let r = if first_tokens {
            self.deliver_first_tokens()
        } else {
            Ok(())
        };
        self.pd_handoffs(&mut pd, t);
        self.pd = Some(pd);
        r
    }

    /// Prefill legs that finished: reserve the prompt's KV on the decode
    /// instance and start the transfer, or drop the request.
    fn pd_handoffs(&mut self, pd: &mut PdState, t: Tick) {
        for i in 0..pd.done.len() {
            let slot = pd.done[i];
            let leg = pd
                .prefilling
                .remove(&self.store[slot].id)
                .expect("a finished prefill leg");
            let (p, d) = (leg.prefill, leg.decode);
            pd.handoffs[p as usize] += 1;
            if let Some(e) = self.epp_tokens.as_mut() {
                e.release(self.store[slot].id);
            }
            let n = &mut self.in_flight[p as usize];
            *n = n.saturating_sub(1);
            self.in_flight[d as usize] += 1;
            let req = &mut self.store[slot];
            req.output_len = leg.output_len;
            req.state = RequestState::Transferring;
            req.instance = d;
            req.generated = 0;
            req.computed = 0;
            req.granted = 0;
            req.first_token_at = UNSET;
            req.last_token_at = UNSET;
            req.completed_at = UNSET;
            self.snapshots.touched(d);
            match self.instances[d as usize].reserve_transfer(slot, &mut self.store) {
                Some(r) => {
                    let dur =
                        pd.setup
                            .transfer
                            .start(&mut pd.transfers, r.transferred_blocks, p, d);
                    self.queue.push(later(t, dur), Event::KvTransferDone(slot));
                }
                None => {
                    // Counted on the decode instance as injected and dropped.
                    pd.dropped_at_decode_kv += 1;
                    pd.transfers_in[d as usize] += 1;
                    self.collector.instances[d as usize].injected += 1;
                    let req = &mut self.store[slot];
                    req.state = RequestState::Dropped;
                    self.collector.dropped(d, slot, &self.store[slot], t);
                }
            }
        }
        pd.done.clear();
    }

    /// A transfer arrived: the request enters its decode instance's queue.
    pub(super) fn pd_transfer_done(&mut self, t: Tick, slot: Slot) {
        let pd = self.pd.as_deref_mut().expect("a P/D run");
        TransferModel::finish(&mut pd.transfers);
        let d = self.store[slot].instance;
        pd.transfers_in[d as usize] += 1;
        self.instance_event(d, t);
        self.collector.instances[d as usize].injected += 1;
        self.instances[d as usize].enqueue_transferred(t, slot, &mut self.store, &mut self.queue);
    }
}

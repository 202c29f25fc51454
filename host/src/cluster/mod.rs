//! The cluster: N instances on one shared clock behind the admission →
//! routing → instance pipeline (the request walkthrough of the cluster seed).
//!
//! ```text
//! workload ─► Arrivals ─► Admission (+admission latency) ─► Routing (+routing latency)
//!                              │ rejected                    │ pending[target] += 1
//!                              ▼                             ▼
//!                          (counted)              InstanceArrival ─► Queued (alpha delay;
//!                                                 pending[target] −= 1) ─► Steps ─► completion
//! ```
//!
//! One [`EventQueue`] holds every event; its key gives the seed's ordering
//! rules (cluster events first at equal time, lowest instance index first,
//! then FIFO). An event later than the horizon is not executed and ends the
//! run. The cluster owns the request slab; instances and queues hold slots.

mod admission;
mod cache_signal;
mod epp_tokens;
mod error;
mod external;
mod first_tokens;
mod flow_control;
mod lora_view;
mod models;
pub mod pd;
mod routing;
mod scaling;
mod servable;
mod snapshot;
mod trace;

#[cfg(test)]
mod prompt_hash_tests;
#[cfg(test)]
mod signal_tests;
#[cfg(test)]
mod snapshot_read_tests;
#[cfg(test)]
mod tests;

pub use admission::Admission;
use cache_signal::CacheSignal;
pub use error::RunError;
pub use external::{Cancel, Ended, InstanceLoad, Progress};
use first_tokens::{FirstToken, FirstTokens};
use lora_view::LoraView;
pub use models::{ModelFilter, NO_MODEL};
pub use routing::{format_weight, ByClient, Decision, Pick, Profile, Routing};
pub use servable::ServableBound;
pub use snapshot::{Freshness, SnapshotProvider};
pub use trace::TraceWriter;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use abi_stable::std_types::{RSlice, RStr};
use blis_plugin_api::{
    ClusterState, ClusterView, EventKind, Hooks, RequestEvent, RequestView, RunSummary,
    SloClass as AbiSlo,
};

use crate::control::{ControlPlane, ControlSetup};
use crate::engine::{later, Event, EventQueue, Tick, NEVER, TIME_LIMIT};
use crate::gateway::{Gateway, GatewayCounts, TenantBudgets};
use crate::instance::{Instance, PreemptionKind, SchedulerKind};
use crate::metrics::timeseries::{ClusterCounts, TimeSeries};
use crate::metrics::Collector;
use crate::plugins::host_queries::{with_lora, ClientHeaders};
use crate::plugins::{ObserverPolicy, PluginError};
use crate::request::{prompt_block_hashes, Request, RequestState, RequestStore, Slot};
use crate::workload::Workload;

/// Everything a cluster run needs, assembled by the config layer.
pub struct ClusterSetup {
    /// When the cluster hashes arriving prompts for the policies.
    pub prompt_hashing: Provide,
    /// When admission and routing decisions re-read the live instance
    /// snapshots.
    pub snapshot_reads: Provide,
    pub instances: Vec<Instance>,
    pub workload: Workload,
    pub admission: Admission,
    pub routing: Routing,
    /// Observer plugins (kind `observer`): lifecycle events only.
    pub observers: Vec<ObserverPolicy>,
    pub admission_latency: Tick,
    pub routing_latency: Tick,
    /// Refresh interval of each periodic snapshot signal.
    pub freshness: Freshness,
    /// Staleness of the prefix-cache query, µs (0 = live).
    pub cache_signal_delay: Tick,
    pub horizon: Tick,
    pub block_size: u32,
    pub collector: Collector,
    pub trace: Option<TraceWriter>,
    /// What the 0.2 cluster state says about every instance.
    pub labels: InstanceLabels,
    /// `output.timeseries_path`: sampled at interval boundaries, never scheduled.
    pub timeseries: Option<TimeSeries>,
    /// `[flow_control]`: the gateway queue between admission and routing.
    pub gateway: Option<Gateway>,
    /// `[tenants]`: budgets checked before admission.
    pub tenant_budgets: Option<TenantBudgets>,
    /// Instance lifecycle, node pools, autoscaler (`None`: the fixed fleet).
    pub control: Option<ControlSetup>,
    /// `[[pools]]`: prefill/decode disaggregation (`None`: no pools).
    pub pd: Option<pd::PdSetup>,
    /// Several base models (`serve` pools): the model filter before routing.
    pub models: Option<ModelFilter>,
    /// The headers the workload's clients send (the plugins' header query);
    /// `None` when no client sends any.
    pub client_headers: Option<Arc<ClientHeaders>>,
}

/// Static facts about the (homogeneous) fleet for the 0.2 cluster state.
#[derive(Clone, Debug, Default)]
pub struct InstanceLabels {
    pub model: String,
    pub gpu: String,
    pub tp: u32,
}

/// End-of-run state handed to the report.
pub struct ClusterOutcome {
    pub instances: Vec<Instance>,
    pub collector: Collector,
    pub trace: Option<TraceWriter>,
    pub timeseries: Option<TimeSeries>,
    /// Requests that reached the cluster.
    pub arrived: u64,
    pub rejected: u64,
    /// `rejected` by cause.
    pub rejected_by: RejectCounts,
    /// Requests in admission, routing or the alpha queueing delay at the end.
    pub still_in_pipeline: u64,
    /// Time of the last executed event.
    pub end_time: Tick,
    /// The run's duration: the last executed event or the last token
    /// delivered to a client, whichever is later (with α2 > 0 a step's
    /// tokens reach the client after the step, possibly past the horizon).
    pub duration: Tick,
    pub events: u64,
    /// Largest number of requests alive at once (memory high-water mark).
    pub peak_live_requests: usize,
    /// An error the workload met while streaming (the run ended early).
    pub workload_error: Option<crate::workload::WorkloadError>,
    /// The gateway queue's counters and its depth at the end (`[flow_control]`).
    pub gateway: Option<(GatewayCounts, u64)>,
    /// Requests rejected for their tenant's budget, per tenant index (`[tenants]`).
    pub tenant_budget_rejected: Option<Vec<u64>>,
    /// The control plane at the end (instance lives, nodes, cost).
    pub control: Option<Box<ControlPlane>>,
    /// P/D counts (runs with pools only).
    pub pd: Option<pd::PdReport>,
}

/// Watches a run event by event: the property campaign checks invariants
/// through it. [`Cluster::run`] uses [`NoAudit`], which compiles to nothing.
pub trait EventAudit {
    /// Called after every executed event with the state it left.
    fn after_event(&mut self, view: AuditView<'_>);
}

/// When the cluster computes a signal for the policies: the arriving
/// prompts' block hashes (`RequestView::block_hashes`), or the live
/// instance snapshots of an admission or routing decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Provide {
    /// When a policy of the run may read it (see `Cluster::hash_prompts`,
    /// `Cluster::admission_reads`).
    #[default]
    WhenRead,
    /// Always (tests: a run's output must not depend on it).
    Always,
    /// Never (tests: the policies that read it see none, or stale values).
    Never,
}

/// What an [`EventAudit`] sees after an event.
pub struct AuditView<'a> {
    pub time: Tick,
    pub event: Event,
    pub instances: &'a [Instance],
    pub store: &'a RequestStore,
    /// Requests routed to each instance and not yet in its wait queue.
    pub pending: &'a [u32],
    /// Requests routed to each instance and not finished yet.
    pub in_flight: &'a [u32],
    /// The control plane, when the run has one.
    pub control: Option<&'a ControlPlane>,
}

/// The audit of an ordinary run: none.
pub struct NoAudit;

impl EventAudit for NoAudit {
    #[inline(always)]
    fn after_event(&mut self, _: AuditView<'_>) {}
}

/// The running cluster.
pub struct Cluster {
    /// The run has `[lora]`: decisions answer the plugins' LoRA queries
    /// (`plugins::host_queries`).
    lora: Option<Box<LoraView>>,
    queue: EventQueue,
    store: RequestStore,
    instances: Vec<Instance>,
    pending: Vec<u32>,
    workload: Workload,
    admission: Admission,
    routing: Routing,
    observers: Vec<ObserverPolicy>,
    snapshots: SnapshotProvider,
    /// The prefix-cache query, when a routing policy reads it.
    cache_signal: Option<CacheSignal>,
    admission_latency: Tick,
    routing_latency: Tick,
    horizon: Tick,
    block_size: u32,
    collector: Collector,
    trace: Option<TraceWriter>,
    timeseries: Option<TimeSeries>,
    /// The next time-series boundary (`NEVER` without a time series: one
    /// comparison per event is all it costs when off).
    next_sample: Tick,
    /// Earliest pending `Arrivals` wake-up (to avoid scheduling duplicates).
    next_wakeup: Option<Tick>,
    /// A real inference-perf client's request timeout (µs after arrival).
    client_timeout: Option<Tick>,
    arrived: u64,
    rejected: u64,
    rejected_by: RejectCounts,
    events: u64,
    end_time: Tick,
    tenant_names: Vec<String>,
    /// Requests routed to each instance and not finished yet.
    in_flight: Vec<u32>,
    /// Union of the lifecycle events any policy handles.
    hooks: Hooks,
    /// Some instance uses a scheduler or preemption plugin.
    custom_order: bool,
    /// First tokens of the last step (only when a policy wants them).
    first_tokens: Vec<FirstToken>,
    /// Prompt-hash buffers of requests that left the pipeline. Hashes are
    /// needed by admission and routing only (the instance recomputes them at
    /// admission into its own buffers), so a waiting request holds none and
    /// the buffers are reused by the next arrivals.
    hash_pool: Vec<Vec<u64>>,
    /// Whether arriving prompts are hashed: when a policy may read the
    /// hashes (`RequestView::block_hashes`; any plugin policy, the standard
    /// prefix-affinity ones) or the prefix-cache query runs. Otherwise
    /// nobody reads them before the instance, which hashes what it needs.
    hash_prompts: bool,
    /// Whether an admission decision re-reads the instance snapshots: when
    /// the admission policy may read them. Otherwise it only moves the
    /// periodic signals' schedules ([`SnapshotProvider::pass`]).
    admission_reads: bool,
    /// The same for a routing decision: the routing policy may read them,
    /// or the decision trace records them.
    routing_reads: bool,
    /// Whether an arriving request could be served by some instance (asked
    /// before its prompt is hashed).
    servable: ServableBound,
    /// The gateway queue (`[flow_control]`; see `flow_control.rs`).
    gateway: Option<Gateway>,
    /// Tenant budgets (`[tenants]`; see `flow_control.rs`).
    tenant_budgets: Option<TenantBudgets>,
    /// Instance lifecycle, nodes and autoscaler (`None`: the fixed fleet).
    control: Option<Box<ControlPlane>>,
    /// The P/D path's state; `None` without pools (the path is never entered).
    pd: Option<Box<pd::PdState>>,
    models: Option<Box<ModelFilter>>,
    /// The clients' headers, answered to the plugins' header query.
    client_headers: Option<Arc<ClientHeaders>>,
    /// The router's in-flight tokens, when the gateway's detector counts
    /// them (`epp_tokens.rs`).
    epp_tokens: Option<Box<epp_tokens::EppTokens>>,
    /// Set by someone else to stop the run ([`Cluster::cancel_on`]); read
    /// with the progress call, every 65,536 events.
    cancel: Option<Arc<AtomicBool>>,
    /// A run driven from outside (`blis serve`, see `external.rs`); `None`
    /// otherwise (one branch per arrival and release).
    external: Option<Box<external::External>>,
}

/// Build the ABI view of the request about to be decided, telling the
/// plugin query table which request (and session) that is.
fn decision_view<'a>(req: &'a Request, tenants: &'a [String]) -> RequestView<'a> {
    crate::plugins::host_queries::deciding(req.id, req.session.map(|s| s.0), req.client);
    request_view(req, tenants)
}

/// Build the ABI view of a request.
fn request_view<'a>(req: &'a Request, tenants: &'a [String]) -> RequestView<'a> {
    RequestView {
        id: req.id,
        arrival_us: req.arrival,
        input_tokens: req.input_len,
        slo_class: AbiSlo(req.slo_class.code()),
        tenant: RStr::from(
            tenants
                .get(req.tenant as usize)
                .map(String::as_str)
                .unwrap_or(""),
        ),
        block_hashes: RSlice::from_slice(&req.prompt_hashes),
    }
}

impl Cluster {
    /// Assemble a cluster.
    pub fn new(setup: ClusterSetup) -> Self {
        let n = setup.instances.len();
        let client_timeout = setup.workload.client_timeout_us();
        let servable = ServableBound::new(&setup.instances);
        let tenant_names = setup.collector.tenant_names.clone();
        let mut routing = setup.routing;
        routing.keep_reasons(setup.trace.is_some());
        let epp_tokens = setup
            .gateway
            .as_ref()
            .filter(|g| g.detector.counts_tokens())
            .map(|_| Box::new(epp_tokens::EppTokens::new(n)));
        let cache_query = routing.needs_prefix_query()
            || setup.pd.as_ref().is_some_and(|p| p.needs_prefix_query());
        let hash_prompts = match setup.prompt_hashing {
            Provide::Always => true,
            Provide::Never => false,
            Provide::WhenRead => {
                cache_query
                    || setup.admission.reads_block_hashes()
                    || routing.reads_block_hashes()
                    || setup.pd.as_ref().is_some_and(|p| p.reads_block_hashes())
            }
        };
        let (admission_reads, routing_reads) = match setup.snapshot_reads {
            Provide::Always => (true, true),
            Provide::Never => (false, false),
            Provide::WhenRead => (
                setup.admission.reads_snapshots(),
                routing.reads_snapshots() || setup.trace.is_some(),
            ),
        };
        Cluster {
            lora: setup
                .instances
                .iter()
                .any(|i| i.lora().is_some())
                .then(|| Box::new(LoraView::new(setup.freshness.resident_adapters))),
            admission_reads,
            routing_reads,
            queue: EventQueue::new(),
            store: RequestStore::new(),
            pending: vec![0; n],
            snapshots: SnapshotProvider::with_labels(n, setup.freshness, &setup.labels),
            cache_signal: cache_query.then(|| CacheSignal::new(n, setup.cache_signal_delay)),
            in_flight: vec![0; n],
            hooks: lifecycle_hooks(&setup.admission, &routing, &setup.observers),
            first_tokens: Vec::new(),
            custom_order: setup.instances.iter().any(|i| {
                i.config().scheduler == SchedulerKind::Custom
                    || i.config().preemption == PreemptionKind::Custom
            }),
            instances: setup.instances,
            workload: setup.workload,
            admission: setup.admission,
            routing,
            observers: setup.observers,
            admission_latency: setup.admission_latency,
            routing_latency: setup.routing_latency,
            horizon: setup.horizon,
            block_size: setup.block_size,
            collector: setup.collector,
            trace: setup.trace,
            next_sample: setup.timeseries.as_ref().map_or(NEVER, |t| t.next_at),
            timeseries: setup.timeseries,
            next_wakeup: None,
            client_timeout,
            arrived: 0,
            rejected: 0,
            rejected_by: RejectCounts::default(),
            events: 0,
            end_time: 0,
            tenant_names,
            hash_pool: Vec::new(),
            hash_prompts,
            servable,
            gateway: setup.gateway,
            tenant_budgets: setup.tenant_budgets,
            control: setup.control.map(|c| Box::new(ControlPlane::new(c, n))),
            pd: setup.pd.map(|p| Box::new(pd::PdState::new(p, n))),
            models: setup.models.map(Box::new),
            client_headers: setup.client_headers,
            epp_tokens,
            cancel: None,
            external: None,
        }
    }

    /// Stop the run with [`RunError::Cancelled`] once `flag` is set (checked
    /// every 65,536 events, with the progress call; the embedding Python
    /// package sets it on Ctrl-C). Without it nothing is checked.
    pub fn cancel_on(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = Some(flag);
        self
    }

    /// Schedule an `Arrivals` wake-up for the workload's next request if it
    /// is earlier than the one already scheduled.
    fn schedule_arrivals(&mut self) {
        if let Some(t) = self.workload.peek_time() {
            let t = t.max(self.queue.now());
            if self.next_wakeup.is_none_or(|w| t < w) {
                self.queue.push(t, Event::Arrivals);
                self.next_wakeup = Some(t);
            }
        }
    }

    /// Run until the horizon or until no event remains. `progress` is called
    /// now and then with the current simulated time.
    pub fn run(self, progress: impl FnMut(Tick, u64)) -> Result<ClusterOutcome, RunError> {
        self.run_audited(progress, &mut NoAudit)
    }

    /// [`Cluster::run`], calling `audit` after every event.
    pub fn run_audited(
        mut self,
        mut progress: impl FnMut(Tick, u64),
        audit: &mut impl EventAudit,
    ) -> Result<ClusterOutcome, RunError> {
        self.begin();
        let mut peak_live = 0usize;
        while self.step(&mut progress, audit, &mut peak_live)? {}
        self.end(peak_live)
    }

    /// Start a run driven one event at a time ([`Cluster::step`], then
    /// [`Cluster::end`]); [`Cluster::run`] is the three in a loop.
    pub fn begin(&mut self) {
        crate::plugins::host_queries::run_headers(self.client_headers.clone());
        self.schedule_arrivals();
        self.start_control();
    }

    /// The time of the next event the run would execute (`None`: none is
    /// left before the horizon).
    pub fn next_time(&self) -> Option<Tick> {
        self.queue.peek_time().filter(|&t| t <= self.horizon)
    }

    /// Execute the next event; `false` when none is left before the
    /// horizon. `peak_live` tracks the most requests alive at once.
    pub fn step(
        &mut self,
        progress: &mut impl FnMut(Tick, u64),
        audit: &mut impl EventAudit,
        peak_live: &mut usize,
    ) -> Result<bool, RunError> {
        let Some(t) = self.next_time() else {
            return Ok(false);
        };
        if t >= TIME_LIMIT {
            let ev = self.queue.pop().expect("peeked").event;
            return Err(RunError::TimeLimit {
                at: t,
                what: format!("event {ev:?}"),
            });
        }
        if self.idle_tick_next() {
            // A scaling tick after the work ended is not part of the
            // run: it neither lasts nor bills (nor asks the autoscaler).
            self.queue.pop();
            self.events += 1;
            return Ok(true);
        }
        if t > self.next_sample {
            self.sample(t);
        }
        let ev = self.queue.pop().expect("peeked").event;
        self.end_time = t;
        self.events += 1;
        if self.events & 0xffff == 0 {
            progress(t, self.arrived);
            *peak_live = (*peak_live).max(self.store.live());
            if self
                .cancel
                .as_ref()
                .is_some_and(|c| c.load(Ordering::Relaxed))
            {
                return Err(RunError::Cancelled);
            }
        }
        self.execute(t, ev)?;
        audit.after_event(AuditView {
            time: t,
            event: ev,
            instances: &self.instances,
            store: &self.store,
            pending: &self.pending,
            in_flight: &self.in_flight,
            control: self.control.as_deref(),
        });
        Ok(true)
    }

    /// End a run driven by [`Cluster::step`]: the outcome.
    pub fn end(mut self, peak_live: usize) -> Result<ClusterOutcome, RunError> {
        let peak_live = peak_live.max(self.store.live());
        for inst in &self.instances {
            RunError::check_time(inst.counts().last_delivery, || {
                format!("a token delivered by instance {}", inst.index())
            })?;
        }
        if self.hooks.contains(EventKind::RUN_END) {
            self.deliver_run_end()?;
        }
        Ok(self.finish(peak_live))
    }

    /// Execute event `ev` at `t`.
    fn execute(&mut self, t: Tick, ev: Event) -> Result<(), RunError> {
        match ev {
            Event::Arrivals => self.on_arrivals(t)?,
            Event::Control { what, id } => self.on_control(t, what, id)?,
            Event::Admission(slot) => self.on_admission(t, slot)?,
            Event::Routing(slot) if self.gateway.is_some() => self.gateway_routing(t, slot)?,
            Event::Routing(slot) if self.pd.is_some() => self.pd_route(t, slot)?,
            Event::Routing(slot) => self.on_routing(t, slot)?,
            Event::Gateway(timer) => self.on_gateway_timer(t, timer)?,
            Event::ClientTimeout { slot, id } => self.on_client_timeout(t, slot, id)?,
            Event::KvTransferDone(slot) => self.pd_transfer_done(t, slot),
            Event::InstanceArrival { instance, slot } => {
                self.instance_event(instance, t);
                self.instances[instance as usize].on_arrival(
                    t,
                    slot,
                    &mut self.store,
                    &mut self.queue,
                );
            }
            Event::Queued { instance, slot } => {
                self.instance_event(instance, t);
                let p = &mut self.pending[instance as usize];
                *p = p.saturating_sub(1);
                self.instances[instance as usize].on_queued(
                    t,
                    slot,
                    &mut self.store,
                    &mut self.queue,
                    &mut self.collector,
                );
                self.collector.queued(instance, &self.store[slot]);
                self.instance_policy_error(instance)?;
                self.release_finished(t)?;
                self.after_instance_event(t, instance);
            }
            Event::Step { instance } => self.on_step(t, instance)?,
        }
        Ok(())
    }

    /// An instance's step ends at `t`.
    fn on_step(&mut self, t: Tick, instance: u32) -> Result<(), RunError> {
        self.instance_event(instance, t);
        if self.pd.is_some() {
            self.pd_step(t, instance)?;
        } else if self.hooks.contains(EventKind::FIRST_TOKEN) || self.epp_tokens.is_some() {
            let mut obs = FirstTokens {
                collector: &mut self.collector,
                seen: &mut self.first_tokens,
            };
            self.instances[instance as usize].on_step(
                t,
                &mut self.store,
                &mut self.queue,
                &mut obs,
            );
            self.deliver_first_tokens()?;
        } else {
            self.instances[instance as usize].on_step(
                t,
                &mut self.store,
                &mut self.queue,
                &mut self.collector,
            );
        }
        self.instance_policy_error(instance)?;
        self.release_finished(t)?;
        self.after_instance_event(t, instance);
        Ok(())
    }

    fn counts(&self) -> ClusterCounts {
        ClusterCounts {
            arrived: self.arrived,
            completed: self.collector.instances.iter().map(|r| r.completed).sum(),
            gateway_depth: self.gateway.as_ref().map(|g| g.queue.depth()),
        }
    }

    /// Write the time-series boundaries before `t` (state after every event up to each).
    fn sample(&mut self, t: Tick) {
        let counts = self.counts();
        if let Some(ts) = self.timeseries.as_mut() {
            ts.sample(t, &self.instances, counts, self.control.as_deref());
            self.next_sample = ts.next_at;
        }
    }

    fn on_arrivals(&mut self, t: Tick) -> Result<(), Box<PluginError>> {
        self.next_wakeup = None;
        while self.workload.peek_time().is_some_and(|a| a <= t) {
            let bs = self.block_size;
            let wl = &mut self.workload;
            let mut ok = true;
            let slot = self.store.insert_with(|r| {
                ok = wl.pop_into(r);
                r.state = RequestState::Pipeline;
                r.instance = u32::MAX;
                r.enqueued_at = crate::request::UNSET;
                r.scheduled_at = crate::request::UNSET;
                r.first_token_at = crate::request::UNSET;
                r.last_token_at = crate::request::UNSET;
                r.completed_at = crate::request::UNSET;
                r.gateway_queued_at = crate::request::UNSET;
                r.gateway_dispatched_at = crate::request::UNSET;
                r.budget_counted = false;
            });
            if !ok {
                self.store.release(slot);
                break;
            }
            // Compute the prompt's block hashes once; admission and routing
            // both see them. A request no instance can serve (it will be
            // dropped at its instance) gets none: its prompt may be huge.
            let mut hashes = self.hash_pool.pop().unwrap_or_default();
            let req = &self.store[slot];
            if self.hash_prompts && self.servable.admits(req.input_len, req.output_len) {
                prompt_block_hashes(req, bs, &mut hashes);
            } else {
                hashes.clear();
            }
            self.store[slot].prompt_hashes = hashes;
            self.arrived += 1;
            self.collector.arrived(&self.store[slot]);
            if let Some(after) = self.client_timeout {
                let id = self.store[slot].id as u32;
                self.queue
                    .push(later(t, after), Event::ClientTimeout { slot, id });
            }
            if let Some(instance) = self.external_arrival(slot) {
                // Sent to one instance's own server: no admission, no routing.
                self.pin(t, slot, instance)?;
                continue;
            }
            self.queue
                .push(later(t, self.admission_latency), Event::Admission(slot));
        }
        self.schedule_arrivals();
        Ok(())
    }

    /// A real client's timeout ran out for the request in `slot` (if it is
    /// still request `id`'s and live): the client closes the connection and
    /// the server aborts the request (`abort`, as [`Cluster::cancel`]
    /// does). A request not yet on an instance (admission, routing, a queue
    /// in front) is tried again a millisecond later.
    fn on_client_timeout(&mut self, t: Tick, slot: Slot, id: u32) -> Result<(), Box<PluginError>> {
        if !self.store.is_live(slot) || self.store[slot].id as u32 != id {
            return Ok(());
        }
        match self.store[slot].state {
            RequestState::Queued | RequestState::Running => {
                if self.abort(t, slot)? {
                    if let Some(c) = &mut self.collector.client {
                        c.timed_out();
                    }
                }
            }
            RequestState::Completed | RequestState::Dropped | RequestState::Rejected => {}
            _ => self
                .queue
                .push(later(t, 1_000), Event::ClientTimeout { slot, id }),
        }
        Ok(())
    }

    /// An event of `instance` at `t` is about to run: the collector counts
    /// it, and the next decision re-reads the instance's live signals.
    fn instance_event(&mut self, instance: u32, t: Tick) {
        self.collector.instance_event(instance, t);
        self.snapshots.touched(instance);
    }

    fn on_admission(&mut self, t: Tick, slot: Slot) -> Result<(), Box<PluginError>> {
        if self.tenant_budgets.is_some() && self.over_tenant_budget(t, slot)? {
            return Ok(());
        }
        let snaps =
            self.snapshots
                .for_decision(self.admission_reads, t, &self.instances, &self.pending);
        let view = ClusterView {
            clock_us: t,
            instances: RSlice::from_slice(snaps),
        };
        let req = &self.store[slot];
        let rv = decision_view(req, &self.tenant_names);
        let lora = self
            .lora
            .as_deref_mut()
            .map(|l| l.decision(t, req, &self.instances, &self.workload, None));
        let admitted = with_lora(lora.as_ref(), || self.admission.admit(&rv, &view))?;
        if admitted && self.gateway.is_some() {
            self.gateway_enqueue(t, slot)?;
        } else if admitted {
            self.queue
                .push(later(t, self.routing_latency), Event::Routing(slot));
        } else {
            if let Some(tr) = self.trace.as_mut() {
                let reason = self.admission.take_reason();
                tr.rejection(req.id, t, self.admission.refuser(), reason);
            }
            self.reject(t, slot, Reject::Admission)?;
        }
        Ok(())
    }

    /// Count a request refused by admission or routing, tell the policies
    /// that asked, and release it.
    fn reject(&mut self, t: Tick, slot: Slot, cause: Reject) -> Result<(), Box<PluginError>> {
        self.rejected += 1;
        self.rejected_by.count(cause);
        if self.tenant_budgets.is_some() {
            self.release_budget(slot);
        }
        self.lifecycle(t, EventKind::REJECTED, slot, u32::MAX)?;
        self.store[slot].state = RequestState::Rejected;
        if let Some(m) = &mut self.collector.models {
            m.rejected(&self.store[slot], cause == Reject::NoModel);
        }
        self.collector.rejected(&self.store[slot]);
        self.workload.on_finished(&self.store[slot], t, false);
        let hashes = std::mem::take(&mut self.store[slot].prompt_hashes);
        self.hash_pool.push(hashes);
        self.gateway_untrack(slot);
        self.external_release(slot);
        self.store.release(slot);
        self.schedule_arrivals();
        Ok(())
    }

    fn on_routing(&mut self, t: Tick, slot: Slot) -> Result<(), Box<PluginError>> {
        let needs_state = self.routing.needs_state();
        self.snapshots
            .for_decision(self.routing_reads, t, &self.instances, &self.pending);
        if needs_state {
            self.snapshots
                .build_info(&self.instances, &self.in_flight, &self.store);
        }
        let req = &self.store[slot];
        let prefix_blocks = match self.cache_signal.as_mut() {
            Some(cs) => cs.query(t, &self.instances, &req.prompt_hashes),
            None => &[],
        };
        let snaps = self.snapshots.snaps();
        let view = ClusterView {
            clock_us: t,
            instances: RSlice::from_slice(snaps),
        };
        let state = ClusterState {
            view,
            candidates: RSlice::from_slice(&[]),
            info: RSlice::from_slice(self.snapshots.info()),
            prefix_blocks: RSlice::from_slice(prefix_blocks),
        };
        let rv = decision_view(req, &self.tenant_names);
        // The candidates when not every instance is one: the instances
        // serving the request's model (several models; with the control
        // plane, the routable ones of them), else the routable ones
        // (instance lifecycle), with the reusable buffer of a router
        // plugin's view.
        let subset = if let Some(m) = self.models.as_deref_mut() {
            let fm = m.model_of(req.model.get());
            if !m.serves(fm) {
                if let Some(tr) = self.trace.as_mut() {
                    tr.rejection(req.id, t, "no instance serves the request's model", None);
                }
                return self.reject(t, slot, Reject::NoModel);
            }
            let ModelFilter {
                members, compact, ..
            } = m;
            let members = members[fm as usize].as_slice();
            if members.is_empty() {
                if let Some(c) = self.control.as_deref_mut() {
                    c.no_instance += 1;
                }
                if let Some(tr) = self.trace.as_mut() {
                    tr.rejection(
                        req.id,
                        t,
                        "no routable instance of the request's model (instance lifecycle)",
                        None,
                    );
                }
                return self.reject(t, slot, Reject::NoInstance);
            }
            Some((members, compact))
        } else {
            if let Some(c) = self
                .control
                .as_deref_mut()
                .filter(|c| c.routable.is_empty())
            {
                c.no_instance += 1;
                if let Some(tr) = self.trace.as_mut() {
                    tr.rejection(req.id, t, "no routable instance (instance lifecycle)", None);
                }
                return self.reject(t, slot, Reject::NoInstance);
            }
            self.control
                .as_deref_mut()
                .filter(|c| !c.all_routable())
                .map(|c| {
                    let ControlPlane {
                        routable, compact, ..
                    } = c;
                    (routable.as_slice(), compact)
                })
        };
        let lora = self
            .lora
            .as_deref_mut()
            .map(|l| l.decision(t, req, &self.instances, &self.workload, None));
        self.routing.select_client(req.client);
        let decide = || match (subset, &mut self.routing) {
            (Some((ids, compact)), Routing::Single(r)) => {
                // A router sees the candidates only, in index order.
                compact.clear();
                compact.extend(ids.iter().map(|&i| snaps[i as usize]));
                let sub = ClusterView {
                    clock_us: t,
                    instances: RSlice::from_slice(compact),
                };
                r.route(&rv, &sub).map(|k| Decision::Routed {
                    chosen: ids[k as usize],
                    scores: None,
                    // (the decision trace ranks these only)
                    candidates: Some(ids),
                })
            }
            (subset, routing) => {
                routing.set_eligible(subset.map(|(ids, _)| ids));
                routing.route(&rv, &view, needs_state.then_some(&state))
            }
        };
        let decision = with_lora(lora.as_ref(), decide)?;
        let chosen = match decision {
            Decision::Routed {
                chosen,
                scores,
                candidates,
            } => {
                if let Some(tr) = self.trace.as_mut() {
                    tr.routing(req.id, t, chosen, scores, candidates, snaps);
                    if let Some(p) = self.routing.profile() {
                        tr.scorer_scores(p, snaps.len());
                        if !p.filters.is_empty() {
                            tr.filtered(p, None);
                        }
                    }
                    tr.emit();
                }
                chosen
            }
            Decision::NoCandidate { filter } => {
                let profile = self.routing.profile().filter(|p| !p.filters.is_empty());
                if let (Some(tr), Some(p)) = (self.trace.as_mut(), profile) {
                    tr.no_candidate(req.id, t, p, filter);
                }
                return self.reject(t, slot, Reject::Filter);
            }
        };
        self.routing.observe(&rv, &view, chosen)?;
        self.admission.observe(&rv, &view, chosen)?;
        self.pending[chosen as usize] += 1;
        self.in_flight[chosen as usize] += 1;
        if self.epp_tokens.is_some() {
            self.charge_tokens(slot, chosen);
        }
        self.routed_to(chosen);
        self.store[slot].instance = chosen;
        self.dispatched(t, slot, chosen)
    }

    /// A request sent to `instance`: the dispatched hook, its prompt hashes
    /// returned to the pool, its arrival at the instance queued.
    #[inline]
    pub(super) fn dispatched(
        &mut self,
        t: Tick,
        slot: Slot,
        instance: u32,
    ) -> Result<(), Box<PluginError>> {
        self.lifecycle(t, EventKind::DISPATCHED, slot, instance)?;
        let req = &mut self.store[slot];
        let hashes = std::mem::take(&mut req.prompt_hashes);
        self.hash_pool.push(hashes);
        self.queue
            .push(t, Event::InstanceArrival { instance, slot });
        Ok(())
    }

    /// The error of a scheduler or preemption plugin of `instance`, if its
    /// last event met one.
    #[inline]
    fn instance_policy_error(&mut self, instance: u32) -> Result<(), Box<PluginError>> {
        if !self.custom_order {
            return Ok(());
        }
        match self.instances[instance as usize].take_policy_error() {
            Some(message) => Err(Box::new(PluginError::InInstance { message })),
            None => Ok(()),
        }
    }

    /// Deliver lifecycle event `kind` of the request in `slot` to every
    /// policy that handles it. Free when no policy does.
    #[inline]
    fn lifecycle(
        &mut self,
        t: Tick,
        kind: EventKind,
        slot: Slot,
        instance: u32,
    ) -> Result<(), Box<PluginError>> {
        if !self.hooks.contains(kind) {
            return Ok(());
        }
        self.deliver(t, kind, slot, instance)
    }

    #[cold]
    fn deliver(
        &mut self,
        t: Tick,
        kind: EventKind,
        slot: Slot,
        instance: u32,
    ) -> Result<(), Box<PluginError>> {
        self.snapshots.peek(&self.instances, &self.pending);
        self.snapshots
            .build_info(&self.instances, &self.in_flight, &self.store);
        let state = self.snapshots.whole_cluster(t);
        let req = &self.store[slot];
        let since = |at: Tick| {
            if at == crate::request::UNSET {
                -1
            } else {
                at - req.arrival
            }
        };
        let completed = kind == EventKind::COMPLETED;
        let event = RequestEvent {
            kind,
            instance,
            time_us: t,
            request: RequestView {
                block_hashes: RSlice::from_slice(&[]),
                ..request_view(req, &self.tenant_names)
            },
            ttft_us: since(req.first_token_at),
            e2e_us: if completed {
                since(req.completed_at)
            } else {
                -1
            },
            output_tokens: req.generated,
            reserved: 0,
        };
        notify(
            &mut self.admission,
            &mut self.routing,
            &mut self.observers,
            &event,
            &state,
        )
    }

    /// The run's request counts, as a policy's `on_run_end` sees them.
    pub fn run_summary(&self) -> RunSummary {
        let completed = self.counts().completed;
        let dropped: u64 = self.collector.instances.iter().map(|r| r.dropped).sum();
        let by = &self.rejected_by;
        RunSummary {
            end_us: self.end_time,
            arrived: self.arrived,
            completed,
            rejected: self.rejected,
            rejected_by_admission: by.admission,
            rejected_by_filter: by.filter,
            rejected_by_gateway: by.gateway,
            rejected_by_tenant_budget: by.tenant_budget,
            rejected_no_instance: by.no_instance,
            dropped,
            unfinished: self
                .arrived
                .saturating_sub(completed + self.rejected + dropped),
        }
    }

    /// Deliver the end of the run (`EventKind::RUN_END`, its summary as
    /// TOML in the event's text field) to every policy that asked for it,
    /// with the cluster as the run left it.
    #[cold]
    fn deliver_run_end(&mut self) -> Result<(), Box<PluginError>> {
        let summary = self.run_summary().to_toml();
        self.snapshots.peek(&self.instances, &self.pending);
        self.snapshots
            .build_info(&self.instances, &self.in_flight, &self.store);
        let state = self.snapshots.whole_cluster(self.end_time);
        let event = RequestEvent {
            kind: EventKind::RUN_END,
            instance: u32::MAX,
            time_us: self.end_time,
            request: RequestView {
                id: u64::MAX,
                arrival_us: self.end_time,
                input_tokens: 0,
                slo_class: AbiSlo(0),
                tenant: RStr::from(summary.as_str()),
                block_hashes: RSlice::from_slice(&[]),
            },
            ttft_us: -1,
            e2e_us: -1,
            output_tokens: 0,
            reserved: 0,
        };
        notify(
            &mut self.admission,
            &mut self.routing,
            &mut self.observers,
            &event,
            &state,
        )
    }

    /// Charge the request in `slot`, just routed to `chosen`, to the
    /// router's in-flight tokens: its prompt less the leading blocks
    /// `chosen` caches now.
    #[cold]
    fn charge_tokens(&mut self, slot: Slot, chosen: u32) {
        let req = &self.store[slot];
        let cached = self.instances[chosen as usize].cached_prompt_blocks(req);
        let tokens =
            u64::from(req.input_len).saturating_sub(u64::from(cached) * u64::from(self.block_size));
        if let Some(e) = self.epp_tokens.as_mut() {
            e.charge(req.id, chosen, tokens);
        }
    }

    /// Release the router's in-flight tokens of the first tokens of the
    /// last step, then deliver those first tokens, in the order they were
    /// produced, each with the cluster as the step left it.
    #[cold]
    fn deliver_first_tokens(&mut self) -> Result<(), Box<PluginError>> {
        if self.first_tokens.is_empty() {
            return Ok(());
        }
        if let Some(e) = self.epp_tokens.as_mut() {
            for ft in &self.first_tokens {
                e.release(ft.id);
            }
            if !self.hooks.contains(EventKind::FIRST_TOKEN) {
                self.first_tokens.clear();
                return Ok(());
            }
        }
        let firsts = std::mem::take(&mut self.first_tokens);
        self.snapshots.peek(&self.instances, &self.pending);
        self.snapshots
            .build_info(&self.instances, &self.in_flight, &self.store);
        let state = self.snapshots.whole_cluster(self.queue.now());
        let mut result = Ok(());
        for ft in &firsts {
            let event = RequestEvent {
                kind: EventKind::FIRST_TOKEN,
                instance: ft.instance,
                time_us: ft.at,
                request: RequestView {
                    id: ft.id,
                    arrival_us: ft.arrival,
                    input_tokens: ft.input_len,
                    slo_class: AbiSlo(ft.slo_class.code()),
                    tenant: RStr::from(
                        self.tenant_names
                            .get(ft.tenant as usize)
                            .map(String::as_str)
                            .unwrap_or(""),
                    ),
                    block_hashes: RSlice::from_slice(&[]),
                },
                ttft_us: ft.at - ft.arrival,
                e2e_us: -1,
                output_tokens: 1,
                reserved: 0,
            };
            result = notify(
                &mut self.admission,
                &mut self.routing,
                &mut self.observers,
                &event,
                &state,
            );
            if result.is_err() {
                break;
            }
        }
        let mut firsts = firsts;
        firsts.clear();
        self.first_tokens = firsts;
        result
    }

    /// Account for requests that completed or were dropped during the last
    /// instance event, and recycle their slots.
    fn release_finished(&mut self, t: Tick) -> Result<(), Box<PluginError>> {
        if self.collector.finished.is_empty() {
            return Ok(());
        }
        let finished = std::mem::take(&mut self.collector.finished);
        for &(slot, completed) in &finished {
            let instance = self.store[slot].instance;
            if let Some(n) = self.in_flight.get_mut(instance as usize) {
                *n = n.saturating_sub(1);
            }
            if let Some(e) = self.epp_tokens.as_mut() {
                e.release(self.store[slot].id);
            }
            if self.tenant_budgets.is_some() {
                self.release_budget(slot);
            }
            let kind = if completed {
                EventKind::COMPLETED
            } else {
                EventKind::DROPPED
            };
            if self.hooks.contains(kind) {
                self.deliver(t, kind, slot, instance)?;
            }
            self.collector.result_line(&self.store[slot]);
            // A session's think time starts when the client saw the last token.
            let at = if completed {
                self.store[slot].completed_at.max(t)
            } else {
                t
            };
            self.workload.on_finished(&self.store[slot], at, completed);
            self.gateway_untrack(slot);
            self.external_release(slot);
            self.store.release(slot);
        }
        let freed = finished.len();
        let mut finished = finished;
        finished.clear();
        self.collector.finished = finished;
        self.schedule_arrivals();
        if self.gateway.is_some() {
            self.gateway_capacity_freed(t, freed)?;
        }
        Ok(())
    }

    fn finish(mut self, peak_live: usize) -> ClusterOutcome {
        // Requests still in the system: write their result lines, count the pipeline.
        for inst in &self.instances {
            inst.sync(&mut self.store);
        }
        let pd = self.pd.take().map(|p| p.finish(&mut self.store));
        let mut in_pipeline = 0;
        let mut live: Vec<Slot> = (0..self.store.capacity() as Slot)
            .filter(|&s| self.store.is_live(s))
            .collect();
        live.sort_by_key(|&s| self.store[s].id);
        for s in live {
            if self.store[s].state == RequestState::Pipeline {
                in_pipeline += 1;
            }
            self.collector.result_line(&self.store[s]);
        }
        if let Some(w) = self.collector.results.as_mut() {
            if let Err(e) = w.finish() {
                self.collector.write_error.get_or_insert(e);
            }
        }
        if let Some(tr) = self.trace.as_mut() {
            tr.finish();
        }
        let duration = self
            .instances
            .iter()
            .map(|i| i.counts().last_delivery)
            .fold(self.end_time, Tick::max);
        let counts = self.counts();
        if let Some(ts) = self.timeseries.as_mut() {
            ts.finish(
                self.end_time,
                &self.instances,
                counts,
                self.control.as_deref(),
            );
        }
        ClusterOutcome {
            duration,
            instances: self.instances,
            collector: self.collector,
            trace: self.trace,
            timeseries: self.timeseries,
            arrived: self.arrived,
            rejected: self.rejected,
            rejected_by: self.rejected_by,
            still_in_pipeline: in_pipeline,
            end_time: self.end_time,
            events: self.events,
            peak_live_requests: peak_live,
            workload_error: self.workload.take_error(),
            gateway: self.gateway.map(|g| (g.counts, g.queue.depth())),
            tenant_budget_rejected: self.tenant_budgets.map(|b| b.rejected),
            control: self.control,
            pd,
        }
    }
}

/// Deliver one lifecycle event to every policy that handles it.
fn notify(
    admission: &mut Admission,
    routing: &mut Routing,
    observers: &mut [ObserverPolicy],
    event: &RequestEvent<'_>,
    state: &ClusterState<'_>,
) -> Result<(), Box<PluginError>> {
    if admission.wants(event.kind) {
        admission.on_event(event, state)?;
    }
    routing.on_event(event, state)?;
    for o in observers.iter_mut().filter(|o| o.wants(event.kind)) {
        o.on_event(event, state)?;
    }
    Ok(())
}

/// The lifecycle events any policy of the run handles.
fn lifecycle_hooks(
    admission: &Admission,
    routing: &Routing,
    observers: &[ObserverPolicy],
) -> Hooks {
    let observed = observers.iter().fold(0, |h, o| h | o.label().hooks.0);
    Hooks(admission.hooks().0 | routing.hooks().0 | observed)
}

/// Why a request was refused before reaching an instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// The admission policy said no.
    Admission,
    /// The routing profile's filters left no candidate.
    Filter,
    /// The gateway queue (`[flow_control]`) was full, shed it or let it expire.
    Gateway,
    /// Its tenant's budget (`[tenants]`) was full.
    TenantBudget,
    /// No instance was routable (instance lifecycle).
    NoInstance,
    /// No instance serves the request's model.
    NoModel,
}

/// Rejected requests by cause (they sum to the rejected count).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RejectCounts {
    pub admission: u64,
    pub filter: u64,
    pub gateway: u64,
    pub tenant_budget: u64,
    pub no_instance: u64,
    pub unroutable_by_model: u64,
}

impl RejectCounts {
    fn count(&mut self, cause: Reject) {
        *match cause {
            Reject::Admission => &mut self.admission,
            Reject::Filter => &mut self.filter,
            Reject::Gateway => &mut self.gateway,
            Reject::TenantBudget => &mut self.tenant_budget,
            Reject::NoInstance => &mut self.no_instance,
            Reject::NoModel => &mut self.unroutable_by_model,
        } += 1;
    }
}

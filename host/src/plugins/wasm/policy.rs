//! One WebAssembly policy: its store, its instance and its handle, behind
//! the native ABI's policy traits (so `plugins::policy` checks its results
//! as it checks any library's). The (request, cluster view) calls lower the
//! host's views in place ([`super::lower`]); the others copy them into
//! reused buffers of the WIT types. Each call gets `fuel_per_call` fuel.

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RResult, RSlice, RString, RVec};
use blis_plugin_api::abi::{
    AdmissionAbi, AdmissionAbi_TO, AutoscalerAbi, AutoscalerAbi_TO, DeciderAbi, DeciderAbi_TO,
    FilterAbi, FilterAbi_TO, ObserverAbi, ObserverAbi_TO, PickerAbi, PickerAbi_TO, PreemptionAbi,
    PreemptionAbi_TO, RouterAbi, RouterAbi_TO, SchedulerAbi, SchedulerAbi_TO, ScorerAbi,
    ScorerAbi_TO,
};
use blis_plugin_api::{
    AdmissionBox, AutoscalerBox, ClusterState, ClusterView, DeciderBox, FilterBox, ObserverBox,
    PdView, PickerBox, PolicyError, PreemptionBox, RequestEvent, RequestView, RouterBox,
    RunningRequest, SchedulerBox, ScorerBox,
};
use wasmtime::Store;

use super::bindings::blis::plugin::types as wit;
use super::bindings::Plugin;
use super::lower::{Req, View, ViewCalls};
use super::sandbox::HostState;
use super::{short, WasmLimits};
use crate::plugins::policy::TRAP_MARK;

/// A policy of a component, with the buffers its views are copied into.
pub struct WasmPolicy {
    store: Store<HostState>,
    plugin: Plugin,
    /// `admit`, `route`, `score` and `observe`, lowered without copies.
    calls: ViewCalls,
    handle: u32,
    limits: WasmLimits,
    bufs: Bufs,
}

/// The WIT values of the current call, reused from call to call.
struct Bufs {
    request: wit::RequestView,
    state: wit::ClusterState,
    event: wit::RequestEvent,
    running: Vec<wit::RunningRequest>,
}

fn empty_request() -> wit::RequestView {
    wit::RequestView {
        id: 0,
        arrival_us: 0,
        input_tokens: 0,
        slo_class: 0,
        tenant: String::new(),
        block_hashes: Vec::new(),
    }
}

fn empty_view() -> wit::ClusterView {
    wit::ClusterView {
        clock_us: 0,
        instances: Vec::new(),
    }
}

fn set_request(out: &mut wit::RequestView, r: &RequestView<'_>) {
    out.id = r.id;
    out.arrival_us = r.arrival_us;
    out.input_tokens = r.input_tokens;
    out.slo_class = r.slo_class.0;
    if out.tenant != r.tenant.as_str() {
        out.tenant.clear();
        out.tenant.push_str(r.tenant.as_str());
    }
    out.block_hashes.clear();
    out.block_hashes
        .extend_from_slice(r.block_hashes.as_slice());
}

fn set_view(out: &mut wit::ClusterView, c: &ClusterView<'_>) {
    out.clock_us = c.clock_us;
    out.instances.clear();
    out.instances
        .extend(c.instances().iter().map(|s| wit::InstanceSnapshot {
            queue_depth: s.queue_depth,
            batch_size: s.batch_size,
            pending_requests: s.pending_requests,
            kv_utilization: s.kv_utilization,
            free_kv_blocks: s.free_kv_blocks,
            cache_hit_rate: s.cache_hit_rate,
        }));
}

fn set_string(out: &mut String, s: &str) {
    if out != s {
        out.clear();
        out.push_str(s);
    }
}

fn set_state(out: &mut wit::ClusterState, c: &ClusterState<'_>) {
    set_view(&mut out.view, &c.view);
    out.candidates.clear();
    out.candidates.extend_from_slice(c.candidates());
    let info = c.info();
    out.info.truncate(info.len());
    while out.info.len() < info.len() {
        out.info.push(wit::InstanceInfo {
            in_flight: 0,
            tp: 0,
            preemptions: 0,
            kv_capacity_tokens: 0,
            kv_tokens_in_use: 0,
            model: String::new(),
            gpu: String::new(),
            state: 0,
            running_tokens: 0,
            waiting_tokens: 0,
        });
    }
    for (o, i) in out.info.iter_mut().zip(info) {
        o.in_flight = i.in_flight;
        o.tp = i.tp;
        o.preemptions = i.preemptions;
        o.kv_capacity_tokens = i.kv_capacity_tokens;
        o.kv_tokens_in_use = i.kv_tokens_in_use;
        set_string(&mut o.model, i.model.as_str());
        set_string(&mut o.gpu, i.gpu.as_str());
        o.state = i.state.0;
        o.running_tokens = i.running_tokens;
        o.waiting_tokens = i.waiting_tokens;
    }
    out.prefix_blocks.clear();
    out.prefix_blocks.extend_from_slice(c.prefix_blocks());
}

/// The one-line description of a failed call: fuel, the memory cap, a
/// guest panic (with its message), an uncaught exception (the last line
/// the component wrote to stderr) or another trap.
pub(super) fn trap_message(
    e: &wasmtime::Error,
    store: &Store<HostState>,
    limits: WasmLimits,
) -> String {
    let data = store.data();
    if let Some(asked) = data.limiter.hit {
        return format!(
            "exceeded its memory cap: it asked for {} MiB of linear memory, the cap is {} MiB \
             (max_memory_mib in [[plugins]])",
            asked.div_ceil(1 << 20),
            data.limiter.max_bytes() >> 20
        );
    }
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel) => format!(
            "ran out of fuel: the call used all of its {} units (fuel_per_call in [[plugins]]); \
             an endless loop, or raise the budget",
            limits.fuel_per_call
        ),
        Some(trap) => {
            if let Some(p) = &data.panic {
                format!("panicked: {}", one_line(p))
            } else if let Some(line) = data.last_stderr_line() {
                format!("trapped ({trap}): {}", one_line(&line))
            } else {
                format!("trapped: {trap}")
            }
        }
        None => match (&data.panic, data.last_stderr_line()) {
            (Some(p), _) => format!("panicked: {}", one_line(p)),
            (None, Some(line)) => format!("failed ({}): {}", short(e), one_line(&line)),
            (None, None) => format!("failed: {}", short(e)),
        },
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl WasmPolicy {
    pub(super) fn new(
        store: Store<HostState>,
        plugin: Plugin,
        calls: ViewCalls,
        handle: u32,
        limits: WasmLimits,
    ) -> Self {
        WasmPolicy {
            store,
            plugin,
            calls,
            handle,
            limits,
            bufs: Bufs {
                request: empty_request(),
                state: wit::ClusterState {
                    view: empty_view(),
                    candidates: Vec::new(),
                    info: Vec::new(),
                    prefix_blocks: Vec::new(),
                },
                event: wit::RequestEvent {
                    kind: 0,
                    instance: 0,
                    time_us: 0,
                    request: empty_request(),
                    ttft_us: 0,
                    e2e_us: 0,
                    output_tokens: 0,
                },
                running: Vec::new(),
            },
        }
    }
}

/// Run one call with a fresh fuel budget; a failure becomes the
/// `PolicyError` `plugins::policy` turns into a one-line error.
fn call<T>(
    store: &mut Store<HostState>,
    limits: WasmLimits,
    f: impl FnOnce(&mut Store<HostState>) -> wasmtime::Result<T>,
) -> RResult<T, PolicyError> {
    // Fuel is enabled on the engine, so setting it cannot fail.
    let _ = store.set_fuel(limits.fuel_per_call);
    match f(store) {
        Ok(v) => RResult::ROk(v),
        Err(e) => RResult::RErr(PolicyError {
            panicked: false,
            message: format!("{TRAP_MARK}{}", trap_message(&e, store, limits)).into(),
        }),
    }
}

/// Calls with (request, cluster state).
macro_rules! with_state {
    ($self:ident, $r:expr, $c:expr, |$g:ident, $s:ident, $h:ident, $b:ident| $call:expr) => {{
        set_request(&mut $self.bufs.request, $r);
        set_state(&mut $self.bufs.state, $c);
        let ($g, $b, $h) = ($self.plugin.blis_plugin_policy(), &$self.bufs, $self.handle);
        call(&mut $self.store, $self.limits, |$s| $call)
    }};
}

impl WasmPolicy {
    fn observe_call(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        let (calls, h) = (self.calls, self.handle);
        call(&mut self.store, self.limits, |s| {
            calls.observe(s, (h, Req::of(r), View::of(c), chosen))
        })
    }

    fn event_call(
        &mut self,
        e: &RequestEvent<'_>,
        c: &ClusterState<'_>,
    ) -> RResult<(), PolicyError> {
        let ev = &mut self.bufs.event;
        ev.kind = e.kind.0;
        ev.instance = e.instance;
        ev.time_us = e.time_us;
        set_request(&mut ev.request, &e.request);
        ev.ttft_us = e.ttft_us;
        ev.e2e_us = e.e2e_us;
        ev.output_tokens = e.output_tokens;
        set_state(&mut self.bufs.state, c);
        let (g, b, h) = (self.plugin.blis_plugin_policy(), &self.bufs, self.handle);
        call(&mut self.store, self.limits, |s| {
            g.call_on_event(s, h, &b.event, &b.state)
        })
    }

    fn reason_call(&mut self) -> RString {
        let (g, h) = (self.plugin.blis_plugin_policy(), self.handle);
        match call(&mut self.store, self.limits, |s| g.call_take_reason(s, h)) {
            RResult::ROk(text) => text.into(),
            RResult::RErr(_) => RString::new(),
        }
    }

    /// As an admission policy object.
    pub fn into_admission(self) -> AdmissionBox {
        AdmissionAbi_TO::from_value(self, TD_Opaque)
    }
    /// As a router object.
    pub fn into_router(self) -> RouterBox {
        RouterAbi_TO::from_value(self, TD_Opaque)
    }
    /// As a scorer object.
    pub fn into_scorer(self) -> ScorerBox {
        ScorerAbi_TO::from_value(self, TD_Opaque)
    }
    /// As a filter object.
    pub fn into_filter(self) -> FilterBox {
        FilterAbi_TO::from_value(self, TD_Opaque)
    }
    /// As a picker object.
    pub fn into_picker(self) -> PickerBox {
        PickerAbi_TO::from_value(self, TD_Opaque)
    }
    /// As a scheduler object.
    pub fn into_scheduler(self) -> SchedulerBox {
        SchedulerAbi_TO::from_value(self, TD_Opaque)
    }
    /// As a preemption object.
    pub fn into_preemption(self) -> PreemptionBox {
        PreemptionAbi_TO::from_value(self, TD_Opaque)
    }
    /// As an autoscaler object.
    pub fn into_autoscaler(self) -> AutoscalerBox {
        AutoscalerAbi_TO::from_value(self, TD_Opaque)
    }
    /// As a decider object.
    pub fn into_decider(self) -> DeciderBox {
        DeciderAbi_TO::from_value(self, TD_Opaque)
    }
    /// As an observer object.
    pub fn into_observer(self) -> ObserverBox {
        ObserverAbi_TO::from_value(self, TD_Opaque)
    }
}

impl AdmissionAbi for WasmPolicy {
    fn admit(&mut self, r: &RequestView<'_>, c: &ClusterView<'_>) -> RResult<bool, PolicyError> {
        let (calls, h) = (self.calls, self.handle);
        call(&mut self.store, self.limits, |s| {
            calls.admit(s, (h, Req::of(r), View::of(c)))
        })
    }
    fn observe(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        self.observe_call(r, c, chosen)
    }
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) -> RResult<(), PolicyError> {
        self.event_call(e, c)
    }
    fn take_reason(&mut self) -> RString {
        self.reason_call()
    }
}

impl RouterAbi for WasmPolicy {
    fn route(&mut self, r: &RequestView<'_>, c: &ClusterView<'_>) -> RResult<u32, PolicyError> {
        let (calls, h) = (self.calls, self.handle);
        call(&mut self.store, self.limits, |s| {
            calls.route(s, (h, Req::of(r), View::of(c)))
        })
    }
    fn observe(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        self.observe_call(r, c, chosen)
    }
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) -> RResult<(), PolicyError> {
        self.event_call(e, c)
    }
}

impl ScorerAbi for WasmPolicy {
    fn score(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterView<'_>,
        out: &mut RVec<f64>,
    ) -> RResult<(), PolicyError> {
        let (calls, h) = (self.calls, self.handle);
        call(&mut self.store, self.limits, |s| {
            calls.score(s, (h, Req::of(r), View::of(c)), out)
        })
    }
    fn score_candidates(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterState<'_>,
        out: &mut RVec<f64>,
    ) -> RResult<(), PolicyError> {
        with_state!(self, r, c, |g, s, h, b| g
            .call_score_candidates(s, h, &b.request, &b.state))
        .map(|v| out.extend_from_slice(&v))
    }
    fn observe(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        self.observe_call(r, c, chosen)
    }
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) -> RResult<(), PolicyError> {
        self.event_call(e, c)
    }
}

impl FilterAbi for WasmPolicy {
    fn filter(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterState<'_>,
        keep: &mut RVec<u32>,
    ) -> RResult<(), PolicyError> {
        with_state!(self, r, c, |g, s, h, b| g
            .call_filter(s, h, &b.request, &b.state))
        .map(|v| keep.extend_from_slice(&v))
    }
    fn observe(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        self.observe_call(r, c, chosen)
    }
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) -> RResult<(), PolicyError> {
        self.event_call(e, c)
    }
    fn take_reason(&mut self) -> RString {
        self.reason_call()
    }
}

impl PickerAbi for WasmPolicy {
    fn pick(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterState<'_>,
        scores: RSlice<'_, f64>,
    ) -> RResult<u32, PolicyError> {
        with_state!(self, r, c, |g, s, h, b| g.call_pick(
            s,
            h,
            &b.request,
            &b.state,
            scores.as_slice()
        ))
    }
    fn observe(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        self.observe_call(r, c, chosen)
    }
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) -> RResult<(), PolicyError> {
        self.event_call(e, c)
    }
}

impl SchedulerAbi for WasmPolicy {
    fn key(&mut self, r: &RequestView<'_>) -> RResult<i64, PolicyError> {
        set_request(&mut self.bufs.request, r);
        let (g, b, h) = (self.plugin.blis_plugin_policy(), &self.bufs, self.handle);
        call(&mut self.store, self.limits, |s| {
            g.call_key(s, h, &b.request)
        })
    }
}

impl PreemptionAbi for WasmPolicy {
    fn victim(&mut self, running: RSlice<'_, RunningRequest>) -> RResult<u32, PolicyError> {
        self.bufs.running.clear();
        self.bufs
            .running
            .extend(running.iter().map(|r| wit::RunningRequest {
                id: r.id,
                arrival_us: r.arrival_us,
                input_tokens: r.input_tokens,
                generated: r.generated,
                computed: r.computed,
                slo_class: r.slo_class.0,
            }));
        let (g, b, h) = (self.plugin.blis_plugin_policy(), &self.bufs, self.handle);
        call(&mut self.store, self.limits, |s| {
            g.call_victim(s, h, &b.running)
        })
    }
}

impl AutoscalerAbi for WasmPolicy {
    fn decide(&mut self, c: &ClusterState<'_>) -> RResult<i32, PolicyError> {
        set_state(&mut self.bufs.state, c);
        let (g, b, h) = (self.plugin.blis_plugin_policy(), &self.bufs, self.handle);
        call(&mut self.store, self.limits, |s| {
            g.call_autoscale(s, h, &b.state)
        })
    }
}

impl DeciderAbi for WasmPolicy {
    fn decide(
        &mut self,
        r: &RequestView<'_>,
        pd: &PdView,
        c: &ClusterState<'_>,
    ) -> RResult<bool, PolicyError> {
        let pd = wit::PdView {
            decode_instance: pd.decode_instance,
            decode_cached_blocks: pd.decode_cached_blocks,
            block_size: pd.block_size,
            prefill_first: pd.prefill_first,
            prefill_end: pd.prefill_end,
        };
        with_state!(self, r, c, |g, s, h, b| g
            .call_disaggregate(s, h, &b.request, pd, &b.state))
    }
    fn take_reason(&mut self) -> RString {
        self.reason_call()
    }
}

impl ObserverAbi for WasmPolicy {
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) -> RResult<(), PolicyError> {
        self.event_call(e, c)
    }
}

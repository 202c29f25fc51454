//! The plain-Rust side a plugin author writes against.
//!
//! Authors implement [`Admission`], [`Router`] or [`Scorer`] (plus
//! [`PolicyDef`] for the name, docs and constructor) and list their types in
//! [`export_plugin!`](crate::export_plugin). The adapters here turn those into
//! the ABI traits, and wrap every call in `catch_unwind`: a panic inside a
//! policy becomes a [`PolicyError`] the host reports, never an abort (a panic
//! that crossed the `extern "C"` boundary would abort the whole simulator).

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use abi_stable::{
    sabi_trait::TD_Opaque,
    std_types::{RResult, RSlice, RString, RVec},
};

use crate::abi::{
    AdmissionAbi, AdmissionAbi_TO, AutoscalerAbi, AutoscalerAbi_TO, AutoscalerBox, DeciderAbi,
    DeciderAbi_TO, DeciderBox, FilterAbi, FilterAbi_TO, FilterBox, Hooks, KindCode, ObserverAbi,
    ObserverAbi_TO, ObserverBox, PickerAbi, PickerAbi_TO, PickerBox, PolicyError, PolicyInfo,
    PolicyInfoV2, PolicyKind, PolicyObject, PreemptionAbi, PreemptionAbi_TO, PreemptionBox,
    RouterAbi, RouterAbi_TO, SchedulerAbi, SchedulerAbi_TO, SchedulerBox, ScorerAbi, ScorerAbi_TO,
};
use crate::events::{EventKind, RequestEvent, RunSummary};
use crate::params::Params;
use crate::views::{ClusterState, ClusterView, PdView, RequestView, RunningRequest};

/// Scores a scorer writes: one per instance, in instance order.
pub type Scores = RVec<f64>;

/// Name, documentation and constructor of a policy type.
pub trait PolicyDef: Sized + Send + 'static {
    /// Name used in run files, e.g. `"token-bucket"`. Unique per kind in a library.
    const NAME: &'static str;
    /// One line saying what the policy does.
    const SUMMARY: &'static str;
    /// Parameter documentation shown by `blis plugins show NAME`: each TOML
    /// key with its type, unit and default.
    const PARAMS_DOC: &'static str = "This policy takes no parameters.";

    /// The lifecycle events this policy handles in [`PolicyDef::on_event`]
    /// (ABI 0.2), and [`Hooks::RUN_END`] for [`PolicyDef::on_run_end`]. The
    /// host calls them for these kinds only, so the default — none — costs
    /// nothing per request. Only the kinds that receive events (admission,
    /// router, scorer, filter, picker, observer) may declare hooks: blis
    /// refuses to load a scheduler, preemption policy, autoscaler or
    /// decider that does, since it would never be called.
    const HOOKS: Hooks = Hooks::NONE;

    /// For a scorer: true when it reads the 0.2 [`ClusterState`] (e.g.
    /// `InstanceInfo::in_flight`), so the host calls
    /// [`Scorer::score_candidates`] at every decision, with every instance a
    /// candidate when the profile has no filter. Other kinds ignore it.
    const USES_STATE: bool = false;

    /// True when the policy reads [`ClusterState::prefix_blocks`] (the
    /// per-instance count of the request's leading prompt blocks held in
    /// each instance's KV cache, as of the run's `cache_signal_delay_us`).
    /// The host runs that query at a routing decision only when some policy
    /// of the decision declares it. A scorer that declares it is called
    /// through [`Scorer::score_candidates`], like one with
    /// [`PolicyDef::USES_STATE`].
    const PREFIX_QUERY: bool = false;

    /// Build the policy from its parameter table and its own random seed
    /// (derived from the run seed; use no other source of randomness or time).
    fn create(params: Params<'_>, seed: u64) -> Result<Self, String>;

    /// A lifecycle event of a request, one of the kinds in
    /// [`PolicyDef::HOOKS`], in simulated-time order, with the cluster as it
    /// is at that time (ABI 0.2).
    fn on_event(&mut self, _event: &RequestEvent<'_>, _cluster: &ClusterState<'_>) {}

    /// The run ended (only with [`Hooks::RUN_END`] in [`PolicyDef::HOOKS`]):
    /// called once, after the run's last event and never under `blis
    /// validate`, with the run's request counts and the cluster as the run
    /// left it. The place to [`log`](crate::log) a policy's own totals.
    fn on_run_end(&mut self, _summary: &RunSummary, _cluster: &ClusterState<'_>) {}
}

/// An admission policy: decides whether a request enters the cluster.
pub trait Admission: PolicyDef {
    /// True to admit.
    fn admit(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> bool;

    /// Called after every routing decision (admitted requests only).
    fn observe(&mut self, _request: &RequestView<'_>, _cluster: &ClusterView<'_>, _chosen: usize) {}
}

/// A routing policy: picks the instance for an admitted request.
pub trait Router: PolicyDef {
    /// Index of the chosen instance, `< cluster.len()`.
    fn route(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> usize;

    /// Called after every routing decision with the chosen instance.
    fn observe(&mut self, _request: &RequestView<'_>, _cluster: &ClusterView<'_>, _chosen: usize) {}
}

/// A scorer: rates every instance for the host's weighted router.
///
/// Push exactly one score per instance, in instance order. Scores should lie
/// in [0, 1] (higher is better); the host clamps them and rejects NaN,
/// infinities and a wrong count with an error naming the plugin.
pub trait Scorer: PolicyDef {
    /// Score every instance. A scorer that sets [`PolicyDef::USES_STATE`]
    /// (or [`PolicyDef::PREFIX_QUERY`]) is called through
    /// [`Scorer::score_candidates`] only, and need not write this: the
    /// default scores every instance with `score_candidates` (all of them
    /// candidates, each `InstanceInfo` at its default, no prefix query).
    /// Any other scorer must implement it.
    fn score(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        default_score(self, request, cluster, scores);
    }

    /// Score only the candidates that survived the profile's filters
    /// (`cluster.candidates()`), one score per candidate in candidate order
    /// (ABI 0.2). The default scores every instance with
    /// [`Scorer::score`] and keeps the candidates' scores; override it when
    /// the score depends on the set being scored (e.g. min-max
    /// normalisation over the candidates, as llm-d does).
    fn score_candidates(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        scores: &mut Scores,
    ) {
        IN_DEFAULT_SCORE_CANDIDATES.with(|c| c.set(true));
        self.score(request, &cluster.view, scores);
        IN_DEFAULT_SCORE_CANDIDATES.with(|c| c.set(false));
        let candidates = cluster.candidates();
        if scores.len() == cluster.len() && candidates.len() < scores.len() {
            for (k, &i) in candidates.iter().enumerate() {
                scores[k] = scores[i as usize];
            }
            scores.truncate(candidates.len());
        }
    }

    /// Called after every routing decision with the chosen instance (stateful
    /// scorers such as prefix affinity update their index here).
    fn observe(&mut self, _request: &RequestView<'_>, _cluster: &ClusterView<'_>, _chosen: usize) {}
}

/// Instance indices a filter keeps.
pub type Kept = RVec<u32>;

/// A filter of a routing profile (ABI 0.2): keeps a subset of the candidate
/// instances; the scorers then see only those.
pub trait Filter: PolicyDef {
    /// Push the indices of the candidates to keep (from
    /// `cluster.candidates()`, in the same order) onto `keep`.
    fn filter(&mut self, request: &RequestView<'_>, cluster: &ClusterState<'_>, keep: &mut Kept);

    /// Called after every routing decision with the chosen instance.
    fn observe(&mut self, _request: &RequestView<'_>, _cluster: &ClusterView<'_>, _chosen: usize) {}
}

/// The picker of a routing profile (ABI 0.2): chooses among the scored
/// candidates.
pub trait Picker: PolicyDef {
    /// The chosen instance: one of `cluster.candidates()`. `scores[k]` is
    /// the weighted total of candidate `k`.
    fn pick(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        scores: &[f64],
    ) -> u32;

    /// Called after every routing decision with the chosen instance.
    fn observe(&mut self, _request: &RequestView<'_>, _cluster: &ClusterView<'_>, _chosen: usize) {}
}

/// An instance's wait-queue order (ABI 0.2): the sort key of a request
/// entering the queue. blis creates one per instance.
///
/// The request view has no tenant and no block hashes here.
pub trait Scheduler: PolicyDef {
    /// Smallest first; equal keys are served by arrival time, then id.
    fn key(&mut self, request: &RequestView<'_>) -> i64;
}

/// An instance's preemption victim choice (ABI 0.2). blis creates one per
/// instance and asks it when a running request's KV cannot grow.
pub trait Preemption: PolicyDef {
    /// Index in `running` (the batch, in admission order; never empty) of
    /// the request to preempt.
    fn victim(&mut self, running: &[RunningRequest]) -> usize;
}

/// The control plane's scaling decision (ABI 0.2, kind `autoscaler`):
/// called at every scaling tick with every instance ever created and its
/// lifecycle state ([`InstanceInfo::state`](crate::InstanceInfo::state)).
/// blis applies its stabilization windows, the fleet bounds and the node
/// pools to the answer.
pub trait Autoscaler: PolicyDef {
    /// Instances to add (positive) or remove (negative); 0 keeps the fleet.
    fn decide(&mut self, cluster: &ClusterState<'_>) -> i32;
}

/// The prefill/decode split of a run with `[[pools]]` (ABI 0.2, kind
/// `decider`): asked for every request after routing chose its decode
/// instance. `pd` says which instance that is and how much of the prompt
/// its KV cache holds; `cluster` holds every instance, with the
/// prefill-capable ones as `cluster.candidates()` (the 0.2 signals in
/// `cluster.info()`, and the prefix-cache query when the decider sets
/// [`PolicyDef::PREFIX_QUERY`]). Give a reason with
/// [`reason`](crate::reason); it is written to the decision trace.
pub trait Decider: PolicyDef {
    /// True to disaggregate (prefill on a prefill instance, then a KV
    /// transfer to the decode instance); false to serve the whole request
    /// on the decode instance.
    fn disaggregate(
        &mut self,
        request: &RequestView<'_>,
        pd: &PdView,
        cluster: &ClusterState<'_>,
    ) -> bool;
}

/// A policy that decides nothing (ABI 0.2, kind `observer`): it only
/// receives the lifecycle events in its [`PolicyDef::HOOKS`] through
/// [`PolicyDef::on_event`], and the end of the run through
/// [`PolicyDef::on_run_end`] — a counter, a logger, a recorder, at no cost
/// to any decision. Implement [`PolicyDef`] and write `impl Observer for
/// MyObserver {}`; an observer without hooks is refused at load.
pub trait Observer: PolicyDef {}

/// The default [`Scorer::score`]: scores every instance through
/// `score_candidates` for a scorer that reads the 0.2 state; a scorer that
/// implements neither method panics with what to do (caught and reported
/// as an error naming it).
fn default_score<S: Scorer>(
    scorer: &mut S,
    request: &RequestView<'_>,
    cluster: &ClusterView<'_>,
    scores: &mut Scores,
) {
    let recursing = IN_DEFAULT_SCORE_CANDIDATES.with(|c| c.replace(false));
    if recursing || !(S::USES_STATE || S::PREFIX_QUERY) {
        panic!(
            "scorer '{}' implements neither `score` nor `score_candidates`: implement `score`, \
             or set `USES_STATE` and implement `score_candidates`",
            S::NAME
        );
    }
    let all: Vec<u32> = (0..cluster.len() as u32).collect();
    let info = vec![crate::views::InstanceInfo::default(); cluster.len()];
    let state = ClusterState {
        view: *cluster,
        candidates: RSlice::from_slice(&all),
        info: RSlice::from_slice(&info),
        prefix_blocks: RSlice::from_slice(&[]),
    };
    scorer.score_candidates(request, &state, scores);
}

thread_local! {
    /// Set while the default `score_candidates` calls `score`: the default
    /// `score` then knows neither method was written.
    static IN_DEFAULT_SCORE_CANDIDATES: Cell<bool> = const { Cell::new(false) };
    static IN_POLICY_CALL: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Install (once per library) a panic hook that stays silent for panics
/// inside policy calls — they are reported by the host as one line — and
/// defers to the previous hook for every other panic.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_POLICY_CALL.with(Cell::get) {
                let payload = info.payload();
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".to_string());
                let msg = match info.location() {
                    Some(l) => format!("{msg} (at {}:{})", l.file(), l.line()),
                    None => msg,
                };
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(msg));
            } else {
                previous(info);
            }
        }));
    });
}

/// Run `f`, turning a panic into a [`PolicyError`].
fn guarded<T>(f: impl FnOnce() -> T) -> RResult<T, PolicyError> {
    IN_POLICY_CALL.with(|c| c.set(true));
    let out = catch_unwind(AssertUnwindSafe(f));
    IN_POLICY_CALL.with(|c| c.set(false));
    match out {
        Ok(v) => RResult::ROk(v),
        Err(_) => {
            let message = LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| "panic".to_string());
            RResult::RErr(PolicyError {
                panicked: true,
                message: message.into(),
            })
        }
    }
}

/// Run a call of policy `P`: [`crate::log`] names it, a panic becomes an error.
#[inline]
fn call<P: PolicyDef, T>(f: impl FnOnce() -> T) -> RResult<T, PolicyError> {
    crate::log::as_policy(P::NAME, || guarded(f))
}

struct AdmissionAdapter<P>(P);
struct RouterAdapter<P>(P);
struct ScorerAdapter<P>(P);
struct FilterAdapter<P>(P);
struct PickerAdapter<P>(P);
struct SchedulerAdapter<P>(P);
struct PreemptionAdapter<P>(P);
struct AutoscalerAdapter<P>(P);
struct DeciderAdapter<P>(P);
struct ObserverAdapter<P>(P);

/// The `on_event` body shared by every adapter: the end of the run goes to
/// [`PolicyDef::on_run_end`] with its summary read from the event.
macro_rules! on_event_body {
    () => {
        fn on_event(
            &mut self,
            event: &RequestEvent<'_>,
            cluster: &ClusterState<'_>,
        ) -> RResult<(), PolicyError> {
            if event.kind == EventKind::RUN_END {
                let summary = RunSummary::from_toml(event.request.tenant.as_str());
                return call::<P, _>(|| self.0.on_run_end(&summary, cluster));
            }
            call::<P, _>(|| self.0.on_event(event, cluster))
        }
    };
}

impl<P: Observer> ObserverAbi for ObserverAdapter<P> {
    on_event_body!();
}

impl<P: Admission> AdmissionAbi for AdmissionAdapter<P> {
    fn admit(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> RResult<bool, PolicyError> {
        crate::log::clear_reason();
        call::<P, _>(|| self.0.admit(request, cluster))
    }
    fn take_reason(&mut self) -> RString {
        crate::log::take_reason().map_or_else(RString::new, |r| RString::from(&*r))
    }
    fn observe(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        call::<P, _>(|| self.0.observe(request, cluster, chosen as usize))
    }
    on_event_body!();
}

impl<P: Router> RouterAbi for RouterAdapter<P> {
    fn route(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> RResult<u32, PolicyError> {
        match call::<P, _>(|| self.0.route(request, cluster)) {
            RResult::ROk(i) => match u32::try_from(i) {
                Ok(i) => RResult::ROk(i),
                Err(_) => RResult::ROk(u32::MAX),
            },
            RResult::RErr(e) => RResult::RErr(e),
        }
    }
    fn observe(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        call::<P, _>(|| self.0.observe(request, cluster, chosen as usize))
    }
    on_event_body!();
}

impl<P: Scorer> ScorerAbi for ScorerAdapter<P> {
    fn score(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        out: &mut RVec<f64>,
    ) -> RResult<(), PolicyError> {
        call::<P, _>(|| self.0.score(request, cluster, out))
    }
    fn score_candidates(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        out: &mut RVec<f64>,
    ) -> RResult<(), PolicyError> {
        call::<P, _>(|| self.0.score_candidates(request, cluster, out))
    }
    fn observe(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        call::<P, _>(|| self.0.observe(request, cluster, chosen as usize))
    }
    on_event_body!();
}

impl<P: Filter> FilterAbi for FilterAdapter<P> {
    fn filter(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        keep: &mut RVec<u32>,
    ) -> RResult<(), PolicyError> {
        crate::log::clear_reason();
        call::<P, _>(|| self.0.filter(request, cluster, keep))
    }
    fn take_reason(&mut self) -> RString {
        crate::log::take_reason().map_or_else(RString::new, |r| RString::from(&*r))
    }
    fn observe(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        call::<P, _>(|| self.0.observe(request, cluster, chosen as usize))
    }
    on_event_body!();
}

impl<P: Picker> PickerAbi for PickerAdapter<P> {
    fn pick(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        scores: RSlice<'_, f64>,
    ) -> RResult<u32, PolicyError> {
        call::<P, _>(|| self.0.pick(request, cluster, scores.as_slice()))
    }
    fn observe(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        call::<P, _>(|| self.0.observe(request, cluster, chosen as usize))
    }
    on_event_body!();
}

impl<P: Scheduler> SchedulerAbi for SchedulerAdapter<P> {
    fn key(&mut self, request: &RequestView<'_>) -> RResult<i64, PolicyError> {
        call::<P, _>(|| self.0.key(request))
    }
}

impl<P: Preemption> PreemptionAbi for PreemptionAdapter<P> {
    fn victim(&mut self, running: RSlice<'_, RunningRequest>) -> RResult<u32, PolicyError> {
        call::<P, _>(|| u32::try_from(self.0.victim(running.as_slice())).unwrap_or(u32::MAX))
    }
}

impl<P: Autoscaler> AutoscalerAbi for AutoscalerAdapter<P> {
    fn decide(&mut self, cluster: &ClusterState<'_>) -> RResult<i32, PolicyError> {
        guarded(|| self.0.decide(cluster))
    }
}

impl<P: Decider> DeciderAbi for DeciderAdapter<P> {
    fn decide(
        &mut self,
        request: &RequestView<'_>,
        pd: &PdView,
        cluster: &ClusterState<'_>,
    ) -> RResult<bool, PolicyError> {
        crate::log::clear_reason();
        call::<P, _>(|| self.0.disaggregate(request, pd, cluster))
    }
    fn take_reason(&mut self) -> RString {
        crate::log::take_reason().map_or_else(RString::new, |r| RString::from(&*r))
    }
}

/// Items used by [`export_plugin!`](crate::export_plugin) expansions. Not a stable API.
#[doc(hidden)]
pub mod __private {
    use super::*;

    pub use abi_stable::library::{
        __call_root_module_loader, CheckTypeLayout, LibHeader, RootModuleResult,
    };
    pub use abi_stable::prefix_type::PrefixTypeTrait;
    pub use abi_stable::std_types::{RResult, RStr, RString, RVec};

    pub use crate::abi::{
        AbiVersion, LibraryInfo, LibraryInfoV2, PluginMod, PluginModRef, ABI_VERSION,
    };

    /// The functions of a library's root module, as
    /// [`export_plugin!`](crate::export_plugin) generates them.
    pub struct RootFunctions {
        pub describe: extern "C" fn() -> LibraryInfo,
        pub create: CreateFn<PolicyObject>,
        pub describe_v2: extern "C" fn() -> LibraryInfoV2,
        pub create_filter: CreateV2Fn<FilterBox>,
        pub create_picker: CreateV2Fn<PickerBox>,
        pub create_scheduler: CreateV2Fn<SchedulerBox>,
        pub create_preemption: CreateV2Fn<PreemptionBox>,
        pub create_autoscaler: CreateV2Fn<AutoscalerBox>,
        pub create_decider: CreateV2Fn<DeciderBox>,
        pub create_observer: CreateV2Fn<ObserverBox>,
    }

    /// The 0.1 `create` function.
    pub type CreateFn<T> =
        extern "C" fn(PolicyKind, RStr<'_>, RStr<'_>, u64) -> RResult<T, RString>;
    /// A 0.2 `create_<kind>` function.
    pub type CreateV2Fn<T> = extern "C" fn(RStr<'_>, RStr<'_>, u64) -> RResult<T, RString>;

    /// The root module, leaked into its `'static` prefix reference. Built
    /// here rather than in the macro so that the fixture compiling this
    /// source as the ABI before the decider kind (cfg
    /// `blis_abi_before_decider`) leaves `create_decider` out of it.
    pub fn root_module(f: RootFunctions) -> PluginModRef {
        #[cfg(blis_abi_before_decider)]
        let _ = f.create_decider;
        #[cfg(any(blis_abi_before_decider, blis_abi_before_observer))]
        let _ = f.create_observer;
        PluginMod {
            describe: f.describe,
            create: f.create,
            describe_v2: f.describe_v2,
            create_filter: f.create_filter,
            create_picker: f.create_picker,
            create_scheduler: f.create_scheduler,
            create_preemption: f.create_preemption,
            create_autoscaler: f.create_autoscaler,
            #[cfg(not(blis_abi_before_decider))]
            create_decider: f.create_decider,
            #[cfg(not(any(blis_abi_before_decider, blis_abi_before_observer)))]
            create_observer: f.create_observer,
            #[cfg(not(any(
                blis_abi_before_decider,
                blis_abi_before_observer,
                blis_abi_before_host
            )))]
            set_host: crate::host::set_host,
        }
        .leak_into_prefix()
    }

    /// Record the library's name for [`crate::log`]'s prefix.
    pub fn set_library(name: &'static str) {
        crate::log::set_library(name);
    }

    /// ABI 0.2 description of policy `P` of `kind`.
    pub fn info_v2<P: PolicyDef>(kind: KindCode) -> PolicyInfoV2 {
        PolicyInfoV2 {
            kind,
            name: P::NAME.into(),
            summary: P::SUMMARY.into(),
            params_doc: P::PARAMS_DOC.into(),
            hooks: P::HOOKS,
            uses_state: P::USES_STATE || P::PREFIX_QUERY,
            prefix_query: P::PREFIX_QUERY,
        }
    }

    /// Create filter `P`.
    pub fn create_filter<P: Filter>(params: RStr<'_>, seed: u64) -> RResult<FilterBox, RString> {
        construct::<P>(params, seed)
            .map(|p| FilterAbi_TO::from_value(FilterAdapter(p), TD_Opaque))
            .into()
    }

    /// Create picker `P`.
    pub fn create_picker<P: Picker>(params: RStr<'_>, seed: u64) -> RResult<PickerBox, RString> {
        construct::<P>(params, seed)
            .map(|p| PickerAbi_TO::from_value(PickerAdapter(p), TD_Opaque))
            .into()
    }

    /// Create scheduler `P`.
    pub fn create_scheduler<P: Scheduler>(
        params: RStr<'_>,
        seed: u64,
    ) -> RResult<SchedulerBox, RString> {
        construct::<P>(params, seed)
            .map(|p| SchedulerAbi_TO::from_value(SchedulerAdapter(p), TD_Opaque))
            .into()
    }

    /// Create preemption policy `P`.
    pub fn create_preemption<P: Preemption>(
        params: RStr<'_>,
        seed: u64,
    ) -> RResult<PreemptionBox, RString> {
        construct::<P>(params, seed)
            .map(|p| PreemptionAbi_TO::from_value(PreemptionAdapter(p), TD_Opaque))
            .into()
    }

    /// Create autoscaler `P`.
    pub fn create_autoscaler<P: Autoscaler>(
        params: RStr<'_>,
        seed: u64,
    ) -> RResult<AutoscalerBox, RString> {
        construct::<P>(params, seed)
            .map(|p| AutoscalerAbi_TO::from_value(AutoscalerAdapter(p), TD_Opaque))
            .into()
    }

    /// Create decider `P`.
    pub fn create_decider<P: Decider>(params: RStr<'_>, seed: u64) -> RResult<DeciderBox, RString> {
        construct::<P>(params, seed)
            .map(|p| DeciderAbi_TO::from_value(DeciderAdapter(p), TD_Opaque))
            .into()
    }

    /// Create observer `P`.
    pub fn create_observer<P: Observer>(
        params: RStr<'_>,
        seed: u64,
    ) -> RResult<ObserverBox, RString> {
        construct::<P>(params, seed)
            .map(|p| ObserverAbi_TO::from_value(ObserverAdapter(p), TD_Opaque))
            .into()
    }

    /// The error for a name the library does not offer (0.2 kinds).
    pub fn unknown_v2<T>(kind: KindCode, name: RStr<'_>) -> RResult<T, RString> {
        RResult::RErr(
            format!(
                "this library offers no {} policy named '{}'",
                kind.name(),
                name
            )
            .into(),
        )
    }

    /// Run a 0.2 `create_*` body, turning a panic into an error.
    pub fn guard_create_v2<T>(f: impl FnOnce() -> RResult<T, RString>) -> RResult<T, RString> {
        install_panic_hook();
        match guarded(f) {
            RResult::ROk(r) => r,
            RResult::RErr(e) => RResult::RErr(e.message),
        }
    }

    /// Description of policy `P` of `kind`.
    pub fn info<P: PolicyDef>(kind: PolicyKind) -> PolicyInfo {
        PolicyInfo {
            kind,
            name: P::NAME.into(),
            summary: P::SUMMARY.into(),
            params_doc: P::PARAMS_DOC.into(),
        }
    }

    fn construct<P: PolicyDef>(params: RStr<'_>, seed: u64) -> Result<P, RString> {
        install_panic_hook();
        let params = Params::new(params.as_str());
        match crate::log::as_policy(P::NAME, || guarded(|| P::create(params, seed))) {
            RResult::ROk(Ok(p)) => Ok(p),
            RResult::ROk(Err(e)) => Err(e.into()),
            RResult::RErr(e) => Err(format!("panicked while being created: {}", e.message).into()),
        }
    }

    /// Create admission policy `P`.
    pub fn create_admission<P: Admission>(
        params: RStr<'_>,
        seed: u64,
    ) -> RResult<PolicyObject, RString> {
        construct::<P>(params, seed)
            .map(|p| {
                PolicyObject::Admission(AdmissionAbi_TO::from_value(AdmissionAdapter(p), TD_Opaque))
            })
            .into()
    }

    /// Create router `P`.
    pub fn create_router<P: Router>(params: RStr<'_>, seed: u64) -> RResult<PolicyObject, RString> {
        construct::<P>(params, seed)
            .map(|p| PolicyObject::Router(RouterAbi_TO::from_value(RouterAdapter(p), TD_Opaque)))
            .into()
    }

    /// Create scorer `P`.
    pub fn create_scorer<P: Scorer>(params: RStr<'_>, seed: u64) -> RResult<PolicyObject, RString> {
        construct::<P>(params, seed)
            .map(|p| PolicyObject::Scorer(ScorerAbi_TO::from_value(ScorerAdapter(p), TD_Opaque)))
            .into()
    }

    /// The error for a name the library does not offer.
    pub fn unknown(kind: PolicyKind, name: RStr<'_>) -> RResult<PolicyObject, RString> {
        RResult::RErr(
            format!(
                "this library offers no {} policy named '{}'",
                kind.name(),
                name
            )
            .into(),
        )
    }

    /// Run the library's `create` body, turning a panic (e.g. in user code
    /// outside a policy) into an error instead of an abort.
    pub fn guard_create(
        f: impl FnOnce() -> RResult<PolicyObject, RString>,
    ) -> RResult<PolicyObject, RString> {
        install_panic_hook();
        match guarded(f) {
            RResult::ROk(r) => r,
            RResult::RErr(e) => RResult::RErr(e.message),
        }
    }
}

#[cfg(test)]
mod tests {
    use abi_stable::std_types::{RResult, RSlice, RStr};

    use super::__private::{create_decider, create_scorer};
    use super::*;
    use crate::views::{InstanceSnapshot, SloClass};

    /// Disaggregates when more prompt tokens are uncached on the decode
    /// instance than `threshold`; panics on request 13.
    struct Uncached(u64);

    impl PolicyDef for Uncached {
        const NAME: &'static str = "uncached";
        const SUMMARY: &'static str = "test";
        fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
            params.expect_none()?;
            Ok(Uncached(100))
        }
    }

    impl Decider for Uncached {
        fn disaggregate(
            &mut self,
            request: &RequestView<'_>,
            pd: &PdView,
            _cluster: &ClusterState<'_>,
        ) -> bool {
            assert!(request.id != 13, "unlucky request");
            let n = pd.uncached_prompt_tokens(request);
            crate::reason(format!("{n} uncached"));
            n > self.0
        }
    }

    /// Reads only the 0.2 state: `score` is the default.
    struct InFlight;
    impl PolicyDef for InFlight {
        const NAME: &'static str = "in-flight";
        const SUMMARY: &'static str = "test";
        const USES_STATE: bool = true;
        fn create(_: Params<'_>, _: u64) -> Result<Self, String> {
            Ok(InFlight)
        }
    }
    impl Scorer for InFlight {
        fn score_candidates(
            &mut self,
            _: &RequestView<'_>,
            cluster: &ClusterState<'_>,
            scores: &mut Scores,
        ) {
            for &i in cluster.candidates() {
                scores
                    .push(1.0 / (1.0 + f64::from(cluster.instance(i).1.in_flight)) + f64::from(i));
            }
        }
    }

    /// Writes neither scoring method.
    struct Neither;
    impl PolicyDef for Neither {
        const NAME: &'static str = "neither";
        const SUMMARY: &'static str = "test";
        const USES_STATE: bool = true;
        fn create(_: Params<'_>, _: u64) -> Result<Self, String> {
            Ok(Neither)
        }
    }
    impl Scorer for Neither {}

    fn request(id: u64) -> RequestView<'static> {
        RequestView {
            id,
            arrival_us: 0,
            input_tokens: 10,
            slo_class: SloClass::STANDARD,
            tenant: RStr::from(""),
            block_hashes: RSlice::from_slice(&[]),
        }
    }

    #[test]
    fn a_state_scorer_needs_no_score_and_one_with_neither_method_is_an_error() {
        let snaps = [InstanceSnapshot::default(); 3];
        let view = ClusterView {
            clock_us: 0,
            instances: RSlice::from_slice(&snaps),
        };
        let PolicyObject::Scorer(mut s) = create_scorer::<InFlight>(RStr::from(""), 0).unwrap()
        else {
            panic!("not a scorer")
        };
        let mut out = RVec::new();
        assert_eq!(s.score(&request(1), &view, &mut out), RResult::ROk(()));
        // Every instance a candidate, in_flight 0 in the default info.
        assert_eq!(out.as_slice(), &[1.0, 2.0, 3.0]);
        let PolicyObject::Scorer(mut n) = create_scorer::<Neither>(RStr::from(""), 0).unwrap()
        else {
            panic!("not a scorer")
        };
        for _ in 0..2 {
            let mut out = RVec::new();
            match n.score(&request(2), &view, &mut out) {
                RResult::RErr(e) => assert!(
                    e.panicked
                        && e.message.as_str().contains(
                            "scorer 'neither' implements neither `score` nor `score_candidates`"
                        ),
                    "{}",
                    e.message
                ),
                RResult::ROk(()) => panic!("scored {:?}", out),
            }
        }
    }

    /// Counts completions; remembers the summary it was given at the end.
    struct Counter {
        completed: u64,
        end: Option<(crate::RunSummary, u64)>,
    }
    impl PolicyDef for Counter {
        const NAME: &'static str = "counter";
        const SUMMARY: &'static str = "test";
        const HOOKS: Hooks = Hooks::RUN_END.with(EventKind::COMPLETED);
        fn create(_: Params<'_>, _: u64) -> Result<Self, String> {
            Ok(Counter {
                completed: 0,
                end: None,
            })
        }
        fn on_event(&mut self, e: &RequestEvent<'_>, _: &ClusterState<'_>) {
            assert_eq!(e.kind, EventKind::COMPLETED);
            self.completed += 1;
        }
        fn on_run_end(&mut self, summary: &crate::RunSummary, _: &ClusterState<'_>) {
            assert!(self.end.is_none(), "the run ended twice");
            self.end = Some((summary.clone(), self.completed));
            assert!(
                summary.completed == self.completed,
                "counted {}",
                self.completed
            );
        }
    }
    impl Observer for Counter {}

    #[test]
    fn an_observer_gets_its_events_then_the_run_end_with_the_summary() {
        let mut o = super::__private::create_observer::<Counter>(RStr::from(""), 0).unwrap();
        let snaps = [InstanceSnapshot::default(); 2];
        let cluster = ClusterState {
            view: ClusterView {
                clock_us: 0,
                instances: RSlice::from_slice(&snaps),
            },
            candidates: RSlice::from_slice(&[]),
            info: RSlice::from_slice(&[]),
            prefix_blocks: RSlice::from_slice(&[]),
        };
        let event = |kind, tenant: &'static str| RequestEvent {
            kind,
            instance: 0,
            time_us: 5,
            request: RequestView {
                tenant: RStr::from(tenant),
                ..request(1)
            },
            ttft_us: 1,
            e2e_us: 2,
            output_tokens: 1,
            reserved: 0,
        };
        for _ in 0..2 {
            assert_eq!(
                o.on_event(&event(EventKind::COMPLETED, ""), &cluster),
                RResult::ROk(())
            );
        }
        let summary = crate::RunSummary {
            end_us: 99,
            arrived: 3,
            completed: 2,
            rejected: 1,
            rejected_by_filter: 1,
            ..Default::default()
        };
        let text: &'static str = Box::leak(summary.to_toml().into_boxed_str());
        assert_eq!(
            o.on_event(&event(EventKind::RUN_END, text), &cluster),
            RResult::ROk(())
        );
        // A summary that disagrees with the count: the assertion inside
        // on_run_end panics, and the panic comes back as an error.
        let mut o = super::__private::create_observer::<Counter>(RStr::from(""), 0).unwrap();
        match o.on_event(&event(EventKind::RUN_END, text), &cluster) {
            RResult::RErr(e) => assert!(e.message.as_str().contains("counted 0"), "{}", e.message),
            RResult::ROk(()) => panic!("on_run_end did not see the summary's 2 completions"),
        }
    }

    #[test]
    fn a_decider_goes_through_the_abi_with_its_reason_and_its_panics_caught() {
        let mut d = create_decider::<Uncached>(RStr::from(""), 1).unwrap();
        let snaps = [InstanceSnapshot::default(); 4];
        let candidates = [0u32, 1];
        let cluster = ClusterState {
            view: ClusterView {
                clock_us: 0,
                instances: RSlice::from_slice(&snaps),
            },
            candidates: RSlice::from_slice(&candidates),
            info: RSlice::from_slice(&[]),
            prefix_blocks: RSlice::from_slice(&[]),
        };
        let request = |id, input_tokens| RequestView {
            id,
            arrival_us: 0,
            input_tokens,
            slo_class: SloClass::STANDARD,
            tenant: RStr::from(""),
            block_hashes: RSlice::from_slice(&[]),
        };
        let pd = |cached| PdView {
            decode_instance: 3,
            decode_cached_blocks: cached,
            block_size: 16,
            prefill_first: 0,
            prefill_end: 2,
        };
        // 1000 tokens, 56 blocks (896 tokens) cached: 104 uncached > 100.
        assert_eq!(
            d.decide(&request(1, 1000), &pd(56), &cluster),
            RResult::ROk(true)
        );
        assert_eq!(d.take_reason().as_str(), "104 uncached");
        // 57 blocks (912 tokens): 88 uncached.
        assert_eq!(
            d.decide(&request(2, 1000), &pd(57), &cluster),
            RResult::ROk(false)
        );
        assert_eq!(d.take_reason().as_str(), "88 uncached");
        // More cached than the prompt: nothing uncached.
        assert_eq!(
            d.decide(&request(3, 10), &pd(5), &cluster),
            RResult::ROk(false)
        );
        assert_eq!(d.take_reason().as_str(), "0 uncached");
        match d.decide(&request(13, 1000), &pd(0), &cluster) {
            RResult::RErr(e) => {
                assert!(e.panicked);
                assert!(
                    e.message.as_str().contains("unlucky request"),
                    "{}",
                    e.message
                );
            }
            RResult::ROk(v) => panic!("a panic became {v}"),
        }
        // A reason is per decision: none after a call that gave none.
        assert_eq!(d.take_reason().as_str(), "");
    }
}

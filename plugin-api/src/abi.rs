//! The ABI proper: the root module every plugin library exports and the
//! policy traits, as `abi_stable` types.
//!
//! Everything that existed in ABI 0.1 is frozen here byte for byte (the root
//! module's `describe`/`create`, the three 0.1 policy traits up to `observe`,
//! [`PolicyKind`], [`PolicyObject`], [`PolicyInfo`], [`LibraryInfo`] and the
//! views). ABI 0.2 only *adds*: root-module fields after `create`, trait
//! methods after `observe` (with defaults), and new types. The evolution
//! rules are in the crate documentation; `tests/abi_layout.txt` pins the
//! layout.

use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    package_version_strings, sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RBox, RResult, RSlice, RStr, RString, RVec},
    StableAbi,
};

use crate::events::RequestEvent;
use crate::views::{ClusterState, ClusterView, PdView, RequestView, RunningRequest};

/// The three kinds of policy a library can offer.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyKind {
    /// Decides whether a request enters the cluster.
    Admission = 0,
    /// Picks the instance for an admitted request.
    Router = 1,
    /// Scores every instance for the host's weighted router.
    Scorer = 2,
}

impl PolicyKind {
    /// Lower-case name used in messages and run files.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Admission => "admission",
            PolicyKind::Router => "router",
            PolicyKind::Scorer => "scorer",
        }
    }
}

/// An error a policy call returns instead of a value.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    /// True when the policy panicked (the panic was caught on the plugin side).
    pub panicked: bool,
    /// The panic message (with its location) or the error text.
    pub message: RString,
}

/// An admission policy, as the host calls it.
#[sabi_trait]
pub trait AdmissionAbi: Send {
    /// True to admit the request, false to reject it.
    fn admit(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> RResult<bool, PolicyError>;

    /// Called after every routing decision with the chosen instance.
    #[sabi(last_prefix_field)]
    fn observe(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError>;

    /// ABI 0.2: a lifecycle event of a request (only the kinds the policy
    /// asked for in its [`PolicyInfoV2::hooks`]). Missing in a 0.1 library:
    /// the default does nothing (and the host never calls it there).
    fn on_event(
        &mut self,
        _event: &RequestEvent<'_>,
        _cluster: &ClusterState<'_>,
    ) -> RResult<(), PolicyError> {
        RResult::ROk(())
    }

    /// ABI 0.2: the reason the policy gave (with
    /// [`reason`](crate::reason)) during its last `admit` call, taken (empty
    /// when it gave none). The host asks only after a rejection, and only
    /// when a decision trace is written.
    fn take_reason(&mut self) -> RString {
        RString::new()
    }
}

/// A routing policy, as the host calls it.
#[sabi_trait]
pub trait RouterAbi: Send {
    /// Index of the instance that gets the request (must be < number of instances).
    fn route(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> RResult<u32, PolicyError>;

    /// Called after every routing decision with the chosen instance.
    #[sabi(last_prefix_field)]
    fn observe(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError>;

    /// ABI 0.2: a lifecycle event of a request (only the kinds the policy
    /// asked for in its [`PolicyInfoV2::hooks`]). Missing in a 0.1 library:
    /// the default does nothing (and the host never calls it there).
    fn on_event(
        &mut self,
        _event: &RequestEvent<'_>,
        _cluster: &ClusterState<'_>,
    ) -> RResult<(), PolicyError> {
        RResult::ROk(())
    }
}

/// A scorer for the host's weighted router, as the host calls it.
#[sabi_trait]
pub trait ScorerAbi: Send {
    /// Push one score per instance, in instance order, onto `out` (the host
    /// clears it before the call and checks the length and values after).
    fn score(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        out: &mut RVec<f64>,
    ) -> RResult<(), PolicyError>;

    /// Called after every routing decision with the chosen instance.
    #[sabi(last_prefix_field)]
    fn observe(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError>;

    /// ABI 0.2: a lifecycle event of a request (only the kinds the policy
    /// asked for in its [`PolicyInfoV2::hooks`]). Missing in a 0.1 library:
    /// the default does nothing (and the host never calls it there).
    fn on_event(
        &mut self,
        _event: &RequestEvent<'_>,
        _cluster: &ClusterState<'_>,
    ) -> RResult<(), PolicyError> {
        RResult::ROk(())
    }

    /// ABI 0.2: one score per *candidate* (`cluster.candidates`, the
    /// instances that survived the profile's filters), in candidate order.
    /// The host calls it only for libraries of ABI ≥ 0.2 (it knows from
    /// [`PluginMod::describe_v2`]); for a 0.1 library it calls
    /// [`ScorerAbi::score`] over the whole cluster and keeps the candidates'
    /// scores. The default (what a 0.1 vtable lacks) is an error.
    fn score_candidates(
        &mut self,
        _request: &RequestView<'_>,
        _cluster: &ClusterState<'_>,
        _out: &mut RVec<f64>,
    ) -> RResult<(), PolicyError> {
        RResult::RErr(PolicyError {
            panicked: false,
            message: RString::from("score_candidates is not implemented (ABI 0.1 library)"),
        })
    }
}

/// ABI 0.2: a filter of a routing profile, as the host calls it.
#[sabi_trait]
pub trait FilterAbi: Send {
    /// Push the candidates to keep onto `keep` (instance indices, a subset of
    /// `cluster.candidates` in the same order; the host clears it before the
    /// call and checks it after). An empty result ends the profile.
    fn filter(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        keep: &mut RVec<u32>,
    ) -> RResult<(), PolicyError>;

    /// Called after every routing decision with the chosen instance.
    fn observe(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError>;

    /// A lifecycle event (only the kinds asked for in the policy's hooks).
    #[sabi(last_prefix_field)]
    fn on_event(
        &mut self,
        event: &RequestEvent<'_>,
        cluster: &ClusterState<'_>,
    ) -> RResult<(), PolicyError>;

    /// The reason the filter gave (with [`reason`](crate::reason)) during
    /// its last `filter` call, taken (empty when it gave none). The host
    /// asks only when the filter removed a candidate and a decision trace is
    /// written.
    fn take_reason(&mut self) -> RString {
        RString::new()
    }
}

/// ABI 0.2: the picker of a routing profile, as the host calls it.
#[sabi_trait]
pub trait PickerAbi: Send {
    /// The chosen instance index, one of `cluster.candidates`; `scores[k]`
    /// is the weighted total of candidate `k` (raw weights, each scorer's
    /// value clamped to [0, 1]).
    fn pick(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        scores: RSlice<'_, f64>,
    ) -> RResult<u32, PolicyError>;

    /// Called after every routing decision with the chosen instance.
    fn observe(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError>;

    /// A lifecycle event (only the kinds asked for in the policy's hooks).
    #[sabi(last_prefix_field)]
    fn on_event(
        &mut self,
        event: &RequestEvent<'_>,
        cluster: &ClusterState<'_>,
    ) -> RResult<(), PolicyError>;
}

/// ABI 0.2: the wait-queue order of an instance, as the host calls it.
#[sabi_trait]
pub trait SchedulerAbi: Send {
    /// The primary sort key of a request entering the wait queue: smallest
    /// first; equal keys are served by arrival time, then request id.
    /// Called once per request per instance (the key never changes while
    /// the request waits).
    #[sabi(last_prefix_field)]
    fn key(&mut self, request: &RequestView<'_>) -> RResult<i64, PolicyError>;
}

/// A scheduler object owned by the host (ABI 0.2).
pub type SchedulerBox = SchedulerAbi_TO<'static, RBox<()>>;

/// ABI 0.2: an instance's preemption victim choice, as the host calls it.
#[sabi_trait]
pub trait PreemptionAbi: Send {
    /// Index in `running` (the batch, in admission order) of the request to
    /// preempt when KV blocks run out.
    #[sabi(last_prefix_field)]
    fn victim(&mut self, running: RSlice<'_, RunningRequest>) -> RResult<u32, PolicyError>;
}

/// A preemption policy object owned by the host (ABI 0.2).
pub type PreemptionBox = PreemptionAbi_TO<'static, RBox<()>>;

/// ABI 0.2 (kind code 8): an autoscaler's decision, as the host calls it at
/// every scaling tick.
#[sabi_trait]
pub trait AutoscalerAbi: Send {
    /// The change in the number of instances wanted now: positive to add,
    /// negative to remove, 0 to keep. `cluster` holds every instance ever
    /// created (terminated ones included) with its lifecycle state in
    /// [`InstanceInfo::state`](crate::InstanceInfo::state). The host applies
    /// its stabilization windows and the fleet bounds to the answer.
    #[sabi(last_prefix_field)]
    fn decide(&mut self, cluster: &ClusterState<'_>) -> RResult<i32, PolicyError>;
}

/// An autoscaler object owned by the host (ABI 0.2).
pub type AutoscalerBox = AutoscalerAbi_TO<'static, RBox<()>>;

/// ABI 0.2 (kind code 7): the prefill/decode disaggregation decision, as
/// the host calls it for every request of a run with `[[pools]]`, after the
/// decode instance is chosen.
#[sabi_trait]
pub trait DeciderAbi: Send {
    /// True to disaggregate: the prompt is computed on a prefill instance
    /// and its KV transferred to `pd.decode_instance`; false to serve the
    /// whole request on the decode instance. `cluster` holds every
    /// instance, with the prefill-capable ones as `candidates`.
    fn decide(
        &mut self,
        request: &RequestView<'_>,
        pd: &PdView,
        cluster: &ClusterState<'_>,
    ) -> RResult<bool, PolicyError>;

    /// The reason the decider gave (with [`reason`](crate::reason)) during
    /// its last `decide` call, taken (empty when it gave none). The host
    /// asks only when a decision trace is written.
    #[sabi(last_prefix_field)]
    fn take_reason(&mut self) -> RString;
}

/// A decider object owned by the host (ABI 0.2).
pub type DeciderBox = DeciderAbi_TO<'static, RBox<()>>;

/// ABI 0.2 (kind code 9): an observer, as the host calls it — a policy
/// that decides nothing and only receives the lifecycle events in its
/// hooks, the end of the run included ([`EventKind::RUN_END`](crate::EventKind::RUN_END)).
#[sabi_trait]
pub trait ObserverAbi: Send {
    /// A lifecycle event (only the kinds asked for in the policy's hooks).
    #[sabi(last_prefix_field)]
    fn on_event(
        &mut self,
        event: &RequestEvent<'_>,
        cluster: &ClusterState<'_>,
    ) -> RResult<(), PolicyError>;
}

/// An observer object owned by the host (ABI 0.2).
pub type ObserverBox = ObserverAbi_TO<'static, RBox<()>>;

/// A filter object owned by the host (ABI 0.2).
pub type FilterBox = FilterAbi_TO<'static, RBox<()>>;
/// A picker object owned by the host (ABI 0.2).
pub type PickerBox = PickerAbi_TO<'static, RBox<()>>;

/// An admission policy object owned by the host.
pub type AdmissionBox = AdmissionAbi_TO<'static, RBox<()>>;
/// A routing policy object owned by the host.
pub type RouterBox = RouterAbi_TO<'static, RBox<()>>;
/// A scorer object owned by the host.
pub type ScorerBox = ScorerAbi_TO<'static, RBox<()>>;

/// A freshly created policy of one of the three kinds.
#[repr(u8)]
#[derive(StableAbi)]
pub enum PolicyObject {
    /// An admission policy.
    Admission(AdmissionBox),
    /// A routing policy.
    Router(RouterBox),
    /// A scorer.
    Scorer(ScorerBox),
}

/// Description of one policy a library offers.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct PolicyInfo {
    /// Kind of policy.
    pub kind: PolicyKind,
    /// Name used in run files (unique per kind within a library).
    pub name: RString,
    /// One line saying what it does.
    pub summary: RString,
    /// Parameter documentation (TOML keys, types, defaults, units).
    pub params_doc: RString,
}

/// What a library says about itself.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct LibraryInfo {
    /// Library name (e.g. `blis-std`).
    pub name: RString,
    /// Library version (its crate version).
    pub version: RString,
    /// The policies it offers.
    pub policies: RVec<PolicyInfo>,
}

/// The version of the blis plugin ABI: what [`PluginMod::describe_v2`]
/// reports and `blis --version` prints. A library without `describe_v2` is
/// ABI 0.1.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AbiVersion {
    /// Major version (0 while the ABI is young).
    pub major: u16,
    /// Minor version: each minor version adds to the previous one.
    pub minor: u16,
}

impl std::fmt::Display for AbiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The ABI version this crate implements.
pub const ABI_VERSION: AbiVersion = AbiVersion { major: 0, minor: 2 };

/// The ABI version of a library that predates [`PluginMod::describe_v2`].
pub const ABI_0_1: AbiVersion = AbiVersion { major: 0, minor: 1 };

/// ABI 0.2: the kind of a policy as an open-ended code. Unlike the frozen
/// [`PolicyKind`] enum, a later ABI adds kinds as new codes; a host ignores
/// policies of codes it does not know.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindCode(pub u8);

impl KindCode {
    /// [`PolicyKind::Admission`].
    pub const ADMISSION: KindCode = KindCode(0);
    /// [`PolicyKind::Router`].
    pub const ROUTER: KindCode = KindCode(1);
    /// [`PolicyKind::Scorer`].
    pub const SCORER: KindCode = KindCode(2);
    /// A routing-profile filter (0.2).
    pub const FILTER: KindCode = KindCode(3);
    /// A routing-profile picker (0.2).
    pub const PICKER: KindCode = KindCode(4);
    /// An instance's wait-queue order (0.2).
    pub const SCHEDULER: KindCode = KindCode(5);
    /// An instance's preemption victim choice (0.2).
    pub const PREEMPTION: KindCode = KindCode(6);
    /// Prefill/decode disaggregation's split decision (0.2).
    pub const DECIDER: KindCode = KindCode(7);
    /// The control plane's scaling decision (0.2).
    pub const AUTOSCALER: KindCode = KindCode(8);
    /// A policy that only receives lifecycle events and the end of the run
    /// (0.2, `create_observer`).
    pub const OBSERVER: KindCode = KindCode(9);

    /// True for the kinds whose policies receive lifecycle events (and so
    /// may declare hooks): admission, router, scorer, filter, picker and
    /// observer. Schedulers, preemption policies, autoscalers and deciders
    /// have no `on_event`.
    pub fn receives_events(self) -> bool {
        matches!(self.0, 0..=4 | 9)
    }

    /// Lower-case name used in messages and run files (`"unknown"` for a
    /// code this version does not know).
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "admission",
            1 => "router",
            2 => "scorer",
            3 => "filter",
            4 => "picker",
            5 => "scheduler",
            6 => "preemption",
            7 => "decider",
            8 => "autoscaler",
            9 => "observer",
            _ => "unknown",
        }
    }

    /// The 0.1 enum for the kinds it has.
    pub fn policy_kind(self) -> Option<PolicyKind> {
        match self.0 {
            0 => Some(PolicyKind::Admission),
            1 => Some(PolicyKind::Router),
            2 => Some(PolicyKind::Scorer),
            _ => None,
        }
    }
}

impl From<PolicyKind> for KindCode {
    fn from(k: PolicyKind) -> Self {
        KindCode(k as u8)
    }
}

/// ABI 0.2: which lifecycle events a policy wants (a bit set of
/// [`EventKind`](crate::EventKind) codes). The host calls `on_event` only
/// for these, so a policy that wants none costs nothing per request.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Hooks(pub u32);

impl Hooks {
    /// No lifecycle event.
    pub const NONE: Hooks = Hooks(0);
    /// Every event kind this version defines.
    pub const ALL: Hooks = Hooks(0b11_1111);
    /// The end of the run ([`EventKind::RUN_END`](crate::EventKind::RUN_END)).
    pub const RUN_END: Hooks = Hooks::of(crate::EventKind::RUN_END);

    /// The set holding one event kind.
    pub const fn of(kind: crate::EventKind) -> Hooks {
        Hooks(1 << kind.0)
    }

    /// Union.
    pub const fn with(self, kind: crate::EventKind) -> Hooks {
        Hooks(self.0 | (1 << kind.0))
    }

    /// True when `kind` is in the set.
    #[inline]
    pub const fn contains(self, kind: crate::EventKind) -> bool {
        kind.0 < 32 && self.0 & (1 << kind.0) != 0
    }

    /// True when the set is empty.
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// ABI 0.2: description of one policy, of any kind.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct PolicyInfoV2 {
    /// Kind of policy.
    pub kind: KindCode,
    /// Name used in run files (unique per kind within a library).
    pub name: RString,
    /// One line saying what it does.
    pub summary: RString,
    /// Parameter documentation (TOML keys, types, defaults, units).
    pub params_doc: RString,
    /// The lifecycle events the policy handles.
    pub hooks: Hooks,
    /// A scorer that reads the 0.2 [`ClusterState`]: the host calls its
    /// `score_candidates` at every decision, filters or not.
    pub uses_state: bool,
    /// The policy reads [`ClusterState::prefix_blocks`]: the host runs the
    /// per-instance prefix-cache query at every routing decision (and only
    /// then).
    pub prefix_query: bool,
}

/// ABI 0.2: what a library says about itself.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct LibraryInfoV2 {
    /// The plugin ABI version the library was built against.
    pub abi: AbiVersion,
    /// Every policy it offers, the 0.1 kinds included.
    pub policies: RVec<PolicyInfoV2>,
}

/// The root module of a plugin library.
///
/// `describe` and `create` are ABI 0.1 and frozen. Every later field is
/// optional: a 0.1 library does not have it, and the host reads it through
/// an `Option` accessor (`module.describe_v2()` is `None` for 0.1).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
pub struct PluginMod {
    /// Describe the library and its 0.1 policies.
    pub describe: extern "C" fn() -> LibraryInfo,
    /// Create the policy `name` of `kind` from its TOML parameter table
    /// (`params_toml`, possibly empty) and its own random seed.
    #[sabi(last_prefix_field)]
    pub create: extern "C" fn(
        kind: PolicyKind,
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<PolicyObject, RString>,
    /// ABI 0.2: the ABI version and every policy, with its hooks.
    pub describe_v2: extern "C" fn() -> LibraryInfoV2,
    /// ABI 0.2: create a filter.
    pub create_filter: extern "C" fn(
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<FilterBox, RString>,
    /// ABI 0.2: create a picker.
    pub create_picker: extern "C" fn(
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<PickerBox, RString>,
    /// ABI 0.2: create a scheduler (one per instance).
    pub create_scheduler: extern "C" fn(
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<SchedulerBox, RString>,
    /// ABI 0.2: create a preemption policy (one per instance).
    pub create_preemption: extern "C" fn(
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<PreemptionBox, RString>,
    /// ABI 0.2: create an autoscaler (kind code 8).
    pub create_autoscaler: extern "C" fn(
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<AutoscalerBox, RString>,
    /// ABI 0.2: create a P/D decider (kind code 7; appended after
    /// `create_autoscaler`, so a library built before it still loads and
    /// this accessor is `None` for it). The cfg exists only for the test
    /// fixture that builds such a library from this source
    /// (`tests/fixtures/plugin-api-before-decider`).
    #[cfg(not(blis_abi_before_decider))]
    pub create_decider: extern "C" fn(
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<DeciderBox, RString>,
    /// ABI 0.2: create an observer (kind code 9; appended after
    /// `create_decider`, so a library built before it still loads, through
    /// [`abi_before_observer`](crate::abi_before_observer)). The cfg exists
    /// only for the test fixtures built from this source without it.
    #[cfg(not(any(blis_abi_before_decider, blis_abi_before_observer)))]
    pub create_observer: extern "C" fn(
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<ObserverBox, RString>,
    /// ABI 0.2: receive the host's query table ([`crate::host`]; appended
    /// after `create_observer`, so a library built before it still loads,
    /// through [`abi_before_host`](crate::abi_before_host), and has no
    /// answers). The host calls it once, at load. The cfg exists only for
    /// the test fixtures built from this source without it.
    #[cfg(not(any(
        blis_abi_before_decider,
        blis_abi_before_observer,
        blis_abi_before_host
    )))]
    pub set_host: extern "C" fn(queries: crate::host::HostQueriesRef),
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "blis_plugin";
    const NAME: &'static str = "blis_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

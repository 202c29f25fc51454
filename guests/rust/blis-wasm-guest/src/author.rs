//! The traits a policy author implements — the same shape as
//! blis-plugin-api's (`PolicyDef` plus one trait per kind) — and the
//! adapters that turn them into the one dispatch trait the runtime calls.

use crate::params::Params;
use crate::views::{
    ClusterState, ClusterView, EventKind, InstanceInfo, PdView, RequestEvent, RequestView,
    RunSummary, RunningRequest,
};

/// The scores a scorer pushes (one per instance, or per candidate).
pub type Scores = Vec<f64>;
/// The candidates a filter keeps.
pub type Kept = Vec<u32>;

/// Which lifecycle events a policy wants (bit k = event kind k).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Hooks(pub u32);

impl Hooks {
    pub const NONE: Hooks = Hooks(0);
    pub const ALL: Hooks = Hooks(0b11_1111);
    pub const RUN_END: Hooks = Hooks::of(EventKind::RUN_END);

    /// The set holding one event kind.
    pub const fn of(kind: EventKind) -> Hooks {
        Hooks(1 << kind.0)
    }

    /// Union.
    pub const fn with(self, kind: EventKind) -> Hooks {
        Hooks(self.0 | (1 << kind.0))
    }
}

/// Name, documentation and constructor of a policy (every kind).
pub trait PolicyDef: Sized + 'static {
    /// Name used in run files (unique per kind within the library).
    const NAME: &'static str;
    /// One line saying what it does.
    const SUMMARY: &'static str;
    /// Parameter documentation.
    const PARAMS_DOC: &'static str = "This policy takes no parameters.";
    /// Lifecycle events the policy handles.
    const HOOKS: Hooks = Hooks::NONE;
    /// A scorer that reads the 0.2 cluster state (`score_candidates`).
    const USES_STATE: bool = false;
    /// The policy reads `ClusterState::prefix_blocks`.
    const PREFIX_QUERY: bool = false;

    /// Create the policy from its parameters and its own seed.
    fn create(params: Params, seed: u64) -> Result<Self, String>;

    /// A lifecycle event of a kind in `HOOKS`.
    fn on_event(&mut self, _event: &RequestEvent<'_>, _cluster: &ClusterState<'_>) {}

    /// The end of the run (with `Hooks::RUN_END` in `HOOKS`).
    fn on_run_end(&mut self, _summary: &RunSummary, _cluster: &ClusterState<'_>) {}
}

/// An admission policy.
pub trait Admission: PolicyDef {
    fn admit(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> bool;
    fn observe(&mut self, _request: &RequestView<'_>, _cluster: &ClusterView<'_>, _chosen: usize) {}
}

/// A router.
pub trait Router: PolicyDef {
    fn route(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> usize;
    fn observe(&mut self, _request: &RequestView<'_>, _cluster: &ClusterView<'_>, _chosen: usize) {}
}

/// A scorer: implement `score`, or set `USES_STATE` and implement
/// `score_candidates` (either default calls the other).
pub trait Scorer: PolicyDef {
    fn score(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        default_score(self, request, cluster, scores);
    }

    fn score_candidates(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        scores: &mut Scores,
    ) {
        IN_DEFAULT.with(|c| c.set(true));
        self.score(request, &cluster.view, scores);
        IN_DEFAULT.with(|c| c.set(false));
        let candidates = cluster.candidates();
        if scores.len() == cluster.len() && candidates.len() < scores.len() {
            for (k, &i) in candidates.iter().enumerate() {
                scores[k] = scores[i as usize];
            }
            scores.truncate(candidates.len());
        }
    }

    fn observe(&mut self, _request: &RequestView<'_>, _cluster: &ClusterView<'_>, _chosen: usize) {}
}

/// A filter of a routing profile.
pub trait Filter: PolicyDef {
    fn filter(&mut self, request: &RequestView<'_>, cluster: &ClusterState<'_>, keep: &mut Kept);
    fn observe(&mut self, _request: &RequestView<'_>, _cluster: &ClusterView<'_>, _chosen: usize) {}
}

/// The picker of a routing profile.
pub trait Picker: PolicyDef {
    fn pick(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        scores: &[f64],
    ) -> u32;
    fn observe(&mut self, _request: &RequestView<'_>, _cluster: &ClusterView<'_>, _chosen: usize) {}
}

/// An instance's wait-queue order.
pub trait Scheduler: PolicyDef {
    fn key(&mut self, request: &RequestView<'_>) -> i64;
}

/// An instance's preemption victim choice.
pub trait Preemption: PolicyDef {
    fn victim(&mut self, running: &[RunningRequest]) -> usize;
}

/// The control plane's scaling decision.
pub trait Autoscaler: PolicyDef {
    fn decide(&mut self, cluster: &ClusterState<'_>) -> i32;
}

/// The prefill/decode split decision.
pub trait Decider: PolicyDef {
    fn disaggregate(
        &mut self,
        request: &RequestView<'_>,
        pd: &PdView,
        cluster: &ClusterState<'_>,
    ) -> bool;
}

/// A policy that only receives the lifecycle events of its `HOOKS`.
pub trait Observer: PolicyDef {}

std::thread_local! {
    static IN_DEFAULT: core::cell::Cell<bool> = core::cell::Cell::new(false);
}

fn default_score<S: Scorer>(
    scorer: &mut S,
    request: &RequestView<'_>,
    cluster: &ClusterView<'_>,
    scores: &mut Scores,
) {
    let recursing = IN_DEFAULT.with(|c| c.replace(false));
    if recursing || !(S::USES_STATE || S::PREFIX_QUERY) {
        panic!(
            "scorer '{}' implements neither `score` nor `score_candidates`: implement `score`, \
             or set `USES_STATE` and implement `score_candidates`",
            S::NAME
        );
    }
    let all: Vec<u32> = (0..cluster.len() as u32).collect();
    let info = vec![InstanceInfo::empty(); cluster.len()];
    let state = ClusterState {
        view: *cluster,
        candidates: &all,
        info: &info,
        prefix_blocks: &[],
    };
    scorer.score_candidates(request, &state, scores);
}

/// What the runtime calls on a policy of any kind (the adapters implement
/// the methods of their kind; the host never calls the others).
#[doc(hidden)]
pub trait Dyn {
    fn admit(&mut self, _r: &RequestView<'_>, _c: &ClusterView<'_>) -> bool {
        wrong("admit")
    }
    fn route(&mut self, _r: &RequestView<'_>, _c: &ClusterView<'_>) -> u32 {
        wrong("route")
    }
    fn score(&mut self, _r: &RequestView<'_>, _c: &ClusterView<'_>, _out: &mut Scores) {
        wrong("score")
    }
    fn score_candidates(&mut self, _r: &RequestView<'_>, _c: &ClusterState<'_>, _o: &mut Scores) {
        wrong("score-candidates")
    }
    fn filter(&mut self, _r: &RequestView<'_>, _c: &ClusterState<'_>, _keep: &mut Kept) {
        wrong("filter")
    }
    fn pick(&mut self, _r: &RequestView<'_>, _c: &ClusterState<'_>, _scores: &[f64]) -> u32 {
        wrong("pick")
    }
    fn observe(&mut self, _r: &RequestView<'_>, _c: &ClusterView<'_>, _chosen: u32) {}
    fn on_event(&mut self, _e: &RequestEvent<'_>, _c: &ClusterState<'_>) {}
    fn key(&mut self, _r: &RequestView<'_>) -> i64 {
        wrong("key")
    }
    fn victim(&mut self, _running: &[RunningRequest]) -> u32 {
        wrong("victim")
    }
    fn autoscale(&mut self, _c: &ClusterState<'_>) -> i32 {
        wrong("autoscale")
    }
    fn disaggregate(&mut self, _r: &RequestView<'_>, _pd: &PdView, _c: &ClusterState<'_>) -> bool {
        wrong("disaggregate")
    }
}

fn wrong(call: &str) -> ! {
    panic!("the host called {call} on a policy of another kind")
}

/// Deliver an event, the end of the run as `on_run_end`.
fn deliver<P: PolicyDef>(p: &mut P, e: &RequestEvent<'_>, c: &ClusterState<'_>) {
    if e.kind == EventKind::RUN_END {
        p.on_run_end(&RunSummary::from_toml(e.request.tenant), c);
    } else {
        p.on_event(e, c);
    }
}

#[doc(hidden)]
pub struct AdmissionAdapter<P>(pub P);
#[doc(hidden)]
pub struct RouterAdapter<P>(pub P);
#[doc(hidden)]
pub struct ScorerAdapter<P>(pub P);
#[doc(hidden)]
pub struct FilterAdapter<P>(pub P);
#[doc(hidden)]
pub struct PickerAdapter<P>(pub P);
#[doc(hidden)]
pub struct SchedulerAdapter<P>(pub P);
#[doc(hidden)]
pub struct PreemptionAdapter<P>(pub P);
#[doc(hidden)]
pub struct AutoscalerAdapter<P>(pub P);
#[doc(hidden)]
pub struct DeciderAdapter<P>(pub P);
#[doc(hidden)]
pub struct ObserverAdapter<P>(pub P);

impl<P: Admission> Dyn for AdmissionAdapter<P> {
    fn admit(&mut self, r: &RequestView<'_>, c: &ClusterView<'_>) -> bool {
        self.0.admit(r, c)
    }
    fn observe(&mut self, r: &RequestView<'_>, c: &ClusterView<'_>, chosen: u32) {
        self.0.observe(r, c, chosen as usize)
    }
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) {
        deliver(&mut self.0, e, c)
    }
}

impl<P: Router> Dyn for RouterAdapter<P> {
    fn route(&mut self, r: &RequestView<'_>, c: &ClusterView<'_>) -> u32 {
        u32::try_from(self.0.route(r, c)).unwrap_or(u32::MAX)
    }
    fn observe(&mut self, r: &RequestView<'_>, c: &ClusterView<'_>, chosen: u32) {
        self.0.observe(r, c, chosen as usize)
    }
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) {
        deliver(&mut self.0, e, c)
    }
}

impl<P: Scorer> Dyn for ScorerAdapter<P> {
    fn score(&mut self, r: &RequestView<'_>, c: &ClusterView<'_>, out: &mut Scores) {
        self.0.score(r, c, out)
    }
    fn score_candidates(&mut self, r: &RequestView<'_>, c: &ClusterState<'_>, out: &mut Scores) {
        self.0.score_candidates(r, c, out)
    }
    fn observe(&mut self, r: &RequestView<'_>, c: &ClusterView<'_>, chosen: u32) {
        self.0.observe(r, c, chosen as usize)
    }
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) {
        deliver(&mut self.0, e, c)
    }
}

impl<P: Filter> Dyn for FilterAdapter<P> {
    fn filter(&mut self, r: &RequestView<'_>, c: &ClusterState<'_>, keep: &mut Kept) {
        self.0.filter(r, c, keep)
    }
    fn observe(&mut self, r: &RequestView<'_>, c: &ClusterView<'_>, chosen: u32) {
        self.0.observe(r, c, chosen as usize)
    }
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) {
        deliver(&mut self.0, e, c)
    }
}

impl<P: Picker> Dyn for PickerAdapter<P> {
    fn pick(&mut self, r: &RequestView<'_>, c: &ClusterState<'_>, scores: &[f64]) -> u32 {
        self.0.pick(r, c, scores)
    }
    fn observe(&mut self, r: &RequestView<'_>, c: &ClusterView<'_>, chosen: u32) {
        self.0.observe(r, c, chosen as usize)
    }
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) {
        deliver(&mut self.0, e, c)
    }
}

impl<P: Scheduler> Dyn for SchedulerAdapter<P> {
    fn key(&mut self, r: &RequestView<'_>) -> i64 {
        self.0.key(r)
    }
}

impl<P: Preemption> Dyn for PreemptionAdapter<P> {
    fn victim(&mut self, running: &[RunningRequest]) -> u32 {
        u32::try_from(self.0.victim(running)).unwrap_or(u32::MAX)
    }
}

impl<P: Autoscaler> Dyn for AutoscalerAdapter<P> {
    fn autoscale(&mut self, c: &ClusterState<'_>) -> i32 {
        self.0.decide(c)
    }
}

impl<P: Decider> Dyn for DeciderAdapter<P> {
    fn disaggregate(&mut self, r: &RequestView<'_>, pd: &PdView, c: &ClusterState<'_>) -> bool {
        self.0.disaggregate(r, pd, c)
    }
}

impl<P: Observer> Dyn for ObserverAdapter<P> {
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) {
        deliver(&mut self.0, e, c)
    }
}

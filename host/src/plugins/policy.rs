//! Host-side handles of plugin policies: every call goes through the ABI and
//! every result is checked before the simulator uses it.

use abi_stable::std_types::{RResult, RSlice, RVec};
use blis_plugin_api::{
    abi_v0_1, AbiVersion, AdmissionBox, AutoscalerBox, ClusterState, ClusterView, DeciderBox,
    EventKind, FilterBox, Hooks, ObserverBox, PdView, PickerBox, PolicyError, PreemptionBox,
    RequestEvent, RequestView, RouterBox, RunningRequest, SchedulerBox, ScorerBox,
    SloClass as AbiSlo,
};

use super::PluginError;

/// The start of a [`PolicyError`] message that is a WebAssembly policy's
/// trap (fuel, memory cap, panic, uncaught exception): the host reports
/// it as "trapped", not "panicked" or "returned an error".
pub(crate) const TRAP_MARK: &str = "\u{1}wasm-trap:";

/// How a failed call is worded, and its message without the trap mark.
fn failure(e: &PolicyError) -> (&'static str, &str) {
    match e.message.as_str().strip_prefix(TRAP_MARK) {
        Some(m) => ("trapped", m),
        None if e.panicked => ("panicked", e.message.as_str()),
        None => ("returned an error", e.message.as_str()),
    }
}

/// Which policy of which library (for messages and traces).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyLabel {
    pub library: String,
    pub kind: &'static str,
    pub name: String,
    /// ABI version of the library.
    pub abi: AbiVersion,
    /// Lifecycle events the policy handles.
    pub hooks: Hooks,
    /// A scorer that reads the 0.2 cluster state.
    pub uses_state: bool,
    /// The policy reads the per-instance prefix-cache query.
    pub prefix_query: bool,
    /// The policy may read `RequestView::block_hashes`: every plugin
    /// policy, and the standard ones that do (see
    /// [`super::registry::std_reads_block_hashes`]).
    pub block_hashes: bool,
    /// The policy may read the instance snapshots of its `ClusterView`:
    /// every plugin policy, and the standard ones that do (see
    /// [`super::registry::std_reads_snapshots`]).
    pub snapshots: bool,
}

impl PolicyLabel {
    fn fail(&self, call: &'static str, request: u64, e: PolicyError) -> Box<PluginError> {
        let clean = |m: &str| crate::text::clean(m, crate::text::MAX_ERROR);
        if let Some(m) = e.message.as_str().strip_prefix(TRAP_MARK) {
            return Box::new(PluginError::Trapped {
                library: self.library.clone(),
                kind: self.kind,
                name: self.name.clone(),
                call,
                request,
                message: clean(m),
            });
        }
        if e.panicked {
            Box::new(PluginError::Panicked {
                library: self.library.clone(),
                kind: self.kind,
                name: self.name.clone(),
                call,
                request,
                message: clean(e.message.as_str()),
            })
        } else {
            self.bad(
                call,
                request,
                format!("returned an error: {}", clean(e.message.as_str())),
            )
        }
    }

    /// The result of an `on_run_end` call (no request to name).
    fn run_end(&self, r: RResult<(), PolicyError>) -> Result<(), Box<PluginError>> {
        match r {
            RResult::ROk(()) => Ok(()),
            RResult::RErr(e) => {
                let (what, message) = failure(&e);
                let message = crate::text::clean(message, crate::text::MAX_ERROR);
                Err(Box::new(PluginError::InInstance {
                    message: format!(
                        "plugin {}: {} '{}' {what} in on_run_end at the end of the run: {message}",
                        self.library, self.kind, self.name
                    ),
                }))
            }
        }
    }

    fn bad(&self, call: &'static str, request: u64, problem: String) -> Box<PluginError> {
        Box::new(PluginError::BadOutput {
            library: self.library.clone(),
            kind: self.kind,
            name: self.name.clone(),
            call,
            request,
            problem,
        })
    }
}

fn check<T>(
    label: &PolicyLabel,
    call: &'static str,
    request: u64,
    r: RResult<T, PolicyError>,
) -> Result<T, Box<PluginError>> {
    match r {
        RResult::ROk(v) => Ok(v),
        RResult::RErr(e) => Err(label.fail(call, request, e)),
    }
}

/// A host-side policy handle: the struct (the policy's label, its object
/// in the library's ABI, and an optional reusable buffer), its constructor
/// and `label()`. Every kind has one; the macro keeps them identical, so a
/// new kind's handle is one invocation plus its own checked calls.
macro_rules! policy_handle {
    ($(#[$doc:meta])* $name:ident($obj:ty) $(, $buf:ident: $buf_ty:ty)?) => {
        $(#[$doc])*
        pub struct $name {
            label: PolicyLabel,
            obj: $obj,
            $($buf: $buf_ty,)?
        }

        impl $name {
            pub(super) fn new(label: PolicyLabel, obj: $obj) -> Self {
                Self {
                    label,
                    obj,
                    $($buf: <$buf_ty>::default(),)?
                }
            }

            /// Which policy this is.
            pub fn label(&self) -> &PolicyLabel {
                &self.label
            }
        }
    };
}

/// `wants` and `on_event` for a policy handle whose object has `on_event`.
macro_rules! lifecycle_methods {
    () => {
        /// True when the policy handles events of `kind`.
        #[inline]
        pub fn wants(&self, kind: EventKind) -> bool {
            self.label.hooks.contains(kind)
        }

        /// Deliver a lifecycle event (call only when [`Self::wants`] it).
        pub fn on_event(
            &mut self,
            event: &RequestEvent<'_>,
            cluster: &ClusterState<'_>,
        ) -> Result<(), Box<PluginError>> {
            let r = self.obj.on_event(event, cluster);
            if event.kind == EventKind::RUN_END {
                return self.label.run_end(r);
            }
            check(&self.label, "on_event", event.request.id, r)
        }
    };
}

/// Dispatch `$call` to the object of either ABI.
macro_rules! either {
    ($obj:expr, $o:ident => $call:expr) => {
        match $obj {
            Self::Current($o) => $call,
            Self::V0_1($o) => $call,
        }
    };
}

/// An admission policy object, in the ABI of its library.
pub(super) enum AdmissionObj {
    Current(AdmissionBox),
    V0_1(abi_v0_1::AdmissionBox),
}

impl AdmissionObj {
    #[inline]
    fn admit(&mut self, r: &RequestView<'_>, c: &ClusterView<'_>) -> RResult<bool, PolicyError> {
        either!(self, o => o.admit(r, c))
    }
    #[inline]
    fn observe(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        either!(self, o => o.observe(r, c, chosen))
    }
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) -> RResult<(), PolicyError> {
        match self {
            Self::Current(o) => o.on_event(e, c),
            Self::V0_1(_) => RResult::ROk(()),
        }
    }
}

/// A routing policy object, in the ABI of its library.
pub(super) enum RouterObj {
    Current(RouterBox),
    V0_1(abi_v0_1::RouterBox),
}

impl RouterObj {
    #[inline]
    fn route(&mut self, r: &RequestView<'_>, c: &ClusterView<'_>) -> RResult<u32, PolicyError> {
        either!(self, o => o.route(r, c))
    }
    #[inline]
    fn observe(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        either!(self, o => o.observe(r, c, chosen))
    }
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) -> RResult<(), PolicyError> {
        match self {
            Self::Current(o) => o.on_event(e, c),
            Self::V0_1(_) => RResult::ROk(()),
        }
    }
}

/// A scorer object, in the ABI of its library.
pub(super) enum ScorerObj {
    Current(ScorerBox),
    V0_1(abi_v0_1::ScorerBox),
}

impl ScorerObj {
    #[inline]
    fn score(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterView<'_>,
        out: &mut RVec<f64>,
    ) -> RResult<(), PolicyError> {
        either!(self, o => o.score(r, c, out))
    }
    fn score_candidates(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterState<'_>,
        out: &mut RVec<f64>,
    ) -> RResult<(), PolicyError> {
        match self {
            Self::Current(o) => o.score_candidates(r, c, out),
            Self::V0_1(_) => RResult::RErr(PolicyError {
                panicked: false,
                message: "score_candidates is not part of ABI 0.1".into(),
            }),
        }
    }
    #[inline]
    fn observe(
        &mut self,
        r: &RequestView<'_>,
        c: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        either!(self, o => o.observe(r, c, chosen))
    }
    fn on_event(&mut self, e: &RequestEvent<'_>, c: &ClusterState<'_>) -> RResult<(), PolicyError> {
        match self {
            Self::Current(o) => o.on_event(e, c),
            Self::V0_1(_) => RResult::ROk(()),
        }
    }
}

policy_handle! {
    /// An admission policy created by a plugin library.
    AdmissionPolicy(AdmissionObj)
}

impl AdmissionPolicy {
    lifecycle_methods!();

    /// Admit (true) or reject (false) the request.
    #[inline]
    pub fn admit(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> Result<bool, Box<PluginError>> {
        let r = self.obj.admit(req, cluster);
        check(&self.label, "admit", req.id, r)
    }

    /// The reason the policy gave for its last decision, if any (ABI ≥ 0.2;
    /// call right after [`AdmissionPolicy::admit`]).
    pub fn take_reason(&mut self) -> Option<String> {
        let reason = match &mut self.obj {
            AdmissionObj::Current(o) => o.take_reason(),
            AdmissionObj::V0_1(_) => return None,
        };
        (!reason.is_empty()).then(|| crate::text::clean(&reason, crate::text::MAX_REASON))
    }

    /// Tell the policy where an admitted request was routed.
    #[inline]
    pub fn observe(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> Result<(), Box<PluginError>> {
        let r = self.obj.observe(req, cluster, chosen);
        check(&self.label, "observe", req.id, r)
    }
}

policy_handle! {
    /// A routing policy created by a plugin library.
    RouterPolicy(RouterObj)
}

impl RouterPolicy {
    lifecycle_methods!();

    /// The chosen instance, checked to be in range.
    #[inline]
    pub fn route(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> Result<u32, Box<PluginError>> {
        let r = self.obj.route(req, cluster);
        let i = check(&self.label, "route", req.id, r)?;
        if (i as usize) < cluster.len() {
            Ok(i)
        } else {
            let shown = if i == u32::MAX {
                "an index beyond u32".to_string()
            } else {
                i.to_string()
            };
            Err(self.label.bad(
                "route",
                req.id,
                format!(
                    "chose instance {shown}, but the cluster has {} instances (valid: 0..{})",
                    cluster.len(),
                    cluster.len().saturating_sub(1)
                ),
            ))
        }
    }

    /// Tell the policy where the request was routed.
    #[inline]
    pub fn observe(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> Result<(), Box<PluginError>> {
        let r = self.obj.observe(req, cluster, chosen);
        check(&self.label, "observe", req.id, r)
    }
}

policy_handle! {
    /// A scorer created by a plugin library, with its reusable score buffer.
    ScorerPolicy(ScorerObj), buf: RVec<f64>
}

impl ScorerPolicy {
    lifecycle_methods!();

    /// One score per instance, checked (count, finiteness) and clamped to [0, 1].
    #[inline]
    pub fn score(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> Result<&[f64], Box<PluginError>> {
        self.buf.clear();
        let r = self.obj.score(req, cluster, &mut self.buf);
        check(&self.label, "score", req.id, r)?;
        self.checked(req.id, "score", cluster.len(), "instance")
    }

    /// One score per candidate (`cluster.candidates`), checked and clamped.
    /// A 0.1 library scores the whole cluster and the candidates' scores are
    /// kept.
    pub fn score_candidates(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterState<'_>,
    ) -> Result<&[f64], Box<PluginError>> {
        if self.label.abi == blis_plugin_api::ABI_0_1 {
            self.score(req, &cluster.view)?;
            let candidates = cluster.candidates();
            for (k, &i) in candidates.iter().enumerate() {
                self.buf[k] = self.buf[i as usize];
            }
            self.buf.truncate(candidates.len());
            return Ok(self.buf.as_slice());
        }
        self.buf.clear();
        let r = self.obj.score_candidates(req, cluster, &mut self.buf);
        check(&self.label, "score_candidates", req.id, r)?;
        let n = cluster.candidates.len();
        self.checked(req.id, "score_candidates", n, "candidate")
    }

    /// The scores of the last call, as checked and clamped: per instance
    /// after [`Self::score`], per candidate after [`Self::score_candidates`].
    pub fn last_scores(&self) -> &[f64] {
        self.buf.as_slice()
    }

    /// Check the count and values in `buf`, clamp them to [0, 1].
    fn checked(
        &mut self,
        request: u64,
        call: &'static str,
        n: usize,
        what: &str,
    ) -> Result<&[f64], Box<PluginError>> {
        if self.buf.len() != n {
            return Err(self.label.bad(
                call,
                request,
                format!(
                    "returned {} scores for {n} {what}s; a scorer must push exactly one score per {what}",
                    self.buf.len()
                ),
            ));
        }
        for (i, s) in self.buf.iter_mut().enumerate() {
            if !s.is_finite() {
                let v = *s;
                return Err(self.label.bad(
                    call,
                    request,
                    format!("returned {v} for {what} {i}; scores must be finite numbers in [0, 1]"),
                ));
            }
            *s = s.clamp(0.0, 1.0);
        }
        Ok(self.buf.as_slice())
    }

    /// Tell the scorer where the request was routed.
    #[inline]
    pub fn observe(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> Result<(), Box<PluginError>> {
        let r = self.obj.observe(req, cluster, chosen);
        check(&self.label, "observe", req.id, r)
    }
}

policy_handle! {
    /// A filter created by a plugin library (ABI 0.2), with its output buffer.
    FilterPolicy(FilterBox), buf: RVec<u32>
}

impl FilterPolicy {
    lifecycle_methods!();

    /// The candidates to keep, checked to be a subset of
    /// `cluster.candidates` in the same order.
    pub fn filter(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterState<'_>,
    ) -> Result<&[u32], Box<PluginError>> {
        self.buf.clear();
        let r = self.obj.filter(req, cluster, &mut self.buf);
        check(&self.label, "filter", req.id, r)?;
        let mut rest = cluster.candidates().iter();
        for &k in self.buf.iter() {
            if !rest.any(|&c| c == k) {
                return Err(self.label.bad(
                    "filter",
                    req.id,
                    format!(
                        "kept instance {k}, which is not a remaining candidate (or is out of order); \
                         a filter keeps a subset of cluster.candidates() in their order"
                    ),
                ));
            }
        }
        Ok(self.buf.as_slice())
    }

    /// The candidates kept by the last [`FilterPolicy::filter`].
    pub fn kept(&self) -> &[u32] {
        self.buf.as_slice()
    }

    /// The reason the filter gave during its last call, if any.
    pub fn take_reason(&mut self) -> Option<String> {
        let reason = self.obj.take_reason();
        (!reason.is_empty()).then(|| crate::text::clean(&reason, crate::text::MAX_REASON))
    }

    /// Tell the filter where the request was routed.
    pub fn observe(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> Result<(), Box<PluginError>> {
        let r = self.obj.observe(req, cluster, chosen);
        check(&self.label, "observe", req.id, r)
    }
}

policy_handle! {
    /// A picker created by a plugin library (ABI 0.2).
    PickerPolicy(PickerBox)
}

impl PickerPolicy {
    lifecycle_methods!();

    /// The chosen instance, checked to be one of the candidates.
    pub fn pick(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterState<'_>,
        scores: &[f64],
    ) -> Result<u32, Box<PluginError>> {
        let r = self.obj.pick(req, cluster, RSlice::from_slice(scores));
        let i = check(&self.label, "pick", req.id, r)?;
        if cluster.candidates().contains(&i) {
            Ok(i)
        } else {
            Err(self.label.bad(
                "pick",
                req.id,
                format!(
                    "chose instance {i}, which is not a candidate (candidates: {:?})",
                    cluster.candidates()
                ),
            ))
        }
    }

    /// Tell the picker where the request was routed.
    pub fn observe(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> Result<(), Box<PluginError>> {
        let r = self.obj.observe(req, cluster, chosen);
        check(&self.label, "observe", req.id, r)
    }
}

policy_handle! {
    /// A scheduler created by a plugin library (ABI 0.2): the wait-queue key of
    /// one instance.
    SchedulerPolicy(SchedulerBox)
}

impl SchedulerPolicy {}

impl crate::instance::SortKey for SchedulerPolicy {
    fn key(&mut self, req: &crate::request::Request) -> Result<i64, String> {
        let view = RequestView {
            id: req.id,
            arrival_us: req.arrival,
            input_tokens: req.input_len,
            slo_class: AbiSlo(req.slo_class.code()),
            tenant: abi_stable::std_types::RStr::from(""),
            block_hashes: RSlice::from_slice(&[]),
        };
        let r = self.obj.key(&view);
        check(&self.label, "key", req.id, r).map_err(|e| e.to_string())
    }
}

policy_handle! {
    /// A preemption policy created by a plugin library (ABI 0.2): the victim
    /// choice of one instance, with its view buffer.
    PreemptionPolicy(PreemptionBox), buf: Vec<RunningRequest>
}

impl PreemptionPolicy {}

impl crate::instance::VictimChoice for PreemptionPolicy {
    fn victim(&mut self, running: &[crate::instance::RunningInfo]) -> Result<usize, String> {
        self.buf.clear();
        self.buf.extend(running.iter().map(|r| RunningRequest {
            id: r.id,
            arrival_us: r.arrival,
            input_tokens: r.input_len,
            generated: r.generated,
            computed: r.computed,
            slo_class: AbiSlo(r.slo_class.code()),
        }));
        let first = running.first().map_or(0, |r| r.id);
        let r = self.obj.victim(RSlice::from_slice(&self.buf));
        let v = check(&self.label, "victim", first, r).map_err(|e| e.to_string())?;
        if (v as usize) < running.len() {
            Ok(v as usize)
        } else {
            Err(self
                .label
                .bad(
                    "victim",
                    first,
                    format!(
                        "chose batch index {v}, but the batch has {} requests",
                        running.len()
                    ),
                )
                .to_string())
        }
    }
}

policy_handle! {
    /// An autoscaler created by a plugin library (ABI 0.2, kind code 8): the
    /// scaling decision of every tick.
    AutoscalerPolicy(AutoscalerBox)
}

impl AutoscalerPolicy {
    /// The change in instance count the policy wants now (any `i32`; the
    /// control plane applies its windows and bounds).
    pub fn decide(&mut self, cluster: &ClusterState<'_>) -> Result<i32, Box<PluginError>> {
        match self.obj.decide(cluster) {
            RResult::ROk(v) => Ok(v),
            RResult::RErr(e) => {
                let (what, message) = failure(&e);
                let message = crate::text::clean(message, crate::text::MAX_ERROR);
                Err(Box::new(PluginError::InInstance {
                    message: format!(
                        "plugin {}: autoscaler '{}' {what} in decide at the scaling tick of {} µs: {message}",
                        self.label.library, self.label.name, cluster.clock_us
                    ),
                }))
            }
        }
    }
}

policy_handle! {
    /// A P/D decider created by a plugin library (ABI 0.2, kind code 7): for
    /// every request of a run with `[[pools]]`, whether it is disaggregated.
    DeciderPolicy(DeciderBox)
}

impl DeciderPolicy {
    /// True to disaggregate the request (a panic or an error is the usual
    /// one-line error naming the plugin and the request).
    pub fn decide(
        &mut self,
        req: &RequestView<'_>,
        pd: &PdView,
        cluster: &ClusterState<'_>,
    ) -> Result<bool, Box<PluginError>> {
        let r = self.obj.decide(req, pd, cluster);
        check(&self.label, "decide", req.id, r)
    }

    /// The reason the decider gave during its last call, if any.
    pub fn take_reason(&mut self) -> Option<String> {
        let reason = self.obj.take_reason();
        (!reason.is_empty()).then(|| crate::text::clean(&reason, crate::text::MAX_REASON))
    }
}

policy_handle! {
    /// An observer created by a plugin library (ABI 0.2, kind code 9): it
    /// only receives the lifecycle events of its hooks and the end of the run.
    ObserverPolicy(ObserverBox)
}

impl ObserverPolicy {
    lifecycle_methods!();
}

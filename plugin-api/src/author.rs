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
    std_types::{RResult, RVec},
};

use crate::abi::{
    AdmissionAbi, AdmissionAbi_TO, PolicyError, PolicyInfo, PolicyKind, PolicyObject, RouterAbi,
    RouterAbi_TO, ScorerAbi, ScorerAbi_TO,
};
use crate::params::Params;
use crate::views::{ClusterView, RequestView};

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

    /// Build the policy from its parameter table and its own random seed
    /// (derived from the run seed; use no other source of randomness or time).
    fn create(params: Params<'_>, seed: u64) -> Result<Self, String>;
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
    /// Score every instance.
    fn score(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores);

    /// Called after every routing decision with the chosen instance (stateful
    /// scorers such as prefix affinity update their index here).
    fn observe(&mut self, _request: &RequestView<'_>, _cluster: &ClusterView<'_>, _chosen: usize) {}
}

thread_local! {
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

struct AdmissionAdapter<P>(P);
struct RouterAdapter<P>(P);
struct ScorerAdapter<P>(P);

impl<P: Admission> AdmissionAbi for AdmissionAdapter<P> {
    fn admit(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> RResult<bool, PolicyError> {
        guarded(|| self.0.admit(request, cluster))
    }
    fn observe(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        guarded(|| self.0.observe(request, cluster, chosen as usize))
    }
}

impl<P: Router> RouterAbi for RouterAdapter<P> {
    fn route(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> RResult<u32, PolicyError> {
        match guarded(|| self.0.route(request, cluster)) {
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
        guarded(|| self.0.observe(request, cluster, chosen as usize))
    }
}

impl<P: Scorer> ScorerAbi for ScorerAdapter<P> {
    fn score(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        out: &mut RVec<f64>,
    ) -> RResult<(), PolicyError> {
        guarded(|| self.0.score(request, cluster, out))
    }
    fn observe(
        &mut self,
        request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> RResult<(), PolicyError> {
        guarded(|| self.0.observe(request, cluster, chosen as usize))
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
        match guarded(|| P::create(params, seed)) {
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

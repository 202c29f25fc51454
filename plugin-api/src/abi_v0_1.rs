//! The ABI 0.1 root module and policy traits, frozen, for hosts that load
//! libraries built against 0.1.
//!
//! abi_stable accepts a library whose prefix types have *more* fields than
//! the host expects, never fewer; a 0.1 library's root module and vtables
//! are shorter than 0.2's. So a host checks a library against the current
//! root module first and, if it has the 0.1 shape, against this one: the
//! types here have exactly the names and layouts of 0.1 (the views and the
//! descriptor types are shared, they did not change). Plugins never use
//! this module.

use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RBox, RResult, RStr, RString, RVec},
    StableAbi,
};

use crate::abi::{LibraryInfo, PolicyError, PolicyKind};
use crate::views::{ClusterView, RequestView};

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
}

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

/// The root module of a plugin library: a small, frozen surface.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
#[sabi(missing_field(panic))]
pub struct PluginMod {
    /// Describe the library and its policies.
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
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "blis_plugin";
    const NAME: &'static str = "blis_plugin";
    const VERSION_STRINGS: VersionStrings = VersionStrings::new("0.1.0");
}

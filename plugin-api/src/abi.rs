//! The ABI proper: the root module every plugin library exports and the three
//! policy traits, as `abi_stable` types.
//!
//! Evolution rule: the ABI version is this crate's version. New methods and
//! fields go after the `#[sabi(last_prefix_field)]` markers, with defaults,
//! so older plugins keep loading. `tests/abi_layout.txt` pins the layout.

use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    package_version_strings, sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RBox, RResult, RStr, RString, RVec},
    StableAbi,
};

use crate::views::{ClusterView, RequestView};

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
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

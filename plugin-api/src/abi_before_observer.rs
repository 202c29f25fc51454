//! The ABI 0.2 root module as it was before the observer kind (it ends at
//! `create_decider`), for hosts that load libraries built then.
//!
//! abi_stable accepts a library whose prefix types have *more* fields than
//! the host expects, never fewer, so appending `create_observer` to
//! [`PluginMod`](crate::PluginMod) made every library built before it fail
//! the current check. A host checks a library against the current root
//! module, then against this one, then against
//! [`abi_before_decider`](crate::abi_before_decider) and 0.1, and turns a
//! library of this shape into a current root module with
//! [`PluginModRef::into_current`]: the same functions, and a
//! `create_observer` that says the library predates the kind. Plugins never
//! use this module.

use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    package_version_strings,
    sabi_types::VersionStrings,
    std_types::{RResult, RStr, RString},
    StableAbi,
};

#[cfg(not(any(
    blis_abi_before_decider,
    blis_abi_before_observer,
    blis_abi_before_host
)))]
use abi_stable::prefix_type::PrefixTypeTrait;

use crate::abi::{
    AutoscalerBox, DeciderBox, FilterBox, LibraryInfo, LibraryInfoV2, PickerBox, PolicyKind,
    PolicyObject, PreemptionBox, SchedulerBox,
};

/// The root module of a library built before the observer kind. Parameter
/// names are part of the layout abi_stable checks: keep them as they were.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
pub struct PluginMod {
    /// Describe the library and its 0.1 policies.
    pub describe: extern "C" fn() -> LibraryInfo,
    /// Create a policy of a 0.1 kind.
    #[sabi(last_prefix_field)]
    pub create: extern "C" fn(
        kind: PolicyKind,
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<PolicyObject, RString>,
    /// The ABI version and every policy, with its hooks.
    pub describe_v2: extern "C" fn() -> LibraryInfoV2,
    /// Create a filter.
    pub create_filter: extern "C" fn(
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<FilterBox, RString>,
    /// Create a picker.
    pub create_picker: extern "C" fn(
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<PickerBox, RString>,
    /// Create a scheduler.
    pub create_scheduler: extern "C" fn(
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<SchedulerBox, RString>,
    /// Create a preemption policy.
    pub create_preemption: extern "C" fn(
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<PreemptionBox, RString>,
    /// Create an autoscaler.
    pub create_autoscaler: extern "C" fn(
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<AutoscalerBox, RString>,
    /// Create a P/D decider.
    pub create_decider: extern "C" fn(
        name: RStr<'_>,
        params_toml: RStr<'_>,
        seed: u64,
    ) -> RResult<DeciderBox, RString>,
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "blis_plugin";
    const NAME: &'static str = "blis_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// The `create_observer` of a library built before the observer kind.
#[cfg_attr(
    any(
        blis_abi_before_decider,
        blis_abi_before_observer,
        blis_abi_before_host
    ),
    allow(dead_code)
)]
pub(crate) extern "C" fn predates_observer(
    _name: RStr<'_>,
    _params: RStr<'_>,
    _seed: u64,
) -> RResult<crate::abi::ObserverBox, RString> {
    RResult::RErr(RString::from(
        "the library was built before the observer kind existed; rebuild it against this blis-plugin-api",
    ))
}

impl PluginModRef {
    /// The same library as a current root module (leaked, once per loaded
    /// library): its own functions, and a `create_observer` that refuses.
    /// `None` if the library lacks one of the 0.2 functions, which the
    /// layout check already excludes.
    #[cfg(not(any(
        blis_abi_before_decider,
        blis_abi_before_observer,
        blis_abi_before_host
    )))]
    pub fn into_current(self) -> Option<crate::abi::PluginModRef> {
        Some(
            crate::abi::PluginMod {
                describe: self.describe(),
                create: self.create(),
                describe_v2: self.describe_v2()?,
                create_filter: self.create_filter()?,
                create_picker: self.create_picker()?,
                create_scheduler: self.create_scheduler()?,
                create_preemption: self.create_preemption()?,
                create_autoscaler: self.create_autoscaler()?,
                create_decider: self.create_decider()?,
                create_observer: predates_observer,
                set_host: crate::abi_before_host::predates_host,
            }
            .leak_into_prefix(),
        )
    }
}

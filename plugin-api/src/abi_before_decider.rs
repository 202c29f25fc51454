//! The ABI 0.2 root module as it was before the decider kind (it ends at
//! `create_autoscaler`), for hosts that load libraries built then.
//!
//! abi_stable accepts a library whose prefix types have *more* fields than
//! the host expects, never fewer. Appending `create_decider` to
//! [`PluginMod`](crate::PluginMod) therefore made every library built
//! before it fail the current check. So a host checks a library against
//! the current root module, then against this one (then against 0.1), and
//! turns a library of this shape into a current root module with
//! [`PluginModRef::into_current`]: the same functions, and a
//! `create_decider` that says the library predates the kind. The field
//! types are the current ones (they did not change). Plugins never use
//! this module.

use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    package_version_strings,
    prefix_type::PrefixTypeTrait,
    sabi_types::VersionStrings,
    std_types::{RResult, RStr, RString},
    StableAbi,
};

use crate::abi::{
    self, AutoscalerBox, DeciderBox, FilterBox, LibraryInfo, LibraryInfoV2, PickerBox, PolicyKind,
    PolicyObject, PreemptionBox, SchedulerBox,
};

/// The root module of a library built before the decider kind. Parameter
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
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "blis_plugin";
    const NAME: &'static str = "blis_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

#[cfg_attr(blis_abi_before_decider, allow(dead_code))]
extern "C" fn predates_decider(
    _name: RStr<'_>,
    _params: RStr<'_>,
    _seed: u64,
) -> RResult<DeciderBox, RString> {
    RResult::RErr(RString::from(
        "the library was built before the decider kind existed; rebuild it against this blis-plugin-api",
    ))
}

impl PluginModRef {
    /// The same library as a current root module (leaked, once per loaded
    /// library): its own functions, and a `create_decider` that refuses.
    /// `None` if the library lacks one of the 0.2 functions, which the
    /// layout check already excludes.
    pub fn into_current(self) -> Option<abi::PluginModRef> {
        Some(
            abi::PluginMod {
                describe: self.describe(),
                create: self.create(),
                describe_v2: self.describe_v2()?,
                create_filter: self.create_filter()?,
                create_picker: self.create_picker()?,
                create_scheduler: self.create_scheduler()?,
                create_preemption: self.create_preemption()?,
                create_autoscaler: self.create_autoscaler()?,
                #[cfg(not(blis_abi_before_decider))]
                create_decider: predates_decider,
                #[cfg(not(any(blis_abi_before_decider, blis_abi_before_observer)))]
                create_observer: crate::abi_before_observer::predates_observer,
                #[cfg(not(any(
                    blis_abi_before_decider,
                    blis_abi_before_observer,
                    blis_abi_before_host
                )))]
                set_host: crate::abi_before_host::predates_host,
            }
            .leak_into_prefix(),
        )
    }
}

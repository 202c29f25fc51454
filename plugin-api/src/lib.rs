//! # blis-plugin-api — the only crate a blis plugin depends on
//!
//! blis loads its policies from shared libraries at run time. This crate is
//! the contract between the simulator and those libraries:
//!
//! * [`views`] — the `repr(C)` data a policy sees: the [`RequestView`] being
//!   decided, the [`ClusterView`] (one [`InstanceSnapshot`] per instance)
//!   and, since ABI 0.2, the [`ClusterState`] (the view, the candidates still
//!   in play, and one [`InstanceInfo`] per instance).
//! * The plain Rust traits an author implements: [`Admission`], [`Router`],
//!   [`Scorer`] (ABI 0.1), [`Filter`] and [`Picker`] (ABI 0.2, the parts of
//!   an llm-d scheduling profile), [`Scheduler`] and [`Preemption`] (an
//!   instance's queue order and victim choice), [`Autoscaler`] (the control
//!   plane's scaling decision), [`Decider`] (whether a request of a P/D
//!   run is disaggregated, given the [`PdView`]) and [`Observer`] (decides
//!   nothing: lifecycle events only), each with [`PolicyDef`] (name, docs,
//!   constructor, the lifecycle events it wants, see [`events`], and
//!   [`PolicyDef::on_run_end`], called once with the run's [`RunSummary`]).
//! * [`export_plugin!`] — turns a list of policy types into the library's root
//!   module; every call is wrapped so a panic becomes a reported error, never
//!   an abort of the simulator.
//! * [`Params`] — the policy's TOML parameter table, deserialised with serde;
//!   [`Rng`] — the seeded random generator a policy should use.
//! * [`log`] — a line on stderr prefixed with `[library::policy]`,
//!   rate-limited per policy; [`reason`] — the reason of an admission
//!   rejection or a filter's removals, recorded in the decision trace.
//! * The prefix-cache query (0.2): a policy that sets
//!   [`PolicyDef::PREFIX_QUERY`] reads [`ClusterState::prefix_blocks`] —
//!   how many leading blocks of the request's prompt each instance's KV
//!   cache holds, as of the run's `cache_signal_delay_us`.
//! * `testing` (feature `testing`) — views in one line and a short synthetic
//!   run to drive a policy in unit tests.
//! * [`abi`] — the `abi_stable` types the host and the library exchange; a
//!   golden test pins their layout. [`abi_v0_1`] keeps the 0.1 root module
//!   and traits so a host can load 0.1 libraries, [`abi_before_decider`]
//!   and [`abi_before_observer`] the 0.2 root module as it was before the
//!   decider and the observer kinds.
//!
//! ## ABI versions and how the ABI evolves
//!
//! The ABI version ([`ABI_VERSION`], printed by `blis --version` and
//! `blis plugins list`) is this crate's version: **0.2**. A plugin built
//! against any earlier 0.x minor **keeps loading and runs unchanged**; a
//! plugin whose types differ in layout is refused at load with a short
//! message saying which version to rebuild against.
//!
//! abi_stable checks every type's layout and version when a library is
//! loaded, and would refuse a 0.1 plugin in a 0.2 host twice over: it treats
//! a 0.x minor bump as incompatible, and a slice of a grown struct has a
//! different stride. So the rules are:
//!
//! 1. **Frozen once released.** Every type of a released version keeps its
//!    exact layout: the views (`RequestView`, `InstanceSnapshot`,
//!    `ClusterView`), `PolicyKind`, `PolicyObject`, `PolicyInfo`,
//!    `LibraryInfo`, `PolicyError`, and each trait's methods up to its
//!    `#[sabi(last_prefix_field)]`. A frozen copy of 0.1 lives in
//!    `tests/fixtures/plugin-api-0.1`, and a plugin built against it is run in
//!    the tests and must decide exactly as the same source built against the
//!    current crate.
//! 2. **Additions only, as prefix extensions.** New root-module functions go
//!    after the last field of [`PluginMod`]; new trait methods go after the
//!    last prefix method, *with a default body*. abi_stable accepts a
//!    library whose prefix types are *longer* than the host's (a newer
//!    plugin in an older host), never shorter, so the host keeps each
//!    released root module and trait set ([`abi_v0_1`] for 0.1,
//!    [`abi_before_decider`] for the 0.2 root module before `create_decider`
//!    was appended, [`abi_before_observer`] before `create_observer`) and
//!    checks a library against the current one, then against the older
//!    ones: the first that matches says which ABI the
//!    library speaks, and the host calls only what that ABI has. So every
//!    appended root-module function comes with the root module as it was
//!    before, and a test loads a library built then
//!    (`tests/fixtures/plugin-api-before-decider` compiles this crate's
//!    source with the cfg `blis_abi_before_decider`, which leaves
//!    `create_decider` out; `plugin-api-before-observer` with
//!    `blis_abi_before_observer`). A trait's vtable is a prefix type too,
//!    so no released trait gains a method: the end of the run reached every
//!    kind with events as a new event code ([`EventKind::RUN_END`]) through
//!    the `on_event` they already had. New data never grows a
//!    released struct: it comes in new structs, or new parallel slices
//!    ([`InstanceInfo`] beside the frozen `InstanceSnapshot`), passed to new
//!    methods ([`ClusterState`]).
//! 3. **Open-ended codes, not enums.** New policy kinds, lifecycle events and
//!    the like are codes ([`KindCode`], [`EventKind`], [`Hooks`] bits): a
//!    host ignores codes it does not know, so adding one breaks nobody.
//! 4. **A new kind = a new `create_<kind>` root-module function + a new
//!    `#[sabi_trait]` + a new [`KindCode`].** ABI 0.2 added `filter` (3),
//!    `picker` (4), `scheduler` (5), `preemption` (6), the P/D `decider`
//!    (7, `create_decider`, appended after `create_autoscaler`),
//!    `autoscaler` (8) and `observer` (9, `create_observer`, appended after
//!    `create_decider`) this way. A library built before a kind existed
//!    keeps loading (rule 2) and simply offers no policy of that kind.
//! 5. **The host learns what a library supports from its descriptor**
//!    ([`PluginMod::describe_v2`]): its ABI version, every policy with its
//!    kind code and the lifecycle events it handles. A policy without hooks
//!    is never called for an event, so it costs nothing per request.
//! 6. **abi_stable's version line.** abi_stable compares the crate version
//!    recorded in every type with cargo's semver rules, where 0.1 → 0.2 is a
//!    break. The build script therefore presents this crate to abi_stable as
//!    `0.1.<ABI minor>` (0.2 is `0.1.2`): the compatibility line 0.1 plus
//!    additions. A breaking change (which these rules exist to avoid) would
//!    start the next line, and abi_stable would then refuse every older
//!    plugin, with blis's short message.
//! 7. **The golden layout test** (`tests/abi_layout.txt`) changes only on
//!    purpose: additions show up as new entries after the frozen ones.
//!
//! A complete scorer plugin:
//!
//! ```
//! use blis_plugin_api::{export_plugin, ClusterView, Params, PolicyDef, RequestView, Scorer, Scores};
//!
//! /// Prefers instances with more free KV blocks.
//! pub struct FreeBlocks;
//!
//! impl PolicyDef for FreeBlocks {
//!     const NAME: &'static str = "free-blocks";
//!     const SUMMARY: &'static str = "score = free KV blocks / most free KV blocks";
//!     fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
//!         params.expect_none()?;
//!         Ok(FreeBlocks)
//!     }
//! }
//!
//! impl Scorer for FreeBlocks {
//!     fn score(&mut self, _req: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
//!         let most = cluster.instances().iter().map(|s| s.free_kv_blocks).max().unwrap_or(0).max(1);
//!         for s in cluster.instances() {
//!             scores.push(s.free_kv_blocks as f64 / most as f64);
//!         }
//!     }
//! }
//!
//! export_plugin! {
//!     library: "free-blocks-plugin",
//!     admission: [],
//!     routers: [],
//!     scorers: [FreeBlocks],
//! }
//! ```
//!
//! Build it with `crate-type = ["cdylib"]` and pass the `.so` to
//! `blis run --plugin PATH`.

#![deny(missing_docs)]

// `#[sabi_trait]` expands to impl blocks inside constants.
#[allow(non_local_definitions)]
pub mod abi;
#[allow(non_local_definitions)]
pub mod abi_before_decider;
#[cfg(not(any(
    blis_abi_before_decider,
    blis_abi_before_observer,
    blis_abi_before_host
)))]
#[allow(non_local_definitions)]
pub mod abi_before_host;
#[allow(non_local_definitions)]
pub mod abi_before_observer;
#[allow(non_local_definitions)]
pub mod abi_v0_1;
mod author;
pub mod events;
pub mod headers;
pub mod host;
mod log;
pub mod lora;
mod params;
mod rng;
pub mod session;
#[cfg(feature = "testing")]
pub mod testing;
pub mod views;

pub use abi_stable;
pub use abi_stable::std_types::RVec;
/// serde, re-exported so a plugin's only dependency is this crate: write
/// `#[derive(serde::Deserialize)] #[serde(crate = "blis_plugin_api::serde")]`
/// after `use blis_plugin_api::serde;`.
pub use serde;

pub use abi::{
    AbiVersion, AdmissionBox, AutoscalerBox, DeciderBox, FilterBox, Hooks, KindCode, LibraryInfo,
    LibraryInfoV2, ObserverBox, PickerBox, PluginMod, PluginModRef, PolicyError, PolicyInfo,
    PolicyInfoV2, PolicyKind, PolicyObject, PreemptionBox, RouterBox, SchedulerBox, ScorerBox,
    ABI_0_1, ABI_VERSION,
};
#[doc(hidden)]
pub use author::__private;
pub use author::{
    Admission, Autoscaler, Decider, Filter, Kept, Observer, Picker, PolicyDef, Preemption, Router,
    Scheduler, Scorer, Scores,
};
pub use events::{EventKind, RequestEvent, RunSummary};
pub use log::{log, reason, LOG_LINES_PER_POLICY};
pub use params::{check_params_doc, param_keys, Params};
pub use rng::Rng;
pub use views::{
    ClusterState, ClusterView, InstanceInfo, InstanceSnapshot, InstanceState, PdView, RequestView,
    RunningRequest, SloClass,
};

/// The symbol under which a library exports its root module (abi_stable's
/// loader name; checked against abi_stable in a test).
#[doc(hidden)]
pub const ROOT_MODULE_SYMBOL: &str = "_1as_0lib_1header_0root_bmodule_bloader";

/// Export a plugin library: its name and the policy types it offers.
///
/// ```text
/// export_plugin! {
///     library: "my-policies",
///     admission: [MyAdmission],
///     routers: [MyRouter],
///     scorers: [MyScorer, MyOtherScorer],
/// }
/// ```
///
/// The 0.2 kinds follow as optional lists, in this order (leave out the
/// ones you do not use): `filters`, `pickers`, `schedulers`, `preemption`,
/// `autoscalers`, `deciders`, `observers`.
///
/// Generates `pub fn blis_plugin_module() -> PluginModRef` (used when the
/// library is linked in as a Rust crate) and the exported root module the
/// simulator finds when it loads the `.so`. Invoke it once, at the crate root.
#[macro_export]
macro_rules! export_plugin {
    (
        library: $lib:expr,
        admission: [$($adm:ty),* $(,)?],
        routers: [$($rt:ty),* $(,)?],
        scorers: [$($sc:ty),* $(,)?]
        $(, filters: [$($fl:ty),* $(,)?])?
        $(, pickers: [$($pk:ty),* $(,)?])?
        $(, schedulers: [$($sch:ty),* $(,)?])?
        $(, preemption: [$($pre:ty),* $(,)?])?
        $(, autoscalers: [$($aut:ty),* $(,)?])?
        $(, deciders: [$($dec:ty),* $(,)?])?
        $(, observers: [$($obs:ty),* $(,)?])?
        $(,)?
    ) => {
        // A panic inside a policy must unwind to the adapter's catch_unwind;
        // with panic = "abort" it would kill the simulator without a word.
        #[cfg(panic = "abort")]
        compile_error!(
            "blis plugins must be built with panic = \"unwind\" (the default): blis-plugin-api \
             catches a panic inside a policy and blis reports it as an error naming the plugin, \
             but with panic = \"abort\" a panic kills the whole simulator with SIGABRT and no \
             message. Remove `panic = \"abort\"` from your Cargo.toml profile."
        );

        extern "C" fn __blis_describe() -> $crate::LibraryInfo {
            $crate::__private::set_library($lib);
            #[allow(unused_mut)]
            let mut policies = $crate::__private::RVec::new();
            $( policies.push($crate::__private::info::<$adm>($crate::PolicyKind::Admission)); )*
            $( policies.push($crate::__private::info::<$rt>($crate::PolicyKind::Router)); )*
            $( policies.push($crate::__private::info::<$sc>($crate::PolicyKind::Scorer)); )*
            $crate::LibraryInfo {
                name: ::core::convert::Into::into($lib),
                version: ::core::convert::Into::into(env!("CARGO_PKG_VERSION")),
                policies,
            }
        }

        extern "C" fn __blis_describe_v2() -> $crate::__private::LibraryInfoV2 {
            $crate::__private::set_library($lib);
            #[allow(unused_mut)]
            let mut policies = $crate::__private::RVec::new();
            $( policies.push($crate::__private::info_v2::<$adm>($crate::KindCode::ADMISSION)); )*
            $( policies.push($crate::__private::info_v2::<$rt>($crate::KindCode::ROUTER)); )*
            $( policies.push($crate::__private::info_v2::<$sc>($crate::KindCode::SCORER)); )*
            $($( policies.push($crate::__private::info_v2::<$fl>($crate::KindCode::FILTER)); )*)?
            $($( policies.push($crate::__private::info_v2::<$pk>($crate::KindCode::PICKER)); )*)?
            $($( policies.push($crate::__private::info_v2::<$sch>($crate::KindCode::SCHEDULER)); )*)?
            $($( policies.push($crate::__private::info_v2::<$pre>($crate::KindCode::PREEMPTION)); )*)?
            $($( policies.push($crate::__private::info_v2::<$aut>($crate::KindCode::AUTOSCALER)); )*)?
            $($( policies.push($crate::__private::info_v2::<$dec>($crate::KindCode::DECIDER)); )*)?
            $($( policies.push($crate::__private::info_v2::<$obs>($crate::KindCode::OBSERVER)); )*)?
            $crate::__private::LibraryInfoV2 {
                abi: $crate::__private::ABI_VERSION,
                policies,
            }
        }

        extern "C" fn __blis_create(
            kind: $crate::PolicyKind,
            name: $crate::__private::RStr<'_>,
            params: $crate::__private::RStr<'_>,
            seed: u64,
        ) -> $crate::__private::RResult<$crate::PolicyObject, $crate::__private::RString> {
            $crate::__private::guard_create(|| {
                match kind {
                    $crate::PolicyKind::Admission => {
                        $( if name.as_str() == <$adm as $crate::PolicyDef>::NAME {
                            return $crate::__private::create_admission::<$adm>(params, seed);
                        } )*
                    }
                    $crate::PolicyKind::Router => {
                        $( if name.as_str() == <$rt as $crate::PolicyDef>::NAME {
                            return $crate::__private::create_router::<$rt>(params, seed);
                        } )*
                    }
                    $crate::PolicyKind::Scorer => {
                        $( if name.as_str() == <$sc as $crate::PolicyDef>::NAME {
                            return $crate::__private::create_scorer::<$sc>(params, seed);
                        } )*
                    }
                }
                $crate::__private::unknown(kind, name)
            })
        }

        $crate::__blis_create_v2!(__blis_create_filter, FilterBox, create_filter, FILTER,
            [$($($fl),*)?]);
        $crate::__blis_create_v2!(__blis_create_picker, PickerBox, create_picker, PICKER,
            [$($($pk),*)?]);
        $crate::__blis_create_v2!(__blis_create_scheduler, SchedulerBox, create_scheduler,
            SCHEDULER, [$($($sch),*)?]);
        $crate::__blis_create_v2!(__blis_create_preemption, PreemptionBox, create_preemption,
            PREEMPTION, [$($($pre),*)?]);
        $crate::__blis_create_v2!(__blis_create_autoscaler, AutoscalerBox, create_autoscaler,
            AUTOSCALER, [$($($aut),*)?]);
        $crate::__blis_create_v2!(__blis_create_decider, DeciderBox, create_decider, DECIDER,
            [$($($dec),*)?]);
        $crate::__blis_create_v2!(__blis_create_observer, ObserverBox, create_observer, OBSERVER,
            [$($($obs),*)?]);

        /// The library's root module (for hosts that link this crate directly).
        pub fn blis_plugin_module() -> $crate::PluginModRef {
            $crate::__private::root_module($crate::__private::RootFunctions {
                describe: __blis_describe,
                create: __blis_create,
                describe_v2: __blis_describe_v2,
                create_filter: __blis_create_filter,
                create_picker: __blis_create_picker,
                create_scheduler: __blis_create_scheduler,
                create_preemption: __blis_create_preemption,
                create_autoscaler: __blis_create_autoscaler,
                create_decider: __blis_create_decider,
                create_observer: __blis_create_observer,
            })
        }

        #[doc(hidden)]
        #[export_name = "_1as_0lib_1header_0root_bmodule_bloader"]
        pub static __BLIS_ROOT_MODULE: $crate::__private::LibHeader = {
            extern "C" fn erased() -> $crate::__private::RootModuleResult {
                $crate::__private::__call_root_module_loader(blis_plugin_module)
            }
            // SAFETY: `erased` returns the prefix reference of a `PluginModRef`.
            unsafe {
                $crate::__private::LibHeader::from_constructor::<$crate::PluginModRef>(
                    erased,
                    $crate::__private::CheckTypeLayout::Yes,
                )
            }
        };
    };
}

/// One `create_<kind>` root-module function of [`export_plugin!`] for an
/// ABI 0.2 kind: finds the policy type of that kind by name and creates it.
/// The functions differ only in the kind, so one macro writes them all and
/// a new kind is one line in `export_plugin!`.
#[doc(hidden)]
#[macro_export]
macro_rules! __blis_create_v2 {
    ($fn_name:ident, $boxed:ident, $create:ident, $kind:ident, [$($policy:ty),*]) => {
        extern "C" fn $fn_name(
            name: $crate::__private::RStr<'_>,
            params: $crate::__private::RStr<'_>,
            seed: u64,
        ) -> $crate::__private::RResult<$crate::$boxed, $crate::__private::RString> {
            $crate::__private::guard_create_v2(|| {
                $( if name.as_str() == <$policy as $crate::PolicyDef>::NAME {
                    return $crate::__private::$create::<$policy>(params, seed);
                } )*
                let _ = (params, seed);
                $crate::__private::unknown_v2($crate::KindCode::$kind, name)
            })
        }
    };
}

#[cfg(test)]
mod tests {
    /// build.rs presents the crate to abi_stable as `0.1.<ABI minor>`.
    #[test]
    fn abi_stable_line_version_follows_the_abi_version() {
        assert_eq!(super::ABI_VERSION.major, 0);
        assert_eq!(
            env!("BLIS_ABI_LINE_VERSION"),
            format!("0.1.{}", super::ABI_VERSION.minor)
        );
        assert_eq!(
            <super::PluginModRef as abi_stable::library::RootModule>::VERSION_STRINGS.version,
            env!("BLIS_ABI_LINE_VERSION")
        );
    }

    #[test]
    fn root_module_symbol_matches_abi_stable() {
        assert_eq!(
            super::ROOT_MODULE_SYMBOL,
            abi_stable::library::ROOT_MODULE_LOADER_NAME
        );
    }
}

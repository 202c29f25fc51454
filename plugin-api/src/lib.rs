//! # blis-plugin-api — the only crate a blis plugin depends on
//!
//! blis loads admission policies, routing policies and routing scorers from
//! shared libraries at run time. This crate is the contract between the
//! simulator and those libraries:
//!
//! * [`views`] — the `repr(C)` data a policy sees: the [`RequestView`] being
//!   decided and the [`ClusterView`] (one [`InstanceSnapshot`] per instance).
//! * [`Admission`], [`Router`], [`Scorer`] and [`PolicyDef`] — the plain Rust
//!   traits an author implements.
//! * [`export_plugin!`] — turns a list of policy types into the library's root
//!   module; every call is wrapped so a panic becomes a reported error, never
//!   an abort of the simulator.
//! * [`Params`] — the policy's TOML parameter table, deserialised with serde.
//! * [`abi`] — the `abi_stable` types the host and the library exchange. The
//!   ABI version is this crate's version; a golden test pins its layout.
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
mod author;
mod params;
pub mod views;

pub use abi_stable;
pub use abi_stable::std_types::RVec;
/// serde, re-exported so a plugin's only dependency is this crate: write
/// `#[derive(serde::Deserialize)] #[serde(crate = "blis_plugin_api::serde")]`
/// after `use blis_plugin_api::serde;`.
pub use serde;

pub use abi::{
    AdmissionBox, LibraryInfo, PluginMod, PluginModRef, PolicyError, PolicyInfo, PolicyKind,
    PolicyObject, RouterBox, ScorerBox,
};
#[doc(hidden)]
pub use author::__private;
pub use author::{Admission, PolicyDef, Router, Scorer, Scores};
pub use params::Params;
pub use views::{ClusterView, InstanceSnapshot, RequestView, SloClass};

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
/// Generates `pub fn blis_plugin_module() -> PluginModRef` (used when the
/// library is linked in as a Rust crate) and the exported root module the
/// simulator finds when it loads the `.so`. Invoke it once, at the crate root.
#[macro_export]
macro_rules! export_plugin {
    (
        library: $lib:expr,
        admission: [$($adm:ty),* $(,)?],
        routers: [$($rt:ty),* $(,)?],
        scorers: [$($sc:ty),* $(,)?] $(,)?
    ) => {
        extern "C" fn __blis_describe() -> $crate::LibraryInfo {
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

        /// The library's root module (for hosts that link this crate directly).
        pub fn blis_plugin_module() -> $crate::PluginModRef {
            use $crate::__private::PrefixTypeTrait;
            $crate::PluginMod {
                describe: __blis_describe,
                create: __blis_create,
            }
            .leak_into_prefix()
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

#[cfg(test)]
mod tests {
    #[test]
    fn root_module_symbol_matches_abi_stable() {
        assert_eq!(
            super::ROOT_MODULE_SYMBOL,
            abi_stable::library::ROOT_MODULE_LOADER_NAME
        );
    }
}

//! Plugin libraries: loading them, the policy registry, and the host side of
//! every policy call.
//!
//! A library is either *embedded* (the standard library `blis-std`, linked in
//! as a Rust crate so a bare `blis run` needs no files) or *loaded* from a
//! shared library with `lib_header_from_path` + `init_root_module` (never
//! `RootModule::load_from_file`, which caches the first library it loaded and
//! would hand it back for every later path). Both are used through the same
//! root module and the same ABI types.
//!
//! Everything a plugin returns is validated here ([`policy`]): a panic, a
//! NaN or infinite score, a wrong number of scores or an out-of-range
//! routing target is an error naming the plugin, never silently clamped.

mod error;
pub mod host_queries;
// Load-time errors are built once per run; their size does not matter.
#[allow(clippy::result_large_err)]
mod loader;
pub mod policy;
#[allow(clippy::result_large_err)]
pub mod registry;
#[cfg(feature = "wasm")]
#[allow(clippy::result_large_err)]
pub mod wasm;

pub use error::PluginError;
pub use policy::{
    AdmissionPolicy, AutoscalerPolicy, DeciderPolicy, FilterPolicy, ObserverPolicy, PickerPolicy,
    PolicyLabel, PreemptionPolicy, RouterPolicy, SchedulerPolicy, ScorerPolicy,
};
pub use registry::{LibraryEntry, Origin, Registry, WasmLimitsSpec};

//! Errors about plugins, each a short paragraph a user can act on.

use std::path::PathBuf;

/// Something went wrong with a plugin library or a policy call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// The file given with `--plugin` or `[[plugins]]` does not exist.
    #[error("plugin file not found: {path}\n  Check the path given with --plugin or in [[plugins]] (relative paths are relative to the current directory on the command line, and to the run file's folder in a run file).")]
    NotFound { path: PathBuf },

    /// The file exists but cannot be opened as a shared library.
    #[error("cannot load plugin {path}: it is not a loadable shared library.\n  Expected: a .so built from a crate with crate-type = [\"cdylib\"] that depends on blis-plugin-api.\n  Found: {detail}")]
    NotSharedLibrary { path: PathBuf, detail: String },

    /// A shared library without a blis root module.
    #[error("cannot load plugin {path}: it is a shared library but not a blis plugin.\n  Expected: an exported blis plugin root module ({expected}).\n  Found: {found}.\n  Build the library with `blis_plugin_api::export_plugin! {{ ... }}` at its crate root.")]
    NotAPlugin {
        path: PathBuf,
        expected: String,
        found: String,
    },

    /// A blis plugin built against an incompatible plugin API.
    #[error("cannot load plugin {path}: it was built against an incompatible blis plugin ABI.\n  Expected: blis-plugin-api {expected}.\n  Found: {found}.\n  Rebuild the plugin against blis-plugin-api {expected} (the version this blis was built with).")]
    IncompatibleAbi {
        path: PathBuf,
        expected: String,
        found: String,
    },

    /// The library's root module failed to initialise.
    #[error("cannot load plugin {path}: its initialisation failed: {detail}")]
    InitFailed { path: PathBuf, detail: String },

    /// A library declares something blis cannot honour (e.g. hooks on a
    /// kind that never receives events).
    #[error("cannot load plugin {path}: {detail}")]
    BadDeclaration { path: PathBuf, detail: String },

    /// No loaded library offers a policy of that kind and name.
    #[error("unknown {kind} policy '{name}'{suggestion}.\n  Available {kind} policies: {available}.\n  Load more with --plugin PATH (see `blis plugins list`).")]
    UnknownPolicy {
        kind: &'static str,
        name: String,
        suggestion: String,
        available: String,
    },

    /// Two libraries offer the same (kind, name) and the name was not qualified.
    #[error("{kind} policy '{name}' is offered by two libraries: {first} and {second}.\n  Say which one with `library::policy`, e.g. '{first_lib}::{name}' or '{second_lib}::{name}'.")]
    Ambiguous {
        kind: &'static str,
        name: String,
        first: String,
        second: String,
        first_lib: String,
        second_lib: String,
    },

    /// The library refused to create the policy (bad parameters, usually).
    #[error("plugin {library}: cannot create {kind} '{name}': {message}")]
    Create {
        library: String,
        kind: &'static str,
        name: String,
        message: String,
    },

    /// A policy panicked during a call (caught on the plugin side).
    #[error(
        "plugin {library}: {kind} '{name}' panicked in {call} for request {request}: {message}"
    )]
    Panicked {
        library: String,
        kind: &'static str,
        name: String,
        call: &'static str,
        request: u64,
        message: String,
    },

    /// A WebAssembly policy trapped during a call: out of fuel, over its
    /// memory cap, a panic or an uncaught exception, or another trap.
    #[error(
        "plugin {library}: {kind} '{name}' trapped in {call} for request {request}: {message}"
    )]
    Trapped {
        library: String,
        kind: &'static str,
        name: String,
        call: &'static str,
        request: u64,
        message: String,
    },

    /// A file that should be a blis WebAssembly component is not one.
    #[error("cannot load plugin {path}: it is not a blis WebAssembly component.\n  Expected: a component of the world blis:plugin/plugin@0.1.x (wit/blis-plugin.wit in the blis repository; README: WebAssembly plugins).\n  Found: {detail}")]
    NotAComponent { path: PathBuf, detail: String },

    /// The operating system refused something compiling a component needs
    /// (memory, a memfd and its seals, a file), after retries: not a fault
    /// of the plugin.
    #[error("cannot load plugin {path}: the operating system refused a resource that compiling it needs ({attempts} attempts): {detail}.\n  This is not a fault of the plugin. Check free memory and the process limits (`ulimit -a`: address space, open files, locked memory), then run again.")]
    SystemRefused {
        path: PathBuf,
        attempts: u32,
        detail: String,
    },

    /// A policy called inside an instance failed (the message names it).
    #[error("{message}")]
    InInstance { message: String },

    /// A policy returned something the host cannot use.
    #[error("plugin {library}: {kind} '{name}' {problem} (in {call} for request {request}).")]
    BadOutput {
        library: String,
        kind: &'static str,
        name: String,
        call: &'static str,
        request: u64,
        problem: String,
    },
}

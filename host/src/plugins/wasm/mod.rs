//! WebAssembly component plugins (`[[plugins]] path = "x.wasm"`, feature
//! `wasm`): the sibling of the abi_stable loader. A component of the world
//! `blis:plugin/plugin@0.1.2` (`wit/blis-plugin.wit`; components built
//! against 0.1.0 and 0.1.1 load too) is validated and
//! compiled once per process (cached by SHA-256, so a sweep's runs share
//! it), described once, and each policy created from it gets a store and
//! an instance of its own, wrapped in the same ABI policy objects a native
//! library returns — so the registry and the host-side handles
//! (`plugins::policy`) treat both alike.
//!
//! Every call gets a fresh fuel budget (`fuel_per_call`) and runs under the
//! store's memory cap (`max_memory_mib`); a trap, running out of fuel or
//! the cap is an error naming the library, policy, call and request.

mod lower;
mod policy;
mod sandbox;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use blis_plugin_api::{Hooks, KindCode};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, Store};

pub(super) use policy::WasmPolicy;
use sandbox::HostState;

use super::PluginError;

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit/blis-plugin.wit",
        world: "plugin",
    });
}

/// The version of the WIT package this host implements (it also loads
/// components built against every earlier 0.1.x: wasmtime matches names
/// semver-compatibly, and each version only adds interfaces).
pub const WIT_PACKAGE: &str = "blis:plugin@0.1.2";

/// The name of the interface a component exports.
const POLICY_INTERFACE: &str = "blis:plugin/policy@0.1.2";

/// Per-library limits, from `[[plugins]]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WasmLimits {
    /// Fuel (about one unit per WebAssembly instruction) of every call.
    pub fuel_per_call: u64,
    /// The most linear memory a policy's instance may have, bytes.
    pub max_memory_bytes: usize,
}

/// Default `fuel_per_call`: far above what a policy decision needs (a
/// Python scorer over 64 instances takes a few million), and an endless
/// loop stops within about a second.
pub const DEFAULT_FUEL_PER_CALL: u64 = 1_000_000_000;
/// Default `max_memory_mib`.
pub const DEFAULT_MAX_MEMORY_MIB: u64 = 512;

impl Default for WasmLimits {
    fn default() -> Self {
        WasmLimits {
            fuel_per_call: DEFAULT_FUEL_PER_CALL,
            max_memory_bytes: (DEFAULT_MAX_MEMORY_MIB as usize) << 20,
        }
    }
}

/// One policy a component describes.
#[derive(Clone, Debug)]
pub(super) struct WasmPolicyInfo {
    pub kind: KindCode,
    pub name: String,
    pub summary: String,
    pub params_doc: String,
    pub hooks: Hooks,
    pub uses_state: bool,
    pub prefix_query: bool,
}

/// A loaded component: compiled, linked, described.
pub(super) struct WasmLibrary {
    pub name: String,
    pub version: String,
    /// The WIT package the component was built against
    /// (`blis:plugin@0.1.x`, from the version of its `policy` export).
    pub wit_package: String,
    pub policies: Vec<WasmPolicyInfo>,
    component: Component,
    linker: Arc<Linker<HostState>>,
}

/// The process's engine: Cranelift with fuel metering.
fn engine() -> Result<&'static Engine, String> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut config = Config::new();
            config.consume_fuel(true);
            config.wasm_component_model(true);
            Engine::new(&config).map_err(|e| format!("{e:#}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Compiled components by SHA-256 of their bytes (compilation is the
/// expensive step: a sweep's runs share it), in memory for the process and
/// on disk across processes ([`disk_cache`]).
fn compiled(bytes: &[u8], sha256: &str) -> Result<Component, String> {
    static CACHE: OnceLock<Mutex<HashMap<String, Component>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(c) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(sha256) {
        return Ok(c.clone());
    }
    let engine = engine()?;
    let cached = disk_cache().map(|d| d.join(format!("{sha256}-{}.cwasm", engine_tag(engine))));
    // SAFETY: `deserialize_file` runs the machine code in the file: only
    // files this function wrote (from a component whose hash names the
    // file, by this wasmtime with this configuration — wasmtime checks the
    // version and settings recorded in the file) are read, from the
    // user's own cache folder.
    let from_disk = cached
        .as_ref()
        .filter(|p| p.exists())
        .and_then(|p| unsafe { Component::deserialize_file(engine, p) }.ok());
    let component = match from_disk {
        Some(c) => c,
        None => {
            let c = Component::new(engine, bytes).map_err(|e| format!("{e:#}"))?;
            if let Some(path) = &cached {
                // A cache that cannot be written only costs the next run
                // the compilation again.
                if let Ok(code) = c.serialize() {
                    let _ = std::fs::create_dir_all(path.parent().unwrap_or(path))
                        .map_err(|e| e.to_string())
                        .and_then(|()| crate::output::write_atomic(path, &code));
                }
            }
            c
        }
    };
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(sha256.to_string(), component.clone());
    Ok(component)
}

/// The folder of compiled components: `BLIS_WASM_CACHE`, or
/// `$XDG_CACHE_HOME/blis/wasm`, or `~/.cache/blis/wasm`; none with
/// `BLIS_WASM_CACHE=off` (or without a home folder).
fn disk_cache() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    match std::env::var_os("BLIS_WASM_CACHE") {
        Some(v) if v == "off" || v.is_empty() => None,
        Some(v) => Some(PathBuf::from(v)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|c| c.join("blis").join("wasm")),
    }
}

/// A short tag of the engine's compatibility (wasmtime version and
/// settings), so two blis builds never share a cached file.
fn engine_tag(engine: &Engine) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("{:016x}", h.finish())
}

fn linker() -> Result<Arc<Linker<HostState>>, String> {
    static LINKER: OnceLock<Result<Arc<Linker<HostState>>, String>> = OnceLock::new();
    LINKER
        .get_or_init(|| {
            let mut linker = Linker::new(engine()?);
            bindings::Plugin::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
                .map_err(|e| format!("{e:#}"))?;
            wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| format!("{e:#}"))?;
            Ok(Arc::new(linker))
        })
        .as_ref()
        .map(Arc::clone)
        .map_err(Clone::clone)
}

/// The first line of an error chain, without wasmtime's backtrace.
fn short(e: &wasmtime::Error) -> String {
    let text = format!("{e:#}");
    let line = text.lines().next().unwrap_or("").trim();
    let mut s = line.to_string();
    if s.len() > 300 {
        let cut = s.char_indices().take(300).last().map_or(0, |(i, _)| i);
        s.truncate(cut);
        s.push('…');
    }
    s
}

impl WasmLibrary {
    /// Load, compile and describe the component at `path` (with the
    /// default limits for the description call).
    pub fn load(path: &Path, bytes: &[u8], sha256: &str) -> Result<WasmLibrary, PluginError> {
        let not_component = |detail: String| PluginError::NotAComponent {
            path: path.to_path_buf(),
            detail,
        };
        if !bytes.starts_with(b"\0asm") {
            return Err(not_component(
                "the file does not start with the WebAssembly magic bytes".into(),
            ));
        }
        // A core module has version 1 (bytes 4..8 = 01 00 00 00); a
        // component has its own layer code.
        if bytes.get(4..8) == Some(&[1, 0, 0, 0]) {
            return Err(not_component(
                "a core WebAssembly module, not a component (turn it into one with \
                 `wasm-tools component embed WIT --world plugin M.wasm -o E.wasm && \
                 wasm-tools component new E.wasm -o C.wasm`)"
                    .into(),
            ));
        }
        let component = compiled(bytes, sha256).map_err(not_component)?;
        let linker = linker().map_err(|e| PluginError::InitFailed {
            path: path.to_path_buf(),
            detail: e,
        })?;
        let init = |detail: String| PluginError::InitFailed {
            path: path.to_path_buf(),
            detail,
        };
        let limits = WasmLimits::default();
        let mut store = new_store(&component, "plugin (describe)".into(), limits, 0);
        let plugin = bindings::Plugin::instantiate(&mut store, &component, &linker)
            .map_err(|e| instantiate_error(path, &e))?;
        store
            .set_fuel(limits.fuel_per_call)
            .map_err(|e| init(short(&e)))?;
        let info = plugin
            .blis_plugin_policy()
            .call_describe(&mut store)
            .map_err(|e| init(format!("describe failed: {}", short(&e))))?;
        let policies = info
            .policies
            .into_iter()
            .filter(|p| KindCode(p.kind).name() != "unknown")
            .map(|p| WasmPolicyInfo {
                kind: KindCode(p.kind),
                name: p.name,
                summary: p.summary,
                params_doc: p.params_doc,
                hooks: Hooks(p.hooks),
                uses_state: p.uses_state,
                prefix_query: p.prefix_query,
            })
            .collect();
        let engine = component.engine();
        let wit_package = component
            .component_type()
            .exports(engine)
            .find_map(|(n, _)| n.strip_prefix("blis:plugin/policy@").map(str::to_string))
            .map_or_else(|| WIT_PACKAGE.to_string(), |v| format!("blis:plugin@{v}"));
        Ok(WasmLibrary {
            name: info.name,
            version: info.version,
            wit_package,
            policies,
            component,
            linker,
        })
    }

    /// Create policy `name` of `kind`: a store and an instance of its own.
    pub fn create(
        &self,
        kind: KindCode,
        name: &str,
        params_toml: &str,
        seed: u64,
        limits: WasmLimits,
    ) -> Result<WasmPolicy, String> {
        let who = format!("plugin {}: {} '{}'", self.name, kind.name(), name);
        let mut store = new_store(&self.component, who, limits, seed);
        let instance = self
            .linker
            .instantiate(&mut store, &self.component)
            .map_err(|e| format!("cannot instantiate the component: {}", short(&e)))?;
        let plugin = bindings::Plugin::new(&mut store, &instance)
            .map_err(|e| format!("cannot instantiate the component: {}", short(&e)))?;
        let calls = lower::ViewCalls::new(&mut store, &instance)
            .map_err(|e| format!("cannot instantiate the component: {}", short(&e)))?;
        store
            .set_fuel(limits.fuel_per_call)
            .map_err(|e| short(&e))?;
        let created =
            plugin
                .blis_plugin_policy()
                .call_create(&mut store, kind.0, name, params_toml, seed);
        match created {
            Ok(Ok(handle)) => Ok(WasmPolicy::new(store, plugin, calls, handle, limits)),
            Ok(Err(message)) => Err(message),
            Err(e) => Err(policy::trap_message(&e, &store, limits)),
        }
    }
}

fn new_store(
    component: &Component,
    who: String,
    limits: WasmLimits,
    seed: u64,
) -> Store<HostState> {
    let engine = component.engine();
    let mut store = Store::new(engine, HostState::new(who, limits.max_memory_bytes, seed));
    store.limiter(|s| &mut s.limiter);
    store
}

/// An instantiation failure: an import blis does not offer, or a missing
/// or different `policy` export.
fn instantiate_error(path: &Path, e: &wasmtime::Error) -> PluginError {
    PluginError::NotAComponent {
        path: path.to_path_buf(),
        detail: format!(
            "{} (a blis component exports blis:plugin/policy@0.1.x and may import only \
             blis:plugin/host@0.1.x, blis:plugin/lora@0.1.x, blis:plugin/request@0.1.2 and WASI 0.2)",
            short(e)
        ),
    }
}

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
use std::path::{Path, PathBuf};
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

/// Under an address-space limit: address space reserved for a linear
/// memory beyond what it uses (and the slack kept when it grows past that
/// and moves).
const MEMORY_RESERVATION: u64 = 64 << 20;

/// Whether the process runs under an address-space limit (`ulimit -v`).
fn address_space_limited() -> bool {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } == 0;
    ok && r.rlim_cur != libc::RLIM_INFINITY
}

/// The process's engine: Cranelift with fuel metering.
fn engine() -> Result<&'static Engine, String> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut config = Config::new();
            config.consume_fuel(true);
            config.wasm_component_model(true);
            // Under an address-space limit (ulimit -v), each linear
            // memory reserves what it uses, room to grow and a small guard
            // — not wasmtime's 4 GiB + 32 MiB (and 2 GiB more on growth),
            // with which a few policies exhaust an 8 GB limit — and the
            // compiled code checks bounds explicitly (about 12 % slower on
            // examples/bench's WebAssembly scenario). Without a limit the
            // reservation costs nothing real (untouched, unbacked address
            // space) and its guard pages spare the checks. The memory cap
            // itself is the store's limiter either way; results are the same.
            if address_space_limited() {
                config.memory_reservation(MEMORY_RESERVATION);
                config.memory_guard_size(64 << 10);
                config.memory_reservation_for_growth(MEMORY_RESERVATION);
            }
            Engine::new(&config).map_err(|e| format!("{e:#}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Compiled components by SHA-256 of their bytes (compilation is the
/// expensive step: a sweep's runs share it), in memory for the process and
/// on disk across processes ([`disk_cache`]).
fn compiled(bytes: &[u8], sha256: &str) -> Result<Component, CompileError> {
    static CACHE: OnceLock<Mutex<HashMap<String, Component>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(c) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(sha256) {
        return Ok(c.clone());
    }
    let engine = engine().map_err(CompileError::Invalid)?;
    let disk = disk_cache();
    let tag = engine_tag(engine);
    let from_disk = disk.as_ref().and_then(|d| d.load(engine, sha256, &tag));
    let component = match from_disk {
        Some(c) => c,
        None => {
            let c = retry_refusals(|| Component::new(engine, bytes))?;
            if let (Some(d), Ok(code)) = (&disk, c.serialize()) {
                // A cache that cannot be written only costs the next run
                // the compilation again.
                d.store(sha256, &tag, &code);
            }
            c
        }
    };
    // The copy-on-write images of the linear memories (a sealed memfd
    // each on Linux) are made here rather than at the first instantiation,
    // where wasmtime makes them otherwise: a refusal by the kernel is then
    // retried and reported as the system's, not as an instantiation error.
    retry_refusals(|| component.initialize_copy_on_write_image())?;
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(sha256.to_string(), component.clone());
    Ok(component)
}

/// Why a component did not compile.
#[derive(Debug)]
enum CompileError {
    /// The bytes are not a valid component (or the engine cannot be made).
    Invalid(String),
    /// The operating system refused a resource (an I/O error in the
    /// cause chain, e.g. sealing the memfd of a memory image) on every
    /// attempt.
    System { attempts: u32, detail: String },
}

/// Attempts at compiling a component the operating system refuses
/// resources for, before giving up.
const COMPILE_ATTEMPTS: u32 = 3;

/// `attempt()`, again (after 0.1 s, then 0.2 s) while it fails with an
/// I/O error in its cause chain: a refusal such as "cannot add seals to the
/// memfd: Device or resource busy" is transient and says nothing about the
/// plugin, so it is neither reported as an invalid component nor final at
/// the first attempt. Any other failure is [`CompileError::Invalid`] at once.
fn retry_refusals<T>(mut attempt: impl FnMut() -> wasmtime::Result<T>) -> Result<T, CompileError> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let e = match attempt() {
            Ok(c) => return Ok(c),
            Err(e) => e,
        };
        let detail = format!("{e:#}");
        if !e
            .chain()
            .any(|c| c.downcast_ref::<std::io::Error>().is_some())
        {
            return Err(CompileError::Invalid(detail));
        }
        if attempts == COMPILE_ATTEMPTS {
            return Err(CompileError::System { attempts, detail });
        }
        std::thread::sleep(std::time::Duration::from_millis(100 << (attempts - 1)));
    }
}

/// The folder of compiled components: `BLIS_WASM_CACHE`, or
/// `$XDG_CACHE_HOME/blis/wasm`, or `~/.cache/blis/wasm`; none with
/// `BLIS_WASM_CACHE=off` (or without a home folder).
fn cache_folder() -> Option<PathBuf> {
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

/// The on-disk cache of compiled components, and its trust model. A
/// compiled component is machine code blis runs outside the sandbox, so a
/// file is run only if blis wrote it: each `.cwasm` has a `.mac` beside it,
/// an HMAC-SHA-256 (keyed by `key`, 32 random bytes made on first use,
/// readable by its owner only) of the component's SHA-256, the engine's
/// compatibility tag and the compiled bytes. A damaged, truncated or
/// planted file fails the check and the component is compiled again (and
/// the entry rewritten). The folder is used only if it belongs to the user
/// running blis and no one else may write to it (mode 0700 when blis
/// creates it); otherwise blis compiles every time and says why once.
struct DiskCache {
    dir: PathBuf,
    key: [u8; 32],
}

/// The disk cache, if there is one blis can trust (see [`DiskCache`]).
fn disk_cache() -> Option<DiskCache> {
    static CACHE: OnceLock<Option<(PathBuf, [u8; 32])>> = OnceLock::new();
    CACHE
        .get_or_init(|| {
            let dir = cache_folder()?;
            match DiskCache::open(&dir) {
                Ok(key) => Some((dir, key)),
                Err(why) => {
                    eprintln!("note: the compiled-plugin cache {} is not used: {why}; WebAssembly plugins are compiled at every start", dir.display());
                    None
                }
            }
        })
        .as_ref()
        .map(|(dir, key)| DiskCache {
            dir: dir.clone(),
            key: *key,
        })
}

impl DiskCache {
    /// Create or check the folder and its key; the key.
    fn open(dir: &Path) -> Result<[u8; 32], String> {
        use std::io::{Read, Write};
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create it: {e}"))?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let trusted = |p: &Path, what: &str| -> Result<(), String> {
            let m = std::fs::symlink_metadata(p).map_err(|e| format!("{what}: {e}"))?;
            if m.uid() != me {
                return Err(format!("{what} belongs to another user (uid {})", m.uid()));
            }
            if m.permissions().mode() & 0o022 != 0 {
                return Err(format!(
                    "others may write to {what} (mode {:o})",
                    m.permissions().mode() & 0o777
                ));
            }
            Ok(())
        };
        trusted(dir, "the folder")?;
        let key_path = dir.join("key");
        let mut key = [0u8; 32];
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key_path)
        {
            Ok(mut f) => {
                std::fs::File::open("/dev/urandom")
                    .and_then(|mut r| r.read_exact(&mut key))
                    .map_err(|e| format!("no random bytes for its key: {e}"))?;
                f.write_all(&key)
                    .map_err(|e| format!("cannot write its key: {e}"))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                trusted(&key_path, "its key")?;
                let m = std::fs::metadata(&key_path).map_err(|e| e.to_string())?;
                if m.permissions().mode() & 0o077 != 0 {
                    return Err("its key is readable by others".into());
                }
                let bytes =
                    std::fs::read(&key_path).map_err(|e| format!("cannot read its key: {e}"))?;
                key = bytes
                    .try_into()
                    .map_err(|_| "its key is not 32 bytes".to_string())?;
            }
            Err(e) => return Err(format!("cannot create its key: {e}")),
        }
        Ok(key)
    }

    fn paths(&self, sha256: &str, tag: &str) -> (PathBuf, PathBuf) {
        let stem = format!("{sha256}-{tag}");
        (
            self.dir.join(format!("{stem}.cwasm")),
            self.dir.join(format!("{stem}.mac")),
        )
    }

    fn mac(&self, sha256: &str, tag: &str, code: &[u8]) -> [u8; 32] {
        hmac_sha256(
            &self.key,
            &[sha256.as_bytes(), b"\0", tag.as_bytes(), b"\0", code],
        )
    }

    /// The cached compilation, if its MAC checks out.
    fn load(&self, engine: &Engine, sha256: &str, tag: &str) -> Option<Component> {
        let (code_path, mac_path) = self.paths(sha256, tag);
        let code = std::fs::read(&code_path).ok()?;
        let mac = std::fs::read(&mac_path).ok()?;
        let want = self.mac(sha256, tag, &code);
        // Constant time: a forger learns nothing from how long it took.
        if mac.len() != 32 || mac.iter().zip(want).fold(0u8, |d, (a, b)| d | (a ^ b)) != 0 {
            return None;
        }
        // SAFETY: `deserialize` runs the machine code in `code`, which
        // this cache's key authenticates as written by blis from the
        // component named by `sha256`, for this engine (wasmtime checks
        // its version and settings again).
        unsafe { Component::deserialize(engine, &code) }.ok()
    }

    fn store(&self, sha256: &str, tag: &str, code: &[u8]) {
        let (code_path, mac_path) = self.paths(sha256, tag);
        let mac = self.mac(sha256, tag, code);
        let _ = crate::output::write_atomic(&code_path, code)
            .and_then(|()| crate::output::write_atomic(&mac_path, &mac));
    }
}

/// HMAC-SHA-256 (RFC 2104) of the concatenated `parts`.
fn hmac_sha256(key: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    let pad = |b: u8| block.map(|k| k ^ b);
    let mut inner = Sha256::new();
    inner.update(pad(0x36));
    for p in parts {
        inner.update(p);
    }
    let mut outer = Sha256::new();
    outer.update(pad(0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
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
            sandbox::shadow_sleep(&mut linker).map_err(|e| format!("{e:#}"))?;
            Ok(Arc::new(linker))
        })
        .as_ref()
        .map(Arc::clone)
        .map_err(Clone::clone)
}

/// An error chain in one line: each cause's message, without wasmtime's
/// backtrace ("error while executing at wasm backtrace:" and its frames),
/// so a fault inside a host call says what it was (e.g. a pointer out of
/// the guest's memory) and, from the backtrace, which import was called.
fn short(e: &wasmtime::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut import = None;
    for cause in e.chain() {
        for line in cause.to_string().lines().map(str::trim) {
            let frame = line
                .split_once(": ")
                .is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_digit()));
            if frame {
                // `N: 0x…  - <component>!<import name>`: a host import in
                // the backtrace names the call that faulted.
                if import.is_none() {
                    import = line
                        .rsplit_once('!')
                        .map(|(_, f)| f.trim().to_string())
                        .filter(|f| f.contains("blis:plugin/") || f.contains("wasi:"));
                }
                continue;
            }
            if line.is_empty()
                || line.starts_with("error while executing at wasm backtrace")
                || line.starts_with("note: ")
            {
                continue;
            }
            if !parts.iter().any(|p| p == line) {
                parts.push(line.to_string());
            }
        }
    }
    let mut s = parts.join(": ");
    if s.is_empty() {
        s = "no cause given".into();
    }
    if let Some(f) = import {
        s = format!("in the host call {f}: {s}");
    }
    crate::text::clean(&s, 600)
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
        let component = compiled(bytes, sha256).map_err(|e| match e {
            CompileError::Invalid(detail) => not_component(detail),
            CompileError::System { attempts, detail } => PluginError::SystemRefused {
                path: path.to_path_buf(),
                attempts,
                detail,
            },
        })?;
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
            .map_err(|e| {
                if out_of_memory(&e) {
                    memory_refused(&e)
                } else {
                    format!("cannot instantiate the component: {}", short(&e))
                }
            })?;
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

/// Whether `e` is the machine refusing memory (an address-space limit, no
/// memory left), not a problem of the component.
fn out_of_memory(e: &wasmtime::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| {
            io.kind() == std::io::ErrorKind::OutOfMemory || io.raw_os_error() == Some(libc::ENOMEM)
        }) || {
            let t = c.to_string();
            t.contains("Cannot allocate memory")
                || t.contains("failed to allocate")
                || t.contains("mmap failed")
        }
    })
}

/// The message for instantiation failing for lack of memory.
fn memory_refused(e: &wasmtime::Error) -> String {
    format!(
        "the machine refused the memory for an instance of the component ({}): an address-space or memory limit (ulimit -v) too low for it; under a limit each linear memory reserves what it uses plus {} MiB",
        short(e),
        MEMORY_RESERVATION >> 20
    )
}

/// An instantiation failure: an import blis does not offer, or a missing
/// or different `policy` export (or the machine refusing memory).
fn instantiate_error(path: &Path, e: &wasmtime::Error) -> PluginError {
    if out_of_memory(e) {
        return PluginError::InitFailed {
            path: path.to_path_buf(),
            detail: memory_refused(e),
        };
    }
    PluginError::NotAComponent {
        path: path.to_path_buf(),
        detail: format!(
            "{} (a blis component exports blis:plugin/policy@0.1.x and may import only \
             blis:plugin/host@0.1.x, blis:plugin/lora@0.1.x, blis:plugin/request@0.1.2 and WASI 0.2)",
            short(e)
        ),
    }
}

#[cfg(test)]
mod compile_tests {
    use super::{retry_refusals, CompileError, COMPILE_ATTEMPTS};

    /// What wasmtime returned when the kernel would not seal a memory
    /// image's memfd: an I/O error under context.
    fn refusal() -> wasmtime::Error {
        wasmtime::Error::new(std::io::Error::from_raw_os_error(16))
            .context("cannot add seals to the memfd")
    }

    #[test]
    fn a_transient_refusal_by_the_system_is_retried_until_it_passes() {
        let mut calls = 0;
        let r = retry_refusals(|| {
            calls += 1;
            if calls < COMPILE_ATTEMPTS {
                Err(refusal())
            } else {
                Ok(7)
            }
        });
        assert_eq!(r.unwrap(), 7);
        assert_eq!(calls, COMPILE_ATTEMPTS);
    }

    #[test]
    fn a_lasting_refusal_is_the_systems_not_an_invalid_component() {
        let mut calls = 0;
        let r: Result<(), _> = retry_refusals(|| {
            calls += 1;
            Err(refusal())
        });
        match r {
            Err(CompileError::System { attempts, detail }) => {
                assert_eq!(attempts, COMPILE_ATTEMPTS);
                assert!(detail.contains("cannot add seals to the memfd"), "{detail}");
                assert!(detail.contains("os error 16"), "{detail}");
            }
            other => panic!("expected a system refusal, got {other:?}"),
        }
        assert_eq!(calls, COMPILE_ATTEMPTS);
    }

    #[test]
    fn invalid_bytes_fail_at_once_as_an_invalid_component() {
        let engine = super::engine().unwrap();
        let mut calls = 0;
        let r = retry_refusals(|| {
            calls += 1;
            wasmtime::component::Component::new(engine, b"\0asm\x0d\0\x01\0garbage")
        });
        assert!(matches!(r, Err(CompileError::Invalid(_))), "{:?}", r.err());
        assert_eq!(calls, 1);
    }
}

#[cfg(test)]
mod cache_tests {
    /// RFC 4231 test case 2 shape, with a 32-byte key: the HMAC differs
    /// with the key and the message, and matches a known value.
    #[test]
    fn hmac_matches_a_known_value() {
        let key = [0x0bu8; 32];
        let mac = super::hmac_sha256(&key, &[b"Hi ", b"There"]);
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        // python3 -c "import hmac,hashlib;print(hmac.new(b'\x0b'*32,b'Hi There',hashlib.sha256).hexdigest())"
        assert_eq!(
            hex,
            "198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7"
        );
    }
}

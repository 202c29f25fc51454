//! The registry of loaded libraries and the policies they offer, keyed by
//! (kind, name).

use std::path::{Path, PathBuf};

use abi_stable::std_types::RStr;
use blis_plugin_api::{abi_v0_1, AbiVersion, Hooks, KindCode, PolicyKind, PolicyObject, ABI_0_1};

use super::loader::{self, Module};
use super::policy::{
    AdmissionObj, AdmissionPolicy, AutoscalerPolicy, DeciderPolicy, FilterPolicy, ObserverPolicy,
    PickerPolicy, PolicyLabel, PreemptionPolicy, RouterObj, RouterPolicy, SchedulerPolicy,
    ScorerObj, ScorerPolicy,
};
use super::PluginError;

/// Where a library came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Linked into the `blis` binary.
    Embedded,
    /// Loaded from this file.
    File(PathBuf),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Embedded => f.write_str("embedded"),
            Origin::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Whether the standard policy `name` of `kind` reads the prompt's block
/// hashes (`RequestView::block_hashes`). The cluster hashes every arriving
/// prompt only when some policy of the run may read them: any plugin
/// policy, and of the embedded standard library only the prefix-affinity
/// router and scorer. A standard policy that starts reading the hashes must
/// be added here; `cluster/prompt_hash_tests.rs` runs every standard
/// cluster-level policy with and without the hashes on a prefix-sharing
/// workload and fails when a run's output depends on them.
pub fn std_reads_block_hashes(kind: KindCode, name: &str) -> bool {
    matches!(
        (kind.name(), name),
        ("router", "prefix-affinity")
            | ("scorer", "prefix-affinity" | "token-load" | "latency")
            | (
                "filter",
                "slo-headroom-tier" | "prefix-cache-affinity" | "in-flight-limit"
            )
            | ("admission", "latency-slo" | "concurrency-shed")
    )
}

/// Whether the standard policy `name` of `kind` reads the instance
/// snapshots of its `ClusterView` (anything beyond the clock and the
/// instance count). A decision by a policy that reads none skips re-reading
/// the live signals of every instance (`SnapshotProvider::pass`); every
/// plugin policy and every standard policy not listed here is taken to read
/// them. `cluster/snapshot_read_tests.rs` runs every standard cluster-level
/// policy with the snapshots always filled and as decided, and fails when a
/// run's output depends on the difference.
pub fn std_reads_snapshots(kind: KindCode, name: &str) -> bool {
    !matches!(
        (kind.name(), name),
        (
            "admission",
            "always-admit" | "reject-all" | "token-bucket" | "concurrency-shed"
        ) | ("router", "round-robin")
            | ("scorer", "token-load" | "session-affinity" | "constant")
            | ("filter", "session-affinity" | "in-flight-limit")
    )
}

/// Why a library's declared hooks cannot be honoured, if they cannot: a
/// policy of a kind that never receives events (scheduler, preemption,
/// autoscaler, decider) that declares hooks would silently never be
/// called, and an observer without hooks would never be called at all.
fn hooks_problem(lib: &LibraryEntry) -> Option<String> {
    lib.policies.iter().find_map(|p| {
        if !p.hooks.is_empty() && !p.kind.receives_events() {
            Some(format!(
                "{} '{}' declares HOOKS, but a {} never receives lifecycle events, so they would \
                 never be called; remove HOOKS from it, or move the event handling to an observer \
                 (kind observer) or to an admission, router, scorer, filter or picker policy",
                p.kind.name(),
                p.name,
                p.kind.name()
            ))
        } else if p.hooks.is_empty() && p.kind == KindCode::OBSERVER {
            Some(format!(
                "observer '{}' declares no HOOKS, so it would never be called; set \
                 `const HOOKS: Hooks = ...` to the events it handles (Hooks::RUN_END for the end of \
                 the run)",
                p.name
            ))
        } else {
            None
        }
    })
}

/// A library whose name or policy names could not be told apart or shown
/// safely: empty, with control characters or spaces, or two policies of
/// one kind with one name (a run would silently get the first).
fn names_problem(library: &str, policies: &[PolicyEntry]) -> Option<String> {
    if let Err(e) = crate::text::check_name(library) {
        return Some(format!("the library name: {e}"));
    }
    let mut seen = std::collections::HashSet::new();
    policies.iter().find_map(|p| {
        if let Err(e) = crate::text::check_name(&p.name) {
            return Some(format!("{} policy: {e}", p.kind.name()));
        }
        (!seen.insert((p.kind, p.name.as_str()))).then(|| {
            format!(
                "two {} policies are named '{}'; a run could only ever get the first: give each its own name",
                p.kind.name(),
                p.name
            )
        })
    })
}

/// A library's self-description made safe to show (`plugins list`,
/// `plugins show`, the report's provenance): its version and each
/// summary one escaped line, each parameter doc line escaped, all cut
/// ([`crate::text`]).
fn clean_texts(lib: &mut LibraryEntry) {
    use crate::text::{clean, MAX_LINE};
    lib.version = clean(&lib.version, 100);
    for p in &mut lib.policies {
        p.summary = clean(&p.summary, MAX_LINE);
        let lines: Vec<String> = p
            .params_doc
            .lines()
            .take(200)
            .map(|l| clean(l, MAX_LINE))
            .collect();
        p.params_doc = lines.join("\n");
    }
}

/// One policy a library offers.
#[derive(Clone, Debug)]
pub struct PolicyEntry {
    pub kind: KindCode,
    pub name: String,
    pub summary: String,
    pub params_doc: String,
    /// Lifecycle events the policy handles (always none in a 0.1 library).
    pub hooks: Hooks,
    /// A scorer that reads the 0.2 cluster state (see `PolicyDef::USES_STATE`).
    pub uses_state: bool,
    /// The policy reads the prefix-cache query (see `PolicyDef::PREFIX_QUERY`).
    pub prefix_query: bool,
}

/// One library in the registry.
#[derive(Clone)]
pub struct LibraryEntry {
    pub name: String,
    pub version: String,
    /// The plugin ABI the library was built against.
    pub abi: AbiVersion,
    pub origin: Origin,
    /// SHA-256 of the file, lower-case hex (none for an embedded library).
    pub sha256: Option<String>,
    pub policies: Vec<PolicyEntry>,
    module: Module,
}

impl std::fmt::Debug for LibraryEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibraryEntry")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("abi", &self.abi)
            .field("origin", &self.origin)
            .field("sha256", &self.sha256)
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}

impl LibraryEntry {
    /// The interface the library was built against: its plugin ABI
    /// version, or the WIT package of a WebAssembly component.
    pub fn abi_label(&self) -> String {
        #[cfg(feature = "wasm")]
        if let Module::Wasm(lib, _) = self.module {
            return lib.wit_package.clone();
        }
        self.abi.to_string()
    }

    /// True for a WebAssembly component.
    pub fn is_wasm(&self) -> bool {
        #[cfg(feature = "wasm")]
        if matches!(self.module, Module::Wasm(..)) {
            return true;
        }
        false
    }

    /// Whether the library's root module has the function that creates
    /// policies of `kind`: false for a kind added to the ABI after the
    /// library was built (e.g. `decider` for a library built before it).
    pub fn has_create_function(&self, kind: KindCode) -> bool {
        let m = match self.module {
            Module::Current(m) | Module::BeforeHost(m) => m,
            Module::BeforeObserver(_) if kind == KindCode::OBSERVER => return false,
            Module::BeforeObserver(m) => m,
            Module::BeforeDecider(_) if matches!(kind, KindCode::DECIDER | KindCode::OBSERVER) => {
                return false
            }
            Module::BeforeDecider(m) => m,
            Module::V0_1(_) => return kind.policy_kind().is_some(),
            #[cfg(feature = "wasm")]
            Module::Wasm(..) => return kind.name() != "unknown",
        };
        match kind {
            KindCode::ADMISSION | KindCode::ROUTER | KindCode::SCORER => true,
            KindCode::FILTER => m.create_filter().is_some(),
            KindCode::PICKER => m.create_picker().is_some(),
            KindCode::SCHEDULER => m.create_scheduler().is_some(),
            KindCode::PREEMPTION => m.create_preemption().is_some(),
            KindCode::DECIDER => m.create_decider().is_some(),
            KindCode::AUTOSCALER => m.create_autoscaler().is_some(),
            KindCode::OBSERVER => m.create_observer().is_some(),
            _ => false,
        }
    }
}

/// The constructors of the ABI 0.2 kinds, one per kind. They differ only
/// in the kind code, the root-module function and the host handle, so one
/// macro writes them and a new kind is one entry (the 0.1 kinds go through
/// the frozen `create` and are written out below).
macro_rules! create_v2 {
    ($(
        $(#[$doc:meta])*
        $method:ident: $kind:ident, $create:ident, $handle:ident, $into:ident, $missing:literal;
    )*) => {$(
        $(#[$doc])*
        pub fn $method(
            &self,
            spec: &str,
            params_toml: &str,
            seed: u64,
        ) -> Result<$handle, PluginError> {
            let (lib, label) = self.locate(KindCode::$kind, spec)?;
            #[cfg(feature = "wasm")]
            if let Module::Wasm(w, limits) = lib.module {
                return match w.create(KindCode::$kind, &label.name, params_toml, seed, limits) {
                    Ok(p) => Ok($handle::new(label, p.$into())),
                    Err(message) => Err(create_error(label, message)),
                };
            }
            let Some(create) = Self::current(lib).and_then(|m| m.$create()) else {
                return Err(create_error(label, $missing.into()));
            };
            let name = RStr::from(label.name.as_str());
            match create(name, RStr::from(params_toml), seed).into_result() {
                Ok(obj) => Ok($handle::new(label, obj)),
                Err(message) => Err(create_error(label, message.to_string())),
            }
        }
    )*};
}

/// All libraries of a run, and the policies they offer.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    libraries: Vec<LibraryEntry>,
}

/// What happened when a library file was added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Added {
    /// A new library.
    New,
    /// The file replaced the embedded library of the same name.
    ReplacedEmbedded,
    /// The same file was already loaded; nothing changed.
    AlreadyLoaded,
}

impl Registry {
    /// An empty registry.
    pub fn empty() -> Self {
        Self::default()
    }

    /// A registry holding the embedded standard library.
    pub fn standard() -> Self {
        // Making the root module leaks it into a 'static prefix: make it
        // once per process, not once per registry (fuzzing found the leak).
        static EMBEDDED: std::sync::OnceLock<blis_plugin_api::PluginModRef> =
            std::sync::OnceLock::new();
        let mut r = Self::empty();
        r.add_module(
            Module::Current(*EMBEDDED.get_or_init(blis_std::blis_plugin_module)),
            Origin::Embedded,
            None,
        );
        r
    }

    /// The libraries, in load order.
    pub fn libraries(&self) -> &[LibraryEntry] {
        &self.libraries
    }

    fn add_module(&mut self, module: Module, origin: Origin, sha256: Option<String>) -> usize {
        #[cfg(feature = "wasm")]
        if let Module::Wasm(lib, _) = module {
            let policies = lib
                .policies
                .iter()
                .map(|p| PolicyEntry {
                    kind: p.kind,
                    name: p.name.clone(),
                    summary: p.summary.clone(),
                    params_doc: p.params_doc.clone(),
                    hooks: p.hooks,
                    uses_state: p.uses_state,
                    prefix_query: p.prefix_query,
                })
                .collect();
            self.libraries.push(LibraryEntry {
                name: lib.name.clone(),
                version: lib.version.clone(),
                abi: blis_plugin_api::ABI_VERSION,
                origin,
                sha256,
                policies,
                module,
            });
            return self.libraries.len() - 1;
        }
        // The query table (a library built before it has a `set_host` that
        // does nothing; the embedded library gets it on every registry, which
        // keeps the first: it is the same table).
        if let Module::Current(m) = module {
            if let Some(set_host) = m.set_host() {
                set_host(super::host_queries::table());
            }
        }
        let info = match module {
            Module::Current(m)
            | Module::BeforeHost(m)
            | Module::BeforeObserver(m)
            | Module::BeforeDecider(m) => (m.describe())(),
            Module::V0_1(m) => (m.describe())(),
            #[cfg(feature = "wasm")]
            Module::Wasm(..) => unreachable!("handled above"),
        };
        // A 0.2 library describes every policy (0.1 kinds included) with its
        // hooks; a 0.1 library has no `describe_v2` and only the 0.1 kinds.
        let v2 = match module {
            Module::Current(m)
            | Module::BeforeHost(m)
            | Module::BeforeObserver(m)
            | Module::BeforeDecider(m) => m.describe_v2().map(|d| d()),
            Module::V0_1(_) => None,
            #[cfg(feature = "wasm")]
            Module::Wasm(..) => None,
        };
        let (abi, policies) = match v2 {
            Some(v2) => {
                let policies = v2
                    .policies
                    .iter()
                    .filter(|p| p.kind.name() != "unknown")
                    .map(|p| PolicyEntry {
                        kind: p.kind,
                        name: p.name.to_string(),
                        summary: p.summary.to_string(),
                        params_doc: p.params_doc.to_string(),
                        hooks: p.hooks,
                        uses_state: p.uses_state,
                        prefix_query: p.prefix_query,
                    })
                    .collect();
                (v2.abi, policies)
            }
            None => (
                ABI_0_1,
                info.policies
                    .iter()
                    .map(|p| PolicyEntry {
                        kind: p.kind.into(),
                        name: p.name.to_string(),
                        summary: p.summary.to_string(),
                        params_doc: p.params_doc.to_string(),
                        hooks: Hooks::NONE,
                        uses_state: false,
                        prefix_query: false,
                    })
                    .collect(),
            ),
        };
        let entry = LibraryEntry {
            name: info.name.to_string(),
            version: info.version.to_string(),
            abi,
            origin,
            sha256,
            policies,
            module,
        };
        self.libraries.push(entry);
        self.libraries.len() - 1
    }

    /// The provenance of the run's plugin files, for the report: one object
    /// per library loaded from a file (name, version, ABI version, path,
    /// SHA-256), or `None` when every policy came from the `blis` binary.
    pub fn provenance(&self) -> Option<serde_json::Value> {
        let files: Vec<serde_json::Value> = self
            .libraries
            .iter()
            .filter_map(|l| match &l.origin {
                Origin::File(path) => Some(serde_json::json!({
                    "name": l.name,
                    "version": l.version,
                    "abi_version": l.abi_label(),
                    "path": path.display().to_string(),
                    "sha256": l.sha256,
                })),
                Origin::Embedded => None,
            })
            .collect();
        (!files.is_empty()).then_some(serde_json::Value::Array(files))
    }

    /// Load the library at `path`. A file whose library name equals an
    /// embedded library's replaces it (so `--plugin libblis_std.so` runs the
    /// standard policies from the file).
    pub fn load(&mut self, path: &Path) -> Result<Added, PluginError> {
        self.load_with(path, None)
    }

    /// [`Registry::load`] with the limits of a WebAssembly component
    /// (`fuel_per_call`, `max_memory_mib` of `[[plugins]]`; `None` for the
    /// defaults). A file whose name ends in `.wasm` is loaded as a
    /// component; any other as a shared library, for which limits are an
    /// error.
    pub fn load_with(
        &mut self,
        path: &Path,
        limits: Option<WasmLimitsSpec>,
    ) -> Result<Added, PluginError> {
        let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        if self
            .libraries
            .iter()
            .any(|l| l.origin == Origin::File(canonical.clone()))
        {
            return Ok(Added::AlreadyLoaded);
        }
        let is_wasm = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("wasm"));
        if !is_wasm && limits.is_some_and(|l| l != WasmLimitsSpec::default()) {
            return Err(PluginError::BadDeclaration {
                path: path.to_path_buf(),
                detail: "fuel_per_call and max_memory_mib apply to WebAssembly components \
                         (.wasm) only; remove them from this [[plugins]] entry"
                    .into(),
            });
        }
        let (module, sha256) = if is_wasm {
            load_wasm(path, limits.unwrap_or_default())?
        } else {
            (loader::load_root_module(path)?, loader::sha256_hex(path))
        };
        let idx = self.add_module(module, Origin::File(canonical), sha256);
        clean_texts(&mut self.libraries[idx]);
        let lib = &self.libraries[idx];
        if let Some(detail) = names_problem(&lib.name, &lib.policies).or_else(|| hooks_problem(lib))
        {
            self.libraries.pop();
            return Err(PluginError::BadDeclaration {
                path: path.to_path_buf(),
                detail,
            });
        }
        let name = self.libraries[idx].name.clone();
        let same: Vec<usize> = (0..idx)
            .filter(|&i| self.libraries[i].name == name)
            .collect();
        for &i in &same {
            if self.libraries[i].origin != Origin::Embedded {
                let other = self.libraries[i].origin.to_string();
                let this = self.libraries[idx].origin.to_string();
                self.libraries.pop();
                return Err(PluginError::InitFailed {
                    path: path.to_path_buf(),
                    detail: format!(
                        "another loaded library has the same name '{name}' ({other}); library names must be unique (this one is {this})"
                    ),
                });
            }
        }
        if let Some(&i) = same.first() {
            let lib = self.libraries.pop().expect("just pushed");
            self.libraries[i] = lib;
            return Ok(Added::ReplacedEmbedded);
        }
        Ok(Added::New)
    }

    /// Find the library offering `spec` (`name` or `library::name`) of `kind`.
    pub fn resolve(
        &self,
        kind: impl Into<KindCode>,
        spec: &str,
    ) -> Result<(usize, String), PluginError> {
        let kind = kind.into();
        let (lib_filter, name) = match spec.split_once("::") {
            Some((l, n)) => (Some(l), n),
            None => (None, spec),
        };
        let hits: Vec<usize> = self
            .libraries
            .iter()
            .enumerate()
            .filter(|(_, l)| lib_filter.is_none_or(|f| l.name == f))
            .filter(|(_, l)| l.policies.iter().any(|p| p.kind == kind && p.name == name))
            .map(|(i, _)| i)
            .collect();
        match hits.as_slice() {
            [one] => Ok((*one, name.to_string())),
            [a, b, ..] => Err(PluginError::Ambiguous {
                kind: kind.name(),
                name: name.to_string(),
                first: format!(
                    "{} ({})",
                    self.libraries[*a].name, self.libraries[*a].origin
                ),
                second: format!(
                    "{} ({})",
                    self.libraries[*b].name, self.libraries[*b].origin
                ),
                first_lib: self.libraries[*a].name.clone(),
                second_lib: self.libraries[*b].name.clone(),
            }),
            [] => {
                let available = self.names(kind);
                let suggestion = closest(name, &available)
                    .map(|s| format!(" (did you mean '{s}'?)"))
                    .unwrap_or_default();
                Err(PluginError::UnknownPolicy {
                    kind: kind.name(),
                    name: spec.to_string(),
                    suggestion,
                    available: if available.is_empty() {
                        "none".to_string()
                    } else {
                        available.join(", ")
                    },
                })
            }
        }
    }

    /// Names of all policies of `kind`, sorted, deduplicated.
    pub fn names(&self, kind: impl Into<KindCode>) -> Vec<String> {
        let kind = kind.into();
        let mut v: Vec<String> = self
            .libraries
            .iter()
            .flat_map(|l| l.policies.iter())
            .filter(|p| p.kind == kind)
            .map(|p| p.name.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The entry of a policy (for `blis plugins show`).
    pub fn find_any(&self, spec: &str) -> Vec<(&LibraryEntry, &PolicyEntry)> {
        let (lib_filter, name) = match spec.split_once("::") {
            Some((l, n)) => (Some(l), n),
            None => (None, spec),
        };
        self.libraries
            .iter()
            .filter(|l| lib_filter.is_none_or(|f| l.name == f))
            .flat_map(|l| l.policies.iter().map(move |p| (l, p)))
            .filter(|(_, p)| p.name == name)
            .collect()
    }

    /// The library offering `spec` of `kind`, and the label of the policy.
    fn locate(
        &self,
        kind: KindCode,
        spec: &str,
    ) -> Result<(&LibraryEntry, PolicyLabel), PluginError> {
        let (idx, name) = self.resolve(kind, spec)?;
        let lib = &self.libraries[idx];
        let entry = lib
            .policies
            .iter()
            .find(|p| p.kind == kind && p.name == name);
        let block_hashes = lib.origin != Origin::Embedded || std_reads_block_hashes(kind, &name);
        let snapshots = lib.origin != Origin::Embedded || std_reads_snapshots(kind, &name);
        let label = PolicyLabel {
            library: lib.name.clone(),
            kind: kind.name(),
            name,
            abi: lib.abi,
            hooks: entry.map_or(Hooks::NONE, |p| p.hooks),
            uses_state: entry.is_some_and(|p| p.uses_state),
            prefix_query: entry.is_some_and(|p| p.prefix_query),
            block_hashes,
            snapshots,
        };
        Ok((lib, label))
    }

    fn create(
        &self,
        kind: PolicyKind,
        spec: &str,
        params_toml: &str,
        seed: u64,
    ) -> Result<(PolicyLabel, Created), PluginError> {
        let (lib, label) = self.locate(kind.into(), spec)?;
        let (name, params) = (RStr::from(label.name.as_str()), RStr::from(params_toml));
        let created = match lib.module {
            Module::Current(m)
            | Module::BeforeHost(m)
            | Module::BeforeObserver(m)
            | Module::BeforeDecider(m) => (m.create())(kind, name, params, seed)
                .into_result()
                .map(Created::Current),
            Module::V0_1(m) => (m.create())(kind, name, params, seed)
                .into_result()
                .map(Created::V0_1),
            #[cfg(feature = "wasm")]
            Module::Wasm(w, limits) => w
                .create(kind.into(), &label.name, params_toml, seed, limits)
                .map(|p| {
                    Created::Current(match kind {
                        PolicyKind::Admission => PolicyObject::Admission(p.into_admission()),
                        PolicyKind::Router => PolicyObject::Router(p.into_router()),
                        PolicyKind::Scorer => PolicyObject::Scorer(p.into_scorer()),
                    })
                })
                .map_err(abi_stable::std_types::RString::from),
        };
        match created {
            Ok(obj) => Ok((label, obj)),
            Err(message) => Err(create_error(label, message.to_string())),
        }
    }

    /// The root module, if the library speaks ABI ≥ 0.2.
    fn current(lib: &LibraryEntry) -> Option<blis_plugin_api::PluginModRef> {
        match lib.module {
            Module::Current(m)
            | Module::BeforeHost(m)
            | Module::BeforeObserver(m)
            | Module::BeforeDecider(m) => Some(m),
            Module::V0_1(_) => None,
            #[cfg(feature = "wasm")]
            Module::Wasm(..) => None,
        }
    }

    create_v2! {
        /// Create a filter (ABI 0.2).
        filter: FILTER, create_filter, FilterPolicy, into_filter, "the library has no filters (ABI 0.1)";
        /// Create a scheduler (ABI 0.2; one per instance).
        scheduler: SCHEDULER, create_scheduler, SchedulerPolicy, into_scheduler,
            "the library has no schedulers (ABI 0.1)";
        /// Create an autoscaler (ABI 0.2, kind code 8).
        autoscaler: AUTOSCALER, create_autoscaler, AutoscalerPolicy, into_autoscaler,
            "the library has no autoscalers (it predates the autoscaler kind)";
        /// Create a P/D decider (ABI 0.2, kind code 7).
        decider: DECIDER, create_decider, DeciderPolicy, into_decider,
            "the library has no deciders (it predates the decider kind)";
        /// Create a preemption policy (ABI 0.2; one per instance).
        preemption: PREEMPTION, create_preemption, PreemptionPolicy, into_preemption,
            "the library has no preemption policies (ABI 0.1)";
        /// Create a picker (ABI 0.2).
        picker: PICKER, create_picker, PickerPolicy, into_picker, "the library has no pickers (ABI 0.1)";
        /// Create an observer (ABI 0.2, kind code 9).
        observer: OBSERVER, create_observer, ObserverPolicy, into_observer,
            "the library has no observers (it predates the observer kind)";
    }

    /// Create an admission policy.
    pub fn admission(
        &self,
        spec: &str,
        params_toml: &str,
        seed: u64,
    ) -> Result<AdmissionPolicy, PluginError> {
        match self.create(PolicyKind::Admission, spec, params_toml, seed)? {
            (label, Created::Current(PolicyObject::Admission(obj))) => {
                Ok(AdmissionPolicy::new(label, AdmissionObj::Current(obj)))
            }
            (label, Created::V0_1(abi_v0_1::PolicyObject::Admission(obj))) => {
                Ok(AdmissionPolicy::new(label, AdmissionObj::V0_1(obj)))
            }
            (label, _) => Err(wrong_kind(label)),
        }
    }

    /// Create a routing policy.
    pub fn router(
        &self,
        spec: &str,
        params_toml: &str,
        seed: u64,
    ) -> Result<RouterPolicy, PluginError> {
        match self.create(PolicyKind::Router, spec, params_toml, seed)? {
            (label, Created::Current(PolicyObject::Router(obj))) => {
                Ok(RouterPolicy::new(label, RouterObj::Current(obj)))
            }
            (label, Created::V0_1(abi_v0_1::PolicyObject::Router(obj))) => {
                Ok(RouterPolicy::new(label, RouterObj::V0_1(obj)))
            }
            (label, _) => Err(wrong_kind(label)),
        }
    }

    /// Create a scorer.
    pub fn scorer(
        &self,
        spec: &str,
        params_toml: &str,
        seed: u64,
    ) -> Result<ScorerPolicy, PluginError> {
        match self.create(PolicyKind::Scorer, spec, params_toml, seed)? {
            (label, Created::Current(PolicyObject::Scorer(obj))) => {
                Ok(ScorerPolicy::new(label, ScorerObj::Current(obj)))
            }
            (label, Created::V0_1(abi_v0_1::PolicyObject::Scorer(obj))) => {
                Ok(ScorerPolicy::new(label, ScorerObj::V0_1(obj)))
            }
            (label, _) => Err(wrong_kind(label)),
        }
    }
}

/// The WebAssembly limits of one `[[plugins]]` entry, as given (`None`:
/// the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WasmLimitsSpec {
    pub fuel_per_call: Option<u64>,
    pub max_memory_mib: Option<u64>,
}

/// Load a component (once per process per file content) with `limits`.
#[cfg(feature = "wasm")]
fn load_wasm(path: &Path, limits: WasmLimitsSpec) -> Result<(Module, Option<String>), PluginError> {
    use super::wasm::{WasmLibrary, WasmLimits};
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static LOADED: OnceLock<Mutex<HashMap<String, &'static WasmLibrary>>> = OnceLock::new();
    if !path.exists() {
        return Err(PluginError::NotFound {
            path: path.to_path_buf(),
        });
    }
    let bytes = std::fs::read(path).map_err(|e| PluginError::InitFailed {
        path: path.to_path_buf(),
        detail: format!("cannot read the file: {e}"),
    })?;
    let bad = |detail: String| PluginError::BadDeclaration {
        path: path.to_path_buf(),
        detail,
    };
    if limits.fuel_per_call == Some(0) {
        return Err(bad(
            "fuel_per_call = 0 in its [[plugins]] entry: every call needs fuel; give a number \
             ≥ 1 (default 1000000000)"
                .into(),
        ));
    }
    if let Some(m) = limits.max_memory_mib.filter(|m| !(1..=4096).contains(m)) {
        return Err(bad(format!(
            "max_memory_mib = {m} in its [[plugins]] entry: give 1 to 4096 (MiB; a 32-bit \
             WebAssembly memory holds at most 4 GiB; default 512)"
        )));
    }
    let sha256 = loader::sha256_of(&bytes);
    let defaults = WasmLimits::default();
    let limits = WasmLimits {
        fuel_per_call: limits.fuel_per_call.unwrap_or(defaults.fuel_per_call),
        max_memory_bytes: limits
            .max_memory_mib
            .map_or(defaults.max_memory_bytes, |m| {
                usize::try_from(m.saturating_mul(1 << 20)).unwrap_or(usize::MAX)
            }),
    };
    let loaded = LOADED.get_or_init(Default::default);
    let cached = loaded
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&sha256)
        .copied();
    let lib = match cached {
        Some(lib) => lib,
        None => {
            let lib: &'static WasmLibrary =
                Box::leak(Box::new(WasmLibrary::load(path, &bytes, &sha256)?));
            loaded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(sha256.clone(), lib);
            lib
        }
    };
    Ok((Module::Wasm(lib, limits), Some(sha256)))
}

#[cfg(not(feature = "wasm"))]
fn load_wasm(
    path: &Path,
    _limits: WasmLimitsSpec,
) -> Result<(Module, Option<String>), PluginError> {
    Err(PluginError::InitFailed {
        path: path.to_path_buf(),
        detail: "this blis was built without WebAssembly support (cargo feature `wasm` of \
                 blis-host, on by default)"
            .into(),
    })
}

/// A policy object of a 0.1 kind, in the ABI of its library.
enum Created {
    Current(PolicyObject),
    V0_1(abi_v0_1::PolicyObject),
}

fn create_error(label: PolicyLabel, message: String) -> PluginError {
    PluginError::Create {
        library: label.library,
        kind: label.kind,
        name: label.name,
        message: crate::text::clean(&message, crate::text::MAX_ERROR),
    }
}

fn wrong_kind(label: PolicyLabel) -> PluginError {
    PluginError::Create {
        message: format!(
            "the library returned a policy of another kind than {}",
            label.kind
        ),
        library: label.library,
        kind: label.kind,
        name: label.name,
    }
}

/// The closest name by edit distance, if reasonably close.
pub(crate) fn closest<'a>(name: &str, candidates: &'a [String]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, c)| *d <= (c.len().max(name.len()) / 2).max(2))
        .min()
        .map(|(_, c)| c.as_str())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_control_and_duplicate_policy_names_are_refused() {
        let p = |kind: KindCode, name: &str| PolicyEntry {
            kind,
            name: name.to_string(),
            summary: String::new(),
            params_doc: String::new(),
            hooks: Hooks::default(),
            uses_state: false,
            prefix_query: false,
        };
        let (s, r) = (KindCode::SCORER, KindCode::ROUTER);
        assert_eq!(
            names_problem("lib", &[p(s, "a"), p(r, "a")]),
            None,
            "one name, two kinds"
        );
        let dup = names_problem("lib", &[p(s, "a"), p(s, "b"), p(s, "a")]).unwrap();
        assert!(dup.contains("two scorer policies are named 'a'"), "{dup}");
        assert!(names_problem("lib", &[p(s, "")])
            .unwrap()
            .contains("empty name"));
        assert!(names_problem("lib", &[p(s, "a\nerror: x")]).is_some());
        assert!(names_problem("", &[p(s, "a")])
            .unwrap()
            .contains("library name"));
    }

    #[test]
    fn closest_name() {
        let c = vec!["least-loaded".to_string(), "round-robin".to_string()];
        assert_eq!(closest("least-load", &c), Some("least-loaded"));
        assert_eq!(closest("roundrobin", &c), Some("round-robin"));
        assert_eq!(closest("zzz", &c), None);
    }
}

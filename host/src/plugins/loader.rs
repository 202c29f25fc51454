//! Opening one plugin library from disk and checking it is a compatible blis plugin.

use std::path::Path;

use abi_stable::library::{lib_header_from_path, LibraryError, RootModule};
use blis_plugin_api::{
    abi_before_decider, abi_before_host, abi_before_observer, abi_v0_1, PluginModRef,
};

use super::PluginError;

/// The root module of a library, in the ABI it speaks.
#[derive(Clone, Copy)]
pub(super) enum Module {
    /// ABI 0.2 (or a later, longer version of it).
    Current(PluginModRef),
    /// ABI 0.2 as it was before the host's query table, turned into a
    /// current root module whose `set_host` does nothing.
    BeforeHost(PluginModRef),
    /// ABI 0.2 as it was before the observer kind, turned into a current
    /// root module whose `create_observer` refuses.
    BeforeObserver(PluginModRef),
    /// ABI 0.2 as it was before the decider kind, turned into a current
    /// root module whose `create_decider` (and `create_observer`) refuse.
    BeforeDecider(PluginModRef),
    /// ABI 0.1.
    V0_1(abi_v0_1::PluginModRef),
    /// A WebAssembly component (kept for the rest of the process, like a
    /// shared library) and the limits of its `[[plugins]]` entry.
    #[cfg(feature = "wasm")]
    Wasm(&'static super::wasm::WasmLibrary, super::wasm::WasmLimits),
}

/// Load the blis root module of the library at `path`.
///
/// abi_stable accepts a library whose root module and vtables are at least
/// as long as the host's, so the library is checked against the current
/// root module first, then against the 0.2 ones before the host's query
/// table, before the observer kind and before the decider kind, then
/// against the 0.1 one.
///
/// The library stays loaded for the rest of the process (policies created
/// from it hold code pointers into it).
pub(super) fn load_root_module(path: &Path) -> Result<Module, PluginError> {
    if !path.exists() {
        return Err(PluginError::NotFound {
            path: path.to_path_buf(),
        });
    }
    // A bare file name ("libfoo.so") would make the dynamic loader search the
    // system library path instead of the folder it names: make it absolute.
    let absolute;
    let path = if path.is_relative() {
        absolute = std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf());
        absolute.as_path()
    } else {
        path
    };
    let header = lib_header_from_path(path).map_err(|e| classify(path, e))?;
    let found_name = header.root_mod_consts().name();
    if found_name != PluginModRef::NAME {
        return Err(PluginError::NotAPlugin {
            path: path.to_path_buf(),
            expected: format!("'{}'", PluginModRef::NAME),
            found: format!(
                "an abi_stable library whose root module is '{found_name}' (version {})",
                header.version_strings().version
            ),
        });
    }
    match header.init_root_module::<PluginModRef>() {
        Ok(m) => Ok(Module::Current(m)),
        Err(current @ LibraryError::AbiInstability(_)) => {
            if let Ok(m) = header.init_root_module::<abi_before_host::PluginModRef>() {
                if let Some(m) = m.into_current() {
                    return Ok(Module::BeforeHost(m));
                }
            }
            if let Ok(m) = header.init_root_module::<abi_before_observer::PluginModRef>() {
                if let Some(m) = m.into_current() {
                    return Ok(Module::BeforeObserver(m));
                }
            }
            if let Ok(m) = header.init_root_module::<abi_before_decider::PluginModRef>() {
                if let Some(m) = m.into_current() {
                    return Ok(Module::BeforeDecider(m));
                }
            }
            match header.init_root_module::<abi_v0_1::PluginModRef>() {
                Ok(m) => Ok(Module::V0_1(m)),
                Err(old @ LibraryError::AbiInstability(_)) => {
                    // Report the comparison with the shape the library has:
                    // a two-field root module is a (changed) 0.1 library.
                    let shorter = matches!(&current, LibraryError::AbiInstability(e)
                        if summarize_layout_error(&e.to_string())
                            .starts_with("PluginMod: too many fields (expected 7, found 2)"));
                    Err(classify(path, if shorter { old } else { current }))
                }
                Err(other) => Err(classify(path, other)),
            }
        }
        Err(e) => Err(classify(path, e)),
    }
}

/// SHA-256 of the file at `path` as lower-case hex, if it can be read.
pub(super) fn sha256_hex(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    Some(sha256_of(&bytes))
}

/// SHA-256 of `bytes` as lower-case hex.
pub(super) fn sha256_of(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write as _;
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for b in digest {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// The plugin ABI version this host implements (it also loads every
/// earlier minor version of the same line).
pub(super) fn expected_version() -> String {
    blis_plugin_api::ABI_VERSION.to_string()
}

/// Turn abi_stable's (often very long) errors into a short paragraph.
fn classify(path: &Path, err: LibraryError) -> PluginError {
    let path = path.to_path_buf();
    match err {
        LibraryError::OpenError { err, .. } => PluginError::NotSharedLibrary {
            path,
            detail: first_line(&err.to_string()),
        },
        LibraryError::GetSymbolError { .. } => PluginError::NotAPlugin {
            path,
            expected: format!("symbol {}", abi_stable::library::ROOT_MODULE_LOADER_NAME),
            found: "no such symbol (this shared library was not built with blis-plugin-api)"
                .to_string(),
        },
        LibraryError::InvalidAbiHeader(h) => PluginError::IncompatibleAbi {
            path,
            expected: expected_version(),
            found: format!("a library built with an incompatible abi_stable ({h:?})"),
        },
        LibraryError::IncompatibleVersionNumber { actual_version, .. } => {
            PluginError::IncompatibleAbi {
                path,
                expected: expected_version(),
                found: format!("a library built against blis-plugin-api {actual_version}"),
            }
        }
        LibraryError::AbiInstability(e) => {
            let detail = e.to_string();
            PluginError::IncompatibleAbi {
                path,
                expected: expected_version(),
                found: format!(
                    "a library whose plugin interface types have a different layout ({})",
                    summarize_layout_error(&detail)
                ),
            }
        }
        LibraryError::ParseVersionError(e) => PluginError::IncompatibleAbi {
            path,
            expected: expected_version(),
            found: format!("an unreadable version string ({e})"),
        },
        LibraryError::RootModule { err, .. } => PluginError::InitFailed {
            path,
            detail: first_line(&err.to_string()),
        },
        other => PluginError::InitFailed {
            path,
            detail: first_line(&other.to_string()),
        },
    }
}

fn first_line(s: &str) -> String {
    let line = s
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if line.len() > 200 {
        format!(
            "{}…",
            &line[..line.char_indices().take(200).last().map_or(0, |(i, _)| i)]
        )
    } else {
        line.to_string()
    }
}

/// Summarise abi_stable's layout report (hundreds of lines: both layouts of
/// every type on the path, plus an "N error(s)" header per type checked) as
/// the types that differ and how, e.g. `RequestView<'a>: incompatible type
/// size (expected 56, found 64), too many fields (expected 6, found 7)`.
fn summarize_layout_error(detail: &str) -> String {
    let lines: Vec<&str> = detail.lines().map(str::trim).collect();
    let mut current_type: Option<&str> = None;
    let mut by_type: Vec<(Option<&str>, Vec<String>)> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if *line == "Layout of expected type:" {
            current_type = lines[i + 1..].iter().find_map(|l| l.strip_prefix("type:"));
        } else if let Some(problem) = line.strip_prefix("Error:") {
            // The problem's block runs to the next problem or error header.
            let after = &lines[i + 1..];
            let end = after
                .iter()
                .position(|l| l.starts_with("Error:") || l.contains(" error(s)"))
                .unwrap_or(after.len());
            let block = &after[..end];
            let value = |label: &str| {
                let at = block.iter().position(|l| *l == label)?;
                block[at + 1..].iter().find(|l| !l.is_empty()).copied()
            };
            let item = match (value("Expected:"), value("Found:")) {
                (Some(e), Some(f)) => format!("{problem} (expected {e}, found {f})"),
                _ => problem.to_string(),
            };
            match by_type.iter_mut().find(|(t, _)| *t == current_type) {
                Some((_, items)) => items.push(item),
                None => by_type.push((current_type, vec![item])),
            }
        }
    }
    if by_type.is_empty() {
        return "abi_stable's layout check failed".to_string();
    }
    // A prefix type with more fields than the library's is how the ABI grows
    // (a longer root module or vtable); the real differences go first so the
    // line, cut at 200 characters, shows them.
    by_type.sort_by_key(|(_, items)| items.iter().all(|i| i.starts_with("too many fields")));
    let summary = by_type
        .iter()
        .map(|(t, items)| match t {
            Some(t) => format!("{t}: {}", items.join(", ")),
            None => items.join(", "),
        })
        .collect::<Vec<_>>()
        .join("; ");
    first_line(&summary)
}

#[cfg(test)]
mod tests {
    use super::summarize_layout_error;

    /// The shape of abi_stable 0.11's report, cut down.
    const REPORT: &str = "\
Compared <this>:
    --- Type Layout ---
    type:PrefixRef<'a, PluginMod>
0 error(s).

0 error(s)inside:
    <other>

Layout of expected type:
    --- Type Layout ---
    type:PluginMod
    size:16 align:8

2 error(s)inside:
    <other>

    field_name:0
    type:RequestView<'a>

Layout of expected type:
    --- Type Layout ---
    type:RequestView<'a>
    size:56 align:8
    data:
        Struct with Fields:
            field_name:id
            type:u64

Layout of found type:
    --- Type Layout ---
    type:RequestView<'a>
    size:64 align:8

Error:incompatible type size
Expected:
    56
Found:
    64

Error:too many fields
Expected:
    6
Found:
    7
";

    #[test]
    fn layout_report_is_summarised_as_the_differing_type() {
        assert_eq!(
            summarize_layout_error(REPORT),
            "RequestView<'a>: incompatible type size (expected 56, found 64), \
             too many fields (expected 6, found 7)"
        );
        assert_eq!(
            summarize_layout_error("something else entirely"),
            "abi_stable's layout check failed"
        );
    }
}

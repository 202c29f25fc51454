//! Opening one plugin library from disk and checking it is a compatible blis plugin.

use std::path::Path;

use abi_stable::library::{lib_header_from_path, LibraryError, RootModule};
use blis_plugin_api::PluginModRef;

use super::PluginError;

/// Load the blis root module of the library at `path`.
///
/// The library stays loaded for the rest of the process (policies created
/// from it hold code pointers into it).
pub(super) fn load_root_module(path: &Path) -> Result<PluginModRef, PluginError> {
    if !path.exists() {
        return Err(PluginError::NotFound {
            path: path.to_path_buf(),
        });
    }
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
    header
        .init_root_module::<PluginModRef>()
        .map_err(|e| classify(path, e))
}

/// The API version this host expects of plugins.
pub(super) fn expected_version() -> String {
    PluginModRef::VERSION_STRINGS.version.to_string()
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
        LibraryError::IncompatibleVersionNumber {
            expected_version,
            actual_version,
            ..
        } => PluginError::IncompatibleAbi {
            path,
            expected: expected_version.to_string(),
            found: format!("a library built against blis-plugin-api {actual_version}"),
        },
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

/// Pick the most telling line of an abi_stable layout report: the first
/// line naming an error, else the first line.
fn summarize_layout_error(detail: &str) -> String {
    let pick = detail
        .lines()
        .map(str::trim)
        .find(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("mismatch") || l.contains("error") || l.contains("expected")
        })
        .unwrap_or_else(|| detail.lines().next().unwrap_or(""));
    first_line(pick)
}

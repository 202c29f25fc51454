//! `blis plugins new NAME [--wasm [--lang rust|python]]`: a new plugin
//! project that builds wherever it is created, against exactly the plugin
//! API (native) or the WIT world (WebAssembly) this `blis` was built with.
//!
//! The native crate is the plugin template (`examples/plugin-template`: one
//! policy of every kind, a run file for each) under the new name, with the
//! sources of that `blis-plugin-api` in a sub-folder (a path dependency: no
//! git tag or registry needed) and the template's lock file. `cargo build
//! --offline` works once abi_stable, serde and toml are in cargo's cache;
//! its README says how to vendor them for a machine without network.
//!
//! The WebAssembly project is `examples/wasm-template/{rust,python}` (the
//! same policies, one of every kind) under the new name, with the WIT file
//! (`wit/blis-plugin.wit`), the guest library's sources (`blis-wasm-guest/`
//! or `blis_wasm.py`), a `build.sh` that makes `NAME.wasm`, and the native
//! template's run files pointed at that component.

use std::path::{Path, PathBuf};

/// The API crate's files, as this `blis` was built with them.
const API_FILES: &[(&str, &str)] = &[
    ("build.rs", include_str!("../../../plugin-api/build.rs")),
    ("src/lib.rs", include_str!("../../../plugin-api/src/lib.rs")),
    ("src/abi.rs", include_str!("../../../plugin-api/src/abi.rs")),
    (
        "src/abi_before_decider.rs",
        include_str!("../../../plugin-api/src/abi_before_decider.rs"),
    ),
    (
        "src/abi_before_host.rs",
        include_str!("../../../plugin-api/src/abi_before_host.rs"),
    ),
    (
        "src/abi_before_observer.rs",
        include_str!("../../../plugin-api/src/abi_before_observer.rs"),
    ),
    (
        "src/abi_v0_1.rs",
        include_str!("../../../plugin-api/src/abi_v0_1.rs"),
    ),
    (
        "src/author.rs",
        include_str!("../../../plugin-api/src/author.rs"),
    ),
    (
        "src/events.rs",
        include_str!("../../../plugin-api/src/events.rs"),
    ),
    (
        "src/headers.rs",
        include_str!("../../../plugin-api/src/headers.rs"),
    ),
    (
        "src/host.rs",
        include_str!("../../../plugin-api/src/host.rs"),
    ),
    ("src/log.rs", include_str!("../../../plugin-api/src/log.rs")),
    (
        "src/lora.rs",
        include_str!("../../../plugin-api/src/lora.rs"),
    ),
    (
        "src/session.rs",
        include_str!("../../../plugin-api/src/session.rs"),
    ),
    (
        "src/params.rs",
        include_str!("../../../plugin-api/src/params.rs"),
    ),
    ("src/rng.rs", include_str!("../../../plugin-api/src/rng.rs")),
    (
        "src/testing.rs",
        include_str!("../../../plugin-api/src/testing.rs"),
    ),
    (
        "src/views.rs",
        include_str!("../../../plugin-api/src/views.rs"),
    ),
];

/// The plugin template's lock file: the exact dependency versions a plugin
/// builds with.
const TEMPLATE_LOCK: &str = include_str!("../../../examples/plugin-template/Cargo.lock");

const API_MANIFEST: &str = r#"# The blis plugin API, as the `blis` that wrote this crate was built with it
# (written by `blis plugins new`). Do not edit: it is the plugin ABI.
[package]
name = "blis-plugin-api"
version = "0.2.0"
edition = "2021"
publish = false
build = "build.rs"

[features]
testing = []

[dependencies]
abi_stable = { version = "0.11.3", default-features = false }
serde = { version = "1", features = ["derive"] }
toml = "1"
"#;

fn manifest(name: &str, lib: &str) -> String {
    format!(
        r#"# A blis policy plugin, created by `blis plugins new {name}`.
[package]
name = "{name}"
version = "0.1.0"
edition = "2021"
publish = false

[lib]
# The plugin file: target/release/lib{lib}.so
name = "{lib}"
crate-type = ["cdylib", "rlib"]

[dependencies]
# The exact plugin API of the `blis` that created this crate (plugin ABI
# {abi}), as sources in the folder beside this file.
blis-plugin-api = {{ path = "blis-plugin-api" }}

[dev-dependencies]
# `blis_plugin_api::testing`: views in one line, a short synthetic run.
blis-plugin-api = {{ path = "blis-plugin-api", features = ["testing"] }}

# Keep the default `panic = "unwind"`: blis reports a panic inside a policy as
# an error naming it. (`export_plugin!` refuses to compile with "abort".)

# Its own workspace: it builds the same wherever it is.
[workspace]
"#,
        abi = blis_plugin_api::ABI_VERSION
    )
}

/// The plugin template's files (`examples/plugin-template`): one policy of
/// every kind and a run file for each, written with the crate's names.
const TEMPLATE_FILES: &[(&str, &str)] = &[
    (
        "src/lib.rs",
        include_str!("../../../examples/plugin-template/src/lib.rs"),
    ),
    (
        "src/kinds.rs",
        include_str!("../../../examples/plugin-template/src/kinds.rs"),
    ),
    (
        "example.toml",
        include_str!("../../../examples/plugin-template/example.toml"),
    ),
    (
        "runs/profile.toml",
        include_str!("../../../examples/plugin-template/runs/profile.toml"),
    ),
    (
        "runs/router.toml",
        include_str!("../../../examples/plugin-template/runs/router.toml"),
    ),
    (
        "runs/autoscaler.toml",
        include_str!("../../../examples/plugin-template/runs/autoscaler.toml"),
    ),
    (
        "runs/pd.toml",
        include_str!("../../../examples/plugin-template/runs/pd.toml"),
    ),
];

/// A template file with the template's names replaced by the crate's.
fn from_template(text: &str, name: &str) -> String {
    text.replace("my-blis-plugin", name)
        .replace("my_blis_plugin", &lib_name(name))
}

fn readme(name: &str) -> String {
    let lib = lib_name(name);
    format!(
        r#"# {name} — a blis policy plugin

Written by `blis plugins new {name}` (plugin ABI {abi}). `src/lib.rs` has the
scorer `queue-aware-load` and the admission policy `max-queue`;
`src/kinds.rs` has one small policy of every other kind: the router
`least-queued`, the filter `kv-below`, the picker `random-best`, the scorer
`fewest-in-flight` (reads the 0.2 cluster state), the scheduler
`shortest-prompt`, the preemption policy `youngest`, the autoscaler
`queue-per-instance`, the P/D decider `long-uncached` and the observer
`completion-log` (lifecycle events and the end of the run only).
`blis-plugin-api/` is the exact plugin API of the `blis` that wrote this
crate: keep it as it is.

## Build

    cargo build --release
    cargo test

The plugin is `target/release/lib{lib}.so`. The build needs the crates in
`Cargo.lock` (abi_stable, serde, toml and theirs): cargo downloads them the
first time, or finds them in its cache (`cargo build --offline` then works).

### On a machine without network

`--offline` only helps when the crates are already in cargo's cache. For a
machine that never had them, vendor them on a connected machine, in this
folder:

    cargo vendor

It copies every dependency into `vendor/` and prints a few lines for
`.cargo/config.toml`; write them into `.cargo/config.toml` in this folder,
then copy the whole folder (with `vendor/` and `.cargo/`) to the offline
machine, where `cargo build --release --offline` builds it.

## Run it

    blis plugins list --plugin target/release/lib{lib}.so
    blis run example.toml
    blis run runs/profile.toml --plugin target/release/lib{lib}.so
    blis run runs/router.toml --plugin target/release/lib{lib}.so
    blis run runs/autoscaler.toml --plugin target/release/lib{lib}.so
    blis run runs/pd.toml --plugin target/release/lib{lib}.so

`runs/profile.toml` uses the admission policy, the filter, both scorers,
the picker, the scheduler, the preemption policy and the observer;
`runs/router.toml` the router, `runs/autoscaler.toml` the autoscaler and
`runs/pd.toml` the decider. Each policy's parameters: `blis plugins show
NAME --plugin target/release/lib{lib}.so`.

## Rules

Policies are deterministic: randomness only from the `seed` given to
`create` (`blis_plugin_api::Rng`), no clock, no environment. Keep the
default `panic = "unwind"`: blis reports a panic inside a policy as one line
naming it. Rename the library in `export_plugin!` if another loaded library
has the same name.
"#,
        abi = blis_plugin_api::ABI_VERSION
    )
}

/// The library (file) name of crate `name`.
fn lib_name(name: &str) -> String {
    name.replace('-', "_")
}

/// Check `name` is a usable crate name.
fn check_name(name: &str) -> Result<(), String> {
    let ok = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && name != "blis-plugin-api";
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{name}' is not a usable plugin crate name: use letters, digits, '-' and '_', starting with a letter (e.g. my-scorer)"
        ))
    }
}

/// The folder `dir/name` of a new project: `name` is a usable crate name
/// and the folder does not exist yet.
fn new_root(dir: &Path, name: &str) -> Result<PathBuf, String> {
    check_name(name)?;
    let root = dir.join(name);
    if root.exists() {
        return Err(format!(
            "{} already exists; choose another name or remove it",
            root.display()
        ));
    }
    Ok(root)
}

/// Create the crate in folder `dir/name`; returns the folder.
pub fn create(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let root = new_root(dir, name)?;
    let lock = TEMPLATE_LOCK.replace("name = \"my-blis-plugin\"", &format!("name = \"{name}\""));
    let mut files: Vec<(PathBuf, String)> = vec![
        (root.join("Cargo.toml"), manifest(name, &lib_name(name))),
        (root.join("Cargo.lock"), lock),
        (root.join("README.md"), readme(name)),
        (root.join(".gitignore"), "/target\n".to_string()),
        (
            root.join("blis-plugin-api/Cargo.toml"),
            API_MANIFEST.to_string(),
        ),
    ];
    for (path, text) in TEMPLATE_FILES {
        files.push((root.join(path), from_template(text, name)));
    }
    for (path, text) in API_FILES {
        files.push((root.join("blis-plugin-api").join(path), text.to_string()));
    }
    write_files(&files)?;
    Ok(root)
}

/// Write every file (creating its folders) through `output::write_atomic`.
fn write_files(files: &[(PathBuf, String)]) -> Result<(), String> {
    for (path, text) in files {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        crate::output::write_atomic(path, text.as_bytes())?;
    }
    Ok(())
}

/// The WIT world the WebAssembly project is written against.
pub const WIT_WORLD: &str = "blis:plugin@0.1.2";

/// The WIT file, as this `blis` was built with it.
const WIT_FILE: &str = include_str!("../../../wit/blis-plugin.wit");

/// The Rust guest library's files (`guests/rust/blis-wasm-guest`).
const GUEST_FILES: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../../../guests/rust/blis-wasm-guest/Cargo.toml"),
    ),
    (
        "src/lib.rs",
        include_str!("../../../guests/rust/blis-wasm-guest/src/lib.rs"),
    ),
    (
        "src/author.rs",
        include_str!("../../../guests/rust/blis-wasm-guest/src/author.rs"),
    ),
    (
        "src/lora.rs",
        include_str!("../../../guests/rust/blis-wasm-guest/src/lora.rs"),
    ),
    (
        "src/request.rs",
        include_str!("../../../guests/rust/blis-wasm-guest/src/request.rs"),
    ),
    (
        "src/params.rs",
        include_str!("../../../guests/rust/blis-wasm-guest/src/params.rs"),
    ),
    (
        "src/rng.rs",
        include_str!("../../../guests/rust/blis-wasm-guest/src/rng.rs"),
    ),
    (
        "src/rt.rs",
        include_str!("../../../guests/rust/blis-wasm-guest/src/rt.rs"),
    ),
    (
        "src/views.rs",
        include_str!("../../../guests/rust/blis-wasm-guest/src/views.rs"),
    ),
];

/// The Rust WebAssembly template (`examples/wasm-template/rust`).
const WASM_RUST_FILES: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../../../examples/wasm-template/rust/Cargo.toml"),
    ),
    (
        "src/lib.rs",
        include_str!("../../../examples/wasm-template/rust/src/lib.rs"),
    ),
    (
        "src/kinds.rs",
        include_str!("../../../examples/wasm-template/rust/src/kinds.rs"),
    ),
    (
        "build.sh",
        include_str!("../../../examples/wasm-template/rust/build.sh"),
    ),
];

/// The Python WebAssembly template (`examples/wasm-template/python`).
const WASM_PYTHON_FILES: &[(&str, &str)] = &[
    (
        "app.py",
        include_str!("../../../examples/wasm-template/python/app.py"),
    ),
    (
        "build.sh",
        include_str!("../../../examples/wasm-template/python/build.sh"),
    ),
    (
        "blis_wasm.py",
        include_str!("../../../guests/python/blis_wasm.py"),
    ),
];

/// A template file for a WebAssembly project: the template's names
/// replaced by the project's, the plugin file by the component.
fn from_wasm_template(text: &str, name: &str) -> String {
    text.replace(
        "target/release/libmy_blis_plugin.so",
        &format!("{name}.wasm"),
    )
    .replace("#   cargo build --release\n", "#   ./build.sh\n")
    .replace(
        "folder of this file, so this is the release build of this crate. Change it if\n# you build with another CARGO_TARGET_DIR, or add `--plugin PATH` to `blis run`.",
        "folder of this file, so this is the component ./build.sh writes. Change it to\n# load another, or add `--plugin PATH` to `blis run`.",
    )
    .replace("\"../../../guests/rust/blis-wasm-guest\"", "\"blis-wasm-guest\"")
    .replace(
        "# blis-wasm-guest (author traits, views, export macro). `blis plugins new\n# --wasm` writes its sources beside the crate as `blis-wasm-guest/`.",
        "# blis-wasm-guest (author traits, views, export macro), as sources in the\n# folder beside this file, written by `blis plugins new --wasm`.",
    )
    .replace("my-blis-plugin", name)
    .replace("my_blis_plugin", &lib_name(name))
}

fn wasm_readme(name: &str, lang: super::WasmLang) -> String {
    let (intro, build, files, offline) = match lang {
        super::WasmLang::Rust => (
            "a Rust crate built for `wasm32-unknown-unknown`",
            "`./build.sh` runs `cargo build --release --target wasm32-unknown-unknown`\n\
             (a core module), then `wasm-tools component embed wit/blis-plugin.wit\n\
             --world plugin` and `wasm-tools component new`. It needs a rustc with the\n\
             wasm32-unknown-unknown standard library — `rustup target add\n\
             wasm32-unknown-unknown`, or on Debian `apt-get install rustc cargo\n\
             libstd-rust-dev-wasm32 lld` (Rust ≥ 1.63) — and wasm-tools (`cargo\n\
             install wasm-tools --locked`).",
            "`src/lib.rs` has the scorer `queue-aware-load` and the admission policy\n\
             `max-queue`; `src/kinds.rs` has one small policy of every other kind",
            "The crate depends on nothing but `blis-wasm-guest/` (a path), so it builds\n\
             without network, with an empty cargo cache too. If you add crates from\n\
             crates.io, vendor them for a machine without network: run `cargo vendor`\n\
             here on a connected machine, write the lines it prints into\n\
             `.cargo/config.toml` in this folder, and copy the whole folder (with\n\
             `vendor/` and `.cargo/`) to the offline machine, where `./build.sh`\n\
             then builds it (add `--offline` to its cargo command to be sure).",
        ),
        super::WasmLang::Python => (
            "a Python module built with componentize-py",
            "`./build.sh` runs `componentize-py -d wit/blis-plugin.wit -w plugin\n\
             componentize app -p . -o NAME.wasm` (the component embeds CPython: about\n\
             40 MB, built in about a minute). It needs componentize-py (`pip install\n\
             componentize-py`; `COMPONENTIZE_PY=PATH ./build.sh` when it is not on\n\
             PATH).",
            "`app.py` has the scorer `queue-aware-load`, the admission policy\n\
             `max-queue` and one small policy of every other kind",
            "componentize-py needs no network once installed; the module may import\n\
             only the standard library and modules in this folder (add a folder of\n\
             pure-Python packages with another `-p DIR`). For a machine without\n\
             network, `pip download componentize-py` on a connected one and `pip\n\
             install --no-index` the wheel on the offline one.",
        ),
    };
    let build = build.replace("NAME", name);
    let guest = match lang {
        super::WasmLang::Rust => "`blis-wasm-guest/` is the guest library (author traits, views, the\n`export_plugin!` macro)",
        super::WasmLang::Python => "`blis_wasm.py` is the guest library (base classes, views, `export`)",
    };
    format!(
        r#"# {name} — blis policies as a WebAssembly component

Written by `blis plugins new {name} --wasm`: {intro}, built into one
portable, sandboxed file, `{name}.wasm`, that any `blis` loads (world
`{world}`). {files}: the router `least-queued`, the filter `kv-below`, the
picker `random-best`, the scorer `fewest-in-flight` (reads the 0.2 cluster
state), the scheduler `shortest-prompt`, the preemption policy `youngest`,
the autoscaler `queue-per-instance`, the P/D decider `long-uncached` and the
observer `completion-log` (lifecycle events and the end of the run only).
`wit/blis-plugin.wit` is the WIT world of the `blis` that wrote this
project and {guest}: keep them as they are.

## Build

    ./build.sh

{build}

### On a machine without network

{offline}

## Run it

    blis plugins list --plugin {name}.wasm
    blis run example.toml
    blis run runs/profile.toml --plugin {name}.wasm
    blis run runs/router.toml --plugin {name}.wasm
    blis run runs/autoscaler.toml --plugin {name}.wasm
    blis run runs/pd.toml --plugin {name}.wasm

`runs/profile.toml` uses the admission policy, the filter, both scorers,
the picker, the scheduler, the preemption policy and the observer;
`runs/router.toml` the router, `runs/autoscaler.toml` the autoscaler and
`runs/pd.toml` the decider. Each policy's parameters: `blis plugins show
NAME --plugin {name}.wasm`.

## Rules

The component gets nothing but the world's `host` interface: no files,
network, environment or clock, and randomness only from the `seed` each
policy is created with — so a run with it is reproducible byte for byte.
Every call runs under a fuel budget and the instance under a memory cap
(`fuel_per_call`, `max_memory_mib` in the run file's `[[plugins]]` entry); a
trap, an exception or running out of either is one error line naming the
library, the policy, the call and the request. Rename the library (in the
export at the bottom of the source) if another loaded library has the same
name.
"#,
        world = WIT_WORLD,
    )
}

/// Create the WebAssembly project in folder `dir/name`; returns the folder.
pub fn create_wasm(dir: &Path, name: &str, lang: super::WasmLang) -> Result<PathBuf, String> {
    if name == "blis-wasm-guest" || name == "blis_wasm" {
        return Err(format!(
            "'{name}' is the name of blis's guest library; choose another name (e.g. my-scorer)"
        ));
    }
    let root = new_root(dir, name)?;
    let mut files: Vec<(PathBuf, String)> = vec![
        (root.join("README.md"), wasm_readme(name, lang)),
        (root.join("wit/blis-plugin.wit"), WIT_FILE.to_string()),
    ];
    match lang {
        super::WasmLang::Rust => {
            files.push((root.join(".gitignore"), format!("/target\n/{name}.wasm\n")));
            for (path, text) in WASM_RUST_FILES {
                files.push((root.join(path), from_wasm_template(text, name)));
            }
            for (path, text) in GUEST_FILES {
                // A member of the project's workspace, not a workspace of its own.
                let text = text.replace(
                    "# Not part of the blis workspace: it is built for wasm32 by guest crates.\n[workspace]\n",
                    "",
                );
                files.push((root.join("blis-wasm-guest").join(path), text));
            }
        }
        super::WasmLang::Python => {
            files.push((
                root.join(".gitignore"),
                format!("__pycache__\n/{name}.wasm\n"),
            ));
            for (path, text) in WASM_PYTHON_FILES {
                files.push((root.join(path), from_wasm_template(text, name)));
            }
        }
    }
    for (path, text) in TEMPLATE_FILES {
        if path.starts_with("src/") {
            continue;
        }
        files.push((root.join(path), from_wasm_template(text, name)));
    }
    write_files(&files)?;
    make_executable(&root.join("build.sh"))?;
    Ok(root)
}

/// Add the execute bits to `path` where it has read bits (the umask kept).
fn make_executable(path: &Path) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta =
            std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mode = meta.permissions().mode();
        std::fs::set_permissions(
            path,
            std::fs::Permissions::from_mode(mode | ((mode & 0o444) >> 2)),
        )
        .map_err(|e| format!("cannot make {} executable: {e}", path.display()))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every source file of the API crate is written into a new plugin.
    #[test]
    fn every_api_source_file_is_embedded() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin-api/src");
        for entry in std::fs::read_dir(&src).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let rel = format!("src/{name}");
            assert!(
                API_FILES.iter().any(|(p, _)| *p == rel),
                "{rel} is missing from scaffold::API_FILES"
            );
        }
    }

    /// Every source file of the Rust guest library and of the WebAssembly
    /// templates is written into a new WebAssembly project.
    #[test]
    fn every_wasm_guest_and_template_file_is_embedded() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let listed = |dir: &str, files: &[(&str, &str)]| {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    continue;
                }
                let name = entry.file_name().into_string().unwrap();
                let rel = match dir.rsplit_once('/') {
                    Some((_, "src")) => format!("src/{name}"),
                    _ => name,
                };
                if rel == "Cargo.lock" || rel.ends_with(".pyc") {
                    continue;
                }
                assert!(
                    files.iter().any(|(p, _)| *p == rel),
                    "{dir}/{rel} is missing from the scaffold's file lists"
                );
            }
        };
        listed("guests/rust/blis-wasm-guest", GUEST_FILES);
        listed("guests/rust/blis-wasm-guest/src", GUEST_FILES);
        listed("examples/wasm-template/rust", WASM_RUST_FILES);
        listed("examples/wasm-template/rust/src", WASM_RUST_FILES);
        listed("examples/wasm-template/python", WASM_PYTHON_FILES);
        assert!(WIT_FILE.contains(&format!("package {WIT_WORLD};")));
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("my-scorer").is_ok());
        assert!(check_name("x_1").is_ok());
        for bad in ["", "1x", "a b", "a/b", "blis-plugin-api", "../x"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert!(TEMPLATE_LOCK.contains("name = \"my-blis-plugin\""));
        assert!(TEMPLATE_LOCK.contains("name = \"blis-plugin-api\"\nversion = \"0.2.0\""));
    }
}

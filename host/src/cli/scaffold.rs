//! `blis plugins new NAME`: a new plugin crate that builds wherever it is
//! created, against exactly the plugin API this `blis` was built with.
//!
//! The crate is the plugin template (`examples/plugin-template`: one policy
//! of every kind, a run file for each) under the new name, with the sources
//! of that `blis-plugin-api` in a sub-folder (a path dependency: no git tag
//! or registry needed) and the template's lock file. `cargo build
//! --offline` works once abi_stable, serde and toml are in cargo's cache;
//! its README says how to vendor them for a machine without network.

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
    ("src/log.rs", include_str!("../../../plugin-api/src/log.rs")),
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

/// Create the crate in folder `dir/name`; returns the folder.
pub fn create(dir: &Path, name: &str) -> Result<PathBuf, String> {
    check_name(name)?;
    let root = dir.join(name);
    if root.exists() {
        return Err(format!(
            "{} already exists; choose another name or remove it",
            root.display()
        ));
    }
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
    for (path, text) in &files {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(root)
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

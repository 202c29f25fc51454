//! `blis plugins new NAME`: a new plugin crate that builds wherever it is
//! created, against exactly the plugin API this `blis` was built with.
//!
//! The crate gets the sources of that `blis-plugin-api` in a sub-folder (a
//! path dependency: no git tag or registry needed) and the lock file of the
//! plugin template, so `cargo build --offline` works once abi_stable, serde
//! and toml are in cargo's cache.

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

fn lib_rs(name: &str) -> String {
    format!(
        r#"//! # {name} — a blis policy plugin
//!
//! One scorer, `least-waiting`, to edit. Build with `cargo build --release`,
//! then `blis plugins list --plugin target/release/lib{lib}.so`.

use blis_plugin_api::serde::Deserialize;
use blis_plugin_api::{{export_plugin, ClusterView, Params, PolicyDef, RequestView, Scorer, Scores}};

#[derive(Deserialize)]
#[serde(crate = "blis_plugin_api::serde", deny_unknown_fields)]
struct LeastWaitingParams {{
    #[serde(default = "default_pending_weight")]
    pending_weight: f64,
}}

fn default_pending_weight() -> f64 {{
    1.0
}}

/// `1 / (1 + queue depth + pending_weight × pending requests)`.
pub struct LeastWaiting {{
    pending_weight: f64,
}}

impl PolicyDef for LeastWaiting {{
    const NAME: &'static str = "least-waiting";
    const SUMMARY: &'static str = "1 / (1 + queued + pending_weight × pending)";
    const PARAMS_DOC: &'static str =
        "pending_weight  (float ≥ 0, default 1.0)  cost of a request routed but not yet queued.";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {{
        let p: LeastWaitingParams = params.parse()?;
        if !(p.pending_weight.is_finite() && p.pending_weight >= 0.0) {{
            return Err(format!("params.pending_weight = {{}}: must be ≥ 0", p.pending_weight));
        }}
        Ok(LeastWaiting {{
            pending_weight: p.pending_weight,
        }})
    }}
}}

impl Scorer for LeastWaiting {{
    fn score(&mut self, _: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {{
        for s in cluster.instances() {{
            let waiting = f64::from(s.queue_depth) + self.pending_weight * f64::from(s.pending_requests);
            scores.push(1.0 / (1.0 + waiting));
        }}
    }}
}}

export_plugin! {{
    library: "{name}",
    admission: [],
    routers: [],
    scorers: [LeastWaiting],
}}

#[cfg(test)]
mod tests {{
    use super::*;
    use blis_plugin_api::testing::{{Fixture, SyntheticRun}};

    #[test]
    fn prefers_the_instance_with_the_shortest_queue() {{
        let f = Fixture::idle(3).queue_depths(&[4, 0, 1]);
        let mut s = LeastWaiting::create(Params::new(""), 0).unwrap();
        let mut scores = Scores::new();
        s.score(&f.request(1), &f.view(), &mut scores);
        assert_eq!(scores.as_slice(), &[0.2, 1.0, 0.5]);
        // Queues stay empty in the synthetic run: every score is 1, ties to 0.
        let run = SyntheticRun::new(3, 4).run_scorer(&mut s, 30);
        assert_eq!(run.per_instance, vec![30, 0, 0]);
    }}
}}
"#,
        lib = lib_name(name)
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
        (root.join("src/lib.rs"), lib_rs(name)),
        (root.join(".gitignore"), "/target\n".to_string()),
        (
            root.join("blis-plugin-api/Cargo.toml"),
            API_MANIFEST.to_string(),
        ),
    ];
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

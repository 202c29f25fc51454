//! Test helpers: the workspace artifacts the tests need (fixture plugin
//! libraries, `libblis_std`, the `blis` binary), a fresh temp dir per test,
//! and a `Command` for the real `blis`.
//!
//! `cargo test` builds only what the test binary links, not the fixture
//! `cdylib`s nor the `blis` binary of another package. So the first test
//! that needs them runs `cargo build -p …` once per test process
//! ([`artifacts`]), into the *same* target dir and profile this test binary
//! was built with (read from the path of the running executable), so nothing
//! is built twice and `cargo test --release` tests release builds.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The packages the tests load or run, built by [`artifacts`].
const PACKAGES: &[&str] = &[
    "fixture-alpha",
    "fixture-beta",
    "fixture-abi-mismatch",
    "fixture-not-a-plugin",
    "fixture-plugin-v0-1",
    "fixture-plugin-v0-2",
    "fixture-plugin-v0-2-before-decider",
    "fixture-plugin-v0-2-before-observer",
    "fixture-plugin-v0-2-before-host",
    "fixture-pipeline",
    "fixture-autoscaler",
    "fixture-decider",
    "blis-std",
    "blis-host",
    "blis-p2c-router",
];

/// Paths of the built artifacts.
#[derive(Debug)]
pub struct Artifacts {
    /// `target/<profile>`, where cargo puts the final artifacts.
    profile_dir: PathBuf,
}

impl Artifacts {
    /// The shared library of the crate whose `[lib] name` is `lib_name`
    /// (e.g. `fixture_alpha` → `…/libfixture_alpha.so` on Linux).
    pub fn library(&self, lib_name: &str) -> PathBuf {
        self.profile_dir.join(format!(
            "{}{lib_name}{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ))
    }

    /// The `fixture-alpha` plugin library.
    pub fn alpha(&self) -> PathBuf {
        self.library("fixture_alpha")
    }

    /// The `fixture-beta` plugin library.
    pub fn beta(&self) -> PathBuf {
        self.library("fixture_beta")
    }

    /// The plugin built against a changed copy of the ABI.
    pub fn abi_mismatch(&self) -> PathBuf {
        self.library("fixture_abi_mismatch")
    }

    /// A shared library that is not a blis plugin.
    pub fn not_a_plugin(&self) -> PathBuf {
        self.library("fixture_not_a_plugin")
    }

    /// The compat policies built against the frozen ABI 0.1 API.
    pub fn compat_v0_1(&self) -> PathBuf {
        self.library("fixture_plugin_v0_1")
    }

    /// The same policies built against the current API.
    pub fn compat_v0_2(&self) -> PathBuf {
        self.library("fixture_plugin_v0_2")
    }

    /// The compat policies built against ABI 0.2 as it was before the
    /// decider kind (no `create_decider` in the root module).
    pub fn compat_before_decider(&self) -> PathBuf {
        self.library("fixture_plugin_v0_2_before_decider")
    }

    /// The compat policies built against ABI 0.2 as it was before the
    /// observer kind (no `create_observer`).
    pub fn compat_before_observer(&self) -> PathBuf {
        self.library("fixture_plugin_v0_2_before_observer")
    }

    /// The compat policies built against ABI 0.2 as it was before the
    /// host's query table (no `set_host`).
    pub fn compat_before_host(&self) -> PathBuf {
        self.library("fixture_plugin_v0_2_before_host")
    }

    /// A third-party P/D decider disaggregating long prompts (ABI 0.2 kind 7).
    pub fn decider(&self) -> PathBuf {
        self.library("fixture_decider")
    }

    /// A third-party autoscaler scaling on queue depth (ABI 0.2 kind 8).
    pub fn autoscaler(&self) -> PathBuf {
        self.library("fixture_autoscaler")
    }

    /// Third-party ABI 0.2 policies: a filter, a picker, a hooked scorer.
    pub fn pipeline(&self) -> PathBuf {
        self.library("fixture_pipeline")
    }

    /// The standard library `blis-std`, as a loadable file.
    pub fn blis_std(&self) -> PathBuf {
        self.library("blis_std")
    }

    /// The p2c router example plugin.
    pub fn p2c(&self) -> PathBuf {
        self.library("blis_p2c_router")
    }

    /// The target dir (for builds of crates outside the workspace).
    pub fn target_dir(&self) -> &Path {
        self.profile_dir.parent().expect("profile dir has a parent")
    }

    /// The profile folder name (`debug` or `release`).
    pub fn profile_dir(&self) -> &Path {
        &self.profile_dir
    }

    /// The `blis` executable: the one built from this tree, or the one
    /// `BLIS_TEST_BLIS` names (to see a regression test fail on an older
    /// build: `BLIS_TEST_BLIS=/tmp/old-blis cargo test -p blis-tests NAME`).
    pub fn blis(&self) -> PathBuf {
        if let Some(p) = std::env::var_os("BLIS_TEST_BLIS") {
            return PathBuf::from(p);
        }
        self.profile_dir
            .join(format!("blis{}", std::env::consts::EXE_SUFFIX))
    }
}

/// Build the artifacts (once per test process) and return their paths.
///
/// Panics with cargo's output if the build fails (every test that needs the
/// artifacts then fails with the same message).
pub fn artifacts() -> &'static Artifacts {
    static ARTIFACTS: OnceLock<Result<Artifacts, String>> = OnceLock::new();
    match ARTIFACTS.get_or_init(build_artifacts) {
        Ok(a) => a,
        Err(e) => panic!("{e}"),
    }
}

fn build_artifacts() -> Result<Artifacts, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    // The test binary is `<target dir>/<profile dir>/deps/integration-<hash>`.
    let profile_dir = exe
        .parent()
        .filter(|d| d.file_name().is_some_and(|n| n == "deps"))
        .and_then(Path::parent)
        .ok_or_else(|| {
            format!(
                "cannot find the target dir: expected the test binary in <target>/<profile>/deps, found {}",
                exe.display()
            )
        })?
        .to_path_buf();
    let profile_name = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("bad profile dir {}", profile_dir.display()))?
        .to_string();
    let target_dir = profile_dir
        .parent()
        .ok_or_else(|| format!("no target dir above {}", profile_dir.display()))?;

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace root");
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(workspace).arg("build").arg("--quiet");
    for p in PACKAGES {
        cmd.args(["-p", p]);
    }
    cmd.arg("--target-dir").arg(target_dir);
    // `debug` is the dev profile's folder (and the test profile's);
    // `release` is the release profile's (and the bench profile's).
    match profile_name.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cargo:?} build: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "building the test artifacts failed ({:?}, {}):\n{}",
            cmd,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let artifacts = Artifacts { profile_dir };
    for p in [
        artifacts.alpha(),
        artifacts.beta(),
        artifacts.abi_mismatch(),
        artifacts.not_a_plugin(),
        artifacts.compat_v0_1(),
        artifacts.compat_v0_2(),
        artifacts.compat_before_decider(),
        artifacts.compat_before_observer(),
        artifacts.compat_before_host(),
        artifacts.pipeline(),
        artifacts.decider(),
        artifacts.blis_std(),
        artifacts.blis(),
    ] {
        if !p.is_file() {
            return Err(format!(
                "cargo build succeeded but {} does not exist",
                p.display()
            ));
        }
    }
    Ok(artifacts)
}

/// A fresh, empty directory for one test, under cargo's per-target temp dir
/// (`target/tmp`). It is emptied when created, not when dropped, so a failed
/// test's files stay there to look at.
#[derive(Debug)]
pub struct TestDir {
    path: PathBuf,
}

impl TestDir {
    /// A fresh directory named after the test.
    pub fn new(test_name: &str) -> TestDir {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("blis-tests")
            .join(test_name);
        if path.exists() {
            std::fs::remove_dir_all(&path)
                .unwrap_or_else(|e| panic!("cannot empty {}: {e}", path.display()));
        }
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TestDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write `contents` to `name` inside the directory and return its path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.path.join(name);
        std::fs::write(&p, contents)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", p.display()));
        p
    }

    /// A command running the real `blis` in this directory, with the
    /// backtrace variables removed so the output does not depend on the
    /// caller's environment.
    pub fn blis(&self) -> Command {
        let mut cmd = Command::new(artifacts().blis());
        cmd.current_dir(&self.path)
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE");
        cmd
    }
}

/// Run the real `blis` in `dir` on input it must accept: exit 0 (the
/// assertion message carries stderr). Returns the whole output.
pub fn run_ok(dir: &TestDir, args: &[&str]) -> std::process::Output {
    let o = dir.blis().args(args).output().expect("run blis");
    assert!(
        o.status.success(),
        "blis {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Run the real `blis` in `dir` on input it must refuse: exit code 2,
/// nothing on stdout, no panic or backtrace, a short error (at most 12
/// lines). Returns the error text for the caller to check what it names.
pub fn run_bad(dir: &TestDir, args: &[&str]) -> String {
    let o = dir.blis().args(args).output().expect("run blis");
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "blis {args:?}: {e}");
    assert!(
        o.stdout.is_empty(),
        "blis {args:?}: nothing on stdout on error"
    );
    assert!(
        !e.contains("panicked") && !e.contains("stack backtrace"),
        "{e}"
    );
    assert!(e.lines().count() <= 12, "short error:\n{e}");
    e
}

/// A measurements table `dir/m.csv` for `blis calibrate fit`: each run
/// file's mean TTFT, E2E and ITL as `blis run` gives them, × `factor` (a
/// cluster that much slower than the defaults).
pub fn slower_measurements(dir: &TestDir, run_files: &[&str], factor: f64) {
    let mut csv = String::from("run_file,metric,value\n");
    for f in run_files {
        let o = run_ok(dir, &["run", f, "--quiet"]);
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        for m in ["ttft_mean_ms", "e2e_mean_ms", "itl_mean_ms"] {
            let v = r["cluster"][m].as_f64().unwrap() * factor;
            csv.push_str(&format!("{f},{m},{v}\n"));
        }
    }
    dir.write("m.csv", &csv);
}

/// `calibrate fit --measurements m.csv --out p.toml` and then `extra`: a
/// fit of the table [`slower_measurements`] writes.
pub fn fit_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "calibrate",
        "fit",
        "--measurements",
        "m.csv",
        "--out",
        "p.toml",
    ];
    args.extend_from_slice(extra);
    args
}

/// `blis` with `args` in `dir`: (exit code, stdout, stderr).
pub fn blis_in(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(artifacts().blis())
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run blis");
    code_out_err(&out)
}

/// A finished command's (exit code, stdout, stderr), the streams as text.
pub fn code_out_err(out: &std::process::Output) -> (Option<i32>, String, String) {
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

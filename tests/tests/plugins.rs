//! Plugin libraries on real `.so` files: every promise of the plugin ABI
//! (design.md, "Plugin ABI") checked through the host's public API —
//! `blis_host::plugins::Registry` and its validated policy handles — and,
//! for the panic report, through the real `blis` executable.
//!
//! The fixtures live in `tests/fixtures/`: `fixture-alpha` (good and
//! misbehaving policies), `fixture-beta` (a second library with a clashing
//! name), `fixture-abi-mismatch` (a changed `RequestView`) and
//! `fixture-not-a-plugin` (a plain C library).

use std::path::{Path, PathBuf};

use blis_host::plugins::registry::Added;
use blis_host::plugins::{Origin, PluginError, Registry};
use blis_plugin_api::abi_stable::std_types::{RSlice, RStr};
use blis_plugin_api::{ClusterView, InstanceSnapshot, KindCode, PolicyKind, RequestView, SloClass};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::util::{artifacts, blis_in, TestDir};

// ---------------------------------------------------------------- helpers

fn request(id: u64, hashes: &[u64]) -> RequestView<'_> {
    RequestView {
        id,
        arrival_us: 0,
        input_tokens: 64,
        slo_class: SloClass::STANDARD,
        tenant: RStr::from(""),
        block_hashes: RSlice::from_slice(hashes),
    }
}

fn cluster(snaps: &[InstanceSnapshot]) -> ClusterView<'_> {
    ClusterView {
        clock_us: 0,
        instances: RSlice::from_slice(snaps),
    }
}

/// `n` idle instances.
fn idle(n: usize) -> Vec<InstanceSnapshot> {
    vec![InstanceSnapshot::default(); n]
}

/// An empty registry with the given files loaded, each a new library.
fn registry_with(paths: &[PathBuf]) -> Registry {
    let mut reg = Registry::empty();
    for p in paths {
        match reg.load(p) {
            Ok(added) => eqnice!(Added::New, added),
            Err(e) => panic!("loading {} failed:\n{e}", p.display()),
        }
    }
    reg
}

/// The scores of scorer `spec` of `reg` for `n` idle instances.
fn scores_of(reg: &Registry, spec: &str, n: usize) -> Vec<f64> {
    let mut s = reg
        .scorer(spec, "", 0)
        .unwrap_or_else(|e| panic!("creating scorer {spec}: {e}"));
    let snaps = idle(n);
    let out = s
        .score(&request(1, &[]), &cluster(&snaps))
        .unwrap_or_else(|e| panic!("scorer {spec}: {e}"));
    out.to_vec()
}

/// The error of loading `path` into a fresh standard registry, which must be
/// left as it was.
fn load_error(path: &Path) -> PluginError {
    let mut reg = Registry::standard();
    let before = reg.libraries().len();
    let err = match reg.load(path) {
        Ok(added) => panic!("loading {} succeeded ({added:?})", path.display()),
        Err(e) => e,
    };
    eqnice!(before, reg.libraries().len());
    err
}

/// Checks every load error must pass: short, names the file, says what was
/// expected and what was found.
fn assert_short_load_error(text: &str, path: &Path) {
    let lines = text.lines().count();
    assert!(
        lines < 10 && text.len() < 1200,
        "a load error must be a short paragraph, got {lines} lines / {} bytes:\n{text}",
        text.len()
    );
    assert_contains!(text, path.display().to_string(), "Expected", "Found");
}

// ------------------------------------------------ 1. a scorer from disk

/// A scorer of a library loaded from disk is called through the ABI and
/// its own answer comes back.
#[test]
fn scorer_from_loaded_library_is_called_through_the_abi() {
    let alpha = artifacts().alpha();
    let reg = registry_with(std::slice::from_ref(&alpha));

    let libs = reg.libraries();
    eqnice!(1, libs.len());
    eqnice!("fixture-alpha", libs[0].name.as_str());
    eqnice!(Origin::File(alpha.canonicalize().unwrap()), libs[0].origin);

    let mut s = reg.scorer("prefer-first", "", 0).unwrap();
    eqnice!("fixture-alpha", s.label().library.as_str());
    let snaps = idle(4);
    let got = s
        .score(&request(1, &[]), &cluster(&snaps))
        .unwrap()
        .to_vec();
    eqnice!(vec![1.0, 0.0, 0.0, 0.0], got);
    // The host buffer is reused: a second call with another size is exact too.
    let snaps = idle(2);
    let got = s
        .score(&request(2, &[]), &cluster(&snaps))
        .unwrap()
        .to_vec();
    eqnice!(vec![1.0, 0.0], got);
}

// --------------------------------------------- 2. two libraries at once

/// Two libraries loaded in one process each run their own code (abi_stable's
/// `load_from_file` would have returned alpha for beta's path).
#[test]
fn two_libraries_in_one_process_each_run_their_own_code() {
    let a = artifacts();
    let reg = registry_with(&[a.alpha(), a.beta()]);
    let names: Vec<&str> = reg.libraries().iter().map(|l| l.name.as_str()).collect();
    eqnice!(vec!["fixture-alpha", "fixture-beta"], names);

    eqnice!(
        vec![1.0, 0.0, 0.0, 0.0],
        scores_of(&reg, "fixture-alpha::prefer-first", 4)
    );
    eqnice!(vec![0.0, 0.0, 0.0, 1.0], scores_of(&reg, "prefer-last", 4));
    eqnice!(
        vec![0.5, 0.5, 0.5, 0.5],
        scores_of(&reg, "fixture-beta::prefer-first", 4)
    );
    eqnice!(
        vec![0.0, 0.0, 0.0, 1.0],
        scores_of(&reg, "fixture-beta::prefer-last", 4)
    );
}

/// A name offered by two libraries is an error naming both libraries and
/// their paths, and saying how to qualify it.
#[test]
fn ambiguous_policy_name_names_both_libraries() {
    let a = artifacts();
    let reg = registry_with(&[a.alpha(), a.beta()]);
    let err = match reg.scorer("prefer-first", "", 0) {
        Ok(s) => panic!("expected an ambiguity error, got {:?}", s.label()),
        Err(e) => e,
    };
    assert!(
        matches!(err, PluginError::Ambiguous { .. }),
        "expected Ambiguous, got {err:?}"
    );
    let text = err.to_string();
    let alpha = a.alpha().canonicalize().unwrap();
    let beta = a.beta().canonicalize().unwrap();
    assert_contains!(
        text,
        "scorer policy 'prefer-first' is offered by two libraries",
        format!("fixture-alpha ({})", alpha.display()),
        format!("fixture-beta ({})", beta.display()),
        "'fixture-alpha::prefer-first'",
        "'fixture-beta::prefer-first'",
    );
    // Names unique to one library still resolve unqualified.
    eqnice!(
        (1, "prefer-last".to_string()),
        reg.resolve(PolicyKind::Scorer, "prefer-last").unwrap()
    );
    eqnice!(
        (0, "prefer-first".to_string()),
        reg.resolve(PolicyKind::Scorer, "fixture-alpha::prefer-first")
            .unwrap()
    );
}

// ------------------------------------------------------------ 3. panics

/// A panicking scorer becomes one line of error text, and the process goes
/// on: the library stays usable, and a second panic is caught as well.
#[test]
fn panicking_scorer_is_a_one_line_error_and_no_abort() {
    let reg = registry_with(&[artifacts().alpha()]);
    let mut panicky = reg.scorer("panicky", "", 0).unwrap();
    let snaps = idle(3);
    for _ in 0..2 {
        let err = panicky
            .score(&request(7, &[]), &cluster(&snaps))
            .expect_err("the panicky scorer returned scores");
        assert!(
            matches!(*err, PluginError::Panicked { .. }),
            "expected Panicked, got {err:?}"
        );
        let text = err.to_string();
        eqnice!(1, text.lines().count());
        let prefix = "plugin fixture-alpha: scorer 'panicky' panicked in score for request 7: \
                      fixture-alpha deliberately panicked (at ";
        assert!(text.starts_with(prefix), "unexpected message:\n{text}");
        let location = text[prefix.len()..]
            .strip_suffix(')')
            .unwrap_or_else(|| panic!("no ')' at the end of:\n{text}"));
        let (file, line) = location
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("no file:line in:\n{text}"));
        assert!(
            file.ends_with("lib.rs") && file.contains("plugin-alpha"),
            "the location should point into fixture-alpha's lib.rs:\n{text}"
        );
        assert!(line.parse::<u32>().is_ok(), "bad line number in:\n{text}");
    }
    // Still alive, and the same library still answers.
    eqnice!(vec![1.0, 0.0, 0.0], scores_of(&reg, "prefer-first", 3));
}

/// A panicking admission policy is reported the same way, naming `admit`.
#[test]
fn panicking_admission_is_a_one_line_error() {
    let reg = registry_with(&[artifacts().alpha()]);
    let mut adm = reg.admission("panicky-admission", "", 0).unwrap();
    let snaps = idle(2);
    let err = adm
        .admit(&request(3, &[]), &cluster(&snaps))
        .expect_err("the panicky admission policy decided");
    let text = err.to_string();
    eqnice!(1, text.lines().count());
    assert_contains!(
        text,
        "plugin fixture-alpha: admission 'panicky-admission' panicked in admit for request 3: \
         fixture-alpha deliberately panicked (at "
    );
}

/// The real `blis` executable: a plugin panic exits non-zero (not by a
/// signal), with the one-line message and no backtrace, and prints no
/// report.
#[test]
fn cli_plugin_panic_exits_nonzero_without_backtrace() {
    let dir = TestDir::new("cli_plugin_panic_exits_nonzero_without_backtrace");
    let alpha = artifacts().alpha();
    let out = dir
        .blis()
        .arg("run")
        .arg("--plugin")
        .arg(&alpha)
        .args(["--routing-policy", "weighted"])
        .args(["--routing-scorers", "panicky:1"])
        .args(["--num-requests", "5"])
        .output()
        .expect("cannot run blis");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let context = format!(
        "status: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let code = out
        .status
        .code()
        .unwrap_or_else(|| panic!("blis was killed by a signal (abort?)\n{context}"));
    assert!(code != 0, "blis exited 0 after a plugin panic\n{context}");
    assert_contains!(
        stderr,
        "plugin fixture-alpha: scorer 'panicky' panicked in score for request ",
        "fixture-alpha deliberately panicked",
    );
    assert_lacks!(
        stderr,
        "RUST_BACKTRACE",
        "stack backtrace",
        "panicked at",
        "abort"
    );
    assert!(stdout.is_empty(), "stdout must be empty\n{context}");
}

// ------------------------------------------------- 4. output validation

/// A NaN score is an error naming the library, the policy and the instance.
#[test]
fn nan_score_is_an_error_naming_the_plugin() {
    let reg = registry_with(&[artifacts().alpha()]);
    let mut s = reg.scorer("nan-score", "", 0).unwrap();
    let snaps = idle(3);
    let err = s
        .score(&request(11, &[]), &cluster(&snaps))
        .expect_err("NaN was accepted");
    assert!(
        matches!(*err, PluginError::BadOutput { .. }),
        "expected BadOutput, got {err:?}"
    );
    assert_contains!(
        err.to_string(),
        "plugin fixture-alpha: scorer 'nan-score'",
        "returned NaN for instance 1",
        "request 11",
    );
}

/// One score too few is an error naming the library, the policy and both counts.
#[test]
fn wrong_number_of_scores_is_an_error_naming_the_plugin() {
    let reg = registry_with(&[artifacts().alpha()]);
    let mut s = reg.scorer("short-scores", "", 0).unwrap();
    let snaps = idle(4);
    let err = s
        .score(&request(12, &[]), &cluster(&snaps))
        .expect_err("3 scores for 4 instances were accepted");
    assert!(
        matches!(*err, PluginError::BadOutput { .. }),
        "expected BadOutput, got {err:?}"
    );
    assert_contains!(
        err.to_string(),
        "plugin fixture-alpha: scorer 'short-scores'",
        "returned 3 scores for 4 instances",
    );
}

/// An out-of-range routing target is an error naming the library, the
/// policy, the target and the valid range; an in-range one is used as is.
#[test]
fn out_of_range_route_is_an_error_naming_the_plugin() {
    let reg = registry_with(&[artifacts().alpha()]);
    let snaps = idle(4);

    let mut ok = reg.router("fixed", "target = 3", 0).unwrap();
    eqnice!(3, ok.route(&request(1, &[]), &cluster(&snaps)).unwrap());

    let mut bad = reg.router("fixed", "target = 4", 0).unwrap();
    let err = bad
        .route(&request(13, &[]), &cluster(&snaps))
        .expect_err("target 4 of 4 instances was accepted");
    assert!(
        matches!(*err, PluginError::BadOutput { .. }),
        "expected BadOutput, got {err:?}"
    );
    assert_contains!(
        err.to_string(),
        "plugin fixture-alpha: router 'fixed'",
        "chose instance 4, but the cluster has 4 instances (valid: 0..3)",
        "request 13",
    );

    // An index that does not even fit the ABI's u32.
    let mut huge = reg.router("fixed", "target = 5000000000", 0).unwrap();
    let err = huge
        .route(&request(14, &[]), &cluster(&snaps))
        .expect_err("target 5e9 was accepted");
    assert_contains!(
        err.to_string(),
        "plugin fixture-alpha: router 'fixed'",
        "an index beyond u32"
    );
}

// ------------------------------------------------------ 5. load errors

/// A file that is not a shared library at all.
#[test]
fn loading_a_text_file_is_a_short_error() {
    let dir = TestDir::new("loading_a_text_file_is_a_short_error");
    let path = dir.write("not-a-library.so", "this is a text file, not a library\n");
    let err = load_error(&path);
    assert!(
        matches!(err, PluginError::NotSharedLibrary { .. }),
        "expected NotSharedLibrary, got {err:?}"
    );
    let text = err.to_string();
    assert_short_load_error(&text, &path);
    assert_contains!(
        text,
        "it is not a loadable shared library",
        "crate-type = [\"cdylib\"]",
        "blis-plugin-api",
    );
}

/// A shared library without a blis root module.
#[test]
fn loading_a_library_that_is_not_a_plugin_is_a_short_error() {
    let path = artifacts().not_a_plugin();
    let err = load_error(&path);
    assert!(
        matches!(err, PluginError::NotAPlugin { .. }),
        "expected NotAPlugin, got {err:?}"
    );
    let text = err.to_string();
    assert_short_load_error(&text, &path);
    assert_contains!(
        text,
        "it is a shared library but not a blis plugin",
        "root module",
        "no such symbol",
        "export_plugin!",
    );
}

/// A plugin built against a changed `RequestView`: rejected at load time in
/// a few lines, not with abi_stable's layout dump.
#[test]
fn loading_a_plugin_with_a_changed_abi_is_a_short_error() {
    let path = artifacts().abi_mismatch();
    let err = load_error(&path);
    assert!(
        matches!(err, PluginError::IncompatibleAbi { .. }),
        "expected IncompatibleAbi, got {err:?}"
    );
    let text = err.to_string();
    assert_short_load_error(&text, &path);
    assert_contains!(
        text,
        "incompatible blis plugin ABI",
        "different layout",
        // The changed view struct is what was found, not some other difference.
        "RequestView<'a>: incompatible type size",
        "too many fields (expected 6, found 7)",
        "Rebuild the plugin against blis-plugin-api",
        &blis_plugin_api::ABI_VERSION.to_string(),
    );
}

/// A path that does not exist.
#[test]
fn loading_a_missing_file_is_not_found() {
    let dir = TestDir::new("loading_a_missing_file_is_not_found");
    let path = dir.path().join("no-such-plugin.so");
    let err = load_error(&path);
    assert!(
        matches!(err, PluginError::NotFound { .. }),
        "expected NotFound, got {err:?}"
    );
    let text = err.to_string();
    assert!(text.lines().count() < 10, "too long:\n{text}");
    assert_contains!(
        text,
        "plugin file not found",
        path.display().to_string(),
        "Check the path"
    );
}

// -------------------------------------------------------- 6. bad input

/// An unknown name lists the available names of that kind and the closest one.
#[test]
fn unknown_policy_lists_names_of_its_kind_and_closest_match() {
    let reg = Registry::standard();
    let err = match reg.router("least-load", "", 0) {
        Ok(r) => panic!("resolved to {:?}", r.label()),
        Err(e) => e,
    };
    assert!(
        matches!(err, PluginError::UnknownPolicy { .. }),
        "expected UnknownPolicy, got {err:?}"
    );
    let text = err.to_string();
    assert_contains!(
        text,
        "unknown router policy 'least-load'",
        "did you mean 'least-loaded'?",
        format!(
            "Available router policies: {}.",
            reg.names(PolicyKind::Router).join(", ")
        ),
    );
    // Names are of the asked kind only: scorers are not offered as routers.
    let err = match reg.scorer("round-robbin", "", 0) {
        Ok(s) => panic!("resolved to {:?}", s.label()),
        Err(e) => e,
    };
    let text = err.to_string();
    assert_contains!(
        text,
        "unknown scorer policy 'round-robbin'",
        format!(
            "Available scorer policies: {}.",
            reg.names(PolicyKind::Scorer).join(", ")
        ),
    );
    assert_lacks!(text, "did you mean 'round-robin'");
}

/// A bad parameter value: the plugin's serde error, naming the key, reaches
/// the error text together with the library and policy.
#[test]
fn bad_params_error_names_the_key() {
    let reg = Registry::standard();
    let err = match reg.admission("token-bucket", "capacity = \"x\"\n", 0) {
        Ok(a) => panic!("created {:?}", a.label()),
        Err(e) => e,
    };
    assert!(
        matches!(err, PluginError::Create { .. }),
        "expected Create, got {err:?}"
    );
    assert_contains!(
        err.to_string(),
        "plugin blis-std: cannot create admission 'token-bucket': params.capacity:",
        "invalid type",
    );
    // An unknown key is named too.
    let err = match reg.admission("token-bucket", "capacty = 5.0\n", 0) {
        Ok(a) => panic!("created {:?}", a.label()),
        Err(e) => e,
    };
    assert_contains!(err.to_string(), "capacty");
}

// ------------------------------------------ 7. embedded vs loaded blis-std

/// One routing step of the comparison run, with floats as bits so equality
/// is exact.
#[derive(Debug, PartialEq)]
struct Step {
    request: u64,
    admitted: bool,
    scores: Vec<Vec<u64>>,
    weighted_choice: Option<u32>,
    router_choices: Vec<u32>,
}

/// Run a few hundred seeded decisions of the standard policies of `reg`:
/// token-bucket admission, a weighted router over four scorers (stateful
/// prefix-affinity included, fed by `observe`), and three routers.
fn decision_trace(reg: &Registry, seed: u64) -> Vec<Step> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut admission = reg
        .admission(
            "token-bucket",
            "capacity = 2000.0\nrefill_rate = 50000.0\n",
            1,
        )
        .unwrap();
    let weights = [3.0, 2.0, 1.0, 1.0];
    let mut scorers: Vec<_> = [
        ("prefix-affinity", "capacity = 64\n"),
        ("queue-depth", ""),
        ("kv-utilization", ""),
        ("load-balance", ""),
    ]
    .iter()
    .map(|(name, params)| reg.scorer(name, params, 2).unwrap())
    .collect();
    let mut routers: Vec<_> = ["round-robin", "least-loaded", "prefix-affinity"]
        .iter()
        .map(|name| reg.router(name, "", 3).unwrap())
        .collect();

    let n = 8;
    let mut clock = 0i64;
    let mut trace = Vec::new();
    for id in 0..300u64 {
        clock += rng.random_range(0..2_000i64);
        let snaps: Vec<InstanceSnapshot> = (0..n)
            .map(|_| InstanceSnapshot {
                queue_depth: rng.random_range(0..20),
                batch_size: rng.random_range(0..64),
                pending_requests: rng.random_range(0..4),
                reserved: 0,
                kv_utilization: rng.random_range(0.0..1.0),
                free_kv_blocks: rng.random_range(0..10_000),
                cache_hit_rate: rng.random_range(0.0..1.0),
            })
            .collect();
        // A few shared prompt families so prefix affinity finds matches.
        let family: u64 = rng.random_range(0..6);
        let len: u64 = rng.random_range(0..32);
        let hashes: Vec<u64> = (0..len).map(|k| family * 1_000 + k).collect();
        let req = RequestView {
            id,
            arrival_us: clock,
            input_tokens: rng.random_range(16..1_024),
            slo_class: SloClass(rng.random_range(0..5)),
            tenant: RStr::from("tenant-a"),
            block_hashes: RSlice::from_slice(&hashes),
        };
        let view = ClusterView {
            clock_us: clock,
            instances: RSlice::from_slice(&snaps),
        };

        let admitted = admission.admit(&req, &view).unwrap();
        let mut step = Step {
            request: id,
            admitted,
            scores: Vec::new(),
            weighted_choice: None,
            router_choices: Vec::new(),
        };
        if admitted {
            let mut total = vec![0.0f64; n];
            for (s, w) in scorers.iter_mut().zip(weights) {
                let scores = s.score(&req, &view).unwrap();
                for (t, x) in total.iter_mut().zip(scores) {
                    *t += w * x;
                }
                step.scores
                    .push(scores.iter().map(|x| x.to_bits()).collect());
            }
            // Argmax, ties to the lowest index.
            let mut best = 0;
            for i in 1..n {
                if total[i] > total[best] {
                    best = i;
                }
            }
            let chosen = best as u32;
            step.weighted_choice = Some(chosen);
            for r in &mut routers {
                let c = r.route(&req, &view).unwrap();
                step.router_choices.push(c);
                r.observe(&req, &view, c).unwrap();
            }
            for s in &mut scorers {
                s.observe(&req, &view, chosen).unwrap();
            }
            admission.observe(&req, &view, chosen).unwrap();
        }
        trace.push(step);
    }
    trace
}

/// The standard library embedded and loaded from `libblis_std.so` (which
/// replaces the embedded one) make identical decisions.
#[test]
fn embedded_and_loaded_standard_library_decide_identically() {
    let std_so = artifacts().blis_std();
    let embedded = Registry::standard();
    eqnice!(Origin::Embedded, embedded.libraries()[0].origin);

    let mut loaded = Registry::standard();
    eqnice!(Added::ReplacedEmbedded, loaded.load(&std_so).unwrap());
    eqnice!(1, loaded.libraries().len());
    eqnice!("blis-std", loaded.libraries()[0].name.as_str());
    eqnice!(
        Origin::File(std_so.canonicalize().unwrap()),
        loaded.libraries()[0].origin
    );
    let listed = |r: &Registry| -> Vec<(blis_plugin_api::KindCode, String)> {
        r.libraries()[0]
            .policies
            .iter()
            .map(|p| (p.kind, p.name.clone()))
            .collect()
    };
    eqnice!(listed(&embedded), listed(&loaded));

    for seed in [1, 2, 3] {
        let a = decision_trace(&embedded, seed);
        let b = decision_trace(&loaded, seed);
        // The run must exercise both outcomes of admission and real choices.
        assert!(a.iter().any(|s| s.admitted) && a.iter().any(|s| !s.admitted));
        assert!(a.iter().filter_map(|s| s.weighted_choice).any(|c| c != 0));
        eqnice!(a, b);
    }
}

// ------------------------------------------------- 8. ABI 0.2 compatibility

/// Run the real `blis` in `dir` and return (stdout, the decision trace).
fn run_with_trace(dir: &TestDir, name: &str, args: &[&str]) -> (String, String) {
    let trace = dir.path().join(format!("{name}.trace"));
    let out = dir
        .blis()
        .arg("run")
        .args(args)
        .arg("--trace-path")
        .arg(&trace)
        .arg("--quiet")
        .output()
        .expect("cannot run blis");
    assert!(
        out.status.success(),
        "blis {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = std::fs::read_to_string(&trace).expect("trace written");
    (String::from_utf8(out.stdout).expect("utf-8"), trace)
}

/// The report without its provenance section (which names the file).
fn without_provenance(report: &str) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_str(report).expect("one JSON document");
    v.as_object_mut().expect("an object").remove("plugins");
    v
}

/// A plugin built against the frozen ABI 0.1 crate loads in this host,
/// reports ABI 0.1, and makes exactly the decisions the same source built
/// against the current crate makes: admission (with rejections), a router
/// using every view field, the seed and `observe`, and a stateful scorer in
/// the weighted policy — same reports, same decision traces.
#[test]
fn abi_0_1_plugin_loads_and_decides_like_its_0_2_build() {
    let old = artifacts().compat_v0_1();
    let new = artifacts().compat_v0_2();
    let reg = registry_with(&[old.clone(), new.clone()]);
    eqnice!("compat-v0-1", reg.libraries()[0].name.as_str());
    eqnice!("0.1", reg.libraries()[0].abi.to_string());
    eqnice!("0.2", reg.libraries()[1].abi.to_string());
    eqnice!(3, reg.libraries()[0].policies.len());
    decides_like_the_current_build(&old, "compat-v0-1", "abi_0_1_plugin");
}

/// A plugin built before the decider kind existed (its root module ends at
/// `create_autoscaler`) loads in this host, offers its policies, has no
/// `create_decider`, and decides exactly as the current build of the same
/// source; naming one of its policies as a decider is a clear error.
#[test]
fn a_plugin_built_before_the_decider_kind_loads_and_decides_unchanged() {
    let old = artifacts().compat_before_decider();
    let reg = registry_with(std::slice::from_ref(&old));
    let lib = &reg.libraries()[0];
    eqnice!("compat-v0-2-before-decider", lib.name.as_str());
    eqnice!("0.2", lib.abi.to_string());
    eqnice!(3, lib.policies.len());
    // abi_stable accepted the shorter root module: the autoscaler kind is
    // there, the decider kind is not.
    assert!(lib.has_create_function(KindCode::AUTOSCALER));
    assert!(!lib.has_create_function(KindCode::DECIDER));
    let current = registry_with(&[artifacts().compat_v0_2()]);
    assert!(current.libraries()[0].has_create_function(KindCode::DECIDER));
    let e = reg
        .decider("compat-scorer", "", 1)
        .err()
        .expect("not a decider")
        .to_string();
    assert!(e.contains("unknown decider policy 'compat-scorer'"), "{e}");
    decides_like_the_current_build(&old, "compat-v0-2-before-decider", "before_decider");
}

/// A plugin built before the observer kind existed (its root module ends
/// at `create_decider`) loads in this host, has its deciders and no
/// `create_observer`, and decides exactly as the current build.
#[test]
fn a_plugin_built_before_the_observer_kind_loads_and_decides_unchanged() {
    let old = artifacts().compat_before_observer();
    let reg = registry_with(std::slice::from_ref(&old));
    let lib = &reg.libraries()[0];
    eqnice!("compat-v0-2-before-observer", lib.name.as_str());
    eqnice!("0.2", lib.abi.to_string());
    eqnice!(3, lib.policies.len());
    assert!(lib.has_create_function(KindCode::DECIDER));
    assert!(!lib.has_create_function(KindCode::OBSERVER));
    let current = registry_with(&[artifacts().compat_v0_2()]);
    assert!(current.libraries()[0].has_create_function(KindCode::OBSERVER));
    // The library before the decider kind has no observers either.
    let older = registry_with(&[artifacts().compat_before_decider()]);
    assert!(!older.libraries()[0].has_create_function(KindCode::OBSERVER));
    let e = reg
        .observer("compat-scorer", "", 1)
        .err()
        .expect("not an observer")
        .to_string();
    assert!(e.contains("unknown observer policy 'compat-scorer'"), "{e}");
    decides_like_the_current_build(&old, "compat-v0-2-before-observer", "before_observer");
}

/// A plugin built before the host's query table existed (its root module
/// ends at `create_observer`, no `set_host`) loads in this host, has every
/// kind, and decides exactly as the current build.
#[test]
fn a_plugin_built_before_the_host_query_table_loads_and_decides_unchanged() {
    let old = artifacts().compat_before_host();
    let reg = registry_with(std::slice::from_ref(&old));
    let lib = &reg.libraries()[0];
    eqnice!("compat-v0-2-before-host", lib.name.as_str());
    eqnice!("0.2", lib.abi.to_string());
    eqnice!(3, lib.policies.len());
    assert!(lib.has_create_function(KindCode::DECIDER));
    assert!(lib.has_create_function(KindCode::OBSERVER));
    decides_like_the_current_build(&old, "compat-v0-2-before-host", "before_host");
}

/// Run the compat scenarios with `old` and with the current build of the
/// same policies: identical reports and traces (library names aside).
fn decides_like_the_current_build(old: &Path, old_name: &str, test: &str) {
    let new = artifacts().compat_v0_2();
    let dir = TestDir::new(test);
    let run_file = dir.write(
        "compat.toml",
        "seed = 5\n\
         [instance]\ncount = 4\ntotal_kv_blocks = 3000\n\
         [workload]\naggregate_rate = 400.0\nnum_requests = 600\nprefix_tokens = 64\n\
         arrival = { process = \"poisson\" }\n\
         [admission]\npolicy = \"compat-admission\"\nparams = { max_load = 40, one_in = 9 }\n",
    );
    for (label, routing) in [
        ("router", vec!["--routing-policy", "compat-router"]),
        (
            "weighted",
            vec!["--routing-scorers", "compat-scorer:2,queue-depth:1"],
        ),
    ] {
        let mut outs = Vec::new();
        for lib in [old, &new] {
            let mut args = vec![
                run_file.to_str().unwrap(),
                "--plugin",
                lib.to_str().unwrap(),
            ];
            args.extend(&routing);
            let name = format!("{label}-{}", lib.file_stem().unwrap().to_string_lossy());
            outs.push(run_with_trace(&dir, &name, &args));
        }
        let (old_report, old_trace) = &outs[0];
        let (new_report, new_trace) = &outs[1];
        let report = without_provenance(old_report);
        let c = &report["cluster"];
        assert!(c["rejected_requests"].as_u64().unwrap() > 0, "{label}: {c}");
        assert!(
            c["completed_requests"].as_u64().unwrap() > 0,
            "{label}: {c}"
        );
        eqnice!(report, without_provenance(new_report));
        // Rejection records name the admission policy's library.
        eqnice!(old_trace.replace(old_name, "compat-v0-2"), *new_trace);
        let chosen: std::collections::BTreeSet<u64> = old_trace
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["chosen"].as_u64())
            .collect();
        assert!(
            chosen.len() > 1,
            "{label}: every request went to one instance"
        );
    }
}

/// `blis --version` and `blis plugins list` name the plugin ABI; the list
/// says each library's ABI and its columns line up whatever the name lengths.
#[test]
fn version_and_plugin_list_name_the_abi_and_align() {
    let dir = TestDir::new("version_and_plugin_list_name_the_abi_and_align");
    let out = dir.blis().arg("--version").output().expect("run blis");
    let version = String::from_utf8_lossy(&out.stdout);
    assert_contains!(version, "blis ", "(plugin ABI 0.2)");

    let old = artifacts().compat_v0_1();
    let out = dir
        .blis()
        .args(["plugins", "list", "--plugin"])
        .arg(&old)
        .arg("--plugin")
        .arg(artifacts().pipeline())
        .output()
        .expect("run blis");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_contains!(
        text,
        "plugin ABI of this blis: 0.2",
        "blis-std 0.1.0 (ABI 0.2, embedded)",
        "compat-v0-1 0.1.0 (ABI 0.1, ",
        "fixture-pipeline 0.1.0 (ABI 0.2, ",
        "filter",
        "picker",
    );
    // Every policy line: two spaces, kind, name, summary — the summaries
    // all start in the same column.
    let columns: std::collections::BTreeSet<usize> = text
        .lines()
        .filter(|l| l.starts_with("  "))
        .map(|l| {
            let name_end = l.trim_start().find("  ").unwrap() + 2;
            let rest = &l.trim_start()[name_end..];
            let summary = rest.trim_start();
            l.len() - summary.len()
        })
        .collect();
    eqnice!(1, columns.len());
}

/// The report lists every plugin file the run loaded: name, version, ABI
/// version, path and the file's SHA-256; without plugin files there is no
/// such section (so reports of runs without plugins did not change).
#[test]
fn report_names_every_loaded_library_with_its_sha256() {
    use sha2::Digest;
    let dir = TestDir::new("report_names_every_loaded_library_with_its_sha256");
    let lib = artifacts().compat_v0_1();
    let out = dir
        .blis()
        .args(["run", "--num-requests", "20", "--quiet", "--plugin"])
        .arg(&lib)
        .output()
        .expect("run blis");
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = format!("{:x}", sha2::Sha256::digest(std::fs::read(&lib).unwrap()));
    eqnice!(
        serde_json::json!([{
            "name": "compat-v0-1",
            "version": "0.1.0",
            "abi_version": "0.1",
            "path": lib.canonicalize().unwrap().display().to_string(),
            "sha256": want,
        }]),
        report["plugins"]
    );
    let out = dir
        .blis()
        .args(["run", "--num-requests", "20", "--quiet"])
        .output()
        .expect("run blis");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report.get("plugins").is_none(), "{report}");
}

/// A plugin path without a slash is the file in the current folder (on the
/// command line) or in the run file's folder — never a name for the dynamic
/// loader's search path.
#[test]
fn bare_plugin_file_name_is_found_in_its_folder() {
    let dir = TestDir::new("bare_plugin_file_name_is_found_in_its_folder");
    let so = artifacts().alpha();
    let file = so.file_name().unwrap().to_str().unwrap().to_string();
    std::fs::copy(&so, dir.path().join(&file)).unwrap();
    let out = dir
        .blis()
        .args(["plugins", "list", "--plugin", &file])
        .output()
        .expect("run blis");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_contains!(String::from_utf8_lossy(&out.stdout), "fixture-alpha");
    dir.write(
        "run.toml",
        &format!(
            "[workload]\nnum_requests = 10\n[routing]\npolicy = \"weighted\"\n\
             scorers = [{{ name = \"prefer-first\", weight = 1.0 }}]\n\
             [[plugins]]\npath = \"{file}\"\n"
        ),
    );
    let out = dir
        .blis()
        .args(["run", "run.toml", "--quiet"])
        .output()
        .expect("run blis");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--routing-scorers "library::name:weight"` — the form the ambiguity error
/// recommends — works, and `--set routing.scorers.N.params.KEY=…` reaches
/// that scorer's parameters.
#[test]
fn qualified_scorer_flag_and_scorer_params_from_the_command_line() {
    let dir = TestDir::new("qualified_scorer_flag_and_scorer_params_from_the_command_line");
    let out = dir
        .blis()
        .args(["run", "--num-requests", "10", "--quiet", "--plugin"])
        .arg(artifacts().alpha())
        .arg("--plugin")
        .arg(artifacts().beta())
        .args(["--routing-scorers", "fixture-alpha::prefer-first:1"])
        .output()
        .expect("run blis");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A bad parameter set from the command line reaches the plugin, which
    // names it: proof that the value arrived.
    let out = dir
        .blis()
        .args(["run", "--num-requests", "10", "--quiet"])
        .args(["--routing-scorers", "prefix-affinity:1,queue-depth:1"])
        .args(["--set", "routing.scorers.0.params.capacity=\"lots\""])
        .output()
        .expect("run blis");
    eqnice!(Some(2), out.status.code());
    assert_contains!(
        String::from_utf8_lossy(&out.stderr),
        "prefix-affinity",
        "params.capacity"
    );
}

// ------------------------------------------------- 9. author toolkit

/// A folder outside the repository (and outside cargo's target dir), fresh.
fn outside_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("blis-{name}-{}", std::process::id()));
    if d.exists() {
        std::fs::remove_dir_all(&d).unwrap();
    }
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `cargo ARGS --offline` in `dir`, into the tests' target dir.
fn cargo_offline(dir: &Path, args: &[&str]) -> std::process::Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    std::process::Command::new(cargo)
        .current_dir(dir)
        .args(args)
        .arg("--offline")
        .arg("--target-dir")
        .arg(artifacts().target_dir().join("plugins-new"))
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("run cargo")
}

/// The `n` from `key n` in `text` (e.g. "12 completed" with key
/// "completed" is read backwards: the number before the word).
fn number_before(text: &str, word: &str) -> u64 {
    let at = text
        .find(&format!(" {word}"))
        .unwrap_or_else(|| panic!("no '{word}' in {text}"));
    let digits: String = text[..at]
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number before '{word}' in {text}"))
}

/// `blis plugins new NAME` in a folder outside the repository writes a
/// crate with one policy of every kind and a run file for each; it builds
/// offline (cargo's cache is warm here), loads as ABI 0.2, and every run
/// file runs. Through it, the toolkit: `on_run_end` with the run's summary
/// (the router's and the observer's lines agree with the report, once each,
/// never under `blis validate`), the observer kind, `score()` defaulted for
/// a `USES_STATE` scorer, the start-up note naming every policy, `plugins
/// list/show` showing hooks and flags, the report's rejections by cause,
/// and HOOKS on a scheduler refused at load.
#[test]
fn plugins_new_scaffolds_every_kind_and_each_run_file_runs() {
    let dir = outside_dir("plugins-new");
    let (code, stdout, stderr) = blis_in(&dir, &["plugins", "new", "my-plugin"]);
    eqnice!(Some(0), code, "{stderr}");
    assert_contains!(stdout, "plugin ABI 0.2", "cargo vendor");
    let krate = dir.join("my-plugin");
    let readme = std::fs::read_to_string(krate.join("README.md")).unwrap();
    assert_contains!(readme, "cargo vendor", ".cargo/config.toml", "--offline");
    let built = cargo_offline(&krate, &["build", "--quiet"]);
    assert!(
        built.status.success(),
        "cargo build --offline failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let so = artifacts()
        .target_dir()
        .join("plugins-new/debug")
        .join(format!(
            "{}my_plugin{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ));
    let so_arg = so.to_str().unwrap();
    let reg = registry_with(std::slice::from_ref(&so));
    let lib = &reg.libraries()[0];
    eqnice!("my-plugin", lib.name.as_str());
    eqnice!("0.2", lib.abi.to_string());
    let kinds: Vec<(&str, &str)> = lib
        .policies
        .iter()
        .map(|p| (p.kind.name(), p.name.as_str()))
        .collect();
    eqnice!(
        vec![
            ("admission", "max-queue"),
            ("router", "least-queued"),
            ("scorer", "queue-aware-load"),
            ("scorer", "fewest-in-flight"),
            ("filter", "kv-below"),
            ("picker", "random-best"),
            ("scheduler", "shortest-prompt"),
            ("preemption", "youngest"),
            ("autoscaler", "queue-per-instance"),
            ("decider", "long-uncached"),
            ("observer", "completion-log"),
        ],
        kinds
    );
    // fewest-in-flight writes only score_candidates: the default score()
    // scores every instance through it (in_flight 0 → 1).
    eqnice!(vec![1.0, 1.0, 1.0], scores_of(&reg, "fewest-in-flight", 3));

    // plugins list / show: hooks and flags.
    let (code, list, stderr) = blis_in(&dir, &["plugins", "list", "--plugin", so_arg]);
    eqnice!(Some(0), code, "{stderr}");
    let line = |name: &str| {
        list.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} in\n{list}"))
            .to_string()
    };
    assert!(
        line("completion-log").ends_with("[hooks: completed, run_end]"),
        "{list}"
    );
    assert!(line("least-queued").ends_with("[hooks: run_end]"), "{list}");
    assert!(line("fewest-in-flight").ends_with("[uses state]"), "{list}");
    assert!(!line("kv-below").contains('['), "{list}");
    let (code, show, _) = blis_in(
        &dir,
        &["plugins", "show", "completion-log", "--plugin", so_arg],
    );
    eqnice!(Some(0), code);
    assert_contains!(show, "Hooks: completed, run_end", "Flags: none");
    let (_, show, _) = blis_in(
        &dir,
        &["plugins", "show", "fewest-in-flight", "--plugin", so_arg],
    );
    assert_contains!(show, "Hooks: none", "Flags: uses state");

    // Every run file runs.
    let run = |file: &str| {
        let path = krate.join("runs").join(file);
        let (code, stdout, stderr) = blis_in(
            &dir,
            &["run", path.to_str().unwrap(), "--plugin", so_arg, "--quiet"],
        );
        eqnice!(Some(0), code, "{file}:\n{stderr}");
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        (report, stderr)
    };
    let (report, stderr) = run("profile.toml");
    let c = &report["cluster"];
    let by = &c["rejected_by"];
    let causes = [
        "admission",
        "filter",
        "gateway",
        "tenant_budget",
        "no_routable_instance",
    ];
    let sum: u64 = causes.iter().map(|k| by[*k].as_u64().unwrap()).sum();
    eqnice!(c["rejected_requests"].as_u64().unwrap(), sum, "{by}");
    assert_contains!(
        stderr,
        "note: pipeline: admission my-plugin::max-queue; routing: scheduling profile 'default': \
         filters my-plugin::kv-below; scorers my-plugin::queue-aware-load:2, \
         my-plugin::fewest-in-flight:1; picker my-plugin::random-best; instance scheduler \
         shortest-prompt, preemption youngest; observers my-plugin::completion-log"
    );
    let ends: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("[my-plugin::completion-log] run ended at "))
        .collect();
    eqnice!(1, ends.len(), "{stderr}");
    let end = ends[0];
    let completed = c["completed_requests"].as_u64().unwrap();
    eqnice!(completed, number_before(end, "completed"), "{end}");
    assert_contains!(end, format!("(seen {completed})"));
    eqnice!(
        c["rejected_requests"].as_u64().unwrap(),
        number_before(end, "rejected")
    );
    eqnice!(
        by["admission"].as_u64().unwrap(),
        number_before(end, "by admission")
    );
    eqnice!(
        by["filter"].as_u64().unwrap(),
        number_before(end, "by filters")
    );

    let (report, stderr) = run("router.toml");
    let arrived = report["cluster"]["num_requests"].as_u64().unwrap();
    eqnice!(200, arrived);
    let routed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("[my-plugin::least-queued] "))
        .collect();
    eqnice!(
        vec!["[my-plugin::least-queued] routed 200 of 200 requests"],
        routed
    );
    assert_contains!(stderr, "routing: router my-plugin::least-queued");
    let (report, stderr) = run("autoscaler.toml");
    assert!(report["control"].is_object(), "{report}");
    assert_contains!(stderr, "autoscaler queue-per-instance");
    let (report, stderr) = run("pd.toml");
    assert!(report["pd"].is_object(), "{report}");
    assert_contains!(stderr, "P/D decider long-uncached");

    // `blis validate` creates the policies but runs nothing: no run end.
    let path = krate.join("runs/profile.toml");
    let (code, _, stderr) = blis_in(
        &dir,
        &["validate", path.to_str().unwrap(), "--plugin", so_arg],
    );
    eqnice!(Some(0), code, "{stderr}");
    assert_lacks!(stderr, "run ended");

    // HOOKS on a scheduler (which never receives events) is a load error.
    let kinds_rs = krate.join("src/kinds.rs");
    let text = std::fs::read_to_string(&kinds_rs).unwrap();
    let anchor = "const NAME: &'static str = \"shortest-prompt\";";
    assert_contains!(text, anchor);
    std::fs::write(
        &kinds_rs,
        text.replace(
            anchor,
            &format!("{anchor}\n    const HOOKS: Hooks = Hooks::RUN_END;"),
        ),
    )
    .unwrap();
    let built = cargo_offline(&krate, &["build", "--quiet"]);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let (code, stdout, stderr) = blis_in(&dir, &["plugins", "list", "--plugin", so_arg]);
    eqnice!(Some(2), code, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    eqnice!(1, stderr.trim().lines().count(), "{stderr}");
    assert_contains!(
        stderr,
        so_arg,
        "scheduler 'shortest-prompt' declares HOOKS, but a scheduler never receives lifecycle \
         events"
    );
    // A second `new` refuses to overwrite the folder.
    let (code, _, _) = blis_in(&dir, &["plugins", "new", "my-plugin"]);
    eqnice!(Some(2), code);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plugin built with `panic = "abort"` does not compile: `export_plugin!`
/// says why (a panic would kill blis without a message).
#[test]
fn export_plugin_refuses_panic_abort() {
    let dir = outside_dir("panic-abort");
    let out = std::process::Command::new(artifacts().blis())
        .current_dir(&dir)
        .args(["plugins", "new", "aborting"])
        .output()
        .expect("run blis");
    assert!(out.status.success());
    let krate = dir.join("aborting");
    let manifest = krate.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        format!("{text}\n[profile.dev]\npanic = \"abort\"\n"),
    )
    .unwrap();
    let checked = cargo_offline(&krate, &["check", "--quiet", "--lib"]);
    assert!(
        !checked.status.success(),
        "a panic = \"abort\" plugin compiled"
    );
    assert_contains!(
        String::from_utf8_lossy(&checked.stderr),
        "blis plugins must be built with panic = \"unwind\"",
        "SIGABRT",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The template's run file says relative output paths are resolved against
/// the run file's folder — and they are: a run started from another folder
/// writes the trace beside the run file.
#[test]
fn relative_trace_path_is_beside_the_run_file_as_the_template_says() {
    let template = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/plugin-template/example.toml");
    let text = std::fs::read_to_string(template).unwrap();
    assert_contains!(text, "resolved against this file's folder");
    assert_lacks!(text, "resolved against the current directory");
    let dir = TestDir::new("relative_trace_path_is_beside_the_run_file_as_the_template_says");
    std::fs::create_dir_all(dir.path().join("sub")).unwrap();
    dir.write(
        "sub/run.toml",
        "[workload]\nnum_requests = 5\n[output]\ntrace_path = \"decisions.jsonl\"\n",
    );
    let out = dir
        .blis()
        .args(["run", "sub/run.toml", "--quiet"])
        .output()
        .expect("run blis");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("sub/decisions.jsonl").is_file());
    assert!(!dir.path().join("decisions.jsonl").exists());
}

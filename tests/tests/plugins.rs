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
use blis_plugin_api::{ClusterView, InstanceSnapshot, PolicyKind, RequestView, SloClass};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::util::{artifacts, TestDir};

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
        env!("CARGO_PKG_VERSION"),
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
    let listed = |r: &Registry| -> Vec<(PolicyKind, String)> {
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

//! Every example in `examples/` runs as shipped (with the plugins it needs
//! built from this repository) and conserves requests (INV-1); the plugin
//! template builds as a crate of its own and its scorer changes routing
//! decisions in the stock `blis` binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use crate::util::{artifacts, TestDir};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
}

/// Build `examples/plugin-template` as its own workspace (as a team that
/// copied it would) into the test target dir; return its `.so`.
fn template_plugin() -> &'static PathBuf {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| {
        let a = artifacts();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.arg("build")
            .arg("--quiet")
            .arg("--manifest-path")
            .arg(repo().join("examples/plugin-template/Cargo.toml"))
            .arg("--target-dir")
            .arg(a.target_dir());
        if a.profile_dir().ends_with("release") {
            cmd.arg("--release");
        }
        let out = cmd.output().expect("run cargo");
        assert!(
            out.status.success(),
            "building the plugin template failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let so = a.profile_dir().join(format!(
            "{}my_blis_plugin{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ));
        assert!(so.is_file(), "{} missing", so.display());
        so
    })
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

pub(crate) fn check_conservation(report: &Value, name: &str) {
    let c = &report["cluster"];
    assert_eq!(
        u(c, "num_requests"),
        u(c, "injected_requests") + u(c, "rejected_requests") + u(c, "still_in_pipeline"),
        "{name}: pipeline conservation"
    );
    for b in std::iter::once(c).chain(report["instances"].as_array().unwrap()) {
        assert_eq!(
            u(b, "injected_requests"),
            u(b, "completed_requests")
                + u(b, "still_queued")
                + u(b, "still_running")
                + u(b, "dropped_unservable")
                // P/D: requests in transfer (cluster), prefill hand-offs (instance).
                + b["in_transfer"].as_u64().unwrap_or(0)
                + b["prefill_handoffs"].as_u64().unwrap_or(0),
            "{name}: INV-1 in {b}"
        );
    }
    assert!(
        u(c, "completed_requests") > 0,
        "{name}: something completed"
    );
}

/// Copy an example (and the files it reads) into `dir`, run it there with
/// extra arguments, check INV-1, and return the report.
fn run_example(dir: &TestDir, rel: &str, extra: &[&str]) -> Value {
    let src = repo().join("examples").join(rel);
    let name = src.file_name().unwrap().to_str().unwrap().to_string();
    dir.write(&name, &std::fs::read_to_string(&src).unwrap());
    let csv = repo().join("examples/trace.csv");
    dir.write("trace.csv", &std::fs::read_to_string(csv).unwrap());
    let out = dir
        .blis()
        .arg("run")
        .arg(&name)
        .args(extra)
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "example {rel} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    check_conservation(&report, rel);
    report
}

#[test]
fn every_run_file_example_runs_and_conserves_requests() {
    let mut seen = 0;
    let mut entries: Vec<_> = std::fs::read_dir(repo().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    entries.sort();
    for p in entries {
        let rel = p.file_name().unwrap().to_str().unwrap().to_string();
        let dir = TestDir::new(&format!("example_{}", rel.replace('.', "_")));
        run_example(&dir, &rel, &[]);
        seen += 1;
    }
    assert!(seen >= 6, "expected the example run files, found {seen}");
}

#[test]
fn plugin_examples_run_with_their_plugins() {
    let p2c = artifacts().p2c();
    let template = template_plugin();
    let dir = TestDir::new("example_p2c");
    let r = run_example(
        &dir,
        "p2c-router/p2c.toml",
        &["--set", "plugins=[]", "--plugin", p2c.to_str().unwrap()],
    );
    assert!(u(&r["cluster"], "completed_requests") > 0);
    let dir = TestDir::new("example_template");
    run_example(
        &dir,
        "plugin-template/example.toml",
        &[
            "--set",
            "plugins=[]",
            "--plugin",
            template.to_str().unwrap(),
        ],
    );
}

#[test]
fn template_scorer_changes_routing_decisions() {
    let template = template_plugin();
    let dir = TestDir::new("template_changes_routing");
    dir.write(
        "run.toml",
        "seed = 9\n[model]\nlatency_model = \"linear\"\nalpha = [0.0, 0.0, 0.0]\nbeta = [3000.0, 10.0, 40.0]\n\
         [instance]\ncount = 4\n[workload]\naggregate_rate = 300.0\nnum_requests = 300\n\
         [[workload.clients]]\nid = \"a\"\ninput = { type = \"exponential\", mean = 400 }\noutput = { type = \"exponential\", mean = 100 }\n",
    );
    let chosen = |args: &[&str], trace: &str| -> Vec<u64> {
        let out = dir
            .blis()
            .args(["run", "run.toml", "--quiet", "--trace-path", trace])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(dir.path().join(trace))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|d| d["kind"] == "routing")
            .map(|d| d["chosen"].as_u64().unwrap())
            .collect()
    };
    let rr = chosen(&["--routing-policy", "round-robin"], "rr.jsonl");
    let tpl = chosen(
        &[
            "--plugin",
            template.to_str().unwrap(),
            "--routing-scorers",
            "queue-aware-load:1",
        ],
        "tpl.jsonl",
    );
    assert_eq!(rr.len(), 300);
    assert_eq!(tpl.len(), 300);
    assert_eq!(rr, (0..300).map(|i| i % 4).collect::<Vec<u64>>());
    assert_ne!(
        rr, tpl,
        "the template's scorer must change routing decisions"
    );
}

/// `examples/llm-d/`: the workload with each of the three shipped llm-d
/// files its README compares (and round-robin), shortened to 1,500
/// requests: exit 0, INV-1, and the difference the README describes — the
/// prefix-only file puts more than a third of the requests on one of the 8
/// instances, the file whose queue and KV scorers outweigh the prefix score
/// less than a third.
#[test]
fn the_llm_d_example_runs_its_three_configurations() {
    let configs = repo().join("tests/data/llm-d-router-configs");
    let spread = |r: &Value| -> (u64, u64) {
        let c: Vec<u64> = r["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| u(i, "completed_requests"))
            .collect();
        (*c.iter().min().unwrap(), *c.iter().max().unwrap())
    };
    let mut max_share = Vec::new();
    for f in [
        "epp-config.yaml",
        "epp-precise-prefix-cache-config.yaml",
        "soft-reflective-ceiling-epp-config.yaml",
    ] {
        let dir = TestDir::new(&format!("example_llm_d_{}", f.replace(['.', '-'], "_")));
        let epp = configs.join(f);
        let r = run_example(
            &dir,
            "llm-d/workload.toml",
            &[
                "--num-requests",
                "1500",
                "--epp-config",
                epp.to_str().unwrap(),
            ],
        );
        let (lo, hi) = spread(&r);
        max_share.push((f, lo, hi, u(&r["cluster"], "completed_requests")));
    }
    let (_, _, hi0, n0) = max_share[0];
    let (_, _, hi2, n2) = max_share[2];
    assert!(
        hi0 * 3 > n0 && hi2 * 3 < n2,
        "prefix-only should concentrate, queue+kv+prefix spread: {max_share:?}"
    );
}

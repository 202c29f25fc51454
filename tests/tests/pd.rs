//! Prefill/decode disaggregation through the real `blis`: the CLI flags
//! change which requests are disaggregated, runs repeat byte for byte, and
//! bad topologies are one-paragraph errors naming the key (exit code 2).

use serde_json::Value;

use crate::util::TestDir;

const BASE: &str = "seed = 5\n\
[model]\nlatency_model = \"linear\"\nalpha = [100.0, 0.5, 20.0]\nbeta = [2000.0, 5.0, 30.0]\n\
[workload]\naggregate_rate = 200.0\nnum_requests = 200\nprompt_tokens = 800\nprompt_tokens_stdev = 600\n\
prompt_tokens_min = 10\nprompt_tokens_max = 3000\noutput_tokens = 40\n\
[routing]\npolicy = \"least-loaded\"\n";

const POOLS: &str = "[[pools]]\nname = \"prefill\"\nrole = \"prefill\"\ninstances = 2\n\
[[pools]]\nname = \"decode\"\nrole = \"decode\"\ninstances = 2\n\
[pd]\nkv_bytes_per_token = 131072.0\n";

fn run(dir: &TestDir, args: &[&str]) -> (Value, String) {
    let o = dir.blis().args(args).arg("--quiet").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "blis {args:?}: {err}");
    let text = String::from_utf8(o.stdout).unwrap();
    (
        serde_json::from_str(&text).expect("one JSON document"),
        text,
    )
}

fn bad(dir: &TestDir, args: &[&str]) -> String {
    let o = dir.blis().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "blis {args:?}: {err}");
    assert!(o.stdout.is_empty(), "nothing on stdout on error");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.lines().count() <= 12, "short error:\n{err}");
    err
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn deciders_from_the_command_line_change_what_is_disaggregated() {
    let dir = TestDir::new("pd_deciders");
    dir.write("pd.toml", &format!("{BASE}{POOLS}"));
    let (never, _) = run(&dir, &["run", "pd.toml"]);
    assert_eq!(u(&never["pd"], "disaggregated_requests"), 0);
    // Only the decode pool served (instances 2 and 3).
    for i in 0..2 {
        assert_eq!(u(&never["instances"][i], "injected_requests"), 0);
    }
    let (always, text) = run(&dir, &["run", "pd.toml", "--pd-decider", "always"]);
    assert_eq!(u(&always["pd"], "disaggregated_requests"), 200);
    assert_eq!(u(&always["cluster"], "completed_requests"), 200);
    assert_eq!(u(&always["pd"]["kv_transfers"], "completed"), 200);
    // Prompts above 800 uncached tokens only (nothing is shared here).
    let (some, _) = run(
        &dir,
        &[
            "run",
            "pd.toml",
            "--pd-decider",
            "prefix-threshold",
            "--pd-prefix-threshold",
            "800",
        ],
    );
    let n = u(&some["pd"], "disaggregated_requests");
    assert!(n > 20 && n < 180, "{n} of 200 disaggregated");
    // A slower link makes every transfer longer.
    let (slow, _) = run(
        &dir,
        &[
            "run",
            "pd.toml",
            "--pd-decider",
            "always",
            "--kv-transfer-bandwidth",
            "2.5",
        ],
    );
    let mean = |r: &Value| {
        r["pd"]["kv_transfers"]["duration"]["mean_ms"]
            .as_f64()
            .unwrap()
    };
    assert!(
        mean(&slow) > 9.0 * mean(&always),
        "{} vs {}",
        mean(&slow),
        mean(&always)
    );
    // INV-6 across processes.
    let (_, again) = run(&dir, &["run", "pd.toml", "--pd-decider", "always"]);
    assert_eq!(text, again);
}

#[test]
fn bad_topologies_name_the_key() {
    let dir = TestDir::new("pd_bad");
    dir.write(
        "no-decode.toml",
        &format!("{BASE}[[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = 2\n"),
    );
    let e = bad(&dir, &["validate", "no-decode.toml"]);
    assert!(
        e.contains("no pool can decode") && e.contains("role = \"decode\""),
        "{e}"
    );
    dir.write("pd.toml", &format!("{BASE}{POOLS}"));
    let e = bad(
        &dir,
        &["validate", "pd.toml", "--kv-transfer-bandwidth", "-1"],
    );
    assert!(e.contains("pd.transfer_bandwidth_gbps = -1"), "{e}");
    let e = bad(
        &dir,
        &[
            "run",
            "pd.toml",
            "--set",
            "pd.transfer_base_latency_ms=-0.5",
        ],
    );
    assert!(e.contains("pd.transfer_base_latency_ms = -0.5"), "{e}");
    dir.write("plain.toml", BASE);
    let e = bad(&dir, &["validate", "plain.toml", "--pd-decider", "always"]);
    assert!(
        e.contains("[pd] is given but the run file has no [[pools]]"),
        "{e}"
    );
    let e = bad(&dir, &["validate", "pd.toml", "--pd-decider", "sometimes"]);
    assert!(
        e.contains("pd.decider = \"sometimes\"") && e.contains("prefix-threshold"),
        "{e}"
    );
    let e = bad(&dir, &["validate", "pd.toml", "--pd-prefix-threshold", "5"]);
    assert!(
        e.contains("pd.prefix_threshold is given but pd.decider = \"never\""),
        "{e}"
    );
    let e = bad(
        &dir,
        &["validate", "pd.toml", "--set", "pools.0.role=\"sideways\""],
    );
    assert!(e.contains("pools[0].role = \"sideways\""), "{e}");
    let e = bad(&dir, &["validate", "pd.toml", "--num-instances", "4"]);
    assert!(
        e.contains("instance.count = 4") && e.contains("instances"),
        "{e}"
    );
    let e = bad(
        &dir,
        &[
            "validate",
            "pd.toml",
            "--set",
            "pools.1.instance.block_size=32",
        ],
    );
    assert!(e.contains("pools[1].instance.block_size = 32"), "{e}");
    let e = bad(
        &dir,
        &[
            "validate",
            "pd.toml",
            "--set",
            "pools.1.model.hardware=\"B300\"",
        ],
    );
    assert!(e.contains("pools[1] (decode)") && e.contains("B300"), "{e}");
    let e = bad(
        &dir,
        &[
            "validate",
            "pd.toml",
            "--set",
            "pools.0.instance.max_seqs=3",
        ],
    );
    assert!(
        e.contains("pools[0].instance") && e.contains("max_seqs"),
        "{e}"
    );
    // A decider with only decode pools.
    dir.write(
        "decode-only.toml",
        &format!("{BASE}[[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 2\n[pd]\ndecider = \"always\"\n"),
    );
    let e = bad(&dir, &["validate", "decode-only.toml"]);
    assert!(e.contains("no pool can prefill"), "{e}");
}

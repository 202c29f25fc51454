//! Prefill/decode disaggregation through the real `blis`: the CLI flags
//! change which requests are disaggregated, runs repeat byte for byte, and
//! bad topologies are one-paragraph errors naming the key (exit code 2).

use serde_json::Value;

use crate::util::{run_bad, TestDir};

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
    let e = run_bad(&dir, &["validate", "no-decode.toml"]);
    assert!(
        e.contains("no pool can decode") && e.contains("role = \"decode\""),
        "{e}"
    );
    dir.write("pd.toml", &format!("{BASE}{POOLS}"));
    let e = run_bad(
        &dir,
        &["validate", "pd.toml", "--kv-transfer-bandwidth", "-1"],
    );
    assert!(e.contains("pd.transfer_bandwidth_gbps = -1"), "{e}");
    let e = run_bad(
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
    let e = run_bad(&dir, &["validate", "plain.toml", "--pd-decider", "always"]);
    assert!(
        e.contains("[pd] is given but the run file has no [[pools]]"),
        "{e}"
    );
    let e = run_bad(&dir, &["validate", "pd.toml", "--pd-decider", "sometimes"]);
    assert!(
        e.contains("pd.decider = \"sometimes\"") && e.contains("prefix-threshold"),
        "{e}"
    );
    let e = run_bad(&dir, &["validate", "pd.toml", "--pd-prefix-threshold", "5"]);
    assert!(
        e.contains("pd.prefix_threshold is given but pd.decider = \"never\""),
        "{e}"
    );
    let e = run_bad(
        &dir,
        &["validate", "pd.toml", "--set", "pools.0.role=\"sideways\""],
    );
    assert!(e.contains("pools[0].role = \"sideways\""), "{e}");
    let e = run_bad(&dir, &["validate", "pd.toml", "--num-instances", "4"]);
    assert!(
        e.contains("instance.count = 4") && e.contains("instances"),
        "{e}"
    );
    let e = run_bad(
        &dir,
        &[
            "validate",
            "pd.toml",
            "--set",
            "pools.1.instance.block_size=32",
        ],
    );
    assert!(e.contains("pools[1].instance.block_size = 32"), "{e}");
    let e = run_bad(
        &dir,
        &[
            "validate",
            "pd.toml",
            "--set",
            "pools.1.model.hardware=\"B300\"",
        ],
    );
    assert!(e.contains("pools[1] (decode)") && e.contains("B300"), "{e}");
    let e = run_bad(
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
    let e = run_bad(&dir, &["validate", "decode-only.toml"]);
    assert!(e.contains("no pool can prefill"), "{e}");
}

/// The P/D run file with the fixture's `long-prompt` decider plugin.
fn with_plugin(params: &str) -> String {
    format!(
        "{BASE}{POOLS}decider = \"long-prompt\"\n[pd.decider_params]\n{params}\n\
         [output]\nresults_path = \"results.jsonl\"\ntrace_path = \"trace.jsonl\"\n"
    )
}

fn lines(dir: &TestDir, name: &str) -> Vec<Value> {
    std::fs::read_to_string(dir.path().join(name))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_decider_plugin_from_a_so_disaggregates_exactly_the_long_prompts() {
    let dir = TestDir::new("pd_decider_plugin");
    let so = crate::util::artifacts().decider();
    let so = so.to_str().unwrap();
    let mut counts = Vec::new();
    for n in [0u64, 400, 800, 1500, 100_000] {
        dir.write("pd.toml", &with_plugin(&format!("threshold = {n}")));
        let (r, text) = run(&dir, &["run", "pd.toml", "--plugin", so]);
        let results = lines(&dir, "results.jsonl");
        assert_eq!(results.len(), 200);
        let long = results.iter().filter(|l| u(l, "input_tokens") > n).count() as u64;
        let pd = &r["pd"];
        assert_eq!(pd["decider"], "fixture-decider::long-prompt");
        assert_eq!(u(pd, "disaggregated_requests"), long, "threshold {n}");
        assert_eq!(u(&pd["kv_transfers"], "started"), long, "threshold {n}");
        assert_eq!(u(&r["cluster"], "completed_requests"), 200);
        // Every decision is in the trace with the plugin's reason.
        let decisions: Vec<Value> = lines(&dir, "trace.jsonl")
            .into_iter()
            .filter(|l| l["kind"] == "pd_decider")
            .collect();
        assert_eq!(decisions.len(), 200);
        let yes = decisions
            .iter()
            .filter(|d| d["disaggregate"] == true)
            .count() as u64;
        assert_eq!(yes, long);
        for d in &decisions {
            let input = results
                .iter()
                .find(|l| l["id"] == d["request_id"])
                .map(|l| u(l, "input_tokens"))
                .expect("a result per decision");
            let want = format!(
                "{input} prompt tokens {} {n}",
                if input > n { ">" } else { "≤" }
            );
            assert_eq!(d["reason"], want.as_str());
            assert!(u(d, "decode_instance") >= 2, "decode pool: {d}");
        }
        // Deterministic across processes (INV-6).
        let (_, again) = run(&dir, &["run", "pd.toml", "--plugin", so]);
        assert_eq!(text, again, "threshold {n}");
        counts.push((long, r));
    }
    // The threshold moves the split; the extremes are the standard deciders.
    assert!(counts[1].0 > counts[2].0 && counts[2].0 > counts[3].0);
    assert!(counts[1].0 < 200 && counts[3].0 > 0);
    // The same outputs (a trace adds regret keys to the report).
    dir.write(
        "pd.toml",
        &format!(
            "{BASE}{POOLS}[output]\nresults_path = \"results.jsonl\"\ntrace_path = \"trace.jsonl\"\n"
        ),
    );
    let (always, _) = run(&dir, &["run", "pd.toml", "--pd-decider", "always"]);
    let (never, _) = run(&dir, &["run", "pd.toml", "--pd-decider", "never"]);
    assert_eq!(counts[0].0, 200);
    assert_eq!(counts[4].0, 0);
    for (k, standard) in [(0, &always), (4, &never)] {
        let plugin = &counts[k].1;
        assert_eq!(
            plugin["pd"]["disaggregated_requests"],
            standard["pd"]["disaggregated_requests"]
        );
        // Same split, same simulation: everything but the decider's name agrees.
        assert_eq!(plugin["cluster"], standard["cluster"], "{k}");
        assert_eq!(plugin["instances"], standard["instances"], "{k}");
        assert_eq!(plugin["pd"]["pools"], standard["pd"]["pools"], "{k}");
    }
}

#[test]
fn a_panicking_decider_plugin_is_one_line_naming_it() {
    let dir = TestDir::new("pd_decider_panic");
    dir.write(
        "pd.toml",
        &with_plugin("threshold = 500\npanic_on_request = 17"),
    );
    let o = dir
        .blis()
        .args(["run", "pd.toml", "--plugin"])
        .arg(crate::util::artifacts().decider())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(o.stdout.is_empty(), "nothing on stdout");
    let problem: Vec<&str> = err.lines().filter(|l| l.contains("panicked")).collect();
    assert_eq!(problem.len(), 1, "{err}");
    assert!(
        problem[0].contains(
            "plugin fixture-decider: decider 'long-prompt' panicked in decide for request 17"
        ) && problem[0].contains("asked to panic on request 17"),
        "{err}"
    );
    assert!(
        !err.contains("stack backtrace") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
}

#[test]
fn decider_names_are_checked_against_standard_and_plugin_deciders() {
    let dir = TestDir::new("pd_decider_names");
    let so = crate::util::artifacts().decider();
    let so = so.to_str().unwrap();
    dir.write("pd.toml", &format!("{BASE}{POOLS}"));
    // Unknown: the closest name among standard and plugin deciders.
    let e = run_bad(
        &dir,
        &[
            "validate",
            "pd.toml",
            "--plugin",
            so,
            "--pd-decider",
            "long-promt",
        ],
    );
    assert!(
        e.contains("pd.decider = \"long-promt\"")
            && e.contains("did you mean 'long-prompt'?")
            && e.contains("never, always, prefix-threshold")
            && e.contains("decider plugins: long-prompt"),
        "{e}"
    );
    let e = run_bad(&dir, &["validate", "pd.toml", "--pd-decider", "alwyas"]);
    assert!(
        e.contains("did you mean 'always'?") && e.contains("none loaded"),
        "{e}"
    );
    // A policy of another kind.
    let e = run_bad(
        &dir,
        &["validate", "pd.toml", "--pd-decider", "least-loaded"],
    );
    assert!(
        e.contains("'least-loaded' is a router policy of library blis-std, not a decider"),
        "{e}"
    );
    // Bad parameters: the plugin's own message, naming it.
    dir.write("p.toml", &with_plugin("threshold = -3"));
    let e = run_bad(&dir, &["validate", "p.toml", "--plugin", so]);
    assert!(
        e.contains("pd.decider = \"long-prompt\"")
            && e.contains("cannot create decider 'long-prompt'")
            && e.contains("threshold = -3"),
        "{e}"
    );
    // decider_params for a standard decider.
    dir.write(
        "s.toml",
        &format!("{BASE}{POOLS}decider = \"always\"\n[pd.decider_params]\nthreshold = 3\n"),
    );
    let e = run_bad(&dir, &["validate", "s.toml"]);
    assert!(
        e.contains("[pd.decider_params] is given but pd.decider = \"always\""),
        "{e}"
    );
    // A decider plugin without pools: the [pd] check names the topology.
    dir.write(
        "nopools.toml",
        &format!("{BASE}[pd]\ndecider = \"long-prompt\"\n"),
    );
    let e = run_bad(&dir, &["validate", "nopools.toml", "--plugin", so]);
    assert!(
        e.contains("[pd] is given but the run file has no [[pools]]"),
        "{e}"
    );
    // `blis validate` accepts the plugin; `blis plugins list` shows it.
    dir.write("ok.toml", &with_plugin("threshold = 10"));
    let o = dir
        .blis()
        .args(["validate", "ok.toml", "--plugin", so])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = dir
        .blis()
        .args(["plugins", "list", "--plugin", so])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&o.stdout);
    assert!(
        list.lines()
            .any(|l| l.contains("decider") && l.contains("long-prompt")),
        "{list}"
    );
}

/// An encode pool: the encode stage routes exactly the requests with
/// multimodal input (decider `multimodal`, the default), every request
/// (`always`) or none (`never`), over the encode instances only, which
/// never get work (the reference's encode takes no time); a text-only run
/// of the same pools reports what it did without the pool's stage.
#[test]
fn the_encode_stage_routes_the_multimodal_requests() {
    let dir = TestDir::new("pd_encode");
    let clients = "[workload]\naggregate_rate = 200.0\nnum_requests = 300\n\
        [[workload.clients]]\nid = \"vision\"\nrate_fraction = 0.5\n\
        input = { type = \"constant\", value = 900 }\noutput = { type = \"constant\", value = 20 }\n\
        multimodal = {}\n\
        [[workload.clients]]\nid = \"text\"\nrate_fraction = 0.5\n\
        input = { type = \"constant\", value = 300 }\noutput = { type = \"constant\", value = 20 }\n";
    let base = BASE.split("[workload]").next().unwrap().to_string()
        + clients
        + "[routing]\npolicy = \"least-loaded\"\n";
    let encode = "[[pools]]\nname = \"enc\"\nrole = \"encode\"\ninstances = 2\n";
    let file = |decider: &str| format!("{base}{encode}{POOLS}encode_decider = \"{decider}\"\n");
    dir.write("mm.toml", &file("multimodal"));
    let results = dir.path().join("r.jsonl");
    let (mm, _) = run(
        &dir,
        &[
            "run",
            "mm.toml",
            "--results-path",
            results.to_str().unwrap(),
        ],
    );
    let vision = std::fs::read_to_string(&results)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"client_id\":\"vision\""))
        .count() as u64;
    assert!(vision > 100 && vision < 200, "{vision}");
    assert_eq!(mm["pd"]["encode_decider"], "multimodal");
    assert_eq!(u(&mm["pd"], "encoded_requests"), vision);
    assert_eq!(u(&mm["cluster"], "completed_requests"), 300);
    // Encode instances are the last two: routed to, never given work.
    let pools = mm["pd"]["pools"].as_array().unwrap();
    let enc = pools.iter().find(|p| p["role"] == "encode").unwrap();
    assert_eq!(u(enc, "encoded_requests"), vision);
    assert_eq!(u(enc, "first_instance"), 4);
    for i in 4..6 {
        assert_eq!(u(&mm["instances"][i], "injected_requests"), 0);
    }
    dir.write("always.toml", &file("always"));
    let (always, _) = run(&dir, &["run", "always.toml"]);
    assert_eq!(u(&always["pd"], "encoded_requests"), 300);
    dir.write("never.toml", &file("never"));
    let (never, _) = run(&dir, &["run", "never.toml"]);
    assert_eq!(u(&never["pd"], "encoded_requests"), 0);
    // The encode stage takes no time: the same requests, the same latencies.
    assert_eq!(
        mm["cluster"]["e2e_mean_ms"],
        never["cluster"]["e2e_mean_ms"]
    );
    // Without an encode pool, its keys are refused, and the report has no
    // encode fields.
    dir.write(
        "bad.toml",
        &format!("{base}{POOLS}encode_decider = \"always\"\n"),
    );
    let e = run_bad(&dir, &["run", "bad.toml"]);
    assert!(
        e.contains("pd.encode_decider") && e.contains("role = \"encode\""),
        "{e}"
    );
    dir.write("plain.toml", &format!("{base}{POOLS}"));
    let (plain, _) = run(&dir, &["run", "plain.toml"]);
    assert!(plain["pd"].get("encoded_requests").is_none());
    let e = {
        dir.write(
            "badmm.toml",
            &file("multimodal").replace("multimodal = {}", "multimodal = { fraction = 2.0 }"),
        );
        run_bad(&dir, &["run", "badmm.toml"])
    };
    assert!(e.contains("multimodal.fraction"), "{e}");
}

/// `prefix_min_prompt_tokens` (llm-d's promptTokens): the prefix-threshold
/// decider disaggregates no prompt shorter than the floor — exactly the
/// prompts of at least 1000 tokens here, nothing being cached.
#[test]
fn the_prompt_length_floor_keeps_short_prompts_whole() {
    let dir = TestDir::new("pd_min_prompt");
    dir.write(
        "pd.toml",
        &format!("{BASE}{POOLS}decider = \"prefix-threshold\"\nprefix_threshold = 0\nprefix_min_prompt_tokens = 1000\n"),
    );
    let results = dir.path().join("r.jsonl");
    let (r, _) = run(
        &dir,
        &[
            "run",
            "pd.toml",
            "--results-path",
            results.to_str().unwrap(),
        ],
    );
    let long = std::fs::read_to_string(&results)
        .unwrap()
        .lines()
        .filter(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["input_tokens"].as_u64().unwrap() >= 1000
        })
        .count() as u64;
    assert!(long > 20 && long < 180, "{long}");
    assert_eq!(u(&r["pd"], "disaggregated_requests"), long);
    dir.write(
        "bad.toml",
        &format!("{BASE}{POOLS}prefix_min_prompt_tokens = 10\n"),
    );
    let e = run_bad(&dir, &["run", "bad.toml"]);
    assert!(e.contains("pd.prefix_min_prompt_tokens"), "{e}");
}

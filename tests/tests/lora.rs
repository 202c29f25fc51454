//! LoRA adapters through the real `blis`: bad `[lora]` input refused with
//! exit 2 naming the key, and a run whose report and results file agree on
//! the per-adapter figures, and the `adapter`/`model` columns of TraceV2
//! written by `--trace-output` and carried back into requests by replay.

use crate::util::{run_bad, TestDir};

/// A small valid LoRA run file; `extra` is appended (later keys of the
/// same tables must not repeat earlier ones).
fn run_file(lora: &str, client: &str) -> String {
    format!(
        r#"seed = 7
[model]
name = "qwen3-14b"
hardware = "H100"
tp = 1
[instance]
count = 2
[workload]
aggregate_rate = 20.0
num_requests = 60
[[workload.clients]]
id = "c"
input = {{ type = "constant", value = 64 }}
output = {{ type = "constant", value = 8 }}
{client}
[lora]
adapter_capacity = 2
{lora}
"#
    )
}

const ADAPTERS: &str = r#"[[lora.adapters]]
id = "a"
rank = 8
[[lora.adapters]]
id = "b"
rank = 16
"#;

#[test]
fn bad_lora_input_names_the_key() {
    let dir = TestDir::new("lora_bad_input");
    let cases = [
        (
            "base",
            run_file(
                "[[lora.adapters]]\nid = \"a\"\nrank = 8\nbase_model = \"llama-3.1-8b\"\n",
                "adapter = \"a\"",
            ),
            "lora.adapters[0].base_model",
        ),
        (
            "rank",
            run_file(
                "[[lora.adapters]]\nid = \"a\"\nrank = 0\n",
                "adapter = \"a\"",
            ),
            "lora.adapters[0].rank = 0",
        ),
        (
            "unknown",
            run_file(ADAPTERS, "adapter = \"zz\""),
            "workload.clients[0].adapter = \"zz\"",
        ),
        (
            "unknown_mix",
            run_file(ADAPTERS, "adapter_mix = { ids = [\"a\", \"q\"] }"),
            "workload.clients[0].adapter_mix.ids[1] = \"q\"",
        ),
    ];
    // Round 4, item 15: keys past what can be meant are refused naming the
    // key, in short numbers (they ran, or failed blaming model.alpha or the
    // model's weights).
    let bounded = [
        (
            "load_base_latency_us = 1e300",
            "lora.load_base_latency_us = 1e300",
        ),
        (
            "load_bandwidth_bytes_us = 1e300",
            "lora.load_bandwidth_bytes_us = 1e300",
        ),
        (
            "load_bandwidth_bytes_us = 1e-300",
            "lora.load_bandwidth_bytes_us = 1e-300",
        ),
        (
            "footprint_bytes_per_rank = 18446744073709551615",
            "lora.footprint_bytes_per_rank = 18446744073709551615",
        ),
        (
            "step_overhead_tiers = { \"8\" = { k6 = 1e300, k7 = 0.0 } }",
            "lora.step_overhead_tiers.\"8\".k6 = 1e300",
        ),
    ]
    .map(|(line, key)| {
        (
            "bounds",
            run_file(&format!("{line}\n{ADAPTERS}"), "adapter = \"a\""),
            key,
        )
    });
    let huge_rank = run_file(
        "[[lora.adapters]]\nid = \"a\"\nrank = 4000000000\n",
        "adapter = \"a\"",
    );
    let huge_capacity = run_file(ADAPTERS, "adapter = \"a\"")
        .replace("adapter_capacity = 2", "adapter_capacity = 4000000000");
    let cases = cases.into_iter().chain(bounded).chain([
        ("rank_huge", huge_rank, "lora.adapters[0].rank = 4000000000"),
        (
            "capacity_huge",
            huge_capacity,
            "lora.adapter_capacity = 4000000000",
        ),
    ]);
    for (name, text, key) in cases {
        let p = dir.write(&format!("{name}.toml"), &text);
        let e = run_bad(&dir, &["run", p.to_str().unwrap()]);
        assert!(e.contains(key), "{name}: expected {key} in:\n{e}");
        assert!(!e.contains("model.alpha") && e.len() < 2000, "{name}: {e}");
    }
    // Capacity 0 with adapters declared.
    let text = run_file(ADAPTERS, "adapter = \"a\"")
        .replace("adapter_capacity = 2", "adapter_capacity = 0");
    let p = dir.write("capacity.toml", &text);
    let e = run_bad(&dir, &["run", p.to_str().unwrap()]);
    assert!(e.contains("lora.adapter_capacity = 0"), "{e}");
    // An adapter without [lora].
    let text = run_file(ADAPTERS, "adapter = \"a\"");
    let text = &text[..text.find("[lora]").unwrap()];
    let p = dir.write("nolora.toml", text);
    let e = run_bad(&dir, &["run", p.to_str().unwrap()]);
    assert!(e.contains("workload.clients[0].adapter = \"a\""), "{e}");
    assert!(e.contains("no [lora]"), "{e}");
}

/// The report's `adapters` section agrees with the results file: request
/// counts, completions, output tokens and TTFT percentiles (R-7, as the
/// report computes them) recomputed per adapter from the result lines.
#[test]
fn adapter_section_matches_the_results_file() {
    let dir = TestDir::new("lora_report_vs_results");
    let mut text = run_file(
        ADAPTERS,
        "adapter_mix = { ids = [\"a\", \"b\"], zipf_s = 1.0 }",
    );
    text.push_str("[output]\nresults_path = \"results.jsonl\"\n");
    let p = dir.write("run.toml", &text);
    let o = dir
        .blis()
        .args(["run", p.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let results = std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = results
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 60);
    let adapters = report["adapters"].as_object().expect("adapters section");
    let mut total_loads = 0;
    for id in ["a", "b"] {
        let mine: Vec<&serde_json::Value> = lines.iter().filter(|l| l["adapter"] == id).collect();
        let a = &adapters[id];
        assert_eq!(a["num_requests"], mine.len() as u64, "{id}");
        let done: Vec<_> = mine.iter().filter(|l| l["status"] == "completed").collect();
        assert_eq!(a["completed_requests"], done.len() as u64, "{id}");
        assert_eq!(a["total_output_tokens"], 8 * done.len() as u64, "{id}");
        let mut ttft: Vec<f64> = mine.iter().filter_map(|l| l["ttft_ms"].as_f64()).collect();
        ttft.sort_by(f64::total_cmp);
        let r7 = |p: f64| {
            let h = (ttft.len() - 1) as f64 * p;
            let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
            ttft[lo] + (h - h.floor()) * (ttft[hi] - ttft[lo])
        };
        let close = |x: &serde_json::Value, y: f64| (x.as_f64().unwrap() - y).abs() < 1e-9;
        assert!(close(&a["ttft_p50_ms"], r7(0.5)), "{id}: {a}");
        assert!(close(&a["ttft_p99_ms"], r7(0.99)), "{id}: {a}");
        let loads = a["load_count"].as_u64().unwrap();
        assert!(loads >= 1, "{id}: {a}");
        total_loads += loads;
    }
    // Capacity 2 with two adapters: each instance loads each adapter at
    // most once and never evicts.
    assert!(total_loads <= 4, "{report}");
    for id in ["a", "b"] {
        assert_eq!(adapters[id]["eviction_count"], 0);
    }
    // Every line names its adapter (the mix draws only a and b).
    assert!(lines
        .iter()
        .all(|l| l["adapter"] == "a" || l["adapter"] == "b"));
}

/// `--trace-output` writes each request's adapter and model; replaying the
/// trace carries both back into the requests: the same adapters section,
/// the same cluster block, and a replayed trace with the same columns.
#[test]
fn trace_output_and_replay_carry_adapter_and_model() {
    let dir = TestDir::new("lora_trace_round_trip");
    let text = run_file(
        ADAPTERS,
        "adapter_mix = { ids = [\"a\", \"b\"], zipf_s = 1.0 }\nmodel = \"qwen3-14b\"",
    );
    let p = dir.write("run.toml", &text);
    let p = p.to_str().unwrap();
    let o = dir
        .blis()
        .args([
            "run",
            p,
            "--trace-output",
            "gen",
            "--results-path",
            "run.jsonl",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let csv = std::fs::read_to_string(dir.path().join("gen.csv")).unwrap();
    let mut rows = csv.lines();
    let head: Vec<&str> = rows.next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let (ca, cm) = (col("adapter"), col("model"));
    let results = std::fs::read_to_string(dir.path().join("run.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = results
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rows: Vec<Vec<&str>> = rows.map(|r| r.split(',').collect()).collect();
    assert_eq!(rows.len(), 60);
    for (r, l) in rows.iter().zip(&lines) {
        assert_eq!(r[0], l["id"].to_string(), "rows in id order");
        assert_eq!(r[ca], l["adapter"].as_str().unwrap(), "{r:?} {l}");
        assert_eq!(r[cm], "qwen3-14b");
    }
    assert!(rows.iter().any(|r| r[ca] == "a") && rows.iter().any(|r| r[ca] == "b"));
    let o = dir
        .blis()
        .args([
            "replay",
            "--trace-header",
            "gen.yaml",
            "--trace-data",
            "gen.csv",
            p,
            "--trace-output",
            "again",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rep: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        run["adapters"], rep["adapters"],
        "per-adapter figures reproduced"
    );
    assert_eq!(run["cluster"], rep["cluster"]);
    let again = std::fs::read_to_string(dir.path().join("again.csv")).unwrap();
    let mut again = again.lines();
    let head2: Vec<&str> = again.next().unwrap().split(',').collect();
    // (A fixed-mode replay adds `think_time_us` after them.)
    assert_eq!(head, head2[..head.len()], "the same columns first");
    for (r, a) in rows.iter().zip(again) {
        let a: Vec<&str> = a.split(',').collect();
        assert_eq!((r[ca], r[cm]), (a[ca], a[cm]), "{r:?} {a:?}");
    }
}

/// A trace naming an adapter that `[lora]` does not declare: exit 2 naming
/// the trace's data file and column.
#[test]
fn replayed_unknown_adapter_names_the_trace_column() {
    let dir = TestDir::new("lora_trace_unknown_adapter");
    let text = run_file(ADAPTERS, "adapter = \"a\"");
    let p = dir.write("run.toml", &text);
    let p = p.to_str().unwrap();
    let o = dir
        .blis()
        .args(["run", p, "--trace-output", "gen"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = std::fs::read_to_string(dir.path().join("gen.csv")).unwrap();
    let mut out = String::new();
    for (i, l) in csv.lines().enumerate() {
        if i == 1 {
            // The adapter column is the last one (no session column).
            let cut = l.rfind(',').unwrap();
            out.push_str(&format!("{},zz\n", &l[..cut]));
        } else {
            out.push_str(l);
            out.push('\n');
        }
    }
    dir.write("bad.csv", &out);
    let e = run_bad(
        &dir,
        &[
            "replay",
            "--trace-header",
            "gen.yaml",
            "--trace-data",
            "bad.csv",
            p,
        ],
    );
    assert!(e.contains("bad.csv (column adapter) = \"zz\""), "{e}");
}

/// A client naming a model no instance serves: exit 2 naming the key.
#[test]
fn unknown_client_model_names_the_key() {
    let dir = TestDir::new("lora_unknown_model");
    let text = run_file(ADAPTERS, "adapter = \"a\"\nmodel = \"llama-3.1-8b\"");
    let p = dir.write("run.toml", &text);
    let e = run_bad(&dir, &["run", p.to_str().unwrap()]);
    assert!(
        e.contains("workload.clients[0].model = \"llama-3.1-8b\""),
        "{e}"
    );
}

#[test]
fn an_adapter_never_serves_another_base_models_requests() {
    // Round 4, item 9: an adapter of qwen3-14b named by llama requests ran
    // on the llama instances.
    let dir = TestDir::new("lora_other_base");
    let fleet = r#"seed = 5
[model]
name = "qwen3-14b"
hardware = "H100"
[[pools]]
name = "qwen"
role = "serve"
instances = 2
[[pools]]
name = "llama"
role = "serve"
instances = 2
model = { name = "llama-3.1-8b-instruct", hardware = "A100-80" }
[workload]
aggregate_rate = 10.0
num_requests = 40
[[workload.clients]]
id = "c"
input = { type = "constant", value = 64 }
output = { type = "constant", value = 8 }
"#;
    let lora = "[lora]\n[[lora.adapters]]\nid = \"q\"\nrank = 8\nbase_model = \"qwen3-14b\"\n";
    for (client, expect) in [
        (
            "model = \"llama-3.1-8b-instruct\"\nadapter = \"q\"\n",
            Some("workload.clients[0].adapter = \"q\": the adapter adapts qwen3-14b"),
        ),
        (
            "model = \"llama-3.1-8b-instruct\"\nadapter_mix = { ids = [\"q\"] }\n",
            Some("workload.clients[0].adapter_mix.ids[0] = \"q\""),
        ),
        ("model = \"qwen3-14b\"\nadapter = \"q\"\n", None),
        ("adapter = \"q\"\n", None),
    ] {
        let p = dir.write("run.toml", &format!("{fleet}{client}{lora}"));
        match expect {
            Some(key) => {
                let e = run_bad(&dir, &["run", p.to_str().unwrap()]);
                assert!(e.contains(key), "{client}: {e}");
            }
            None => {
                crate::util::run_ok(&dir, &["run", p.to_str().unwrap(), "--quiet"]);
            }
        }
    }
}

/// `examples/lora.toml` with its `[routing]` section replaced by `routing`
/// and fewer requests (the routing decides; the rest is the example).
fn lora_example_with(routing: &str) -> String {
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lora.toml"),
    )
    .expect("examples/lora.toml");
    let start = example.find("[routing]").expect("a [routing] section");
    let end = example.find("[lora]").expect("a [lora] section");
    format!("{}{routing}\n{}", &example[..start], &example[end..])
        .replace("num_requests = 4000", "num_requests = 1500")
}

/// The per-request outcome a routing produces: the cluster block and the
/// adapters section of the report.
fn outcome(dir: &TestDir, run_file: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["run", run_file.to_str().unwrap(), "--quiet"];
    args.extend(extra);
    let out = crate::util::run_ok(dir, &args);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    serde_json::json!({ "cluster": v["cluster"], "adapters": v["adapters"] })
}

/// The plugin views of LoRA adapters (`blis_plugin_api::lora`, the host's
/// query table) reach libraries loaded from disk, each with its own copy of
/// the API crate: the standard `lora-affinity` scorer from the loaded
/// `libblis_std.so` routes exactly as the embedded one, and a third-party
/// filter (`lora-resident` of the fixture library, which checks the
/// queries against each other at every call and panics on a disagreement)
/// keeping the instances that hold the request's adapter, followed by
/// `queue-depth`, routes exactly as `lora-affinity` weighted 1000:1 over
/// `queue-depth` — the same choice at every decision, so the same report.
#[test]
fn lora_views_reach_plugins_loaded_from_disk() {
    let dir = TestDir::new("lora_views");
    let weighted = dir.write(
        "weighted.toml",
        &lora_example_with(
            "[routing]\npolicy = \"weighted\"\n\
             [[routing.scorers]]\nname = \"lora-affinity\"\nweight = 1000\n\
             [[routing.scorers]]\nname = \"queue-depth\"\nweight = 1\n",
        ),
    );
    let embedded = outcome(&dir, &weighted, &[]);
    let std_so = crate::util::artifacts().blis_std();
    let loaded = outcome(&dir, &weighted, &["--plugin", std_so.to_str().unwrap()]);
    assert_eq!(embedded, loaded);
    // The affinity matters here: round-robin loads adapters far more often.
    let rr = outcome(&dir, &weighted, &["--routing-policy", "round-robin"]);
    let loads = |v: &serde_json::Value| -> u64 {
        v["adapters"]
            .as_object()
            .expect("an adapters section")
            .values()
            .map(|a| a["load_count"].as_u64().unwrap())
            .sum()
    };
    assert!(
        loads(&embedded) * 5 < loads(&rr),
        "{} vs {}",
        loads(&embedded),
        loads(&rr)
    );

    let filtered = dir.write(
        "filtered.toml",
        &lora_example_with(
            "[routing]\npolicy = \"pipeline\"\n[[routing.profiles]]\n\
             filters = [{ name = \"lora-resident\", params = { capacity = 4 } }]\n\
             scorers = [{ name = \"queue-depth\", weight = 1.0 }]\n",
        ),
    );
    let pipeline = crate::util::artifacts().pipeline();
    let via_filter = outcome(&dir, &filtered, &["--plugin", pipeline.to_str().unwrap()]);
    assert_eq!(embedded, via_filter);
}

/// `[routing.freshness] resident_adapters_us`: the LoRA queries answer from
/// a snapshot refreshed that often. A snapshot never refreshed after the
/// first decision (when no adapter is resident anywhere) makes
/// `lora-affinity` score 1 everywhere, so the run routes exactly as
/// `queue-depth` alone; 0 is the default, live.
#[test]
fn resident_adapters_freshness_governs_what_lora_affinity_sees() {
    let dir = TestDir::new("lora_freshness");
    let with = |fresh: &str| {
        dir.write(
            &format!("f{}.toml", fresh.len()),
            &lora_example_with(&format!(
                "[routing]\npolicy = \"weighted\"\n\
                 [[routing.scorers]]\nname = \"lora-affinity\"\nweight = 3\n\
                 [[routing.scorers]]\nname = \"queue-depth\"\nweight = 1\n{fresh}"
            )),
        )
    };
    let live = outcome(&dir, &with(""), &[]);
    let zero = outcome(
        &dir,
        &with("[routing.freshness]\nresident_adapters_us = 0\n"),
        &[],
    );
    assert_eq!(live, zero);
    let frozen = outcome(
        &dir,
        &with("[routing.freshness]\nresident_adapters_us = 1000000000000000\n"),
        &[],
    );
    let queue_only = outcome(&dir, &with(""), &["--routing-scorers", "queue-depth:1"]);
    assert_eq!(frozen, queue_only);
    assert_ne!(frozen, live);
}

/// llm-d's `lora-affinity-scorer` (`lora-affinity` with `graded = true`,
/// and what `--epp-config` maps the llm-d type to), by hand: one adapter
/// slot per instance, two requests for adapter `a`, the second while the
/// first's 100 s load is in flight. The first sees a free slot everywhere (0.8, 0.8: the lowest
/// index wins); the second sees instance 0 loading `a` with no slot left
/// (0.6) and instance 1 with a free slot (0.8), so it goes to instance 1 —
/// where the reference's `lora-affinity` sends it to the loading instance
/// 0 (1 against 0).
#[test]
fn llm_d_lora_affinity_scores_free_slots_above_a_load_in_flight() {
    let dir = TestDir::new("lora_graded");
    let base = |routing: &str| {
        format!(
            "seed = 3\n[model]\nname = \"qwen3-14b\"\nhardware = \"H100\"\n\
             [instance]\ncount = 2\n\
             [workload]\naggregate_rate = 5.0\nnum_requests = 2\n\
             [[workload.clients]]\nid = \"c\"\nadapter = \"a\"\n\
             input = {{ type = \"constant\", value = 64 }}\noutput = {{ type = \"constant\", value = 4 }}\n\
             {routing}\n\
             [lora]\nadapter_capacity = 1\nload_base_latency_us = 100000000.0\n\
             [[lora.adapters]]\nid = \"a\"\nrank = 8\n\
             [output]\ntrace_path = \"trace.jsonl\"\n"
        )
    };
    let decisions = |file: &str, extra: &[&str]| -> Vec<Vec<(u64, f64)>> {
        let mut args = vec!["run", file, "--quiet"];
        args.extend(extra);
        crate::util::run_ok(&dir, &args);
        let trace = std::fs::read_to_string(dir.path().join("trace.jsonl")).unwrap();
        trace
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| v["kind"] == "routing")
            .map(|v| {
                // The record ranks the candidates; put them in index order.
                let mut d: Vec<(u64, f64)> = v["candidates"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| {
                        let s = c["scorer_scores"].as_object().unwrap();
                        (
                            c["instance"].as_u64().unwrap(),
                            s.values().next().unwrap().as_f64().unwrap(),
                        )
                    })
                    .collect();
                d.sort_by_key(|&(i, _)| i);
                d
            })
            .collect()
    };
    let chosen = |d: &[(u64, f64)]| {
        d.iter()
            .fold(
                (0, f64::NEG_INFINITY),
                |b, &(i, s)| if s > b.1 { (i, s) } else { b },
            )
            .0
    };
    dir.write(
        "graded.toml",
        &base(
            "[routing]\npolicy = \"weighted\"\n[[routing.scorers]]\nname = \"lora-affinity\"\n\
             weight = 1.0\nparams = { graded = true }",
        ),
    );
    let graded = decisions("graded.toml", &[]);
    assert_eq!(graded[0], [(0, 0.8), (1, 0.8)]);
    assert_eq!(graded[1], [(0, 0.6), (1, 0.8)]);
    assert_eq!((chosen(&graded[0]), chosen(&graded[1])), (0, 1));

    dir.write(
        "reference.toml",
        &base("[routing]\npolicy = \"weighted\"\n[[routing.scorers]]\nname = \"lora-affinity\"\nweight = 1.0"),
    );
    let reference = decisions("reference.toml", &[]);
    assert_eq!(reference[1], [(0, 1.0), (1, 0.0)]);

    // The llm-d type, read from an EndpointPickerConfig file (its 50 ms
    // metrics scrape is long past at the second request, ~0.2 s later).
    dir.write(
        "lora.yaml",
        "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n\
         plugins:\n- type: lora-affinity-scorer\n- type: max-score-picker\n\
         schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: lora-affinity-scorer\n  - pluginRef: max-score-picker\n",
    );
    dir.write("epp.toml", &base(""));
    let from_epp = decisions("epp.toml", &["--epp-config", "lora.yaml"]);
    // llm-d's max-score picker breaks the first decision's tie at random
    // (blis seeds it): the second request sees a load in flight on
    // whichever instance got the first, and a free slot on the other.
    assert_eq!(from_epp[0], graded[0]);
    let mut second: Vec<f64> = from_epp[1].iter().map(|&(_, s)| s).collect();
    second.sort_by(f64::total_cmp);
    assert_eq!(second, [0.6, 0.8]);
}

/// `lora-affinity` on a run without `[lora]` (llm-d's default integration
/// config has its scorer): every instance scores alike, so the run is the
/// run without it, with a note (issue 53, item 17); alone it is refused.
#[test]
fn lora_affinity_without_lora_is_left_out_with_a_note() {
    let dir = TestDir::new("lora_affinity_no_lora");
    let base = "seed = 4\n[instance]\ncount = 3\n[workload]\naggregate_rate = 20.0\nnum_requests = 200\n[routing]\npolicy = \"weighted\"\ntie_break = \"random\"\n";
    dir.write(
        "with.toml",
        &format!("{base}scorers = [{{ name = \"lora-affinity\", weight = 2.0 }}, {{ name = \"waiting-queue\", weight = 1.0 }}]\n"),
    );
    dir.write(
        "without.toml",
        &format!("{base}scorers = [{{ name = \"waiting-queue\", weight = 1.0 }}]\n"),
    );
    let with = dir.blis().args(["run", "with.toml"]).output().unwrap();
    let e = String::from_utf8_lossy(&with.stderr);
    assert!(with.status.success(), "{e}");
    assert!(
        e.contains("'lora-affinity' is left out") && e.contains("[lora]"),
        "{e}"
    );
    let without = dir.blis().args(["run", "without.toml"]).output().unwrap();
    assert_eq!(with.stdout, without.stdout);
    dir.write(
        "alone.toml",
        &format!("{base}scorers = [{{ name = \"lora-affinity\", weight = 1.0 }}]\n"),
    );
    let e = crate::util::run_bad(&dir, &["run", "alone.toml"]);
    assert!(e.contains("lora-affinity") && e.contains("[lora]"), "{e}");
}

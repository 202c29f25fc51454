//! TraceV2 end to end through the real `blis`: `run --trace-output` then
//! `replay` reproduces every request (with and without closed-loop
//! sessions), the reference fixtures (`calibrate-basic`,
//! `replay-three-requests`), every optional-column layout, and the bad
//! inputs of issue 27 (exit 2, nothing on stdout, the file/line/flag named).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::util::{run_bad, TestDir};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/workload-head")
        .join(name)
}

fn run_ok(dir: &TestDir, args: &[&str]) -> Value {
    let o = dir.blis().args(args).output().expect("run blis");
    assert!(
        o.status.success(),
        "blis {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

fn lines(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const HEAD: &str = "request_id,client_id,tenant_id,slo_class,session_id,round_index,prefix_group,prefix_length,streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,reason_ratio,model,deadline_us,server_input_tokens,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,finish_reason";

#[test]
fn run_then_replay_gives_the_same_per_request_latencies() {
    let d = TestDir::new("trace-round-trip");
    let rf = fixture("round-trip.toml");
    let rf = rf.to_str().unwrap();
    let run = run_ok(
        &d,
        &[
            "run",
            rf,
            "--trace-output",
            "gen",
            "--results-path",
            "run.jsonl",
        ],
    );
    let header = std::fs::read_to_string(d.path().join("gen.yaml")).unwrap();
    assert!(
        header.contains("mode: generated") && header.contains("workload_seed: 7"),
        "{header}"
    );
    let rep = run_ok(
        &d,
        &[
            "replay",
            "--trace-header",
            "gen.yaml",
            "--trace-data",
            "gen.csv",
            rf,
            "--results-path",
            "sim.json",
        ],
    );
    let ran = lines(&d.path().join("run.jsonl"));
    let sims: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("sim.json")).unwrap()).unwrap();
    assert_eq!(ran.len(), 300);
    assert_eq!(
        sims.len(),
        300,
        "every request completed and is in the SimResult array"
    );
    for (r, s) in ran.iter().zip(&sims) {
        assert_eq!(r["id"], s["request_id"]);
        let ttft = r["ttft_ms"].as_f64().unwrap() * 1000.0;
        let e2e = r["e2e_ms"].as_f64().unwrap() * 1000.0;
        assert!(
            (ttft - s["ttft_us"].as_f64().unwrap()).abs() < 1e-6,
            "{r} {s}"
        );
        assert!(
            (e2e - s["e2e_us"].as_f64().unwrap()).abs() < 1e-6,
            "{r} {s}"
        );
    }
    assert_eq!(
        run["cluster"], rep["cluster"],
        "the whole cluster block is reproduced"
    );
}

#[test]
fn closed_loop_replay_reproduces_sessions() {
    let d = TestDir::new("trace-round-trip-sessions");
    let rf = fixture("round-trip-sessions.toml");
    let rf = rf.to_str().unwrap();
    let run = run_ok(
        &d,
        &[
            "run",
            rf,
            "--trace-output",
            "gen",
            "--results-path",
            "run.jsonl",
        ],
    );
    let csv = std::fs::read_to_string(d.path().join("gen.csv")).unwrap();
    assert!(csv.lines().next().unwrap().ends_with(",think_time_us"));
    // Relative output paths of --set resolve against the run file's folder.
    let results = format!("output.results_path={:?}", d.path().join("rep.jsonl"));
    let rep = run_ok(
        &d,
        &[
            "replay",
            "--trace-header",
            "gen.yaml",
            "--trace-data",
            "gen.csv",
            rf,
            "--session-mode",
            "closed-loop",
            "--set",
            &results,
            "--horizon",
            "100000000000",
            "--trace-output",
            "again",
        ],
    );
    // The replay's own trace holds every round, each under its row's id
    // (issue 53, item 6: it held round 0 only).
    let ids = |f: &str| -> Vec<u64> {
        let mut v: Vec<u64> = blis_host::trace_v2::TraceReader::open(&d.path().join(f))
            .unwrap()
            .map(|r| r.unwrap().request_id)
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(ids("again.csv").len(), 200);
    assert_eq!(ids("again.csv"), ids("gen.csv"));
    let key = |v: &Value| {
        (
            v["arrival_us"].as_i64().unwrap(),
            v["input_tokens"].as_u64().unwrap(),
            v["output_tokens"].as_u64().unwrap(),
            v["ttft_ms"].to_string(),
            v["e2e_ms"].to_string(),
        )
    };
    let mut a: Vec<_> = lines(&d.path().join("run.jsonl")).iter().map(key).collect();
    let mut b: Vec<_> = lines(&d.path().join("rep.jsonl")).iter().map(key).collect();
    a.sort();
    b.sort();
    assert_eq!(a.len(), 200);
    assert!(
        a.iter().any(|k| k.1 > 128 + 1000),
        "later rounds carry the accumulated context (one round's input is at most 128 + ~1000)"
    );
    assert_eq!(
        a, b,
        "every round: arrival, prompt and output lengths, TTFT, E2E"
    );
    assert_eq!(run["cluster"], rep["cluster"]);
    // Fixed mode injects the recorded rounds at their recorded times, each
    // with its session's accumulated context (issue 53, item 10: it had
    // only the round's new tokens): the run again, round by round.
    let results = format!("output.results_path={:?}", d.path().join("fixed.jsonl"));
    let fixed = run_ok(
        &d,
        &[
            "replay",
            "--trace-header",
            "gen.yaml",
            "--trace-data",
            "gen.csv",
            rf,
            "--set",
            &results,
            "--horizon",
            "100000000000",
        ],
    );
    let mut c: Vec<_> = lines(&d.path().join("fixed.jsonl"))
        .iter()
        .map(key)
        .collect();
    c.sort();
    assert_eq!(a, c, "fixed mode: every round as in the run");
    assert_eq!(run["cluster"], fixed["cluster"]);
}

#[test]
fn calibrate_basic_fixture_matches_three_with_mape_zero_and_rates_poor() {
    let d = TestDir::new("trace-calibrate-basic");
    let (h, c, s) = (
        fixture("calibrate-basic.trace.yaml"),
        fixture("calibrate-basic.trace.csv"),
        fixture("calibrate-basic.sim-results.json"),
    );
    let out = run_ok(
        &d,
        &[
            "calibrate",
            "--trace-header",
            h.to_str().unwrap(),
            "--trace-data",
            c.to_str().unwrap(),
            "--sim-results",
            s.to_str().unwrap(),
            "--report",
            "cal.json",
        ],
    );
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("cal.json")).unwrap()).unwrap();
    assert_eq!(out, file, "stdout is the report written");
    assert_eq!(out["trace_info"]["matched_pairs"], 3);
    assert_eq!(out["trace_info"]["num_requests"], 3);
    assert_eq!(out["trace_info"]["token_mismatches"], 0);
    for m in ["ttft", "e2e"] {
        let rl = &out["metrics"][m]["request_level"];
        assert_eq!(rl["mape"], 0.0, "{m}");
        // Quirk 5: constant vectors → Pearson denominator 0 → r = 0 → poor.
        assert_eq!(rl["pearson_r"], 0.0, "{m}");
        assert_eq!(rl["quality"], "poor", "{m}");
        assert_eq!(rl["bias_direction"], "neutral", "{m}");
        assert_eq!(out["metrics"][m]["count"], 3);
    }
    assert_eq!(
        out["metrics"]["ttft"]["workload_level"]["real_mean"],
        4000.0
    );
    assert_eq!(out["metrics"]["e2e"]["workload_level"]["sim_p99"], 9000.0);
    assert_eq!(out["ttft_tolerance"]["within"], true);
    assert_eq!(out["known_limitations"].as_array().unwrap().len(), 4);
    // An RTT of 1 ms makes every sim latency 1000 µs larger: hand-computed MAPE.
    let out = run_ok(
        &d,
        &[
            "calibrate",
            "--trace-header",
            h.to_str().unwrap(),
            "--trace-data",
            c.to_str().unwrap(),
            "--sim-results",
            s.to_str().unwrap(),
            "--report",
            "cal2.json",
            "--network-rtt-us",
            "1000",
        ],
    );
    assert_eq!(out["metrics"]["ttft"]["request_level"]["mape"], 0.25);
    assert_eq!(
        out["metrics"]["e2e"]["request_level"]["bias_direction"],
        "over-predict"
    );
}

#[test]
fn replay_three_requests_fixture_replays_as_specified() {
    let d = TestDir::new("trace-replay-three");
    let (h, c) = (
        fixture("replay-three-requests.trace.yaml"),
        fixture("replay-three-requests.trace.csv"),
    );
    let rep = run_ok(
        &d,
        &[
            "replay",
            "--trace-header",
            h.to_str().unwrap(),
            "--trace-data",
            c.to_str().unwrap(),
            "--results-path",
            "sim.json",
            "--metrics-path",
            "m.json",
            "--set",
            "output.results_path=\"r.jsonl\"",
        ],
    );
    assert_eq!(rep["cluster"]["completed_requests"], 3);
    let arrivals: Vec<i64> = lines(&d.path().join("r.jsonl"))
        .iter()
        .map(|v| v["arrival_us"].as_i64().unwrap())
        .collect();
    assert_eq!(
        arrivals,
        vec![0, 100_000, 200_000],
        "injected at send = arrival"
    );
    let sims: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("sim.json")).unwrap()).unwrap();
    let ids: Vec<u64> = sims
        .iter()
        .map(|s| s["request_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, vec![0, 1, 2]);
    for s in &sims {
        assert_eq!(
            (s["input_tokens"].as_u64(), s["output_tokens"].as_u64()),
            (Some(10), Some(5))
        );
        // The requests do not overlap: each sees an idle cluster.
        assert_eq!(s["ttft_us"], sims[0]["ttft_us"]);
    }
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("m.json")).unwrap()).unwrap();
    assert!(m["cache_hit_rate"].is_number());
    assert_eq!(m["completed_requests"], 3);
}

#[test]
fn every_optional_column_layout_replays() {
    let d = TestDir::new("trace-layouts");
    d.write("h.yaml", "trace_version: 3\nmode: real\n");
    let layouts: [(&str, &str, &str); 4] = [
        ("", "", ""),
        ("vllm_priority", "", ""),
        (
            "vllm_priority",
            "slo_target_us",
            "x_request_id,adapter,think_time_us",
        ),
        ("", "slo_target_us", "think_time_us"),
    ];
    for (i, (p, t, trail)) in layouts.iter().enumerate() {
        let mut cols: Vec<&str> = HEAD.split(',').collect();
        if !t.is_empty() {
            cols.insert(18, t);
        }
        if !p.is_empty() {
            cols.insert(4, p);
        }
        if !trail.is_empty() {
            cols.extend(trail.split(','));
        }
        let mut text = cols.join(",") + "\n";
        for r in 0..3 {
            let v: Vec<String> = cols
                .iter()
                .map(|c| match *c {
                    "request_id" => r.to_string(),
                    "client_id" | "tenant_id" | "model" | "session_id" | "prefix_group"
                    | "error_message" | "finish_reason" | "x_request_id" | "adapter" => {
                        String::new()
                    }
                    "slo_class" => "critical".into(),
                    "streaming" => "true".into(),
                    "status" => "ok".into(),
                    "reason_ratio" => "0".into(),
                    "input_tokens" => "20".into(),
                    "output_tokens" => "4".into(),
                    "arrival_time_us" => (r * 50_000).to_string(),
                    _ => "0".into(),
                })
                .collect();
            text += &(v.join(",") + "\n");
        }
        let data = d.write(&format!("d{i}.csv"), &text);
        let rep = run_ok(
            &d,
            &[
                "replay",
                "--trace-header",
                "h.yaml",
                "--trace-data",
                data.to_str().unwrap(),
            ],
        );
        assert_eq!(
            rep["cluster"]["completed_requests"], 3,
            "layout {i}: {text}"
        );
        assert_eq!(rep["cluster"]["total_input_tokens"], 60, "layout {i}");
    }
}

#[test]
fn bad_trace_input_names_the_file_line_key_or_flag() {
    let d = TestDir::new("trace-bad-input");
    let row = "0,c,t,,s1,0,,0,true,10,5,10,0,0,0,0,,0,0,0,0,0,0,0,ok,,";
    d.write("ok.yaml", "mode: generated\n");
    d.write("ok.csv", &format!("{HEAD}\n{row}\n"));
    let replay = |h: &str, c: &str, extra: &[&str]| {
        let mut a = vec!["replay", "--trace-header", h, "--trace-data", c];
        a.extend_from_slice(extra);
        run_bad(&d, &a)
    };
    d.write(
        "unknown.yaml",
        "mode: generated\nserver:\n  type: vllm\n  gpu_count: 8\n",
    );
    let e = replay("unknown.yaml", "ok.csv", &[]);
    assert!(e.contains("unknown.yaml") && e.contains("gpu_count"), "{e}");
    d.write("short.csv", &format!("{HEAD}\n{row}\n0,c,t,,s1\n"));
    let e = replay("ok.yaml", "short.csv", &[]);
    assert!(e.contains("short.csv:3:") && e.contains("5 fields"), "{e}");
    let neg = row.replacen(",10,5,", ",10,-5,", 1);
    d.write("neg.csv", &format!("{HEAD}\n{neg}\n"));
    let e = replay("ok.yaml", "neg.csv", &[]);
    assert!(
        e.contains("neg.csv:2:") && e.contains("output_tokens") && e.contains("negative"),
        "{e}"
    );
    let r2 = row.replacen(",s1,0,", ",s1,2,", 1).replacen("0,", "1,", 1);
    d.write("rounds.csv", &format!("{HEAD}\n{row}\n{r2}\n"));
    let e = replay("ok.yaml", "rounds.csv", &["--session-mode", "closed-loop"]);
    assert!(
        e.contains("rounds.csv:3:") && e.contains("round_index") && e.contains("s1"),
        "{e}"
    );
    d.write(
        "typo.yaml",
        "mode: generated\nsession_context_growth: accumulated\n",
    );
    let e = replay("typo.yaml", "ok.csv", &[]);
    assert!(
        e.contains("typo.yaml") && e.contains("session_context_growth"),
        "{e}"
    );
    let e = replay("ok.yaml", "ok.csv", &["--think-time-ms", "5"]);
    assert!(
        e.contains("--think-time-ms") && e.contains("closed-loop"),
        "{e}"
    );
    let e = replay(
        "ok.yaml",
        "ok.csv",
        &["--think-time-dist", "constant:value=5ms"],
    );
    assert!(e.contains("--think-time-dist"), "{e}");
    let e = replay(
        "ok.yaml",
        "ok.csv",
        &[
            "--session-mode",
            "closed-loop",
            "--think-time-dist",
            "lognormal:mu=1,sigma=0",
        ],
    );
    assert!(e.contains("sigma"), "{e}");
    // Think times past a day name the flag or column (issue 53, item 15:
    // they failed with the time-limit error, naming neither).
    for (flags, key) in [
        (
            &["--think-time-ms", "1e300"][..],
            "--think-time-ms) = 1e300",
        ),
        (
            &["--think-time-dist", "lognormal:mu=700,sigma=1"][..],
            "mu=700",
        ),
        (
            &["--think-time-dist", "constant:value=1e300s"][..],
            "value=1e300s",
        ),
        (
            &["--think-time-dist", "lognormal:mu=1,sigma=1,max=1e300"][..],
            "max=1e300",
        ),
    ] {
        let mut a = vec!["--session-mode", "closed-loop"];
        a.extend_from_slice(flags);
        let e = replay("ok.yaml", "ok.csv", &a);
        assert!(e.contains(key) && e.contains("a day"), "{flags:?}: {e}");
    }
    let r1 = row.replacen("0,", "1,", 1).replacen(",s1,0,", ",s1,1,", 1);
    d.write(
        "think.csv",
        &format!("{HEAD},think_time_us\n{row},0\n{r1},100000000000000000\n"),
    );
    let e = replay("ok.yaml", "think.csv", &["--session-mode", "closed-loop"]);
    assert!(
        e.contains("think.csv:3:") && e.contains("column think_time_us"),
        "{e}"
    );
    let e = replay("ok.yaml", "missing.csv", &[]);
    assert!(e.contains("missing.csv"), "{e}");
    // Rows no server produces, and a header whose names say the values
    // would be read as other quantities (issue 53, item 12).
    let r1 = row.replacen("0,", "1,", 1);
    d.write("dup.csv", &format!("{HEAD}\n{row}\n{r1}\n{row}\n"));
    let e = replay("ok.yaml", "dup.csv", &[]);
    assert!(
        e.contains("dup.csv:4:") && e.contains("request_id 0") && e.contains("line 2"),
        "{e}"
    );
    let zero = row.replacen(",10,5,10,", ",0,0,0,", 1);
    d.write("zero.csv", &format!("{HEAD}\n{zero}\n"));
    let e = replay("ok.yaml", "zero.csv", &[]);
    assert!(
        e.contains("zero.csv:2:") && e.contains("input_tokens = output_tokens = 0"),
        "{e}"
    );
    let swapped = HEAD.replacen(
        "input_tokens,output_tokens",
        "output_tokens,input_tokens",
        1,
    );
    d.write("swap.csv", &format!("{swapped}\n{row}\n"));
    let e = replay("ok.yaml", "swap.csv", &[]);
    assert!(
        e.contains("swap.csv") && e.contains("column 10 is named 'output_tokens'"),
        "{e}"
    );
    // The same checks hold for the run-file workload.
    d.write(
        "rf.toml",
        "[workload.trace_v2]\nheader = \"ok.yaml\"\ndata = \"neg.csv\"\n",
    );
    let e = run_bad(&d, &["run", "rf.toml"]);
    assert!(e.contains("neg.csv:2:"), "{e}");
    let e = run_bad(
        &d,
        &[
            "calibrate",
            "--trace-header",
            "ok.yaml",
            "--trace-data",
            "ok.csv",
            "--sim-results",
            "ok.csv",
            "--report",
            "r.json",
        ],
    );
    assert!(e.contains("ok.csv") && e.contains("SimResult"), "{e}");
}

#[test]
fn run_file_workload_replays_with_paths_relative_to_the_run_file() {
    let d = TestDir::new("trace-run-file");
    std::fs::create_dir_all(d.path().join("sub")).unwrap();
    d.write("sub/t.yaml", "mode: generated\n");
    d.write(
        "sub/t.csv",
        &format!(
            "{HEAD}\n0,c,t,,,0,g,8,true,10,5,10,0,0,0,0,,0,0,0,0,0,0,0,ok,,\n1,c,t,,,0,g,8,true,12,5,10,0,0,0,0,,0,0,1000,1000,0,0,0,ok,,\n"
        ),
    );
    d.write(
        "sub/rf.toml",
        "[instance]\ncount = 1\n[workload.trace_v2]\nheader = \"t.yaml\"\ndata = \"t.csv\"\nsession_mode = \"fixed\"\n",
    );
    let rep = run_ok(&d, &["run", "sub/rf.toml", "--set", "instance.count=2"]);
    assert_eq!(rep["cluster"]["completed_requests"], 2);
    // prefix 8 + 10 and prefix 8 + 12 tokens
    assert_eq!(rep["cluster"]["total_input_tokens"], 38);
}

/// A TraceV2 row with image, audio or video tokens is a request with
/// multimodal input: on a run with an encode pool, the encode stage routes
/// exactly those rows (open loop here; closed-loop follow-up rounds carry
/// the flag in their round record).
#[test]
fn multimodal_rows_take_the_encode_stage() {
    let d = TestDir::new("trace-multimodal");
    d.write("h.yaml", "trace_version: 3\nmode: real\n");
    let cols: Vec<&str> = HEAD.split(',').collect();
    let mut text = HEAD.to_string() + "\n";
    for r in 0..6 {
        let v: Vec<String> = cols
            .iter()
            .map(|c| match *c {
                "request_id" => r.to_string(),
                "client_id" | "tenant_id" | "model" | "prefix_group" | "error_message"
                | "finish_reason" => String::new(),
                "session_id" => "s".into(),
                "round_index" => r.to_string(),
                "slo_class" => "standard".into(),
                "streaming" => "true".into(),
                "status" => "ok".into(),
                "reason_ratio" => "0".into(),
                "input_tokens" => "600".into(),
                "output_tokens" => "4".into(),
                "image_tokens" if r % 3 == 0 => "576".into(),
                "audio_tokens" if r == 4 => "100".into(),
                "arrival_time_us" => (r * 50_000).to_string(),
                _ => "0".into(),
            })
            .collect();
        text += &(v.join(",") + "\n");
    }
    d.write("d.csv", &text);
    d.write(
        "run.toml",
        "[[pools]]\nname = \"e\"\nrole = \"encode\"\ninstances = 1\n\
         [[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 1\n\
         [workload.trace_v2]\nheader = \"h.yaml\"\ndata = \"d.csv\"\n",
    );
    let rep = run_ok(&d, &["run", "run.toml"]);
    assert_eq!(rep["cluster"]["completed_requests"], 6);
    // Rows 0 and 3 (images) and 4 (audio).
    assert_eq!(rep["pd"]["encoded_requests"], 3, "{}", rep["pd"]);
    // Closed loop: rounds 1 to 5 are follow-ups replayed from the round
    // records; the same three carry the flag.
    let closed = std::fs::read_to_string(d.path().join("run.toml")).unwrap()
        + "session_mode = \"closed-loop\"\n";
    d.write("closed.toml", &closed);
    let rep = run_ok(&d, &["run", "closed.toml"]);
    assert_eq!(rep["cluster"]["completed_requests"], 6);
    assert_eq!(rep["pd"]["encoded_requests"], 3, "{}", rep["pd"]);
}

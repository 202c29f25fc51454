//! `blis plan` through the real binary: the same answer as an exhaustive
//! `blis sweep` of the same space filtered by the same SLOs (several SLO
//! settings, one infeasible), far fewer simulations, resumption, and bad
//! plan files refused with the file and key named.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use crate::util::{code_out_err, fit_args, run_bad, run_ok, slower_measurements, TestDir};

/// A small chat workload; the plan and the sweep set GPU, TP, count, rate.
const BASE: &str = r#"
seed = 1
[model]
name = "qwen3-14b"
hardware = "H100"
[instance]
count = 2
[workload]
aggregate_rate = 600.0
num_requests = 1500
[[workload.clients]]
id = "chat"
prefix_group = "system"
prefix_length = 256
input = { type = "gaussian", mean = 200, std_dev = 80, min = 10, max = 1000 }
output = { type = "gaussian", mean = 120, std_dev = 40, min = 5, max = 400 }
[routing]
policy = "round-robin"
"#;

const GPUS: [&str; 3] = ["H100", "A100-SXM", "L40S"];
const TPS: [u32; 2] = [1, 2];
const ROUTINGS: [&str; 2] = ["round-robin", "least-loaded"];
const MAX: u32 = 20;
const SEEDS: [u64; 3] = [1, 2, 3];
const RATE: f64 = 600.0;

fn routing_variants() -> &'static str {
    r#"
[[VARIANT]]
name = "round-robin"
set = { "routing.policy" = "round-robin" }
[[VARIANT]]
name = "least-loaded"
set = { "routing.policy" = "weighted", "routing.scorers" = [{ name = "queue-depth", weight = 1.0 }] }
"#
}

fn plan_file(slos: &[&str]) -> String {
    format!(
        "base = \"base.toml\"\nseeds = [1, 2, 3]\nslo = [{}]\n[traffic]\nrate = {RATE}\n[space]\ngpu = [\"H100\", \"A100-SXM\", \"L40S\"]\ntp = [1, 2]\ninstances = [1, {MAX}]\n[[space.axis]]\nname = \"routing\"\n{}",
        slos.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", "),
        routing_variants().replace("VARIANT", "space.axis.variants")
    )
}

fn sweep_file() -> String {
    format!(
        "base = \"base.toml\"\nseeds = [1, 2, 3]\n[set]\n\"workload.aggregate_rate\" = {RATE}\n[[axis]]\nkey = \"model.hardware\"\nname = \"gpu\"\nvalues = [\"H100\", \"A100-SXM\", \"L40S\"]\n[[axis]]\nkey = \"model.tp\"\nname = \"tp\"\nvalues = [1, 2]\n[[axis]]\nname = \"routing\"\n{}\n[[axis]]\nkey = \"instance.count\"\nname = \"instances\"\nvalues = [{}]\n",
        routing_variants().replace("VARIANT", "axis.variants"),
        (1..=MAX).map(|n| n.to_string()).collect::<Vec<_>>().join(", ")
    )
}

/// Price per GPU-hour (the default table).
fn price(gpu: &str) -> f64 {
    match gpu {
        "H100" => 4.0,
        "A100-SXM" => 2.5,
        _ => 1.5,
    }
}

/// A configuration: GPU, TP, routing, instances.
type Config = (String, u32, String, u32);

/// One configuration's metrics at each seed, from the sweep's table.
type Grid = HashMap<Config, Vec<(f64, f64)>>;

fn read_grid(dir: &Path) -> Grid {
    let text = std::fs::read_to_string(dir.join("results.jsonl")).unwrap();
    let mut grid: Grid = HashMap::new();
    for line in text.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        assert_eq!(r["status"], "ok", "{r}");
        let key = (
            r["gpu"].as_str().unwrap().to_string(),
            r["tp"].as_u64().unwrap() as u32,
            r["routing"].as_str().unwrap().to_string(),
            r["instances"].as_u64().unwrap() as u32,
        );
        let ttft = r["ttft_p99_ms"].as_f64().unwrap_or(f64::INFINITY);
        let itl = r["itl_p99_ms"].as_f64().unwrap_or(f64::INFINITY);
        grid.entry(key).or_default().push((ttft, itl));
    }
    grid
}

/// The brute-force answer: the cheapest configuration whose every seed
/// meets both bounds; ties by GPUs, then the plan's shape order (GPU, TP,
/// routing as listed).
fn brute_force(grid: &Grid, ttft_max: f64, itl_max: f64) -> Option<Config> {
    let mut best: Option<((f64, u32, usize), Config)> = None;
    let mut shape = 0;
    for gpu in GPUS {
        for tp in TPS {
            for routing in ROUTINGS {
                for n in 1..=MAX {
                    let key = (gpu.to_string(), tp, routing.to_string(), n);
                    let seeds = &grid[&key];
                    assert_eq!(seeds.len(), SEEDS.len());
                    if seeds.iter().all(|&(t, i)| t <= ttft_max && i <= itl_max) {
                        let order = (f64::from(n * tp) * price(gpu), n * tp, shape);
                        if best.as_ref().is_none_or(|(b, _)| order < *b) {
                            best = Some((order, key));
                        }
                    }
                }
                shape += 1;
            }
        }
    }
    best.map(|(_, k)| k)
}

#[test]
fn plan_returns_the_brute_force_answer_with_far_fewer_simulations() {
    let dir = TestDir::new("plan_brute_force");
    dir.write("base.toml", BASE);
    dir.write("sweep.toml", &sweep_file());
    run_ok(
        &dir,
        &["sweep", "sweep.toml", "--out", "grid", "--jobs", "2"],
    );
    let grid = read_grid(&dir.path().join("grid"));
    assert_eq!(
        grid.len(),
        3 * 2 * 2 * MAX as usize,
        "the grid's configurations"
    );

    let settings: [(f64, f64, bool); 6] = [
        (1000.0, 50.0, true),
        (300.0, 40.0, true),
        (150.0, 30.0, true),
        (100.0, 22.0, true),
        (5000.0, 100.0, true),
        (1.0, 1.0, false),
    ];
    for (k, (ttft, itl, feasible)) in settings.into_iter().enumerate() {
        let expected = brute_force(&grid, ttft, itl);
        assert_eq!(
            expected.is_some(),
            feasible,
            "setting {k}: the test's own premise"
        );
        let name = format!("plan{k}.toml");
        let slo_t = format!("ttft_p99_ms <= {ttft}");
        let slo_i = format!("itl_p99_ms <= {itl}");
        dir.write(&name, &plan_file(&[&slo_t, &slo_i]));
        let out = format!("out{k}");
        let o = dir
            .blis()
            .args(["plan", &name, "--out", &out, "--jobs", "2"])
            .output()
            .unwrap();
        let (code, stdout, stderr) = code_out_err(&o);
        let plan: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join(&out).join("plan.json")).unwrap(),
        )
        .unwrap();
        match expected {
            Some((gpu, tp, routing, n)) => {
                assert_eq!(code, Some(0), "setting {k}: {stderr}");
                let a = &plan["answer"];
                let got = (
                    a["gpu"].as_str().unwrap().to_string(),
                    a["tp"].as_u64().unwrap() as u32,
                    a["routing"].as_str().unwrap().to_string(),
                    a["instances"].as_u64().unwrap() as u32,
                );
                assert_eq!(
                    got,
                    (gpu, tp, routing, n),
                    "setting {k} ({slo_t}, {slo_i}): {stderr}"
                );
                let summary: Value = serde_json::from_str(&stdout).unwrap();
                assert_eq!(summary["answer"], plan["answer"]);
                assert!(dir.path().join(&out).join("best.toml").exists());
            }
            None => {
                assert_eq!(
                    code,
                    Some(3),
                    "setting {k}: an infeasible plan exits 3: {stderr}"
                );
                assert!(
                    stderr.contains("no configuration in the space meets"),
                    "{stderr}"
                );
                assert!(stderr.contains("Closest:"), "{stderr}");
                assert!(plan["answer"].is_null());
                assert!(!dir.path().join(&out).join("best.toml").exists());
            }
        }
        let ran = plan["simulations"]["distinct"].as_u64().unwrap();
        let grid_runs = plan["simulations"]["grid"].as_u64().unwrap();
        assert_eq!(grid_runs, 3 * 2 * 2 * u64::from(MAX) * 3);
        assert!(
            ran * 4 <= grid_runs,
            "setting {k}: {ran} simulations of the grid's {grid_runs}"
        );
        // candidates.csv lists every simulation, with the SLO metrics.
        let csv = std::fs::read_to_string(dir.path().join(&out).join("candidates.csv")).unwrap();
        assert_eq!(csv.lines().count() as u64, ran + 1);
        assert!(csv.starts_with(
            "gpu,tp,routing,instances,rate,seed,gpus,cost_per_hour,ttft_p99_ms,itl_p99_ms,feasible"
        ));
    }
}

#[test]
fn the_best_run_file_reproduces_the_answer_and_a_plan_resumes() {
    let dir = TestDir::new("plan_resume");
    dir.write("base.toml", BASE);
    dir.write(
        "plan.toml",
        &plan_file(&["ttft_p99_ms <= 500", "itl_p99_ms <= 40"]),
    );
    let first = run_ok(&dir, &["plan", "plan.toml", "--out", "out", "--jobs", "2"]);
    let first: Value = serde_json::from_slice(&first.stdout).unwrap();
    // The winner's run file gives the winner's report.
    let report = run_ok(&dir, &["run", "out/best.toml", "--seed", "1"]);
    let saved = std::fs::read_to_string(dir.path().join("out/best-report.json")).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&report.stdout).trim_end(),
        saved.trim_end()
    );
    // The plan's HTML page: cost against each SLO metric, a series per GPU
    // type, each shape's knee and the winner marked.
    run_ok(&dir, &["report", "out", "-o", "plan.html"]);
    let html = std::fs::read_to_string(dir.path().join("plan.html")).unwrap();
    for metric in ["ttft_p99_ms", "itl_p99_ms"] {
        let tag = format!("data-plot=\"cost-vs-{metric}\" data-series=\"");
        let at = html
            .find(&tag)
            .unwrap_or_else(|| panic!("no plot of {metric}"));
        let series = &html[at + tag.len()..];
        let series = &series[..series.find('"').unwrap()];
        for want in [
            "H100",
            "A100-SXM",
            "L40S",
            "knee of each shape",
            "winner",
            "SLO bound",
        ] {
            assert!(series.split('|').any(|s| s == want), "{metric}: {series}");
        }
    }
    assert!(html.contains("cannot-beat") && html.contains("feasible"));
    // Again into the same folder: every simulation is reused, the same answer.
    let again = run_ok(&dir, &["plan", "plan.toml", "--out", "out", "--jobs", "1"]);
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["answer"], first["answer"]);
    assert_eq!(again["simulations"]["ran"], 0);
    assert_eq!(
        again["simulations"]["reused"],
        first["simulations"]["distinct"]
    );
    // A killed plan: remove half the finished simulations; it runs those again.
    let runs = dir.path().join("out/runs");
    let mut entries: Vec<_> = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for e in entries.iter().step_by(2) {
        std::fs::remove_dir_all(e).unwrap();
    }
    let resumed = run_ok(&dir, &["plan", "plan.toml", "--out", "out"]);
    let resumed: Value = serde_json::from_slice(&resumed.stdout).unwrap();
    assert_eq!(resumed["answer"], first["answer"]);
    assert_eq!(
        resumed["simulations"]["ran"].as_u64().unwrap(),
        entries.len().div_ceil(2) as u64
    );
    // Three shards, anywhere, merged: the unsharded answer.
    for i in 1..=3 {
        run_ok(
            &dir,
            &[
                "plan",
                "plan.toml",
                "--out",
                &format!("s{i}"),
                "--shard",
                &format!("{i}/3"),
            ],
        );
    }
    let merged = run_ok(
        &dir,
        &["plan", "merge", "s1", "s2", "s3", "--out", "merged"],
    );
    let merged: Value = serde_json::from_slice(&merged.stdout).unwrap();
    assert_eq!(merged["answer"], first["answer"]);
    let plan: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("merged/plan.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        plan["shapes"].as_array().unwrap().len(),
        12,
        "every shape, once"
    );
    let rows: usize = (1..=3)
        .map(|i| {
            std::fs::read_to_string(dir.path().join(format!("s{i}/candidates.csv")))
                .unwrap()
                .lines()
                .count()
                - 1
        })
        .sum();
    let csv = std::fs::read_to_string(dir.path().join("merged/candidates.csv")).unwrap();
    assert_eq!(csv.lines().count() - 1, rows);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("merged/best.toml")).unwrap(),
        std::fs::read_to_string(dir.path().join("out/best.toml")).unwrap()
    );
    let e = run_bad(&dir, &["plan", "merge", "s1", "s3", "--out", "m2"]);
    assert!(e.contains("shard 2/3 is given 0 times"), "{e}");
    let e = run_bad(
        &dir,
        &["plan", "merge", "s1", "s2", "s2", "s3", "--out", "m3"],
    );
    assert!(e.contains("shard 2/3 is given 2 times"), "{e}");
    let e = run_bad(&dir, &["plan", "merge", "out", "--out", "m4"]);
    assert!(e.contains("not a shard"), "{e}");
    // A user's folder is never written over; an earlier merge is.
    std::fs::create_dir_all(dir.path().join("mine")).unwrap();
    dir.write("mine/candidates.csv", "my own table\n");
    let e = run_bad(&dir, &["plan", "merge", "s1", "s2", "s3", "--out", "mine"]);
    assert!(e.contains("is not empty and holds no earlier merge"), "{e}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("mine/candidates.csv")).unwrap(),
        "my own table\n"
    );
    let again = run_ok(
        &dir,
        &["plan", "merge", "s1", "s2", "s3", "--out", "merged"],
    );
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["answer"], merged["answer"]);
    // Another plan into that folder is refused.
    dir.write("other.toml", &plan_file(&["ttft_p99_ms <= 900"]));
    let e = run_bad(&dir, &["plan", "other.toml", "--out", "out"]);
    assert!(e.contains("holds the results of another sweep"), "{e}");
}

#[test]
fn bad_plan_files_name_the_file_and_key() {
    let dir = TestDir::new("plan_bad");
    dir.write("base.toml", BASE);
    let good = plan_file(&["ttft_p99_ms <= 500"]);
    let cases: Vec<(String, &str)> = vec![
        (
            good.replace("\"L40S\"]", "\"B200\"]"),
            "unknown GPU type \"B200\"",
        ),
        (
            good.replace("\"L40S\"]", "\"L40S\"]\n[space.x]"),
            "unknown field",
        ),
        (
            good.replace("ttft_p99_ms <= 500", "ttft_p999_ms <= 500"),
            "'ttft_p999_ms' is not a metric",
        ),
        (
            good.replace("ttft_p99_ms <= 500", "ttft_p99_ms < 500"),
            "METRIC <= BOUND",
        ),
        (
            good.replace("instances = [1, 20]", "instances = [20, 1]"),
            "upside down",
        ),
        (
            good.replace("instances = [1, 20]", "instances = [0, 4]"),
            "space.instances",
        ),
        (
            good.replace("gpu = [\"H100\", \"A100-SXM\", \"L40S\"]", "gpu = []"),
            "space.gpu = []",
        ),
        (
            good.replace("seeds = [1, 2, 3]", "seeds = []"),
            "seeds = []",
        ),
        (
            good.replace("slo = [\"ttft_p99_ms <= 500\"]", "slo = []"),
            "no slo",
        ),
        (
            good.replace(
                "[traffic]\nrate = 600",
                "[prices]\nH100 = -1\n[traffic]\nrate = 40",
            ),
            "prices.\"H100\" = -1",
        ),
        (
            good.replace("[traffic]\nrate = 600", "[traffic]\nrate = 40\nscale = 2.0"),
            "give one of rate, rates and scale",
        ),
        (
            good.replace(
                "\"routing.policy\" = \"round-robin\"",
                "\"routing.polcy\" = \"round-robin\"",
            ),
            "did you mean 'routing.policy'",
        ),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let name = format!("bad{i}.toml");
        dir.write(&name, text);
        let e = run_bad(&dir, &["plan", &name, "--out", &format!("out{i}")]);
        assert!(e.contains(&name), "case {i}: the error names the file: {e}");
        assert!(e.contains(needle), "case {i}: expected {needle:?} in: {e}");
        assert!(
            !dir.path().join(format!("out{i}")).exists(),
            "case {i}: nothing written"
        );
    }
    // A GPU from a user's hardware table with no price.
    let hw = r#"{"B200": {"TFlopsPeak": 2250, "TFlopsFP8": 4500, "BwPeakTBs": 8, "mfuPrefill": 0.6, "mfuDecode": 0.3, "MemoryGiB": 180}, "H100": {"TFlopsPeak": 989.5, "TFlopsFP8": 1979, "BwPeakTBs": 3.35, "mfuPrefill": 0.6, "mfuDecode": 0.3, "MemoryGiB": 80}}"#;
    dir.write("hw.json", hw);
    dir.write(
        "base-hw.toml",
        &BASE.replace(
            "hardware = \"H100\"",
            "hardware = \"H100\"\nhardware_config = \"hw.json\"",
        ),
    );
    dir.write(
        "noprice.toml",
        &good.replace("base.toml", "base-hw.toml").replace(
            "gpu = [\"H100\", \"A100-SXM\", \"L40S\"]",
            "gpu = [\"H100\", \"B200\"]",
        ),
    );
    let e = run_bad(&dir, &["plan", "noprice.toml", "--out", "o"]);
    assert!(e.contains("no price for GPU type \"B200\""), "{e}");
    // A calibration profile for a GPU outside the space, or missing.
    for (cal, needle) in [
        (
            "[calibration]\nB200 = \"p.toml\"\n",
            "no such GPU type in the space",
        ),
        ("[calibration]\nH100 = \"missing.toml\"\n", "no such file"),
    ] {
        dir.write("cal.toml", &format!("{good}{cal}"));
        let e = run_bad(&dir, &["plan", "cal.toml", "--out", "o"]);
        assert!(e.contains(needle), "{e}");
    }
}

#[test]
fn a_trace_base_is_planned_at_its_own_arrivals() {
    let dir = TestDir::new("plan_trace");
    let ex = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let base = ex.join("trace-replay.toml");
    dir.write(
        "plan.toml",
        &format!(
            "base = \"{}\"\nslo = [\"ttft_p99_ms <= 200\"]\n[space]\ngpu = [\"H100\", \"L40S\"]\ninstances = [1, 16]\n",
            base.display()
        ),
    );
    let o = run_ok(&dir, &["plan", "plan.toml", "--out", "out"]);
    let summary: Value = serde_json::from_slice(&o.stdout).unwrap();
    let n = summary["answer"]["instances"].as_u64().unwrap();
    // The best run file replays the same trace (its path made absolute).
    let best = std::fs::read_to_string(dir.path().join("out/best.toml")).unwrap();
    assert!(
        best.contains(
            &ex.join("trace.csv")
                .canonicalize()
                .unwrap()
                .display()
                .to_string()
        ) || best.contains("examples/trace.csv"),
        "{best}"
    );
    let r = run_ok(&dir, &["run", "out/best.toml"]);
    let r: Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(r["cluster"]["ttft_p99_ms"].as_f64().unwrap() <= 200.0);
    assert_eq!(r["instances"].as_array().unwrap().len() as u64, n);
    let csv = std::fs::read_to_string(dir.path().join("out/candidates.csv")).unwrap();
    assert!(
        csv.lines().nth(1).unwrap().contains(",,"),
        "no rate column value: {csv}"
    );
}

#[test]
fn prices_come_from_the_plan_then_the_base_s_node_pools_then_the_defaults() {
    let dir = TestDir::new("plan_prices");
    // A node of 8 H100 at $40/h: $5 per GPU-hour.
    let pools = "[[node_pools]]\nname = \"h100\"\ngpu_type = \"H100\"\ngpus_per_node = 8\ninitial_nodes = 1\nmax_nodes = 8\ncost_per_hour = 40.0\n";
    dir.write("base.toml", &format!("{BASE}{pools}"));
    let plan = "base = \"base.toml\"\nslo = [\"ttft_p99_ms <= 2000\"]\n[traffic]\nrate = 100.0\n[space]\ngpu = [\"H100\"]\ninstances = [1, 8]\n";
    dir.write("plan.toml", plan);
    run_ok(&dir, &["plan", "plan.toml", "--out", "a"]);
    let p: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("a/plan.json")).unwrap())
            .unwrap();
    assert_eq!(p["prices"]["H100"], 5.0, "{}", p["prices"]);
    let n = p["answer"]["instances"].as_f64().unwrap();
    assert_eq!(p["answer"]["cost_per_hour"].as_f64().unwrap(), 5.0 * n);
    dir.write("plan2.toml", &format!("{plan}[prices]\nH100 = 3.0\n"));
    run_ok(&dir, &["plan", "plan2.toml", "--out", "b"]);
    let p: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("b/plan.json")).unwrap())
            .unwrap();
    assert_eq!(p["prices"]["H100"], 3.0);
    dir.write("base.toml", BASE);
    run_ok(&dir, &["plan", "plan.toml", "--out", "c"]);
    let p: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("c/plan.json")).unwrap())
            .unwrap();
    assert_eq!(p["prices"]["H100"], 4.0, "the default table");
}

/// `blis plan` says, per GPU type, which measured held-out error its
/// predictions carry: leave-one-experiment-out for the GPU the profile was
/// fitted on, leave-one-GPU-out (not measured here: said so) for a GPU the
/// profile is extrapolated to, nothing for a GPU without a profile — in
/// plan.json and on stderr.
#[test]
fn a_plan_shows_the_calibration_error_of_each_gpu_type() {
    let dir = TestDir::new("plan_calibration_errors");
    let run = |rate: f64| {
        format!(
            "seed = 5\n[model]\nname = \"qwen2.5-7b-instruct\"\nhardware = \"H100\"\n[instance]\ncount = 1\n\
             [workload]\nnum_requests = 40\n[workload.inference_perf]\nclient = \"reference\"\n\
             stages = [{{ rate = {rate}, duration = 20 }}]\n\
             [workload.inference_perf.shared_prefix]\nnum_unique_system_prompts = 2\n\
             num_users_per_system_prompt = 2\nsystem_prompt_len = 50\nquestion_len = 200\noutput_len = 40\n"
        )
    };
    dir.write("a.toml", &run(2.0));
    dir.write("b.toml", &run(4.0));
    slower_measurements(&dir, &["a.toml", "b.toml"], 1.1);
    run_ok(
        &dir,
        &fit_args(&["--fit", "beta[2]", "--holdout-by", "experiment", "--quiet"]),
    );
    let p: toml::Table = std::fs::read_to_string(dir.path().join("p.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let loeo = p["error"]["heldout_by"]["experiment"]["mape"]
        .as_float()
        .unwrap();
    // L40S runs H100's profile: the base allows the extrapolation.
    dir.write(
        "base.toml",
        &run(2.0).replace(
            "hardware = \"H100\"\n",
            "hardware = \"H100\"\ncalibration_extrapolate = true\n",
        ),
    );
    dir.write(
        "plan.toml",
        "base = \"base.toml\"\nslo = [\"e2e_mean_ms <= 100000\"]\n[space]\ngpu = [\"H100\", \"L40S\", \"A100-SXM\"]\n\
         instances = [1, 2]\n[calibration]\nH100 = \"p.toml\"\nL40S = \"p.toml\"\n",
    );
    let o = run_ok(&dir, &["plan", "plan.toml", "--out", "out", "--quiet"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "plan: H100: calibrated by {}; its measured leave-one-experiment-out error: weighted MAPE {loeo:.1} % over 2 folds",
            dir.path().join("p.toml").display()
        )),
        "{err}"
    );
    assert!(err.contains("no leave-one-GPU-out error"), "{err}");
    assert!(err.contains("plan: A100-SXM: uncalibrated"), "{err}");
    let plan: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out/plan.json")).unwrap())
            .unwrap();
    let cal = plan["calibration"].as_array().unwrap();
    assert_eq!(cal.len(), 3);
    assert_eq!(cal[0]["gpu"], "H100");
    assert_eq!(cal[0]["error_applies"], "leave-one-experiment-out");
    assert!((cal[0]["heldout_mape"].as_f64().unwrap() - loeo).abs() < 1e-9);
    assert_eq!(cal[1]["error_applies"], "leave-one-gpu-out");
    assert!(cal[1]["heldout_mape"].is_null());
    assert!(cal[2]["profile"].is_null() && cal[2]["error_applies"].is_null());
}

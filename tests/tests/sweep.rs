//! `blis sweep`, `blis sweep merge` and `blis report` end to end with the
//! real binary: a sweep's per-run report is `blis run` byte for byte, the
//! table does not depend on --jobs, kill-and-resume (SIGKILL) and 4 shards +
//! merge give the uninterrupted, unsharded bytes, bad input, failing runs,
//! the HTML report's plots and series, the time series does not perturb the
//! run, and the Slurm example when `sbatch` is on PATH.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{artifacts, run_bad, run_ok as ok, TestDir};

/// A fast base scenario (linear latency model).
const BASE: &str = r#"
seed = 5
[model]
latency_model = "linear"
alpha = [100.0, 0.5, 20.0]
beta = [2000.0, 5.0, 30.0]
[instance]
count = 2
[workload]
aggregate_rate = 100.0
num_requests = 150
prompt_tokens = 300
output_tokens = 40
prefix_tokens = 64
[routing]
policy = "weighted"
"#;

/// Two routing variants × three rates × two seeds = 12 runs.
const SWEEP: &str = r#"
base = "base.toml"
seeds = [1, 2]
[set]
"workload.num_requests" = 120
[[axis]]
name = "routing"
[[axis.variants]]
name = "rr"
set = { "routing.policy" = "round-robin" }
[[axis.variants]]
name = "qd"
set = { routing = { policy = "weighted", scorers = [{ name = "queue-depth", weight = 1 }] } }
[[axis]]
key = "workload.aggregate_rate"
name = "rate"
values = [50.0, 100.0, 400.0]
"#;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit 2, nothing on stdout, one short error paragraph; returns stderr.
/// A sweep's errors are shorter still: at most 6 lines.
fn bad(dir: &TestDir, args: &[&str]) -> String {
    let e = run_bad(dir, args);
    assert!(e.lines().count() <= 6, "short error:\n{e}");
    e
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

fn rows(dir: &Path) -> Vec<Value> {
    read(&dir.join("results.jsonl"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn setup(name: &str) -> TestDir {
    let dir = TestDir::new(name);
    dir.write("base.toml", BASE);
    dir.write("sweep.toml", SWEEP);
    dir
}

#[test]
fn sweep_runs_are_blis_run_byte_for_byte_and_jobs_do_not_matter() {
    let dir = setup("sweep_equals_run");
    ok(&dir, &["sweep", "sweep.toml", "--out", "j1", "--jobs", "1"]);
    ok(&dir, &["sweep", "sweep.toml", "--out", "j3", "--jobs", "3"]);
    let csv1 = read(&dir.path().join("j1/results.csv"));
    eqnice!(csv1, read(&dir.path().join("j3/results.csv")));
    eqnice!(
        read(&dir.path().join("j1/results.jsonl")),
        read(&dir.path().join("j3/results.jsonl"))
    );
    let rows = rows(&dir.path().join("j1"));
    assert_eq!(rows.len(), 12);
    // Columns: run id, status, error, axes, seed, then the report's metrics.
    let header = csv1.lines().next().unwrap();
    assert!(
        header.starts_with("run_id,status,error,routing,rate,seed,num_requests,"),
        "{header}"
    );
    assert_contains!(
        header,
        ",ttft_p99_ms,",
        ",slo_classes.standard.ttft.p99_ms,"
    );
    for r in &rows {
        assert_eq!(r["status"], "ok", "{r}");
        let (routing, rate, seed) = (
            r["routing"].as_str().unwrap(),
            r["rate"].as_f64().unwrap(),
            r["seed"].as_u64().unwrap(),
        );
        let mut args = vec![
            "run".to_string(),
            "base.toml".into(),
            "--set".into(),
            "workload.num_requests=120".into(),
        ];
        match routing {
            "rr" => args.extend(["--set".into(), "routing.policy=round-robin".into()]),
            _ => args.extend([
                "--set".into(),
                "routing.policy=weighted".into(),
                "--set".into(),
                "routing.scorers=[{name=\"queue-depth\",weight=1}]".into(),
            ]),
        }
        args.extend([
            "--set".into(),
            format!("workload.aggregate_rate={rate:?}"),
            "--seed".into(),
            seed.to_string(),
        ]);
        let out = ok(&dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
        let report = read(
            &dir.path()
                .join("j1/runs")
                .join(r["run_id"].as_str().unwrap())
                .join("report.json"),
        );
        assert_eq!(report, String::from_utf8_lossy(&out.stdout), "run {r}");
        // The table's metrics are the report's.
        let rep: Value = serde_json::from_str(&report).unwrap();
        assert_eq!(r["ttft_p99_ms"], rep["cluster"]["ttft_p99_ms"]);
        assert_eq!(
            r["completed_requests"],
            rep["cluster"]["completed_requests"]
        );
    }
    // The rate matters: more load, more delay (sanity of the axis wiring).
    let mean_p99 = |rate: f64| {
        let v: Vec<f64> = rows
            .iter()
            .filter(|r| r["rate"].as_f64() == Some(rate))
            .map(|r| r["e2e_p99_ms"].as_f64().unwrap())
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    assert!(mean_p99(400.0) > mean_p99(50.0));
    // Run again: everything is skipped, nothing changes.
    let o = ok(&dir, &["sweep", "sweep.toml", "--out", "j1", "--jobs", "2"]);
    assert_contains!(stderr(&o), "12 already done");
    eqnice!(csv1, read(&dir.path().join("j1/results.csv")));
}

/// A sweep long enough to be killed in the middle.
const LONG_SWEEP: &str = r#"
base = "base.toml"
seeds = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
[set]
"workload.num_requests" = 600
[[axis]]
key = "workload.aggregate_rate"
values = [100.0, 200.0, 300.0, 400.0]
"#;

/// The finished runs' folders (a run in progress is in a `.tmp-*` staging folder).
fn finished_runs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir.join("runs"))
        .map(|d| {
            d.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_killed_sweep_resumes_and_loses_nothing() {
    let dir = setup("sweep_kill_resume");
    dir.write("long.toml", LONG_SWEEP);
    ok(
        &dir,
        &["sweep", "long.toml", "--out", "whole", "--jobs", "2"],
    );
    let whole = read(&dir.path().join("whole/results.csv"));
    let out = dir.path().join("killed");
    let mut kills = 0;
    // Kill it twice at different points, then let it finish.
    for target in [3, 15] {
        let mut child = dir
            .blis()
            .args(["sweep", "long.toml", "--out", "killed", "--jobs", "2"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while finished_runs(&out).len() < target && start.elapsed() < Duration::from_secs(120) {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
        // Whatever is there is whole: every finished run's folder has its report.
        for run in finished_runs(&out) {
            let _: Value =
                serde_json::from_str(&read(&run.join("report.json"))).expect("a whole report");
        }
    }
    assert!(kills >= 1, "the sweep was never killed mid-way");
    let done_before = finished_runs(&out).len();
    assert!(done_before < 40, "killed before the end");
    let o = ok(
        &dir,
        &["sweep", "long.toml", "--out", "killed", "--jobs", "2"],
    );
    assert_contains!(stderr(&o), &format!("{done_before} already done"));
    eqnice!(whole, read(&out.join("results.csv")));
    // The killed runs' staging folders are gone: runs/ holds the 40 runs only.
    assert_eq!(std::fs::read_dir(out.join("runs")).unwrap().count(), 40);
    assert_eq!(finished_runs(&out).len(), 40);
}

#[test]
fn four_shards_merged_equal_the_unsharded_sweep() {
    let dir = setup("sweep_shards");
    ok(
        &dir,
        &["sweep", "sweep.toml", "--out", "all", "--jobs", "2"],
    );
    let children: Vec<_> = (1..=4)
        .map(|i| {
            dir.blis()
                .args([
                    "sweep",
                    "sweep.toml",
                    "--out",
                    &format!("s{i}"),
                    "--jobs",
                    "1",
                    "--shard",
                    &format!("{i}/4"),
                ])
                .output()
        })
        .collect();
    for c in children {
        let o = c.unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    // Each shard holds a quarter of the grid, disjoint.
    let counts: Vec<usize> = (1..=4)
        .map(|i| rows(&dir.path().join(format!("s{i}"))).len())
        .collect();
    eqnice!(vec![3, 3, 3, 3], counts);
    ok(
        &dir,
        &["sweep", "merge", "s1", "s2", "s3", "s4", "--out", "merged"],
    );
    for f in ["results.csv", "results.jsonl", "sweep.json"] {
        eqnice!(
            read(&dir.path().join("all").join(f)),
            read(&dir.path().join("merged").join(f))
        );
    }
    for r in rows(&dir.path().join("all")) {
        let id = r["run_id"].as_str().unwrap();
        let p = |d: &str| dir.path().join(d).join("runs").join(id).join("report.json");
        assert_eq!(read(&p("all")), read(&p("merged")), "run {id}");
    }
}

#[test]
fn bad_sweep_input_is_a_clear_error() {
    let dir = setup("sweep_bad_input");
    dir.write(
        "typo.toml",
        "base = \"base.toml\"\n[[axis]]\nkey = \"workload.aggregate_rat\"\nvalues = [1.0]\n",
    );
    let e = bad(&dir, &["sweep", "typo.toml", "--out", "o"]);
    assert_contains!(
        e,
        "typo.toml",
        "workload.aggregate_rat",
        "did you mean 'workload.aggregate_rate'"
    );
    dir.write(
        "empty.toml",
        "[[axis]]\nkey = \"instance.count\"\nvalues = []\n",
    );
    let e = bad(&dir, &["sweep", "empty.toml", "--out", "o"]);
    assert_contains!(e, "empty.toml", "instance.count", "no values");
    let e = bad(
        &dir,
        &["sweep", "sweep.toml", "--out", "o", "--shard", "5/4"],
    );
    assert_contains!(e, "5/4", "1 <= i <= N");
    // Merging two different sweeps.
    dir.write("other.toml", "base = \"base.toml\"\nseeds = [1]\n");
    ok(&dir, &["sweep", "other.toml", "--out", "a"]);
    ok(
        &dir,
        &["sweep", "sweep.toml", "--out", "b", "--shard", "1/4"],
    );
    let e = bad(&dir, &["sweep", "merge", "a", "b", "--out", "m"]);
    assert_contains!(e, "different sweeps", "fingerprint");
    // Reusing an output directory of another sweep.
    let e = bad(&dir, &["sweep", "sweep.toml", "--out", "a"]);
    assert_contains!(e, "another sweep", "--out");
    assert!(!dir.path().join("m/results.csv").exists());
}

#[test]
fn per_stage_metrics_become_prefixed_columns() {
    let dir = setup("sweep_stage_columns");
    dir.write(
        "stages.toml",
        "base = \"base.toml\"\nseeds = [1, 2]\n[set]\n\"output.windows\" = [{ start_us = 0, end_us = 500000 }, { start_us = 500000, end_us = 100000000 }]\n",
    );
    ok(&dir, &["sweep", "stages.toml", "--out", "o"]);
    let csv = read(&dir.path().join("o/results.csv"));
    let header = csv.lines().next().unwrap();
    assert_contains!(header, ",stages.0.num_requests,", ",stages.1.ttft_p99_ms,");
    assert_lacks!(header, "instances.");
    // The stage columns are the report's stages.
    for r in rows(&dir.path().join("o")) {
        let id = r["run_id"].as_str().unwrap();
        let rep: Value = serde_json::from_str(&read(
            &dir.path().join("o/runs").join(id).join("report.json"),
        ))
        .unwrap();
        assert_eq!(r["stages.1.ttft_p99_ms"], rep["stages"][1]["ttft_p99_ms"]);
        let n = |k: &str| r[k].as_u64().unwrap();
        assert_eq!(
            n("stages.0.num_requests") + n("stages.1.num_requests"),
            n("num_requests")
        );
    }
}

#[test]
fn a_failing_run_is_recorded_and_the_sweep_goes_on() {
    let dir = setup("sweep_failing_run");
    dir.write(
        "fail.toml",
        "base = \"base.toml\"\n[[axis]]\nkey = \"instance.count\"\nvalues = [1, 0, 2]\n",
    );
    let o = dir
        .blis()
        .args(["sweep", "fail.toml", "--out", "o"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_contains!(stderr(&o), "1 of 3 runs failed", "results.csv");
    let rows = rows(&dir.path().join("o"));
    let status: Vec<(&str, i64)> = rows
        .iter()
        .map(|r| {
            (
                r["status"].as_str().unwrap(),
                r["instance.count"].as_i64().unwrap(),
            )
        })
        .collect();
    eqnice!(vec![("ok", 1), ("failed", 0), ("ok", 2)], status);
    assert_contains!(rows[1]["error"].as_str().unwrap(), "instance.count");
    assert!(rows[1]["ttft_p99_ms"].is_null());
}

/// `(plot id, series names)` of every plot in an HTML report.
fn plots(html: &str) -> Vec<(String, Vec<String>)> {
    html.split("<figure class=\"plot")
        .skip(1)
        .map(|f| {
            let attr = |name: &str| {
                f.split(&format!("{name}=\""))
                    .nth(1)
                    .and_then(|s| s.split('"').next())
                    .unwrap_or("")
                    .to_string()
            };
            let series = attr("data-series");
            let missing = f.starts_with(" missing");
            let names = if series.is_empty() {
                Vec::new()
            } else {
                series.split('|').map(str::to_string).collect()
            };
            if !missing {
                // A drawn plot: an SVG with at least one line or shape per series.
                let svg = f.split("</figure>").next().unwrap();
                assert!(
                    svg.contains("<svg"),
                    "plot {} has no SVG",
                    attr("data-plot")
                );
                let id = attr("data-plot");
                if id.contains("histogram") {
                    // The background and at least one bar.
                    assert!(svg.matches("<rect").count() >= 2, "plot {id} has no bars");
                } else {
                    // One line per series (plus the legend's samples).
                    assert!(
                        svg.matches("<polyline").count() >= names.len(),
                        "plot {id}: fewer lines than series"
                    );
                }
                // Each series is named in the drawn legend.
                let drawing = svg.split("<svg").nth(1).unwrap();
                for n in &names {
                    assert_contains!(
                        drawing,
                        n.replace('&', "&amp;")
                            .replace('<', "&lt;")
                            .replace('>', "&gt;")
                    );
                }
            }
            (attr("data-plot"), names)
        })
        .collect()
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples")
}

#[test]
fn html_report_of_a_run_has_every_plot_and_series() {
    let dir = TestDir::new("report_run");
    let ex = examples().join("weighted-routing.toml");
    std::fs::create_dir_all(dir.path().join("run")).unwrap();
    let o = ok(
        &dir,
        &[
            "run",
            ex.to_str().unwrap(),
            "--results-path",
            "run/results.jsonl",
            "--trace-path",
            "run/trace.jsonl",
            "--timeseries-path",
            "run/timeseries.jsonl",
            "--set",
            "output.timeseries_interval_us=2000000",
        ],
    );
    std::fs::write(dir.path().join("run/report.json"), &o.stdout).unwrap();
    ok(&dir, &["report", "run", "-o", "report.html"]);
    let html = read(&dir.path().join("report.html"));
    // Self-contained: no scripts, no external resources (only SVG's namespace URI).
    assert_lacks!(
        html,
        "<script",
        "src=\"http",
        "href=\"http",
        "<link",
        "url("
    );
    let p = plots(&html);
    let ids: Vec<&str> = p.iter().map(|(id, _)| id.as_str()).collect();
    eqnice!(
        vec![
            "ttft-cdf",
            "e2e-cdf",
            "itl-cdf",
            "queue-depth",
            "kv-utilization",
            "cluster-rates",
            "regret-histogram"
        ],
        ids
    );
    let instances: Vec<String> = (0..4).map(|i| format!("instance {i}")).collect();
    assert_eq!(p[3].1, instances);
    assert_eq!(p[4].1, instances);
    assert_eq!(p[5].1, ["arrivals", "completions"]);
    assert_eq!(p[0].1, ["all (n=2000)"]);
    assert_contains!(
        html,
        "<th class=\"l\">SLO class</th>",
        "<th class=\"l\">tenant</th>"
    );
    // The rejections by cause, each a row right under the total.
    let at = |needle: &str| {
        html.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in the page"))
    };
    let causes = [
        "… rejected by admission",
        "… rejected by filter",
        "… rejected by gateway",
        "… rejected by tenant_budget",
        "… rejected by no_routable_instance",
    ];
    let mut last = at("rejected_requests");
    for c in causes {
        assert!(at(c) > last, "{c} is not after the previous row");
        last = at(c);
    }
    assert!(last < at("dropped_unservable"));
}

#[test]
fn html_report_of_the_example_sweep() {
    let dir = TestDir::new("report_sweep");
    let ex = examples().join("sweeps/policies-vs-rate.toml");
    ok(
        &dir,
        &["sweep", ex.to_str().unwrap(), "--out", "out", "--jobs", "2"],
    );
    assert_eq!(rows(&dir.path().join("out")).len(), 45);
    ok(&dir, &["report", "out", "-o", "sweep.html"]);
    // A run folder of the sweep has its own report (results and trace are there).
    let first = rows(&dir.path().join("out"))[0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    ok(
        &dir,
        &["report", &format!("out/runs/{first}"), "-o", "run.html"],
    );
    let run_plots = plots(&read(&dir.path().join("run.html")));
    assert!(run_plots
        .iter()
        .any(|(id, s)| id == "ttft-cdf" && s == &["all (n=800)"]));
    assert!(run_plots
        .iter()
        .any(|(id, s)| id == "regret-histogram" && s == &["regret"]));
    let html = read(&dir.path().join("sweep.html"));
    let p = plots(&html);
    let ids: Vec<&str> = p.iter().map(|(id, _)| id.as_str()).collect();
    eqnice!(
        vec![
            "ttft-p50-vs-rate",
            "ttft-p99-vs-rate",
            "e2e-p50-vs-rate",
            "e2e-p99-vs-rate",
            "throughput-vs-latency",
            "slo-attainment-vs-rate"
        ],
        ids
    );
    for (id, series) in &p {
        eqnice!(
            vec!["llm-d-default", "queue-depth", "round-robin"],
            series.iter().map(String::as_str).collect::<Vec<_>>()
        );
        assert!(!id.is_empty());
    }
}

#[test]
fn the_time_series_does_not_perturb_the_run() {
    let dir = TestDir::new("timeseries");
    dir.write("base.toml", BASE);
    let plain = ok(&dir, &["run", "base.toml"]);
    let with = ok(
        &dir,
        &[
            "run",
            "base.toml",
            "--timeseries-path",
            "ts.jsonl",
            "--set",
            "output.timeseries_interval_us=50000",
        ],
    );
    assert_eq!(plain.stdout, with.stdout);
    let report: Value = serde_json::from_slice(&plain.stdout).unwrap();
    let end_s = report["cluster"]["simulated_duration_s"].as_f64().unwrap();
    let lines: Vec<Value> = read(&dir.path().join("ts.jsonl"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // One line per whole interval of simulated time, 50 ms apart.
    assert_eq!(lines.len(), (end_s * 1e6 / 50_000.0).floor() as usize);
    for (k, l) in lines.iter().enumerate() {
        assert_eq!(l["time_us"].as_i64(), Some(50_000 * (k as i64 + 1)));
        assert_eq!(l["instances"].as_array().unwrap().len(), 2);
    }
    // The counters are cumulative and end at the report's totals.
    let last = lines.last().unwrap();
    assert!(last["arrived"].as_u64() <= report["cluster"]["num_requests"].as_u64());
    let arrived: f64 = lines
        .iter()
        .map(|l| l["arrival_rate"].as_f64().unwrap() * 0.05)
        .sum();
    assert_eq!(arrived.round() as u64, last["arrived"].as_u64().unwrap());
    let e = bad(
        &dir,
        &[
            "run",
            "base.toml",
            "--set",
            "output.timeseries_interval_us=0",
        ],
    );
    assert_contains!(e, "timeseries_interval_us");
}

#[test]
fn slurm_array_and_merge_when_sbatch_is_available() {
    if std::process::Command::new("sbatch")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: sbatch is not on PATH (examples/distributed/slurm-local.sh brings up a single-node Slurm)");
        return;
    }
    let dir = TestDir::new("slurm");
    let script = examples().join("distributed/slurm-local.sh");
    let o = std::process::Command::new("bash")
        .arg(&script)
        .arg("--no-install")
        .env("BLIS", artifacts().blis())
        .env("WORK", dir.path())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        stderr(&o)
    );
    // The merged Slurm sweep equals the same sweep run in one process.
    let sweep = examples().join("distributed/sweep.toml");
    ok(
        &dir,
        &[
            "sweep",
            sweep.to_str().unwrap(),
            "--out",
            "local",
            "--jobs",
            "2",
        ],
    );
    eqnice!(
        read(&dir.path().join("local/results.csv")),
        read(&dir.path().join("merged/results.csv"))
    );
}

/// Issue 33 item 24: the manifest's command reproduces a run — the same
/// report — and writes the run's output files into the current folder,
/// never beside the base run file (which may be a tracked example).
#[test]
fn the_manifest_command_writes_its_outputs_into_the_current_folder() {
    let dir = TestDir::new("manifest_command_outputs");
    std::fs::create_dir_all(dir.path().join("base")).unwrap();
    dir.write(
        "base/base.toml",
        &format!("{BASE}[output]\ntrace_path = \"base-trace.jsonl\"\n"),
    );
    dir.write(
        "sweep.toml",
        "base = \"base/base.toml\"\nseeds = [3]\n[set]\n\"output.results_path\" = \"results.jsonl\"\n\
         [[axis]]\nkey = \"workload.aggregate_rate\"\nname = \"rate\"\nvalues = [50.0]\n",
    );
    ok(&dir, &["sweep", "sweep.toml", "--out", "out", "--quiet"]);
    let manifest: Value = serde_json::from_str(&read(&dir.path().join("out/sweep.json"))).unwrap();
    let run = &manifest["runs"][0];
    let cmd = run["command"].as_str().unwrap();
    assert!(
        cmd.ends_with(" --results-path results.jsonl --trace-path trace.jsonl"),
        "{cmd}"
    );
    assert!(!cmd.contains("output.results_path"), "{cmd}");
    std::fs::create_dir_all(dir.path().join("replay")).unwrap();
    let blis_dir = artifacts().blis().parent().unwrap().to_path_buf();
    let path = std::env::join_paths(std::iter::once(blis_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let o = std::process::Command::new("sh")
        .args(["-c", &format!("{cmd} --quiet")])
        .current_dir(dir.path().join("replay"))
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{cmd}: {}", stderr(&o));
    let id = run["id"].as_str().unwrap();
    let stored = dir.path().join("out/runs").join(id);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        read(&stored.join("report.json"))
    );
    for f in ["results.jsonl", "trace.jsonl"] {
        assert_eq!(
            read(&dir.path().join("replay").join(f)),
            read(&stored.join(f)),
            "{f}"
        );
    }
    let beside: Vec<_> = std::fs::read_dir(dir.path().join("base"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    eqnice!(vec!["base.toml".to_string()], beside);
}

//! Issue 33 (hardening, round 3), defects 1–7: outputs never clobber
//! inputs, each other, the user's own folders or non-regular files; they
//! are atomic (time series included), honour the umask, name the key of an
//! empty path before simulating, and an interrupted run or sweep leaves no
//! temporary file behind. Each through the real `blis`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{run_bad, run_ok as ok, TestDir};

/// A small linear-model run (2 instances, 30 requests).
const BASE: &str = r#"
seed = 3
[model]
latency_model = "linear"
alpha = [100.0, 0.5, 20.0]
beta = [2000.0, 5.0, 30.0]
[instance]
count = 2
[workload]
aggregate_rate = 100.0
num_requests = 30
prompt_tokens = 200
output_tokens = 20
"#;

/// Four runs of `base.toml`.
const SWEEP: &str = r#"
base = "base.toml"
seeds = [1, 2]
[[axis]]
key = "workload.aggregate_rate"
name = "rate"
values = [50.0, 100.0]
"#;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

/// Every file name under `dir`, recursively, relative to it.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

fn temporaries(dir: &Path) -> Vec<String> {
    tree(dir)
        .into_iter()
        .filter(|n| {
            let base = n.rsplit('/').next().unwrap();
            base.ends_with(".tmp") || base.starts_with(".tmp")
        })
        .collect()
}

/// A run folder `run/` (report.json, results.jsonl, timeseries.jsonl) and a
/// finished sweep `sw/`.
fn run_and_sweep(dir: &TestDir) {
    dir.write("base.toml", BASE);
    dir.write("sweep.toml", SWEEP);
    std::fs::create_dir(dir.path().join("run")).unwrap();
    let o = ok(
        dir,
        &[
            "run",
            "base.toml",
            "--results-path",
            "run/results.jsonl",
            "--set",
            "output.timeseries_path=\"run/timeseries.jsonl\"",
        ],
    );
    std::fs::write(dir.path().join("run/report.json"), &o.stdout).unwrap();
    ok(dir, &["sweep", "sweep.toml", "--out", "sw", "--quiet"]);
}

#[test]
fn report_never_writes_over_what_it_reads() {
    // Defect 1.
    let dir = TestDir::new("outputs_report_input");
    run_and_sweep(&dir);
    let before = |p: &str| read(&dir.path().join(p));
    for (input, out) in [
        ("run", "run/results.jsonl"),
        ("run", "run/report.json"),
        ("run", "run/timeseries.jsonl"),
        ("run/report.json", "run/report.json"),
        ("sw", "sw/results.csv"),
        ("sw", "sw/results.jsonl"),
        ("sw", "sw/sweep.json"),
    ] {
        let old = before(out);
        let e = run_bad(&dir, &["report", input, "-o", out]);
        assert!(e.contains("-o") && e.contains("overwrite"), "{e}");
        assert_eq!(before(out), old, "{out} intact");
    }
    let run_id = std::fs::read_dir(dir.path().join("sw/runs"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .file_name();
    let inner = format!("sw/runs/{}/report.json", run_id.to_string_lossy());
    let old = before(&inner);
    let e = run_bad(&dir, &["report", "sw", "-o", &inner]);
    assert!(e.contains("runs folder"), "{e}");
    assert_eq!(before(&inner), old);
    // Beside its inputs is fine.
    ok(&dir, &["report", "sw", "-o", "sw/report.html"]);
    ok(&dir, &["report", "run", "-o", "run/report.html"]);
    assert!(before("sw/report.html").contains("<html"));
}

#[test]
fn slo_targets_of_report_must_be_positive_numbers() {
    // Defect 16.
    let dir = TestDir::new("outputs_report_slo");
    run_and_sweep(&dir);
    for flag in ["--ttft-slo-ms", "--e2e-slo-ms"] {
        for v in ["nan", "-5", "inf", "0"] {
            let e = run_bad(
                &dir,
                &["report", "sw", "-o", "r.html", &format!("{flag}={v}")],
            );
            assert!(e.contains(flag) && e.contains("> 0"), "{e}");
        }
    }
    assert!(!dir.path().join("r.html").exists());
    ok(
        &dir,
        &[
            "report",
            "sw",
            "-o",
            "r.html",
            "--ttft-slo-ms",
            "250",
            "--e2e-slo-ms=2000",
        ],
    );
}

#[test]
fn the_time_series_follows_the_output_rules_and_is_atomic() {
    // Defect 2.
    let dir = TestDir::new("outputs_timeseries");
    let body = format!("{BASE}[output]\ntimeseries_path = \"run.toml\"\n");
    dir.write("run.toml", &body);
    let e = run_bad(&dir, &["run", "run.toml"]);
    assert!(
        e.contains("output.timeseries_path") && e.contains("run file"),
        "{e}"
    );
    assert_eq!(read(&dir.path().join("run.toml")), body);
    dir.write("base.toml", BASE);
    for cmd in ["run", "validate"] {
        let e = run_bad(
            &dir,
            &[
                cmd,
                "base.toml",
                "--results-path",
                "out.jsonl",
                "--set",
                "output.timeseries_path=\"./out.jsonl\"",
            ],
        );
        assert!(e.contains("same file"), "{e}");
    }
    // A failed run leaves the previous series whole, and no temporary file.
    dir.write("ts.jsonl", "previous\n");
    // A run that fails while running (a plugin panics): still whole.
    let alpha = crate::util::artifacts().alpha();
    let o = dir
        .blis()
        .args([
            "run",
            "base.toml",
            "--set",
            "output.timeseries_path=\"ts.jsonl\"",
            "--plugin",
            alpha.to_str().unwrap(),
            "--admission-policy",
            "panicky-admission",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert_eq!(read(&dir.path().join("ts.jsonl")), "previous\n");
    assert_eq!(temporaries(dir.path()), Vec::<String>::new());
    ok(
        &dir,
        &[
            "run",
            "base.toml",
            "--set",
            "output.timeseries_path=\"ts.jsonl\"",
        ],
    );
    assert!(read(&dir.path().join("ts.jsonl")).starts_with('{'));
}

#[test]
fn a_sweep_never_takes_over_a_folder_that_is_not_a_sweeps() {
    // Defect 3.
    let dir = TestDir::new("outputs_sweep_foreign");
    dir.write("base.toml", BASE);
    dir.write("sweep.toml", SWEEP);
    std::fs::create_dir_all(dir.path().join("mine/runs")).unwrap();
    dir.write("mine/results.csv", "my,own\n");
    dir.write("mine/runs/notes.txt", "keep\n");
    let e = run_bad(&dir, &["sweep", "sweep.toml", "--out", "mine", "--quiet"]);
    assert!(e.contains("not a sweep's output folder"), "{e}");
    assert_eq!(read(&dir.path().join("mine/results.csv")), "my,own\n");
    assert_eq!(read(&dir.path().join("mine/runs/notes.txt")), "keep\n");
    assert!(!dir.path().join("mine/sweep.json").exists());
    // The same for `sweep merge --out`.
    ok(&dir, &["sweep", "sweep.toml", "--out", "sw", "--quiet"]);
    let e = run_bad(&dir, &["sweep", "merge", "sw", "--out", "mine"]);
    assert!(e.contains("not a sweep's output folder"), "{e}");
    assert_eq!(read(&dir.path().join("mine/results.csv")), "my,own\n");
    // An empty folder, or the sweep's own, is fine.
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    ok(&dir, &["sweep", "sweep.toml", "--out", "empty", "--quiet"]);
    ok(&dir, &["sweep", "sweep.toml", "--out", "sw", "--quiet"]);
}

#[cfg(unix)]
#[test]
fn non_regular_destinations_are_refused_and_symlinks_written_through() {
    // Defect 4.
    let dir = TestDir::new("outputs_special");
    dir.write("base.toml", BASE);
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    for (flag, key) in [
        ("--results-path", "output.results_path"),
        ("--trace-path", "output.trace_path"),
    ] {
        for target in ["fifo", "/dev/null", "/dev/full"] {
            let e = run_bad(&dir, &["run", "base.toml", flag, target]);
            assert!(e.contains(key) && e.contains("not a regular file"), "{e}");
        }
    }
    let e = run_bad(&dir, &["validate", "base.toml", "--results-path", "fifo"]);
    assert!(e.contains("FIFO"), "{e}");
    // blis report -o checks the same.
    std::fs::create_dir(dir.path().join("run")).unwrap();
    let o = ok(&dir, &["run", "base.toml"]);
    std::fs::write(dir.path().join("run/report.json"), &o.stdout).unwrap();
    let e = run_bad(&dir, &["report", "run", "-o", "fifo"]);
    assert!(e.contains("FIFO"), "{e}");
    let meta = std::fs::symlink_metadata(&fifo).unwrap();
    use std::os::unix::fs::FileTypeExt;
    assert!(meta.file_type().is_fifo(), "the FIFO is still a FIFO");
    // A symlink is followed: its target is replaced, the link stays.
    std::fs::create_dir(dir.path().join("real")).unwrap();
    dir.write("real/results.jsonl", "old\n");
    std::os::unix::fs::symlink("real/results.jsonl", dir.path().join("link.jsonl")).unwrap();
    ok(&dir, &["run", "base.toml", "--results-path", "link.jsonl"]);
    assert!(std::fs::symlink_metadata(dir.path().join("link.jsonl"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        read(&dir.path().join("real/results.jsonl")).lines().count(),
        30
    );
    // A symlink to the run file is the run file.
    std::os::unix::fs::symlink("base.toml", dir.path().join("alias")).unwrap();
    let e = run_bad(&dir, &["run", "base.toml", "--results-path", "alias"]);
    assert!(e.contains("run file"), "{e}");
    assert_eq!(read(&dir.path().join("base.toml")), BASE);
    // So is a hard link.
    std::fs::hard_link(dir.path().join("base.toml"), dir.path().join("hard")).unwrap();
    let e = run_bad(&dir, &["run", "base.toml", "--trace-path", "hard"]);
    assert!(e.contains("run file"), "{e}");
}

/// Wait (polling) until `cond` holds; panics after `limit`.
fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(pid: u32, signal: &str) {
    let s = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(s.success());
}

#[cfg(unix)]
#[test]
fn an_interrupted_run_or_sweep_leaves_no_temporary_file() {
    // Defect 5.
    let dir = TestDir::new("outputs_interrupt");
    // A run long enough to be interrupted while it writes.
    dir.write(
        "long.toml",
        &BASE.replace("num_requests = 30", "num_requests = 50000000"),
    );
    std::fs::create_dir(dir.path().join("out")).unwrap();
    dir.write("out/results.jsonl", "previous\n");
    for signal in ["-INT", "-TERM"] {
        let mut child = dir
            .blis()
            .args([
                "run",
                "long.toml",
                "--results-path",
                "out/results.jsonl",
                "--trace-path",
                "out/trace.jsonl",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for("the temporary results", Duration::from_secs(60), || {
            temporaries(&dir.path().join("out")).len() == 2
        });
        kill(child.id(), signal);
        let status = child.wait().unwrap();
        let want = if signal == "-INT" { 130 } else { 143 };
        assert_eq!(status.code(), Some(want), "{signal}");
        assert_eq!(
            tree(&dir.path().join("out")),
            vec!["results.jsonl".to_string()]
        );
        assert_eq!(read(&dir.path().join("out/results.jsonl")), "previous\n");
    }
    // A sweep interrupted while runs and tables are written.
    dir.write("base.toml", BASE);
    dir.write(
        "many.toml",
        "base = \"base.toml\"\nseeds = [1, 2, 3, 4, 5, 6, 7, 8]\n[set]\n\"output.results_path\" = \"r.jsonl\"\n[[axis]]\nkey = \"workload.num_requests\"\nvalues = [200000, 200001, 200002, 200003]\n",
    );
    let mut child = dir
        .blis()
        .args(["sweep", "many.toml", "--out", "sw", "--jobs", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("a run being written", Duration::from_secs(60), || {
        dir.path().join("sw/runs").is_dir() && !temporaries(&dir.path().join("sw")).is_empty()
    });
    kill(child.id(), "-TERM");
    assert_eq!(child.wait().unwrap().code(), Some(143));
    assert_eq!(temporaries(&dir.path().join("sw")), Vec::<String>::new());
    // What SIGKILL leaves (top-level temporary tables, staging folders) is
    // removed when the sweep is opened again.
    dir.write("sw/.results.csv.123-4.tmp", "partial");
    dir.write("sw/.results.jsonl.123-5.tmp", "partial");
    std::fs::create_dir_all(dir.path().join("sw/runs/.tmp-0/x")).unwrap();
    dir.write("sw/mine.tmp", "not ours");
    dir.write(
        "few.toml",
        "base = \"base.toml\"\nseeds = [1]\n[[axis]]\nkey = \"workload.num_requests\"\nvalues = [5]\n",
    );
    // A different sweep is refused, and touches nothing.
    run_bad(&dir, &["sweep", "few.toml", "--out", "sw", "--quiet"]);
    assert!(dir.path().join("sw/.results.csv.123-4.tmp").exists());
    let mut child = dir
        .blis()
        .args(["sweep", "many.toml", "--out", "sw", "--jobs", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the sweep reopened", Duration::from_secs(60), || {
        !dir.path().join("sw/.results.csv.123-4.tmp").exists()
    });
    kill(child.id(), "-INT");
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert_eq!(temporaries(&dir.path().join("sw")), vec!["mine.tmp"]);
    // Ctrl-C is graceful (round 4, item 1): the finished runs' tables are written.
    assert!(dir.path().join("sw/results.csv").is_file());
}

#[test]
fn empty_output_paths_name_their_key_before_anything_runs() {
    // Defect 6.
    let dir = TestDir::new("outputs_empty");
    for key in [
        "output.results_path",
        "output.trace_path",
        "output.timeseries_path",
    ] {
        let (section, name) = key.split_once('.').unwrap();
        dir.write("run.toml", &format!("{BASE}[{section}]\n{name} = \"\"\n"));
        for cmd in ["validate", "run"] {
            let e = run_bad(&dir, &[cmd, "run.toml"]);
            assert!(e.contains(&format!("{key} is empty")), "{cmd}: {e}");
        }
    }
    // clap refuses an empty flag value itself, naming the flag.
    let e = run_bad(&dir, &["run", "run.toml", "--results-path", ""]);
    assert!(e.contains("--results-path"), "{e}");
}

#[cfg(unix)]
#[test]
fn outputs_honour_the_umask_and_keep_an_existing_mode() {
    // Defect 7.
    use std::os::unix::fs::PermissionsExt;
    let dir = TestDir::new("outputs_umask");
    dir.write("base.toml", BASE);
    dir.write("sweep.toml", SWEEP);
    let blis = crate::util::artifacts().blis();
    let mode = |p: &str| {
        std::fs::metadata(dir.path().join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    for (umask, want) in [("022", 0o644), ("077", 0o600), ("002", 0o664)] {
        let _ = std::fs::remove_file(dir.path().join("r.jsonl"));
        let _ = std::fs::remove_dir_all(dir.path().join("sw"));
        let script = format!(
            "umask {umask} && \"$0\" run base.toml --results-path r.jsonl --trace-path t.jsonl >/dev/null && \"$0\" sweep sweep.toml --out sw --quiet && \"$0\" report sw -o sw.html"
        );
        let s = Command::new("sh")
            .current_dir(dir.path())
            .args(["-c", &script])
            .arg(&blis)
            .status()
            .unwrap();
        assert!(s.success());
        let _ = std::fs::remove_file(dir.path().join("t.jsonl"));
        for f in ["r.jsonl", "sw/results.csv", "sw/sweep.json", "sw.html"] {
            assert_eq!(mode(f), want, "{f} under umask {umask}");
        }
        let run = std::fs::read_dir(dir.path().join("sw/runs"))
            .unwrap()
            .flatten()
            .next()
            .unwrap()
            .path();
        let m = std::fs::metadata(run.join("report.json")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, want);
        let _ = std::fs::remove_file(dir.path().join("sw.html"));
    }
    // An existing file keeps its mode.
    std::fs::set_permissions(
        dir.path().join("r.jsonl"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    ok(&dir, &["run", "base.toml", "--results-path", "r.jsonl"]);
    assert_eq!(mode("r.jsonl"), 0o640);
}

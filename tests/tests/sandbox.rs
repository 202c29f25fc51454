//! The WebAssembly sandbox against hostile guests (issue 56), through the
//! real `blis` and the hostile policies of `tests/fixtures/wasm-faulty`
//! (Rust) and `wasm-faulty-py` (Python), built by `.ci/run` into
//! `BLIS_TEST_WASM_DIR`: a guest's sleep returns at once; log lines, WASI
//! stdout, `create()` errors and decision reasons are capped, prefixed and
//! escaped; a fault inside a host call names the call and the fault; the
//! compiled-component cache runs only what blis wrote; policies fit under
//! an 8 GB address-space limit. Each promise is one of the book's ("What a
//! plugin can and cannot do", docs/src/wasm.md).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::util::{artifacts, TestDir};
use crate::wasm::wasm_dir;

/// `blis run` (with `extra` flags, killed after 300 s) of a run file with
/// `policy` of `wasm` as its only scorer (or, with `admission`, as its
/// admission policy).
fn run_guest(dir: &TestDir, wasm: &Path, policy: &str, admission: bool, extra: &[&str]) -> Output {
    let file = run_file(dir, wasm, policy, admission);
    let mut args = vec!["run", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    run_bounded(dir, &args, Duration::from_secs(300))
}

fn run_file(dir: &TestDir, wasm: &Path, policy: &str, admission: bool) -> PathBuf {
    let (admission, routing) = if admission {
        (
            format!("[admission]\npolicy = \"{policy}\"\n"),
            "[routing]\npolicy = \"round-robin\"\n".to_string(),
        )
    } else {
        (
            String::new(),
            format!("[routing]\npolicy = \"weighted\"\n[[routing.scorers]]\nname = \"{policy}\"\nweight = 1.0\n"),
        )
    };
    dir.write(
        "run.toml",
        &format!(
            "seed = 3\n[[plugins]]\npath = \"{}\"\n\
             [instance]\ncount = 3\n\
             [workload]\naggregate_rate = 20.0\nnum_requests = 30\nprompt_tokens = 300\noutput_tokens = 20\n\
             {admission}{routing}",
            wasm.display()
        ),
    )
}

/// Run `blis args` in `dir`, killed after `limit` (a hang is a failure,
/// not a stuck test run). The output is read as it comes, so a flood of
/// text cannot block the child on a full pipe.
fn run_bounded(dir: &TestDir, args: &[&str], limit: Duration) -> Output {
    let child = dir
        .blis()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run blis");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => o.expect("output"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            let o = rx.recv().expect("output").expect("output");
            panic!(
                "blis {args:?} still running after {limit:?} (killed): {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// A guest's `time.sleep(3600)` at every call returns at once (its clock
/// is fixed), so the run ends.
#[test]
fn a_guests_sleep_returns_at_once() {
    let Some(w) = wasm_dir("a_guests_sleep_returns_at_once") else {
        return;
    };
    let dir = TestDir::new("sandbox_sleep");
    let o = run_guest(
        &dir,
        &w.join("wasm-faulty-py.wasm"),
        "wasm-faulty-py::sleep",
        false,
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["cluster"]["completed_requests"], 30, "{report:#}");
}

/// Every text a guest emits is capped, prefixed with the policy and
/// escaped: 300 log lines of 100 kB with forged `error:` lines and
/// escape codes; 20,000 lines and one 5 MB line on WASI stdout; a 50 MB
/// `create()` error; a 1 MB reason per admission decision in the trace; a
/// summary with escape codes in `plugins show`.
#[test]
fn guest_text_is_capped_prefixed_and_escaped() {
    let Some(w) = wasm_dir("guest_text_is_capped_prefixed_and_escaped") else {
        return;
    };
    let dir = TestDir::new("sandbox_text");
    let rust = w.join("wasm-faulty.wasm");
    let py = w.join("wasm-faulty-py.wasm");
    let no_forgery = |e: &str| {
        assert!(
            !e.lines().any(|l| l.starts_with("error: plugin blis-std")),
            "a forged line reached stderr"
        );
        assert!(
            !e.contains('\u{1b}') && !e.contains('\u{7}'),
            "an escape code reached stderr"
        );
    };
    // The log: 300 × 100 kB asked, at most 100 lines of about 1 kB shown.
    let o = run_guest(&dir, &rust, "wasm-faulty::log-flood", false, &[]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{e}");
    assert!(e.len() < 200_000, "{} bytes on stderr", e.len());
    no_forgery(&e);
    let who = "plugin wasm-faulty: scorer 'log-flood': ";
    assert_eq!(
        e.lines().filter(|l| l.starts_with(who)).count(),
        101,
        "{}",
        &e[..2000.min(e.len())]
    );
    assert!(
        e.contains("more bytes cut")
            && e.contains("\\u{1b}[31m")
            && e.contains("more than 100 log lines")
    );
    // WASI stdout (Python print): the same rules.
    let o = run_guest(&dir, &py, "wasm-faulty-py::print-flood", false, &[]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{e}");
    assert!(e.len() < 200_000, "{} bytes on stderr", e.len());
    no_forgery(&e);
    let who = "plugin wasm-faulty-py: scorer 'print-flood': stdout: ";
    assert_eq!(
        e.lines().filter(|l| l.starts_with(who)).count(),
        100,
        "{}",
        &e[..2000.min(e.len())]
    );
    assert!(e.contains("more than 100 lines on stdout"), "{e}");
    // create(): 50 MB of error text → one bounded, escaped error line.
    let o = run_guest(&dir, &rust, "wasm-faulty::create-flood", false, &[]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{}", &e[..2000.min(e.len())]);
    assert!(e.len() < 10_000, "{} bytes on stderr", e.len());
    assert!(
        e.contains("create-flood") && e.contains("more bytes cut"),
        "{e}"
    );
    no_forgery(&e);
    // Reasons: 1 MB per decision, a bounded reason per trace record.
    let o = run_guest(
        &dir,
        &rust,
        "wasm-faulty::reason-flood",
        true,
        &["--trace-path", "trace.jsonl"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let trace = std::fs::read_to_string(dir.path().join("trace.jsonl")).unwrap();
    assert!(
        trace.len() < 100_000,
        "a trace of {} bytes for 30 requests",
        trace.len()
    );
    let rejections = trace.lines().filter(|l| l.contains("\"reason\"")).count();
    assert_eq!(rejections, 15, "{}", &trace[..2000.min(trace.len())]);
    assert!(trace.contains("more bytes cut") && !trace.contains('\u{1b}'));
    // A summary with escape codes and a newline, shown escaped.
    let o = dir
        .blis()
        .args(["plugins", "show", "wasm-faulty::log-flood", "--plugin"])
        .arg(&rust)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("floods the log\\u{1b}[31m\\nerror: forged summary"),
        "{out}"
    );
    assert!(!out.lines().any(|l| l.starts_with("error:")), "{out}");
}

/// A guest handing the host an out-of-bounds pointer: the error names the
/// host call and the fault.
#[test]
fn a_fault_in_a_host_call_names_the_call_and_the_fault() {
    let Some(w) = wasm_dir("a_fault_in_a_host_call_names_the_call_and_the_fault") else {
        return;
    };
    let dir = TestDir::new("sandbox_host_fault");
    let o = run_guest(
        &dir,
        &w.join("wasm-faulty.wasm"),
        "wasm-faulty::bad-pointer",
        false,
        &[],
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    let line = e
        .lines()
        .find(|l| l.starts_with("error:"))
        .expect("an error line");
    assert!(
        line.contains("bad-pointer") && line.contains("score"),
        "{line}"
    );
    assert!(line.contains("out of bounds"), "the fault: {line}");
    assert!(
        line.contains("blis:plugin/host") && line.contains("log"),
        "the call: {line}"
    );
    assert!(!line.trim_end().ends_with("backtrace:"), "{line}");
}

/// The cache of compiled components runs only what blis wrote: a damaged
/// entry and another component's entry planted under this one's name are
/// compiled again (the run gives the report it gives without a cache); a
/// cache folder others may write to is not used.
#[test]
fn the_compiled_component_cache_runs_only_what_blis_wrote() {
    let Some(w) = wasm_dir("the_compiled_component_cache_runs_only_what_blis_wrote") else {
        return;
    };
    let dir = TestDir::new("sandbox_cache");
    let cache = dir.path().join("cache");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/wasm/rust.toml");
    let run = |cache: &str| -> Output {
        dir.blis()
            .env("BLIS_WASM_CACHE", cache)
            .args([
                "run",
                example.to_str().unwrap(),
                "--num-requests",
                "300",
                "--set",
            ])
            .arg(format!(
                "plugins.0.path=\"{}\"",
                w.join("wasm-example.wasm").display()
            ))
            .output()
            .unwrap()
    };
    let reference = run("off");
    assert!(
        reference.status.success(),
        "{}",
        String::from_utf8_lossy(&reference.stderr)
    );
    let c = cache.to_str().unwrap();
    assert_eq!(
        run(c).stdout,
        reference.stdout,
        "first run, filling the cache"
    );
    let entries = |ext: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        v.sort();
        v
    };
    let cwasm = entries("cwasm");
    assert_eq!(cwasm.len(), 1, "{cwasm:?}");
    assert_eq!(entries("mac").len(), 1);
    // Damaged: bytes flipped in the middle of the machine code.
    let mut bytes = std::fs::read(&cwasm[0]).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 4096] {
        *b ^= 0xa5;
    }
    std::fs::write(&cwasm[0], &bytes).unwrap();
    let o = run(c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        o.stdout, reference.stdout,
        "a damaged entry is compiled again"
    );
    // Foreign: another component's compiled code under this one's name.
    let other = dir.path().join("other");
    let o = dir
        .blis()
        .env("BLIS_WASM_CACHE", &other)
        .args(["plugins", "list", "--plugin"])
        .arg(w.join("wasm-faulty.wasm"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let foreign = std::fs::read_dir(&other)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .unwrap();
    std::fs::copy(&foreign, &cwasm[0]).unwrap();
    let o = run(c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        o.stdout, reference.stdout,
        "a planted entry is compiled again"
    );
    // A folder others may write to is not trusted.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = run(c);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{e}");
    assert!(
        e.contains("is not used") && e.contains("others may write"),
        "{e}"
    );
}

/// Three WebAssembly policies (examples/wasm/rust.toml) run under an
/// 8 GB address-space limit: each memory reserves what it uses plus a
/// little, not 4 GiB.
#[test]
fn three_policies_run_under_an_8_gb_address_space_limit() {
    let Some(w) = wasm_dir("three_policies_run_under_an_8_gb_address_space_limit") else {
        return;
    };
    let dir = TestDir::new("sandbox_ulimit");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/wasm/rust.toml");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 8388608 && exec \"{}\" run \"{}\" --num-requests 200 --set 'plugins.0.path=\"{}\"'",
            artifacts().blis().display(),
            example.display(),
            w.join("wasm-example.wasm").display()
        ))
        .current_dir(dir.path())
        .env("BLIS_WASM_CACHE", "off")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

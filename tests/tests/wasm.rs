//! WebAssembly component plugins through the real `blis` and real `.wasm`
//! files: the examples/wasm scenario from native, Rust-wasm and
//! Python-wasm policies (the same report), and containment — an endless
//! loop, a 4 GiB allocation, a file or the clock, a trap mid-run, each a
//! one-line error with exit 1 — with a fuel budget that traps at the same
//! request every time. The components are built by `.ci/run`
//! (`examples/wasm/build.sh --require --tests DIR`, which needs Debian's
//! wasm32 rustc, wasm-tools and componentize-py) into the folder
//! `BLIS_TEST_WASM_DIR` names; without it those tests say they skipped.
//! Load errors need no component and always run.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::util::{run_bad, TestDir};

/// The folder of built components, or `None` (the caller says it skipped).
pub(crate) fn wasm_dir(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("BLIS_TEST_WASM_DIR").map(PathBuf::from);
    if dir.is_none() {
        eprintln!(
            "skipped {test}: BLIS_TEST_WASM_DIR is not set (.ci/run builds the components with \
             examples/wasm/build.sh --require --tests DIR)"
        );
    }
    dir
}

fn component(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(format!("{name}.wasm"));
    assert!(
        p.exists(),
        "{} is missing: run examples/wasm/build.sh --tests {}",
        p.display(),
        dir.display()
    );
    p
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/wasm")
}

fn run(dir: &TestDir, args: &[&str]) -> Output {
    dir.blis().args(args).output().expect("run blis")
}

fn report(o: &Output, what: &str) -> Value {
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// A run of `examples/wasm/FILE` with its component from `wasm`.
/// The report sections `examples/lora.toml`'s comparisons look at (the
/// pipeline's names differ by design).
const LORA_SECTIONS: &[&str] = &["cluster", "adapters", "instances"];

/// `blis run FILE ARGS…`'s report, only its `sections`.
fn run_sections(dir: &TestDir, file: &Path, args: &[&str], sections: &[&str]) -> Value {
    let file = file.to_str().unwrap();
    let mut all = vec!["run", file];
    all.extend(args);
    let v = report(&run(dir, &all), file);
    Value::Object(
        sections
            .iter()
            .map(|s| (s.to_string(), v[*s].clone()))
            .collect(),
    )
}

fn example_run(dir: &TestDir, file: &str, wasm: Option<&Path>) -> Output {
    let path = examples().join(file);
    let mut args = vec!["run".to_string(), path.display().to_string()];
    if let Some(w) = wasm {
        args.push("--set".into());
        args.push(format!("plugins.0.path=\"{}\"", w.display()));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(dir, &args)
}

/// The report without its `plugins` section (the only part that names
/// the files loaded), as the exact text blis would print.
fn without_plugins(v: Value, wasm: &Path) -> String {
    without_plugins_of(v, wasm, "blis:plugin@0.1.2")
}

/// [`without_plugins`], for a component built against WIT package `wit`.
fn without_plugins_of(mut v: Value, wasm: &Path, wit: &str) -> String {
    let plugins = v
        .as_object_mut()
        .and_then(|o| o.remove("plugins"))
        .expect("a report with plugin files has a plugins section");
    let files = plugins.as_array().expect("plugins is an array");
    assert_eq!(files.len(), 1, "{plugins}");
    assert_eq!(
        files[0]["path"],
        Value::from(wasm.canonicalize().unwrap().display().to_string())
    );
    assert_eq!(files[0]["abi_version"], wit);
    serde_json::to_string_pretty(&v).unwrap()
}

/// Components built against the earlier WIT versions load in this host —
/// wasmtime matches their `@0.1.0` / `@0.1.1` imports and export to the
/// host's `@0.1.2` ones — report the version they were built against, and
/// give the native report byte for byte: `blis:plugin@0.1.0`
/// (`tests/fixtures/wasm-wit-0.1.0/wasm-example.wasm`, the example's Rust
/// guest as this repository built it before 0.1.1 added the `lora`
/// interface) and `blis:plugin@0.1.1` (`wasm-wit-0.1.1/`, built before
/// 0.1.2 added the `request` interface; its `lora-affinity` imports
/// `lora@0.1.1` and routes `examples/lora.toml` as the native scorer).
/// Needs no toolchain: the components are committed.
#[test]
fn components_built_against_earlier_wit_versions_load_and_decide_unchanged() {
    let dir = TestDir::new("wasm_wit_0_1_0");
    let native = report(&example_run(&dir, "native.toml", None), "native.toml");
    for version in ["0.1.0", "0.1.1"] {
        let old = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("fixtures/wasm-wit-{version}/wasm-example.wasm"));
        let rust = report(
            &example_run(&dir, "rust.toml", Some(&old)),
            &format!("rust.toml ({version})"),
        );
        assert_eq!(
            without_plugins_of(rust, &old, &format!("blis:plugin@{version}")),
            serde_json::to_string_pretty(&native).unwrap(),
            "a {version} component vs native"
        );
    }
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lora.toml");
    let outcome = |args: &[&str]| run_sections(&dir, &example, args, LORA_SECTIONS);
    let old =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/wasm-wit-0.1.1/wasm-example.wasm");
    assert_eq!(
        outcome(&[
            "--plugin",
            old.to_str().unwrap(),
            "--routing-scorers",
            "wasm-example::lora-affinity:3,wasm-example::queue-depth:1",
        ]),
        outcome(&[]),
        "lora-affinity of a 0.1.1 component vs native"
    );
}

#[test]
fn rust_and_python_components_give_the_native_report() {
    let Some(wdir) = wasm_dir("rust_and_python_components_give_the_native_report") else {
        return;
    };
    let dir = TestDir::new("wasm_three_routes");
    let native_out = example_run(&dir, "native.toml", None);
    let native = report(&native_out, "native.toml");
    assert!(native.get("plugins").is_none());
    let native_text = serde_json::to_string_pretty(&native).unwrap();
    // The scenario exercises all four kinds: some requests are rejected by
    // admission or the filter, some disaggregated (the prefill router).
    assert!(
        native["cluster"]["rejected_requests"].as_u64().unwrap() > 0,
        "{native_text}"
    );
    assert!(native["pd"]["disaggregated_requests"].as_u64().unwrap() > 0);

    let rust_wasm = component(&wdir, "wasm-example");
    let rust = report(
        &example_run(&dir, "rust.toml", Some(&rust_wasm)),
        "rust.toml",
    );
    assert_eq!(
        without_plugins(rust, &rust_wasm),
        native_text,
        "Rust component vs native"
    );

    let py_wasm = component(&wdir, "wasm-example-py");
    let py = report(
        &example_run(&dir, "python.toml", Some(&py_wasm)),
        "python.toml",
    );
    assert_eq!(
        without_plugins(py, &py_wasm),
        native_text,
        "Python component vs native"
    );
}

/// A small weighted run whose one scorer is `policy` of `wasm`, with the
/// `[[plugins]]` keys `limits`.
fn scorer_run(dir: &TestDir, wasm: &Path, policy: &str, params: &str, limits: &str) -> Output {
    let file = dir.write(
        "run.toml",
        &format!(
            "seed = 3\n\
             [[plugins]]\npath = \"{}\"\n{limits}\n\
             [model]\nname = \"qwen3-14b\"\nhardware = \"H100\"\n\
             [instance]\ncount = 3\n\
             [workload]\naggregate_rate = 20.0\nnum_requests = 60\nprompt_tokens = 400\n\
             prompt_tokens_stdev = 300\nprompt_tokens_min = 10\nprompt_tokens_max = 2000\n\
             output_tokens = 20\n\
             [routing]\npolicy = \"weighted\"\n\
             [[routing.scorers]]\nname = \"{policy}\"\nweight = 1.0\nparams = {{ {params} }}\n",
            wasm.display()
        ),
    );
    run(
        dir,
        &[
            "run",
            file.to_str().unwrap(),
            "--results-path",
            "results.jsonl",
        ],
    )
}

/// A run that must fail inside a policy call: exit 1, nothing on stdout,
/// one error line naming the library, the policy, the call and a request.
/// Returns the error line.
fn contained(o: &Output, library: &str, policy: &str, call: &str) -> String {
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(o.stdout.is_empty(), "nothing on stdout: {e}");
    let errors: Vec<&str> = e.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{e}");
    let line = errors[0];
    assert!(
        e.trim_end().ends_with(line),
        "the error is the last line, on one line:\n{e}"
    );
    let head = format!("error: plugin {library}: scorer '{policy}' trapped in {call} for request ");
    assert!(line.starts_with(&head), "{line}");
    assert!(
        !e.contains("stack backtrace") && !e.contains("RUST_BACKTRACE"),
        "{e}"
    );
    line.to_string()
}

/// The request id an error line names.
fn request_of(line: &str) -> u64 {
    let rest = line.split(" for request ").nth(1).expect("names a request");
    rest.split(':')
        .next()
        .unwrap()
        .parse()
        .expect("a request id")
}

#[test]
fn rust_component_faults_are_contained() {
    let Some(wdir) = wasm_dir("rust_component_faults_are_contained") else {
        return;
    };
    let wasm = component(&wdir, "wasm-faulty");
    let dir = TestDir::new("wasm_rust_faults");
    let lib = "wasm-faulty";

    // An endless loop: its first call runs out of fuel.
    let line = contained(
        &scorer_run(
            &dir,
            &wasm,
            "wasm-faulty::spin",
            "",
            "fuel_per_call = 20000000",
        ),
        lib,
        "spin",
        "score",
    );
    assert!(
        line.contains("ran out of fuel") && line.contains("20000000"),
        "{line}"
    );
    assert_eq!(request_of(&line), 0, "{line}");

    // 4 GiB in 256 MiB chunks against a 64 MiB cap.
    let line = contained(
        &scorer_run(&dir, &wasm, "wasm-faulty::hog", "", "max_memory_mib = 64"),
        lib,
        "hog",
        "score",
    );
    assert!(
        line.contains("exceeded its memory cap") && line.contains("the cap is 64 MiB"),
        "{line}"
    );

    // The clock and the file system are not there: std's calls fail and
    // the policy's panic is the error.
    let line = contained(
        &scorer_run(&dir, &wasm, "wasm-faulty::clock", "", ""),
        lib,
        "clock",
        "score",
    );
    assert!(
        line.contains("panicked") && line.contains("time not implemented"),
        "{line}"
    );
    let line = contained(
        &scorer_run(&dir, &wasm, "wasm-faulty::file", "", ""),
        lib,
        "file",
        "score",
    );
    assert!(
        line.contains("cannot read /etc/passwd") && line.contains("not supported"),
        "{line}"
    );

    // A trap mid-run, at the request asked for.
    let line = contained(
        &scorer_run(&dir, &wasm, "wasm-faulty::trap-at", "at = 17", ""),
        lib,
        "trap-at",
        "score",
    );
    assert_eq!(request_of(&line), 17, "{line}");
    assert!(line.contains("unreachable"), "{line}");
}

#[test]
fn a_fuel_budget_traps_at_the_same_request_every_time() {
    let Some(wdir) = wasm_dir("a_fuel_budget_traps_at_the_same_request_every_time") else {
        return;
    };
    let wasm = component(&wdir, "wasm-faulty");
    let dir = TestDir::new("wasm_fuel_determinism");
    // With the default budget the run finishes; its results give every
    // request's prompt length.
    let ok = scorer_run(&dir, &wasm, "wasm-faulty::hungry", "", "");
    report(&ok, "hungry, default fuel");
    let results = std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap();
    let mut input = std::collections::BTreeMap::new();
    for l in results.lines() {
        let r: Value = serde_json::from_str(l).unwrap();
        input.insert(
            r["id"].as_u64().unwrap(),
            r["input_tokens"].as_u64().unwrap(),
        );
    }
    // The work grows with the prompt, so a budget between the smallest and
    // the largest prompt's needs traps at the first request longer than
    // every one before it that passed: twice at the same request.
    let limits = "fuel_per_call = 1500000";
    let a = contained(
        &scorer_run(&dir, &wasm, "wasm-faulty::hungry", "", limits),
        "wasm-faulty",
        "hungry",
        "score",
    );
    let b = contained(
        &scorer_run(&dir, &wasm, "wasm-faulty::hungry", "", limits),
        "wasm-faulty",
        "hungry",
        "score",
    );
    assert_eq!(a, b);
    let at = request_of(&a);
    assert!(at > 0, "some requests pass first: {a}");
    let longest_before = (0..at).map(|i| input[&i]).max().unwrap();
    assert!(
        input[&at] > longest_before,
        "request {at} ({} tokens) vs {longest_before}",
        input[&at]
    );
}

#[test]
fn python_component_faults_are_contained() {
    let Some(wdir) = wasm_dir("python_component_faults_are_contained") else {
        return;
    };
    let wasm = component(&wdir, "wasm-faulty-py");
    let dir = TestDir::new("wasm_python_faults");
    let lib = "wasm-faulty-py";

    let line = contained(
        &scorer_run(&dir, &wasm, "wasm-faulty-py::open-file", "", ""),
        lib,
        "open-file",
        "score",
    );
    assert!(
        line.contains("/etc/passwd") && line.contains("Error"),
        "{line}"
    );

    let line = contained(
        &scorer_run(
            &dir,
            &wasm,
            "wasm-faulty-py::spin",
            "",
            "fuel_per_call = 50000000",
        ),
        lib,
        "spin",
        "score",
    );
    assert!(line.contains("ran out of fuel"), "{line}");

    let line = contained(
        &scorer_run(
            &dir,
            &wasm,
            "wasm-faulty-py::hog",
            "",
            "max_memory_mib = 128",
        ),
        lib,
        "hog",
        "score",
    );
    assert!(line.contains("exceeded its memory cap"), "{line}");

    let line = contained(
        &scorer_run(&dir, &wasm, "wasm-faulty-py::raise-at", "at = 9", ""),
        lib,
        "raise-at",
        "score",
    );
    assert_eq!(request_of(&line), 9, "{line}");
    assert!(line.contains("RuntimeError: refusing request 9"), "{line}");

    // The clock is fixed and randomness comes from the policy's seed: the
    // same line in two runs, the epoch for the time.
    let logged = |o: &Output| {
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{e}");
        e.lines()
            .find(|l| l.contains("time "))
            .map(str::to_string)
            .expect("the policy logs")
    };
    let first = logged(&scorer_run(
        &dir,
        &wasm,
        "wasm-faulty-py::clock-and-dice",
        "",
        "",
    ));
    let second = logged(&scorer_run(
        &dir,
        &wasm,
        "wasm-faulty-py::clock-and-dice",
        "",
        "",
    ));
    assert_eq!(first, second);
    assert!(
        first.contains("scorer 'clock-and-dice': time 0.0 random 0."),
        "{first}"
    );
}

#[test]
fn files_that_are_not_blis_components_are_refused() {
    let dir = TestDir::new("wasm_load_errors");
    let run_file = |plugin: &str, extra: &str| {
        dir.write(
            "run.toml",
            &format!(
                "[[plugins]]\npath = \"{plugin}\"\n{extra}\n[instance]\ncount = 1\n\
                 [workload]\nnum_requests = 5\n"
            ),
        )
    };
    // A core module, not a component.
    std::fs::write(dir.path().join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let f = run_file("core.wasm", "");
    let e = run_bad(&dir, &["run", f.to_str().unwrap()]);
    assert!(
        e.contains("not a blis WebAssembly component") && e.contains("core WebAssembly module"),
        "{e}"
    );
    // Not WebAssembly at all.
    std::fs::write(dir.path().join("text.wasm"), b"hello").unwrap();
    let f = run_file("text.wasm", "");
    let e = run_bad(&dir, &["run", f.to_str().unwrap()]);
    assert!(e.contains("magic bytes"), "{e}");
    // Bad limits.
    let f = run_file("core.wasm", "fuel_per_call = 0");
    let e = run_bad(&dir, &["run", f.to_str().unwrap()]);
    assert!(e.contains("fuel_per_call = 0"), "{e}");
    let f = run_file("core.wasm", "max_memory_mib = 5000");
    let e = run_bad(&dir, &["run", f.to_str().unwrap()]);
    assert!(
        e.contains("max_memory_mib = 5000") && e.contains("4096"),
        "{e}"
    );
    // Limits on a shared library.
    let so = crate::util::artifacts().alpha();
    let f = run_file(so.to_str().unwrap(), "fuel_per_call = 10");
    let e = run_bad(&dir, &["run", f.to_str().unwrap()]);
    assert!(e.contains("apply to WebAssembly components"), "{e}");
}

#[test]
fn plugins_list_shows_a_components_policies() {
    let Some(wdir) = wasm_dir("plugins_list_shows_a_components_policies") else {
        return;
    };
    let wasm = component(&wdir, "wasm-example");
    let dir = TestDir::new("wasm_plugins_list");
    let o = run(
        &dir,
        &["plugins", "list", "--plugin", wasm.to_str().unwrap()],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let at = out
        .find("\nwasm-example 0.1.0 (WebAssembly blis:plugin@0.1.2, ")
        .unwrap_or_else(|| panic!("the component's header in:\n{out}"));
    let rows: Vec<Vec<&str>> = out[at + 1..]
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().take(2).collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["admission", "token-bucket"],
            ["admission", "header-gate"],
            ["router", "least-loaded"],
            ["scorer", "queue-depth"],
            ["scorer", "kv-utilization"],
            ["scorer", "prefix-affinity"],
            ["scorer", "lora-affinity"],
            ["scorer", "session-affinity"],
            ["filter", "low-queue"],
        ],
        "{out}"
    );
}

#[test]
fn components_serve_the_other_kinds() {
    let Some(wdir) = wasm_dir("components_serve_the_other_kinds") else {
        return;
    };
    let wasm = component(&wdir, "wasm-faulty");
    let dir = TestDir::new("wasm_other_kinds");
    // A picker, a scheduler and a preemption policy (one per instance, KV
    // small enough to preempt) and an observer, all from the component.
    let file = dir.write(
        "run.toml",
        &format!(
            "seed = 5\n\
             [[plugins]]\npath = \"{}\"\n\
             [[observers]]\nname = \"wasm-faulty::counter\"\n\
             [model]\nname = \"qwen3-14b\"\nhardware = \"H100\"\n\
             [instance]\ncount = 2\ntotal_kv_blocks = 200\nscheduler = \"wasm-faulty::longest-first\"\n\
             preemption = \"wasm-faulty::newest\"\n\
             [workload]\naggregate_rate = 40.0\nnum_requests = 80\nprompt_tokens = 600\n\
             prompt_tokens_stdev = 300\nprompt_tokens_min = 10\nprompt_tokens_max = 1500\n\
             output_tokens = 300\n\
             [routing]\npolicy = \"pipeline\"\n\
             [[routing.profiles]]\nscorers = [{{ name = \"queue-depth\" }}]\n\
             picker = {{ name = \"wasm-faulty::last-best\" }}\n",
            wasm.display()
        ),
    );
    let a = run(&dir, &["run", file.to_str().unwrap()]);
    let r = report(&a, "other kinds");
    let completed = r["cluster"]["completed_requests"].as_u64().unwrap();
    assert!(
        r["cluster"]["preemption_count"].as_u64().unwrap() > 0,
        "{r}"
    );
    let e = String::from_utf8_lossy(&a.stderr);
    let want = format!(
        "plugin wasm-faulty: observer 'counter': completed {completed} (summary: {completed} of 80 arrived)"
    );
    assert!(e.lines().any(|l| l == want), "{want} in:\n{e}");
    let b = run(&dir, &["run", file.to_str().unwrap()]);
    assert_eq!(a.stdout, b.stdout, "the same report twice");
    // The component's policies decide: with the native defaults in their
    // place (fcfs, fcfs, max-score) the same run differs.
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("\"wasm-faulty::longest-first\"", "\"fcfs\"")
        .replace("\"wasm-faulty::newest\"", "\"fcfs\"")
        .replace("\"wasm-faulty::last-best\"", "\"max-score\"");
    let native = dir.write("native.toml", &text);
    let c = run(&dir, &["run", native.to_str().unwrap()]);
    let rn = report(&c, "native kinds");
    assert_ne!(
        r["cluster"], rn["cluster"],
        "the component's scheduler, preemption and picker changed nothing"
    );
}

/// The LoRA views reach WebAssembly components through WIT 0.1.1's `lora`
/// interface: `examples/lora.toml` with `lora-affinity` and `queue-depth`
/// from the Rust and from the Python example component gives the native
/// run's report (every section but the pipeline's names).
#[test]
fn lora_affinity_from_components_routes_like_the_native_scorer() {
    let Some(wdir) = wasm_dir("lora_affinity_from_components_routes_like_the_native_scorer") else {
        return;
    };
    let dir = TestDir::new("wasm_lora");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lora.toml");
    let outcome = |args: &[&str]| run_sections(&dir, &example, args, LORA_SECTIONS);
    let native = outcome(&[]);
    assert!(native["adapters"]["ft-00"]["load_count"].as_u64().unwrap() > 0);
    for lib in ["wasm-example", "wasm-example-py"] {
        let wasm = component(&wdir, lib);
        let scorers = format!("{lib}::lora-affinity:3,{lib}::queue-depth:1");
        let got = outcome(&[
            "--plugin",
            wasm.to_str().unwrap(),
            "--routing-scorers",
            &scorers,
        ]);
        assert_eq!(got, native, "{lib}");
    }
}

/// A multi-turn agent (sessions) and a client that sends `x-tier: free`.
const SESSIONS: &str = "seed = 5
[instance]
count = 3
[workload]
aggregate_rate = 20.0
num_requests = 300
[[workload.clients]]
id = \"agent\"
tenant_id = \"paid\"
rate_fraction = 0.6
arrival = { process = \"poisson\" }
input = { type = \"gaussian\", mean = 300, std_dev = 50, min = 16, max = 800 }
output = { type = \"gaussian\", mean = 40, std_dev = 10, min = 8, max = 100 }
session = { max_rounds = 4, think_time_us = 300000, context_growth = \"accumulate\" }
[[workload.clients]]
id = \"free\"
tenant_id = \"free\"
rate_fraction = 0.4
arrival = { process = \"poisson\" }
input = { type = \"gaussian\", mean = 200, std_dev = 50, min = 16, max = 600 }
output = { type = \"gaussian\", mean = 30, std_dev = 10, min = 8, max = 100 }
headers = { \"x-tier\" = \"free\" }
";

/// The request queries reach WebAssembly components through WIT 0.1.2's
/// `request` interface. The example components' `session-affinity` (the
/// session query) routes the multi-turn agent exactly as blis-std's — the
/// report is the native run's, and differs from queue-depth alone — and
/// their `header-gate` (the header query) rejects exactly the 48 requests
/// of the client that sends `x-tier: free` (asked as `X-Tier`), none of the
/// others, naming the header in the trace.
#[test]
fn sessions_and_headers_reach_components() {
    let Some(wdir) = wasm_dir("sessions_and_headers_reach_components") else {
        return;
    };
    let dir = TestDir::new("wasm_request_queries");
    let file = dir.write("sessions.toml", SESSIONS);
    let outcome = |args: &[&str]| run_sections(&dir, &file, args, &["cluster", "instances"]);
    let native = outcome(&["--routing-scorers", "session-affinity:3,queue-depth:1"]);
    assert_ne!(native, outcome(&["--routing-scorers", "queue-depth:1"]));
    for lib in ["wasm-example", "wasm-example-py"] {
        let wasm = component(&wdir, lib);
        let wasm = wasm.to_str().unwrap();
        let scorers = format!("{lib}::session-affinity:3,{lib}::queue-depth:1");
        let got = outcome(&["--plugin", wasm, "--routing-scorers", &scorers]);
        assert_eq!(got, native, "{lib}");

        let gated = dir.write(
            &format!("gated-{lib}.toml"),
            &format!(
                "{SESSIONS}[admission]\npolicy = \"{lib}::header-gate\"\n\
                 params = {{ header = \"X-Tier\", value = \"free\" }}\n"
            ),
        );
        let trace = dir.path().join(format!("gated-{lib}.trace"));
        let out = run(
            &dir,
            &[
                "run",
                gated.to_str().unwrap(),
                "--plugin",
                wasm,
                "--trace-path",
                trace.to_str().unwrap(),
            ],
        );
        let v = report(&out, "header-gate");
        assert_eq!(v["tenants"]["free"]["num_requests"], 48, "{lib}");
        assert_eq!(v["tenants"]["free"]["rejected_requests"], 48, "{lib}");
        assert_eq!(v["tenants"]["paid"]["rejected_requests"], 0, "{lib}");
        let reasons: Vec<Value> = std::fs::read_to_string(&trace)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["kind"] == "admission")
            .map(|r| r["reason"].clone())
            .collect();
        assert_eq!(reasons.len(), 48, "{lib}");
        assert!(
            reasons.iter().all(|r| r == "X-Tier: free"),
            "{lib}: {reasons:?}"
        );
    }
}

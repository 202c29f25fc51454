//! The library entry point `blis_host::session` as a program embedding blis
//! uses it: the same report as the `blis` command, byte for byte; its errors
//! of the right kind with the command's messages; a cancel flag that stops
//! a run.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use blis_host::session::{self, Base, ErrorKind, Overrides, ReplayOptions};

use crate::util::{run_ok, TestDir};

fn example(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples")
        .join(name)
}

#[test]
fn a_run_loaded_and_simulated_through_the_library_is_blis_run() {
    let dir = TestDir::new("session_run");
    let file = example("prefix-affinity.toml");
    for (seed, requests, routing) in [(1u64, 300u64, None), (7, 500, Some("round-robin"))] {
        let overrides = Overrides {
            seed: Some(seed),
            num_requests: Some(requests),
            routing_policy: routing.map(str::to_string),
            ..Overrides::default()
        };
        let mut notes = Vec::new();
        let (run, source) = session::load_run(&Base::File(file.clone()), &overrides, |n| {
            notes.push(n.to_string())
        })
        .unwrap();
        let done = session::simulate(&run, &source, false, |_| {}).unwrap();
        assert_eq!(done.arrived, requests);
        let mut args = vec![
            "run".to_string(),
            file.display().to_string(),
            "--seed".into(),
            seed.to_string(),
            "--num-requests".into(),
            requests.to_string(),
        ];
        if let Some(r) = routing {
            args.extend(["--routing-policy".into(), r.to_string()]);
            // The flag replaced the file's policy and its parameters: said so.
            assert!(
                notes
                    .iter()
                    .any(|n| n.contains("--routing-policy round-robin replaces")),
                "{notes:?}"
            );
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_ok(&dir, &args);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim_end(),
            done.report,
            "seed {seed}: the library's report differs from blis run's"
        );
    }
}

#[test]
fn run_file_text_and_the_built_in_scenario_load_without_a_file() {
    let text = std::fs::read_to_string(example("single-instance.toml")).unwrap();
    let source = session::Source {
        name: "<table>".into(),
        base_dir: example(""),
        text,
    };
    let few = Overrides {
        num_requests: Some(50),
        ..Overrides::default()
    };
    let (run, src) = session::load_run(&Base::Text(source), &few, |_| {}).unwrap();
    assert_eq!(run.workload.num_requests, Some(50));
    assert_eq!(src.name, "<table>");
    let (builtin, _) = session::load_run(&Base::Builtin, &few, |_| {}).unwrap();
    assert_eq!(
        builtin.instance.count, 4,
        "the built-in scenario has 4 instances"
    );
}

#[test]
fn bad_input_is_an_input_error_naming_the_key() {
    let bad = Overrides {
        sets: vec!["instance.count=0".into()],
        ..Overrides::default()
    };
    // Refused when it is loaded or when it is built, as bad input either way.
    let e = match session::load_run(&Base::File(example("single-instance.toml")), &bad, |_| {}) {
        Err(e) => e,
        Ok((run, source)) => session::simulate(&run, &source, false, |_| {})
            .err()
            .unwrap(),
    };
    assert_eq!(e.kind, ErrorKind::Input);
    assert!(e.message.contains("instance.count"), "{}", e.message);

    let e = session::load_run(
        &Base::File(example("no-such-file.toml")),
        &Overrides::default(),
        |_| {},
    )
    .err()
    .unwrap();
    assert_eq!(e.kind, ErrorKind::Input);
    assert!(e.message.contains("no-such-file.toml"), "{}", e.message);

    let mut replay = ReplayOptions::new("h.yaml".into(), "d.csv".into());
    replay.session_mode = "sometimes".into();
    let e = session::load_replay(&Base::Builtin, &replay, |_| {})
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::Input);
    assert!(
        e.message.contains("--session-mode sometimes"),
        "{}",
        e.message
    );
}

#[test]
fn a_set_cancel_flag_stops_the_run_with_a_run_error() {
    let big = Overrides {
        num_requests: Some(2_000_000),
        ..Overrides::default()
    };
    let (run, source) = session::load_run(&Base::Builtin, &big, |_| {}).unwrap();
    let cancel = Arc::new(AtomicBool::new(true));
    let e = session::simulate_with(&run, &source, false, Some(cancel), |_, _| {})
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::Run);
    assert!(e.message.contains("cancel"), "{}", e.message);
}

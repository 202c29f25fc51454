//! Workload-level tests: the merged stream, prefix groups, sessions, trace
//! replay, configuration errors, conversion and memory.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::*;
use crate::request::{prompt_block_hashes, stream_block_hashes, Prompt, Request};

const B: u32 = 16;

fn parse(toml_text: &str) -> WorkloadConfig {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        workload: WorkloadConfig,
    }
    toml::from_str::<File>(toml_text)
        .unwrap_or_else(|e| panic!("{e}"))
        .workload
}

fn build(toml_text: &str, seed: u64) -> Workload {
    Workload::new(&parse(toml_text), seed, Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

fn build_err(toml_text: &str) -> String {
    Workload::new(&parse(toml_text), 1, Path::new("."))
        .map(|_| ())
        .expect_err("should be rejected")
        .to_string()
}

/// Pops up to `n` requests (fresh records).
fn take(w: &mut Workload, n: usize) -> Vec<Request> {
    let mut out = Vec::new();
    while out.len() < n {
        let mut r = Request::default();
        let t = w.peek_time();
        if !w.pop_into(&mut r) {
            assert_eq!(t, None, "peek_time promised a request");
            break;
        }
        assert_eq!(t, Some(r.arrival), "peek_time is the next arrival");
        out.push(r);
    }
    out
}

/// Arrival, input and output lengths, prompt, output seed, tenant, class.
type Content = (Tick, u32, u32, Vec<Segment>, u64, u32, SloClass);

/// The workload-determined content of a request (everything but ids).
fn content(r: &Request) -> Content {
    (
        r.arrival,
        r.input_len,
        r.output_len,
        r.prompt.to_vec(),
        r.output_seed,
        r.tenant,
        r.slo_class,
    )
}

fn mean_cv(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    let v = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
    (m, v.sqrt() / m)
}

fn within_2pct(what: &str, got: f64, want: f64) {
    assert!(
        ((got - want) / want).abs() < 0.02,
        "{what}: got {got}, want {want} ± 2%"
    );
}

fn one_client(arrival: &str, input: &str, output: &str, n: u64) -> String {
    format!(
        "[workload]\naggregate_rate = 50.0\nnum_requests = {n}\n[[workload.clients]]\nid = \"c\"\narrival = {arrival}\ninput = {input}\noutput = {output}\n"
    )
}

#[test]
fn arrival_processes_through_the_stream_match_rate_and_cv() {
    let n = 100_000;
    for (arrival, cv) in [
        ("{ process = \"poisson\" }", 1.0),
        ("{ process = \"gamma\", cv = 3.0 }", 3.0),
        ("{ process = \"weibull\", cv = 0.7 }", 0.7),
        ("{ process = \"constant\" }", 0.0),
    ] {
        let cfg = one_client(
            arrival,
            "{ type = \"constant\", value = 10 }",
            "{ type = \"constant\", value = 10 }",
            n,
        );
        let mut w = build(&cfg, 42);
        let reqs = take(&mut w, n as usize);
        assert_eq!(reqs.len(), n as usize);
        let mut prev = 0;
        let iats: Vec<f64> = reqs
            .iter()
            .map(|r| {
                let d = r.arrival - prev;
                prev = r.arrival;
                d as f64
            })
            .collect();
        let (m, c) = mean_cv(&iats);
        within_2pct(&format!("{arrival} mean IAT"), m, 20_000.0);
        if cv > 0.0 {
            within_2pct(&format!("{arrival} cv"), c, cv);
        } else {
            assert!(iats.iter().all(|&d| d == 20_000.0), "constant spacing");
            assert_eq!(
                reqs[0].arrival, 20_000,
                "first arrival one interval after 0"
            );
        }
    }
}

#[test]
fn length_distributions_through_the_stream_match_mean_and_clamp() {
    let n = 100_000;
    let cfg = one_client(
        "{ process = \"poisson\" }",
        "{ type = \"gaussian\", mean = 1000, std_dev = 400, min = 800, max = 1500 }",
        "{ type = \"exponential\", mean = 250 }",
        n,
    );
    let reqs = take(&mut build(&cfg, 3), n as usize);
    assert!(reqs.iter().all(|r| (800..=1500).contains(&r.input_len)));
    assert!(reqs.iter().any(|r| r.input_len == 800) && reqs.iter().any(|r| r.input_len == 1500));
    let out: Vec<f64> = reqs.iter().map(|r| f64::from(r.output_len)).collect();
    within_2pct("exponential output mean", mean_cv(&out).0, 250.0);
    for r in &reqs {
        assert_eq!(r.prompt.iter().map(|s| s.len).sum::<u32>(), r.input_len);
    }
}

#[test]
fn same_seed_same_stream_other_seed_differs() {
    let cfg = one_client(
        "{ process = \"gamma\", cv = 2.0 }",
        "{ type = \"pareto_lognormal\", alpha = 2.0, xm = 50, mu = 5.0, sigma = 1.0, mix_weight = 0.3 }",
        "{ type = \"empirical\", bins = { \"10\" = 1.0, \"100\" = 2.0 } }",
        2000,
    );
    let a: Vec<_> = take(&mut build(&cfg, 7), 2000)
        .iter()
        .map(content)
        .collect();
    let b: Vec<_> = take(&mut build(&cfg, 7), 2000)
        .iter()
        .map(content)
        .collect();
    let c: Vec<_> = take(&mut build(&cfg, 8), 2000)
        .iter()
        .map(content)
        .collect();
    assert_eq!(a, b);
    assert_ne!(a, c);
}

/// The first `n` requests of `client` (content only; the tenant by name).
fn requests_of(w: &mut Workload, client: &str, n: usize) -> Vec<Content> {
    let idx = w.client_names().iter().position(|c| c == client).unwrap() as u32;
    let mut out = Vec::new();
    let mut r = Request::default();
    while out.len() < n {
        assert!(w.pop_into(&mut r), "{client}: only {} requests", out.len());
        if r.client == idx {
            assert_eq!(w.tenant_names()[r.tenant as usize], "acme");
            let mut c = content(&r);
            c.5 = 0; // the tenant index may differ; the name is checked above
            out.push(c);
        }
    }
    out
}

#[test]
fn changing_another_client_leaves_a_client_identical() {
    let a = r#"
        [[workload.clients]]
        id = "a"
        arrival = { process = "gamma", cv = 2.0 }
        input = { type = "gaussian", mean = 300, std_dev = 50, min = 1, max = 1000 }
        output = { type = "exponential", mean = 100 }
        prefix_group = "sys"
        prefix_length = 64
        tenant_id = "acme"
    "#;
    let b1 = r#"
        [[workload.clients]]
        id = "b"
        input = { type = "constant", value = 10 }
        output = { type = "constant", value = 10 }
    "#;
    let b2 = r#"
        [[workload.clients]]
        id = "b"
        arrival = { process = "weibull", cv = 0.3 }
        input = { type = "exponential", mean = 900 }
        output = { type = "constant", value = 3 }
        slo_class = "batch"
        tenant_id = "other"
        session = { max_rounds = 3 }
    "#;
    let c = r#"
        [[workload.clients]]
        id = "c"
        input = { type = "constant", value = 5 }
        output = { type = "constant", value = 5 }
        prefix_group = "zzz"
    "#;
    // "a" keeps 10 req/s in every variant: same share of the aggregate.
    let base = format!("[workload]\naggregate_rate = 20.0\n{a}{b1}");
    let changed = format!("[workload]\naggregate_rate = 20.0\n{b2}{a}");
    let added = format!("[workload]\naggregate_rate = 30.0\n{c}{a}{b1}");
    let n = 3000;
    let want = requests_of(&mut build(&base, 5), "a", n);
    assert_eq!(want, requests_of(&mut build(&changed, 5), "a", n));
    assert_eq!(want, requests_of(&mut build(&added, 5), "a", n));
}

fn hashes(r: &Request) -> Vec<u64> {
    let mut h = Vec::new();
    prompt_block_hashes(r, B, &mut h);
    h
}

#[test]
fn prefix_groups_share_leading_blocks_and_only_within_the_group() {
    let cfg = r#"
        [workload]
        aggregate_rate = 100.0
        num_requests = 400
        [[workload.clients]]
        id = "a"
        input = { type = "gaussian", mean = 200, std_dev = 50, min = 20, max = 400 }
        output = { type = "constant", value = 10 }
        prefix_group = "sys"
        prefix_length = 256
        [[workload.clients]]
        id = "b"
        input = { type = "constant", value = 100 }
        output = { type = "constant", value = 10 }
        prefix_group = "sys"
        [[workload.clients]]
        id = "c"
        input = { type = "constant", value = 100 }
        output = { type = "constant", value = 10 }
        prefix_group = "other"
        [[workload.clients]]
        id = "d"
        input = { type = "constant", value = 300 }
        output = { type = "constant", value = 10 }
    "#;
    let mut w = build(cfg, 9);
    let reqs = take(&mut w, 400);
    let of = |c: u32| reqs.iter().filter(move |r| r.client == c);
    let sys: Vec<Vec<u64>> = of(0).chain(of(1)).map(hashes).collect();
    let lead = &sys[0][..256 / B as usize];
    for h in &sys {
        assert_eq!(&h[..16], lead, "same group, same leading 16 blocks");
    }
    for r in of(0).chain(of(1)) {
        assert_eq!(
            r.prompt[0].len, 256,
            "the group's first client sets the length"
        );
        assert_eq!(r.input_len, 256 + r.prompt[1].len);
    }
    let other: Vec<Vec<u64>> = of(2).map(hashes).collect();
    // 50-token default prefix: 3 full shared blocks.
    assert!(other.iter().all(|h| h[..3] == other[0][..3]));
    for r in of(2) {
        assert_eq!(r.prompt[0].len, 50);
    }
    let all_sys: std::collections::HashSet<u64> = sys.iter().flatten().copied().collect();
    for h in other
        .iter()
        .chain(of(3).map(hashes).collect::<Vec<_>>().iter())
    {
        assert!(
            h.iter().all(|x| !all_sys.contains(x)),
            "groups share no block"
        );
    }
    // Two ungrouped requests share nothing either.
    let d: Vec<Vec<u64>> = of(3).map(hashes).collect();
    assert!(d[0].iter().all(|x| !d[1].contains(x)));
}

/// A minimal closed loop: every admitted request completes `service` ticks
/// after arrival (or is rejected when `reject(req)`), and the workload is
/// told. Returns the requests in arrival order with their finish times.
fn drive(
    w: &mut Workload,
    service: impl Fn(&Request) -> Tick,
    reject: impl Fn(&Request) -> bool,
) -> Vec<(Request, Tick, bool)> {
    let mut done: Vec<(Request, Tick, bool)> = Vec::new();
    let mut finishing: BinaryHeap<Reverse<(Tick, usize)>> = BinaryHeap::new();
    loop {
        let next_arrival = w.peek_time();
        let next_finish = finishing.peek().map(|r| r.0 .0);
        match (next_arrival, next_finish) {
            (None, None) => break,
            (Some(a), Some(f)) if f <= a => {}
            (Some(_), _) => {
                let mut r = Request::default();
                assert!(w.pop_into(&mut r));
                let rejected = reject(&r);
                let at = if rejected {
                    r.arrival
                } else {
                    r.arrival + service(&r)
                };
                done.push((r, at, !rejected));
                finishing.push(Reverse((at, done.len() - 1)));
                continue;
            }
            (None, Some(_)) => {}
        }
        let Reverse((at, i)) = finishing.pop().unwrap();
        let (r, _, completed) = &done[i];
        w.on_finished(r, at, *completed);
    }
    done
}

#[test]
fn session_rounds_follow_completion_plus_think_time_and_carry_context() {
    let cfg = r#"
        [workload]
        aggregate_rate = 5.0
        [[workload.clients]]
        id = "chat"
        windows = [{ start_us = 0, end_us = 300000000 }]
        input = { type = "gaussian", mean = 200, std_dev = 80, min = 1, max = 600 }
        output = { type = "exponential", mean = 150 }
        prefix_group = "sys"
        prefix_length = 100
        session = { max_rounds = 4, think_time_us = 2000000, context_growth = "accumulate" }
        [[workload.clients]]
        id = "plain"
        input = { type = "constant", value = 50 }
        output = { type = "constant", value = 50 }
        windows = [{ start_us = 0, end_us = 300000000 }]
    "#;
    let mut w = build(cfg, 11);
    let done = drive(&mut w, |r| 1000 + 50 * Tick::from(r.total_len()), |_| false);
    assert!(done.len() > 2000, "{}", done.len());
    assert!(done.windows(2).all(|p| p[0].0.arrival <= p[1].0.arrival));
    assert!(done.iter().enumerate().all(|(i, d)| d.0.id == i as u64));
    let mut by_session: std::collections::HashMap<u32, Vec<&(Request, Tick, bool)>> =
        Default::default();
    for d in &done {
        if let Some((s, _)) = d.0.session {
            by_session.entry(s).or_default().push(d);
        }
    }
    let mut checked = 0;
    for rounds in by_session.values() {
        assert!(rounds.len() <= 4);
        for (k, d) in rounds.iter().enumerate() {
            assert_eq!(d.0.session.unwrap().1, k as u32, "rounds in order");
        }
        for pair in rounds.windows(2) {
            let (prev, prev_done, _) = pair[0];
            let (next, _, _) = pair[1];
            // INV-5 style: never before the previous round finished + think time.
            assert_eq!(next.arrival, prev_done + 2_000_000);
            let mut stream = Vec::new();
            stream_block_hashes(prev, B, usize::MAX, &mut stream);
            let h = hashes(next);
            assert_eq!(
                h[..stream.len()],
                stream[..],
                "prompt starts with the previous stream"
            );
            assert!(next.input_len > prev.input_len + prev.output_len);
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked} round pairs checked");
    // Round 0 of different sessions shares the group prefix only.
    let firsts: Vec<&Request> = by_session.values().map(|r| &r[0].0).collect();
    assert_eq!(hashes(firsts[0])[..6], hashes(firsts[1])[..6]);
    assert_eq!(
        w.footprint().active_sessions,
        0,
        "finished sessions are forgotten"
    );
    assert_eq!(w.footprint().pending_rounds, 0);
}

#[test]
fn a_rejected_round_ends_its_session_and_none_growth_drops_context() {
    let cfg = r#"
        [workload]
        aggregate_rate = 1.0
        num_requests = 200
        [[workload.clients]]
        id = "s"
        input = { type = "constant", value = 40 }
        output = { type = "constant", value = 8 }
        session = { max_rounds = 5, think_time_us = 10, context_growth = "none" }
    "#;
    let mut w = build(cfg, 1);
    // Reject every round 2: sessions have at most 3 rounds.
    let done = drive(&mut w, |_| 100, |r| r.session.unwrap().1 == 2);
    for d in &done {
        let (_, round) = d.0.session.unwrap();
        assert!(round <= 2);
        assert_eq!(d.0.input_len, 40, "no context growth");
        assert_eq!(d.0.prompt.len(), 1);
    }
    assert!(done.iter().any(|d| d.0.session.unwrap().1 == 2));
    // Stream ended by the cap (rounds count), or not: either way it is bounded.
    assert!(done.len() <= 200);
    // Completions after the cap schedule nothing.
    assert_eq!(w.footprint().active_sessions, 0);
}

#[test]
fn num_requests_caps_rounds_and_new_arrivals_together() {
    let cfg = r#"
        [workload]
        aggregate_rate = 10.0
        num_requests = 50
        [[workload.clients]]
        id = "s"
        input = { type = "constant", value = 4 }
        output = { type = "constant", value = 4 }
        session = { max_rounds = 100, think_time_us = 0 }
    "#;
    let mut w = build(cfg, 1);
    assert_eq!(w.planned_requests(), Some(50));
    let done = drive(&mut w, |_| 1, |_| false);
    assert_eq!(done.len(), 50);
    assert!(done.iter().any(|d| d.0.session.unwrap().1 > 0));
    assert_eq!(w.peek_time(), None);
}

#[test]
fn activity_windows_gate_arrivals() {
    let cfg = r#"
        [workload]
        aggregate_rate = 1000.0
        [[workload.clients]]
        id = "w"
        input = { type = "constant", value = 4 }
        output = { type = "constant", value = 4 }
        windows = [{ start_us = 5000000, end_us = 6000000 }, { start_us = 1000000, end_us = 2000000 }]
    "#;
    let mut w = build(cfg, 4);
    assert_eq!(w.planned_requests(), None);
    let reqs = take(&mut w, 1_000_000);
    assert!(reqs
        .iter()
        .all(|r| (1_000_000..2_000_000).contains(&r.arrival)
            || (5_000_000..6_000_000).contains(&r.arrival)));
    // Two seconds of activity at 1000 req/s, and the stream then ends by itself.
    within_2pct("requests in windows", reqs.len() as f64, 2000.0);
    // A long gap costs nothing: the process restarts when a window opens.
    let cfg = r#"
        [workload]
        aggregate_rate = 1000000.0
        [[workload.clients]]
        id = "w"
        arrival = { process = "constant" }
        input = { type = "constant", value = 4 }
        output = { type = "constant", value = 4 }
        windows = [{ start_us = 0, end_us = 3 }, { start_us = 1000000000000000, end_us = 1000000000000003 }]
    "#;
    let arrivals: Vec<Tick> = take(&mut build(cfg, 4), 100)
        .iter()
        .map(|r| r.arrival)
        .collect();
    assert_eq!(
        arrivals,
        [1, 2, 1_000_000_000_000_001, 1_000_000_000_000_002]
    );
}

#[test]
fn distribution_mode_and_presets() {
    let mut w = Workload::new(&WorkloadConfig::default(), 42, Path::new(".")).unwrap();
    assert_eq!(w.client_names(), ["distribution"]);
    assert_eq!(w.tenant_names(), ["default"]);
    assert_eq!(w.planned_requests(), Some(100));
    let reqs = take(&mut w, 1000);
    assert_eq!(reqs.len(), 100);
    for (i, r) in reqs.iter().enumerate() {
        assert_eq!(r.arrival, (i as Tick + 1) * 1_000_000, "constant 1 req/s");
        assert!((2..=7000).contains(&r.input_len) && (2..=7000).contains(&r.output_len));
        assert_eq!(r.slo_class, SloClass::Standard);
    }
    let cfg = WorkloadConfig {
        preset: Some(Preset::Chatbot),
        prefix_tokens: Some(64),
        aggregate_rate: Some(10.0),
        num_requests: Some(500),
        ..WorkloadConfig::empty()
    };
    let mut w = Workload::new(&cfg, 42, Path::new(".")).unwrap();
    let reqs = take(&mut w, 1000);
    assert_eq!(reqs.len(), 500);
    for r in &reqs {
        assert_eq!(r.prompt[0].len, 64);
        assert!((2..=800).contains(&(r.input_len - 64)) && (1..=1024).contains(&r.output_len));
    }
    for p in Preset::ALL {
        assert_eq!(Preset::parse(p.name()), Some(p));
        let cfg = WorkloadConfig {
            preset: Some(p),
            ..WorkloadConfig::default()
        };
        Workload::new(&cfg, 1, Path::new(".")).unwrap();
    }
}

#[test]
fn pop_into_overwrites_a_recycled_record_and_reuses_its_prompt() {
    let mut w = build(
        &one_client(
            "{ process = \"poisson\" }",
            "{ type = \"constant\", value = 9 }",
            "{ type = \"constant\", value = 3 }",
            10,
        ),
        1,
    );
    let mut r = Request {
        prompt: Prompt::with_capacity(8),
        session: Some((7, 7)),
        slo_class: SloClass::Batch,
        ..Default::default()
    };
    r.prompt
        .extend_from_slice(&[Segment { seed: 1, len: 1 }; 5]);
    let ptr = r.prompt.as_ptr();
    assert!(w.pop_into(&mut r));
    assert_eq!(r.prompt.as_ptr(), ptr, "allocation reused");
    assert_eq!(r.prompt.len(), 1);
    assert_eq!(
        (r.id, r.input_len, r.output_len, r.session, r.slo_class),
        (0, 9, 3, None, SloClass::Standard)
    );
    assert!(w.pop_into(&mut r));
    assert_eq!(r.id, 1);
}

#[test]
fn configuration_errors_are_clear() {
    let e = build_err("[workload]\nprompt_tokens = 9000");
    assert!(
        e.contains("prompt_tokens 9000 lies outside [prompt_tokens_min 2, prompt_tokens_max 7000]"),
        "{e}"
    );
    let e = build_err("[workload]\naggregate_rate = -5.0");
    assert!(
        e.contains("aggregate_rate must be a finite number > 0") && e.contains("-5"),
        "{e}"
    );
    let e = build_err(&one_client(
        "{ process = \"poisson\" }",
        "{ type = \"gaussian\", mean = 10, std_dev = 1, min = 20, max = 30 }",
        "{ type = \"constant\", value = 3 }",
        10,
    ));
    assert!(
        e.contains("clients[0] (id \"c\"): input: gaussian mean 10 lies outside [min 20, max 30]"),
        "{e}"
    );
    // Unknown arrival process: a parse error listing the accepted values.
    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct File {
        workload: WorkloadConfig,
    }
    let e = toml::from_str::<File>(&one_client(
        "{ process = \"bursty\" }",
        "{ type = \"constant\", value = 3 }",
        "{ type = \"constant\", value = 3 }",
        10,
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("unknown variant `bursty`") && e.contains("poisson"),
        "{e}"
    );
    let e = build_err("[workload]\ntrace = \"t.csv\"\n[[workload.clients]]\nid='a'\ninput={type='constant',value=1}\noutput={type='constant',value=1}");
    assert!(e.contains("`trace` and `clients`"), "{e}");
    let e = build_err("[workload]\npreset = \"chatbot\"\noutput_tokens_max = 5");
    assert!(e.contains("`preset` and `output_tokens_max`"), "{e}");
    let e = build_err("[workload]\nprompt_tokens = 5\n[[workload.clients]]\nid='a'\ninput={type='constant',value=1}\noutput={type='constant',value=1}");
    assert!(e.contains("`clients` and `prompt_tokens`"), "{e}");
    let e = build_err("[workload]\nclients = []");
    assert!(e.contains("empty"), "{e}");
    let two = "[[workload.clients]]\nid='a'\ninput={type='constant',value=1}\noutput={type='constant',value=1}\n";
    let e = build_err(&format!("[workload]\n{two}{two}"));
    assert!(e.contains("duplicate id"), "{e}");
    let e = build_err(&format!("[workload]\n{two}rate_fraction = -1.0"));
    assert!(e.contains("rate_fraction"), "{e}");
    let e = build_err(&format!("[workload]\n{two}prefix_length = 5"));
    assert!(e.contains("without a prefix_group"), "{e}");
    let e = build_err(&format!("[workload]\n{two}slo_class = 'urgent'"));
    assert!(e.contains("unknown slo_class \"urgent\""), "{e}");
    let e = build_err(&format!(
        "[workload]\n{two}windows = [{{ start_us = 5, end_us = 5 }}]"
    ));
    assert!(e.contains("window [5, 5)"), "{e}");
    let e = build_err(&format!("[workload]\n{two}session = {{ max_rounds = 0 }}"));
    assert!(e.contains("max_rounds"), "{e}");
    let e = build_err(&format!(
        "[workload]\n{two}arrival = {{ process = 'poisson', cv = 2.0 }}"
    ));
    assert!(e.contains("cv applies only"), "{e}");
    let e = build_err(
        "[workload]\n[[workload.clients]]\nid='a'\ninput={type='constant',value=1}\noutput={type='constant',value=1}\nprefix_group='g'\nprefix_length=10\n[[workload.clients]]\nid='b'\ninput={type='constant',value=1}\noutput={type='constant',value=1}\nprefix_group='g'\nprefix_length=20",
    );
    assert!(
        e.contains("prefix_length 20 differs from the length 10 of prefix group \"g\""),
        "{e}"
    );
}

/// A trace file in the temp folder, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let p = std::env::temp_dir().join(format!("blis-wl-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        TempFile(p)
    }

    fn config(&self) -> (WorkloadConfig, PathBuf, String) {
        let name = self.0.file_name().unwrap().to_str().unwrap().to_string();
        let cfg = WorkloadConfig {
            trace: Some(name.clone()),
            ..WorkloadConfig::empty()
        };
        (cfg, self.0.parent().unwrap().to_path_buf(), name)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn trace_err(name: &str, text: &str) -> (String, String) {
    let f = TempFile::new(name, text);
    let (cfg, dir, file) = f.config();
    let e = Workload::new(&cfg, 1, &dir)
        .map(|_| ())
        .expect_err("should fail")
        .to_string();
    (e, file)
}

#[test]
fn a_csv_trace_replays_exactly() {
    let text = "\
arrival_us,input_tokens,output_tokens,prefix_group,prefix_length,slo_class,tenant_id,session_id
0,100,20,sys,64,critical,acme,
0,120,5,sys,,batch,,
1500,30,7,,,,beta,s1
2000,80,3,sys,64,,acme,
2500,60,9,,,,beta,s1
9000,10,4,,,sheddable,beta,s1
";
    let f = TempFile::new("replay.csv", text);
    let (cfg, dir, _) = f.config();
    let mut w = Workload::new(&cfg, 3, &dir).unwrap();
    assert_eq!(w.planned_requests(), Some(6));
    assert_eq!(w.tenant_names(), ["acme", "default", "beta"]);
    assert_eq!(w.client_names(), ["trace"]);
    let reqs = take(&mut w, 100);
    let got: Vec<(Tick, u32, u32)> = reqs
        .iter()
        .map(|r| (r.arrival, r.input_len, r.output_len))
        .collect();
    assert_eq!(
        got,
        [
            (0, 100, 20),
            (0, 120, 5),
            (1500, 30, 7),
            (2000, 80, 3),
            (2500, 60, 9),
            (9000, 10, 4)
        ]
    );
    let slo: Vec<SloClass> = reqs.iter().map(|r| r.slo_class).collect();
    use SloClass::*;
    assert_eq!(
        slo,
        [Critical, Batch, Standard, Standard, Standard, Sheddable]
    );
    let tenants: Vec<u32> = reqs.iter().map(|r| r.tenant).collect();
    assert_eq!(tenants, [0, 1, 2, 0, 2, 2]);
    for r in &reqs {
        assert_eq!(r.prompt.iter().map(|s| s.len).sum::<u32>(), r.input_len);
    }
    // Prefix group: 64 shared tokens (4 blocks); the default length is 50.
    assert_eq!(hashes(&reqs[0])[..4], hashes(&reqs[3])[..4]);
    assert_eq!(reqs[1].prompt[0].len, 50);
    assert_eq!(hashes(&reqs[0])[..3], hashes(&reqs[1])[..3]);
    // Session s1: round 1 (60 ≥ 30 + 7) carries round 0's stream; round 2
    // (10 < 60 + 9) does not fit the context and is a fresh prompt.
    assert_eq!(reqs[2].session, Some((0, 0)));
    assert_eq!(reqs[4].session, Some((0, 1)));
    assert_eq!(reqs[5].session, Some((0, 2)));
    assert_eq!(
        reqs[4].prompt[..2],
        [
            reqs[2].prompt[0],
            Segment {
                seed: reqs[2].output_seed,
                len: 7
            }
        ]
    );
    assert_eq!(reqs[5].prompt.len(), 1);
    assert!(reqs.iter().enumerate().all(|(i, r)| r.id == i as u64));
    assert!(w.take_error().is_none());
    // num_requests caps the replay.
    let (mut cfg, dir, _) = f.config();
    cfg.num_requests = Some(2);
    let mut w = Workload::new(&cfg, 3, &dir).unwrap();
    assert_eq!(w.planned_requests(), Some(2));
    assert_eq!(take(&mut w, 100).len(), 2);
}

/// Issue 33 defect 22: one session of 20,000 rounds, every round's prompt
/// carrying the whole context before it (round k: 2k + 1 segments), all
/// held at once as a replay holds rounds in flight. Copied per round the
/// prompts would be 4·10⁸ segments (6.4 GB, the allocation aborted); as
/// views of the session's log they share its storage: a new buffer only
/// when the log doubles, so the rounds' prompts use a handful of buffers.
#[test]
fn a_long_session_trace_shares_its_context_between_rounds() {
    const ROUNDS: u32 = 20_000;
    let mut text = String::from("arrival_us,input_tokens,output_tokens,session_id\n");
    for k in 0..ROUNDS {
        // Round k: 5 + 8k tokens = the previous prompt (5 + 8(k-1)), its
        // 3 output tokens and 5 new ones.
        text.push_str(&format!("{},{},3,s\n", u64::from(k) * 1000, 5 + 8 * k));
    }
    let f = TempFile::new("long-session.csv", &text);
    let (cfg, dir, _) = f.config();
    let mut w = Workload::new(&cfg, 1, &dir).unwrap();
    let reqs = take(&mut w, ROUNDS as usize + 1);
    assert_eq!(reqs.len(), ROUNDS as usize);
    let mut buffers = 1;
    for (k, r) in reqs.iter().enumerate() {
        assert_eq!(r.session, Some((0, k as u32)));
        assert_eq!(r.input_len, 5 + 8 * k as u32);
        assert_eq!(r.prompt.len(), 2 * k + 1, "round {k}");
        assert_eq!(r.prompt.iter().map(|s| s.len).sum::<u32>(), r.input_len);
        if k > 0 {
            let prev = &reqs[k - 1];
            // The previous round's stream, then 5 new tokens.
            assert_eq!(r.prompt[..2 * k - 1], prev.prompt[..]);
            assert_eq!(
                r.prompt[2 * k - 1],
                Segment {
                    seed: prev.output_seed,
                    len: 3
                }
            );
            assert_eq!(r.prompt[2 * k].len, 5);
            assert!(r.prompt.is_view());
            if !r.prompt.shares_storage_with(&prev.prompt) {
                buffers += 1;
            }
        }
    }
    // 40,001 segments in buffers of 4, 8, 16, … slots: 15 buffers.
    assert!(buffers <= 16, "{buffers} buffers");
    assert!(w.take_error().is_none());
}

#[test]
fn malformed_traces_name_file_line_and_column() {
    let (e, f) = trace_err(
        "bad1.csv",
        "arrival_us,input_tokens,output_tokens\n0,10,10\n5,abc,10\n",
    );
    assert_eq!(
        e,
        format!("{f}:3: column input_tokens: \"abc\" is not a non-negative integer")
    );
    let (e, f) = trace_err(
        "bad2.csv",
        "arrival_us,input_tokens,output_tokens\n0,10,10\n5,10\n",
    );
    assert_eq!(e, format!("{f}:3: the row has 2 fields, the header has 3"));
    let (e, f) = trace_err(
        "bad3.csv",
        "arrival_us,input_tokens,output_tokens\n10,10,10\n5,10,10\n",
    );
    assert!(
        e.starts_with(&format!(
            "{f}:3: column arrival_us: 5 is earlier than the previous row's 10"
        )),
        "{e}"
    );
    let (e, f) = trace_err("bad4.csv", "arrival_us,input_tokens,output_tokens,colour\n");
    assert!(
        e.starts_with(&format!("{f}:1: unknown column \"colour\"")),
        "{e}"
    );
    let (e, _) = trace_err("bad5.csv", "arrival_us,output_tokens\n1,1\n");
    assert!(e.contains("no input_tokens column"), "{e}");
    let (e, f) = trace_err(
        "bad6.csv",
        "arrival_us,input_tokens,output_tokens,slo_class\n1,1,1,gold\n",
    );
    assert!(
        e.starts_with(&format!("{f}:2: column slo_class: unknown class \"gold\"")),
        "{e}"
    );
    let (e, f) = trace_err("bad7.csv", "arrival_us,input_tokens,output_tokens\n1,0,1\n");
    assert_eq!(e, format!("{f}:2: column input_tokens: must be ≥ 1, got 0"));
    let (e, f) = trace_err(
        "bad8.csv",
        "arrival_us,input_tokens,output_tokens,prefix_group,prefix_length\n1,10,1,g,20\n",
    );
    assert!(
        e.starts_with(&format!(
            "{f}:2: column prefix_length: 20 exceeds input_tokens 10"
        )),
        "{e}"
    );
    let (e, f) = trace_err(
        "bad9.csv",
        "arrival_us,input_tokens,output_tokens\n-4,10,1\n",
    );
    assert!(e.starts_with(&format!("{f}:2: column arrival_us:")), "{e}");
    let (e, f) = trace_err("bad10.csv", "arrival_us,input_tokens,output_tokens\n");
    assert!(
        e.starts_with(&format!("{f}: ")) && e.contains("no request rows"),
        "{e}"
    );
    let cfg = WorkloadConfig {
        trace: Some("does-not-exist.csv".into()),
        ..WorkloadConfig::empty()
    };
    let e = Workload::new(&cfg, 1, Path::new("/nonexistent"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("does-not-exist.csv: "), "{e}");
    let cfg = WorkloadConfig {
        trace: Some("x.csv".into()),
        ..WorkloadConfig::default()
    };
    let e = Workload::new(&cfg, 1, Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`trace` and `aggregate_rate`"), "{e}");
}

#[test]
fn memory_stays_flat_over_a_million_requests() {
    let cfg = r#"
        [workload]
        aggregate_rate = 1000.0
        num_requests = 1000000
        [[workload.clients]]
        id = "a"
        arrival = { process = "constant" }
        input = { type = "constant", value = 100 }
        output = { type = "constant", value = 10 }
        prefix_group = "g"
        [[workload.clients]]
        id = "b"
        arrival = { process = "constant" }
        input = { type = "constant", value = 100 }
        output = { type = "constant", value = 10 }
        [[workload.clients]]
        id = "c"
        arrival = { process = "constant" }
        input = { type = "constant", value = 100 }
        output = { type = "constant", value = 10 }
    "#;
    let mut w = build(cfg, 1);
    let start = w.footprint();
    assert_eq!(start.client_heap, 3);
    let mut r = Request::default();
    let mut n = 0u64;
    let mut last = 0;
    while w.pop_into(&mut r) {
        assert!(r.arrival >= last);
        last = r.arrival;
        n += 1;
        if n % 100_000 == 0 {
            let f = w.footprint();
            assert!(
                f.client_heap <= 3 && f.client_heap_capacity == start.client_heap_capacity,
                "{f:?}"
            );
            assert_eq!((f.pending_rounds, f.active_sessions), (0, 0));
            assert!(
                r.prompt.capacity() <= 4,
                "the recycled prompt does not grow"
            );
        }
    }
    assert_eq!(n, 1_000_000);
    assert_eq!(w.yielded(), 1_000_000);
}

#[test]
fn convert_workload_spec_maps_fields_and_reports_the_rest() {
    let yaml = r#"
version: "1"
seed: 7
category: language
aggregate_rate: 40
horizon: 60000000
num_requests: 1000
clients:
  - id: chat
    tenant_id: acme
    slo_class: realtime
    model: llama
    rate_fraction: 0.6
    streaming: true
    arrival: { process: gamma, cv: 2.5 }
    input_distribution: { type: gaussian, params: { mean: 512, std_dev: 100, min: 10, max: 2048 } }
    output_distribution: { type: exponential, params: { mean: 200 } }
    prefix_group: sys
    prefix_length: 128
    network: { rtt_ms: 5, bandwidth_mbps: 100 }
    lifecycle: { windows: [ { start_us: 0, end_us: 30000000 } ] }
  - id: agent
    rate_fraction: 0.2
    arrival: { process: poisson, cv: 1.0 }
    input_distribution: { type: empirical, params: { "128": 0.5, "1024": 0.5 }, file: bins.json }
    output_distribution: { type: constant, params: { value: 64 } }
    prefix_group: sys
    prefix_length: 64
    reasoning:
      reason_ratio_distribution: { type: constant, params: { value: 30 } }
      multi_turn: { max_rounds: 3, think_time_us: 1000000, context_growth: accumulate }
cohorts:
  - id: users
    population: 3
    rate_fraction: 0.2
    arrival: { process: poisson }
    input_distribution: { type: pareto_lognormal, params: { alpha: 2, xm: 50, mu: 5, sigma: 1, mix_weight: 0.3 } }
    output_distribution: { type: constant, params: { value: 32 } }
    spike: { start_time_us: 1000000, duration_us: 5000000 }
servegen_data: { path: /data }
"#;
    let (toml_text, notes) = convert_workload_spec(yaml).unwrap();
    let joined = notes.join("\n");
    for needle in [
        "seed: 7",
        "horizon: 60000000",
        "category",
        "servegen_data",
        "model \"llama\"",
        "streaming = true",
        "network",
        "file \"bins.json\"",
        "reason_ratio_distribution",
        "cv has no effect on a poisson",
        "prefix_length 64 dropped",
        "think_time_us after the previous round completes",
        "version",
    ] {
        assert!(joined.contains(needle), "notes lack {needle:?}:\n{joined}");
    }
    assert!(toml_text.starts_with("[workload]\n"), "{toml_text}");
    assert!(
        toml_text.contains("\n[[workload.clients]]\nid = \"chat\"\n"),
        "{toml_text}"
    );
    assert!(
        toml_text.contains("arrival = { process = \"gamma\", cv = 2.5 }"),
        "{toml_text}"
    );
    assert!(
        toml_text.contains("bins = { \"128\" = 0.5, \"1024\" = 0.5 }"),
        "{toml_text}"
    );
    let cfg = parse(&toml_text);
    assert_eq!(cfg.aggregate_rate, Some(40.0));
    assert_eq!(cfg.num_requests, Some(1000));
    let clients = cfg.clients.as_ref().unwrap();
    let ids: Vec<&str> = clients.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["chat", "agent", "users-0", "users-1", "users-2"]);
    assert_eq!(clients[0].slo_class.as_deref(), Some("critical"));
    assert_eq!(
        clients[0].arrival,
        Some(ArrivalSpec {
            process: ArrivalProcess::Gamma,
            cv: Some(2.5)
        })
    );
    assert_eq!(clients[1].arrival.unwrap().cv, None);
    assert_eq!(clients[1].prefix_length, None);
    assert_eq!(clients[1].session.unwrap().max_rounds, 3);
    assert_eq!(clients[2].rate_fraction, Some(0.2 / 3.0));
    assert_eq!(
        clients[2].windows.as_ref().unwrap()[0],
        Window {
            start_us: 1_000_000,
            end_us: 6_000_000
        }
    );
    let mut w = Workload::new(&cfg, 1, Path::new(".")).unwrap();
    assert_eq!(take(&mut w, 10).len(), 10);
    // Strict like the reference: unknown keys and bad values are errors.
    let e = convert_workload_spec("aggregate_rate: 1\nclients: []\nbogus: 1\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("bogus"), "{e}");
    let e = convert_workload_spec(
        "aggregate_rate: 1\nclients:\n  - id: a\n    arrival: { process: bursty }\n    input_distribution: { type: constant, params: { value: 1 } }\n    output_distribution: { type: constant, params: { value: 1 } }\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("bursty") && e.contains("poisson"), "{e}");
    let e = convert_workload_spec("aggregate_rate: 1\nservegen_data: { path: x }\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("no clients"), "{e}");
}

#[test]
fn convert_turns_inference_perf_into_its_native_table() {
    let yaml = r#"
version: "2"
seed: 7
num_requests: 40
inference_perf:
  stages:
    - { rate: 100, duration: 100 }
    - { rate: 300, duration: 50 }
  shared_prefix:
    num_unique_system_prompts: 2
    num_users_per_system_prompt: 3
    system_prompt_len: 100
    question_len: 40
    output_len: 20
"#;
    let (toml_text, notes) = convert_workload_spec(yaml).unwrap();
    assert!(notes.iter().any(|n| n.starts_with("seed: 7")), "{notes:?}");
    let cfg = parse(&toml_text);
    assert_eq!(cfg.num_requests, Some(40));
    let ip = cfg.inference_perf.as_ref().expect("native table");
    assert_eq!(ip.stages.len(), 2);
    assert_eq!((ip.stages[1].rate, ip.stages[1].duration), (300.0, 50));
    assert_eq!(ip.shared_prefix.num_users_per_system_prompt, 3);
    let e = convert_workload_spec(&format!(
        "{yaml}cohorts:\n  - {{ id: c, population: 2, input_distribution: {{ type: constant, params: {{ value: 5 }} }}, output_distribution: {{ type: constant, params: {{ value: 5 }} }} }}\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("cohorts"), "{e}");
}

/// `adapter_mix` draws the `k`-th id with probability ∝ 1/k^s from its
/// own stream: the requests are otherwise those of the same client without
/// a mix; `adapter` gives every request one adapter; names are interned in
/// order of first mention.
#[test]
fn adapter_mix_is_zipf_and_changes_nothing_else() {
    let base = "[workload]\naggregate_rate = 50.0\nnum_requests = 40000\n[[workload.clients]]\nid = \"c\"\ninput = { type = \"constant\", value = 10 }\noutput = { type = \"exponential\", mean = 20 }\n";
    let other = "[[workload.clients]]\nid = \"one\"\nrate_fraction = 0.0001\ninput = { type = \"constant\", value = 10 }\noutput = { type = \"constant\", value = 1 }\n";
    let mixed = format!("{base}adapter_mix = {{ ids = [\"a\", \"b\", \"c\", \"d\"], zipf_s = 1.0 }}\n{other}adapter = \"b\"\n");
    let mut plain = build(&format!("{base}{other}"), 3);
    let mut w = build(&mixed, 3);
    assert_eq!(w.adapter_names(), ["a", "b", "c", "d"]);
    let got = take(&mut w, 40000);
    let mine: Vec<&Request> = got.iter().filter(|r| r.client == 0).collect();
    let want: Vec<Request> = take(&mut plain, 40000);
    let want: Vec<&Request> = want.iter().filter(|r| r.client == 0).collect();
    assert_eq!(mine.len(), want.len());
    for (a, b) in mine.iter().zip(&want) {
        assert_eq!(content(a), content(b));
    }
    let h: f64 = (1..=4).map(|k| 1.0 / k as f64).sum();
    for k in 0..4u32 {
        let n = mine.iter().filter(|r| r.adapter.get() == Some(k)).count() as f64;
        let p = 1.0 / (f64::from(k) + 1.0) / h;
        within_2pct(&format!("adapter {k}"), n / mine.len() as f64, p);
    }
    let others: Vec<&Request> = got.iter().filter(|r| r.client == 1).collect();
    assert!(others.iter().all(|r| r.adapter.get() == Some(1)));
    // zipf_s = 0 is uniform; both keys at once, or a bad exponent, are errors.
    let e = build_err(&format!(
        "{base}adapter = \"a\"\nadapter_mix = {{ ids = [\"a\"] }}\n"
    ));
    assert!(e.contains("adapter and adapter_mix are both given"), "{e}");
    let e = build_err(&format!(
        "{base}adapter_mix = {{ ids = [\"a\"], zipf_s = -1.0 }}\n"
    ));
    assert!(e.contains("zipf_s"), "{e}");
}

/// Every round of a multi-turn session runs with the adapter its first
/// round drew.
#[test]
fn session_rounds_keep_their_adapter() {
    let text = "[workload]\naggregate_rate = 50.0\nnum_requests = 3000\n[[workload.clients]]\nid = \"s\"\ninput = { type = \"constant\", value = 10 }\noutput = { type = \"constant\", value = 2 }\nsession = { max_rounds = 3 }\nadapter_mix = { ids = [\"a\", \"b\", \"c\"], zipf_s = 0.0 }\n";
    let mut w = build(text, 5);
    let mut first: std::collections::HashMap<u32, Option<u32>> = Default::default();
    let mut rounds = 0;
    while let Some(mut r) = Some(Request::default()) {
        if !w.pop_into(&mut r) {
            break;
        }
        let (sid, round) = r.session.unwrap();
        assert!(r.adapter.is_some());
        if round == 0 {
            first.insert(sid, r.adapter.get());
        } else {
            rounds += 1;
            assert_eq!(first[&sid], r.adapter.get(), "session {sid} round {round}");
        }
        r.generated = r.output_len;
        r.state = crate::request::RequestState::Completed;
        w.on_finished(&r, r.arrival + 1000, true);
    }
    assert!(rounds > 1000, "{rounds} later rounds");
}

//! inference-perf expansion checked exactly on small cases: request counts
//! per user and stage, users per system prompt, session timing, lengths and
//! prefixes, and bad input with its line.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::Path;

use serde::Deserialize;

use crate::engine::Tick;
use crate::request::Request;
use crate::workload::{Workload, WorkloadConfig};

fn parse(text: &str) -> Result<WorkloadConfig, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        workload: WorkloadConfig,
    }
    toml::from_str::<File>(text)
        .map(|f| f.workload)
        .map_err(|e| e.to_string())
}

fn build(text: &str, seed: u64) -> Workload {
    let cfg = parse(text).unwrap_or_else(|e| panic!("{e}"));
    Workload::new(&cfg, seed, Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

fn build_err(text: &str) -> String {
    let cfg = parse(text).unwrap_or_else(|e| panic!("{e}"));
    Workload::new(&cfg, 1, Path::new("."))
        .map(|_| ())
        .expect_err("should be rejected")
        .to_string()
}

/// A `[workload.inference_perf]` table.
fn table(stages: &str, p: u32, u: u32, lens: (u32, u32, u32), chat: bool) -> String {
    format!(
        "[workload]\n[workload.inference_perf]\nclient = \"reference\"\nstages = [{stages}]\n\
         [workload.inference_perf.shared_prefix]\n\
         num_unique_system_prompts = {p}\nnum_users_per_system_prompt = {u}\n\
         system_prompt_len = {}\nquestion_len = {}\noutput_len = {}\n\
         enable_multi_turn_chat = {chat}\n",
        lens.0, lens.1, lens.2
    )
}

/// Every request of an open-loop workload (no session reacts to completions).
fn all(w: &mut Workload) -> Vec<Request> {
    let mut out = Vec::new();
    loop {
        let mut r = Request::default();
        if !w.pop_into(&mut r) {
            return out;
        }
        out.push(r);
    }
}

/// Closed loop: each request completes `service` ticks after it arrives.
/// Returns (request, completion time) in arrival order.
fn drive(w: &mut Workload, service: Tick) -> Vec<(Request, Tick)> {
    let mut done: Vec<(Request, Tick)> = Vec::new();
    let mut finishing: BinaryHeap<Reverse<(Tick, usize)>> = BinaryHeap::new();
    loop {
        let next_finish = finishing.peek().map(|r| r.0 .0);
        match (w.peek_time(), next_finish) {
            (None, None) => return done,
            (Some(a), f) if f.is_none_or(|f| a < f) => {
                let mut r = Request::default();
                assert!(w.pop_into(&mut r));
                let at = r.arrival + service;
                done.push((r, at));
                finishing.push(Reverse((at, done.len() - 1)));
            }
            _ => {
                let Reverse((at, i)) = finishing.pop().unwrap();
                w.on_finished(&done[i].0, at, true);
            }
        }
    }
}

fn per_client(w: &Workload, reqs: &[&Request]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in reqs {
        *m.entry(w.client_names()[r.client as usize].clone())
            .or_insert(0) += 1;
    }
    m
}

#[test]
fn one_stage_sends_exactly_rate_times_duration_split_evenly_inside_the_stage() {
    // T = ⌊7.5 × 2⌋ = 15 over N = 2 × 3 users: 3, 3, 3, 2, 2, 2 (p-major).
    let mut w = build(
        &table("{ rate = 7.5, duration = 2 }", 2, 3, (100, 40, 20), false),
        7,
    );
    assert_eq!(
        w.client_names(),
        [
            "prompt-0-user-0",
            "prompt-0-user-1",
            "prompt-0-user-2",
            "prompt-1-user-0",
            "prompt-1-user-1",
            "prompt-1-user-2"
        ]
    );
    assert_eq!(w.tenant_names(), ["prompt-0", "prompt-1"]);
    assert_eq!(w.stages(), [(0, 2_000_000)]);
    let reqs = all(&mut w);
    assert_eq!(reqs.len(), 15);
    let counts: Vec<usize> = per_client(&w, &reqs.iter().collect::<Vec<_>>())
        .into_values()
        .collect();
    assert_eq!(counts, [3, 3, 3, 2, 2, 2]);
    for (i, r) in reqs.iter().enumerate() {
        assert!((0..2_000_000).contains(&r.arrival), "{}", r.arrival);
        assert_eq!(r.id, i as u64);
        assert_eq!((r.input_len, r.output_len), (140, 20));
        assert_eq!(r.prompt.len(), 2, "system prompt, question");
        assert_eq!((r.prompt[0].len, r.prompt[1].len), (100, 40));
        assert_eq!(
            r.tenant,
            r.client / 3,
            "users of prompt p are tenant prompt-p"
        );
        assert_eq!(r.session, None);
    }
    // Users of one prompt share its system prompt; other prompts do not.
    for a in &reqs {
        for b in &reqs {
            let same_group = a.client / 3 == b.client / 3;
            assert_eq!(a.prompt[0] == b.prompt[0], same_group);
            if a.id != b.id {
                assert_ne!(a.prompt[1], b.prompt[1], "questions are fresh");
            }
        }
    }
}

#[test]
fn each_stage_has_its_own_users_exact_count_and_window() {
    // Stage 0: ⌊10 × 3⌋ = 30 over 4 users (8, 8, 7, 7);
    // stage 1: ⌊4.9 × 2⌋ = 9 over 4 users (3, 2, 2, 2).
    let mut w = build(
        &table(
            "{ rate = 10, duration = 3 }, { rate = 4.9, duration = 2 }",
            1,
            4,
            (0, 5, 0),
            false,
        ),
        3,
    );
    assert_eq!(w.stages(), [(0, 3_000_000), (3_000_000, 5_000_000)]);
    assert_eq!(w.client_names().len(), 8);
    assert_eq!(w.client_names()[0], "stage-0-prompt-0-user-0");
    assert_eq!(w.client_names()[7], "stage-1-prompt-0-user-3");
    let reqs = all(&mut w);
    assert_eq!(reqs.len(), 39);
    let stage0: Vec<&Request> = reqs.iter().filter(|r| r.client < 4).collect();
    let stage1: Vec<&Request> = reqs.iter().filter(|r| r.client >= 4).collect();
    assert!(stage0.iter().all(|r| r.arrival < 3_000_000));
    assert!(stage1
        .iter()
        .all(|r| (3_000_000..5_000_000).contains(&r.arrival)));
    let c0: Vec<usize> = per_client(&w, &stage0).into_values().collect();
    let c1: Vec<usize> = per_client(&w, &stage1).into_values().collect();
    assert_eq!(c0, [8, 8, 7, 7]);
    assert_eq!(c1, [3, 2, 2, 2]);
    for r in &reqs {
        // No system prompt; zero lengths count as one token.
        assert_eq!((r.input_len, r.output_len, r.prompt.len()), (5, 1, 1));
    }
    assert!(reqs.windows(2).all(|p| p[0].arrival <= p[1].arrival));
}

#[test]
fn chat_users_are_closed_loop_sessions_with_think_time_n_over_rate() {
    // T = ⌊1 × 6⌋ = 6 over N = 2 users: 3 rounds each; think = 2/1 s.
    let mut w = build(
        &table("{ rate = 1, duration = 6 }", 1, 2, (30, 10, 4), true),
        11,
    );
    let done = drive(&mut w, 500_000);
    assert_eq!(done.len(), 6);
    let mut by_session: BTreeMap<u32, Vec<&(Request, Tick)>> = BTreeMap::new();
    for d in &done {
        by_session
            .entry(d.0.session.unwrap().0)
            .or_default()
            .push(d);
    }
    assert_eq!(by_session.len(), 2, "one session per user");
    for rounds in by_session.values() {
        assert_eq!(rounds.len(), 3);
        assert!(
            rounds[0].0.arrival < 6_000_000,
            "the session starts in its stage"
        );
        for (k, pair) in rounds.windows(2).enumerate() {
            let (prev, prev_done) = pair[0];
            let next = &pair[1].0;
            assert_eq!(next.session.unwrap().1, k as u32 + 1);
            assert_eq!(next.arrival, prev_done + 2_000_000, "completion + N/rate s");
            assert_eq!(next.client, prev.client);
        }
        for (r, _) in rounds.iter().copied() {
            // Every round: the system prompt and a fresh question, no history.
            assert_eq!((r.input_len, r.output_len), (40, 4));
            assert_eq!(r.prompt.len(), 2);
            assert_eq!(r.prompt[0], rounds[0].0.prompt[0]);
        }
    }
}

#[test]
fn chat_sessions_of_a_later_stage_start_in_that_stage_and_may_run_past_it() {
    // Stage 0: 30 rounds over 3 users (think 0.1 s); stage 1: 60 (think 0.15 s).
    let mut w = build(
        &table(
            "{ rate = 30, duration = 1 }, { rate = 20, duration = 3 }",
            3,
            1,
            (8, 8, 8),
            true,
        ),
        5,
    );
    let done = drive(&mut w, 4_000_000);
    assert_eq!(done.len(), 30 + 60);
    for (r, _) in &done {
        let stage = (r.client >= 3) as usize;
        let (start, end) = w.stages()[stage];
        if r.session.unwrap().1 == 0 {
            assert!((start..end).contains(&r.arrival), "{r:?}");
        } else {
            assert!(r.arrival >= end, "later rounds ignore the stage end");
        }
    }
}

#[test]
fn same_seed_same_requests_other_seed_differs() {
    let t = table("{ rate = 50, duration = 2 }", 3, 2, (10, 10, 10), false);
    let key = |w: &mut Workload| -> Vec<(Tick, u32, u64)> {
        all(w)
            .iter()
            .map(|r| (r.arrival, r.client, r.prompt[1].seed))
            .collect()
    };
    let a = key(&mut build(&t, 9));
    assert_eq!(a.len(), 100);
    assert_eq!(a, key(&mut build(&t, 9)));
    assert_ne!(a, key(&mut build(&t, 10)));
}

#[test]
fn num_requests_keeps_the_first_requests_by_arrival() {
    let t = table("{ rate = 20, duration = 1 }", 2, 2, (1, 1, 1), false);
    let full = all(&mut build(&t, 4));
    let capped = all(&mut build(
        &t.replace("[workload]\n", "[workload]\nnum_requests = 7\n"),
        4,
    ));
    assert_eq!(capped.len(), 7);
    for (a, b) in capped.iter().zip(&full) {
        assert_eq!((a.arrival, a.client), (b.arrival, b.client));
    }
}

#[test]
fn golden_experiment_17_expands_to_5100_rounds_of_547_tokens() {
    // The reference's golden experiment 17: 9 × 5 users, 2.5 then 6 req/s
    // for 600 s each, multi-turn chat. Rounds: 1500 + 3600.
    let mut w = build(
        &table(
            "{ rate = 2.5, duration = 600 }, { rate = 6.0, duration = 600 }",
            9,
            5,
            (100, 447, 248),
            true,
        ),
        42,
    );
    let done = drive(&mut w, 6_500_000);
    assert_eq!(done.len(), 5100);
    assert!(done
        .iter()
        .all(|(r, _)| (r.input_len, r.output_len) == (547, 248)));
    let rounds0 = done.iter().filter(|(r, _)| r.client < 45).count();
    assert_eq!(rounds0, 1500);
}

#[test]
fn bad_values_are_errors_with_their_line() {
    let t = |stages: &str| table(stages, 1, 1, (1, 1, 1), false);
    for (stages, what) in [
        ("{ rate = 1.0, duration = 0 }", "duration"),
        ("{ rate = -2.0, duration = 10 }", "rate"),
        ("{ rate = 0.0, duration = 10 }", "rate"),
        ("{ rate = nan, duration = 10 }", "rate"),
        ("{ rate = 1.0, duration = -5 }", "duration"),
    ] {
        let e = parse(&t(stages)).unwrap_err();
        assert!(e.contains("line 4"), "{e}");
        assert!(e.contains(&format!("a stage's {what}")), "{e}");
    }
    let e = parse(&table("{ rate = 1, duration = 1 }", 0, 1, (1, 1, 1), false)).unwrap_err();
    assert!(e.contains("line 6") && e.contains("[1, "), "{e}");
    let e = parse(&t("{ rate = 1, duration = 1, ramp = 2 }")).unwrap_err();
    assert!(e.contains("unknown field `ramp`"), "{e}");
    let e = parse(&t("{ rate = 1, duration = 1.5 }")).unwrap_err();
    assert!(e.contains("line 4"), "{e}");
}

#[test]
fn inconsistent_tables_are_clear_errors() {
    let e = build_err(&table(
        "{ rate = 0.4, duration = 2 }",
        1,
        1,
        (1, 1, 1),
        false,
    ));
    assert!(e.contains("stages[0]") && e.contains("no request"), "{e}");
    let e = build_err(&table("", 1, 1, (1, 1, 1), false));
    assert!(e.contains("at least one stage"), "{e}");
    let ok = table("{ rate = 1, duration = 1 }", 1, 1, (1, 1, 1), false);
    let e = build_err(&ok.replace("[workload]\n", "[workload]\naggregate_rate = 3.0\n"));
    assert!(e.contains("aggregate_rate"), "{e}");
    let e = build_err(&ok.replace("[workload]\n", "[workload]\npreset = \"chatbot\"\n"));
    assert!(e.contains("inference_perf") && e.contains("preset"), "{e}");
    let e = build_err(&ok.replace("[workload]\n", "[workload]\ntrace = \"t.csv\"\n"));
    assert!(e.contains("inference_perf") && e.contains("trace"), "{e}");
    let e = build_err(&table(
        "{ rate = 1, duration = 1 }",
        1000,
        1001,
        (1, 1, 1),
        false,
    ));
    assert!(e.contains("more than 1000000 users"), "{e}");
    let e = build_err(&table(
        "{ rate = 1, duration = 4611686018428 }",
        1,
        1,
        (1, 1, 1),
        false,
    ));
    assert!(e.contains("shorten"), "{e}");
}

use crate::workload::convert_inference_perf;

/// An inference-perf config as inference-perf runs it.
const INFERENCE_PERF_CONFIG: &str = r#"
load:
  type: constant
  interval: 15
  stages:
  - rate: 1
    duration: 30
  - rate: 2.5
    duration: 30
api:
  type: completion
  streaming: true
server:
  type: vllm
  model_name: HuggingFaceTB/SmolLM2-135M-Instruct
  base_url: http://0.0.0.0:8000
  ignore_eos: true
tokenizer:
  pretrained_model_name_or_path: HuggingFaceTB/SmolLM2-135M-Instruct
data:
  type: shared_prefix
  shared_prefix:
    num_groups: 10
    num_prompts_per_group: 4
    system_prompt_len: 100
    question_len: 50
    output_len: 30
report:
  request_lifecycle:
    per_stage: true
"#;

#[test]
fn convert_reads_an_inference_perf_config_and_lists_what_it_drops() {
    let (text, notes) = convert_inference_perf(INFERENCE_PERF_CONFIG).unwrap();
    let cfg = parse(&text).unwrap();
    let ip = cfg.inference_perf.expect("native table");
    assert_eq!(
        ip.stages
            .iter()
            .map(|s| (s.rate, s.duration))
            .collect::<Vec<_>>(),
        [(1.0, 30), (2.5, 30)]
    );
    let sp = ip.shared_prefix;
    assert_eq!(
        (
            sp.num_unique_system_prompts,
            sp.num_users_per_system_prompt,
            sp.system_prompt_len,
            sp.question_len,
            sp.output_len,
            sp.enable_multi_turn_chat
        ),
        (10, 4, 100, 50, 30, false)
    );
    for dropped in [
        "api",
        "server",
        "tokenizer",
        "report",
        "client",
        "load.request_timeout",
    ] {
        assert!(
            notes.iter().any(|n| n.starts_with(&format!("{dropped}:"))),
            "{dropped} not reported: {notes:?}"
        );
    }
    assert_eq!(notes.len(), 6, "{notes:?}");
    // A hand-written config does not say which release runs it: the newest.
    assert_eq!(ip.client.as_deref(), Some("inference-perf 0.7.0"));
    assert!(ip.interval.is_some());
}

#[test]
fn convert_reads_the_reference_example_spec() {
    // The reference's examples/inference-perf-shared-prefix.yaml (comments cut).
    let yaml = r#"
version: "1"
seed: 42
inference_perf:
  stages:
    - rate: 8.0
      duration: 600
    - rate: 20.0
      duration: 600
  shared_prefix:
    num_unique_system_prompts: 9
    num_users_per_system_prompt: 5
    system_prompt_len: 100
    question_len: 447
    output_len: 248
    enable_multi_turn_chat: false
"#;
    let (text, notes) = convert_inference_perf(yaml).unwrap();
    assert_eq!(notes.len(), 1, "only the seed: {notes:?}");
    let mut w = Workload::new(&parse(&text).unwrap(), 42, Path::new(".")).unwrap();
    assert_eq!(w.client_names().len(), 90, "2 stages × 9 prompts × 5 users");
    let reqs = all(&mut w);
    assert_eq!(reqs.len(), 4800 + 12_000);
    assert!(reqs
        .iter()
        .all(|r| r.input_len == 547 && r.output_len == 248));
}

#[test]
fn convert_errors_name_the_key_and_no_input_panics() {
    let bad = |from: &str, to: &str| {
        convert_inference_perf(&INFERENCE_PERF_CONFIG.replace(from, to))
            .unwrap_err()
            .to_string()
    };
    let e = bad("duration: 30\n  - rate: 2.5", "duration: 0\n  - rate: 2.5");
    assert!(e.contains("load.stages[0].duration"), "{e}");
    let e = bad("rate: 2.5", "rate: -2.5");
    assert!(e.contains("load.stages[1].rate"), "{e}");
    let e = bad("type: shared_prefix", "type: shareGPT");
    assert!(e.contains("data.type") && e.contains("shareGPT"), "{e}");
    let e = bad("num_groups: 10", "num_groups: 0");
    assert!(e.contains("data.shared_prefix.num_groups"), "{e}");
    let e = bad("type: constant", "type: concurrent");
    assert!(e.contains("load.type"), "{e}");
    for junk in [
        "",
        "[]",
        "42",
        "load: 3",
        "load: {stages: 3}\ndata: {type: shared_prefix}",
        "load: {stages: [{rate: .nan, duration: 1}]}\ndata: {type: shared_prefix, shared_prefix: {}}",
        "inference_perf: {stages: [{rate: 1e308, duration: 1e300}], shared_prefix: {num_unique_system_prompts: 1, num_users_per_system_prompt: 1}}",
        "inference_perf: {stages: [[1, 2]], shared_prefix: []}",
        "{{{{",
        "inference_perf: {stages: [{rate: 1, duration: 1}], shared_prefix: {num_unique_system_prompts: 1, num_users_per_system_prompt: 1, enable_multi_turn_chat: yes}}",
    ] {
        assert!(convert_inference_perf(junk).is_err(), "{junk:?} accepted");
    }
}

mod props {
    //! Invariants of the expansion over random tables and seeds.

    use proptest::prelude::*;

    use super::*;

    /// (rate, duration) stages, P, U, chat, seed.
    fn table_strategy() -> impl Strategy<Value = (Vec<(f64, u64)>, u32, u32, bool, u64)> {
        (
            prop::collection::vec((0.5f64..40.0, 1u64..6), 1..4),
            1u32..5,
            1u32..5,
            any::<bool>(),
            any::<u64>(),
        )
    }

    fn text(stages: &[(f64, u64)], p: u32, u: u32, chat: bool) -> String {
        let list: Vec<String> = stages
            .iter()
            .map(|(r, d)| format!("{{ rate = {r:?}, duration = {d} }}"))
            .collect();
        table(&list.join(", "), p, u, (7, 5, 3), chat)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn every_stage_sends_its_share_inside_its_window(t in table_strategy()) {
            let (stages, p, u, chat, seed) = t;
            let cfg = parse(&text(&stages, p, u, chat)).unwrap();
            let Ok(mut w) = Workload::new(&cfg, seed, Path::new(".")) else {
                // Only a stage with no request is refused.
                prop_assert!(stages.iter().any(|(r, d)| (r * *d as f64).floor() < 1.0));
                return Ok(());
            };
            let n = u64::from(p * u);
            let windows = w.stages().to_vec();
            prop_assert_eq!(windows.len(), stages.len());
            let done = drive(&mut w, 250_000);
            // Client names are unique and carry the stage (several stages).
            let stage_of_client = |c: u32| -> usize {
                let name = &w.client_names()[c as usize];
                if stages.len() == 1 {
                    0
                } else {
                    name.split('-').nth(1).unwrap().parse().unwrap()
                }
            };
            prop_assert!(done.windows(2).all(|d| d[0].0.arrival <= d[1].0.arrival));
            for (s, (rate, dur)) in stages.iter().enumerate() {
                let total = (rate * *dur as f64).floor() as u64;
                let mine: Vec<&(Request, Tick)> =
                    done.iter().filter(|d| stage_of_client(d.0.client) == s).collect();
                let mut per_user: BTreeMap<u32, u64> = BTreeMap::new();
                for (r, _) in &mine {
                    *per_user.entry(r.client).or_default() += 1;
                    // Users of prompt p are tenant p and share its prefix.
                    let name = &w.client_names()[r.client as usize];
                    let group: u32 = name.rsplit("-user-").nth(1).unwrap()
                        .rsplit('-').next().unwrap().parse().unwrap();
                    prop_assert_eq!(r.tenant, group);
                    prop_assert_eq!((r.input_len, r.output_len), (12, 3));
                }
                let (start, end) = windows[s];
                if chat {
                    // Each session sends at most its share; round 0 in the stage.
                    prop_assert!(mine.len() as u64 <= total);
                    for (r, _) in &mine {
                        if r.session.unwrap().1 == 0 {
                            prop_assert!((start..end).contains(&r.arrival));
                        }
                    }
                } else {
                    prop_assert_eq!(mine.len() as u64, total);
                    let mut shares: Vec<u64> = per_user.values().copied().collect();
                    shares.sort_unstable();
                    let (base, extra) = (total / n, total % n);
                    let mut want: Vec<u64> = (0..n)
                        .map(|k| base + u64::from(k < extra))
                        .filter(|&c| c > 0)
                        .collect();
                    want.sort_unstable();
                    prop_assert_eq!(shares, want);
                    for (r, _) in &mine {
                        prop_assert!((start..end).contains(&r.arrival));
                    }
                }
            }
            if chat {
                // Closed loop: round k+1 arrives think time after round k completed.
                let mut last: BTreeMap<u32, (u32, Tick, usize)> = BTreeMap::new();
                for (r, at) in &done {
                    let (sid, round) = r.session.unwrap();
                    let s = stage_of_client(r.client);
                    let think = (n as f64 / stages[s].0 * 1e6) as Tick;
                    if let Some(&(prev_round, prev_done, prev_stage)) = last.get(&sid) {
                        prop_assert_eq!(round, prev_round + 1);
                        prop_assert_eq!(prev_stage, s);
                        prop_assert_eq!(r.arrival, prev_done + think);
                    } else {
                        prop_assert_eq!(round, 0);
                    }
                    last.insert(sid, (round, *at, s));
                }
            }
        }

        #[test]
        fn convert_never_panics(yaml in "[a-z_:{}\\[\\], 0-9.\\n-]{0,120}") {
            let _ = convert_inference_perf(&yaml);
        }
    }
}

/// A table driven by a real client release.
fn client_table(client: &str, extra: &str, stages: &str, p: u32, u: u32, chat: bool) -> String {
    format!(
        "[workload]\n[workload.inference_perf]\nclient = \"{client}\"\n{extra}stages = [{stages}]\n\
         [workload.inference_perf.shared_prefix]\n\
         num_unique_system_prompts = {p}\nnum_users_per_system_prompt = {u}\n\
         system_prompt_len = 32\nquestion_len = 64\noutput_len = 8\n\
         enable_multi_turn_chat = {chat}\n"
    )
}

#[test]
fn a_real_client_sends_its_stage_open_loop_from_one_second_in_to_the_stage_end() {
    for seed in 1..20 {
        let mut w = build(
            &client_table(
                "inference-perf 0.2.0",
                "",
                "{ rate = 50.0, duration = 4 }",
                2,
                5,
                false,
            ),
            seed,
        );
        let reqs = all(&mut w);
        // ⌊50 · 4⌋ requests, none waiting for another's reply.
        assert_eq!(reqs.len(), 200);
        assert!(reqs.windows(2).all(|p| p[0].arrival <= p[1].arrival));
        assert!(reqs[0].arrival >= 1_000_000, "{}", reqs[0].arrival);
        // The timer's last request is due at the stage's end.
        assert_eq!(reqs[199].arrival, 5_000_000);
        // Request n sends prompt n mod 10: the same 10 prompts, whole, over and over.
        for (n, r) in reqs.iter().enumerate() {
            assert_eq!(r.prompt, reqs[n % 10].prompt, "request {n}");
            assert_eq!((r.input_len, r.output_len), (96, 8));
            assert_eq!(r.client, 0);
            assert_eq!(r.session, None);
        }
        let distinct: std::collections::HashSet<_> =
            reqs[..10].iter().map(|r| r.prompt[1].seed).collect();
        assert_eq!(distinct.len(), 10);
        // Two groups: each system prompt starts five of the ten prompts.
        let groups: BTreeMap<u32, usize> = reqs[..10].iter().fold(BTreeMap::new(), |mut m, r| {
            *m.entry(r.tenant).or_default() += 1;
            m
        });
        assert_eq!(groups.into_values().collect::<Vec<_>>(), [5, 5]);
        // Deterministic per seed.
        let again = all(&mut build(
            &client_table(
                "inference-perf 0.2.0",
                "",
                "{ rate = 50.0, duration = 4 }",
                2,
                5,
                false,
            ),
            seed,
        ));
        assert!(again
            .iter()
            .zip(&reqs)
            .all(|(a, b)| (a.arrival, &a.prompt, a.output_seed)
                == (b.arrival, &b.prompt, b.output_seed)));
    }
}

#[test]
fn worker_slots_hold_requests_back_until_one_finishes() {
    // 1 worker × 3 requests at once: 3 go out on their times, the 4th only
    // when one of them finishes — at the later of that and its own time.
    let text = client_table(
        "0.2.0",
        "num_workers = 1\nworker_max_concurrency = 3\n",
        "{ rate = 2.0, duration = 5 }",
        1,
        1,
        false,
    );
    let mut w = build(&text, 7);
    let first = all(&mut w);
    assert_eq!(first.len(), 3);
    assert!(w.peek_time().is_none());
    let late = 60_000_000;
    w.on_finished(&first[0], late, true);
    assert_eq!(w.peek_time(), Some(late));
    let r = all(&mut w);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].arrival, late);
}

#[test]
fn the_next_stage_starts_after_the_last_request_finished_the_poll_and_the_interval() {
    let text = client_table(
        "inference-perf 0.7.0",
        "interval = 2.5\n",
        "{ rate = 2.0, duration = 1 }, { rate = 3.0, duration = 1 }",
        1,
        2,
        false,
    );
    let mut w = build(&text, 3);
    let s0 = all(&mut w);
    assert_eq!(s0.len(), 2);
    assert!(s0.iter().all(|r| r.client == 0));
    // Open loop within a stage, but the next stage waits for this one.
    assert!(w.peek_time().is_none());
    w.on_finished(&s0[0], 5_300_000, true);
    assert!(w.peek_time().is_none());
    w.on_finished(&s0[1], 5_300_001, false);
    // Stage 0 began at 0; the client polls each second: it notices at 6 s,
    // sleeps 2.5 s, and stage 1's timer starts 1 s later: 9.5 s to 10.5 s.
    let s1 = all(&mut w);
    assert_eq!(s1.len(), 3);
    assert!(s1.iter().all(|r| r.client == 1));
    assert!(s1[0].arrival >= 9_500_000, "{}", s1[0].arrival);
    assert_eq!(s1[2].arrival, 10_500_000);
    assert_eq!(w.client_stages(), Some(2));
    assert_eq!(w.client_timeout_us(), Some(300_000_000));
}

#[test]
fn chat_rounds_of_one_session_wait_for_the_round_before_and_carry_its_context() {
    // 0.7.0: 2 sessions; request n is a round of session n mod 2.
    let text = client_table(
        "inference-perf 0.7.0",
        "",
        "{ rate = 4.0, duration = 1 }",
        1,
        2,
        true,
    );
    let mut w = build(&text, 11);
    let r = all(&mut w);
    // Only each session's first round goes out; the others wait.
    assert_eq!(r.len(), 2);
    let (a, b) = (&r[0], &r[1]);
    assert_ne!(a.session.unwrap().0, b.session.unwrap().0);
    // Round 0: the system prompt (the context), then the whole prompt.
    assert_eq!(a.prompt.len(), 3);
    assert_eq!(a.prompt[0], a.prompt[1]);
    assert_eq!(a.input_len, 32 + 32 + 64);
    let mut done = a.clone();
    done.generated = 8;
    w.on_finished(&done, 7_000_000, true);
    let next = all(&mut w);
    assert_eq!(next.len(), 1);
    let n = &next[0];
    assert_eq!(n.arrival, 7_000_000);
    assert_eq!(n.session, Some((a.session.unwrap().0, 1)));
    // Round 1: round 0's prompt, its answer, then the prompt again.
    assert_eq!(&n.prompt[..3], &a.prompt[..]);
    assert_eq!(n.prompt[3].seed, a.output_seed);
    assert_eq!(n.prompt[3].len, 8);
    assert_eq!(&n.prompt[4..], &a.prompt[1..]);
    assert_eq!(n.input_len, 128 + 8 + 96);
    // A failed round leaves the context as it was.
    w.on_finished(b, 8_000_000, false);
    let again = all(&mut w);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].prompt, b.prompt);
}

#[test]
fn client_settings_are_checked_against_the_client() {
    // One stage, one prompt: only the client, its settings and chat vary.
    let one = |client: &str, settings: &str, chat: bool| {
        client_table(client, settings, "{ rate = 1.0, duration = 5 }", 1, 1, chat)
    };
    let e = build_err(&one("0.2.0", "", true));
    assert!(e.contains("0.2.0 has no multi-turn chat"), "{e}");
    let e = build_err(&one("reference", "num_workers = 4\n", false));
    assert!(
        e.contains("inference_perf.num_workers") && e.contains("reference"),
        "{e}"
    );
    let e = build_err(&one("0.5.0", "", false));
    assert!(e.contains("0.1.1, 0.2.0, 0.3.0, 0.4.0, 0.7.0"), "{e}");
    let e = parse(&one("0.2.0", "request_timeout = 0\n", false)).unwrap_err();
    assert!(e.contains("line 4") && e.contains("seconds"), "{e}");
}

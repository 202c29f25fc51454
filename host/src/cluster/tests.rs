//! Cluster-level behaviour through the library: conservation (INV-1) over
//! random configurations, determinism (INV-6), signal freshness (INV-7),
//! cluster-before-instance ordering, pending-request accounting and regret.

use std::path::Path;

use proptest::prelude::*;
use serde_json::Value;

use crate::cluster::{Cluster, Provide, SnapshotProvider};
use crate::config::{self, RunFile, Source};
use crate::engine::{EventQueue, Tick};
use crate::instance::latency::LinearModel;
use crate::instance::{Instance, InstanceConfig, InstanceObserver, LatencyModel};
use crate::metrics::report;
use crate::plugins::Registry;
use crate::request::{Request, RequestStore, Segment, Slot};

/// A scratch directory under the target folder, unique per test.
pub(super) fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("blis-cluster-tests-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Run a run file given as text (relative paths against `dir`); returns the
/// report and the outcome's raw counts.
fn run_text(text: &str, dir: &Path) -> Value {
    run_text_with(text, dir, |_| {})
}

/// [`run_text`] with the cluster's setup adjusted by `adjust` (what the
/// cluster provides the policies: prompt hashes, snapshot reads).
pub(super) fn run_text_with(
    text: &str,
    dir: &Path,
    adjust: impl FnOnce(&mut crate::cluster::ClusterSetup),
) -> Value {
    let source = Source {
        name: "test.toml".into(),
        base_dir: dir.to_path_buf(),
        text: text.to_string(),
    };
    let run: RunFile = config::parse(&source).unwrap_or_else(|e| panic!("{e}"));
    let mut reg = Registry::standard();
    let mut built = config::build(&run, dir, &mut reg, true).unwrap_or_else(|e| panic!("{e}"));
    adjust(&mut built.setup);
    let fw = built.fitness_weights.clone();
    let mut outcome = Cluster::new(built.setup)
        .run(|_, _| {})
        .unwrap_or_else(|e| panic!("{e}"));
    for o in built.outputs {
        o.commit().unwrap();
    }
    report::build(&mut outcome, fw.as_ref())
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// INV-1 at every level: the pipeline and each instance.
fn check_conservation(r: &Value) {
    let c = &r["cluster"];
    assert_eq!(
        u(c, "num_requests"),
        u(c, "injected_requests") + u(c, "rejected_requests") + u(c, "still_in_pipeline"),
        "pipeline conservation: {c}"
    );
    for b in std::iter::once(c).chain(r["instances"].as_array().unwrap()) {
        assert_eq!(
            u(b, "injected_requests"),
            u(b, "completed_requests")
                + u(b, "still_queued")
                + u(b, "still_running")
                + u(b, "dropped_unservable"),
            "INV-1: {b}"
        );
    }
    let inst = r["instances"].as_array().unwrap();
    let sum = |k: &str| inst.iter().map(|b| u(b, k)).sum::<u64>();
    for k in [
        "completed_requests",
        "injected_requests",
        "still_queued",
        "still_running",
        "dropped_unservable",
    ] {
        assert_eq!(sum(k), u(c, k), "cluster {k} is the sum over instances");
    }
}

fn linear_model_section() -> &'static str {
    "[model]\nlatency_model = \"linear\"\nalpha = [100.0, 0.5, 20.0]\nbeta = [2000.0, 5.0, 30.0]\n"
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn conservation_holds_for_random_configs_and_horizons(
        seed in 0u64..1000,
        count in 1u32..5,
        policy in prop::sample::select(vec!["round-robin", "least-loaded", "always-busiest", "prefix-affinity", "weighted"]),
        admission in prop::sample::select(vec!["always-admit", "token-bucket", "reject-all", "tier-shed", "gaie-legacy"]),
        adm_lat in prop::sample::select(vec![0i64, 500, 3000]),
        rt_lat in prop::sample::select(vec![0i64, 700]),
        blocks in prop::sample::select(vec![40u64, 200, 100_000]),
        horizon in prop::option::of(1_000i64..3_000_000),
        rate in prop::sample::select(vec![5.0f64, 50.0, 500.0]),
        scheduler in prop::sample::select(vec!["fcfs", "priority-fcfs", "sjf", "reverse-priority"]),
    ) {
        let dir = scratch(&format!("inv1-{seed}-{count}"));
        let horizon = horizon.map(|h| format!("horizon_us = {h}\n")).unwrap_or_default();
        let params = if admission == "token-bucket" { "[admission.params]\ncapacity = 3000.0\nrefill_rate = 20000.0\n" } else { "" };
        let text = format!(
            "seed = {seed}\n{horizon}{}\n[instance]\ncount = {count}\ntotal_kv_blocks = {blocks}\nmax_num_seqs = 8\nscheduler = \"{scheduler}\"\n\n\
             [workload]\naggregate_rate = {rate}\nnum_requests = 60\nprompt_tokens = 200\nprompt_tokens_stdev = 150\nprompt_tokens_min = 2\nprompt_tokens_max = 600\n\
             output_tokens = 40\noutput_tokens_stdev = 30\noutput_tokens_min = 1\noutput_tokens_max = 200\nprefix_tokens = 64\n\n\
             [admission]\npolicy = \"{admission}\"\nlatency_us = {adm_lat}\n{params}\n[routing]\npolicy = \"{policy}\"\nlatency_us = {rt_lat}\n",
            linear_model_section()
        );
        let r = run_text(&text, &dir);
        check_conservation(&r);
        if horizon.is_empty() {
            let c = &r["cluster"];
            prop_assert_eq!(u(c, "num_requests"), 60);
            prop_assert_eq!(u(c, "still_in_pipeline") + u(c, "still_queued") + u(c, "still_running"), 0, "everything finishes without a horizon: {}", c);
        }
    }
}

#[test]
fn same_seed_same_report_different_seed_different_report() {
    let dir = scratch("inv6");
    let text = |seed: u64| {
        format!(
            "seed = {seed}\n{}\n[instance]\ncount = 3\n[workload]\naggregate_rate = 80.0\nnum_requests = 200\n\
             prompt_tokens = 300\noutput_tokens = 50\nprefix_tokens = 32\n[routing]\npolicy = \"weighted\"\n",
            linear_model_section()
        )
    };
    let a = serde_json::to_string_pretty(&run_text(&text(7), &dir)).unwrap();
    let b = serde_json::to_string_pretty(&run_text(&text(7), &dir)).unwrap();
    let c = serde_json::to_string_pretty(&run_text(&text(8), &dir)).unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
}

/// Writes `rows` (arrival_us, input, output) as a trace CSV.
fn write_trace(dir: &Path, rows: &[(i64, u32, u32)]) {
    let mut s = String::from("arrival_us,input_tokens,output_tokens\n");
    for (a, i, o) in rows {
        s.push_str(&format!("{a},{i},{o}\n"));
    }
    std::fs::write(dir.join("trace.csv"), s).unwrap();
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn pending_requests_prevent_pile_on_at_a_burst() {
    let dir = scratch("burst");
    write_trace(&dir, &[(1000, 100, 10); 10]);
    let text = format!(
        "{}\n[instance]\ncount = 4\n[workload]\ntrace = \"trace.csv\"\n[routing]\npolicy = \"least-loaded\"\n[output]\nresults_path = \"{}\"\n",
        linear_model_section(),
        dir.join("results.jsonl").display()
    );
    let r = run_text(&text, &dir);
    check_conservation(&r);
    let mut per = [0u32; 4];
    for rec in read_lines(&dir.join("results.jsonl")) {
        per[rec["instance"].as_u64().unwrap() as usize] += 1;
    }
    // All ten decisions happen at the same tick, before any instance event:
    // only the pending counts (Tier 1) spread them.
    assert_eq!(per, [3, 3, 2, 2]);
}

#[test]
fn cluster_events_run_before_instance_events_at_the_same_tick() {
    let dir = scratch("order");
    // Step time is exactly 1000 µs (beta0 only), no alpha delay. A arrives at 0
    // (L = 16, N = 2): steps 0→1000 (prefill) and 1000→2000 (decode, done).
    // B arrives at 2000, the tick of A's final Step event: the routing
    // decision must still see A in the batch.
    write_trace(&dir, &[(0, 16, 2), (2000, 16, 2)]);
    let text = format!(
        "[model]\nlatency_model = \"linear\"\nalpha = [0.0, 0.0, 0.0]\nbeta = [1000.0, 0.0, 0.0]\n\
         [instance]\ncount = 1\n[workload]\ntrace = \"trace.csv\"\n[routing]\npolicy = \"round-robin\"\n\
         [output]\ntrace_path = \"{}\"\n",
        dir.join("trace.jsonl").display()
    );
    let r = run_text(&text, &dir);
    check_conservation(&r);
    let decisions: Vec<Value> = read_lines(&dir.join("trace.jsonl"))
        .into_iter()
        .filter(|d| d["kind"] == "routing")
        .collect();
    assert_eq!(decisions.len(), 2);
    assert_eq!(decisions[1]["time_us"], 2000);
    assert_eq!(
        decisions[1]["candidates"][0]["batch_size"], 1,
        "{}",
        decisions[1]
    );
    assert_eq!(r["cluster"]["e2e_max_ms"], 2.0);
}

#[test]
fn weighted_routing_has_zero_regret_round_robin_does_not() {
    let dir = scratch("regret");
    let mk = |policy: &str, trace: &str| {
        format!(
            "seed = 3\n{}\n[instance]\ncount = 4\n[workload]\naggregate_rate = 400.0\nnum_requests = 300\n\
             prompt_tokens = 400\nprompt_tokens_stdev = 390\nprompt_tokens_min = 2\nprompt_tokens_max = 2000\n\
             output_tokens = 100\noutput_tokens_stdev = 99\noutput_tokens_min = 1\noutput_tokens_max = 1000\n\
             [routing]\npolicy = \"{policy}\"\n[output]\ntrace_path = \"{}\"\n",
            linear_model_section(),
            dir.join(trace).display()
        )
    };
    let r = run_text(&mk("weighted", "w.jsonl"), &dir);
    assert_eq!(r["cluster"]["max_regret"], 0.0);
    let w = read_lines(&dir.join("w.jsonl"));
    assert_eq!(w.len(), 300);
    assert!(w
        .iter()
        .all(|d| d["regret"] == 0.0 && d["chosen"] == d["candidates"][0]["instance"]));
    let r = run_text(&mk("round-robin", "rr.jsonl"), &dir);
    let rr = read_lines(&dir.join("rr.jsonl"));
    assert!(r["cluster"]["max_regret"].as_f64().unwrap() > 0.0);
    assert!(rr.iter().any(|d| d["regret"].as_f64().unwrap() > 0.0));
    assert!(rr.iter().all(|d| d["regret"].as_f64().unwrap() >= 0.0));
}

struct Nothing;
impl InstanceObserver for Nothing {
    fn first_token(&mut self, _: u32, _: &Request, _: Tick) {}
    fn token_gap(&mut self, _: u32, _: Tick) {}
    fn completed(&mut self, _: u32, _: Slot, _: &Request, _: Tick) {}
    fn dropped(&mut self, _: u32, _: Slot, _: &Request, _: Tick) {}
    fn preempted(&mut self, _: u32, _: &Request, _: Tick) {}
}

#[test]
fn tier3_signals_come_from_the_last_refresh() {
    let cfg = InstanceConfig {
        block_size: 16,
        total_kv_blocks: 100,
        ..InstanceConfig::default()
    };
    let lat = LatencyModel::Linear(LinearModel {
        alpha: [0.0; 3],
        beta: [1000.0, 0.0, 0.0],
    });
    let mut inst = vec![Instance::new(0, cfg, lat)];
    let mut store = RequestStore::new();
    let mut q = EventQueue::new();
    let mut snaps = SnapshotProvider::new(1, 10_000);

    // First snapshot at t=0 refreshes: empty cache.
    let s0 = snaps.build(0, &inst, &[0])[0];
    assert_eq!(s0.kv_utilization, 0.0);

    // A request of 160 tokens takes 10 blocks once admitted.
    let slot = store.insert_with(|r| {
        r.id = 0;
        r.input_len = 160;
        r.output_len = 4;
        r.prompt = vec![Segment { seed: 1, len: 160 }].into();
        r.instance = 0;
    });
    let mut h = Vec::new();
    crate::request::prompt_block_hashes(&store[slot], 16, &mut h);
    store[slot].prompt_hashes = h;
    inst[0].on_queued(0, slot, &mut store, &mut q, &mut Nothing);
    let ev = q.pop().unwrap();
    assert_eq!(ev.time, 0);
    inst[0].on_step(0, &mut store, &mut q, &mut Nothing);
    snaps.touched(0); // (as the cluster does after an instance event)
    assert!(inst[0].kv_utilization() > 0.0);

    // Before the interval: Tier 3 is stale, Tier 2 is live.
    let s1 = snaps.build(5_000, &inst, &[2])[0];
    assert_eq!(
        s1.kv_utilization, 0.0,
        "Tier 3 must come from the refresh at t=0"
    );
    assert_eq!(s1.free_kv_blocks, s0.free_kv_blocks);
    assert_eq!(s1.batch_size, 1, "Tier 2 is read live");
    assert_eq!(s1.pending_requests, 2, "Tier 1 is synchronous");
    // At the interval: refreshed.
    let s2 = snaps.build(10_000, &inst, &[0])[0];
    assert_eq!(s2.kv_utilization, inst[0].kv_utilization());
    assert!(s2.kv_utilization > 0.0);
}

/// Fidelity: the reference's golden case 1 (core-engine.md Appendix A.5:
/// llama-3.1-8b on H100, calibrated linear coefficients, 300 requests at
/// 10 req/s with a 284-token shared prefix, 7463 KV blocks). blis's workload
/// RNG differs from the reference's, so the requests are different draws from
/// the same distributions: compare aggregates averaged over five seeds.
/// Reference: TTFT mean 14.329 ms, ITL mean 9.263 ms, E2E mean 2022.57 ms
/// (which double-counts the last ITL sample: 2013.3 ms on one timeline),
/// 64,740 output tokens without first tokens (65,040 with) in 31.667 s.
#[test]
fn fidelity_reference_golden_case_1() {
    let dir = scratch("golden1");
    let text = |seed: u64| {
        format!(
            "seed = {seed}\n[model]\nname = \"meta-llama/llama-3.1-8b-instruct\"\nhardware = \"H100\"\ntp = 1\nlatency_model = \"linear\"\n\
             alpha = [232.46191091038054, 1.752360364195244, 3357.4400353290152]\n\
             beta = [5752.705191348184, 17.25086436834028, 5.999143920128404]\n\
             [instance]\ncount = 1\ntotal_kv_blocks = 7463\n\
             [workload]\naggregate_rate = 10.0\nnum_requests = 300\nprefix_tokens = 284\n\
             prompt_tokens = 70\nprompt_tokens_stdev = 35\nprompt_tokens_min = 2\nprompt_tokens_max = 200\n\
             output_tokens = 215\noutput_tokens_stdev = 80\noutput_tokens_min = 1\noutput_tokens_max = 512\n"
        )
    };
    let (mut ttft, mut itl, mut e2e, mut tps) = (0.0, 0.0, 0.0, 0.0);
    for seed in 1..=5 {
        let r = run_text(&text(seed), &dir);
        let c = &r["cluster"];
        assert_eq!(u(c, "completed_requests"), 300);
        assert_eq!(u(c, "preemption_count"), 0);
        ttft += c["ttft_mean_ms"].as_f64().unwrap() / 5.0;
        itl += c["itl_mean_ms"].as_f64().unwrap() / 5.0;
        e2e += c["e2e_mean_ms"].as_f64().unwrap() / 5.0;
        tps += c["tokens_per_sec"].as_f64().unwrap() / 5.0;
    }
    let close = |got: f64, want: f64, tol: f64, what: &str| {
        assert!(
            ((got - want) / want).abs() <= tol,
            "{what}: blis {got:.4} vs reference {want:.4} (tolerance {:.0}%)",
            tol * 100.0
        );
    };
    close(ttft, 14.329, 0.02, "TTFT mean ms");
    close(itl, 9.263, 0.01, "ITL mean ms");
    close(e2e, 2022.57 - 9.263, 0.03, "E2E mean ms");
    close(tps, 65_040.0 / 31.667365, 0.03, "output tokens/s");
}

/// Sessions end to end: later rounds carry the earlier rounds' prompt and
/// output as prefix, so with prefix-affinity routing they land on the
/// instance that served the session and hit its KV cache far more often than
/// with round-robin.
#[test]
fn session_rounds_hit_the_cache_of_the_instance_that_served_them() {
    let dir = scratch("sessions");
    let text = |policy: &str| {
        format!(
            "seed = 2\n{}\n[instance]\ncount = 4\n[workload]\naggregate_rate = 20.0\nnum_requests = 400\n\
             [[workload.clients]]\nid = \"chat\"\ninput = {{ type = \"gaussian\", mean = 200, std_dev = 50, min = 20, max = 400 }}\n\
             output = {{ type = \"gaussian\", mean = 60, std_dev = 20, min = 5, max = 200 }}\n\
             session = {{ max_rounds = 4, think_time_us = 200000, context_growth = \"accumulate\" }}\n\
             [routing]\n{policy}\n[output]\nresults_path = \"{}\"\n",
            linear_model_section(),
            dir.join(format!("{}.jsonl", policy.len())).display()
        )
    };
    let affinity = run_text(
        &text(
            "policy = \"weighted\"\n[[routing.scorers]]\nname = \"prefix-affinity\"\nweight = 1.0",
        ),
        &dir,
    );
    let rr = run_text(&text("policy = \"round-robin\""), &dir);
    check_conservation(&affinity);
    check_conservation(&rr);
    let hit = |r: &Value| r["cluster"]["kv_cache_hit_rate"].as_f64().unwrap();
    assert!(hit(&affinity) > 0.5, "affinity hit rate {}", hit(&affinity));
    assert!(
        hit(&affinity) > hit(&rr) + 0.2,
        "affinity {} vs round-robin {}",
        hit(&affinity),
        hit(&rr)
    );
}

/// Largest prompt-hash buffer an arriving request held, over every event.
#[derive(Default)]
struct LongestHashes(usize);

impl crate::cluster::EventAudit for LongestHashes {
    fn after_event(&mut self, v: crate::cluster::AuditView<'_>) {
        for s in 0..v.store.capacity() as Slot {
            if v.store.is_live(s) {
                self.0 = self.0.max(v.store[s].prompt_hashes.len());
            }
        }
    }
}

/// Issue 18, defect 3: a prompt no instance can hold was hashed block by
/// block on arrival (a 2^30-token prompt: 9 s and 530 MB) only to be
/// dropped at its instance. Now the unservable check comes first; a
/// servable prompt still carries its hashes to admission and routing when
/// they are hashed (with round-robin routing and always-admit, nobody reads
/// them and they are not computed at all).
#[test]
fn unservable_prompts_are_not_hashed_on_arrival() {
    let dir = scratch("huge-prompts");
    let run = |prompt: u32, hashing: Provide| {
        let text = format!(
            "{}\n[instance]\ncount = 2\ntotal_kv_blocks = 100\n[admission]\nlatency_us = 1000\n\
             [workload]\naggregate_rate = 10.0\nnum_requests = 3\nprompt_tokens = {prompt}\n\
             prompt_tokens_stdev = 0\nprompt_tokens_max = {prompt}\noutput_tokens = 4\noutput_tokens_stdev = 0\n",
            linear_model_section()
        );
        let source = Source {
            name: "test.toml".into(),
            base_dir: dir.clone(),
            text,
        };
        let run: RunFile = config::parse(&source).unwrap();
        let mut built = config::build(&run, &dir, &mut Registry::standard(), false).unwrap();
        built.setup.prompt_hashing = hashing;
        let mut longest = LongestHashes::default();
        let outcome = Cluster::new(built.setup)
            .run_audited(|_, _| {}, &mut longest)
            .unwrap();
        let dropped: u64 = outcome.instances.iter().map(|i| i.counts().dropped).sum();
        (longest.0, dropped)
    };
    // 2^24 tokens = 2^20 blocks of 16: far more than 100 blocks.
    assert_eq!(run(1 << 24, Provide::Always), (0, 3));
    assert_eq!(run(64, Provide::Always), (64 / 16, 0));
    assert_eq!(run(64, Provide::WhenRead), (0, 0));
}

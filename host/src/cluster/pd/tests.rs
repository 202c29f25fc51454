//! P/D disaggregation: the spec's worked transfer, the deciders, one
//! request's timeline computed by hand, drops at the decode reservation,
//! and conservation (INV-1 with requests in transfer), causality (INV-5)
//! and determinism (INV-6) over random pools, deciders, KV pressure and
//! horizons.

use std::path::Path;

use proptest::prelude::*;
use serde_json::Value;

use super::{Decider, TransferCounts, TransferModel};
use crate::cluster::Cluster;
use crate::config::{self, RunFile, Source};
use crate::metrics::report;
use crate::plugins::Registry;

/// The spec's defaults: 25 GB/s, 0.05 ms, 16-token blocks, 131072 B/token.
fn spec_model(tp: Vec<u32>, contention: bool) -> TransferModel {
    TransferModel {
        bandwidth_bytes_per_us: 25.0 * 1000.0,
        base_us: 0.05 * 1000.0,
        contention,
        block_size: 16,
        kv_bytes_per_token: 131_072.0,
        split_by_tp: true,
        tp,
    }
}

#[test]
fn a_1000_token_prompt_transfers_in_the_specs_5335_us() {
    let m = spec_model(vec![1, 1], false);
    // ceil(1000 / 16) = 63 blocks × 16 tokens × 131072 B.
    assert_eq!(m.bytes(63, 0, 1), 132_120_576.0);
    let mut c = TransferCounts::default();
    // ceil(50 + 132120576 / 25000) = ceil(5334.82…)
    assert_eq!(m.start(&mut c, 63, 0, 1), 5335);
    assert_eq!((c.started, c.active, c.peak), (1, 1, 1));
    TransferModel::finish(&mut c);
    assert_eq!((c.completed, c.active), (1, 0));
    // Nothing to move (all cached on the decode side): the base latency.
    assert_eq!(m.start(&mut c, 0, 0, 1), 50);
}

#[test]
fn contention_shares_the_bandwidth_fixed_at_the_start() {
    let m = spec_model(vec![1, 1], true);
    let mut c = TransferCounts::default();
    assert_eq!(m.start(&mut c, 63, 0, 1), 5335);
    // A second transfer while the first runs gets half: ceil(50 + 10569.6…).
    assert_eq!(m.start(&mut c, 63, 0, 1), 10620);
    // A third: a third of it.
    assert_eq!(
        m.start(&mut c, 63, 0, 1),
        (50.0f64 + 132_120_576.0 / (25_000.0 / 3.0)).ceil() as i64
    );
    assert_eq!(c.peak, 3);
    assert_eq!(c.depth_sum, 1 + 2 + 3);
    TransferModel::finish(&mut c);
    TransferModel::finish(&mut c);
    // One left: a new one shares with it.
    assert_eq!(m.start(&mut c, 63, 0, 1), 10620);
    // Without contention the peak is counted but nobody slows down.
    let m = spec_model(vec![1, 1], false);
    let mut c = TransferCounts::default();
    assert_eq!(m.start(&mut c, 63, 0, 1), 5335);
    assert_eq!(m.start(&mut c, 63, 0, 1), 5335);
    assert_eq!(c.peak, 2);
}

#[test]
fn transfer_bytes_follow_the_narrower_tp_side() {
    // Prefill TP 2 → decode TP 4: two links in parallel, each half the KV.
    let m = spec_model(vec![2, 4, 1], false);
    assert_eq!(m.bytes(63, 0, 1), 132_120_576.0 / 2.0);
    // Prefill TP 2 → decode TP 1: the one decode GPU receives everything.
    assert_eq!(m.bytes(63, 0, 2), 132_120_576.0);
    // A latent (MLA) KV is whole on every rank.
    let mla = TransferModel {
        split_by_tp: false,
        ..spec_model(vec![4, 4], false)
    };
    assert_eq!(mla.bytes(63, 0, 1), 132_120_576.0);
}

#[test]
fn deciders_decide_as_documented() {
    assert!(!Decider::Never.decide(5000, false, 0, 16));
    assert!(Decider::Always.decide(1, false, 0, 16));
    let d = Decider::PrefixThreshold(16);
    // 1000 tokens, 60 blocks (960 tokens) cached: 40 uncached > 16.
    assert!(d.decide(1000, false, 60, 16));
    // 62 blocks (992) cached: 8 uncached, not > 16.
    assert!(!d.decide(1000, false, 62, 16));
    // Exactly the threshold is not more than it.
    assert!(!d.decide(16, false, 0, 16));
    assert!(d.decide(17, false, 0, 16));
    assert!(!d.decide(0, false, 0, 16));
    // multimodal: the requests with multimodal tokens, whatever is cached.
    assert!(Decider::Multimodal.decide(1000, true, 62, 16));
    assert!(!Decider::Multimodal.decide(1000, false, 0, 16));
}

/// Run a run file given as text; the report and the results lines.
fn run_text(text: &str, dir: &Path) -> (Value, Vec<Value>) {
    let results = dir.join("results.jsonl");
    let text = format!("{text}\n[output]\nresults_path = \"results.jsonl\"\n");
    let source = Source {
        name: "test.toml".into(),
        base_dir: dir.to_path_buf(),
        text,
    };
    let run: RunFile = config::parse(&source).unwrap_or_else(|e| panic!("{e}"));
    let mut reg = Registry::standard();
    let built = config::build(&run, dir, &mut reg, true).unwrap_or_else(|e| panic!("{e}"));
    let mut outcome = Cluster::new(built.setup)
        .run(|_, _| {})
        .unwrap_or_else(|e| panic!("{e}"));
    for o in built.outputs {
        o.commit().unwrap();
    }
    let r = report::build(&mut outcome, None);
    let lines = std::fs::read_to_string(&results)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (r, lines)
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("blis-pd-tests-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const LINEAR: &str =
    "[model]\nlatency_model = \"linear\"\nalpha = [100.0, 0.5, 20.0]\nbeta = [2000.0, 5.0, 30.0]\n";

#[test]
fn one_disaggregated_request_on_one_timeline() {
    let dir = scratch("timeline");
    let text = format!(
        "seed = 1\n{LINEAR}\n[workload]\naggregate_rate = 1.0\nnum_requests = 1\n\
         prompt_tokens = 1000\nprompt_tokens_stdev = 0\noutput_tokens = 4\noutput_tokens_stdev = 0\n\
         [[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = 1\n\
         [[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 1\n\
         [pd]\ndecider = \"always\"\nkv_bytes_per_token = 131072.0\n"
    );
    let (r, lines) = run_text(&text, &dir);
    let l = &lines[0];
    assert_eq!(l["status"], "completed");
    assert_eq!(l["instance"], 1, "handled by the decode instance");
    assert_eq!(l["output_tokens"], 4);
    // Prefill instance: queued after α0 + α1·L = 100 + 500 = 600 µs, one
    // prefill step of β0 + β1·1000 = 7000 µs (ends at 7600), hand-off.
    // Transfer: 63 blocks → 5335 µs (arrives at 12935). Decode instance:
    // the last prompt token is recomputed, β0 + β1 = 2005 (ends at 14940),
    // first token seen α2 = 20 later: TTFT 14960. Then decode steps of
    // β0 + β2 = 2030; token k is seen k·α2 after its step: 17010, 19060,
    // 21110 (ITL 2050 each), the last one the completion.
    assert_eq!(l["scheduling_delay_ms"].as_f64(), Some(0.6));
    assert_eq!(l["ttft_ms"].as_f64(), Some(14.96));
    assert_eq!(l["e2e_ms"].as_f64(), Some(21.11));
    // (The results file's mean ITL is (E2E − TTFT) / 3 in floating point.)
    assert!(
        (l["itl_mean_ms"].as_f64().unwrap() - 2.05).abs() < 1e-12,
        "{l}"
    );
    let c = &r["cluster"];
    assert_eq!(c["ttft_mean_ms"].as_f64(), Some(14.96));
    assert_eq!(c["e2e_mean_ms"].as_f64(), Some(21.11));
    assert_eq!(c["itl_mean_ms"].as_f64(), Some(2.05));
    assert_eq!(c["scheduling_delay_mean_ms"].as_f64(), Some(0.6));
    assert_eq!(
        c["total_output_tokens"], 4,
        "the prefill leg's token is not the client's"
    );
    let pd = &r["pd"];
    assert_eq!(pd["disaggregated_requests"], 1);
    assert_eq!(
        pd["kv_transfers"]["duration"]["mean_ms"].as_f64(),
        Some(5.335)
    );
    assert_eq!(r["instances"][0]["prefill_handoffs"], 1);
    assert_eq!(r["instances"][0]["total_output_tokens"], 0);
    assert_eq!(r["instances"][1]["kv_transfers_in"], 1);
    check(&r, &lines);
}

/// LoRA with prefill/decode pools: both legs run with the adapter, so a
/// cold adapter loads on the prefill instance before the prefill and on
/// the decode instance before the decode — the timeline of
/// `one_disaggregated_request_on_one_timeline` with two loads of
/// ⌈1000 + ⌈8 · 25000 / 25000⌉⌉ = 1008 µs each.
#[test]
fn a_cold_adapter_loads_on_both_legs_of_a_disaggregated_request() {
    let dir = scratch("lora");
    let text = format!(
        "seed = 1\n{LINEAR}\n[workload]\naggregate_rate = 1.0\nnum_requests = 1\n\
         [[workload.clients]]\nid = \"c\"\nadapter = \"a\"\n\
         input = {{ type = \"constant\", value = 1000 }}\noutput = {{ type = \"constant\", value = 4 }}\n\
         [[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = 1\n\
         [[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 1\n\
         [pd]\ndecider = \"always\"\nkv_bytes_per_token = 131072.0\n\
         [lora]\nadapter_capacity = 1\nload_base_latency_us = 1000.0\n\
         load_bandwidth_bytes_us = 25000.0\nfootprint_bytes_per_rank = 25000\n\
         [[lora.adapters]]\nid = \"a\"\nrank = 8\n"
    );
    let (r, lines) = run_text(&text, &dir);
    let l = &lines[0];
    assert_eq!(l["status"], "completed");
    assert_eq!(l["instance"], 1, "handled by the decode instance");
    assert_eq!(l["adapter"], "a");
    // Queued at 600; load until 1608, when the prefill is scheduled;
    // prefill 7000 (8608); transfer 5335 (13943); load on the decode
    // instance until 14951; recompute 2005 (16956); seen α2 = 20 later:
    // TTFT 16976. Decode steps of 2030, each token seen k·α2 after its
    // step: E2E 16956 + 3 · 2030 + 4 · 20 = 23126.
    assert_eq!(l["scheduling_delay_ms"].as_f64(), Some(1.608));
    assert_eq!(l["ttft_ms"].as_f64(), Some(16.976));
    assert_eq!(l["e2e_ms"].as_f64(), Some(23.126));
    let a = &r["adapters"]["a"];
    assert_eq!(a["load_count"], 2, "one load per leg: {a}");
    assert_eq!(a["completed_requests"], 1);
    assert_eq!(r["pd"]["disaggregated_requests"], 1);
    check(&r, &lines);
}

/// Issue 33, defect 23: a decode instance whose only request was preempted
/// waits for blocks a KV transfer on its way holds. With an empty step of
/// 0 µs (β0 = 0) it used to poll every µs until the transfer arrived
/// (998,052 events for these 2 requests); it now idles until the arrival
/// schedules its step, with the same report.
#[test]
fn a_decode_instance_waiting_for_reserved_kv_idles_instead_of_polling() {
    let dir = scratch("no-poll");
    // 130 blocks: R1 (1000 + 100 tokens, 69 blocks) decodes while R2's
    // 63 prompt blocks are reserved, outgrows the 67 left, is preempted,
    // and cannot be readmitted until R2's slow (1.3 s) transfer arrives.
    let text = "seed = 3\n[model]\nlatency_model = \"linear\"\nalpha = [100.0, 0.5, 20.0]\n\
                beta = [0.0, 5.0, 30.0]\n[workload]\naggregate_rate = 1.0\nnum_requests = 2\n\
                prompt_tokens = 1000\nprompt_tokens_stdev = 0\noutput_tokens = 100\noutput_tokens_stdev = 0\n\
                [[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = 1\n\
                [[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 1\ninstance = { total_kv_blocks = 130 }\n\
                [pd]\ndecider = \"always\"\nkv_bytes_per_token = 131072.0\ntransfer_bandwidth_gbps = 0.1\n\
                [output]\nresults_path = \"results.jsonl\"\n";
    let source = Source {
        name: "test.toml".into(),
        base_dir: dir.clone(),
        text: text.into(),
    };
    let run: RunFile = config::parse(&source).unwrap_or_else(|e| panic!("{e}"));
    let mut reg = Registry::standard();
    let built = config::build(&run, &dir, &mut reg, true).unwrap_or_else(|e| panic!("{e}"));
    let mut outcome = Cluster::new(built.setup)
        .run(|_, _| {})
        .unwrap_or_else(|e| panic!("{e}"));
    for o in built.outputs {
        o.commit().unwrap();
    }
    assert!(
        outcome.events < 1000,
        "{} events for 2 requests: the decode instance polls",
        outcome.events
    );
    let r = report::build(&mut outcome, None);
    let lines: Vec<Value> = std::fs::read_to_string(dir.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let c = &r["cluster"];
    assert_eq!(c["completed_requests"], 2, "{c}");
    assert_eq!(
        r["instances"][1]["preemption_count"], 1,
        "the case is the one meant"
    );
    check(&r, &lines);
}

#[test]
fn a_full_decode_instance_drops_the_transfer_and_counts_it() {
    let dir = scratch("drop");
    // The decode instance holds 70 blocks: one 1000-token prompt (63) at a
    // time; requests arriving together find it reserved.
    let text = format!(
        "seed = 3\n{LINEAR}\n[workload]\naggregate_rate = 10000.0\nnum_requests = 6\n\
         prompt_tokens = 1000\nprompt_tokens_stdev = 0\noutput_tokens = 50\noutput_tokens_stdev = 0\n\
         [[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = 2\n\
         [[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 1\ninstance = {{ total_kv_blocks = 70 }}\n\
         [pd]\ndecider = \"always\"\nkv_bytes_per_token = 131072.0\n"
    );
    let (r, lines) = run_text(&text, &dir);
    let drops = r["pd"]["kv_transfers"]["dropped_at_decode_kv"]
        .as_u64()
        .unwrap();
    assert!(drops >= 1, "{}", r["pd"]);
    assert_eq!(
        r["instances"][2]["dropped_unservable"].as_u64(),
        Some(drops)
    );
    assert_eq!(
        lines.iter().filter(|l| l["status"] == "dropped").count() as u64,
        drops
    );
    check(&r, &lines);
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// INV-1 at every level with requests in transfer and prefill hand-offs,
/// INV-5 on every result line, transfers conserved.
fn check(r: &Value, lines: &[Value]) {
    let c = &r["cluster"];
    assert_eq!(
        u(c, "num_requests"),
        u(c, "injected_requests") + u(c, "rejected_requests") + u(c, "still_in_pipeline"),
        "pipeline: {c}"
    );
    assert_eq!(
        u(c, "injected_requests"),
        u(c, "completed_requests")
            + u(c, "still_queued")
            + u(c, "still_running")
            + u(c, "dropped_unservable")
            + u(c, "in_transfer"),
        "INV-1 (cluster, in transfer counted): {c}"
    );
    for b in r["instances"].as_array().unwrap() {
        assert_eq!(
            u(b, "injected_requests"),
            u(b, "completed_requests")
                + u(b, "still_queued")
                + u(b, "still_running")
                + u(b, "dropped_unservable")
                + u(b, "prefill_handoffs"),
            "INV-1 (instance): {b}"
        );
    }
    let t = &r["pd"]["kv_transfers"];
    assert_eq!(
        u(t, "started"),
        u(t, "completed") + u(t, "in_flight"),
        "transfers: {t}"
    );
    assert_eq!(u(t, "in_flight"), u(c, "in_transfer"));
    assert_eq!(lines.len() as u64, u(c, "num_requests"));
    let count = |s: &str| lines.iter().filter(|l| l["status"] == s).count() as u64;
    assert_eq!(count("in_transfer"), u(c, "in_transfer"));
    assert_eq!(count("completed"), u(c, "completed_requests"));
    assert_eq!(count("dropped"), u(c, "dropped_unservable"));
    for l in lines {
        // INV-5: arrival ≤ scheduled ≤ first token ≤ completion.
        let f = |k: &str| l[k].as_f64();
        if let Some(s) = f("scheduling_delay_ms") {
            assert!(s >= 0.0, "{l}");
            if let Some(ttft) = f("ttft_ms") {
                assert!(s <= ttft, "INV-5: {l}");
            }
        }
        if let Some(e2e) = f("e2e_ms") {
            assert!(f("ttft_ms").is_some_and(|t| t <= e2e), "INV-5: {l}");
            assert!(
                f("scheduling_delay_ms").is_some_and(|s| s <= e2e),
                "INV-5: {l}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("BLIS_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24)
    ))]

    #[test]
    fn pd_runs_conserve_requests_keep_causality_and_repeat(
        seed in 0u64..1000,
        prefill in 0u32..3,
        both in 0u32..2,
        decode in 1u32..3,
        decider in 0usize..3,
        threshold in 0u32..200,
        contention in any::<bool>(),
        decode_kv in prop_oneof![Just(None), (40u64..400).prop_map(Some)],
        horizon in prop_oneof![Just(None), (20_000i64..400_000).prop_map(Some)],
        rate in 50.0f64..2000.0,
        prefix in prop_oneof![Just(0u32), Just(64u32), Just(300u32)],
        lora in prop_oneof![Just(None), (1u32..3).prop_map(Some)],
    ) {
        let prefill = if decider > 0 && prefill + both == 0 { 1 } else { prefill };
        let decider_line = match decider {
            0 => "decider = \"never\"".to_string(),
            1 => "decider = \"always\"".to_string(),
            _ => format!("decider = \"prefix-threshold\"\nprefix_threshold = {threshold}"),
        };
        let mut pools = String::new();
        for (name, role, n) in [("pre", "prefill", prefill), ("mix", "both", both), ("dec", "decode", decode)] {
            if n == 0 {
                continue;
            }
            pools += &format!("[[pools]]\nname = \"{name}\"\nrole = \"{role}\"\ninstances = {n}\n");
            if role == "decode" {
                if let Some(kv) = decode_kv {
                    pools += &format!("instance = {{ total_kv_blocks = {kv} }}\n");
                }
            }
        }
        let horizon = horizon.map(|h| format!("horizon_us = {h}\n")).unwrap_or_default();
        // LoRA on at random: three adapters, Zipf popularity, `capacity`
        // slots per instance, lora-affinity in the routing of both stages.
        let (workload, lora_section, scorers) = match lora {
            None => (
                format!(
                    "[workload]\naggregate_rate = {rate}\nnum_requests = 40\nprefix_tokens = {prefix}\n\
                     prompt_tokens = 300\nprompt_tokens_stdev = 250\nprompt_tokens_min = 1\nprompt_tokens_max = 1500\n\
                     output_tokens = 30\noutput_tokens_stdev = 20\noutput_tokens_min = 1\noutput_tokens_max = 100\n"
                ),
                String::new(),
                String::new(),
            ),
            Some(capacity) => (
                format!(
                    "[workload]\naggregate_rate = {rate}\nnum_requests = 40\n\
                     [[workload.clients]]\nid = \"c\"\n\
                     input = {{ type = \"gaussian\", mean = 300, std_dev = 250, min = 1, max = 1500 }}\n\
                     output = {{ type = \"gaussian\", mean = 30, std_dev = 20, min = 1, max = 100 }}\n\
                     adapter_mix = {{ zipf_s = 1.0, ids = [\"a\", \"b\", \"c\"] }}\n"
                ),
                format!(
                    "[lora]\nadapter_capacity = {capacity}\nload_base_latency_us = 3000.0\n\
                     step_overhead_tiers = {{ \"8\" = {{ k6 = 0.05, k7 = 0.02 }} }}\n\
                     [[lora.adapters]]\nid = \"a\"\nrank = 8\n\
                     [[lora.adapters]]\nid = \"b\"\nrank = 16\n\
                     [[lora.adapters]]\nid = \"c\"\nrank = 8\n"
                ),
                "scorers = [{ name = \"lora-affinity\", weight = 2.0 }, { name = \"queue-depth\", weight = 1.0 }]\n"
                    .to_string(),
            ),
        };
        let text = format!(
            "seed = {seed}\n{horizon}{LINEAR}\n[instance]\ntotal_kv_blocks = 300\nmax_num_batched_tokens = 512\n\
             {workload}\
             [routing]\npolicy = \"weighted\"\n{scorers}{pools}\
             [pd]\n{decider_line}\ntransfer_contention = {contention}\nkv_bytes_per_token = 65536.0\n\
             {lora_section}"
        );
        let dir = scratch(&format!("prop-{seed}-{decider}"));
        let (r, lines) = run_text(&text, &dir);
        check(&r, &lines);
        if decider == 0 {
            prop_assert_eq!(u(&r["pd"], "disaggregated_requests"), 0);
        }
        let (r2, lines2) = run_text(&text, &dir);
        prop_assert_eq!(r.to_string(), r2.to_string(), "INV-6");
        prop_assert_eq!(lines, lines2);
    }
}

#[test]
fn pool_overrides_build_heterogeneous_instances_and_size_transfers_by_the_narrower_tp() {
    let dir = scratch("hetero");
    let run = |prefill_tp: u32, decode_tp: u32| {
        let text = format!(
            "seed = 9\n{LINEAR}\n[workload]\naggregate_rate = 50.0\nnum_requests = 30\n\
             prompt_tokens = 700\nprompt_tokens_stdev = 300\nprompt_tokens_min = 10\nprompt_tokens_max = 2000\n\
             output_tokens = 20\n\
             [[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = 1\nmodel = {{ tp = {prefill_tp} }}\n\
             instance = {{ total_kv_blocks = 5000, max_num_batched_tokens = 4096 }}\n\
             [[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 2\nmodel = {{ tp = {decode_tp} }}\n\
             instance = {{ total_kv_blocks = 3000 }}\n\
             [pd]\ndecider = \"always\"\nkv_bytes_per_token = 131072.0\n"
        );
        let (r, lines) = run_text(&text, &dir);
        check(&r, &lines);
        assert_eq!(u(&r["pd"], "disaggregated_requests"), 30);
        r["pd"]["kv_transfers"]["total_gb"].as_f64().unwrap()
    };
    let tp1 = run(1, 1);
    assert!(tp1 > 0.0);
    // Both sides at TP 2: two links, each half the KV.
    assert_eq!(run(2, 2), tp1 / 2.0);
    // The decode side at TP 1 receives everything through one link.
    assert_eq!(run(2, 1), tp1);
    assert_eq!(run(1, 4), tp1);
}

#[test]
fn each_pool_gets_its_own_instance_settings() {
    let text = "seed = 1\n[model]\nlatency_model = \"linear\"\nalpha = [0.0, 0.0, 0.0]\nbeta = [100.0, 1.0, 1.0]\n\
                [workload]\naggregate_rate = 1.0\nnum_requests = 1\nprompt_tokens = 100\noutput_tokens = 2\n\
                [[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 2\ninstance = { total_kv_blocks = 77, max_num_seqs = 3 }\n\
                [[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = 1\ninstance = { total_kv_blocks = 55 }\n";
    let source = Source {
        name: "t.toml".into(),
        base_dir: ".".into(),
        text: text.into(),
    };
    let run: RunFile = config::parse(&source).unwrap();
    let built = config::build(&run, Path::new("."), &mut Registry::standard(), false)
        .unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<(u32, u64, u32)> = built
        .setup
        .instances
        .iter()
        .map(|i| {
            (
                i.index(),
                i.config().total_kv_blocks,
                i.config().max_num_seqs,
            )
        })
        .collect();
    // Prefill pools first, whatever the file order.
    assert_eq!(got, vec![(0, 55, 256), (1, 77, 3), (2, 77, 3)]);
    let pd = built.setup.pd.as_ref().unwrap();
    assert_eq!((pd.prefill.clone(), pd.decode.clone()), (0..1, 1..3));
}

//! Exact timelines, computed by hand with the linear model
//! (step = beta0 + beta1·prefill tokens + beta2·decode tokens, queueing delay
//! alpha0 + alpha1·L, token overhead alpha2).

use super::harness::*;
use crate::instance::{InstanceConfig, PreemptionKind, SchedulerKind};
use crate::request::{RequestState, SloClass};

const BETA: [f64; 3] = [1000.0, 10.0, 5.0];

/// L = 20 at t = 0, alpha = [100, 1, 50]: queued at 120; prefill step
/// 120..1320 (1000 + 10·20); first token seen at 1320 + 50.
#[test]
fn single_request_one_token() {
    let mut sim = Sim::new(config(16, 100), linear([100.0, 1.0, 50.0], BETA));
    sim.add_unique(0, 20, 1);
    sim.run();
    let r = sim.req(0);
    assert_eq!(r.state, RequestState::Completed);
    assert_eq!(r.enqueued_at, 120);
    assert_eq!(r.scheduled_at, 120);
    assert_eq!(r.first_token_at, 1370);
    assert_eq!(r.completed_at, 1370);
    assert_eq!(sim.obs.first_tokens, vec![(0, 1370)]);
    assert!(sim.obs.gaps.is_empty());
    assert_eq!(sim.obs.completed, vec![(0, 1370)]);
    assert_eq!(sim.inst.counts().steps, 1);
    // The step at 120 starts the batch, the one at 1320 finishes it.
    assert_eq!(sim.step_events, 2);
    assert_eq!(sim.inst.used_kv_blocks(), 0);
    assert!(!sim.inst.step_pending());
}

/// Same with N = 3: two decode steps of 1000 + 5 = 1005 each, ending at
/// 2325 and 3330. Token k reaches the client k·α2 after its step: 1370
/// (1320 + 50), 2425 (2325 + 2·50), 3480 (3330 + 3·50); ITL [1055, 1055] —
/// the reference's samples dt + α2 — and E2E 3480 (the reference's 4535 minus
/// its double-counted last sample).
#[test]
fn single_request_three_tokens() {
    let mut sim = Sim::new(config(16, 100), linear([100.0, 1.0, 50.0], BETA));
    sim.add_unique(0, 20, 3);
    sim.run();
    let r = sim.req(0);
    assert_eq!(r.first_token_at, 1370);
    assert_eq!(r.last_token_at, 3480);
    assert_eq!(r.completed_at - r.arrival, 3480);
    assert_eq!(r.generated, 3);
    // Context computed: the prompt and the first two outputs (the last token
    // is emitted, never fed back).
    assert_eq!(r.computed, 22);
    assert_eq!(sim.obs.gaps, vec![1055, 1055]);
    let c = sim.inst.counts();
    assert_eq!(c.steps, 3);
    assert_eq!(c.completed, 1);
    // 22 tokens in 16-token blocks: 2 blocks at most.
    assert_eq!(c.peak_kv_blocks, 2);
    assert_eq!(sim.inst.used_kv_blocks(), 0);
}

/// Two requests queued at the same tick share one step chain: the first
/// `Queued` schedules the step, the second finds it pending. alpha = [100,
/// 0, 50]; both queued at 100; one prefill step of 40 tokens (1000 + 400)
/// ends at 1500, first tokens at 1550; four decode steps of 1000 + 5·2 = 1010
/// each; last (5th) tokens at 1500 + 4·1010 + 5·50 = 5790; gaps 1010 + 50.
/// 5 steps, not 10.
#[test]
fn two_simultaneous_requests_one_chain() {
    let mut sim = Sim::new(config(16, 100), linear([100.0, 0.0, 50.0], BETA));
    sim.add_unique(0, 20, 5);
    sim.add_unique(0, 20, 5);
    sim.run();
    for id in 0..2 {
        let r = sim.req(id);
        assert_eq!(r.scheduled_at, 100);
        assert_eq!(r.first_token_at, 1550);
        assert_eq!(r.completed_at, 5790);
    }
    assert_eq!(sim.obs.gaps, vec![1060; 8]);
    // Five batches, plus the step event that finishes the last one.
    assert_eq!(sim.step_events, 6);
    assert_eq!(sim.inst.counts().steps, 5);
}

/// Chunked prefill: threshold 64, L = 200, N = 2, queued at 100. Chunks of
/// 64, 64, 64 (1000 + 640 each) end at 1740, 3380, 5020; the last chunk of 8
/// (1000 + 80) ends at 6100, first token at 6150; one decode (1005) ends at
/// 7105, second token at 7105 + 2·50 = 7205.
#[test]
fn chunked_prefill_by_threshold() {
    let cfg = InstanceConfig {
        long_prefill_token_threshold: 64,
        ..config(16, 100)
    };
    let mut sim = Sim::new(cfg, linear([100.0, 0.0, 50.0], BETA));
    sim.add_unique(0, 200, 2);
    sim.run_until(1740, 100);
    assert_eq!(sim.req(0).computed, 64);
    assert_eq!(sim.req(0).granted, 64);
    sim.run_until(5020, 100);
    assert_eq!(sim.req(0).computed, 192);
    assert_eq!(sim.req(0).granted, 8);
    sim.run();
    let r = sim.req(0);
    assert_eq!(r.first_token_at, 6150);
    assert_eq!(r.completed_at, 7205);
    assert_eq!(sim.obs.gaps, vec![1055]);
    assert_eq!(sim.inst.counts().steps, 5);
}

/// The step budget chunks too: budget 100, L = 250 -> 100, 100, 50.
/// Queued at 100; ends at 2100, 4100, 5600 (1000 + 500); token at 5650.
#[test]
fn chunked_prefill_by_budget() {
    let cfg = InstanceConfig {
        max_num_batched_tokens: 100,
        ..config(16, 100)
    };
    let mut sim = Sim::new(cfg, linear([100.0, 0.0, 50.0], BETA));
    sim.add_unique(0, 250, 1);
    sim.run();
    assert_eq!(sim.req(0).first_token_at, 5650);
    assert_eq!(sim.inst.counts().steps, 3);
}

/// A second request with the same 40-token prompt, arriving after the first
/// finished, finds its two full blocks cached: it computes only 8 tokens.
/// First: queued 100, step 100..1500 (1000 + 400), done at 1550.
/// Second: arrives 5000, queued 5100, step 1000 + 80 = 1080 ends 6180,
/// token 6230 (TTFT 1230 instead of 1450).
#[test]
fn prefix_cache_hit_shortens_prefill() {
    let mut sim = Sim::new(config(16, 100), linear([100.0, 0.0, 50.0], BETA));
    let prompt = [seg(7, 30), seg(8, 10)];
    sim.add(0, &prompt, 1);
    sim.add(5000, &prompt, 1);
    sim.run();
    assert_eq!(sim.req(0).completed_at, 1550);
    assert_eq!(sim.req(0).cached_tokens, 0);
    let b = sim.req(1);
    assert_eq!(b.cached_tokens, 32);
    assert_eq!(b.first_token_at, 6230);
    let c = sim.inst.counts();
    // Lookups: the first request had 2 candidate blocks (39 tokens), no hit;
    // the second 2 candidates, 2 hits.
    assert_eq!((c.cache_hit_blocks, c.cache_lookup_blocks), (2, 4));
    assert!((sim.inst.cache_hit_rate() - 0.5).abs() < 1e-12);
}

/// Two identical prompts queued together: the second hits the first's full
/// block registered moments earlier in the same batch formation (16 of its
/// 20 tokens), so the step computes 20 + 4 tokens: 1000 + 240. Decode gaps
/// are 1010 + α2 = 1060: the reference's Appendix A.2 samples.
#[test]
fn prefix_hit_within_one_batch() {
    let mut sim = Sim::new(config(16, 100), linear([100.0, 0.0, 50.0], BETA));
    let prompt = [seg(3, 20)];
    sim.add(0, &prompt, 5);
    sim.add(0, &prompt, 5);
    sim.run_until(100, 100);
    assert_eq!(sim.inst.used_kv_blocks(), 3); // shared block + one each
    sim.run();
    assert_eq!(sim.req(1).cached_tokens, 16);
    assert_eq!(sim.req(0).first_token_at, 100 + 1240 + 50);
    assert_eq!(sim.req(1).first_token_at, 100 + 1240 + 50);
    assert_eq!(sim.obs.gaps, vec![1060; 8]);
}

/// A prompt that is a whole number of blocks and fully cached still computes
/// its last token (vLLM): of 32 tokens only the first block may be a hit.
#[test]
fn fully_cached_prompt_computes_last_token() {
    let mut sim = Sim::new(config(16, 100), linear([100.0, 0.0, 50.0], BETA));
    let prompt = [seg(9, 32)];
    sim.add(0, &prompt, 1);
    sim.add(10_000, &prompt, 1);
    sim.run();
    let b = sim.req(1);
    assert_eq!(b.cached_tokens, 16);
    // Queued at 10100, 16 tokens: 1000 + 160.
    assert_eq!(b.first_token_at, 10_100 + 1160 + 50);
}

/// Preemption under KV pressure and its recompute. B = 4, 5 blocks,
/// alpha = [100, 0, 0], a: L = 4 at 0, b: L = 4 at 1, both N = 10.
///
/// Steps: 100 (a prefill 4: 1040) -> 1140 (a decode, b prefill: 1045) ->
/// 2185, 3195, 4205, 5215 (two decodes: 1010 each) -> 6225. Blocks: a holds
/// positions 0..8 in 3 blocks, b 0..7 in 2 (all 5 used). At 6225 b must
/// compute position 8 and needs a sixth block: b is the tail, so it preempts
/// itself (its two full blocks stay cached on the free list). a runs alone
/// (1005 per step): 7230, 8235, 9240. b, at the queue front, needs 3 free
/// blocks (2 cached + 1) with 2 free: head-of-line blocked. At 9240 a takes
/// the LRU head (b's second block) for position 12. a completes at 10245;
/// then b is readmitted: target 4 + 5 = 9 tokens, its first block is still
/// cached (4 tokens), so the recompute grant is exactly 5 tokens (a prefill:
/// 1000 + 50 = 1050) -> 11295, 6th token; then 4 decodes of 1005 -> 15315.
#[test]
fn preemption_and_recompute() {
    let cfg = InstanceConfig {
        block_size: 4,
        total_kv_blocks: 5,
        ..InstanceConfig::default()
    };
    let mut sim = Sim::new(cfg, linear([100.0, 0.0, 0.0], BETA));
    sim.add_unique(0, 4, 10);
    sim.add_unique(1, 4, 10);
    sim.run_until(5215, 1000);
    assert_eq!(sim.inst.used_kv_blocks(), 5);
    assert!(sim.obs.preempted.is_empty());
    sim.run_until(6225, 1000);
    assert_eq!(sim.obs.preempted, vec![(1, 6225)]);
    assert_eq!(sim.req(1).state, RequestState::Queued);
    assert_eq!(sim.req(1).generated, 5);
    assert_eq!(sim.req(1).computed, 0);
    assert_eq!(sim.inst.used_kv_blocks(), 3);
    assert_eq!(sim.inst.queue_depth(), 1);
    assert_eq!(sim.inst.batch_size(), 1);
    sim.run_until(10245, 1000);
    assert_eq!(sim.req(0).completed_at, 10245);
    let b = sim.req(1);
    assert_eq!(b.state, RequestState::Running);
    assert_eq!((b.computed, b.granted), (4, 5));
    assert_eq!(b.preemptions, 1);
    sim.run();
    let a_gaps = [1045, 1010, 1010, 1010, 1010, 1005, 1005, 1005, 1005];
    let b_gaps = [1010, 1010, 1010, 1010, 5070, 1005, 1005, 1005, 1005];
    assert_eq!(sim.req(0).first_token_at, 1140);
    assert_eq!(sim.req(1).first_token_at, 2185);
    assert_eq!(sim.req(1).completed_at, 15315);
    assert_eq!(sim.req(1).cached_tokens, 0);
    let mut gaps = sim.obs.gaps.clone();
    let mut want: Vec<i64> = a_gaps.iter().chain(b_gaps.iter()).copied().collect();
    gaps.sort_unstable();
    want.sort_unstable();
    assert_eq!(gaps, want);
    let c = sim.inst.counts();
    assert_eq!(c.preemptions, 1);
    assert_eq!(c.steps, 15);
    // Only the readmission of b found a hit (1 of 2 candidate blocks).
    assert_eq!((c.cache_hit_blocks, c.cache_lookup_blocks), (1, 2));
    assert_eq!(sim.inst.used_kv_blocks(), 0);
}

/// With the priority preemption policy the victim is the lowest SLO class,
/// even at the head of the batch; with FCFS it is the tail.
#[test]
fn priority_preemption_picks_lowest_class() {
    for (policy, victim) in [(PreemptionKind::Priority, 0u64), (PreemptionKind::Fcfs, 1)] {
        let cfg = InstanceConfig {
            block_size: 4,
            total_kv_blocks: 5,
            preemption: policy,
            ..InstanceConfig::default()
        };
        let mut sim = Sim::new(cfg, linear([100.0, 0.0, 0.0], BETA));
        sim.add_unique(0, 4, 10);
        sim.add_unique(1, 4, 10);
        sim.store[sim.slots[0]].slo_class = SloClass::Background;
        sim.store[sim.slots[1]].slo_class = SloClass::Critical;
        sim.run();
        assert_eq!(
            sim.obs.preempted.first().map(|p| p.0),
            Some(victim),
            "{policy:?}"
        );
        assert_eq!(sim.obs.completed.len(), 2);
    }
}

/// With one sequence per batch, the queue is served in scheduler order.
#[test]
fn scheduler_orders() {
    use SchedulerKind::*;
    // Requests: (arrival, L, class). All wait behind request 0.
    let reqs = [
        (0, 10, SloClass::Standard),
        (1, 50, SloClass::Batch),
        (2, 30, SloClass::Critical),
        (3, 10, SloClass::Background),
        (4, 40, SloClass::Critical),
    ];
    let cases = [
        (Fcfs, vec![0, 1, 2, 3, 4]),
        (PriorityFcfs, vec![0, 2, 4, 1, 3]),
        (Sjf, vec![0, 3, 2, 4, 1]),
        (ReversePriority, vec![0, 3, 1, 2, 4]),
    ];
    for (kind, want) in cases {
        let cfg = InstanceConfig {
            max_num_seqs: 1,
            scheduler: kind,
            ..config(16, 100)
        };
        let mut sim = Sim::new(cfg, linear([0.0, 0.0, 0.0], BETA));
        for &(t, l, class) in &reqs {
            let id = sim.add_unique(t, l, 2);
            sim.store[sim.slots[id as usize]].slo_class = class;
        }
        sim.run();
        let order: Vec<u64> = sim.obs.completed.iter().map(|c| c.0).collect();
        assert_eq!(order, want, "{kind:?}");
    }
}

/// FCFS is by arrival, not by queued time: with alpha1 > 0 a long prompt
/// arriving first is queued later but still served first.
#[test]
fn fcfs_is_by_arrival_time() {
    let cfg = InstanceConfig {
        max_num_seqs: 1,
        ..config(16, 100)
    };
    let mut sim = Sim::new(cfg, linear([0.0, 10.0, 0.0], BETA));
    sim.add_unique(0, 10, 3); // queued at 100, runs first
    sim.add_unique(1, 100, 1); // queued at 1001
    sim.add_unique(2, 10, 1); // queued at 102
    sim.run();
    let order: Vec<u64> = sim.obs.completed.iter().map(|c| c.0).collect();
    assert_eq!(order, vec![0, 1, 2]);
}

/// max_model_len: a prompt of the limit or more is dropped; a longer total is
/// served with the output capped (forced completion).
#[test]
fn max_model_len_guard_and_cap() {
    let cfg = InstanceConfig {
        max_model_len: Some(30),
        ..config(16, 100)
    };
    let mut sim = Sim::new(cfg, linear([100.0, 0.0, 50.0], BETA));
    sim.add_unique(0, 30, 5); // L >= limit: dropped
    sim.add_unique(0, 20, 50); // capped to 10 outputs
    sim.run();
    assert_eq!(sim.req(0).state, RequestState::Dropped);
    assert_eq!(sim.obs.dropped, vec![(0, 100)]);
    let r = sim.req(1);
    assert_eq!(r.state, RequestState::Completed);
    assert_eq!(r.output_len, 10);
    assert_eq!(r.generated, 10);
    assert_eq!(sim.obs.gaps.len(), 9);
    let c = sim.inst.counts();
    assert_eq!((c.completed, c.dropped), (1, 1));
}

/// A request that can never fit (even alone) is dropped and counted; the
/// others are served; nothing panics or livelocks.
#[test]
fn unservable_request_is_dropped() {
    let mut sim = Sim::new(config(16, 10), linear([100.0, 0.0, 50.0], BETA));
    sim.add_unique(0, 150, 20); // 170 tokens > 160
    sim.add_unique(0, 150, 10); // exactly 160: fits alone
    sim.add_unique(0, 0, 5); // empty prompt: nothing to serve
    sim.run();
    assert_eq!(sim.req(0).state, RequestState::Dropped);
    assert_eq!(sim.req(1).state, RequestState::Completed);
    assert_eq!(sim.req(2).state, RequestState::Dropped);
    let c = sim.inst.counts();
    assert_eq!(
        (c.completed, c.dropped, c.still_queued, c.still_running),
        (1, 2, 0, 0)
    );
    assert!(!sim.inst.step_pending());
}

/// A dropped request on an idle instance schedules no step.
#[test]
fn drop_on_idle_instance_schedules_nothing() {
    let mut sim = Sim::new(config(16, 1), linear([100.0, 0.0, 50.0], BETA));
    sim.add_unique(0, 20, 1);
    sim.run();
    assert_eq!(sim.step_events, 0);
    assert_eq!(sim.obs.dropped.len(), 1);
}

/// N = 0 (prefill only): completes at the end of its prefill, no token.
#[test]
fn zero_output_completes_after_prefill() {
    let mut sim = Sim::new(config(16, 100), linear([100.0, 1.0, 50.0], BETA));
    sim.add_unique(0, 20, 0);
    sim.run();
    assert_eq!(sim.req(0).completed_at, 1370);
    assert!(sim.obs.first_tokens.is_empty());
    assert_eq!(sim.inst.used_kv_blocks(), 0);
}

#[test]
fn validate_rejects_zeroes() {
    let ok = InstanceConfig::default();
    assert_eq!(ok.validate(), Ok(()));
    let bad = [
        (
            InstanceConfig {
                block_size: 0,
                ..ok.clone()
            },
            "block_size",
        ),
        (
            InstanceConfig {
                max_num_seqs: 0,
                ..ok.clone()
            },
            "max_num_seqs",
        ),
        (
            InstanceConfig {
                max_num_batched_tokens: 0,
                ..ok.clone()
            },
            "max_num_batched_tokens",
        ),
        (
            InstanceConfig {
                total_kv_blocks: 0,
                ..ok.clone()
            },
            "total_kv_blocks",
        ),
        (
            InstanceConfig {
                total_kv_blocks: u64::MAX,
                ..ok.clone()
            },
            "total_kv_blocks",
        ),
        (
            InstanceConfig {
                max_model_len: Some(0),
                ..ok.clone()
            },
            "max_model_len",
        ),
    ];
    for (cfg, field) in bad {
        let e = cfg.validate().unwrap_err();
        assert!(e.contains(field), "{e}");
    }
}

/// An invalid config is a programming error past validation: `new` refuses it.
#[test]
fn new_panics_on_invalid_config() {
    let r = std::panic::catch_unwind(|| {
        crate::instance::Instance::new(
            0,
            InstanceConfig {
                block_size: 0,
                ..InstanceConfig::default()
            },
            linear([0.0; 3], BETA),
        )
    });
    let msg = r.expect_err("new must refuse block_size 0");
    let msg = msg
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| msg.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(msg.contains("block_size"), "{msg}");
}

/// A million-block instance allocates next to nothing: block metadata exists
/// only for blocks actually handed out.
#[test]
fn huge_cache_costs_nothing_up_front() {
    let mut sim = Sim::new(config(16, 1_000_000), linear([100.0, 0.0, 50.0], BETA));
    assert_eq!(sim.inst.kv_blocks_ever_used(), 0);
    assert_eq!(sim.inst.free_kv_blocks(), 1_000_000);
    sim.add_unique(0, 100, 4);
    sim.run();
    // 103 tokens computed: 7 blocks.
    assert_eq!(sim.inst.kv_blocks_ever_used(), 7);
    assert_eq!(sim.inst.free_kv_blocks(), 1_000_000);
    assert_eq!(sim.inst.kv_utilization(), 0.0);
}

/// INV-8 as the seed states it: one sequence per batch, two requests queued
/// at the same tick; the second is not stranded when the first completes.
#[test]
fn work_conserving_with_one_sequence() {
    let cfg = InstanceConfig {
        max_num_seqs: 1,
        ..config(16, 100)
    };
    let mut sim = Sim::new(cfg, linear([100.0, 0.0, 50.0], BETA));
    sim.add_unique(0, 20, 2);
    sim.add_unique(0, 20, 2);
    // First: prefill 100..1300, decode 1300..2305 (2nd token at 2305 + 2·50).
    // Second is admitted by the step at 2305: prefill ..3505, decode ..4510.
    sim.run();
    assert_eq!(sim.req(0).completed_at, 2405);
    assert_eq!(sim.req(1).scheduled_at, 2305);
    assert_eq!(sim.req(1).completed_at, 4610);
    assert_eq!(sim.inst.counts().steps, 4);
}

/// Scheduling one step ahead (`async_scheduling`, vLLM's default since
/// late 2025). alpha = [100, 0, 50]. A (L = 20, N = 5) is queued at 100 on an
/// idle instance and starts at once: prefill 100..1300 (1000 + 200). B
/// (L = 20, N = 1) is queued at 600, while that step runs.
/// * Formed when it starts, the step at 1300 takes A's decode and B's
///   prefill: 1000 + 200 + 5 = 1205, ending 2505; B's token at 2555.
/// * Formed one step ahead (when the step at 100 started, before B was
///   queued), the step at 1300 is A's decode alone (1005, ending 2305); B
///   joins the next: 2305..3510, token at 3560 — one step (1005) later.
///
/// A's tokens: 1350, then the steps' ends + k·50 — 5770 for its fifth in
/// both (B's prefill delays one of A's steps either way).
#[test]
fn async_scheduling_takes_a_request_queued_during_a_step_into_the_step_after_next() {
    for (on, b_scheduled, b_token) in [(false, 1300, 2555), (true, 2305, 3560)] {
        let cfg = InstanceConfig {
            async_scheduling: on,
            ..config(16, 100)
        };
        let mut sim = Sim::new(cfg, linear([100.0, 0.0, 50.0], BETA));
        sim.add_unique(0, 20, 5);
        sim.add_unique(500, 20, 1);
        sim.run();
        let (a, b) = (sim.req(0), sim.req(1));
        assert_eq!(
            (a.scheduled_at, a.first_token_at),
            (100, 1350),
            "async {on}"
        );
        assert_eq!(a.completed_at, 5770, "async {on}");
        assert_eq!(b.enqueued_at, 600);
        assert_eq!(b.scheduled_at, b_scheduled, "async {on}");
        assert_eq!(b.first_token_at, b_token, "async {on}");
        assert_eq!(sim.inst.counts().steps, 5, "async {on}");
    }
}

/// Scheduling one step ahead has nothing to run ahead when no request goes
/// on from a step: A (N = 1) ends with its prefill step at 1300, so B
/// (queued at 600, while it ran) starts at 1300 as without it — no empty
/// step between: 1300..2500, token at 2550.
#[test]
fn async_scheduling_forms_the_batch_at_once_after_a_step_nothing_goes_on_from() {
    for on in [false, true] {
        let cfg = InstanceConfig {
            async_scheduling: on,
            ..config(16, 100)
        };
        let mut sim = Sim::new(cfg, linear([100.0, 0.0, 50.0], BETA));
        sim.add_unique(0, 20, 1);
        sim.add_unique(500, 20, 1);
        sim.run();
        assert_eq!(sim.req(0).completed_at, 1350);
        let b = sim.req(1);
        assert_eq!(
            (b.scheduled_at, b.first_token_at),
            (1300, 2550),
            "async {on}"
        );
        assert_eq!(sim.inst.counts().steps, 2, "async {on}");
    }
}

//! Property tests: random configurations (including tiny KV caches, every
//! scheduler and preemption policy, and half the time a CPU KV tier of random
//! capacity, bandwidth and latency) and random workloads (shared prefixes,
//! session rounds that repeat earlier output), checked against INV-1..5 and
//! INV-8 after every event (see [`Sim`]) and at the end; and aggregated
//! decode steps ([`crate::instance::cruise`]) equal to full steps, event for
//! event, at any horizon.

use proptest::prelude::*;

use super::harness::*;
use crate::engine::Tick;
use crate::instance::{
    InstanceConfig, KvOffloadConfig, LatencyModel, PreemptionKind, SchedulerKind,
};
use crate::request::{OptIdx, RequestState, Segment, SloClass, UNSET};

/// One generated request: arrival gap, shared prefix (index, length), unique
/// length, output length, class, and whether it continues the previous
/// request's stream (a session round).
#[derive(Clone, Debug)]
struct Spec {
    gap: Tick,
    prefix: Option<(u64, u32)>,
    unique: u32,
    n: u32,
    class: usize,
    session: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop_oneof![3 => 0i64..50, 2 => 0i64..3000],
        prop::option::weighted(0.5, (0u64..3, 1u32..60)),
        0u32..60,
        prop_oneof![1 => Just(0u32), 10 => 1u32..40],
        0usize..5,
        prop::bool::weighted(0.15),
    )
        .prop_map(|(gap, prefix, unique, n, class, session)| Spec {
            gap,
            prefix,
            unique,
            n,
            class,
            session,
        })
}

/// A decode-heavy request: outputs of 20..400 tokens, arrivals close
/// together (the batch stays full, requests wait, completions and
/// admissions happen while most of the batch decodes).
fn decode_heavy_spec() -> impl Strategy<Value = Spec> {
    (
        0i64..40,
        prop::option::weighted(0.5, (0u64..3, 1u32..60)),
        0u32..60,
        20u32..400,
        0usize..5,
        prop::bool::weighted(0.15),
    )
        .prop_map(|(gap, prefix, unique, n, class, session)| Spec {
            gap,
            prefix,
            unique,
            n,
            class,
            session,
        })
}

fn config_strategy() -> impl Strategy<Value = InstanceConfig> {
    (
        prop::sample::select(vec![1u32, 2, 4, 16]),
        prop_oneof![1 => 1u64..12, 2 => 12u64..60, 1 => 60u64..400],
        1u32..6,
        prop::sample::select(vec![1u32, 7, 32, 128, 2048]),
        prop::sample::select(vec![0u32, 0, 5, 16]),
        0usize..4,
        prop::bool::ANY,
        prop::option::weighted(0.2, 10u32..150),
        prop::option::weighted(0.5, (1u64..80, 0.05f64..200.0, 0i64..50)),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(block_size, blocks, seqs, budget, threshold, sched, prio, mml, cpu, ahead)| {
                InstanceConfig {
                    max_num_seqs: seqs,
                    max_num_batched_tokens: budget,
                    long_prefill_token_threshold: threshold,
                    block_size,
                    total_kv_blocks: blocks,
                    max_model_len: mml,
                    scheduler: [
                        SchedulerKind::Fcfs,
                        SchedulerKind::PriorityFcfs,
                        SchedulerKind::Sjf,
                        SchedulerKind::ReversePriority,
                    ][sched],
                    preemption: if prio {
                        PreemptionKind::Priority
                    } else {
                        PreemptionKind::Fcfs
                    },
                    kv_offload: cpu.map(|(cpu_blocks, bw, base)| KvOffloadConfig {
                        cpu_blocks,
                        bandwidth_tokens_per_us: bw,
                        base_latency_us: base,
                    }),
                    async_scheduling: ahead,
                }
            },
        )
}

fn latency_strategy() -> impl Strategy<Value = LatencyModel> {
    (
        0.0f64..300.0,
        0.0f64..3.0,
        0.0f64..100.0,
        1.0f64..2000.0,
        0.0f64..20.0,
        0.0f64..20.0,
    )
        .prop_map(|(a0, a1, a2, b0, b1, b2)| linear([a0, a1, a2], [b0, b1, b2]))
}

/// Build the simulation; returns it and the effective output length of
/// every request (after the `max_model_len` cap) or `None` if it must be
/// dropped as unservable.
fn build(cfg: &InstanceConfig, lat: LatencyModel, specs: &[Spec]) -> (Sim, Vec<Option<u32>>) {
    let mut sim = Sim::new(cfg.clone(), lat);
    let mut t = 0;
    let mut prev: Option<(Vec<Segment>, u64, u32)> = None;
    let mut expect = Vec::new();
    for s in specs {
        t += s.gap;
        let mut prompt = Vec::new();
        if let (true, Some((p, seed, n))) = (s.session, prev.as_ref()) {
            prompt.extend_from_slice(p);
            prompt.push(Segment {
                seed: *seed,
                len: *n,
            });
        } else if let Some((idx, len)) = s.prefix {
            prompt.push(seg(idx, len));
        }
        let id = sim.slots.len() as u64;
        prompt.push(seg(10_000 + id, s.unique));
        prompt.retain(|x| x.len > 0);
        let id = sim.add(t, &prompt, s.n);
        let slot = sim.slots[id as usize];
        sim.store[slot].slo_class = SloClass::ALL[s.class];
        let r = &sim.store[slot];
        prev = Some((r.prompt.to_vec(), r.output_seed, r.output_len));
        // Expected fate, computed independently of the engine.
        let l = u64::from(r.input_len);
        let mut n = u64::from(r.output_len);
        let mut ok = l > 0;
        if let Some(m) = cfg.max_model_len {
            let m = u64::from(m);
            ok &= l < m;
            if l + n > m {
                n = m.saturating_sub(l);
            }
        }
        let b = u64::from(cfg.block_size);
        ok &= (l + n).div_ceil(b) <= cfg.total_kv_blocks;
        expect.push(ok.then_some(n as u32));
    }
    (sim, expect)
}

/// INV-5 on the timestamps that are set.
fn check_causality(sim: &Sim) {
    for &slot in &sim.slots {
        let r = &sim.store[slot];
        if r.state == RequestState::Pipeline {
            continue;
        }
        assert!(r.arrival <= r.enqueued_at, "INV-5 arrival/enqueue {r:?}");
        let mut last = r.enqueued_at;
        for t in [r.scheduled_at, r.first_token_at, r.completed_at] {
            if t != UNSET {
                assert!(last <= t, "INV-5 order for request {}: {r:?}", r.id);
                last = t;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    /// With unlimited time every servable request completes with exactly its
    /// (capped) output, the others are dropped, tokens are seen once, and the
    /// KV cache ends empty.
    #[test]
    fn everything_completes(
        cfg in config_strategy(),
        lat in latency_strategy(),
        specs in prop::collection::vec(spec(), 1..30),
    ) {
        let (mut sim, expect) = build(&cfg, lat, &specs);
        sim.run();
        let mut want_gaps = 0usize;
        let mut gap_sum: Tick = 0;
        for (i, e) in expect.iter().enumerate() {
            let r = sim.req(i as u64);
            match e {
                None => prop_assert_eq!(r.state, RequestState::Dropped),
                Some(n) => {
                    prop_assert_eq!(r.state, RequestState::Completed);
                    prop_assert_eq!(r.output_len, *n);
                    prop_assert_eq!(r.generated, *n);
                    prop_assert_eq!(r.kv_held(), 0);
                    if *n > 0 {
                        want_gaps += *n as usize - 1;
                        gap_sum += r.last_token_at - r.first_token_at;
                        prop_assert_eq!(r.completed_at, r.last_token_at);
                    }
                }
            }
        }
        check_causality(&sim);
        prop_assert_eq!(sim.obs.gaps.len(), want_gaps);
        prop_assert_eq!(sim.obs.gaps.iter().sum::<Tick>(), gap_sum);
        prop_assert!(sim.obs.gaps.iter().all(|&g| g > 0));
        let firsts = sim.first_token_counts();
        prop_assert!(firsts.values().all(|&c| c == 1));
        let c = sim.inst.counts();
        let servable = expect.iter().filter(|e| e.is_some()).count() as u64;
        prop_assert_eq!(c.completed, servable);
        prop_assert_eq!(c.dropped, expect.len() as u64 - servable);
        prop_assert_eq!((c.still_queued, c.still_running), (0, 0));
        prop_assert_eq!(sim.inst.used_kv_blocks(), 0);
        prop_assert!(!sim.inst.step_pending());
        prop_assert!(c.peak_kv_blocks <= cfg.total_kv_blocks);
        prop_assert!(c.cache_hit_blocks <= c.cache_lookup_blocks);
        // The CPU tier: within capacity, its hits among the cache hits, and
        // exactly the reload cost of each hit block charged to steps.
        prop_assert_eq!(c.kv_offload.is_some(), cfg.kv_offload.is_some());
        if let (Some(o), Some(k)) = (cfg.kv_offload, c.kv_offload) {
            prop_assert!(sim.inst.kv.cpu_used() <= o.cpu_blocks);
            prop_assert!(k.hit_blocks <= c.cache_hit_blocks);
            prop_assert!(k.reloads <= k.hit_blocks);
            prop_assert!(k.evictions <= k.mirrored_blocks);
            prop_assert_eq!(k.mirrored_blocks - k.evictions, sim.inst.kv.cpu_used());
            prop_assert_eq!(k.transfer_time, k.hit_blocks as Tick * o.reload_cost(cfg.block_size));
        }
    }

    /// INV-1 at any horizon: every request that reached the instance's queue
    /// is in exactly one of completed, wait queue, running batch, dropped, and
    /// its state says which.
    #[test]
    fn conservation_at_any_horizon(
        cfg in config_strategy(),
        lat in latency_strategy(),
        specs in prop::collection::vec(spec(), 1..30),
        cut in 0.0f64..1.0,
    ) {
        let (mut sim, _) = build(&cfg, lat, &specs);
        // Horizon somewhere in the run (estimate its length from a full copy).
        let span = {
            let (mut full, _) = build(&cfg, sim.inst.latency.clone(), &specs);
            full.deep_checks = false;
            full.run();
            full.completed_at_max()
        };
        let horizon = (span as f64 * cut) as Tick;
        sim.run_until(horizon, 2_000_000);
        let waiting: Vec<_> = sim.inst.waiting_slots().collect();
        let running = sim.inst.running_slots().to_vec();
        let mut places = 0;
        for (i, &slot) in sim.slots.iter().enumerate() {
            let id = i as u64;
            let r = &sim.store[slot];
            let done = sim.obs.completed.iter().filter(|c| c.0 == id).count();
            let dropped = sim.obs.dropped.iter().filter(|c| c.0 == id).count();
            let queued = waiting.iter().filter(|&&s| s == slot).count();
            let run = running.iter().filter(|&&s| s == slot).count();
            let total = done + dropped + queued + run;
            if r.state == RequestState::Pipeline {
                prop_assert_eq!(total, 0);
                continue;
            }
            prop_assert_eq!(total, 1, "request {} in {} places", id, total);
            let expected = match (done, dropped, queued) {
                (1, _, _) => RequestState::Completed,
                (_, 1, _) => RequestState::Dropped,
                (_, _, 1) => RequestState::Queued,
                _ => RequestState::Running,
            };
            prop_assert_eq!(r.state, expected);
            places += 1;
        }
        let c = sim.inst.counts();
        prop_assert_eq!(c.completed + c.dropped + c.still_queued + c.still_running, places);
        check_causality(&sim);
    }
}

/// Everything observable of a run: the observer's records, every request's
/// final record (with the ids of the blocks it holds when `ids`; private
/// blocks have none, so private and indexed runs compare block counts),
/// the instance's counts and the number of steps.
fn observed(sim: &Sim, ids: bool) -> String {
    let o = &sim.obs;
    let reqs: Vec<_> = (0..sim.slots.len() as u64)
        .map(|i| {
            let r = sim.req(i);
            (
                r.state,
                r.computed,
                r.generated,
                r.granted,
                r.first_token_at,
                r.last_token_at,
                r.completed_at,
                r.scheduled_at,
                r.cached_tokens,
                r.preemptions,
                r.kv_held(),
                if ids { r.kv_blocks.clone() } else { Vec::new() },
            )
        })
        .collect();
    format!(
        "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {}",
        o.first_tokens,
        o.gaps,
        o.completed,
        o.dropped,
        o.preempted,
        reqs,
        sim.inst.counts(),
        sim.inst.running_slots(),
        sim.inst.waiting_slots().collect::<Vec<_>>(),
        sim.step_events
    )
}

/// The horizon at fraction `cut` of a full run of `specs` (to its last
/// completion; unbounded when `cut` ≥ 1), the unique content private when
/// `private`.
fn cut_horizon(
    cfg: &InstanceConfig,
    lat: &LatencyModel,
    specs: &[Spec],
    cut: f64,
    private: bool,
) -> Tick {
    if cut >= 1.0 {
        return Tick::MAX;
    }
    let (mut full, _) = build(cfg, lat.clone(), specs);
    full.deep_checks = false;
    if private {
        mark_private(&mut full, specs);
    }
    full.run();
    (full.completed_at_max() as f64 * cut) as Tick
}

/// Run `specs` to `horizon` with and without aggregated decode steps;
/// returns both observations and the number of steps cruised.
fn with_and_without_cruise(
    cfg: &InstanceConfig,
    lat: &LatencyModel,
    specs: &[Spec],
    horizon: Tick,
) -> (String, String, u64) {
    let (full, cruised, steps, _) = cruise_compared(cfg, lat, specs, horizon, false);
    (full, cruised, steps)
}

/// [`with_and_without_cruise`], the requests' unique content private when
/// `private` ([`mark_private`]: cruisers then grow by private blocks, see
/// `Cruise::growers`), also returning the steps whose growers' blocks were
/// taken at once and one by one.
fn cruise_compared(
    cfg: &InstanceConfig,
    lat: &LatencyModel,
    specs: &[Spec],
    horizon: Tick,
    private: bool,
) -> (String, String, u64, [u64; 2]) {
    let (mut full, _) = build(cfg, lat.clone(), specs);
    full.inst.cruise.disabled = true;
    let (mut cruised, _) = build(cfg, lat.clone(), specs);
    if private {
        mark_private(&mut full, specs);
        mark_private(&mut cruised, specs);
    }
    full.run_until(horizon, 2_000_000);
    cruised.run_until(horizon, 2_000_000);
    assert_eq!(full.inst.cruise.cruised, 0);
    (
        observed(&full, true),
        observed(&cruised, true),
        cruised.inst.cruise.cruised,
        cruised.inst.cruise.grown,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    /// Aggregated decode steps change nothing observable: the same tokens,
    /// gaps, completions, preemptions, request records and counts as full
    /// steps, with any configuration (KV pressure, chunked prefill, CPU
    /// tier, α2, every scheduler) and at any horizon (the batch's progress
    /// is written back by `sync`).
    #[test]
    fn cruising_equals_full_steps(
        cfg in config_strategy(),
        lat in latency_strategy(),
        specs in prop::collection::vec(spec(), 1..30),
        cut in prop_oneof![1 => Just(1.0f64), 1 => 0.0f64..1.0],
    ) {
        let horizon = cut_horizon(&cfg, &lat, &specs, cut, false);
        let (full, cruised, _) = with_and_without_cruise(&cfg, &lat, &specs, horizon);
        prop_assert_eq!(full, cruised);
    }

    /// The same with decode-heavy workloads that keep the batch full and
    /// requests waiting, so that most steps cruise through completions,
    /// admissions, prefill chunks, prefix hits and session rounds (and,
    /// with small caches, preemptions in between).
    #[test]
    fn cruising_through_completions_and_admissions_equals_full_steps(
        cfg in config_strategy(),
        lat in latency_strategy(),
        specs in prop::collection::vec(decode_heavy_spec(), 5..40),
        cut in prop_oneof![1 => Just(1.0f64), 1 => 0.0f64..1.0],
    ) {
        let horizon = cut_horizon(&cfg, &lat, &specs, cut, false);
        let (full, cruised, _) = with_and_without_cruise(&cfg, &lat, &specs, horizon);
        prop_assert_eq!(full, cruised);
    }

    /// The same with the requests' unique content private, so that
    /// cruisers grow by private blocks (`Cruise::growers`): their blocks
    /// taken at once or, when a step also takes indexed blocks from a
    /// cache with no blank block left, one by one in batch order; block ids
    /// compared too (the indexed blocks' ids show the order of the takes).
    #[test]
    fn cruising_with_private_blocks_equals_full_steps(
        cfg in config_strategy(),
        lat in latency_strategy(),
        specs in prop::collection::vec(decode_heavy_spec(), 5..40),
        cut in prop_oneof![1 => Just(1.0f64), 1 => 0.0f64..1.0],
    ) {
        let horizon = cut_horizon(&cfg, &lat, &specs, cut, true);
        let (full, cruised, _, _) = cruise_compared(&cfg, &lat, &specs, horizon, true);
        prop_assert_eq!(full, cruised);
    }
}

/// An overloaded decode-heavy instance cruises through completions and
/// admissions: 160 requests with 30..230 output tokens for a batch of 16
/// (a completion every few steps, each followed by an admission whose
/// prompt is prefilled in chunks of 16 tokens, a third of them with a
/// shared prefix), α2 > 0; the same results as full steps, and nearly every
/// step cruised (99 % when written; a completion or an admission used to
/// force a full step, and so did every prefill chunk: about half the
/// steps). Then the same under KV pressure (preemptions force full steps in
/// between; 81 % cruised). The growers' blocks are taken at once in both,
/// and one by one under pressure (shared-prefix blocks are indexed, so a
/// step that also takes one of those, with no blank block left, grants its
/// growers in batch order).
#[test]
fn overloaded_batches_cruise_through_completions_and_admissions() {
    let lat = linear([100.0, 0.5, 7.0], [500.0, 2.0, 3.0]);
    let specs: Vec<Spec> = (0..160)
        .map(|i| Spec {
            gap: 3,
            prefix: (i % 3 == 0).then_some((1, 20)),
            unique: 10 + (i * 7 % 40) as u32,
            n: 30 + (i * 37 % 200) as u32,
            class: i % 5,
            session: false,
        })
        .collect();
    for (blocks, min_share) in [(10_000, 0.95), (400, 0.6)] {
        let cfg = InstanceConfig {
            max_num_seqs: 16,
            long_prefill_token_threshold: 16,
            ..config(4, blocks)
        };
        let (full, cruised, steps) = with_and_without_cruise(&cfg, &lat, &specs, Tick::MAX);
        assert_eq!(full, cruised, "{blocks} blocks");
        // With the unique content private, cruisers grow by private blocks.
        let (full, cruised, _, grown) = cruise_compared(&cfg, &lat, &specs, Tick::MAX, true);
        assert_eq!(full, cruised, "{blocks} blocks, private");
        eprintln!("{blocks} blocks: growers' blocks taken at once / one by one at {grown:?} steps");
        assert!(grown[0] > 0, "{blocks} blocks: {grown:?}");
        assert!(grown[1] > 0 || blocks > 1_000, "{blocks} blocks: {grown:?}");
        let total = total_steps(&cfg, &lat, &specs);
        assert!(
            steps as f64 >= min_share * total as f64,
            "{blocks} blocks: {steps} of {total} steps cruised"
        );
    }
}

/// Steps a run of `specs` takes (to the end).
fn total_steps(cfg: &InstanceConfig, lat: &LatencyModel, specs: &[Spec]) -> u64 {
    let (mut sim, _) = build(cfg, lat.clone(), specs);
    sim.deep_checks = false;
    sim.run();
    assert!(sim.inst.counts().preemptions > 0 || cfg.total_kv_blocks > 1_000);
    sim.inst.counts().steps
}

/// A decode-heavy batch cruises most of its steps, with the same results as
/// full steps: 24 requests of 300 output tokens, 4-token blocks, α2 > 0,
/// then the same under KV pressure (preemptions between cruised stretches).
#[test]
fn decode_heavy_batches_cruise_with_the_same_results() {
    let lat = linear([100.0, 0.5, 7.0], [500.0, 2.0, 3.0]);
    let specs: Vec<Spec> = (0..24)
        .map(|i| Spec {
            gap: 10,
            prefix: (i % 3 == 0).then_some((1, 20)),
            unique: 5 + i as u32,
            n: 300,
            class: i % 5,
            session: false,
        })
        .collect();
    for blocks in [10_000, 1_200] {
        let cfg = InstanceConfig {
            max_num_seqs: 16,
            ..config(4, blocks)
        };
        let (full, cruised, steps) = with_and_without_cruise(&cfg, &lat, &specs, Tick::MAX);
        assert_eq!(full, cruised, "{blocks} blocks");
        assert!(steps > 200, "{blocks} blocks: only {steps} steps cruised");
    }
}

impl Sim {
    /// Time of the last completion (0 if none).
    fn completed_at_max(&self) -> Tick {
        self.obs.completed.iter().map(|c| c.1).max().unwrap_or(0)
    }
}

/// Mark the requests of `specs` whose trailing content nobody repeats as
/// private ([`crate::request::Request::private_from`]): from their own
/// unique segment on, unless the next request is a session round that
/// continues their stream.
fn mark_private(sim: &mut Sim, specs: &[Spec]) -> usize {
    let mut marked = 0;
    for (i, s) in specs.iter().enumerate() {
        if specs.get(i + 1).is_some_and(|next| next.session) {
            continue;
        }
        let slot = sim.slots[i];
        let r = &mut sim.store[slot];
        r.private_from = OptIdx::some(r.input_len - s.unique.min(r.input_len));
        marked += 1;
    }
    marked
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    /// Private blocks (anonymous: neither ids, hashes nor index entries
    /// while their request runs, freed into the eviction queue as a run,
    /// published when the request is preempted) change nothing observable:
    /// the same tokens, hits, preemptions and block counts as indexing
    /// every block with an id, under KV
    /// pressure, with prefix sharing and session rounds, cruising or not,
    /// at any horizon; the KV cache's own consistency check runs after
    /// every event.
    #[test]
    fn private_blocks_equal_indexed_blocks(
        cfg in config_strategy(),
        lat in latency_strategy(),
        specs in prop::collection::vec(decode_heavy_spec(), 5..40),
        cut in prop_oneof![1 => Just(1.0f64), 1 => 0.0f64..1.0],
        cruise in any::<bool>(),
    ) {
        let run = |private: bool, horizon: Tick| {
            let (mut sim, _) = build(&cfg, lat.clone(), &specs);
            sim.inst.cruise.disabled = !cruise;
            if private {
                mark_private(&mut sim, &specs);
            }
            sim.run_until(horizon, 2_000_000);
            sim
        };
        let span = run(false, Tick::MAX).completed_at_max();
        let horizon = if cut >= 1.0 { Tick::MAX } else { (span as f64 * cut) as Tick };
        prop_assert_eq!(
            observed(&run(false, horizon), false),
            observed(&run(true, horizon), false)
        );
    }
}

/// The same under steady KV pressure, counted: 200 mostly-unique requests on
/// a cache that preempts, so private blocks are evicted, published and hit
/// again by their own request after its preemption.
#[test]
fn private_blocks_under_preemption_equal_indexed_blocks() {
    let lat = linear([100.0, 0.5, 7.0], [500.0, 2.0, 3.0]);
    let specs: Vec<Spec> = (0..200)
        .map(|i| Spec {
            gap: 20,
            prefix: (i % 4 == 0).then_some((i as u64 % 3, 40)),
            unique: 20 + (i as u32 * 37) % 90,
            n: 30 + (i as u32 * 53) % 200,
            class: 0,
            session: i % 7 == 3,
        })
        .collect();
    let cfg = InstanceConfig {
        max_num_seqs: 16,
        ..config(4, 400)
    };
    let run = |private: bool| {
        let (mut sim, _) = build(&cfg, lat.clone(), &specs);
        if private {
            assert!(mark_private(&mut sim, &specs) > 150);
        }
        sim.run();
        sim
    };
    let (indexed, private) = (run(false), run(true));
    assert!(!indexed.obs.preempted.is_empty(), "no preemption");
    assert!(indexed.inst.counts().preemptions > 20);
    assert_eq!(observed(&indexed, false), observed(&private, false));
}

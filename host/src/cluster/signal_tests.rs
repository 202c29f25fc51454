//! Exact tests of the per-signal freshness settings and of the delayed
//! prefix-cache query, on one instance whose state changes at known times.

use super::cache_signal::CacheSignal;
use super::snapshot::{Freshness, SnapshotProvider};
use super::InstanceLabels;
use crate::engine::{EventQueue, Tick};
use crate::instance::latency::LinearModel;
use crate::instance::{Instance, InstanceConfig, InstanceObserver, LatencyModel};
use crate::request::{Request, RequestStore, Segment, Slot};

struct Nothing;
impl InstanceObserver for Nothing {
    fn first_token(&mut self, _: u32, _: &Request, _: Tick) {}
    fn token_gap(&mut self, _: u32, _: Tick) {}
    fn completed(&mut self, _: u32, _: Slot, _: &Request, _: Tick) {}
    fn dropped(&mut self, _: u32, _: Slot, _: &Request, _: Tick) {}
    fn preempted(&mut self, _: u32, _: &Request, _: Tick) {}
}

/// One idle instance (16-token blocks, 100 blocks) and an empty store.
fn one_instance() -> (Vec<Instance>, RequestStore, EventQueue) {
    let cfg = InstanceConfig {
        block_size: 16,
        total_kv_blocks: 100,
        ..InstanceConfig::default()
    };
    let lat = LatencyModel::Linear(LinearModel {
        alpha: [0.0; 3],
        beta: [1000.0, 0.0, 0.0],
    });
    (
        vec![Instance::new(0, cfg, lat)],
        RequestStore::new(),
        EventQueue::new(),
    )
}

/// Queue a request of `input` prompt tokens (seed `seed`) on instance 0 at
/// `now`; returns its prompt's block hashes.
fn enqueue(
    inst: &mut [Instance],
    store: &mut RequestStore,
    q: &mut EventQueue,
    id: u64,
    seed: u64,
    input: u32,
    now: Tick,
) -> Vec<u64> {
    let slot = store.insert_with(|r| {
        r.id = id;
        r.input_len = input;
        r.output_len = 4;
        r.prompt = vec![Segment { seed, len: input }].into();
        r.instance = 0;
    });
    let mut h = Vec::new();
    crate::request::prompt_block_hashes(&store[slot], 16, &mut h);
    store[slot].prompt_hashes = h.clone();
    inst[0].on_queued(now, slot, store, q, &mut Nothing);
    h
}

/// With the batch size on a 50 ms schedule, a decision sees the batch as of
/// the last read (t = 0), until 50 ms have passed; the queue depth, live,
/// and the KV signals, live here, follow the instance at once. Running and
/// waiting token counts are exact.
#[test]
fn a_periodic_signal_is_the_value_of_its_last_read() {
    let (mut inst, mut store, mut q) = one_instance();
    let fresh = Freshness {
        queue_depth: 0,
        batch_size: 50_000,
        kv: 0,
        resident_adapters: 0,
    };
    let mut snaps = SnapshotProvider::with_labels(1, fresh, &InstanceLabels::default());
    let s0 = snaps.build(0, &inst, &[0])[0];
    assert_eq!((s0.queue_depth, s0.batch_size), (0, 0));

    enqueue(&mut inst, &mut store, &mut q, 0, 1, 160, 0);
    snaps.touched(0); // (as the cluster does after an instance event)
    let s = snaps.build(1_000, &inst, &[0])[0];
    assert_eq!(s.queue_depth, 1, "queue depth is live");
    // The step admits the request: batch 1, queue 0, 10 blocks in use.
    q.pop().unwrap();
    inst[0].on_step(2_000, &mut store, &mut q, &mut Nothing);
    assert_eq!((inst[0].queue_depth(), inst[0].batch_size()), (0, 1));
    enqueue(&mut inst, &mut store, &mut q, 1, 2, 48, 2_000);
    snaps.touched(0);
    let s = snaps.build(49_999, &inst, &[0])[0];
    assert_eq!(s.queue_depth, 1);
    assert_eq!(s.batch_size, 0, "batch size as of its last read, at t = 0");
    assert_eq!(s.kv_utilization, inst[0].kv_utilization(), "KV is live");
    assert!(s.kv_utilization > 0.0);
    // An observer's peek does not move the schedule.
    assert_eq!(snaps.peek(&inst, &[0])[0].batch_size, 0);
    let s = snaps.build(50_000, &inst, &[0])[0];
    assert_eq!(s.batch_size, 1, "re-read 50 ms after the last read");
    // The next read is due 50 ms after this one.
    inst[0].on_step(50_500, &mut store, &mut q, &mut Nothing);
    snaps.touched(0);
    assert_eq!(inst[0].batch_size(), 2);
    assert_eq!(snaps.build(99_999, &inst, &[0])[0].batch_size, 1);
    assert_eq!(snaps.build(100_000, &inst, &[0])[0].batch_size, 2);

    let info = snaps.build_info(&inst, &[2], &store)[0];
    assert_eq!(info.in_flight, 2);
    // Prompts 160 + 48, each with the tokens generated so far.
    let generated: u64 = inst[0]
        .running_slots()
        .iter()
        .map(|&s| u64::from(store[s].generated))
        .sum();
    assert_eq!(info.running_tokens, 208 + generated);
    assert_eq!(info.waiting_tokens, 0);
}

/// Waiting tokens count the prompts in the wait queue.
#[test]
fn waiting_tokens_sum_the_queued_prompts() {
    let (mut inst, mut store, mut q) = one_instance();
    enqueue(&mut inst, &mut store, &mut q, 0, 1, 160, 0);
    enqueue(&mut inst, &mut store, &mut q, 1, 2, 40, 0);
    let mut snaps = SnapshotProvider::new(1, 0);
    let info = snaps.build_info(&inst, &[2], &store)[0];
    assert_eq!((info.waiting_tokens, info.running_tokens), (200, 0));
    assert_eq!((info.kv_capacity_tokens, info.kv_tokens_in_use), (1600, 0));
}

/// The prefix-cache query: live, it sees the 10 blocks of a 160-token
/// prompt as soon as they are computed; with a 10 ms delay it answers from
/// the copy of time 0 (empty) until 10 ms into the run, then from the copy
/// taken at that decision. Only leading blocks count.
#[test]
fn the_prefix_query_is_as_old_as_the_cache_signal_delay() {
    let (mut inst, mut store, mut q) = one_instance();
    let mut live = CacheSignal::new(1, 0);
    let mut delayed = CacheSignal::new(1, 10_000);
    let h = enqueue(&mut inst, &mut store, &mut q, 0, 1, 160, 0);
    assert_eq!(h.len(), 10);
    assert_eq!(live.query(0, &inst, &h), &[0]);
    q.pop().unwrap();
    inst[0].on_step(0, &mut store, &mut q, &mut Nothing);
    assert_eq!(live.query(1, &inst, &h), &[10]);
    let mut other = h[..4].to_vec();
    other.extend([1, 2, h[5]]);
    assert_eq!(live.query(1, &inst, &other), &[4], "leading blocks only");

    assert_eq!(delayed.query(1, &inst, &h), &[0], "copy of time 0");
    assert_eq!(delayed.query(9_999, &inst, &h), &[0]);
    assert_eq!(delayed.query(10_000, &inst, &h), &[10], "copied at 10 ms");
    assert_eq!(delayed.query(10_001, &inst, &other), &[4]);
}

/// A decision re-reads the live signals of touched instances only; debug
/// builds check every other instance against a fresh read, so a change the
/// cluster did not report (`SnapshotProvider::touched`) cannot go unseen.
#[test]
#[cfg(debug_assertions)]
fn an_unreported_instance_change_is_caught() {
    let (mut inst, mut store, mut q) = one_instance();
    let mut snaps = SnapshotProvider::new(1, 0);
    assert_eq!(snaps.build(0, &inst, &[0])[0].queue_depth, 0);
    enqueue(&mut inst, &mut store, &mut q, 0, 1, 160, 0);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        snaps.build(1, &inst, &[0]);
    }))
    .expect_err("the unreported change is caught");
    let message = caught
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or_default();
    assert!(
        message.contains("changed without SnapshotProvider::touched"),
        "{message}"
    );
}

/// Only touched instances are re-read: an untouched one keeps its snapshot
/// (equal to a fresh read), a touched one gets the new values.
#[test]
fn touched_instances_are_re_read() {
    let (mut inst, mut store, mut q) = one_instance();
    let mut snaps = SnapshotProvider::new(1, 0);
    assert_eq!(snaps.build(0, &inst, &[0])[0].queue_depth, 0);
    assert_eq!(snaps.build(1, &inst, &[0])[0].queue_depth, 0);
    enqueue(&mut inst, &mut store, &mut q, 0, 1, 160, 0);
    snaps.touched(0);
    assert_eq!(snaps.build(2, &inst, &[0])[0].queue_depth, 1);
}

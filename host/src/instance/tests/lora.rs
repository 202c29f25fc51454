//! LoRA adapters on one instance, hand-computed with the linear model
//! (step = 1000 + 10·prefill tokens + 5·decode tokens, no alpha): cold
//! loads, LRU eviction of unpinned adapters, pins, batch formation
//! stopping at a non-resident adapter, and the step-time multiplier.
//!
//! Every load below moves `rank × 1000` bytes at 1000 bytes/µs after a
//! 500 µs base: rank 8 loads in 508 µs, rank 16 in 516 µs.

use super::harness::*;
use crate::instance::lora::{LoraConfig, OverheadTier};

const BETA: [f64; 3] = [1000.0, 10.0, 5.0];

fn lora(capacity: u32, ranks: &[u32], tiers: &[(u32, f64, f64)]) -> LoraConfig {
    LoraConfig {
        capacity,
        ranks: ranks.to_vec(),
        load_base_latency_us: 500.0,
        load_bandwidth_bytes_us: 1000.0,
        footprint_bytes_per_rank: 1000,
        tiers: tiers
            .iter()
            .map(|&(rank, k6, k7)| OverheadTier { rank, k6, k7 })
            .collect(),
    }
}

fn sim(l: LoraConfig) -> Sim {
    let mut s = Sim::new(config(16, 1000), linear([0.0; 3], BETA));
    s.inst.set_lora(l);
    s
}

/// A request with a unique prompt of `l` tokens, `n` outputs, `adapter`.
fn add(s: &mut Sim, at: i64, l: u32, n: u32, adapter: Option<u32>) -> u64 {
    let id = s.add_unique(at, l, n);
    let slot = s.slots[id as usize];
    s.store[slot].adapter = adapter.into();
    id
}

#[test]
fn load_time_formula() {
    let l = lora(1, &[8, 16, 1], &[]);
    assert_eq!(l.load_time(0), 508);
    assert_eq!(l.load_time(1), 516);
    assert_eq!(l.load_time(2), 501);
    // Fractions round up, twice: 0.5 + ⌈1.5⌉ = 2.5 → 3.
    let f = LoraConfig {
        load_base_latency_us: 0.5,
        load_bandwidth_bytes_us: 2.0,
        footprint_bytes_per_rank: 3,
        ..lora(1, &[1], &[])
    };
    assert_eq!(f.load_time(0), 3);
    // Never 0.
    let z = LoraConfig {
        load_base_latency_us: 0.0,
        load_bandwidth_bytes_us: 1e12,
        ..lora(1, &[1], &[])
    };
    assert_eq!(z.load_time(0), 1);
}

/// L = 20, N = 1 at t = 0: without adapter the prefill step 0..1200 gives
/// the first token at 1200; with a cold rank-8 adapter the step starts when
/// the load ends (508): first token at 1708, exactly 508 later. A second
/// request for the now resident adapter (t = 5000) loads nothing: 6200.
#[test]
fn cold_load_delays_first_token_by_the_load_time() {
    let mut base = sim(lora(1, &[8], &[]));
    add(&mut base, 0, 20, 1, None);
    base.run();
    assert_eq!(base.req(0).first_token_at, 1200);

    let mut s = sim(lora(1, &[8], &[]));
    add(&mut s, 0, 20, 1, Some(0));
    add(&mut s, 5000, 20, 1, Some(0));
    s.run();
    assert_eq!(s.req(0).first_token_at, 1708);
    assert_eq!(s.req(0).first_token_at - base.req(0).first_token_at, 508);
    assert_eq!(s.req(0).scheduled_at, 508);
    assert_eq!(s.req(1).first_token_at, 6200);
    let l = s.inst.lora().unwrap();
    assert_eq!(l.counts()[0].loads, 1);
    assert_eq!(l.counts()[0].evictions, 0);
    assert_eq!(l.resident(), vec![0]);
}

/// Capacity 2, one request at a time (each done within 2 ms): adapters 0
/// (t = 0), 1 (t = 10 ms), 0 again (t = 20 ms: warm, and now more recent
/// than 1), then 2 (t = 30 ms): the least recently used unpinned adapter
/// is 1, so 1 is evicted and 2 loaded; 0 stays.
#[test]
fn eviction_takes_the_lru_unpinned_adapter() {
    let mut s = sim(lora(2, &[8, 8, 8], &[]));
    add(&mut s, 0, 20, 1, Some(0));
    add(&mut s, 10_000, 20, 1, Some(1));
    add(&mut s, 20_000, 20, 1, Some(0));
    add(&mut s, 30_000, 20, 1, Some(2));
    s.run();
    assert_eq!(s.req(0).first_token_at, 1708);
    assert_eq!(s.req(1).first_token_at, 11_708);
    assert_eq!(s.req(2).first_token_at, 21_200); // warm
    assert_eq!(s.req(3).first_token_at, 31_708);
    let l = s.inst.lora().unwrap();
    assert_eq!(l.resident(), vec![0, 2]);
    let ev: Vec<u64> = l.counts().iter().map(|c| c.evictions).collect();
    let loads: Vec<u64> = l.counts().iter().map(|c| c.loads).collect();
    assert_eq!(ev, vec![0, 1, 0]);
    assert_eq!(loads, vec![1, 1, 1]);
}

/// Capacity 1: request 0 (adapter 0, N = 50) runs from 508 (its load) to
/// 1708 + 49·1005 = 50953. Request 1 (adapter 1) queued at 100 cannot
/// evict the pinned adapter 0 and waits; at 50953 adapter 0 is unpinned and
/// evicted, adapter 1 loads until 51461, and its prefill gives the first
/// token at 52661.
#[test]
fn a_pinned_adapter_is_not_evicted() {
    let mut s = sim(lora(1, &[8, 8], &[]));
    add(&mut s, 0, 20, 50, Some(0));
    add(&mut s, 100, 20, 1, Some(1));
    s.run();
    assert_eq!(s.req(0).completed_at, 50_953);
    assert_eq!(s.req(1).scheduled_at, 51_461);
    assert_eq!(s.req(1).first_token_at, 52_661);
    let l = s.inst.lora().unwrap();
    assert_eq!(l.counts()[0].evictions, 1);
    assert_eq!(l.resident(), vec![1]);
}

/// Adapter 0 warmed by request 0 (done at 1708). At 10 ms three requests
/// queue in FCFS order: 1 (adapter 0), 2 (adapter 1, cold), 3 (adapter 0).
/// The batch takes 1 and stops at 2, so 3 waits although its adapter is
/// resident: 1's prefill ends at 11200; then adapter 1 loads (11200 →
/// 11708) and 2 and 3 prefill together (40 tokens, 1400): 13108.
#[test]
fn batch_formation_stops_at_a_non_resident_adapter() {
    let mut s = sim(lora(2, &[8, 8], &[]));
    add(&mut s, 0, 20, 1, Some(0));
    add(&mut s, 10_000, 20, 1, Some(0));
    add(&mut s, 10_000, 20, 1, Some(1));
    add(&mut s, 10_000, 20, 1, Some(0));
    s.run();
    assert_eq!(s.req(1).scheduled_at, 10_000);
    assert_eq!(s.req(1).first_token_at, 11_200);
    for id in [2, 3] {
        assert_eq!(s.req(id).scheduled_at, 11_708);
        assert_eq!(s.req(id).first_token_at, 13_108);
    }
}

/// Tiers 8 {k6 0.1, k7 0.05} and 24 {k6 0.3, k7 0.2}. Warm-ups: adapter 0
/// (rank 8, exact tier: prefill 1200·1.1 = 1320) and adapter 1 (rank 16:
/// 8 away from both tiers, the lower one wins: also ·1.1). At 10 ms
/// requests with adapters 0 and 1 (L = 20, N = 2) share a batch: two
/// distinct adapters, r_max 16 → tier 8; the prefill step is
/// 1400·(1 + 0.1·2) = 1680 (first tokens at 11680), the decode-only step
/// 1010·(1 + 0.05·2) = 1111 (completion at 12791).
#[test]
fn step_time_multiplier_of_two_adapters_of_different_ranks() {
    let tiers = [(8, 0.1, 0.05), (24, 0.3, 0.2)];
    let mut s = sim(lora(2, &[8, 16], &tiers));
    add(&mut s, 0, 20, 1, Some(0));
    add(&mut s, 5_000, 20, 1, Some(1));
    add(&mut s, 10_000, 20, 2, Some(0));
    add(&mut s, 10_000, 20, 2, Some(1));
    s.run();
    assert_eq!(s.req(0).first_token_at, 508 + 1320);
    assert_eq!(s.req(1).first_token_at, 5_000 + 516 + 1320);
    for id in [2, 3] {
        assert_eq!(s.req(id).first_token_at, 11_680);
        assert_eq!(s.req(id).completed_at, 12_791);
    }
    // Without adapters the same batch costs 1400 and 1010.
    let l = lora(2, &[8, 16], &tiers);
    assert_eq!(l.step_factor(2, 16, true), 1.2);
    assert_eq!(l.step_factor(0, 0, true), 1.0);
    assert_eq!(l.step_factor(1, 30, false), 1.2); // nearest: 24
}

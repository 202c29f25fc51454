//! The CPU KV tier, by hand: mirrored blocks are reloaded at admission and
//! the next step is longer by exactly the reload cost; a block missing from
//! the CPU tier ends the reload chain. Linear model: step = 1000 + 10·prefill
//! tokens + 5·decode tokens, queueing delay 100, token overhead 50.

use super::harness::*;
use crate::instance::{InstanceConfig, KvOffloadConfig};

const ALPHA: [f64; 3] = [100.0, 0.0, 50.0];
const BETA: [f64; 3] = [1000.0, 10.0, 5.0];

/// 16-token blocks; bandwidth 0.2 tokens/µs and base 5 µs: a block reloads
/// in 5 + ⌈16 / 0.2⌉ = 85 µs.
fn with_cpu(gpu_blocks: u64, cpu_blocks: u64) -> InstanceConfig {
    InstanceConfig {
        kv_offload: Some(KvOffloadConfig {
            cpu_blocks,
            bandwidth_tokens_per_us: 0.2,
            base_latency_us: 5,
        }),
        ..config(16, gpu_blocks)
    }
}

/// A: 48-token prompt (3 full blocks) at 0, queued 100, step 100..1580
/// (1000 + 480); its 3 blocks are mirrored when that step ends. B: a unique
/// 64-token prompt at 2000 fills the 4 GPU blocks, evicting A's cached
/// blocks; its step 2100..3740 (1000 + 640) mirrors 4 more. C at 5000 repeats
/// A's 48 tokens plus 8 new ones: queued 5100, no GPU hit, 3 CPU hits
/// reloaded, 8 tokens computed: 1000 + 80 = 1080 plus 3 · 85 = 255 of
/// transfer, ending at 6435 (first token 6485).
///
/// For comparison: with GPU room for A's blocks C hits them on the GPU and its
/// step is the same minus the 255 µs (6180); with neither, it recomputes all
/// 56 tokens (1000 + 560, ending at 6660).
#[test]
fn cpu_hit_reloads_and_charges_the_next_step() {
    let run = |cfg: InstanceConfig| {
        let mut sim = Sim::new(cfg, linear(ALPHA, BETA));
        sim.add(0, &[seg(1, 48)], 1);
        sim.add_unique(2000, 63, 1);
        sim.add(5000, &[seg(1, 48), seg(99, 8)], 1);
        sim.run();
        sim
    };
    let tiered = run(with_cpu(4, 8));
    let c = tiered.req(2);
    assert_eq!(c.scheduled_at, 5100);
    assert_eq!(c.cached_tokens, 48);
    assert_eq!(c.first_token_at, 6485);
    assert_eq!(tiered.req(0).first_token_at, 1630);
    assert_eq!(tiered.req(1).first_token_at, 3780);
    let counts = tiered.inst.counts();
    let k = counts.kv_offload.unwrap();
    assert_eq!(k.hit_blocks, 3);
    assert_eq!(k.reloads, 1);
    assert_eq!(k.transfer_time, 255);
    // A's 3 and B's 3 full blocks; C's full blocks were already there.
    assert_eq!((k.mirrored_blocks, k.evictions), (6, 0));
    assert_eq!(tiered.inst.kv.cpu_used(), 6);
    // Hits in any tier count: 3 of A 2 + B 3 + C 3 looked-up blocks.
    assert_eq!(
        (counts.cache_hit_blocks, counts.cache_lookup_blocks),
        (3, 8)
    );

    let roomy = run(config(16, 100));
    assert_eq!(roomy.req(2).cached_tokens, 48);
    assert_eq!(roomy.req(2).first_token_at, 6485 - 255);
    assert_eq!(roomy.inst.counts().kv_offload, None);

    let gpu_only = run(config(16, 4));
    assert_eq!(gpu_only.req(2).cached_tokens, 0);
    assert_eq!(gpu_only.req(2).first_token_at, 6660 + 50);
}

/// Same workload with a 5-block CPU tier: B's 3 full blocks evict A's oldest
/// (block 0, mirrored first), so C's first block is in neither tier and
/// nothing is reloaded: C recomputes its 56 tokens (6660 + 50) and nothing is
/// charged. Mirroring C's 3 recomputed blocks then thrashes: each evicts the
/// oldest entry (A's blocks 1 and 2 — just before C stores them again — and
/// B's block 0): 9 mirrored, 4 evicted.
#[test]
fn chain_stops_at_the_first_block_missing_from_every_tier() {
    let mut sim = Sim::new(with_cpu(4, 5), linear(ALPHA, BETA));
    sim.add(0, &[seg(1, 48)], 1);
    sim.add_unique(2000, 63, 1);
    sim.add(5000, &[seg(1, 48), seg(99, 8)], 1);
    sim.run();
    assert_eq!(sim.req(2).cached_tokens, 0);
    assert_eq!(sim.req(2).first_token_at, 6710);
    let k = sim.inst.counts().kv_offload.unwrap();
    assert_eq!((k.hit_blocks, k.reloads, k.transfer_time), (0, 0, 0));
    assert_eq!((k.mirrored_blocks, k.evictions), (9, 4));
    assert_eq!(sim.inst.kv.cpu_used(), 5);
}

/// A chain mixing tiers: C's first block is still cached on the GPU, the
/// next two come from the CPU. GPU: 5 blocks; A uses blocks 0..=2 and releases
/// them last to first (queue 2, 1, 0); B (4 blocks) takes the never-used
/// blocks 3 and 4, then evicts 2 and 1. C hits block 0 on the GPU and reloads
/// 2 blocks: 1080 + 2 · 85 = 1250, ending at 6350 (token 6400).
#[test]
fn gpu_hit_then_cpu_hits() {
    let mut sim = Sim::new(with_cpu(5, 8), linear(ALPHA, BETA));
    sim.add(0, &[seg(1, 48)], 1);
    sim.add_unique(2000, 63, 1);
    sim.add(5000, &[seg(1, 48), seg(99, 8)], 1);
    sim.run();
    assert_eq!(sim.req(2).cached_tokens, 48);
    assert_eq!(sim.req(2).first_token_at, 6400);
    let k = sim.inst.counts().kv_offload.unwrap();
    assert_eq!((k.hit_blocks, k.reloads, k.transfer_time), (2, 1, 170));
    assert_eq!(sim.inst.counts().cache_hit_blocks, 3);
}

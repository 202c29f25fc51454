//! One instance at saturation: 20,000 requests arriving far faster than the
//! instance serves them (prompt and output lengths uniform in 1..=1023, mean
//! 512), linear latency model with realistic coefficients. Reports simulated
//! events per second of wall time.
//!
//! The `instance_step` group times one `Step` event in steady state: 256
//! requests running, prompts and outputs uniform in 256..768 (mean 512),
//! qwen3-14b on H100 (roofline), 2,048-token budget, 1,000,000 KV blocks,
//! with a wait queue refilled as requests complete (the refill, through
//! `on_queued`, is part of the timed step).
//!
//! The `decode_step` group times one `Step` of a decode-heavy batch (issue
//! 17): 16, 64 or 256 requests running (`max_num_seqs` = the batch),
//! 128-token prompts and 4,096-token outputs, so nearly every step is pure
//! decode apart from a completion and an admission every 4,096 / batch
//! steps; time per simulated step against the batch size, with 16-token KV
//! blocks (KV block boundaries: 2 requests in 16 per step), with
//! 1,024-token blocks (almost none), and with 16-token blocks and private
//! prompts, as the workload generator marks unique prompts (no block is
//! hashed or indexed, and decoders take their new blocks without being
//! touched).
//!
//! `CARGO_TARGET_DIR=/work/target-perf cargo bench -p blis-host --bench instance`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::{RngExt, SeedableRng};

use blis_host::engine::{Event, EventQueue, Tick};
use blis_host::instance::latency::{build_latency, LatencyKind, LatencySetup, LinearModel};
use blis_host::instance::{Instance, InstanceConfig, InstanceObserver, LatencyModel};
use blis_host::request::{Request, RequestStore, Segment, Slot};

const REQUESTS: u64 = 20_000;

/// Counts heap allocations (and reallocations) so the benchmark can show
/// that steps do not allocate once the simulation is warm.
struct CountingAlloc;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call unchanged to the system allocator.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Counts what the instance reports, as a metrics collector would.
#[derive(Default)]
struct Counter {
    tokens: u64,
    completed: u64,
    preemptions: u64,
    gap_sum: Tick,
    /// Slots that completed during the last event (the steady-state bench recycles them).
    finished: Vec<Slot>,
}

impl InstanceObserver for Counter {
    fn first_token(&mut self, _: u32, _: &Request, _: Tick) {
        self.tokens += 1;
    }
    fn token_gap(&mut self, _: u32, gap: Tick) {
        self.tokens += 1;
        self.gap_sum += gap;
    }
    fn completed(&mut self, _: u32, slot: Slot, _: &Request, _: Tick) {
        self.completed += 1;
        self.finished.push(slot);
    }
    fn dropped(&mut self, _: u32, _: Slot, _: &Request, _: Tick) {}
    fn preempted(&mut self, _: u32, _: &Request, _: Tick) {
        self.preemptions += 1;
    }
}

fn latency() -> LatencyModel {
    LatencyModel::Linear(LinearModel {
        alpha: [232.46, 1.7524, 3357.44],
        beta: [5752.71, 17.2509, 5.9991],
    })
}

/// The workload: 20,000 requests at 1,000 req/s (about 30 times what the
/// instance can serve), 10% of them sharing a 256-token system prompt.
fn workload() -> (RequestStore, EventQueue) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
    let mut store = RequestStore::new();
    let mut q = EventQueue::new();
    for id in 0..REQUESTS {
        let l: u32 = rng.random_range(1..1024);
        let n: u32 = rng.random_range(1..1024);
        let shared = rng.random_bool(0.1) && l > 256;
        let slot = store.insert_with(|r| {
            r.id = id;
            r.arrival = id as Tick * 1000;
            r.input_len = l;
            r.output_len = n;
            if shared {
                r.prompt.push(Segment { seed: 1, len: 256 });
                r.prompt.push(Segment {
                    seed: 100 + id,
                    len: l - 256,
                });
            } else {
                r.prompt.push(Segment {
                    seed: 100 + id,
                    len: l,
                });
            }
            r.output_seed = 1_000_000 + id;
            r.instance = 0;
        });
        q.push(
            id as Tick * 1000,
            Event::InstanceArrival { instance: 0, slot },
        );
    }
    (store, q)
}

/// Run to completion; returns (events executed, observer).
fn simulate(config: &InstanceConfig, mut store: RequestStore, mut q: EventQueue) -> (u64, Counter) {
    let mut inst = Instance::new(0, config.clone(), latency());
    let mut obs = Counter::default();
    let mut events = 0u64;
    while let Some(ev) = q.pop() {
        events += 1;
        match ev.event {
            Event::InstanceArrival { slot, .. } => {
                inst.on_arrival(ev.time, slot, &mut store, &mut q)
            }
            Event::Queued { slot, .. } => {
                inst.on_queued(ev.time, slot, &mut store, &mut q, &mut obs)
            }
            Event::Step { .. } => inst.on_step(ev.time, &mut store, &mut q, &mut obs),
            _ => unreachable!(),
        }
        // Recycle finished requests, as the cluster does.
        for slot in obs.finished.drain(..) {
            store.release(slot);
        }
    }
    assert_eq!(obs.completed, REQUESTS);
    (events, obs)
}

fn bench(c: &mut Criterion) {
    let configs = [
        (
            "kv_pressure_7463_blocks",
            InstanceConfig {
                total_kv_blocks: 7463,
                ..InstanceConfig::default()
            },
        ),
        (
            "ample_kv_1m_blocks",
            InstanceConfig {
                total_kv_blocks: 1_000_000,
                ..InstanceConfig::default()
            },
        ),
    ];
    let mut group = c.benchmark_group("instance_saturated_20k");
    group.sample_size(10);
    for (name, config) in configs {
        let (store, q) = workload();
        let allocs = ALLOCATIONS.load(Ordering::Relaxed);
        let start = std::time::Instant::now();
        let (events, obs) = simulate(&config, store, q);
        let wall = start.elapsed().as_secs_f64();
        let allocs = ALLOCATIONS.load(Ordering::Relaxed) - allocs;
        eprintln!(
            "{name}: {events} events, {} tokens, {} preemptions; one run {wall:.3} s wall, \
             {:.0} events/s; {allocs} heap allocations in the run ({:.4} per event)",
            obs.tokens,
            obs.preemptions,
            events as f64 / wall,
            allocs as f64 / events as f64,
        );
        group.throughput(Throughput::Elements(events));
        group.bench_function(name, |b| {
            b.iter_batched(
                workload,
                |(store, q)| simulate(&config, store, q),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

/// One instance kept at a full batch: every completed request is replaced
/// by a fresh one entering the wait queue, so the queue never runs dry.
struct Steady {
    inst: Instance,
    store: RequestStore,
    q: EventQueue,
    obs: Counter,
    rng: rand_chacha::ChaCha8Rng,
    next_id: u64,
    /// Prompt and output lengths are drawn from these ranges.
    prompts: std::ops::Range<u32>,
    outputs: std::ops::Range<u32>,
    /// Mark each prompt private from its start, as the workload generator
    /// marks a unique prompt (`Request::private_from`): its blocks are then
    /// neither hashed nor indexed, and decoders grow without being touched.
    private: bool,
}

impl Steady {
    /// Batch 256, prompts and outputs uniform in 256..768.
    fn new(kind: LatencyKind) -> Self {
        Self::with_shape(kind, 256, 256..768, 256..768, 16, false, 20_000)
    }

    /// `batch` running requests (`max_num_seqs`), lengths from the ranges,
    /// prompts private when `private`, `warm` steps before measuring.
    fn with_shape(
        kind: LatencyKind,
        batch: u32,
        prompts: std::ops::Range<u32>,
        outputs: std::ops::Range<u32>,
        block_size: u32,
        private: bool,
        warm: u32,
    ) -> Self {
        let latency = build_latency(&LatencySetup {
            total_kv_blocks: Some(1_000_000),
            hardware: Some("H100".into()),
            tp: Some(1),
            ..LatencySetup::new(kind, "qwen3-14b")
        })
        .expect("bundled qwen3-14b / H100")
        .model;
        let config = InstanceConfig {
            max_num_seqs: batch,
            block_size,
            ..InstanceConfig::default()
        };
        let mut s = Steady {
            inst: Instance::new(0, config, latency),
            store: RequestStore::new(),
            q: EventQueue::new(),
            obs: Counter::default(),
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(7),
            next_id: 0,
            prompts,
            outputs,
            private,
        };
        for _ in 0..batch + batch / 8 + 1 {
            s.enqueue(0);
        }
        // Warm up: fill the batch and let lengths desynchronise.
        for _ in 0..warm {
            s.step();
        }
        assert_eq!(s.inst.batch_size(), batch, "batch full in steady state");
        s
    }

    fn enqueue(&mut self, now: Tick) {
        let id = self.next_id;
        self.next_id += 1;
        let l: u32 = self.rng.random_range(self.prompts.clone());
        let n: u32 = self.rng.random_range(self.outputs.clone());
        let private = self.private;
        let slot = self.store.insert_with(|r| {
            r.id = id;
            r.arrival = now;
            r.input_len = l;
            r.output_len = n;
            r.prompt.push(Segment {
                seed: 100 + id,
                len: l,
            });
            r.output_seed = 1_000_000 + id;
            r.instance = 0;
            r.private_from = private.then_some(0).into();
        });
        self.inst
            .on_queued(now, slot, &mut self.store, &mut self.q, &mut self.obs);
    }

    /// Run the pending `Step` and refill the wait queue.
    fn step(&mut self) -> Tick {
        let ev = self.q.pop().expect("a step is always pending");
        self.inst
            .on_step(ev.time, &mut self.store, &mut self.q, &mut self.obs);
        while let Some(slot) = self.obs.finished.pop() {
            self.store.release(slot);
            self.enqueue(ev.time);
        }
        ev.time
    }
}

fn bench_step(c: &mut Criterion) {
    let mut g = c.benchmark_group("instance_step");
    g.throughput(Throughput::Elements(1));
    for (kind, name) in [
        (LatencyKind::RooflineV1, "batch_256_qwen3_14b_roofline"),
        (
            LatencyKind::TrainedPhysics,
            "batch_256_qwen3_14b_trained_physics",
        ),
    ] {
        let mut s = Steady::new(kind);
        let allocs = ALLOCATIONS.load(Ordering::Relaxed);
        let steps = 100_000;
        for _ in 0..steps {
            s.step();
        }
        eprintln!(
            "instance_step ({}): {} heap allocations in {steps} warm steps",
            kind.name(),
            ALLOCATIONS.load(Ordering::Relaxed) - allocs
        );
        g.bench_function(name, |b| b.iter(|| s.step()));
    }
    g.finish();
}

/// Decode-heavy steps: 128-token prompts, outputs of 4,096 tokens (± 64,
/// so completions spread out), at batch 16, 64 and 256; with 16-token KV
/// blocks (a step does the KV work of 2 requests in 16: a block filled, a
/// block taken) and with 1,024-token blocks (that work nearly gone, so what
/// remains is the step's own cost).
fn bench_decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode_step");
    g.throughput(Throughput::Elements(1));
    for (block_size, private) in [(16, false), (1024, false), (16, true)] {
        for batch in [16, 64, 256] {
            let mut s = Steady::with_shape(
                LatencyKind::RooflineV1,
                batch,
                128..129,
                4032..4160,
                block_size,
                private,
                10_000,
            );
            let name = match (block_size, private) {
                (16, false) => format!("batch_{batch}_out_4096"),
                (16, true) => format!("batch_{batch}_out_4096_private"),
                _ => format!("batch_{batch}_out_4096_block_{block_size}"),
            };
            g.bench_function(name, |b| b.iter(|| s.step()));
        }
    }
    g.finish();
}

criterion_group!(benches, bench, bench_step, bench_decode);
criterion_main!(benches);

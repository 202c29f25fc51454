//! The cluster event queue: one "hold" operation (pop the earliest event,
//! push its successor a little later), the access pattern of a simulation in
//! steady state, at the queue sizes runs actually see: ~16 and ~64 pending
//! events (one `Step` per instance plus requests in the admission/routing
//! pipeline) and 4,096 (a deep pipeline, e.g. long admission latencies).
//! Also a bulk fill-then-drain of 100,000 events.
//!
//! `CARGO_TARGET_DIR=/work/target-perf cargo bench -p blis-host --bench event_queue`

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use rand::{RngExt, SeedableRng};

use blis_host::engine::{Event, EventQueue, Tick};

/// Pre-drawn delays (µs) and event kinds, so the timed loop does not pay for the RNG.
fn draws(n: usize) -> Vec<(Tick, Event)> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    (0..n)
        .map(|i| {
            let instance = rng.random_range(0..16u32);
            let ev = match rng.random_range(0..8) {
                0 => Event::Admission(i as u32),
                1 => Event::Routing(i as u32),
                2 => Event::InstanceArrival {
                    instance,
                    slot: i as u32,
                },
                3 => Event::Queued {
                    instance,
                    slot: i as u32,
                },
                _ => Event::Step { instance },
            };
            // Step times of a few ms, pipeline delays of 0..100 µs, some ties.
            let dt = if matches!(ev, Event::Step { .. }) {
                rng.random_range(5_000..40_000)
            } else {
                rng.random_range(0..100)
            };
            (dt, ev)
        })
        .collect()
}

fn filled(size: usize, d: &[(Tick, Event)]) -> EventQueue {
    let mut q = EventQueue::new();
    for &(dt, ev) in d.iter().take(size) {
        q.push(dt, ev);
    }
    q
}

fn bench(c: &mut Criterion) {
    const DRAWS: usize = 1 << 16;
    let d = draws(DRAWS);

    let mut g = c.benchmark_group("event_queue");
    for size in [16usize, 64, 4096] {
        g.throughput(Throughput::Elements(1));
        g.bench_with_input(BenchmarkId::new("hold", size), &size, |b, &size| {
            let mut q = filled(size, &d);
            let mut i = 0usize;
            b.iter(|| {
                let e = q.pop().expect("non-empty");
                let (dt, ev) = d[i & (DRAWS - 1)];
                i += 1;
                q.push(e.time + dt, ev);
                e.time
            })
        });
    }
    const BULK: usize = 100_000;
    g.throughput(Throughput::Elements(BULK as u64));
    g.bench_function("fill_drain_100k", |b| {
        b.iter_batched(
            EventQueue::new,
            |mut q| {
                for k in 0..BULK {
                    let (dt, ev) = d[k & (DRAWS - 1)];
                    q.push(dt * 1000, ev);
                }
                let mut last = 0;
                while let Some(e) = q.pop() {
                    last = e.time;
                }
                last
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

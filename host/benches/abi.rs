//! Cost of policy calls through the plugin ABI (design.md: "a routing
//! decision through the ABI costs tens of nanoseconds; keep it so").
//!
//! Every call goes through the same path as in a run: the embedded standard
//! library's root module, the `#[sabi_trait]` object, the host's validated
//! handle (`ScorerPolicy::score` checks count and finiteness and clamps).
//! Benchmarks, for 16 instances:
//!
//! * `scorer/queue-depth` — one scorer call;
//! * `scorer/queue-depth/direct` — the same scorer called as plain Rust,
//!   without the ABI or the checks: the baseline the ABI adds to;
//! * `scorer/prefix-affinity` — one call with 32 block hashes against a
//!   warmed index;
//! * `weighted/3-scorers` — a whole weighted decision: three scorer calls,
//!   the weighted argmax, and `observe` on all three;
//! * `hook/on_event` — one lifecycle event delivered through the ABI (ABI
//!   0.2) to a policy: the cost a hook adds per request and event (a policy
//!   without hooks is never called).
//!
//! Run with `cargo bench -p blis-host --bench abi`.

use std::hint::black_box;

use blis_host::plugins::Registry;
use blis_plugin_api::abi_stable::std_types::RSlice;
use blis_plugin_api::{
    ClusterState, ClusterView, EventKind, InstanceInfo, Params, PolicyDef, RVec, RequestEvent,
    Scorer,
};
use criterion::{criterion_group, criterion_main, Criterion};

mod fixtures;
use fixtures::{request, snapshots, warmed_scorer, HASHES};

const INSTANCES: usize = 16;

fn bench(c: &mut Criterion) {
    let reg = Registry::standard();
    let snaps = snapshots(INSTANCES);
    let view = ClusterView {
        clock_us: 1_000,
        instances: RSlice::from_slice(&snaps),
    };
    let hashes: Vec<u64> = (0..HASHES).collect();
    let req = request(&hashes);

    let mut queue_depth = reg.scorer("queue-depth", "", 0).unwrap();
    c.bench_function("scorer/queue-depth", |b| {
        b.iter(|| {
            let s = queue_depth
                .score(black_box(&req), black_box(&view))
                .unwrap();
            black_box(s[0])
        })
    });

    let mut direct = blis_std::scorers::QueueDepth::create(Params::new(""), 0).unwrap();
    let mut out = RVec::with_capacity(INSTANCES);
    c.bench_function("scorer/queue-depth/direct", |b| {
        b.iter(|| {
            out.clear();
            direct.score(black_box(&req), black_box(&view), &mut out);
            black_box(out[0])
        })
    });

    let mut prefix = warmed_scorer(&reg, "prefix-affinity", &view);
    c.bench_function("scorer/prefix-affinity", |b| {
        b.iter(|| {
            let s = prefix.score(black_box(&req), black_box(&view)).unwrap();
            black_box(s[0])
        })
    });

    let mut scorers = [
        (3.0, warmed_scorer(&reg, "prefix-affinity", &view)),
        (2.0, reg.scorer("queue-depth", "", 0).unwrap()),
        (1.0, reg.scorer("kv-utilization", "", 0).unwrap()),
    ];
    let mut total = [0.0f64; INSTANCES];
    c.bench_function("weighted/3-scorers", |b| {
        b.iter(|| {
            let (req, view) = (black_box(&req), black_box(&view));
            total.fill(0.0);
            for (w, s) in &mut scorers {
                let scores = s.score(req, view).unwrap();
                for (t, x) in total.iter_mut().zip(scores) {
                    *t += *w * x;
                }
            }
            // Weighted argmax, ties to the lowest index.
            let mut best = 0;
            for i in 1..total.len() {
                if total[i] > total[best] {
                    best = i;
                }
            }
            let chosen = best as u32;
            for (_, s) in &mut scorers {
                s.observe(req, view, chosen).unwrap();
            }
            black_box(chosen)
        })
    });
}

fn bench_hook(c: &mut Criterion) {
    let reg = Registry::standard();
    let snaps = snapshots(INSTANCES);
    let info = vec![InstanceInfo::default(); INSTANCES];
    let state = ClusterState {
        view: ClusterView {
            clock_us: 1_000,
            instances: RSlice::from_slice(&snaps),
        },
        candidates: RSlice::from_slice(&[]),
        info: RSlice::from_slice(&info),
        prefix_blocks: RSlice::from_slice(&[]),
    };
    let event = RequestEvent {
        kind: EventKind::COMPLETED,
        instance: 3,
        time_us: 1_000,
        request: request(&[]),
        ttft_us: 120_000,
        e2e_us: 900_000,
        output_tokens: 200,
        reserved: 0,
    };
    let mut scorer = reg.scorer("queue-depth", "", 0).unwrap();
    c.bench_function("hook/on_event", |b| {
        b.iter(|| {
            scorer
                .on_event(black_box(&event), black_box(&state))
                .unwrap()
        })
    });
}

criterion_group!(benches, bench, bench_hook);
criterion_main!(benches);

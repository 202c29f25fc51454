//! One weighted routing decision through the plugin ABI: 16 instances, the
//! three standard scorers of the default weighted profile
//! (`prefix-affinity` 3, `queue-depth` 2, `kv-utilization` 2) from the
//! embedded `blis-std` library, a 512-token prompt (32 block hashes) whose
//! first 16 blocks come from one of 8 system prompts.
//!
//! * `route` — score (3 ABI calls), check, clamp, combine, argmax.
//! * `route_observe` — `route` plus the `observe` calls (the prefix scorer
//!   records the request's hashes in its LRU index): what the cluster pays
//!   per decision once the snapshots exist.
//! * `decision` — `route_observe` plus building the 16 snapshots from live
//!   instances, i.e. everything `Cluster::on_routing` does.
//!
//! * `routing_weighted_64x3_unique/route_observe` — 64 instances, every
//!   prompt unique (the situation of scenario e): the prefix scorer's
//!   observe inserts and evicts 32 hashes per decision.
//!
//! `CARGO_TARGET_DIR=/work/target-perf cargo bench -p blis-host --bench routing`

use abi_stable::std_types::{RSlice, RStr};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::{RngExt, SeedableRng};

use blis_host::cluster::{Routing, SnapshotProvider};
use blis_host::instance::latency::LinearModel;
use blis_host::instance::{Instance, InstanceConfig, LatencyModel};
use blis_host::plugins::Registry;
use blis_host::request::{prompt_block_hashes, Request, Segment};
use blis_plugin_api::{ClusterView, InstanceSnapshot, RequestView, SloClass};

const INSTANCES: usize = 16;
const POOL: usize = 1024;

fn routing() -> Routing {
    let reg = Registry::standard();
    let scorers = [
        ("prefix-affinity", 3.0),
        ("queue-depth", 2.0),
        ("kv-utilization", 2.0),
    ]
    .into_iter()
    .map(|(name, w)| (reg.scorer(name, "", 0).expect("standard scorer"), w))
    .collect();
    Routing::weighted(scorers, None)
}

/// Block hashes of `POOL` 512-token prompts (16 shared blocks, 16 unique).
fn hash_pool() -> Vec<Vec<u64>> {
    (0..POOL as u64)
        .map(|id| {
            let r = Request {
                input_len: 512,
                prompt: vec![
                    Segment {
                        seed: id % 8,
                        len: 256,
                    },
                    Segment {
                        seed: 100 + id,
                        len: 256,
                    },
                ]
                .into(),
                ..Request::default()
            };
            let mut h = Vec::new();
            prompt_block_hashes(&r, 16, &mut h);
            h
        })
        .collect()
}

fn snapshots() -> Vec<InstanceSnapshot> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    (0..INSTANCES)
        .map(|_| InstanceSnapshot {
            queue_depth: rng.random_range(0..20),
            batch_size: rng.random_range(100..256),
            pending_requests: rng.random_range(0..3),
            kv_utilization: rng.random_range(0.0..1.0),
            free_kv_blocks: rng.random_range(0..30_000),
            cache_hit_rate: rng.random_range(0.0..0.5),
            ..InstanceSnapshot::default()
        })
        .collect()
}

fn view(id: u64, hashes: &[u64]) -> RequestView<'_> {
    RequestView {
        id,
        arrival_us: id as i64,
        input_tokens: 512,
        slo_class: SloClass(1),
        tenant: RStr::from(""),
        block_hashes: RSlice::from_slice(hashes),
    }
}

fn bench(c: &mut Criterion) {
    let pool = hash_pool();
    let snaps = snapshots();
    let cluster = ClusterView {
        clock_us: 0,
        instances: RSlice::from_slice(&snaps),
    };
    let mut g = c.benchmark_group("routing_weighted_16x3");
    g.throughput(Throughput::Elements(1));

    let mut r = routing();
    // Warm the prefix index with every prompt.
    for (i, h) in pool.iter().enumerate() {
        let rv = view(i as u64, h);
        let chosen = r
            .route(&rv, &cluster, None)
            .expect("route")
            .chosen()
            .expect("routed");
        r.observe(&rv, &cluster, chosen).expect("observe");
    }
    let mut i = 0usize;
    g.bench_function("route", |b| {
        b.iter(|| {
            let rv = view(i as u64, &pool[i % POOL]);
            i += 1;
            r.route(&rv, &cluster, None).expect("route").chosen()
        })
    });
    g.bench_function("route_observe", |b| {
        b.iter(|| {
            let rv = view(i as u64, &pool[i % POOL]);
            i += 1;
            let chosen = r
                .route(&rv, &cluster, None)
                .expect("route")
                .chosen()
                .expect("routed");
            r.observe(&rv, &cluster, chosen).expect("observe");
            chosen
        })
    });

    let latency = LatencyModel::Linear(LinearModel {
        alpha: [0.0; 3],
        beta: [5000.0, 10.0, 5.0],
    });
    let instances: Vec<Instance> = (0..INSTANCES as u32)
        .map(|k| Instance::new(k, InstanceConfig::default(), latency.clone()))
        .collect();
    let pending = vec![0u32; INSTANCES];
    let mut provider = SnapshotProvider::new(INSTANCES, 50_000);
    let mut t = 0i64;
    g.bench_function("decision", |b| {
        b.iter(|| {
            t += 100;
            let snaps = provider.build(t, &instances, &pending);
            let cluster = ClusterView {
                clock_us: t,
                instances: RSlice::from_slice(snaps),
            };
            let rv = view(i as u64, &pool[i % POOL]);
            i += 1;
            let chosen = r
                .route(&rv, &cluster, None)
                .expect("route")
                .chosen()
                .expect("routed");
            r.observe(&rv, &cluster, chosen).expect("observe");
            chosen
        })
    });
    g.finish();

    // As in scenario (e): 64 instances and prompts that share nothing, so
    // every observe inserts 32 new hashes into the prefix scorer's index and
    // (once an instance's 10,000-hash LRU is full) evicts as many.
    let mut g = c.benchmark_group("routing_weighted_64x3_unique");
    g.throughput(Throughput::Elements(1));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let snaps: Vec<InstanceSnapshot> = (0..64)
        .map(|_| InstanceSnapshot {
            queue_depth: rng.random_range(0..2000),
            batch_size: 256,
            pending_requests: rng.random_range(0..3),
            kv_utilization: rng.random_range(0.5..1.0),
            free_kv_blocks: rng.random_range(0..5_000),
            cache_hit_rate: 0.0,
            ..InstanceSnapshot::default()
        })
        .collect();
    let cluster = ClusterView {
        clock_us: 0,
        instances: RSlice::from_slice(&snaps),
    };
    let mut r = routing();
    let mut id = 0u64;
    let mut hashes = vec![0u64; 32];
    let mut next = |hashes: &mut Vec<u64>| {
        id += 1;
        for (k, h) in hashes.iter_mut().enumerate() {
            *h = blis_host::request::mix64(id.wrapping_mul(1_000) + k as u64);
        }
        id
    };
    // Fill every instance's LRU first.
    for _ in 0..64 * 10_000 / 32 + 1_000 {
        let id = next(&mut hashes);
        let rv = view(id, &hashes);
        let chosen = r
            .route(&rv, &cluster, None)
            .expect("route")
            .chosen()
            .expect("routed");
        r.observe(&rv, &cluster, chosen).expect("observe");
    }
    g.bench_function("route_observe", |b| {
        b.iter(|| {
            let id = next(&mut hashes);
            let rv = view(id, &hashes);
            let chosen = r
                .route(&rv, &cluster, None)
                .expect("route")
                .chosen()
                .expect("routed");
            r.observe(&rv, &cluster, chosen).expect("observe");
            chosen
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

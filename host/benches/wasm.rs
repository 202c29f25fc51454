//! Cost of a WebAssembly scorer call against the same scorer native (issue
//! 31 must-show 4): the standard scorers `queue-depth`, `kv-utilization`
//! and `prefix-affinity` from blis-std and from the Rust component of
//! `examples/wasm` (`wasm-example::NAME`, the same formulas and index),
//! through the same validated handle a run uses, for 64 instances (the
//! `e-64x1m-weighted` cluster) and a prompt of 32 blocks:
//!
//! * `native/score/NAME`, `wasm/score/NAME` — one scorer call;
//! * `native/weighted-3`, `wasm/weighted-3` — a whole weighted decision:
//!   three scorer calls (prefix-affinity 3, queue-depth 2, kv-utilization 2),
//!   the weighted argmax and `observe` on all three.
//!
//! The component is `$BLIS_TEST_WASM_DIR/wasm-example.wasm` (built by
//! `examples/wasm/build.sh DIR`); without it the wasm benchmarks say they
//! skipped. Run with
//! `BLIS_TEST_WASM_DIR=DIR cargo bench -p blis-host --bench wasm`.

use std::hint::black_box;
use std::path::PathBuf;

use blis_host::plugins::{Registry, ScorerPolicy};
use blis_plugin_api::abi_stable::std_types::RSlice;
use blis_plugin_api::{ClusterView, RequestView};
use criterion::{criterion_group, criterion_main, Criterion};

mod fixtures;
use fixtures::{request, snapshots, warmed_scorer, HASHES};

const INSTANCES: usize = 64;

/// One weighted decision over `scorers`: the chosen instance.
fn decide(
    scorers: &mut [(f64, ScorerPolicy)],
    req: &RequestView<'_>,
    view: &ClusterView<'_>,
    total: &mut [f64],
) -> u32 {
    total.fill(0.0);
    for (w, s) in scorers.iter_mut() {
        let scores = s.score(req, view).unwrap();
        for (t, x) in total.iter_mut().zip(scores) {
            *t += *w * x;
        }
    }
    let mut best = 0;
    for i in 1..total.len() {
        if total[i] > total[best] {
            best = i;
        }
    }
    for (_, s) in scorers.iter_mut() {
        s.observe(req, view, best as u32).unwrap();
    }
    best as u32
}

fn bench(c: &mut Criterion) {
    let component = std::env::var_os("BLIS_TEST_WASM_DIR")
        .map(|d| PathBuf::from(d).join("wasm-example.wasm"))
        .filter(|p| p.exists());
    let Some(component) = component else {
        eprintln!(
            "skipped the wasm benchmarks: set BLIS_TEST_WASM_DIR to a folder holding \
             wasm-example.wasm (examples/wasm/build.sh DIR)"
        );
        return;
    };
    let mut reg = Registry::standard();
    reg.load(&component).unwrap();
    let snaps = snapshots(INSTANCES);
    let view = ClusterView {
        clock_us: 1_000,
        instances: RSlice::from_slice(&snaps),
    };
    let hashes: Vec<u64> = (0..HASHES).collect();
    let req = request(&hashes);

    for name in ["queue-depth", "kv-utilization", "prefix-affinity"] {
        for (route, full) in [
            ("native", format!("blis-std::{name}")),
            ("wasm", format!("wasm-example::{name}")),
        ] {
            let mut s = warmed_scorer(&reg, &full, &view);
            c.bench_function(&format!("{route}/score/{name}"), |b| {
                b.iter(|| {
                    let s = s.score(black_box(&req), black_box(&view)).unwrap();
                    black_box(s[0])
                })
            });
        }
    }

    for (route, lib) in [("native", "blis-std"), ("wasm", "wasm-example")] {
        let mut scorers = [
            (
                3.0,
                warmed_scorer(&reg, &format!("{lib}::prefix-affinity"), &view),
            ),
            (
                2.0,
                warmed_scorer(&reg, &format!("{lib}::queue-depth"), &view),
            ),
            (
                2.0,
                warmed_scorer(&reg, &format!("{lib}::kv-utilization"), &view),
            ),
        ];
        let mut total = [0.0f64; INSTANCES];
        c.bench_function(&format!("{route}/weighted-3"), |b| {
            b.iter(|| {
                black_box(decide(
                    &mut scorers,
                    black_box(&req),
                    black_box(&view),
                    &mut total,
                ))
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The KV cache of one instance: admitting a request (prefix lookup, attach
//! the hit blocks, allocate and hash the rest), growing it token by token
//! through its decode, and releasing it. Block size 16, 512-token prompts.
//!
//! * `admit_release/shared_prefix` — the first 256 prompt tokens come from
//!   one of 8 system prompts (16 blocks hit out of 32 once warm), the rest
//!   is unique; 20,000 blocks, so the free list wraps and cached blocks are
//!   evicted (index removals included).
//! * `admit_release/unique` — no prefix in common, same capacity.
//! * `decode_life` — admit a 512-token prompt, extend one token at a time
//!   for 512 output tokens (32 more blocks, each hashed from the output
//!   segment when it fills), release. One iteration = one request's life.
//!
//! `CARGO_TARGET_DIR=/work/target-perf cargo bench -p blis-host --bench kv`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use blis_host::instance::KvCache;
use blis_host::request::{prompt_block_hashes, Request, Segment};

const B: u32 = 16;
const PROMPT: u32 = 512;
const OUTPUT: u32 = 512;
/// Distinct requests cycled through (more than fit in the cache).
const POOL: u64 = 4096;

fn request(id: u64, shared: bool) -> Request {
    let mut r = Request {
        id,
        input_len: PROMPT,
        output_len: OUTPUT,
        output_seed: 1_000_000 + id,
        ..Request::default()
    };
    if shared {
        r.prompt.push(Segment {
            seed: id % 8,
            len: 256,
        });
        r.prompt.push(Segment {
            seed: 100 + id,
            len: PROMPT - 256,
        });
    } else {
        r.prompt.push(Segment {
            seed: 100 + id,
            len: PROMPT,
        });
    }
    let mut h = Vec::new();
    prompt_block_hashes(&r, B, &mut h);
    r.prompt_hashes = h;
    r
}

/// Admit with a prefix lookup and grant the uncached rest of the prompt.
#[inline]
fn admit(kv: &mut KvCache, r: &mut Request, hits: &mut Vec<u32>) -> u32 {
    let target = r.input_len;
    let lookup = kv.lookup(r, target - 1, hits);
    let cached = lookup.hits * B;
    let n = target - cached;
    assert!(kv.admit(r, lookup, hits, n), "cache large enough");
    cached + n
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("kv");
    g.throughput(Throughput::Elements(1));
    for (name, shared) in [
        ("admit_release/shared_prefix", true),
        ("admit_release/unique", false),
    ] {
        let mut reqs: Vec<Request> = (0..POOL).map(|id| request(id, shared)).collect();
        g.bench_function(name, |b| {
            let mut kv = KvCache::new(B, 20_000);
            let mut hits = Vec::new();
            let mut i = 0usize;
            b.iter(|| {
                let r = &mut reqs[i % POOL as usize];
                i += 1;
                let computed = admit(&mut kv, r, &mut hits);
                kv.release(&mut r.kv_blocks);
                computed
            })
        });
    }

    let mut reqs: Vec<Request> = (0..POOL).map(|id| request(id, true)).collect();
    g.throughput(Throughput::Elements(u64::from(OUTPUT)));
    g.bench_function("decode_life", |b| {
        let mut kv = KvCache::new(B, 20_000);
        let mut hits = Vec::new();
        let mut i = 0usize;
        b.iter(|| {
            let r = &mut reqs[i % POOL as usize];
            i += 1;
            let mut computed = admit(&mut kv, r, &mut hits);
            for _ in 0..OUTPUT - 1 {
                assert!(kv.extend(r, computed, 1));
                computed += 1;
            }
            kv.release(&mut r.kv_blocks);
            computed
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The KV cache on its own: transactional allocation, LRU reuse, the
//! one-live-block-per-hash index, output-block hashing.

use crate::instance::kv::{KvCache, Lookup};
use crate::request::{prompt_block_hashes, OptIdx, Request, Segment};

fn request(id: u64, prompt: &[Segment], n: u32, b: u32) -> Request {
    let mut r = Request {
        id,
        input_len: prompt.iter().map(|s| s.len).sum(),
        output_len: n,
        prompt: prompt.to_vec().into(),
        output_seed: 77 + id,
        ..Request::default()
    };
    let mut h = Vec::new();
    prompt_block_hashes(&r, b, &mut h);
    r.prompt_hashes = h;
    r
}

fn seg(seed: u64, len: u32) -> Segment {
    Segment { seed, len }
}

/// Admit `r` with whatever the cache holds for its first `max_tokens` tokens,
/// then `n` more tokens.
fn admit(kv: &mut KvCache, r: &mut Request, max_tokens: u32, n: u32) -> (bool, Lookup) {
    let mut hits = Vec::new();
    let lk = kv.lookup(r, max_tokens, &mut hits);
    (kv.admit(r, lk, &hits, n), lk)
}

#[test]
fn failed_allocation_changes_nothing() {
    let mut kv = KvCache::new(4, 3);
    let mut a = request(0, &[seg(1, 8)], 10, 4);
    assert!(admit(&mut kv, &mut a, 0, 8).0);
    assert_eq!((kv.used(), kv.free()), (2, 1));
    let mut b = request(1, &[seg(2, 12)], 1, 4);
    assert!(!admit(&mut kv, &mut b, 0, 12).0);
    assert!(b.kv_blocks.is_empty());
    assert_eq!((kv.used(), kv.free(), kv.blocks_ever_used()), (2, 1, 2));
    // Extending a by 5 tokens needs 2 blocks; only 1 is free.
    assert!(!kv.extend(&mut a, 8, 5));
    assert_eq!(a.kv_blocks.len(), 2);
    assert!(kv.extend(&mut a, 8, 4));
    assert_eq!((kv.used(), kv.free()), (3, 0));
    kv.check().unwrap();
    kv.release(&mut a.kv_blocks);
    assert_eq!((kv.used(), kv.free()), (0, 3));
    kv.check().unwrap();
}

#[test]
fn never_used_blocks_first_then_lru_head() {
    let mut kv = KvCache::new(4, 4);
    let mut a = request(0, &[seg(1, 8)], 1, 4);
    assert!(admit(&mut kv, &mut a, 0, 8).0); // blocks 0, 1
    kv.release(&mut a.kv_blocks); // LRU: [1, 0] (released last to first)
    let mut others = Vec::new();
    for (i, want) in [(1u64, 2u32), (2, 3), (3, 1)] {
        let mut r = request(i, &[seg(10 + i, 4)], 1, 4);
        assert!(admit(&mut kv, &mut r, 0, 4).0);
        assert_eq!(r.kv_blocks, vec![want]);
        others.push(r);
    }
    // a's first block survived, its second was evicted.
    let mut a2 = request(0, &[seg(1, 8)], 1, 4);
    let mut hits = Vec::new();
    let lk = kv.lookup(&a2, 8, &mut hits);
    assert_eq!((lk.hits, lk.hits_free, lk.candidates), (1, 1, 2));
    assert_eq!(hits, vec![0]);
    // Attaching the cached block and one fresh block needs 2 free blocks; 1 is free.
    assert!(!kv.admit(&mut a2, lk, &hits, 4));
    assert_eq!((kv.refs_of(0), kv.used(), kv.hit_blocks()), (0, 3, 0));
    kv.check().unwrap();
    kv.release(&mut others[0].kv_blocks);
    assert!(kv.admit(&mut a2, lk, &hits, 4));
    assert_eq!(kv.refs_of(0), 1);
    assert_eq!(a2.kv_blocks, vec![0, 2]);
    assert_eq!((kv.hit_blocks(), kv.lookup_blocks()), (1, 2));
    kv.check().unwrap();
}

#[test]
fn partial_blocks_are_recycled_before_cached_ones() {
    let mut kv = KvCache::new(4, 3);
    let mut a = request(0, &[seg(1, 6)], 1, 4);
    assert!(admit(&mut kv, &mut a, 0, 6).0); // block 0 full (hashed), block 1 partial
    kv.release(&mut a.kv_blocks);
    let mut b = request(1, &[seg(2, 12)], 1, 4);
    assert!(admit(&mut kv, &mut b, 0, 12).0); // never-used 2, then 1 (partial), then 0
    assert_eq!(b.kv_blocks, vec![2, 1, 0]);
    kv.check().unwrap();
}

#[test]
fn shared_blocks_are_reference_counted() {
    let mut kv = KvCache::new(4, 10);
    let mut a = request(0, &[seg(1, 8), seg(2, 3)], 1, 4);
    let mut b = request(1, &[seg(1, 8), seg(3, 3)], 1, 4);
    assert!(admit(&mut kv, &mut a, 10, 11).0);
    let (ok, lk) = admit(&mut kv, &mut b, 10, 3);
    assert!(ok);
    assert_eq!((lk.hits, lk.hits_free), (2, 0));
    assert_eq!(b.kv_blocks[..2], a.kv_blocks[..2]);
    assert_eq!(kv.used(), 4);
    assert_eq!(kv.refs_of(a.kv_blocks[0]), 2);
    kv.release(&mut a.kv_blocks);
    assert_eq!(kv.used(), 3);
    kv.release(&mut b.kv_blocks);
    assert_eq!(kv.used(), 0);
    kv.check().unwrap();
}

/// Two live copies of one prefix: the index keeps the first; evicting either
/// never removes an entry that points at another block.
#[test]
fn one_live_block_per_hash() {
    let mut kv = KvCache::new(4, 2);
    let p = [seg(5, 4)];
    let mut a = request(0, &p, 1, 4);
    let mut b = request(1, &p, 1, 4);
    // Both computed from scratch (no lookup), so both blocks carry the hash.
    assert!(kv.admit(&mut a, Lookup::default(), &[], 4));
    assert!(kv.admit(&mut b, Lookup::default(), &[], 4));
    let mut hits = Vec::new();
    assert_eq!(kv.lookup(&a, 4, &mut hits).hits, 1);
    assert_eq!(hits, vec![0]);
    kv.release(&mut a.kv_blocks);
    kv.release(&mut b.kv_blocks); // LRU [0, 1]
    let mut c = request(2, &[seg(6, 4)], 1, 4);
    assert!(kv.admit(&mut c, Lookup::default(), &[], 4)); // evicts block 0
    assert_eq!(c.kv_blocks, vec![0]);
    kv.check().unwrap();
    // Block 1 still carries the hash but the index forgot it with block 0.
    assert_eq!(kv.lookup(&a, 4, &mut hits).hits, 0);
    let mut d = request(3, &[seg(7, 4)], 1, 4);
    assert!(kv.admit(&mut d, Lookup::default(), &[], 4)); // evicts block 1
    kv.check().unwrap();
}

/// A live recomputation of a prefix whose only cached copy is free takes
/// over the index entry; the stale copy is recycled first.
#[test]
fn live_copy_replaces_free_copy_in_index() {
    let mut kv = KvCache::new(4, 3);
    let p = [seg(5, 4)];
    let mut a = request(0, &p, 1, 4);
    assert!(kv.admit(&mut a, Lookup::default(), &[], 4)); // block 0
    kv.release(&mut a.kv_blocks);
    let mut b = request(1, &p, 1, 4);
    assert!(kv.admit(&mut b, Lookup::default(), &[], 4)); // never-used block 1
    assert_eq!(b.kv_blocks, vec![1]);
    let mut hits = Vec::new();
    kv.lookup(&a, 4, &mut hits);
    assert_eq!(hits, vec![1]);
    let mut c = request(2, &[seg(9, 8)], 1, 4);
    assert!(kv.admit(&mut c, Lookup::default(), &[], 8)); // never-used 2, then stale 0
    assert_eq!(c.kv_blocks, vec![2, 0]);
    kv.check().unwrap();
}

/// Blocks filled by output tokens are hashed like the same tokens in a later
/// prompt (a session's next round), so the next round hits them.
#[test]
fn output_blocks_serve_next_session_round() {
    let b = 4;
    let mut kv = KvCache::new(b, 20);
    let mut r1 = request(0, &[seg(1, 6)], 10, b);
    assert!(kv.admit(&mut r1, Lookup::default(), &[], 6));
    // Decode: one token at a time up to 15 computed tokens (L + N − 1).
    for computed in 6..15 {
        assert!(kv.extend(&mut r1, computed, 1));
    }
    assert_eq!(r1.kv_blocks.len(), 4);
    kv.release(&mut r1.kv_blocks);
    let next = request(1, &[seg(1, 6), seg(r1.output_seed, 10), seg(2, 5)], 3, b);
    let mut hits = Vec::new();
    let lk = kv.lookup(&next, next.input_len - 1, &mut hits);
    // 15 computed tokens = 3 full blocks (the 4th held 3 tokens).
    assert_eq!(lk.hits, 3);
    assert_eq!(lk.candidates, 5);
    kv.check().unwrap();
}

/// Hits on cached blocks leave stale entries in the eviction queue; the queue
/// stays bounded (compaction) and eviction stays least-recently-freed first.
#[test]
fn repeated_hits_on_cached_blocks_keep_lru_order_and_bounded_queue() {
    let mut kv = KvCache::new(4, 16);
    let mut q = request(0, &[seg(1, 32)], 1, 4);
    let mut p = request(1, &[seg(2, 32)], 1, 4);
    assert!(admit(&mut kv, &mut q, 0, 32).0);
    assert!(admit(&mut kv, &mut p, 0, 32).0);
    kv.release(&mut q.kv_blocks); // Q freed first
    kv.release(&mut p.kv_blocks);
    for round in 0..100 {
        let (ok, lk) = admit(&mut kv, &mut p, 32, 0);
        assert!(ok);
        assert_eq!((lk.hits, lk.hits_free), (8, 8), "round {round}");
        kv.release(&mut p.kv_blocks);
        kv.check().unwrap();
        assert!(kv.queue_len() <= 2 * 16 + 64, "queue {}", kv.queue_len());
    }
    // A new prompt evicts Q's blocks (freed least recently), not P's.
    let mut r = request(2, &[seg(3, 32)], 1, 4);
    assert!(admit(&mut kv, &mut r, 0, 32).0);
    kv.check().unwrap();
    let mut hits = Vec::new();
    assert_eq!(kv.lookup(&q, 32, &mut hits).hits, 0);
    assert_eq!(kv.lookup(&p, 32, &mut hits).hits, 8);
}

/// Private blocks by hand (B = 4, 6 blocks): a request whose content is its
/// own from token 4 on holds an id and an index entry for its first block
/// only, and two anonymous blocks; completed, its blocks enter the eviction
/// queue in the usual order (last to first): the two private ones as one
/// anonymous run, then the shared one. Evictions then take them in that
/// order exactly as if they had ids, and the shared first block survives
/// longest.
#[test]
fn private_blocks_are_anonymous_and_keep_their_eviction_order() {
    let b = 4;
    let mut kv = KvCache::new(b, 6);
    let mut a = request(0, &[seg(1, 4), seg(2, 8)], 1, b);
    a.private_from = OptIdx::some(4);
    assert_eq!(kv.first_private(&a), 1);
    let hashes = a.prompt_hashes.clone();
    assert!(admit(&mut kv, &mut a, 11, 12).0);
    assert_eq!((a.kv_blocks.clone(), a.kv_private), (vec![0], 2));
    assert_eq!(
        (kv.used(), kv.anon_held(), kv.blocks_ever_used()),
        (3, 2, 1)
    );
    kv.check().unwrap();
    a.computed = 12;
    // Only the shared block is in the index, while running and after.
    assert_eq!(kv.cached_leading_blocks(&hashes), 1);
    kv.release_final(&mut a);
    assert_eq!((a.kv_held(), kv.anon_held()), (0, 0));
    // Two queue entries: the run of two private blocks, then block 0.
    assert_eq!((kv.used(), kv.free(), kv.queue_len()), (0, 6, 2));
    assert_eq!(kv.cached_leading_blocks(&hashes), 1);
    kv.check().unwrap();
    // Another request with the same prefix hits the shared block only.
    let twin = request(1, &[seg(1, 4), seg(2, 8)], 1, b);
    let mut hits = Vec::new();
    assert_eq!(kv.lookup(&twin, 11, &mut hits).hits, 1);
    assert_eq!(hits, vec![0]);
    // The three blank blocks first (new ids 1, 2, 3), then the queue head:
    // the two private blocks (no index entry to remove; they get new ids),
    // then block 0, the shared one.
    let mut c = request(2, &[seg(3, 12)], 1, b);
    assert!(admit(&mut kv, &mut c, 0, 12).0);
    assert_eq!(c.kv_blocks, vec![1, 2, 3]);
    let mut d = request(3, &[seg(4, 8)], 1, b);
    assert!(admit(&mut kv, &mut d, 0, 8).0);
    assert_eq!(d.kv_blocks, vec![4, 5]);
    assert_eq!(kv.cached_leading_blocks(&hashes), 1);
    kv.check().unwrap();
    let mut e = request(4, &[seg(5, 4)], 1, b);
    assert!(admit(&mut kv, &mut e, 0, 4).0);
    assert_eq!(e.kv_blocks, vec![0]);
    assert_eq!(kv.cached_leading_blocks(&hashes), 0);
    kv.check().unwrap();
}

/// A private request admitted into a full cache takes its anonymous blocks
/// from the eviction queue in order, an indexed block's id becoming dead
/// (kept for reuse) and an anonymous run shrinking one block at a time; a
/// partial private block comes back blank.
#[test]
fn private_blocks_evict_in_queue_order_and_recycle_dead_ids() {
    let b = 4;
    let mut kv = KvCache::new(b, 4);
    // An ordinary request caches blocks 0 and 1 (indexed).
    let mut p = request(0, &[seg(1, 8)], 1, b);
    let p_hashes = p.prompt_hashes.clone();
    assert!(admit(&mut kv, &mut p, 0, 8).0);
    p.computed = 8;
    // A private one holds two anonymous blocks, one of them partial.
    let mut q = request(1, &[seg(2, 6)], 1, b);
    q.private_from = OptIdx::some(0);
    assert!(admit(&mut kv, &mut q, 0, 6).0);
    assert_eq!((q.kv_blocks.len(), q.kv_private), (0, 2));
    q.computed = 6;
    kv.release_final(&mut p); // queue: 1, 0
    kv.release_final(&mut q); // queue: 1, 0, run(1); the partial one is blank
    assert_eq!((kv.free(), kv.queue_len()), (4, 3));
    kv.check().unwrap();
    // Three private blocks: the blank one, then blocks 1 and 0 (evicted:
    // their ids become dead, their hashes leave the index).
    let mut r = request(2, &[seg(3, 12)], 1, b);
    r.private_from = OptIdx::some(0);
    assert!(admit(&mut kv, &mut r, 0, 12).0);
    assert_eq!(
        (r.kv_private, kv.free(), kv.cached_leading_blocks(&p_hashes)),
        (3, 1, 0)
    );
    kv.check().unwrap();
    // The last free block is the run's; a request that needs an id gets a
    // dead one back (no new id).
    let mut s = request(3, &[seg(4, 4)], 1, b);
    assert!(admit(&mut kv, &mut s, 0, 4).0);
    assert_eq!((kv.free(), kv.blocks_ever_used()), (0, 2));
    assert!(s.kv_blocks[0] < 2);
    kv.check().unwrap();
    // Published, the private blocks get ids (two more) and index entries.
    r.computed = 12;
    kv.release_returning(&mut r);
    assert_eq!(
        (r.kv_private, kv.anon_held(), kv.blocks_ever_used()),
        (0, 0, 4)
    );
    assert_eq!(kv.cached_leading_blocks(&r.prompt_hashes), 3);
    kv.check().unwrap();
}

/// A private request that gives its blocks up (a preemption,
/// `release_returning`) has them hashed and indexed first: it hits its own blocks when it comes back,
/// as every block of a request without private content would.
#[test]
fn published_private_blocks_are_hit_again() {
    let b = 4;
    let mut kv = KvCache::new(b, 8);
    let mut p = request(0, &[seg(9, 10)], 3, b);
    p.private_from = OptIdx::some(0);
    let hashes = p.prompt_hashes.clone();
    assert!(admit(&mut kv, &mut p, 9, 10).0);
    assert_eq!((p.kv_blocks.len(), p.kv_private), (0, 3));
    p.computed = 10;
    assert_eq!(kv.cached_leading_blocks(&hashes), 0);
    kv.release_returning(&mut p);
    assert_eq!(p.private_from.get(), None);
    assert_eq!(kv.cached_leading_blocks(&hashes), 2); // the two full blocks
    kv.check().unwrap();
    p.computed = 0;
    let mut hits = Vec::new();
    let lk = kv.lookup(&p, 9, &mut hits);
    assert_eq!((lk.hits, lk.hits_free), (2, 2));
    assert!(kv.admit(&mut p, lk, &hits, 2));
    kv.check().unwrap();
}

//! A request as the simulator carries it from the workload to the report.
//!
//! Prompts are not token arrays. A prompt is a list of [`Segment`]s (a shared
//! prefix, the context of earlier session rounds, a unique part), each standing
//! for `len` tokens whose content is a pure function of the segment's `seed`
//! and the position inside it. Generated output is one more segment. Block
//! hashes are then computed from segment runs without materialising token ids,
//! and two requests get identical leading block hashes exactly when their
//! leading tokens are identical (same segments, same alignment).
//!
//! The same hash chain serves the instance KV cache (prefix caching) and the
//! router-side prefix index, so the two agree on what "the same prefix" means.

use crate::engine::Tick;
pub use crate::prompt::{Prompt, SegmentLog};

/// `len` tokens whose content is determined by `seed` (token `i` of the
/// segment is a function of `(seed, i)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    pub seed: u64,
    pub len: u32,
}

/// An optional `u32` index in 4 bytes (`Option<u32>` takes 8): the
/// request record carries three of them (adapter, model, private-from
/// offset), and a run holds up to a slab of a million records, so the
/// saving keeps a run without LoRA or several models exactly as large as
/// before those fields existed. `u32::MAX` means none; no index reaches it
/// (adapters, models and prompt lengths are far below 2³²−1).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OptIdx(u32);

impl OptIdx {
    /// No index.
    pub const NONE: OptIdx = OptIdx(u32::MAX);

    /// The index `i` (`i < u32::MAX`).
    #[inline]
    pub fn some(i: u32) -> OptIdx {
        debug_assert!(i != u32::MAX, "index {i} is the none sentinel");
        OptIdx(i)
    }

    /// The index, if any.
    #[inline]
    pub fn get(self) -> Option<u32> {
        (self.0 != u32::MAX).then_some(self.0)
    }

    #[inline]
    pub fn is_some(self) -> bool {
        self.0 != u32::MAX
    }

    #[inline]
    pub fn is_none(self) -> bool {
        self.0 == u32::MAX
    }
}

impl Default for OptIdx {
    fn default() -> Self {
        OptIdx::NONE
    }
}

impl From<Option<u32>> for OptIdx {
    #[inline]
    fn from(o: Option<u32>) -> Self {
        o.map_or(OptIdx::NONE, OptIdx::some)
    }
}

impl std::fmt::Debug for OptIdx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// Service class of a request (from the workload). Maps to a scheduling priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SloClass {
    Critical,
    #[default]
    Standard,
    Batch,
    Sheddable,
    Background,
}

impl SloClass {
    /// All classes, in report order.
    pub const ALL: [SloClass; 5] = [
        SloClass::Critical,
        SloClass::Standard,
        SloClass::Batch,
        SloClass::Sheddable,
        SloClass::Background,
    ];

    /// The name used in run files, traces and the report.
    pub fn name(self) -> &'static str {
        match self {
            SloClass::Critical => "critical",
            SloClass::Standard => "standard",
            SloClass::Batch => "batch",
            SloClass::Sheddable => "sheddable",
            SloClass::Background => "background",
        }
    }

    /// Parse a class name (the reference's v1 names `realtime` and `interactive`
    /// are accepted as `critical` and `standard`).
    pub fn parse(s: &str) -> Option<SloClass> {
        Some(match s {
            "critical" | "realtime" => SloClass::Critical,
            "standard" | "interactive" | "" => SloClass::Standard,
            "batch" => SloClass::Batch,
            "sheddable" => SloClass::Sheddable,
            "background" => SloClass::Background,
            _ => return None,
        })
    }

    /// Scheduling priority: critical 4, standard 3, batch −1, sheddable −2,
    /// background −3 (negative = sheddable).
    pub fn priority(self) -> i32 {
        match self {
            SloClass::Critical => 4,
            SloClass::Standard => 3,
            SloClass::Batch => -1,
            SloClass::Sheddable => -2,
            SloClass::Background => -3,
        }
    }

    /// Stable small integer used across the plugin ABI.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// Where a request is in its life. Transitions (INV-2):
/// `Pipeline → Queued → Running → Completed`, `Running → Queued` on
/// preemption, `Pipeline → Rejected` at admission, `Pipeline → Dropped` at
/// enqueue when the request can never be served; with P/D disaggregation
/// `Running → Transferring → Queued` between the prefill and the decode
/// instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RequestState {
    /// Between cluster arrival and the instance's wait queue (admission,
    /// routing, alpha queueing delay).
    #[default]
    Pipeline,
    Queued,
    Running,
    Completed,
    Rejected,
    Dropped,
    /// P/D disaggregation: the prefill finished on one instance and the
    /// prompt's KV is on its way to the decode instance
    /// (`Running → Transferring → Queued`, or `→ Dropped` when the decode
    /// instance cannot take it).
    Transferring,
}

impl RequestState {
    /// Name used in the per-request results file.
    pub fn name(self) -> &'static str {
        match self {
            RequestState::Pipeline => "in_pipeline",
            RequestState::Queued => "queued",
            RequestState::Running => "running",
            RequestState::Completed => "completed",
            RequestState::Rejected => "rejected",
            RequestState::Dropped => "dropped",
            RequestState::Transferring => "in_transfer",
        }
    }
}

/// Timestamp value meaning "has not happened".
pub const UNSET: Tick = -1;

/// One request: what the workload generated plus its lifecycle state.
///
/// Identity and content are set by the workload; the lifecycle fields are
/// written by the cluster (routing) and by the instance engine.
#[derive(Clone, Debug, Default)]
pub struct Request {
    // ---- identity and content (workload) ----
    /// Position in arrival order, 0-based; unique in a run.
    pub id: u64,
    /// Cluster arrival time. Never modified; every latency is measured from it.
    pub arrival: Tick,
    /// Prompt length L in tokens (shared prefix and session context included).
    pub input_len: u32,
    /// Output length N in tokens (the simulator knows it in advance).
    pub output_len: u32,
    /// Prompt content; the segment lengths add up to `input_len`. A round
    /// of an accumulating session holds a view of its session's segment log
    /// (shared with the other rounds, see [`crate::prompt`]).
    pub prompt: Prompt,
    /// Content seed of the generated tokens (an implicit segment of length N).
    pub output_seed: u64,
    /// Index of the client (in workload order) that generated the request.
    pub client: u32,
    /// Interned tenant id (index into the workload's tenant names).
    pub tenant: u32,
    pub slo_class: SloClass,
    /// Multi-turn session this request belongs to, and its round (0-based).
    pub session: Option<(u32, u32)>,
    /// Stream offset from which the content is this request's alone, when
    /// the workload guarantees it (a fresh random segment that no other
    /// request, and no later session round, repeats): every block reaching
    /// past it has a hash no other request can produce, so the KV cache
    /// skips hashing and indexing those blocks (see `instance::kv`).
    /// `None` (the default) when content may be shared anywhere.
    pub private_from: OptIdx,
    /// LoRA adapter the request runs with: an index into the workload's
    /// adapter names ([`crate::workload::Workload::adapter_names`], which a
    /// run with `[lora]` checks against `[lora].adapters`); `None` = the
    /// base model. A trace replay sets it from its `adapter` column.
    pub adapter: OptIdx,
    /// Base model the request asks for: an index into the workload's model
    /// names ([`crate::workload::Workload::model_names`]); `None` = the
    /// run's default model (`[model].name`). A client's `model` or a trace
    /// row's `model` column sets it.
    pub model: OptIdx,
    /// The prompt has multimodal input (images, audio, video): a client's
    /// `multimodal` sets it; the encode stage of `[[pools]]` runs for such
    /// requests. (A flag, not a token count: nothing blis simulates reads
    /// the count, and a flag fits the record's last free byte.)
    pub multimodal: bool,

    // ---- lifecycle (cluster and instance) ----
    pub state: RequestState,
    /// Instance chosen by routing (`u32::MAX` before routing).
    pub instance: u32,
    /// Prompt block hashes (full blocks only), filled at routing.
    pub prompt_hashes: Vec<u64>,
    /// Tokens whose KV is computed (prompt, and outputs recomputed after a preemption).
    pub computed: u32,
    /// Output tokens emitted so far (the client has seen this many).
    pub generated: u32,
    /// Tokens granted in the step currently running (0 when not in a batch).
    pub granted: u32,
    /// Time the request entered the wait queue (first time).
    pub enqueued_at: Tick,
    /// Time of the first admission into a running batch (INV-5: ≤ first token).
    pub scheduled_at: Tick,
    /// Time the client saw the first output token.
    pub first_token_at: Tick,
    /// Time the client saw the latest output token.
    pub last_token_at: Tick,
    /// Time the client saw the last token (completion).
    pub completed_at: Tick,
    /// Prompt tokens served from the prefix cache at the first admission.
    pub cached_tokens: u32,
    /// Number of times this request was preempted.
    pub preemptions: u32,
    /// KV blocks held on its instance, in stream order (owned by the
    /// instance's KV cache): the ids of its blocks before its first private
    /// block; the private blocks after them have no ids (`kv_private`).
    pub kv_blocks: Vec<u32>,
    /// Private KV blocks held after `kv_blocks`: anonymous, counted only
    /// (see `instance::kv`).
    pub kv_private: u32,
    /// Time the request entered the gateway queue (`UNSET` without flow control).
    pub gateway_queued_at: Tick,
    /// Time the gateway queue dispatched it to routing (`UNSET` until then).
    pub gateway_dispatched_at: Tick,
    /// Counted in its tenant's in-flight requests (`[tenants]` budgets).
    pub budget_counted: bool,
    /// Hash of the last full block in `kv_blocks` (maintained by the KV cache
    /// so that hashing the next block needs no read of block metadata;
    /// meaningless while the request holds no full block).
    pub kv_last_hash: u64,
}

impl Request {
    /// Total tokens in the request's stream (prompt followed by output).
    pub fn total_len(&self) -> u32 {
        self.input_len + self.output_len
    }

    /// KV blocks the request holds on its instance: identified and private.
    #[inline]
    pub fn kv_held(&self) -> u64 {
        self.kv_blocks.len() as u64 + u64::from(self.kv_private)
    }
}

const HASH_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// A fast, well-mixing 64-bit finaliser (splitmix64).
#[inline]
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[inline]
fn absorb(h: u64, v: u64) -> u64 {
    mix64(h ^ mix64(v))
}

/// Iterates the hierarchical block hashes of a token stream made of segments.
///
/// Hash `k` covers tokens `[0, (k+1)·B)`: it chains hash `k−1` with the runs
/// `(seed, offset, length)` of the segments that block `k` overlaps. Equal
/// leading token content gives equal leading hashes; one differing token
/// changes that block's hash and every later one.
#[derive(Clone, Debug)]
pub struct BlockHasher<'a> {
    segments: &'a [Segment],
    tail: Option<Segment>,
    block_size: u32,
    /// Index of the segment holding the next unread token (segments then tail).
    seg: usize,
    /// Offset of the next unread token inside that segment.
    off: u32,
    prev: u64,
    /// `mix64` of the seed of segment `mixed_seg` (a segment spans many
    /// blocks; its seed's mix is computed once).
    mixed_seed: u64,
    mixed_seg: usize,
}

impl<'a> BlockHasher<'a> {
    /// Hasher over `segments`, optionally followed by `tail` (the output segment).
    pub fn new(segments: &'a [Segment], tail: Option<Segment>, block_size: u32) -> Self {
        assert!(block_size > 0, "block size must be positive");
        BlockHasher {
            segments,
            tail,
            block_size,
            seg: 0,
            off: 0,
            prev: HASH_SEED,
            mixed_seed: 0,
            mixed_seg: usize::MAX,
        }
    }

    fn segment(&self, i: usize) -> Option<Segment> {
        if i < self.segments.len() {
            Some(self.segments[i])
        } else if i == self.segments.len() {
            self.tail
        } else {
            None
        }
    }

    /// Hash of the next full block, or `None` when fewer than B tokens remain.
    pub fn next_block(&mut self) -> Option<u64> {
        let mut need = self.block_size;
        let mut h = self.prev;
        let (mut seg, mut off) = (self.seg, self.off);
        while need > 0 {
            let s = self.segment(seg)?;
            let avail = s.len - off;
            if avail == 0 {
                seg += 1;
                off = 0;
                continue;
            }
            let take = avail.min(need);
            // absorb(h, s.seed), with the seed's mix cached per segment.
            if seg != self.mixed_seg {
                self.mixed_seg = seg;
                self.mixed_seed = mix64(s.seed);
            }
            h = mix64(h ^ self.mixed_seed);
            h = absorb(h, (u64::from(off) << 32) | u64::from(take));
            need -= take;
            off += take;
        }
        self.seg = seg;
        self.off = off;
        self.prev = h;
        Some(h)
    }
}

impl Iterator for BlockHasher<'_> {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        self.next_block()
    }
}

/// Hash of block `k` of `req`'s stream (prompt, then output), given the hash
/// of block `k − 1` (`None` for block 0). Costs O(number of segments).
pub fn stream_block_hash(req: &Request, block_size: u32, k: u32, prev: Option<u64>) -> u64 {
    let tail = Segment {
        seed: req.output_seed,
        len: req.output_len,
    };
    let mut h = BlockHasher::new(&req.prompt, Some(tail), block_size);
    // Seek to token k·B.
    let mut skip = u64::from(k) * u64::from(block_size);
    while skip > 0 {
        let Some(s) = h.segment(h.seg) else { break };
        let avail = u64::from(s.len - h.off);
        if avail <= skip {
            skip -= avail;
            h.seg += 1;
            h.off = 0;
        } else {
            h.off += skip as u32;
            skip = 0;
        }
    }
    h.prev = prev.unwrap_or(HASH_SEED);
    h.next_block()
        .expect("stream_block_hash: block lies beyond the end of the stream")
}

/// Hash of a block that lies wholly inside `req`'s output segment, starting
/// `offset` tokens into it, given the hash of the block before it: the same
/// value as [`stream_block_hash`] (one run of the output segment), in O(1)
/// and without reading the prompt. Relies on the prompt's segment lengths
/// adding up to `input_len` (see [`Request::prompt`]).
#[inline]
pub fn output_block_hash(prev: u64, req: &Request, offset: u32, block_size: u32) -> u64 {
    debug_assert_eq!(
        req.prompt.iter().map(|s| u64::from(s.len)).sum::<u64>(),
        u64::from(req.input_len),
        "prompt segments do not add up to input_len"
    );
    debug_assert!(u64::from(offset) + u64::from(block_size) <= u64::from(req.output_len));
    output_run_hash(prev, req.output_seed, offset, block_size)
}

/// [`output_block_hash`] from its inputs: the hash of a block made of one run
/// of `block_size` tokens of the segment seeded `seed`, starting `offset`
/// tokens into it, chained after `prev`.
#[inline]
pub fn output_run_hash(prev: u64, seed: u64, offset: u32, block_size: u32) -> u64 {
    let h = absorb(prev, seed);
    absorb(h, (u64::from(offset) << 32) | u64::from(block_size))
}

/// Hashes of the first `count` full blocks of `req`'s stream (prompt, then
/// output), appended to `out`. Stops early if the stream has fewer blocks.
pub fn stream_block_hashes(req: &Request, block_size: u32, count: usize, out: &mut Vec<u64>) {
    let tail = Segment {
        seed: req.output_seed,
        len: req.output_len,
    };
    out.extend(BlockHasher::new(&req.prompt, Some(tail), block_size).take(count));
}

/// Hashes of the prompt's full blocks (`floor(L / B)` of them), into `out` (cleared first).
///
/// When the prompt starts with a shared prefix (a first segment followed by
/// others), the hashes of the blocks wholly inside that prefix come from
/// [`PrefixMemo`]: many requests share a few system prompts, and the hash
/// chain is serial work per block.
pub fn prompt_block_hashes(req: &Request, block_size: u32, out: &mut Vec<u64>) {
    leading_prompt_hashes(req, block_size, usize::MAX, out);
}

/// The first `limit` of [`prompt_block_hashes`] (all of them when there are
/// fewer): what an instance needs when the later blocks are private.
pub fn leading_prompt_hashes(req: &Request, block_size: u32, limit: usize, out: &mut Vec<u64>) {
    out.clear();
    let mut hasher = BlockHasher::new(&req.prompt, None, block_size);
    if let [first, _, ..] = req.prompt[..] {
        let full = first.len / block_size;
        if full > 0 && limit > 0 {
            PREFIX_MEMO.with(|m| m.borrow_mut().hashes(first, block_size, out));
            debug_assert_eq!(out.len(), full as usize);
            // Continue after those blocks, inside the first segment.
            hasher.off = full * block_size;
            hasher.prev = out[out.len() - 1];
            out.truncate(limit);
        }
    }
    let more = limit.saturating_sub(out.len());
    out.extend(hasher.take(more));
}

/// The full-block hashes of recently seen leading segments (shared prefixes),
/// by segment: a small direct-mapped table, so a workload with many distinct
/// prefixes costs one recomputation per miss and bounded memory. A pure
/// function's memo: the hashes are the ones [`BlockHasher`] computes, so it
/// changes no result. Kept per thread (a sweep runs simulations on several).
struct PrefixMemo {
    entries: Vec<MemoEntry>,
}

#[derive(Default)]
struct MemoEntry {
    key: Option<(Segment, u32)>,
    hashes: Vec<u64>,
}

/// Entries of the [`PrefixMemo`] table.
const PREFIX_MEMO_ENTRIES: usize = 64;

impl PrefixMemo {
    /// Append to `out` the hashes of the full blocks of a stream that starts
    /// with `first` (the blocks wholly inside it).
    fn hashes(&mut self, first: Segment, block_size: u32, out: &mut Vec<u64>) {
        if self.entries.is_empty() {
            self.entries
                .resize_with(PREFIX_MEMO_ENTRIES, MemoEntry::default);
        }
        let key = (first, block_size);
        let slot = mix64(first.seed ^ (u64::from(first.len) << 32) ^ u64::from(block_size))
            as usize
            % PREFIX_MEMO_ENTRIES;
        let e = &mut self.entries[slot];
        if e.key != Some(key) {
            e.hashes.clear();
            e.hashes.extend(BlockHasher::new(
                std::slice::from_ref(&first),
                None,
                block_size,
            ));
            e.key = Some(key);
        }
        out.extend_from_slice(&e.hashes);
    }
}

thread_local! {
    static PREFIX_MEMO: std::cell::RefCell<PrefixMemo> =
        const { std::cell::RefCell::new(PrefixMemo { entries: Vec::new() }) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(seed: u64, len: u32) -> Segment {
        Segment { seed, len }
    }

    /// Prompt hashes through the prefix memo equal the plain chain's, for
    /// prefixes shorter than, equal to and longer than a block, aligned or
    /// not, with more distinct prefixes than memo entries (entries replaced
    /// and recomputed) and block sizes that share a prefix's entry slot.
    #[test]
    fn memoised_prefix_hashes_equal_the_plain_chain() {
        let mut x = 88172645463325252u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out = Vec::new();
        for i in 0..3000 {
            let b = [16, 16, 16, 32, 1][i % 5];
            let prefix = seg(next() % 200, [5, 16, 40, 300, 2048][(next() % 5) as usize]);
            let mut r = Request::default();
            r.prompt.push(prefix);
            for _ in 0..(next() % 3) {
                r.prompt.push(seg(next(), 1 + (next() % 90) as u32));
            }
            r.input_len = r.prompt.iter().map(|s| s.len).sum();
            prompt_block_hashes(&r, b, &mut out);
            let plain: Vec<u64> = BlockHasher::new(&r.prompt, None, b).collect();
            assert_eq!(out, plain, "prompt {:?}, block size {b}", r.prompt);
            // The leading ones only (an instance skipping private blocks):
            // inside the memoised prefix, past it, and past the end.
            let limit = (next() % (plain.len() as u64 + 3)) as usize;
            leading_prompt_hashes(&r, b, limit, &mut out);
            assert_eq!(out, plain[..limit.min(plain.len())], "limit {limit}");
        }
    }

    #[test]
    fn shared_prefix_shares_leading_hashes_only() {
        let a: Vec<u64> = BlockHasher::new(&[seg(1, 64), seg(2, 40)], None, 16).collect();
        let b: Vec<u64> = BlockHasher::new(&[seg(1, 64), seg(3, 40)], None, 16).collect();
        assert_eq!(a.len(), 6);
        assert_eq!(a[..4], b[..4]);
        assert!(a[4..].iter().all(|h| !b.contains(h)));
    }

    #[test]
    fn straddling_block_differs_and_alignment_matters() {
        let a: Vec<u64> = BlockHasher::new(&[seg(1, 20), seg(2, 40)], None, 16).collect();
        let b: Vec<u64> = BlockHasher::new(&[seg(1, 20), seg(3, 40)], None, 16).collect();
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        // Same seeds, different split point: different content.
        let c: Vec<u64> = BlockHasher::new(&[seg(1, 21), seg(2, 39)], None, 16).collect();
        assert_eq!(a[0], c[0]);
        assert_ne!(a[1], c[1]);
    }

    #[test]
    fn session_context_reproduces_previous_stream() {
        // Round 1: prompt p1, output o1. Round 2's prompt is p1 ++ o1 ++ p2.
        let r1 = Request {
            prompt: vec![seg(10, 50)].into(),
            output_seed: 11,
            output_len: 30,
            input_len: 50,
            ..Default::default()
        };
        let mut stream1 = Vec::new();
        stream_block_hashes(&r1, 16, usize::MAX, &mut stream1);
        assert_eq!(stream1.len(), 5); // 80 tokens / 16
        let r2 = Request {
            prompt: vec![seg(10, 50), seg(11, 30), seg(12, 25)].into(),
            input_len: 105,
            ..Default::default()
        };
        let mut p2 = Vec::new();
        prompt_block_hashes(&r2, 16, &mut p2);
        assert_eq!(p2.len(), 6);
        assert_eq!(p2[..5], stream1[..]);
    }

    #[test]
    fn random_access_hash_matches_chain() {
        let r = Request {
            prompt: vec![seg(1, 37), seg(2, 5), seg(3, 60)].into(),
            input_len: 102,
            output_seed: 9,
            output_len: 70,
            ..Default::default()
        };
        let mut all = Vec::new();
        stream_block_hashes(&r, 16, usize::MAX, &mut all);
        assert_eq!(all.len(), 172 / 16);
        for k in 0..all.len() {
            let prev = if k == 0 { None } else { Some(all[k - 1]) };
            assert_eq!(
                stream_block_hash(&r, 16, k as u32, prev),
                all[k],
                "block {k}"
            );
        }
    }

    #[test]
    fn output_block_hash_matches_chain() {
        for (prompt, input_len) in [
            (vec![seg(1, 37), seg(2, 5), seg(3, 60)], 102),
            (vec![seg(4, 32)], 32),
            (vec![seg(5, 0), seg(6, 16), seg(7, 0)], 16),
        ] {
            let r = Request {
                prompt: prompt.into(),
                input_len,
                output_seed: 9,
                output_len: 70,
                ..Default::default()
            };
            let mut all = Vec::new();
            stream_block_hashes(&r, 16, usize::MAX, &mut all);
            for k in 1..all.len() {
                let start = k as u32 * 16;
                if start >= input_len {
                    assert_eq!(
                        output_block_hash(all[k - 1], &r, start - input_len, 16),
                        all[k],
                        "block {k}"
                    );
                }
            }
        }
    }

    /// The request record's size is a memory cost per live request (the
    /// slab of a large run holds 10⁵–10⁶ of them): LoRA and several models
    /// added their fields as 4-byte [`OptIdx`]es, not `Option<u32>`s, and a
    /// [`Prompt`] (own segments or a session log's view) is a `Vec`'s 24
    /// bytes: the record is 232 bytes, as before either existed (264 with
    /// `Option<u32>`s and a two-field prompt; the slab of
    /// `examples/bench/e-64x1m-weighted.toml` holds about a million).
    #[test]
    fn the_request_record_stays_small() {
        assert_eq!(std::mem::size_of::<OptIdx>(), 4);
        assert_eq!(OptIdx::default().get(), None);
        assert_eq!(OptIdx::from(Some(7)).get(), Some(7));
        assert_eq!(OptIdx::from(None).get(), None);
        assert_eq!(format!("{:?}", OptIdx::some(3)), "Some(3)");
        assert_eq!(std::mem::size_of::<Prompt>(), 24, "a Vec's size");
        let size = std::mem::size_of::<Request>();
        assert!(size <= 232, "Request is {size} bytes (was 232: keep it so)");
    }

    #[test]
    fn partial_trailing_block_is_ignored() {
        assert_eq!(BlockHasher::new(&[seg(1, 15)], None, 16).count(), 0);
        assert_eq!(BlockHasher::new(&[seg(1, 16)], None, 16).count(), 1);
        assert_eq!(
            BlockHasher::new(&[seg(1, 10), seg(2, 6)], None, 16).count(),
            1
        );
    }
}

/// Slab of live requests. Queues and batches hold [`Slot`]s; a slot is
/// recycled (with its vectors' capacity) once its request has been accounted
/// for, so memory follows the requests in flight, not the requests in total.
///
/// # Hot region
///
/// Under overload most live requests wait, and the few hundred per instance
/// that run were allocated long ago among them, scattered over a slab that
/// can reach a million entries. A step touches every running request, so the
/// store keeps a second, dense slab for requests an instance has admitted:
/// [`RequestStore::promote`] moves a request there (its slot stays the same;
/// indexing by slot follows it), and the instance then reaches it by its
/// *hot index* ([`RequestStore::hot`]), without any indirection. Hot entries
/// are recycled with their vectors, so the running requests' records, block
/// lists and prompt buffers stay in a small, cache-resident set of memory.
#[derive(Debug, Default)]
pub struct RequestStore {
    slots: Vec<Request>,
    alive: Vec<bool>,
    free: Vec<Slot>,
    live: usize,
    /// Slot → hot index, or `NOT_HOT`.
    hot_of: Vec<u32>,
    hot: Vec<Request>,
    /// Hot index → slot.
    hot_slot: Vec<Slot>,
    hot_free: Vec<u32>,
}

/// Index of a request in the [`RequestStore`].
pub type Slot = u32;

const NOT_HOT: u32 = u32::MAX;

/// Hint the CPU to fetch the cache line holding `*p` (never faults, never
/// changes behaviour; a no-op off x86-64).
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it does not dereference `p` and cannot
    // fault, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Reset a request for reuse, keeping its vectors' capacity.
fn recycle(r: &mut Request) {
    let mut prompt = std::mem::take(&mut r.prompt);
    let mut hashes = std::mem::take(&mut r.prompt_hashes);
    let mut blocks = std::mem::take(&mut r.kv_blocks);
    prompt.clear();
    hashes.clear();
    blocks.clear();
    *r = Request {
        prompt,
        prompt_hashes: hashes,
        kv_blocks: blocks,
        ..Request::default()
    };
}

impl RequestStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Take a recycled (or new) slot; `fill` writes the request into it. The
    /// request passed to `fill` is reset but keeps its vectors' capacity.
    pub fn insert_with(&mut self, fill: impl FnOnce(&mut Request)) -> Slot {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Request::default());
                self.alive.push(false);
                self.hot_of.push(NOT_HOT);
                (self.slots.len() - 1) as Slot
            }
        };
        self.alive[slot as usize] = true;
        fill(&mut self.slots[slot as usize]);
        self.live += 1;
        slot
    }

    /// Give a slot back. Its vectors keep their capacity for the next request.
    pub fn release(&mut self, slot: Slot) {
        debug_assert!(self.alive[slot as usize], "slot {slot} released twice");
        let h = std::mem::replace(&mut self.hot_of[slot as usize], NOT_HOT);
        if h != NOT_HOT {
            recycle(&mut self.hot[h as usize]);
            self.hot_free.push(h);
        }
        recycle(&mut self.slots[slot as usize]);
        self.alive[slot as usize] = false;
        self.free.push(slot);
        self.live -= 1;
    }

    /// Move the request in `slot` to the hot region (if it is not there yet)
    /// and return its hot index. Its slot is unchanged. The hot entry's own
    /// vectors receive copies of the request's prompt and prompt hashes; the
    /// request must hold no KV blocks.
    pub fn promote(&mut self, slot: Slot) -> u32 {
        debug_assert!(self.alive[slot as usize], "promoting a free slot");
        let h = self.hot_of[slot as usize];
        if h != NOT_HOT {
            return h;
        }
        let h = match self.hot_free.pop() {
            Some(h) => {
                self.hot_slot[h as usize] = slot;
                h
            }
            None => {
                self.hot.push(Request::default());
                self.hot_slot.push(slot);
                (self.hot.len() - 1) as u32
            }
        };
        let cold = &mut self.slots[slot as usize];
        let hot = &mut self.hot[h as usize];
        debug_assert_eq!(cold.kv_held(), 0);
        // Swap the records, then give each side back its own vectors (the hot
        // entry keeps its recycled buffers) and copy the contents over.
        std::mem::swap(cold, hot);
        std::mem::swap(&mut cold.prompt, &mut hot.prompt);
        std::mem::swap(&mut cold.prompt_hashes, &mut hot.prompt_hashes);
        std::mem::swap(&mut cold.kv_blocks, &mut hot.kv_blocks);
        hot.prompt.assign(&cold.prompt);
        hot.prompt_hashes.extend_from_slice(&cold.prompt_hashes);
        // The cold record is stale from here on (its slot indexes `hot`).
        cold.prompt.clear();
        cold.prompt_hashes.clear();
        self.hot_of[slot as usize] = h;
        h
    }

    /// Hot index of `slot`, if it was promoted.
    #[inline]
    pub fn hot_index(&self, slot: Slot) -> Option<u32> {
        match self.hot_of[slot as usize] {
            NOT_HOT => None,
            h => Some(h),
        }
    }

    /// The request at hot index `h`.
    #[inline]
    pub fn hot(&self, h: u32) -> &Request {
        &self.hot[h as usize]
    }

    /// The request at hot index `h`, mutably.
    #[inline]
    pub fn hot_mut(&mut self, h: u32) -> &mut Request {
        &mut self.hot[h as usize]
    }

    /// Start fetching the fields of the request at hot index `h` that an
    /// instance step reads (a hint; no effect on behaviour).
    #[inline]
    pub fn prefetch_hot(&self, h: u32) {
        if let Some(r) = self.hot.get(h as usize) {
            prefetch(&r.computed);
            prefetch(&r.last_token_at);
            prefetch(&r.kv_blocks);
        }
    }

    /// Start fetching what [`RequestStore::promote`] of `slot` will read
    /// and write: its record (written at its arrival, long evicted from the
    /// cache when it waited) and the hot entry it would take (a hint; no
    /// effect on behaviour).
    #[inline]
    pub fn prefetch_promotion(&self, slot: Slot) {
        if self.hot_of.get(slot as usize) != Some(&NOT_HOT) {
            return;
        }
        let lines = |r: &Request| {
            let p = (r as *const Request).cast::<u8>();
            for off in (0..std::mem::size_of::<Request>()).step_by(64) {
                prefetch(p.wrapping_add(off));
            }
        };
        lines(&self.slots[slot as usize]);
        if let Some(&h) = self.hot_free.last() {
            lines(&self.hot[h as usize]);
        }
    }

    /// The slot of the request at hot index `h`.
    #[inline]
    pub fn hot_slot(&self, h: u32) -> Slot {
        self.hot_slot[h as usize]
    }

    /// True while `slot` holds a request.
    pub fn is_live(&self, slot: Slot) -> bool {
        self.alive.get(slot as usize).copied().unwrap_or(false)
    }

    /// Number of requests currently held.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Capacity in slots (high-water mark of requests in flight).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
}

impl std::ops::Index<Slot> for RequestStore {
    type Output = Request;
    #[inline]
    fn index(&self, s: Slot) -> &Request {
        match self.hot_of[s as usize] {
            NOT_HOT => &self.slots[s as usize],
            h => &self.hot[h as usize],
        }
    }
}

impl std::ops::IndexMut<Slot> for RequestStore {
    #[inline]
    fn index_mut(&mut self, s: Slot) -> &mut Request {
        match self.hot_of[s as usize] {
            NOT_HOT => &mut self.slots[s as usize],
            h => &mut self.hot[h as usize],
        }
    }
}

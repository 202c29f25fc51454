//! Aggregated decode ("cruise"): a step costs O(1 + requests that change
//! state) instead of O(batch).
//!
//! In a decode-heavy batch most requests do nothing at a step but "one more
//! token": they compute the token they emitted last (the only one they were
//! granted), emit the next one, and the token fits in the KV block they are
//! filling. Call such a request a *cruiser*. While an instance cruises, its
//! batch has two kinds of members:
//!
//! * **Cruisers** keep in their batch record the progress they had at the
//!   step at which they started cruising (`since`, counted in cruised steps);
//!   their true progress is that plus the steps cruised since
//!   ([`Cruise::materialize`]), and their last token was emitted
//!   `α2 · generated` after the last step's end. A step touches a cruiser only
//!   when
//!   - its KV reaches a block boundary (its next token fills its last block
//!     or needs a new one): at most `B` (block size) steps ahead and known in
//!     advance, so cruisers sit in a ring of `B + 1` buckets, one per step;
//!   - it finishes: `output_len − generated` steps ahead, so cruisers also
//!     sit in a heap keyed on the step at which they finish.
//!
//!   A cruiser filling a private block (content no other request has, see
//!   `KvCache::first_private`) is a *grower*: every block it will need is
//!   private, and taking one is a count in the KV cache. It needs one every
//!   `B` steps, at the steps ≡ its residue (mod `B`), so it is listed once
//!   per residue and never touched at its block boundaries: a step takes
//!   its residue's blocks at once ([`Instance::grow`]), and the grower's
//!   KV state, like its progress, is derived when its record is read. (A
//!   step that also takes indexed blocks from a cache with no blank block
//!   left grants that residue's growers one by one in batch order, as the
//!   order of such takes can matter.)
//!
//!   The rest of their share of a step is aggregated: one run of `D` equal
//!   ITL samples (`dt + α2`), and `D` decodes in the batch shape whose
//!   context sum is a running sum (newcomers add theirs, finishers subtract
//!   theirs, every step adds `D`; integer sums, so exact).
//! * **The others** — requests being prefilled, just admitted, recomputing
//!   after a preemption, or that just emitted their first token — are few;
//!   they are kept as a sorted list of batch indices and stepped one by one
//!   by the code of a full step. One that has become a plain decoder joins
//!   the cruisers.
//!
//! Batch order matters (KV grants happen in batch order, completions are
//! reported in batch order, admissions come after every grant), so the batch
//! stays one vector in admission order: a request that finishes while
//! cruising leaves a hole ([`Track::Gone`]) that is closed when cruise ends,
//! and admitted requests are appended. A step handles the requests it
//! touches (the others, the finishers, the cruisers at a block boundary)
//! merged in batch order, with the same code as a full step.
//!
//! A step that a full step could run differently — its token budget does not
//! cover every grant (a full step would leave the tail of the batch without
//! one), or the KV cache has fewer free blocks than the grants need (a full
//! step would preempt) — ends cruise: the batch is written back
//! ([`Instance::leave_cruise`]) and formed in full. So does a step at which
//! holes outnumber the requests (closing them costs O(batch) anyway). The
//! next full step enters cruise again ([`Instance::try_cruise`], O(batch)).
//! The results are byte-identical to running every step in full; the debug
//! build checks each aggregated batch shape against a full recomputation,
//! and the property tests compare whole runs against full steps.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::engine::{later, Event, EventQueue, Tick};
use crate::request::{prefetch, RequestStore};

use super::{add_to_shape, chunk, BatchShape, Instance, InstanceObserver, Run};

/// Times beyond this are never cruised, so `now + α2 · generated` never
/// saturates (the full step computes token times with saturating adds).
const SAFE_TIME: Tick = Tick::MAX / 4;

/// Cruise ends before its step count could overflow.
const MAX_LAG: u32 = u32::MAX / 2;

/// How a batch record's progress is kept (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Track {
    /// The record holds the request's true progress (always, outside cruise).
    Stepped,
    /// A cruiser since cruised step `since`: the record holds its progress
    /// as of that step.
    Cruising { since: u32 },
    /// A cruiser since step `since` whose KV grows by private blocks only (a
    /// grower, see [`Cruise::growers`]): the record holds its progress and
    /// its KV state as of that step.
    Growing { since: u32 },
    /// Finished while cruising: a hole in the batch until cruise ends.
    Gone,
}

/// The cruise state of an instance (its buffers are reused).
#[derive(Debug, Default)]
pub(super) struct Cruise {
    active: bool,
    /// Steps cruised since the full step that entered cruise.
    lag: u32,
    /// When the last step (the full one or a cruised one) ended.
    last_step: Tick,
    /// The latency model's α2 and post-decode overhead, as the step code
    /// uses them (fixed for the run; read once when cruise starts).
    a2: Tick,
    post: Tick,
    /// Cruisers in the batch.
    cruisers: u32,
    /// Σ (`computed` − `since`) over the cruisers' records: their context
    /// sum at step `lag` is this plus `cruisers · lag`.
    context_base: i64,
    /// Batch indices of the requests stepped one by one, ascending.
    others: Vec<u32>,
    /// Holes in the batch.
    holes: u32,
    /// (step at whose end it finishes, batch index) of every cruiser.
    finishes: BinaryHeap<Reverse<(u32, u32)>>,
    /// KV boundary events, at most `B` steps ahead: bucket `j mod R` holds
    /// the batch indices of the cruisers whose KV work falls at step `j`
    /// (`R`, the bucket count, is the power of two above `B`), except the
    /// events one step ahead of a KV event (see `after_fill`).
    buckets: Vec<Vec<u32>>,
    /// The cruisers whose KV event at this step makes their next one fall
    /// at the next step (a block filled now needs a new one then), in batch
    /// order. Kept apart from the buckets, which would otherwise interleave
    /// them with the cruisers that got a new block `B − 1` steps before and
    /// need sorting; a bucket stays (nearly) one ascending run.
    after_fill: Vec<u32>,
    /// The next step's KV events in batch order: its bucket merged with
    /// `after_fill` ([`Instance::prepare_next_events`]).
    due: Vec<u32>,
    /// The growers: cruisers filling a private block, so that every block
    /// they will need is private and taking one is a count in the KV cache
    /// (`KvCache::take_private`) and nothing else. A grower needs a new
    /// block every `B` steps, at the steps ≡ its residue (mod `B`), until it
    /// finishes: it is listed once, in `growers[residue]`, and a step takes
    /// the blocks of its residue's growers at once without touching them
    /// ([`Instance::grow`]). Lists may hold stale entries (holes, and the
    /// growers dissolved by a step that could not aggregate); `grower_count`
    /// has each residue's live growers.
    growers: Vec<Vec<u32>>,
    grower_count: Vec<u32>,
    /// The step whose batch was formed last (`lag` once the batch of step
    /// `lag` is formed, `lag − 1` between a step's end and that).
    formed: u32,
    /// The block size `B`.
    block: u64,
    /// The requests a step touches, in batch order (reused).
    touched: Vec<u32>,
    /// The cruisers that finish at the step, in batch order (reused).
    finishing: Vec<u32>,
    /// Steps cruised so far (for the tests).
    pub(super) cruised: u64,
    /// Never cruise (the tests compare against full steps).
    #[cfg(test)]
    pub(super) disabled: bool,
    /// Steps whose growers' blocks were taken at once, and one by one (for
    /// the tests: both ways must be exercised).
    #[cfg(test)]
    pub(super) grown: [u64; 2],
}

/// What [`Instance::cruise_budget`] allows a step.
struct Budget {
    /// The token budget left after the batch's grants.
    tokens: u32,
    /// The growers' blocks may be taken at once ([`Instance::grow`]).
    aggregate_growth: bool,
}

/// How [`Instance::cruise_step`] handled the step that ended.
pub(super) enum CruiseStep {
    /// Aggregated from end to end; the next `Step` is scheduled.
    Done,
    /// The batch that ended is finished, but the next one must be formed in
    /// full (cruise has ended).
    Finished,
    /// Nothing done: cruise has ended, the step runs in full.
    Full,
}

/// The first step after `j` at which cruiser `run` (its `computed` the true
/// value at step `j`) touches the KV cache: its next token fills the last
/// block (to hash and index it) or needs a new one. Filling a private block
/// touches nothing ([`KvCache::first_private`](super::kv::KvCache::first_private)),
/// so a cruiser filling one has its next event at the new block: one event
/// per block instead of two. At most `B` steps ahead: a cruiser never holds
/// more than the block it fills.
#[inline]
fn next_kv_event(j: u32, run: &Run, block_size: u64) -> u32 {
    let touch_at = if run.fills_private_block(block_size) {
        run.kv_cap
    } else {
        run.kv_cap.saturating_sub(1)
    };
    let ahead = touch_at.saturating_sub(u64::from(run.computed)).max(1);
    j + ahead as u32
}

/// Whether `run`, as the batch formed at `now` left it, is a plain decoder:
/// granted exactly the token it emitted at `now`, with room for it in the
/// block it fills, and finishing before [`SAFE_TIME`].
#[inline]
fn is_plain(run: &Run, now: Tick, a2: Tick, block_size: u64) -> bool {
    run.granted == 1
        && run.generated >= 1
        && run.generated < run.output_len
        && run.input_len + run.generated - run.computed == 1
        && u64::from(run.computed) + block_size >= run.kv_cap
        && run.last_token_at == later(now, a2.saturating_mul(Tick::from(run.generated)))
        && a2.saturating_mul(Tick::from(run.output_len)) < SAFE_TIME
}

/// `a` and `b` (ascending, disjoint) merged into `out`, ascending.
#[inline]
fn merge_into(out: &mut Vec<u32>, a: &[u32], b: &[u32]) {
    out.clear();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i] < b[j] {
            out.push(a[i]);
            i += 1;
        } else {
            out.push(b[j]);
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
}

impl Cruise {
    /// True while steps are cruised.
    #[inline]
    pub(super) fn active(&self) -> bool {
        self.active
    }

    /// Holes in the batch (0 outside cruise).
    #[inline]
    pub(super) fn holes(&self) -> usize {
        self.holes as usize
    }

    /// `run` with its true progress, as the last batch formation left it
    /// (a cruiser's record keeps the progress it had when it started to
    /// cruise).
    #[inline]
    pub(super) fn materialize(&self, run: &Run) -> Run {
        let mut r = *run;
        self.grow_record(&mut r);
        if let Track::Cruising { since } | Track::Growing { since } = r.track {
            let steps = self.lag - since;
            r.computed += steps;
            r.generated += steps;
            r.last_token_at = later(
                self.last_step,
                self.a2.saturating_mul(Tick::from(r.generated)),
            );
            r.track = Track::Stepped;
        }
        r
    }

    /// A grower's KV state in its record brought from step `since` to the
    /// last formation, which granted it the token after the ones it had
    /// computed by then: its blocks cover those (each new one private).
    #[inline]
    fn grow_record(&self, r: &mut Run) {
        if let Track::Growing { since } = r.track {
            let b = self.block;
            let covered = u64::from(r.computed) + u64::from(self.formed - since) + 1;
            let cap = covered.div_ceil(b) * b;
            if cap > r.kv_cap {
                r.kv_private += ((cap - r.kv_cap) / b) as u32;
                r.kv_cap = cap;
                r.last_block = super::kv::NO_ID;
            }
        }
    }

    /// The KV events of step `j`.
    #[inline]
    fn bucket(&mut self, j: u32) -> &mut Vec<u32> {
        let mask = self.buckets.len() - 1;
        &mut self.buckets[j as usize & mask]
    }

    /// Move step `j`'s KV events — its bucket and `after_fill` — into
    /// `due`, in batch order.
    fn gather_due(&mut self, j: u32) {
        let mask = self.buckets.len() - 1;
        let bucket = &mut self.buckets[j as usize & mask];
        bucket.sort_unstable(); // (one ascending run, but for joins)
        merge_into(&mut self.due, bucket, &self.after_fill);
        bucket.clear();
        self.after_fill.clear();
    }

    /// Make batch record `i` (with its true progress at step `lag`) a
    /// cruiser.
    fn join(&mut self, i: u32, run: &mut Run, block_size: u64) {
        let j = self.lag;
        self.cruisers += 1;
        self.context_base += i64::from(run.computed) - i64::from(j);
        self.finishes
            .push(Reverse((j + run.output_len - run.generated, i)));
        self.track_kv(i, run, block_size, false);
    }

    /// Track the KV events of cruiser `i`, whose record holds its true state
    /// as of step `lag`: as a grower when it fills a private block, else by
    /// its next KV event. `in_order`: called in batch order for the step's
    /// KV events (an event one step ahead then goes to `after_fill`).
    fn track_kv(&mut self, i: u32, run: &mut Run, block_size: u64, in_order: bool) {
        let j = self.lag;
        if run.fills_private_block(block_size) {
            run.track = Track::Growing { since: j };
            let r = self.residue(run);
            self.growers[r].push(i);
            self.grower_count[r] += 1;
            return;
        }
        run.track = Track::Cruising { since: j };
        let next = next_kv_event(j, run, block_size);
        debug_assert!(
            u64::from(next - j) <= block_size,
            "KV events are at most B steps ahead"
        );
        if in_order && next == j + 1 {
            self.after_fill.push(i);
        } else {
            self.bucket(next).push(i);
        }
    }

    /// The residue (mod `B`) of step `j`: whose growers need a block then.
    #[inline]
    fn step_residue(&self, j: u32) -> usize {
        (u64::from(j) % self.block) as usize
    }

    /// The residue (mod `B`) of the steps at which grower `run` needs a new
    /// block: those at which its computed tokens reach a block boundary.
    #[inline]
    fn residue(&self, run: &Run) -> usize {
        let Track::Growing { since } = run.track else {
            unreachable!("a grower")
        };
        let b = self.block;
        ((u64::from(since) + b - u64::from(run.computed) % b) % b) as usize
    }
}

impl Instance {
    /// After a full step at `now` (its `Step` already scheduled): enter
    /// cruise if at least half the batch are plain decoders. O(batch), like
    /// the full step.
    pub(super) fn try_cruise(&mut self, now: Tick, store: &RequestStore) {
        debug_assert!(!self.cruise.active);
        #[cfg(test)]
        if self.cruise.disabled {
            return;
        }
        if self.running.is_empty()
            || self.lora.is_some() // (per-step adapter factors)
            || now > SAFE_TIME
            || self.running.len() > self.config.max_num_batched_tokens as usize
        {
            return; // (with fewer tokens than requests, the tail waits)
        }
        let a2 = self.latency.output_token_overhead().max(0);
        let b = u64::from(self.config.block_size);
        let c = &mut self.cruise;
        let mut plain = std::mem::take(&mut c.touched);
        plain.clear();
        for (i, run) in self.running.iter().enumerate() {
            if is_plain(run, now, a2, b) {
                plain.push(i as u32);
            } else {
                c.others.push(i as u32);
            }
        }
        if c.others.len() > plain.len() {
            // Mostly prefill: a full step is as cheap.
            c.others.clear();
            c.touched = plain;
            return;
        }
        c.active = true;
        c.lag = 0;
        c.last_step = now;
        c.a2 = a2;
        c.post = self.latency.post_decode_overhead().max(0);
        c.buckets
            .resize_with((b as usize + 1).next_power_of_two(), Vec::new);
        c.block = b;
        c.formed = 0;
        c.growers.resize_with(b as usize, Vec::new);
        c.grower_count.clear();
        c.grower_count.resize(b as usize, 0);
        for &i in &plain {
            c.join(i, &mut self.running[i as usize], b);
        }
        c.touched = plain;
        self.prepare_next_events(store);
    }

    /// Merge the next step's KV events in batch order and start fetching
    /// what they will touch (the request record, the block and the index
    /// slot of a block fill), so the misses overlap with other instances'
    /// steps.
    fn prepare_next_events(&mut self, store: &RequestStore) {
        let j = self.cruise.lag + 1;
        let b = u64::from(self.config.block_size);
        // The first cruiser finishing then: its batch record has not been
        // read since it started cruising.
        if let Some(&Reverse((step, i))) = self.cruise.finishes.peek() {
            if step == j {
                prefetch(&self.running[i as usize]);
            }
        }
        self.cruise.gather_due(j);
        for &i in &self.cruise.due {
            let run = &self.running[i as usize];
            let Track::Cruising { since } = run.track else {
                continue; // a hole
            };
            let c = u64::from(run.computed + (j - since));
            if c + 1 == run.kv_cap {
                if run.fills_private_block(b) {
                    continue; // filling it touches nothing
                }
                if !run.fills_output_block(b) {
                    store.prefetch_hot(run.hot);
                }
                self.kv.prefetch_fill(
                    run.kv_last_hash,
                    run.output_seed,
                    run.input_len,
                    run.kv_cap - b,
                    run.last_block,
                );
            } else if !run.grows_private(c, b) {
                store.prefetch_hot(run.hot);
            }
        }
    }

    /// Stop cruising: write the true progress back to the batch records (as
    /// the last batch formation left it) and close the holes.
    pub(super) fn leave_cruise(&mut self) {
        self.end_cruise(false);
    }

    /// [`Instance::leave_cruise`]; with `finished`, the batch has just been
    /// finished (no grants yet).
    fn end_cruise(&mut self, finished: bool) {
        if !self.cruise.active {
            return;
        }
        let c = &mut self.cruise;
        let mut delivered = self.last_delivery;
        self.running.retain_mut(|run| match run.track {
            Track::Gone => false,
            Track::Stepped => true,
            Track::Cruising { .. } | Track::Growing { .. } => {
                *run = c.materialize(run);
                if finished {
                    run.granted = 0;
                }
                delivered = delivered.max(run.last_token_at);
                true
            }
        });
        self.last_delivery = delivered;
        c.active = false;
        c.cruisers = 0;
        c.context_base = 0;
        c.holes = 0;
        c.others.clear();
        c.finishes.clear();
        for bucket in &mut c.buckets {
            bucket.clear();
        }
        for list in &mut c.growers {
            list.clear();
        }
        c.grower_count.fill(0);
        c.after_fill.clear();
        c.due.clear();
    }

    /// The cruise bookkeeping against the batch (for
    /// [`Instance::check_invariants`]): the cruisers, holes and others
    /// counted, the others listed in batch order, the cruisers' context sum.
    pub(super) fn check_cruise(&self) -> Result<(), String> {
        let c = &self.cruise;
        let (mut cruisers, mut holes, mut context) = (0u32, 0u32, 0i64);
        let mut growers = vec![0u32; c.grower_count.len()];
        let mut others = Vec::new();
        for (i, run) in self.running.iter().enumerate() {
            match run.track {
                Track::Stepped => others.push(i as u32),
                Track::Cruising { since } | Track::Growing { since } => {
                    cruisers += 1;
                    context += i64::from(run.computed) - i64::from(since);
                    if let Track::Growing { .. } = run.track {
                        growers[c.residue(run)] += 1;
                    }
                }
                Track::Gone => holes += 1,
            }
        }
        if !c.active && (cruisers, holes) != (0, 0) {
            return Err("cruise records outside cruise".into());
        }
        if c.active && growers != c.grower_count {
            return Err(format!(
                "growers by residue: {growers:?} in the batch; counted {:?}",
                c.grower_count
            ));
        }
        if c.active
            && ((cruisers, holes, context) != (c.cruisers, c.holes, c.context_base)
                || others != c.others)
        {
            return Err(format!(
                "cruise bookkeeping: {cruisers} cruisers, {holes} holes, context {context}, \
                 others {others:?} in the batch; counted {}, {}, {}, {:?}",
                c.cruisers, c.holes, c.context_base, c.others
            ));
        }
        Ok(())
    }

    /// The latest time a token reached a client, the cruisers' latest tokens
    /// included (their delivery is implicit while cruising). O(batch) while
    /// cruising.
    pub(super) fn last_delivery(&self) -> Tick {
        let mut delivered = self.last_delivery;
        if self.cruise.active {
            for run in &self.running {
                if let Track::Cruising { .. } | Track::Growing { .. } = run.track {
                    delivered = delivered.max(self.cruise.materialize(run).last_token_at);
                }
            }
        }
        delivered
    }

    /// Run the step ending at `now` aggregated as far as it qualifies.
    pub(super) fn cruise_step(
        &mut self,
        now: Tick,
        store: &mut RequestStore,
        q: &mut EventQueue,
        obs: &mut impl InstanceObserver,
    ) -> CruiseStep {
        debug_assert!(self.cruise.active);
        if now > SAFE_TIME || self.cruise.lag >= MAX_LAG || self.cruise.holes() > self.batch_len() {
            self.leave_cruise();
            return CruiseStep::Full;
        }
        self.finish_cruising(now, store, obs);
        let Some(budget) = self.cruise_budget() else {
            self.end_cruise(true);
            return CruiseStep::Finished;
        };
        self.grow(budget.aggregate_growth);
        let shape = self.form_cruising(now, budget.tokens, store);
        debug_assert_eq!(shape, {
            let mut s = BatchShape::default();
            for run in self.running.iter().filter(|r| r.track != Track::Gone) {
                add_to_shape(&mut s, &self.cruise.materialize(run));
            }
            s
        });
        let dt = (self.step_cost(&shape) + self.kv.take_transfer_time()).max(1);
        self.steps += 1;
        self.cruise.cruised += 1;
        self.started_step(now);
        q.push(
            later(now, dt),
            Event::Step {
                instance: self.index,
            },
        );
        self.prepare_next_events(store);
        CruiseStep::Done
    }

    /// The end of the batch (as [`Instance::finish_batch`]): every cruiser
    /// emits a token, `dt + α2` after its previous one; the others and the
    /// cruisers that finish now are stepped one by one, in batch order.
    fn finish_cruising(
        &mut self,
        now: Tick,
        store: &mut RequestStore,
        obs: &mut impl InstanceObserver,
    ) {
        let c = &mut self.cruise;
        let (a2, post) = (c.a2, c.post);
        let j = c.lag + 1;
        if c.cruisers > 0 {
            obs.token_gaps(self.index, now - c.last_step + a2, u64::from(c.cruisers));
        }
        c.lag = j;
        c.last_step = now;
        c.finishing.clear();
        while let Some(&Reverse((step, i))) = c.finishes.peek() {
            if step != j {
                debug_assert!(step > j, "finishes are taken at their step");
                break;
            }
            c.finishes.pop();
            c.finishing.push(i);
        }
        let mut touched = std::mem::take(&mut c.touched);
        merge_into(&mut touched, &c.others, &c.finishing);
        c.others.clear();
        let mut delivered = self.last_delivery;
        for &i in &touched {
            let mut run = self.running[i as usize];
            let done = match run.track {
                Track::Cruising { since } | Track::Growing { since } => {
                    // It finishes: its last token was counted above.
                    if let Track::Growing { .. } = run.track {
                        let r = self.cruise.residue(&run);
                        self.cruise.grower_count[r] -= 1;
                    }
                    self.cruise.cruisers -= 1;
                    self.cruise.context_base -= i64::from(run.computed) - i64::from(since);
                    run = self.cruise.materialize(&run);
                    run.granted = 0;
                    debug_assert_eq!(run.generated, run.output_len);
                    self.complete(&run, now, a2, post, store, obs, &mut delivered);
                    true
                }
                Track::Stepped => {
                    let (gap, done) =
                        self.finish_run(&mut run, now, a2, post, store, obs, &mut delivered);
                    if let Some(gap) = gap {
                        obs.token_gaps(self.index, gap, 1);
                    }
                    done
                }
                Track::Gone => unreachable!("a hole is never touched"),
            };
            if done {
                run.track = Track::Gone;
                self.cruise.holes += 1;
            } else {
                self.cruise.others.push(i);
            }
            self.running[i as usize] = run;
        }
        self.last_delivery = delivered;
        self.cruise.touched = touched;
    }

    /// The token budget left after granting the finished batch in full, if
    /// a full step would do exactly that: every request gets its whole
    /// grant (the budget covers them all) and every KV allocation succeeds
    /// (no preemption); `None` otherwise, or when the batch is empty.
    fn cruise_budget(&self) -> Option<Budget> {
        if self.batch_len() == 0 {
            return None;
        }
        let max = self.config.max_num_batched_tokens;
        let threshold = self.config.long_prefill_token_threshold;
        let b = u64::from(self.config.block_size);
        let c = &self.cruise;
        let mut demand = u64::from(c.cruisers);
        let mut blocks = 0;
        // Whether every KV operation of the step's grants but the growers'
        // takes private blocks or does nothing.
        let mut private_only = true;
        for &i in &c.others {
            let run = &self.running[i as usize];
            let n = chunk(run.input_len + run.generated - run.computed, threshold, max);
            demand += u64::from(n);
            let (computed, end) = (u64::from(run.computed), u64::from(run.computed + n));
            let fast = end < run.kv_cap && computed + b >= run.kv_cap;
            let fill = n == 1 && computed + 1 == run.kv_cap;
            if fill {
                private_only &= run.fills_private_block(b);
            } else if !fast {
                blocks += self.kv.blocks_for(end).saturating_sub(run.kv_cap / b);
                private_only &= run.grows_private(computed, b);
            }
        }
        if demand > u64::from(max) {
            return None;
        }
        let j = c.lag;
        for &i in &c.due {
            let run = &self.running[i as usize];
            if let Track::Cruising { since } = run.track {
                let computed = u64::from(run.computed + (j - since));
                if computed == run.kv_cap {
                    blocks += 1;
                    private_only &= run.grows_private(computed, b);
                } else {
                    private_only = false; // a fill to hash and index
                }
            }
        }
        blocks += u64::from(c.grower_count[c.step_residue(j)]);
        (blocks <= self.kv.free()).then_some(Budget {
            tokens: max - demand as u32,
            aggregate_growth: private_only || blocks <= self.kv.blank(),
        })
    }

    /// The new blocks of the growers whose residue is the step's (see
    /// [`Cruise::growers`]), before the step's other grants. With
    /// `aggregate` they are taken at once, touching no grower: that leaves
    /// the cache as the grants in batch order would when every block the
    /// step takes is a blank one (a private take only counts it down), or
    /// when every other KV operation of the step takes private blocks too
    /// (anonymous takes in any order take the same blocks). Otherwise those
    /// growers become plain cruisers with a KV event at this step, granted
    /// in batch order with the others (and they grow again afterwards).
    fn grow(&mut self, aggregate: bool) {
        let c = &mut self.cruise;
        let r = c.step_residue(c.lag);
        let n = c.grower_count[r];
        // The list without the entries of growers that finished.
        let live = |list: &mut Vec<u32>| {
            list.retain(|&i| matches!(self.running[i as usize].track, Track::Growing { .. }));
        };
        if aggregate || n == 0 {
            if n > 0 {
                let took = self.kv.take_private(u64::from(n));
                debug_assert!(took, "free blocks were counted");
                #[cfg(test)]
                {
                    c.grown[0] += 1;
                }
            }
            if c.growers[r].len() > 2 * n as usize + 16 {
                live(&mut c.growers[r]);
            }
            return;
        }
        #[cfg(test)]
        {
            c.grown[1] += 1;
        }
        let mut members = std::mem::take(&mut c.growers[r]);
        live(&mut members);
        members.sort_unstable();
        debug_assert_eq!(members.len(), n as usize);
        for &i in &members {
            let run = &mut self.running[i as usize];
            c.grow_record(run);
            let Track::Growing { since } = run.track else {
                unreachable!("kept above")
            };
            run.track = Track::Cruising { since };
        }
        c.grower_count[r] = 0;
        let mut due = std::mem::take(&mut c.touched);
        merge_into(&mut due, &c.due, &members);
        std::mem::swap(&mut c.due, &mut due);
        c.touched = due;
        members.clear();
        c.growers[r] = members;
    }

    /// Form the next batch (as [`Instance::form_batch`] when
    /// [`Instance::cruise_budget`] allows): grants in batch order to the
    /// others and to the cruisers at a KV block boundary, the others that
    /// became plain decoders join the cruisers, then admissions. Returns the
    /// batch's shape.
    fn form_cruising(
        &mut self,
        now: Tick,
        mut budget: u32,
        store: &mut RequestStore,
    ) -> BatchShape {
        let a2 = self.cruise.a2;
        let b = u64::from(self.config.block_size);
        let threshold = self.config.long_prefill_token_threshold;
        let max = self.config.max_num_batched_tokens;
        let j = self.cruise.lag;
        self.cruise.formed = j;
        let mut due = std::mem::take(&mut self.cruise.due);
        debug_assert!(due.windows(2).all(|w| w[0] < w[1]), "merged one step ahead");
        let mut touched = std::mem::take(&mut self.cruise.touched);
        merge_into(&mut touched, &self.cruise.others, &due);
        for &i in &touched {
            let i = i as usize;
            let cruiser = match self.running[i].track {
                Track::Gone => continue, // finished before its block boundary
                Track::Cruising { .. } => true,
                Track::Stepped => false,
                Track::Growing { .. } => unreachable!("growers are granted by Instance::grow"),
            };
            let run = self.cruise.materialize(&self.running[i]);
            self.running[i] = run;
            let n = if cruiser {
                1
            } else {
                chunk(run.input_len + run.generated - run.computed, threshold, max)
            };
            let granted = self.grant_run(i, n, store);
            debug_assert!(granted, "free blocks were counted");
            if cruiser {
                self.cruise
                    .track_kv(i as u32, &mut self.running[i], b, true);
            }
        }
        due.clear();
        self.cruise.due = due;
        self.cruise.touched = touched;

        // The others that became plain decoders join the cruisers.
        let mut shape = BatchShape::default();
        let mut others = std::mem::take(&mut self.cruise.others);
        others.retain(|&i| {
            let run = &mut self.running[i as usize];
            if is_plain(run, now, a2, b) {
                self.cruise.join(i, run, b);
                false
            } else {
                add_to_shape(&mut shape, run);
                true
            }
        });
        let c = &mut self.cruise;
        let context = (c.context_base + i64::from(c.cruisers) * i64::from(j)) as u64;
        let d = &mut shape.decode;
        d.requests += c.cruisers;
        d.new_tokens += u64::from(c.cruisers);
        d.context_tokens += context;
        d.attention_tokens += context;

        // Admissions join the others.
        let first_new = self.running.len();
        self.admit_waiting(now, &mut budget, &mut shape, store);
        others.extend(first_new as u32..self.running.len() as u32);
        self.cruise.others = others;
        shape
    }
}

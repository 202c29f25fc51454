//! Aggregated decode ("cruise"): steps whose cost does not grow with the
//! batch while nothing but "one more token" happens to most of it.
//!
//! When a step leaves every running request a plain decoder — it emitted a
//! token at the end of that step and was granted exactly the one token it
//! must compute next — and nothing can join the batch, the following steps
//! are fully predictable until one of three things happens: a request
//! completes, a request reaches a KV block boundary, or a request waits to
//! be admitted. Until then a step is:
//!
//! * **tokens**: every request emits one token, `dt + α2` after its previous
//!   one (both were emitted `α2 · generated` after their step's end), so
//!   the step reports one run of `D` equal ITL samples;
//! * **step time**: the batch is `D` decodes whose contexts grow by one per
//!   step, so the shape is `D` requests, `D` tokens and a context sum of
//!   `C₀ + D · j` at the `j`-th step after the base (integer sums: exact);
//! * **KV**: a request touches the cache only when its next token fills its
//!   last block or needs a new one, at most `B` (block size) steps ahead.
//!   Those steps are known in advance, so the requests sit in a ring of
//!   `B + 1` buckets, one per step, and are handled one by one, in batch
//!   order, by the same code as a full step — the only part of the batch
//!   whose order matters. The next step's bucket is sorted and its KV state
//!   prefetched one step ahead, as a full step does. A step whose
//!   allocations could fail (so that a full step would preempt) is not
//!   cruised.
//!
//! While cruising, the batch records keep `computed`, `generated` (and so
//! `last_token_at`) as they were at the base; the true values are those plus
//! `lag`, the number of cruised steps ([`Cruise::materialize`]). A step that
//! completes a request, could admit one, or could fail an allocation first
//! writes the true values back ([`Instance::leave_cruise`]) and runs as a
//! full step; the next full step that qualifies enters cruise again. The
//! results are byte-identical to running every step in full.

use crate::engine::{later, Event, EventQueue, Tick};
use crate::request::RequestStore;

use super::{BatchShape, Instance, InstanceObserver, PhaseSums, Run};

/// Times beyond this are never cruised, so `now + α2 · generated` never
/// saturates (the full step computes token times with saturating adds).
const SAFE_TIME: Tick = Tick::MAX / 4;

/// The cruise state of an instance (inactive most of the time in
/// prefill-heavy runs; its buffers are reused).
#[derive(Debug, Default)]
pub(super) struct Cruise {
    active: bool,
    /// Steps cruised since the base (the full step that entered cruise).
    lag: u32,
    /// Σ `computed` over the batch at the base's batch formation.
    base_context: u64,
    /// The first step (counted from the base) whose end completes a request.
    next_done: u32,
    /// The largest `generated` in the batch at the base.
    max_generated: u32,
    /// When the last step (the base or a cruised one) ended.
    last_step: Tick,
    /// KV boundary events: bucket `j mod (B + 1)` holds the batch indices
    /// of the requests whose KV work falls at step `j` (counted from the
    /// base); the next step's bucket is sorted (batch order).
    buckets: Vec<Vec<u32>>,
    /// Steps cruised so far (for the tests).
    pub(super) cruised: u64,
    /// Never cruise (the tests compare against full steps).
    #[cfg(test)]
    pub(super) disabled: bool,
}

/// The first step after `j` (counted from the base) at which a request
/// that computes `computed` tokens at step `j` (true value) with KV capacity
/// `kv_cap` leaves the fast path: its next token fills the last block or
/// needs a new one. At most `B` steps ahead: a cruising request never holds
/// more than the block it fills.
#[inline]
fn next_kv_event(j: u32, computed: u32, kv_cap: u64) -> u32 {
    let ahead = kv_cap.saturating_sub(u64::from(computed) + 1).max(1);
    j + ahead as u32
}

impl Cruise {
    /// True while steps are cruised.
    #[inline]
    pub(super) fn active(&self) -> bool {
        self.active
    }

    /// `run` with its true progress (it keeps the base's while cruising).
    #[inline]
    pub(super) fn materialize(&self, run: &Run, a2: Tick) -> Run {
        let mut r = *run;
        if self.active {
            r.computed += self.lag;
            r.generated += self.lag;
            r.last_token_at = later(self.last_step, a2.saturating_mul(Tick::from(r.generated)));
        }
        r
    }
}

impl Instance {
    /// α2, as the step code uses it.
    #[inline]
    fn a2(&self) -> Tick {
        self.latency.output_token_overhead().max(0)
    }

    /// After a full step at `now` (its `Step` already scheduled): enter
    /// cruise if every running request is a plain decoder that just emitted
    /// a token. O(batch), like the full step.
    pub(super) fn try_cruise(&mut self, now: Tick, store: &RequestStore) {
        debug_assert!(!self.cruise.active);
        #[cfg(test)]
        if self.cruise.disabled {
            return;
        }
        if self.running.is_empty()
            || now > SAFE_TIME
            || self.running.len() as u64 > u64::from(self.config.max_num_batched_tokens)
            || (!self.waiting.is_empty() && self.running.len() < self.config.max_num_seqs as usize)
        {
            return;
        }
        let a2 = self.a2();
        let b = u64::from(self.config.block_size);
        let (mut context, mut next_done, mut max_generated) = (0u64, u32::MAX, 0u32);
        for run in &self.running {
            let plain = run.granted == 1
                && run.generated >= 1
                && run.generated < run.output_len
                && run.input_len + run.generated - run.computed == 1
                && u64::from(run.computed) + b >= run.kv_cap
                && run.last_token_at == later(now, a2.saturating_mul(Tick::from(run.generated)))
                && a2.saturating_mul(Tick::from(run.output_len)) < SAFE_TIME;
            if !plain {
                return;
            }
            context += u64::from(run.computed);
            next_done = next_done.min(run.output_len - run.generated);
            max_generated = max_generated.max(run.generated);
        }
        let ring = self.config.block_size as usize + 1;
        let c = &mut self.cruise;
        c.buckets.resize_with(ring, Vec::new);
        for (i, run) in self.running.iter().enumerate() {
            let e = next_kv_event(0, run.computed, run.kv_cap);
            c.buckets[e as usize % ring].push(i as u32);
        }
        c.active = true;
        c.lag = 0;
        c.base_context = context;
        c.next_done = next_done;
        c.max_generated = max_generated;
        c.last_step = now;
        self.prepare_next_events(store);
    }

    /// Sort the next step's KV events into batch order and start fetching
    /// what they will touch (the request record, the block and the index
    /// slot of a block fill), so the misses overlap with other instances'
    /// steps.
    fn prepare_next_events(&mut self, store: &RequestStore) {
        let j = self.cruise.lag + 1;
        let ring = self.cruise.buckets.len();
        let b = u64::from(self.config.block_size);
        let next = &mut self.cruise.buckets[j as usize % ring];
        next.sort_unstable();
        for &i in next.iter() {
            let run = &self.running[i as usize];
            let c = u64::from(run.computed + j);
            if c + 1 == run.kv_cap {
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
            } else {
                store.prefetch_hot(run.hot);
            }
        }
    }

    /// Write the true progress back to the batch records and stop cruising.
    pub(super) fn leave_cruise(&mut self) {
        if !self.cruise.active {
            return;
        }
        let a2 = self.a2();
        for run in &mut self.running {
            *run = self.cruise.materialize(run, a2);
        }
        self.cruise.active = false;
        for bucket in &mut self.cruise.buckets {
            bucket.clear();
        }
    }

    /// Run the step ending at `now` as a cruised step if it qualifies; false,
    /// with nothing changed, when it must run in full.
    pub(super) fn cruise_step(
        &mut self,
        now: Tick,
        store: &mut RequestStore,
        q: &mut EventQueue,
        obs: &mut impl InstanceObserver,
    ) -> bool {
        debug_assert!(self.cruise.active);
        let j = self.cruise.lag + 1;
        if j >= self.cruise.next_done
            || now > SAFE_TIME
            || (!self.waiting.is_empty() && self.running.len() < self.config.max_num_seqs as usize)
        {
            return false;
        }
        // This step's KV events, in batch order; each new block must be
        // available (a full step would otherwise preempt).
        let ring = self.cruise.buckets.len();
        let due = std::mem::take(&mut self.cruise.buckets[j as usize % ring]);
        debug_assert!(due.windows(2).all(|w| w[0] < w[1]), "sorted one step ahead");
        let new_blocks = due
            .iter()
            .filter(|&&i| {
                let run = &self.running[i as usize];
                u64::from(run.computed + j) >= run.kv_cap
            })
            .count() as u64;
        if new_blocks > self.kv.free() {
            self.cruise.buckets[j as usize % ring] = due;
            return false;
        }
        if new_blocks > 0 {
            self.kv.prefetch_next_free();
        }

        // The batch that ends now: one token each, one run of equal gaps.
        let a2 = self.a2();
        let d = self.running.len() as u64;
        let gap = now - self.cruise.last_step + a2;
        obs.token_gaps(self.index, gap, d);
        let newest = self.cruise.max_generated + j;
        self.last_delivery = self
            .last_delivery
            .max(later(now, a2.saturating_mul(Tick::from(newest))));
        self.cruise.lag = j;
        self.cruise.last_step = now;

        // The next batch: the same requests, one token each; those at a
        // block boundary go through the KV cache as in a full step.
        for &i in &due {
            let i = i as usize;
            let run = &mut self.running[i];
            *run = self.cruise.materialize(run, a2);
            if u64::from(run.computed) + 1 == run.kv_cap {
                self.grant_fill(i, store);
            } else {
                let granted = self.grant_extend(i, 1, store);
                debug_assert!(granted, "free blocks were counted");
            }
            let run = &mut self.running[i];
            let next = next_kv_event(j, run.computed, run.kv_cap);
            debug_assert!(
                next - j < ring as u32,
                "KV events are at most B steps ahead"
            );
            run.computed -= j;
            run.generated -= j;
            self.cruise.buckets[next as usize % ring].push(i as u32);
        }
        // Reuse this step's bucket (now empty) for a later step.
        let mut due = due;
        due.clear();
        self.cruise.buckets[j as usize % ring] = due;
        self.prepare_next_events(store);
        let context = self.cruise.base_context + d * u64::from(j);
        let shape = BatchShape {
            prefill: PhaseSums::default(),
            decode: PhaseSums {
                requests: d as u32,
                new_tokens: d,
                context_tokens: context,
                attention_tokens: context,
                prompt_attention2: 0,
            },
        };
        debug_assert_eq!(shape, {
            let mut s = BatchShape::default();
            for run in &self.running {
                super::add_to_shape(&mut s, &self.cruise.materialize(run, a2));
            }
            s
        });
        let dt = (self.latency.step_time(&shape) + self.kv.take_transfer_time()).max(1);
        self.steps += 1;
        self.cruise.cruised += 1;
        self.step_pending = true;
        q.push(
            later(now, dt),
            Event::Step {
                instance: self.index,
            },
        );
        true
    }
}

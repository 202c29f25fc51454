//! Prompt KV computed on another instance (prefill/decode disaggregation):
//! the decode side of a KV transfer.
//!
//! The cluster's P/D path (`cluster::pd`) calls [`Instance::reserve_transfer`]
//! when a prefill finishes: the decode instance takes blocks for the whole
//! prompt at once — prompt blocks it already has cached are shared, the rest
//! are allocated and registered under the prompt's hashes, as they will hold
//! the transferred KV — or refuses (the request is dropped, counted). The
//! request holds those blocks while the transfer runs (the instance lists it
//! in `reserved`), then [`Instance::enqueue_transferred`] puts it in the wait
//! queue with its prompt computed. At admission it takes one token, the
//! last prompt token, which is recomputed to produce the first output token
//! (vLLM's scheduler does the same with KV loaded from a remote prefill), and
//! it decodes like any request from then on. A preempted one loses its
//! blocks and recomputes locally, like any preempted request. So does a
//! waiting one when the head of the queue cannot be admitted on an idle
//! instance (the blocks it holds may be the ones the head needs: without
//! this, the instance would wait forever).

use super::kv::KvCache;
use super::Instance;
use crate::engine::{Event, EventQueue, Tick};
use crate::request::{Request, RequestState, RequestStore, Slot};

/// `(computed, granted)` at the admission of a request whose prompt KV it
/// holds: everything but the last prompt token is computed.
#[inline]
pub(super) fn admission(req: &Request) -> (u32, u32) {
    debug_assert_eq!(req.computed, req.input_len);
    (req.input_len - 1, 1)
}

/// Structure of a request holding the blocks of its transferred prompt.
pub(super) fn check_reserved(r: &Request, kv: &KvCache, state: RequestState) -> Result<(), String> {
    if r.state != state
        || r.computed != r.input_len
        || r.kv_held() != kv.blocks_for(u64::from(r.input_len))
    {
        return Err(format!(
            "request {} with a transferred prompt: state {:?} (expected {state:?}), {} blocks, {} computed of {}",
            r.id,
            r.state,
            r.kv_held(),
            r.computed,
            r.input_len
        ));
    }
    Ok(())
}

/// What a reservation found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Prompt blocks already cached on the decode instance (not transferred).
    pub cached_blocks: u32,
    /// Prompt blocks the transfer has to move.
    pub transferred_blocks: u32,
}

impl Instance {
    /// Reserve KV for the whole prompt of the request in `slot`, whose
    /// prefill ran elsewhere. Applies this instance's `max_model_len` cap
    /// (the request's `output_len` may be lowered). `None` when the request
    /// can never be served here or the free blocks do not suffice now;
    /// nothing changes then.
    pub fn reserve_transfer(
        &mut self,
        slot: Slot,
        store: &mut RequestStore,
    ) -> Option<Reservation> {
        let b = self.config.block_size;
        let req = &mut store[slot];
        debug_assert_eq!(req.kv_held(), 0);
        let output_len = req.output_len;
        if !self.admissible(req) {
            return None;
        }
        self.kv.hash_prompt(req);
        let lookup = self.kv.lookup(req, req.input_len, &mut self.hit_scratch);
        let cached = lookup.hits * b;
        if !self
            .kv
            .admit(req, lookup, &self.hit_scratch, req.input_len - cached)
        {
            req.output_len = output_len;
            return None;
        }
        req.computed = req.input_len;
        self.reserved.push(slot);
        let total = self.kv.blocks_for(u64::from(req.input_len)) as u32;
        Some(Reservation {
            cached_blocks: lookup.hits,
            transferred_blocks: total - lookup.hits,
        })
    }

    /// The transfer of the request in `slot` arrived at `now`: it enters the
    /// wait queue holding its prompt's KV; a step is scheduled if none is.
    pub fn enqueue_transferred(
        &mut self,
        now: Tick,
        slot: Slot,
        store: &mut RequestStore,
        q: &mut EventQueue,
    ) {
        let pos = self
            .reserved
            .iter()
            .position(|&s| s == slot)
            .expect("a transfer arrived that the instance did not reserve");
        self.reserved.swap_remove(pos);
        let req = &mut store[slot];
        req.state = RequestState::Queued;
        self.waiting.push(slot, req);
        self.remote_waiting += 1;
        if !self.step_pending {
            self.step_pending = true;
            q.push(
                now,
                Event::Step {
                    instance: self.index,
                },
            );
        }
    }

    /// Release the transferred KV of every waiting request (they will
    /// recompute their prompts here, prefix cache permitting).
    #[cold]
    pub(super) fn give_up_waiting_transfers(&mut self, store: &mut RequestStore) {
        let slots: Vec<Slot> = self.waiting.iter().collect();
        for s in slots {
            let req = &mut store[s];
            if req.kv_held() != 0 {
                // It recomputes here and may hit its own blocks.
                self.kv.release_returning(req);
                req.computed = 0;
                self.remote_waiting -= 1;
            }
        }
        debug_assert_eq!(self.remote_waiting, 0);
    }

    /// Leading prompt blocks of `req` cached here (GPU or CPU tier), read
    /// live: what the `prefix-threshold` decider asks.
    pub fn cached_prompt_blocks(&mut self, req: &Request) -> u32 {
        self.kv
            .lookup(req, req.input_len, &mut self.hit_scratch)
            .hits
    }

    /// Requests whose prompt KV is on its way here.
    pub fn transfers_reserved(&self) -> usize {
        self.reserved.len()
    }
}

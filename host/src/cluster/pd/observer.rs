//! The instance observer of a P/D run: it hides the prefill leg of a
//! disaggregated request from the metrics. That leg generates one token (the
//! prefill instance runs it with one output token, as llm-d's prefill
//! request does) which the client never sees, and it ends in a hand-off, not
//! a completion; everything else passes through.

use std::collections::HashMap;

use crate::engine::Tick;
use crate::instance::InstanceObserver;
use crate::request::{Request, Slot};

use super::PrefillLeg;

/// Wraps the run's observer during a step of a P/D run.
pub(super) struct PdObserver<'a, O: InstanceObserver> {
    pub inner: &'a mut O,
    /// Requests in their prefill leg, by id.
    pub prefilling: &'a HashMap<u64, PrefillLeg>,
    /// Prefill legs that finished during the step.
    pub done: &'a mut Vec<Slot>,
}

impl<O: InstanceObserver> InstanceObserver for PdObserver<'_, O> {
    #[inline]
    fn first_token(&mut self, instance: u32, req: &Request, at: Tick) {
        if !self.prefilling.contains_key(&req.id) {
            self.inner.first_token(instance, req, at);
        }
    }

    #[inline]
    fn token_gap(&mut self, instance: u32, gap: Tick) {
        // A prefill leg has one token, hence no gap.
        self.inner.token_gap(instance, gap);
    }

    #[inline]
    fn token_gaps(&mut self, instance: u32, gap: Tick, count: u64) {
        self.inner.token_gaps(instance, gap, count);
    }

    fn completed(&mut self, instance: u32, slot: Slot, req: &Request, at: Tick) {
        if self.prefilling.contains_key(&req.id) {
            self.done.push(slot);
        } else {
            self.inner.completed(instance, slot, req, at);
        }
    }

    fn dropped(&mut self, instance: u32, slot: Slot, req: &Request, at: Tick) {
        self.inner.dropped(instance, slot, req, at);
    }

    fn preempted(&mut self, instance: u32, req: &Request, at: Tick) {
        self.inner.preempted(instance, req, at);
    }
}

//! First-token lifecycle events: an [`InstanceObserver`] that forwards every
//! call to the metrics collector and also records the first tokens of a
//! step, so the cluster can deliver them to the policies that asked.
//!
//! It is used only when some policy handles `first_token` events; otherwise
//! the instance talks to the collector directly (the step code is generic
//! over the observer, so the hook-free path is unchanged).

use crate::engine::Tick;
use crate::instance::InstanceObserver;
use crate::metrics::Collector;
use crate::request::{Request, SloClass, Slot};

/// What a first-token event needs of its request.
#[derive(Clone, Copy, Debug)]
pub(super) struct FirstToken {
    pub instance: u32,
    pub at: Tick,
    pub id: u64,
    pub arrival: Tick,
    pub input_len: u32,
    pub slo_class: SloClass,
    pub tenant: u32,
}

/// The collector, plus a record of the first tokens seen.
pub(super) struct FirstTokens<'a> {
    pub collector: &'a mut Collector,
    pub seen: &'a mut Vec<FirstToken>,
}

impl InstanceObserver for FirstTokens<'_> {
    fn first_token(&mut self, instance: u32, req: &Request, at: Tick) {
        self.seen.push(FirstToken {
            instance,
            at,
            id: req.id,
            arrival: req.arrival,
            input_len: req.input_len,
            slo_class: req.slo_class,
            tenant: req.tenant,
        });
        self.collector.first_token(instance, req, at);
    }
    fn token_gap(&mut self, instance: u32, gap: Tick) {
        self.collector.token_gap(instance, gap);
    }
    fn token_gaps(&mut self, instance: u32, gap: Tick, count: u64) {
        self.collector.token_gaps(instance, gap, count);
    }
    fn completed(&mut self, instance: u32, slot: Slot, req: &Request, at: Tick) {
        self.collector.completed(instance, slot, req, at);
    }
    fn dropped(&mut self, instance: u32, slot: Slot, req: &Request, at: Tick) {
        self.collector.dropped(instance, slot, req, at);
    }
    fn preempted(&mut self, instance: u32, req: &Request, at: Tick) {
        self.collector.preempted(instance, req, at);
    }
}

//! In-flight eviction (`[flow_control] in_flight_eviction = true`): the
//! sheddable requests the gateway dispatched, in eviction order — lowest
//! priority first, then the latest dispatched, then the latest request id —
//! so that when the cluster is saturated and a non-sheddable request waits
//! in the gateway queue, the first of them still waiting or running at its
//! instance can be removed to make room (see `cluster/flow_control.rs`).

use std::cmp::Reverse;
use std::collections::BTreeSet;

use crate::engine::Tick;
use crate::request::{Request, Slot};

/// Eviction order key: (priority, latest dispatch first, latest id first, slot).
type Key = (i32, Reverse<Tick>, Reverse<u64>, Slot);

/// The tracked sheddable requests.
#[derive(Debug, Default)]
pub struct Eviction {
    tracked: BTreeSet<Key>,
    /// An eviction event is scheduled and has not run yet.
    pub pending: bool,
}

fn key(slot: Slot, req: &Request) -> Key {
    (
        req.slo_class.priority(),
        Reverse(req.gateway_dispatched_at),
        Reverse(req.id),
        slot,
    )
}

impl Eviction {
    /// Track a request the gateway just dispatched, if it is sheddable.
    pub fn track(&mut self, slot: Slot, req: &Request) {
        if req.slo_class.priority() < 0 {
            self.tracked.insert(key(slot, req));
        }
    }

    /// Forget a request that ended (completed, dropped, rejected, evicted).
    pub fn untrack(&mut self, slot: Slot, req: &Request) {
        if req.slo_class.priority() < 0 && !self.tracked.is_empty() {
            self.tracked.remove(&key(slot, req));
        }
    }

    /// The tracked requests in eviction order.
    pub fn candidates(&self) -> impl Iterator<Item = Slot> + '_ {
        self.tracked.iter().map(|k| k.3)
    }

    /// Requests tracked.
    pub fn len(&self) -> usize {
        self.tracked.len()
    }

    /// True when nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.tracked.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::SloClass;

    fn req(id: u64, class: SloClass, dispatched: Tick) -> Request {
        Request {
            id,
            slo_class: class,
            gateway_dispatched_at: dispatched,
            ..Default::default()
        }
    }

    #[test]
    fn lowest_priority_then_latest_dispatch_then_latest_id_first() {
        let mut e = Eviction::default();
        let reqs = [
            (10, req(1, SloClass::Sheddable, 100)),
            (11, req(2, SloClass::Background, 50)),
            (12, req(3, SloClass::Sheddable, 300)),
            (13, req(4, SloClass::Critical, 400)),
            (14, req(5, SloClass::Batch, 500)),
            (15, req(6, SloClass::Sheddable, 300)),
        ];
        for (s, r) in &reqs {
            e.track(*s, r);
        }
        // Critical is never tracked; background (−3) before sheddable (−2)
        // before batch (−1); among sheddables the latest dispatch, then the
        // larger id.
        assert_eq!(e.candidates().collect::<Vec<_>>(), vec![11, 15, 12, 10, 14]);
        e.untrack(15, &reqs[5].1);
        e.untrack(13, &reqs[3].1);
        assert_eq!(e.candidates().collect::<Vec<_>>(), vec![11, 12, 10, 14]);
        assert_eq!(e.len(), 4);
    }
}

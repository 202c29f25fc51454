//! The wait queue of one instance.
//!
//! Every scheduler orders requests by a key that never changes while the
//! request waits (SLO-class priority, arrival time, prompt length, id), so the
//! queue is a heap on that key instead of a list re-sorted every step: each
//! operation is O(log n) however deep the queue grows under overload.
//!
//! FCFS is the exception: its key is the arrival order, and requests reach
//! an instance in nearly that order (only the queueing delay, which depends
//! on the prompt length, can swap neighbours). A deque kept sorted by
//! inserting from the back is then O(1) per request and touches only its
//! two ends, where a heap of a deep overload backlog (hundreds of thousands
//! of requests, tens of MB) costs a cache miss per level on every pop.
//!
//! A scheduler plugin supplies the primary key through [`SortKey`] (once per
//! request, when it enters the queue); the order is then the same heap.
//!
//! Preempted requests bypass the key and wait in a separate front deque, as in
//! vLLM, so work already started is resumed before new work is admitted. The
//! front is LIFO: the most recent preemption is served first. Batch formation
//! evicts from the tail of the batch, so successive victims X then Y come back
//! as Y, X — their original batch order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::{SchedulerKind, SortKey};
use crate::engine::Tick;
use crate::request::{Request, Slot};

/// Static ordering key of a waiting request (smallest first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    primary: i64,
    arrival: Tick,
    id: u64,
    slot: Slot,
}

/// The requests that were not preempted, by key.
#[derive(Debug)]
enum Ordered {
    /// FCFS: sorted ascending (see the module documentation).
    Sorted(VecDeque<Key>),
    Heap(BinaryHeap<Reverse<Key>>),
}

/// Wait queue: preempted requests first (most recent first), then the rest by
/// the scheduler's key.
pub(crate) struct WaitQueue {
    kind: SchedulerKind,
    front: VecDeque<Slot>,
    rest: Ordered,
    /// The key of [`SchedulerKind::Custom`].
    custom: Option<Box<dyn SortKey>>,
    /// The first error `custom` returned.
    error: Option<String>,
}

impl std::fmt::Debug for WaitQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitQueue")
            .field("kind", &self.kind)
            .field("front", &self.front)
            .field("rest", &self.rest)
            .field("custom", &self.custom.is_some())
            .finish()
    }
}

impl WaitQueue {
    pub fn new(kind: SchedulerKind) -> Self {
        let rest = match kind {
            SchedulerKind::Fcfs => Ordered::Sorted(VecDeque::new()),
            _ => Ordered::Heap(BinaryHeap::new()),
        };
        WaitQueue {
            kind,
            front: VecDeque::new(),
            rest,
            custom: None,
            error: None,
        }
    }

    /// The key source of [`SchedulerKind::Custom`].
    pub fn set_sort_key(&mut self, key: Box<dyn SortKey>) {
        self.custom = Some(key);
    }

    /// The first error of the custom key, taken.
    pub fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }

    fn key(&mut self, slot: Slot, req: &Request) -> Key {
        let primary = match self.kind {
            SchedulerKind::Fcfs => 0,
            SchedulerKind::PriorityFcfs => -i64::from(req.slo_class.priority()),
            SchedulerKind::Sjf => i64::from(req.input_len),
            SchedulerKind::ReversePriority => i64::from(req.slo_class.priority()),
            SchedulerKind::Custom => match self.custom.as_mut().map(|k| k.key(req)) {
                Some(Ok(k)) => k,
                Some(Err(e)) => {
                    self.error.get_or_insert(e);
                    0
                }
                None => {
                    self.error.get_or_insert_with(|| {
                        "a custom wait-queue order was configured without a sort key".into()
                    });
                    0
                }
            },
        };
        Key {
            primary,
            arrival: req.arrival,
            id: req.id,
            slot,
        }
    }

    /// A request enters the queue in scheduler order.
    pub fn push(&mut self, slot: Slot, req: &Request) {
        let k = self.key(slot, req);
        match &mut self.rest {
            Ordered::Sorted(q) => {
                // Usually the largest key so far; otherwise it belongs a
                // few places from the back.
                let mut at = q.len();
                while at > 0 && q[at - 1] > k {
                    at -= 1;
                }
                q.insert(at, k);
            }
            Ordered::Heap(h) => h.push(Reverse(k)),
        }
    }

    /// A preempted request goes back to the front.
    pub fn push_front(&mut self, slot: Slot) {
        self.front.push_front(slot);
    }

    /// The request that would be admitted next.
    pub fn peek(&self) -> Option<Slot> {
        match self.front.front() {
            Some(&s) => Some(s),
            None => match &self.rest {
                Ordered::Sorted(q) => q.front().map(|k| k.slot),
                Ordered::Heap(h) => h.peek().map(|Reverse(k)| k.slot),
            },
        }
    }

    /// Remove the request returned by [`WaitQueue::peek`].
    pub fn pop(&mut self) -> Option<Slot> {
        match self.front.pop_front() {
            Some(s) => Some(s),
            None => match &mut self.rest {
                Ordered::Sorted(q) => q.pop_front().map(|k| k.slot),
                Ordered::Heap(h) => h.pop().map(|Reverse(k)| k.slot),
            },
        }
    }

    pub fn len(&self) -> usize {
        self.front.len()
            + match &self.rest {
                Ordered::Sorted(q) => q.len(),
                Ordered::Heap(h) => h.len(),
            }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every waiting slot: the preempted ones in order, then the rest in no
    /// particular order.
    pub fn iter(&self) -> impl Iterator<Item = Slot> + '_ {
        let (sorted, heap) = match &self.rest {
            Ordered::Sorted(q) => (Some(q), None),
            Ordered::Heap(h) => (None, Some(h)),
        };
        self.front
            .iter()
            .copied()
            .chain(sorted.into_iter().flatten().map(|k| k.slot))
            .chain(
                heap.into_iter()
                    .flat_map(|h| h.iter().map(|Reverse(k)| k.slot)),
            )
    }

    /// Take `slot` out wherever it waits, every other request keeping its
    /// place; false if it is not here. O(n): for the gateway's rare
    /// in-flight evictions (`super::evict`), never on the step path.
    pub fn remove(&mut self, slot: Slot) -> bool {
        if let Some(i) = self.front.iter().position(|&s| s == slot) {
            self.front.remove(i);
            return true;
        }
        match &mut self.rest {
            Ordered::Sorted(q) => match q.iter().position(|k| k.slot == slot) {
                Some(i) => {
                    q.remove(i);
                    true
                }
                None => false,
            },
            Ordered::Heap(h) => {
                let n = h.len();
                h.retain(|Reverse(k)| k.slot != slot);
                h.len() != n
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every scheduler pops in key order (preempted requests first, most
    /// recent first) over random pushes, front pushes and pops, against a
    /// sorted-set model; FCFS arrivals come nearly in order, as they do.
    #[test]
    fn pops_in_key_order_against_a_model() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for kind in [
            SchedulerKind::Fcfs,
            SchedulerKind::PriorityFcfs,
            SchedulerKind::Sjf,
            SchedulerKind::ReversePriority,
        ] {
            let mut q = WaitQueue::new(kind);
            let mut model: BTreeSet<Key> = BTreeSet::new();
            let mut front: VecDeque<Slot> = VecDeque::new();
            let mut clock: Tick = 0;
            for id in 0..5000u64 {
                match next() % 10 {
                    0..=5 => {
                        clock += (next() % 50) as Tick;
                        // Arrival times jitter a little around the clock.
                        let req = Request {
                            id,
                            arrival: (clock - (next() % 120) as Tick).max(0),
                            input_len: (next() % 4000) as u32,
                            slo_class: crate::request::SloClass::ALL[(next() % 5) as usize],
                            ..Request::default()
                        };
                        let slot = id as Slot;
                        q.push(slot, &req);
                        model.insert(q.key(slot, &req));
                    }
                    6 => {
                        let slot = 1_000_000 + id as Slot;
                        q.push_front(slot);
                        front.push_front(slot);
                    }
                    _ => {
                        let want = front
                            .pop_front()
                            .or_else(|| model.pop_first().map(|k| k.slot));
                        assert_eq!(q.peek(), want, "{kind:?}");
                        assert_eq!(q.pop(), want, "{kind:?}");
                    }
                }
                assert_eq!(q.len(), model.len() + front.len());
            }
        }
    }
}

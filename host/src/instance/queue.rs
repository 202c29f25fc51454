//! The wait queue of one instance.
//!
//! Every scheduler orders requests by a key that never changes while the
//! request waits (SLO-class priority, arrival time, prompt length, id), so the
//! queue is a heap on that key instead of a list re-sorted every step: each
//! operation is O(log n) however deep the queue grows under overload.
//!
//! Preempted requests bypass the key and wait in a separate front deque, as in
//! vLLM, so work already started is resumed before new work is admitted. The
//! front is LIFO: the most recent preemption is served first. Batch formation
//! evicts from the tail of the batch, so successive victims X then Y come back
//! as Y, X — their original batch order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::SchedulerKind;
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

/// Wait queue: preempted requests first (most recent first), then the rest by
/// the scheduler's key.
#[derive(Debug)]
pub(crate) struct WaitQueue {
    kind: SchedulerKind,
    front: VecDeque<Slot>,
    heap: BinaryHeap<Reverse<Key>>,
}

impl WaitQueue {
    pub fn new(kind: SchedulerKind) -> Self {
        WaitQueue {
            kind,
            front: VecDeque::new(),
            heap: BinaryHeap::new(),
        }
    }

    fn key(&self, slot: Slot, req: &Request) -> Key {
        let primary = match self.kind {
            SchedulerKind::Fcfs => 0,
            SchedulerKind::PriorityFcfs => -i64::from(req.slo_class.priority()),
            SchedulerKind::Sjf => i64::from(req.input_len),
            SchedulerKind::ReversePriority => i64::from(req.slo_class.priority()),
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
        self.heap.push(Reverse(k));
    }

    /// A preempted request goes back to the front.
    pub fn push_front(&mut self, slot: Slot) {
        self.front.push_front(slot);
    }

    /// The request that would be admitted next.
    pub fn peek(&self) -> Option<Slot> {
        match self.front.front() {
            Some(&s) => Some(s),
            None => self.heap.peek().map(|Reverse(k)| k.slot),
        }
    }

    /// Remove the request returned by [`WaitQueue::peek`].
    pub fn pop(&mut self) -> Option<Slot> {
        match self.front.pop_front() {
            Some(s) => Some(s),
            None => self.heap.pop().map(|Reverse(k)| k.slot),
        }
    }

    pub fn len(&self) -> usize {
        self.front.len() + self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.front.is_empty() && self.heap.is_empty()
    }

    /// Every waiting slot: the preempted ones in order, then the rest in no
    /// particular order.
    pub fn iter(&self) -> impl Iterator<Item = Slot> + '_ {
        self.front
            .iter()
            .copied()
            .chain(self.heap.iter().map(|Reverse(k)| k.slot))
    }
}

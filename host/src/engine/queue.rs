//! The cluster-wide event queue: a binary heap with a total, deterministic order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::Tick;

pub use crate::request::Slot;

/// Every kind of thing that can happen in a simulation. A closed enum, so
/// every trigger of work is visible in one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The workload's next request(s) reach the cluster now (class 0).
    Arrivals,
    /// The admission policy decides on a request (class 1).
    Admission(Slot),
    /// The router picks an instance for an admitted request (class 2).
    Routing(Slot),
    /// P/D disaggregation: a request's prompt KV reached its decode instance (class 2).
    KvTransferDone(Slot),
    /// A routed request reaches its instance; the alpha queueing delay starts.
    InstanceArrival { instance: u32, slot: Slot },
    /// A request enters its instance's wait queue.
    Queued { instance: u32, slot: Slot },
    /// An instance finishes its running step (if any) and starts the next one.
    Step { instance: u32 },
    /// A timer of the gateway queue (`[flow_control]` only; class 2).
    Gateway(GatewayTimer),
    /// A real client's request timeout runs out for the request in `slot`
    /// (if it is still the one with these low 32 bits of its id; class 2).
    ClientTimeout { slot: Slot, id: u32 },
    /// A control-plane event (class 0, with the arrivals: an instance that
    /// becomes routable at `T` is routable for the requests arriving at
    /// `T`): `what` says which, `id` which instance, node or actuation.
    Control { what: u8, id: u32 },
}

/// The gateway queue's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatewayTimer {
    /// A dispatch attempt while the queue is not empty.
    Tick,
    /// The TTL of the request queued in this slot runs out (if it is still queued).
    Expire(Slot),
    /// In-flight eviction: remove a dispatched sheddable request from its
    /// instance for a waiting non-sheddable one.
    Evict,
}

impl Event {
    /// Ordering class at equal time: cluster events before instance events.
    fn class(&self) -> u8 {
        match self {
            Event::Arrivals | Event::Control { .. } => 0,
            Event::Admission(_) => 1,
            Event::Routing(_)
            | Event::KvTransferDone(_)
            | Event::Gateway(_)
            | Event::ClientTimeout { .. } => 2,
            Event::InstanceArrival { .. } | Event::Queued { .. } | Event::Step { .. } => 3,
        }
    }

    /// Instance index for instance events; 0 for cluster events.
    fn instance(&self) -> u32 {
        match self {
            Event::InstanceArrival { instance, .. }
            | Event::Queued { instance, .. }
            | Event::Step { instance } => *instance,
            _ => 0,
        }
    }
}

/// An event with its time, as it comes out of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheduled {
    pub time: Tick,
    pub event: Event,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// `(time, class, instance, sequence)` packed so that comparing keys is
    /// one integer comparison: the time (sign bit flipped, so the order of
    /// `i64` is kept) in the high 64 bits, then 2 bits of class, 20 of
    /// instance and 42 of sequence number.
    key: u128,
    event: Event,
}

const SEQ_BITS: u32 = 42;
const INSTANCE_BITS: u32 = 20;

impl Entry {
    #[inline]
    fn key(&self) -> u128 {
        self.key
    }

    #[inline]
    fn time(&self) -> Tick {
        ((self.key >> 64) as u64 ^ (1 << 63)) as Tick
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: reverse for a min-queue.
        other.key().cmp(&self.key())
    }
}

/// Min-queue of events keyed `(time, class, instance, sequence)`.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Entry>,
    seq: u64,
    now: Tick,
}

impl EventQueue {
    /// An empty queue at time 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedule `event` at `time`. Time must not be before the current clock.
    #[inline]
    pub fn push(&mut self, time: Tick, event: Event) {
        debug_assert!(
            time >= self.now,
            "INV-3: event {event:?} scheduled at {time} before the clock {}",
            self.now
        );
        let instance = event.instance();
        assert!(
            instance < 1 << INSTANCE_BITS && self.seq < 1 << SEQ_BITS,
            "event queue limits exceeded (instance {instance}, event {})",
            self.seq
        );
        let low = (u64::from(event.class()) << (INSTANCE_BITS + SEQ_BITS))
            | (u64::from(instance) << SEQ_BITS)
            | self.seq;
        let high = time as u64 ^ (1 << 63);
        self.heap.push(Entry {
            key: (u128::from(high) << 64) | u128::from(low),
            event,
        });
        self.seq += 1;
    }

    /// Time of the earliest event, if any.
    #[inline]
    pub fn peek_time(&self) -> Option<Tick> {
        self.heap.peek().map(|e| e.time())
    }

    /// The earliest event, if any (without removing it).
    #[inline]
    pub fn peek_event(&self) -> Option<&Event> {
        self.heap.peek().map(|e| &e.event)
    }

    /// Remove the earliest event and advance the clock to its time.
    #[inline]
    pub fn pop(&mut self) -> Option<Scheduled> {
        let e = self.heap.pop()?;
        debug_assert!(e.time() >= self.now, "INV-3: clock went back");
        self.now = e.time();
        Some(Scheduled {
            time: e.time(),
            event: e.event,
        })
    }

    /// The current clock: the time of the last popped event (0 at start).
    #[inline]
    pub fn now(&self) -> Tick {
        self.now
    }

    /// Number of events waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when no event is waiting.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};
    use std::collections::BTreeMap;

    #[test]
    fn cluster_before_instance_and_lowest_index_first() {
        let mut q = EventQueue::new();
        q.push(10, Event::Step { instance: 2 });
        q.push(
            10,
            Event::Queued {
                instance: 1,
                slot: 7,
            },
        );
        q.push(10, Event::Routing(3));
        q.push(10, Event::Arrivals);
        q.push(10, Event::Admission(5));
        q.push(9, Event::Step { instance: 9 });
        let order: Vec<Event> = std::iter::from_fn(|| q.pop().map(|s| s.event)).collect();
        assert_eq!(
            order,
            vec![
                Event::Step { instance: 9 },
                Event::Arrivals,
                Event::Admission(5),
                Event::Routing(3),
                Event::Queued {
                    instance: 1,
                    slot: 7
                },
                Event::Step { instance: 2 },
            ]
        );
    }

    #[test]
    fn fifo_on_full_ties() {
        let mut q = EventQueue::new();
        for s in 0..5 {
            q.push(
                3,
                Event::Queued {
                    instance: 0,
                    slot: s,
                },
            );
        }
        let slots: Vec<u32> = std::iter::from_fn(|| q.pop())
            .map(|s| match s.event {
                Event::Queued { slot, .. } => slot,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(slots, vec![0, 1, 2, 3, 4]);
    }

    /// Shadow-model test: random pushes and pops agree with a BTreeMap keyed the same way.
    #[test]
    fn agrees_with_shadow_model() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut q = EventQueue::new();
        let mut shadow: BTreeMap<(Tick, u8, u32, u64), Event> = BTreeMap::new();
        let mut seq = 0u64;
        for _ in 0..200_000 {
            if rng.random_bool(0.55) {
                let time = q.now() + rng.random_range(0..5);
                let instance = rng.random_range(0..4);
                let event = match rng.random_range(0..4) {
                    0 => Event::Arrivals,
                    1 => Event::Routing(seq as u32),
                    2 => Event::Queued {
                        instance,
                        slot: seq as u32,
                    },
                    _ => Event::Step { instance },
                };
                q.push(time, event);
                shadow.insert((time, event.class(), event.instance(), seq), event);
                seq += 1;
            } else {
                let got = q.pop();
                let want = shadow.pop_first();
                assert_eq!(got.map(|s| (s.time, s.event)), want.map(|(k, e)| (k.0, e)));
            }
        }
    }
}

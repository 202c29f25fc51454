//! Removing one request from an instance on the gateway's order (in-flight
//! eviction of a sheddable request, `[flow_control] in_flight_eviction`).
//!
//! The request leaves wherever it is — the wait queue or the running batch —
//! releasing every KV block it holds (INV-4), and ends `Dropped`: it counts
//! with the instance's drops (`dropped_unservable`, as an `immediate`
//! drain's), so INV-1 (injected = completed + queued + running + dropped)
//! holds, and it is reported to the observer like any drop. A step already
//! in flight keeps its duration (the engine aborts the request at the next
//! batch, as vLLM does); its grant for the request is discarded.

use super::{Instance, InstanceObserver};
use crate::engine::Tick;
use crate::request::{RequestState, RequestStore, Slot};

impl Instance {
    /// Evict the request in `slot` if it waits or runs here; false (and
    /// nothing changed) otherwise.
    pub fn evict(
        &mut self,
        now: Tick,
        slot: Slot,
        store: &mut RequestStore,
        obs: &mut impl InstanceObserver,
    ) -> bool {
        if !store.is_live(slot) || store[slot].instance != self.index {
            return false;
        }
        match store[slot].state {
            RequestState::Queued => {
                if !self.waiting.remove(slot) {
                    return false;
                }
            }
            RequestState::Running => {
                // Cruised steps keep the batch's base progress: write the
                // true progress back first (the in-flight step is unchanged).
                self.leave_cruise();
                let Some(at) = self.running.iter().position(|r| r.slot == slot) else {
                    return false;
                };
                let mut run = self.running.remove(at);
                run.granted = 0;
                let req = store.hot_mut(run.hot);
                run.write_back(req);
                if let Some(l) = self.lora.as_deref_mut() {
                    l.unpin(req.adapter.get());
                }
            }
            _ => return false,
        }
        let req = &mut store[slot];
        self.kv.release_final(req);
        req.granted = 0;
        self.end_dropped(now, slot, req, obs);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Event, EventQueue};
    use crate::instance::latency::LinearModel;
    use crate::instance::{InstanceConfig, LatencyModel};
    use crate::request::{Request, Segment};

    #[derive(Default)]
    struct Seen {
        completed: Vec<(u64, Tick)>,
        dropped: Vec<(u64, Tick)>,
    }

    impl InstanceObserver for Seen {
        fn first_token(&mut self, _: u32, _: &Request, _: Tick) {}
        fn token_gap(&mut self, _: u32, _: Tick) {}
        fn completed(&mut self, _: u32, _: Slot, req: &Request, at: Tick) {
            self.completed.push((req.id, at));
        }
        fn dropped(&mut self, _: u32, _: Slot, req: &Request, at: Tick) {
            self.dropped.push((req.id, at));
        }
        fn preempted(&mut self, _: u32, _: &Request, _: Tick) {}
    }

    struct Sim {
        inst: Instance,
        q: EventQueue,
        store: RequestStore,
        seen: Seen,
        slots: Vec<Slot>,
    }

    impl Sim {
        /// One instance with 16-token blocks, 1,000 blocks, a batch of at most `seqs`.
        fn new(seqs: u32) -> Self {
            let config = InstanceConfig {
                block_size: 16,
                total_kv_blocks: 1000,
                max_num_seqs: seqs,
                ..InstanceConfig::default()
            };
            let latency = LatencyModel::Linear(LinearModel {
                alpha: [100.0, 0.5, 0.0],
                beta: [2000.0, 5.0, 30.0],
            });
            Sim {
                inst: Instance::new(0, config, latency),
                q: EventQueue::new(),
                store: RequestStore::new(),
                seen: Seen::default(),
                slots: Vec::new(),
            }
        }

        /// A request with a unique 100-token prompt and `n` output tokens at `at`.
        fn add(&mut self, at: Tick, n: u32) {
            let id = self.slots.len() as u64;
            let slot = self.store.insert_with(|r| {
                r.id = id;
                r.arrival = at;
                r.input_len = 100;
                r.output_len = n;
                r.prompt.push(Segment {
                    seed: 7_000 + id,
                    len: 100,
                });
                r.output_seed = 9_000 + id;
                r.instance = 0;
            });
            self.slots.push(slot);
            self.q
                .push(at, Event::InstanceArrival { instance: 0, slot });
        }

        /// Run the events up to `until`, checking the instance after each.
        fn run_until(&mut self, until: Tick) {
            while self.q.peek_time().is_some_and(|t| t <= until) {
                let ev = self.q.pop().unwrap();
                match ev.event {
                    Event::InstanceArrival { slot, .. } => {
                        self.inst
                            .on_arrival(ev.time, slot, &mut self.store, &mut self.q)
                    }
                    Event::Queued { slot, .. } => self.inst.on_queued(
                        ev.time,
                        slot,
                        &mut self.store,
                        &mut self.q,
                        &mut self.seen,
                    ),
                    Event::Step { .. } => {
                        self.inst
                            .on_step(ev.time, &mut self.store, &mut self.q, &mut self.seen)
                    }
                    other => panic!("unexpected {other:?}"),
                }
                self.inst.sync(&mut self.store);
                self.inst.check_invariants(&self.store).unwrap();
            }
        }

        fn evict(&mut self, at: Tick, id: usize) -> bool {
            let slot = self.slots[id];
            let ok = self.inst.evict(at, slot, &mut self.store, &mut self.seen);
            self.inst.check_invariants(&self.store).unwrap();
            ok
        }
    }

    #[test]
    fn a_running_request_leaves_the_batch_and_its_blocks() {
        let mut s = Sim::new(256);
        s.add(0, 200);
        s.add(0, 200);
        // Both decode (cruising) after 40 steps of ~3 ms.
        s.run_until(100_000);
        assert!(s.inst.cruise.active(), "the batch cruises");
        assert_eq!(s.inst.batch_size(), 2);
        let held = |s: &Sim, id: usize| s.store[s.slots[id]].kv_held();
        let (a, b) = (held(&s, 0), held(&s, 1));
        assert!(a > 0 && b > 0);
        assert_eq!(s.inst.used_kv_blocks(), a + b);
        let generated = s.store[s.slots[1]].generated;
        assert!(s.evict(100_000, 1));
        // Request 1 is dropped with its progress written back, its blocks
        // free; request 0 keeps its own.
        let r = &s.store[s.slots[1]];
        assert_eq!(r.state, RequestState::Dropped);
        assert_eq!(r.kv_held(), 0);
        assert!(r.generated >= generated);
        assert_eq!(s.inst.used_kv_blocks(), a);
        assert_eq!(s.inst.batch_size(), 1);
        assert_eq!(s.seen.dropped, vec![(1, 100_000)]);
        assert_eq!(s.inst.counts().dropped, 1);
        // Not here any more: a second eviction changes nothing.
        assert!(!s.evict(100_001, 1));
        s.run_until(Tick::MAX);
        assert_eq!(s.seen.completed.len(), 1);
        assert_eq!(s.seen.completed[0].0, 0);
        assert_eq!(s.store[s.slots[0]].generated, 200);
        assert_eq!(s.inst.used_kv_blocks(), 0);
        assert!(!s.inst.step_pending());
    }

    #[test]
    fn a_waiting_request_leaves_the_queue_and_the_others_keep_their_order() {
        let mut s = Sim::new(1);
        for i in 0..4 {
            s.add(i, 3);
        }
        s.run_until(10);
        assert_eq!((s.inst.batch_size(), s.inst.queue_depth()), (0, 0));
        // All four queued by 200 µs; request 0 runs, 1..3 wait.
        s.run_until(1_000);
        assert_eq!((s.inst.batch_size(), s.inst.queue_depth()), (1, 3));
        assert!(s.evict(1_000, 2));
        assert_eq!(s.inst.queue_depth(), 2);
        assert_eq!(s.inst.used_kv_blocks(), s.store[s.slots[0]].kv_held());
        s.run_until(Tick::MAX);
        let order: Vec<u64> = s.seen.completed.iter().map(|c| c.0).collect();
        assert_eq!(order, vec![0, 1, 3]);
        assert_eq!(s.seen.dropped, vec![(2, 1_000)]);
        assert_eq!(s.inst.used_kv_blocks(), 0);
    }
}

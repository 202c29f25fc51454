//! A one-instance event loop and a recording observer for the tests.

use std::collections::HashMap;

use crate::engine::{Event, EventQueue, Tick};
use crate::instance::latency::LinearModel;
use crate::instance::{Instance, InstanceConfig, InstanceObserver, LatencyModel};
use crate::request::{Request, RequestState, RequestStore, Segment, Slot};

/// Everything the instance reported, in order.
#[derive(Debug, Default)]
pub struct Recorder {
    /// (request id, time) of first tokens.
    pub first_tokens: Vec<(u64, Tick)>,
    /// ITL samples, step by step (sorted within a step).
    pub gaps: Vec<Tick>,
    /// (request id, time) of completions.
    pub completed: Vec<(u64, Tick)>,
    /// (request id, time) of drops.
    pub dropped: Vec<(u64, Tick)>,
    /// (request id, time) of preemptions.
    pub preempted: Vec<(u64, Tick)>,
}

impl InstanceObserver for Recorder {
    fn first_token(&mut self, _instance: u32, req: &Request, at: Tick) {
        self.first_tokens.push((req.id, at));
    }
    fn token_gap(&mut self, _instance: u32, gap: Tick) {
        self.gaps.push(gap);
    }
    fn completed(&mut self, _instance: u32, _slot: Slot, req: &Request, at: Tick) {
        self.completed.push((req.id, at));
    }
    fn dropped(&mut self, _instance: u32, _slot: Slot, req: &Request, at: Tick) {
        self.dropped.push((req.id, at));
    }
    fn preempted(&mut self, _instance: u32, req: &Request, at: Tick) {
        self.preempted.push((req.id, at));
    }
}

/// A linear latency model.
pub fn linear(alpha: [f64; 3], beta: [f64; 3]) -> LatencyModel {
    LatencyModel::Linear(LinearModel { alpha, beta })
}

/// A test configuration: `blocks` blocks of `block_size`, otherwise defaults.
pub fn config(block_size: u32, blocks: u64) -> InstanceConfig {
    InstanceConfig {
        block_size,
        total_kv_blocks: blocks,
        ..InstanceConfig::default()
    }
}

/// One instance, its event queue and its requests. Checks after every event:
/// the instance's own consistency (KV structure, INV-4, INV-8), clock
/// monotonicity (INV-3), at most one pending step, and legal lifecycle
/// transitions (INV-2).
pub struct Sim {
    pub inst: Instance,
    pub q: EventQueue,
    pub store: RequestStore,
    pub obs: Recorder,
    /// Slots in insertion order (request id = index).
    pub slots: Vec<Slot>,
    /// Step events executed.
    pub step_events: u64,
    /// Events executed.
    pub events: u64,
    /// Steps in the event queue, counted from what the handlers pushed.
    pending_steps: u32,
    last_time: Tick,
    states: Vec<RequestState>,
    /// Check the full instance consistency after every event (O(state)).
    pub deep_checks: bool,
}

impl Sim {
    pub fn new(config: InstanceConfig, latency: LatencyModel) -> Self {
        Sim {
            inst: Instance::new(0, config, latency),
            q: EventQueue::new(),
            store: RequestStore::new(),
            obs: Recorder::default(),
            slots: Vec::new(),
            step_events: 0,
            events: 0,
            pending_steps: 0,
            last_time: 0,
            states: Vec::new(),
            deep_checks: true,
        }
    }

    /// Add a request arriving at `arrival` with the given prompt segments and
    /// `n` output tokens; returns its id.
    pub fn add(&mut self, arrival: Tick, prompt: &[Segment], n: u32) -> u64 {
        let id = self.slots.len() as u64;
        let slot = self.store.insert_with(|r| {
            r.id = id;
            r.arrival = arrival;
            r.input_len = prompt.iter().map(|s| s.len).sum();
            r.output_len = n;
            r.prompt.extend_from_slice(prompt);
            r.output_seed = 1_000_000 + id;
            r.instance = 0;
        });
        self.slots.push(slot);
        self.states.push(RequestState::Pipeline);
        self.q
            .push(arrival, Event::InstanceArrival { instance: 0, slot });
        id
    }

    /// Add a request with a unique prompt of `l` tokens.
    pub fn add_unique(&mut self, arrival: Tick, l: u32, n: u32) -> u64 {
        let seed = 500_000 + self.slots.len() as u64;
        self.add(arrival, &[Segment { seed, len: l }], n)
    }

    pub fn req(&self, id: u64) -> &Request {
        &self.store[self.slots[id as usize]]
    }

    /// Execute every event with time <= `horizon`; panics after `max_events`
    /// (livelock guard).
    pub fn run_until(&mut self, horizon: Tick, max_events: u64) {
        while let Some(t) = self.q.peek_time() {
            if t > horizon {
                break;
            }
            let ev = self.q.pop().unwrap();
            assert!(ev.time >= self.last_time, "INV-3: clock went back");
            self.last_time = ev.time;
            self.events += 1;
            assert!(
                self.events <= max_events,
                "livelock: more than {max_events} events"
            );
            let before = self.q.len();
            match ev.event {
                Event::InstanceArrival { slot, .. } => {
                    self.inst
                        .on_arrival(ev.time, slot, &mut self.store, &mut self.q);
                    assert_eq!(self.q.len(), before + 1);
                }
                Event::Queued { slot, .. } => {
                    self.inst
                        .on_queued(ev.time, slot, &mut self.store, &mut self.q, &mut self.obs);
                    self.pending_steps += (self.q.len() - before) as u32;
                }
                Event::Step { .. } => {
                    self.step_events += 1;
                    self.pending_steps -= 1;
                    let gaps = self.obs.gaps.len();
                    self.inst
                        .on_step(ev.time, &mut self.store, &mut self.q, &mut self.obs);
                    // A step reports its ITL samples in no particular order.
                    self.obs.gaps[gaps..].sort_unstable();
                    self.pending_steps += (self.q.len() - before) as u32;
                }
                other => panic!("unexpected event {other:?}"),
            }
            // Running requests' progress lives in the batch; bring the
            // records up to date before looking at them.
            self.inst.sync(&mut self.store);
            assert!(self.pending_steps <= 1, "more than one pending step");
            assert_eq!(self.pending_steps == 1, self.inst.step_pending());
            self.check_transitions();
            if self.deep_checks {
                if let Err(e) = self.inst.check_invariants(&self.store) {
                    panic!("at t={}: {e}", ev.time);
                }
            }
        }
    }

    /// Run until no event is left.
    pub fn run(&mut self) {
        self.run_until(Tick::MAX, 2_000_000);
    }

    /// INV-2: only legal lifecycle transitions since the last event.
    fn check_transitions(&mut self) {
        use RequestState::*;
        for (i, &slot) in self.slots.iter().enumerate() {
            let new = self.store[slot].state;
            let old = self.states[i];
            let ok = old == new
                || matches!(
                    (old, new),
                    (Pipeline, Queued)
                        | (Pipeline, Dropped)
                        | (Queued, Running)
                        | (Running, Queued)
                        | (Running, Completed)
                );
            assert!(ok, "INV-2: request {i} went {old:?} -> {new:?}");
            self.states[i] = new;
        }
    }

    /// Per-request count of observer events, for the once-only checks.
    pub fn first_token_counts(&self) -> HashMap<u64, usize> {
        let mut m = HashMap::new();
        for (id, _) in &self.obs.first_tokens {
            *m.entry(*id).or_default() += 1;
        }
        m
    }
}

/// A prompt segment.
pub fn seg(seed: u64, len: u32) -> Segment {
    Segment { seed, len }
}

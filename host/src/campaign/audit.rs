//! Invariants checked after every event of a campaign run: INV-3 (the clock
//! never goes back), INV-2 (only the documented state transitions), INV-4
//! and INV-8 with the instance's own structural check on the instance the
//! event touched, the Tier 1 pending counts, and what each routing decision
//! saw (compared with the trace for INV-7 at the end). With a control
//! plane: GPU conservation on every node, routing only to routable
//! instances, and the two extra transitions of a drain (a `redirect` sends
//! a queued request back to the pipeline, an `immediate` drops it).
//!
//! The instance's structural check reads every KV block it ever handed out.
//! A generated run with a million-block cache, one-token blocks and long
//! prompts touches tens of thousands of them, so checking after every one of
//! its ~10⁴ events cost 48 s of a debug campaign; such an instance is
//! checked on a stride instead, keeping the work per event near
//! [`CHECK_BUDGET`] blocks (a small cache, where pressure, preemption and
//! eviction happen, is still checked after every event).

use std::collections::HashMap;

use crate::cluster::{AuditView, EventAudit};
use crate::engine::{Event, Tick};
use crate::request::RequestState;

/// What the cluster looked like when it routed one request.
#[derive(Clone, Debug)]
pub struct RoutingSeen {
    pub time: Tick,
    pub chosen: u32,
    pub queue_depth: Vec<u32>,
    pub batch_size: Vec<u32>,
    /// Pending counts the decision saw (before its own increment).
    pub pending: Vec<u32>,
    pub free_kv_blocks: Vec<u64>,
}

/// KV blocks the instance check may read per event before it is strided.
pub const CHECK_BUDGET: u64 = 4096;

/// Every how many of its events an instance that has handed out `blocks`
/// KV blocks is checked: 1 up to [`CHECK_BUDGET`], then proportionally.
pub fn check_stride(blocks: u64) -> u64 {
    blocks.div_ceil(CHECK_BUDGET).max(1)
}

/// The auditor: records the first violation and the routing observations.
#[derive(Debug, Default)]
pub struct Auditor {
    last_time: Tick,
    pub events: u64,
    pub violation: Option<String>,
    /// Last state seen of every request still in the system, by id.
    states: HashMap<u64, RequestState>,
    /// Last state seen of every request that left (by id).
    pub last_seen: HashMap<u64, RequestState>,
    pub routed: HashMap<u64, RoutingSeen>,
    /// Earlier routings of requests routed again (a `redirect` drain), by
    /// (id, time).
    pub routed_before: HashMap<(u64, Tick), RoutingSeen>,
    /// Events seen per instance (for the check stride).
    instance_events: Vec<u64>,
}

/// Whether `from → to` is a documented transition (INV-2).
pub fn allowed(from: RequestState, to: RequestState) -> bool {
    use RequestState::*;
    from == to
        || matches!(
            (from, to),
            (Pipeline, Queued | Rejected | Dropped)
                | (Queued, Running)
                | (Running, Queued | Completed | Transferring)
                | (Transferring, Queued | Dropped)
        )
}

impl Auditor {
    fn fail(&mut self, what: String) {
        self.violation.get_or_insert(what);
    }
}

impl EventAudit for Auditor {
    fn after_event(&mut self, v: AuditView<'_>) {
        if self.violation.is_some() {
            return;
        }
        self.events += 1;
        if v.time < self.last_time {
            self.fail(format!(
                "INV-3: event {:?} at {} after the clock reached {}",
                v.event, v.time, self.last_time
            ));
        }
        self.last_time = v.time;
        let touched = match v.event {
            Event::InstanceArrival { instance, .. }
            | Event::Queued { instance, .. }
            | Event::Step { instance } => Some(instance),
            _ => None,
        };
        if let Some(i) = touched {
            let inst = &v.instances[i as usize];
            if self.instance_events.len() < v.instances.len() {
                self.instance_events.resize(v.instances.len(), 0);
            }
            let seen = &mut self.instance_events[i as usize];
            *seen += 1;
            if *seen % check_stride(inst.kv_blocks_ever_used()) == 0 {
                if let Err(e) = inst.check_invariants(v.store) {
                    self.fail(format!(
                        "instance {i} after {:?} at {}: {e}",
                        v.event, v.time
                    ));
                }
            }
        }
        if let Some(c) = v.control {
            if let Some(f) = &c.fleet {
                if let Err(e) = f.check(&c.instances_per_node()) {
                    self.fail(format!(
                        "GPU conservation after {:?} at {}: {e}",
                        v.event, v.time
                    ));
                }
            }
            if let Event::Routing(slot) = v.event {
                let i = v.store[slot].instance;
                if v.store.is_live(slot)
                    && v.store[slot].state == RequestState::Pipeline
                    && i != u32::MAX
                    && !c.lives[i as usize].state.is_routable()
                {
                    self.fail(format!(
                        "request {} routed to instance {i} in state {} at {}",
                        v.store[slot].id,
                        c.lives[i as usize].state.name(),
                        v.time
                    ));
                }
            }
        }
        let drains = v.control.is_some();
        // INV-2 over every live request; Tier 1 pending counts.
        let mut pending = vec![0u32; v.instances.len()];
        let mut live = HashMap::with_capacity(self.states.len());
        for s in 0..v.store.capacity() as u32 {
            if !v.store.is_live(s) {
                continue;
            }
            let r = &v.store[s];
            let before = self
                .states
                .get(&r.id)
                .copied()
                .unwrap_or(RequestState::Pipeline);
            let drained = drains
                && matches!(
                    (before, r.state),
                    (
                        RequestState::Queued,
                        RequestState::Pipeline | RequestState::Dropped
                    )
                );
            if !allowed(before, r.state) && !drained {
                self.fail(format!(
                    "INV-2: request {} went {before:?} → {:?} at {}",
                    r.id, r.state, v.time
                ));
            }
            if r.state == RequestState::Pipeline && r.instance != u32::MAX {
                pending[r.instance as usize] += 1;
            }
            live.insert(r.id, r.state);
        }
        for (id, st) in std::mem::replace(&mut self.states, live) {
            if !self.states.contains_key(&id) {
                self.last_seen.insert(id, st);
            }
        }
        if pending != v.pending {
            self.fail(format!(
                "Tier 1: pending counts {:?}, requests routed and not yet queued {:?} at {}",
                v.pending, pending, v.time
            ));
        }
        if let Event::Routing(slot) = v.event {
            let r = &v.store[slot];
            if !v.store.is_live(slot) || r.instance == u32::MAX {
                // Rejected: no routable instance.
                return;
            }
            let mut before = v.pending.to_vec();
            before[r.instance as usize] = before[r.instance as usize].saturating_sub(1);
            let earlier = self.routed.insert(
                r.id,
                RoutingSeen {
                    time: v.time,
                    chosen: r.instance,
                    queue_depth: v.instances.iter().map(|i| i.queue_depth()).collect(),
                    batch_size: v.instances.iter().map(|i| i.batch_size()).collect(),
                    pending: before,
                    free_kv_blocks: v.instances.iter().map(|i| i.free_kv_blocks()).collect(),
                },
            );
            if let Some(e) = earlier {
                self.routed_before.insert((r.id, e.time), e);
            }
        }
    }
}

#[test]
fn small_caches_are_checked_after_every_event_large_ones_on_a_stride() {
    assert_eq!(check_stride(0), 1);
    assert_eq!(check_stride(CHECK_BUDGET), 1);
    assert_eq!(check_stride(CHECK_BUDGET + 1), 2);
    // The 48-second case: ~40,000 one-token blocks → every 10th event.
    assert_eq!(check_stride(40_000), 10);
}

//! A run driven from outside (`blis serve`): requests are injected as they
//! arrive from the network ([`Cluster::inject`], into an
//! [`external`](crate::workload::Workload::external) workload), the caller
//! executes events one at a time up to the simulated present
//! ([`Cluster::begin`], [`Cluster::next_time`], [`Cluster::step`]), and
//! reads each injected request's progress — tokens the client has seen,
//! and when — while it runs ([`Cluster::progress`]) and its end
//! ([`Cluster::take_ended`]). A request may be pinned to one instance (a
//! client talking to that instance's own server): it skips admission and
//! routing, as a request sent straight to a vLLM server does.
//!
//! Off (`Cluster::external` is `None`) a run pays one branch per arrival
//! and per release.

use std::collections::HashMap;

use super::Cluster;
use crate::engine::Tick;
use crate::plugins::PluginError;
use crate::request::{Request, RequestState, Slot};

/// What the caller of an external run tracks.
#[derive(Debug, Default)]
pub(super) struct External {
    /// Requests injected so far (the next one's id).
    injected: u64,
    /// Request id → the instance it is pinned to.
    pinned: HashMap<u64, u32>,
    /// Request id → its slot, from its arrival to its release.
    live: HashMap<u64, Slot>,
    /// Requests released since the last [`Cluster::take_ended`].
    ended: Vec<Ended>,
}

/// A live request's progress as its client sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub state: RequestState,
    /// The instance it runs on (`u32::MAX` before routing).
    pub instance: u32,
    /// Output tokens delivered so far.
    pub generated: u32,
    /// When the first and the latest delivered token reached the client
    /// (`UNSET` before).
    pub first_token_at: Tick,
    pub last_token_at: Tick,
    /// When it first entered a running batch (`UNSET` before).
    pub scheduled_at: Tick,
}

/// One instance's load as its server's `/metrics` shows it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct InstanceLoad {
    pub waiting: u32,
    pub running: u32,
    pub kv_utilization: f64,
    pub preemptions: u64,
    /// With `[lora]`: the adapters (workload indexes) of the requests
    /// running and waiting, and the resident-adapter capacity.
    pub lora: Option<(Vec<u32>, Vec<u32>, u32)>,
}

/// What [`Cluster::cancel`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// The request left its instance (queue or batch), its KV released; it
    /// ends `Dropped` and is reported by [`Cluster::take_ended`].
    Done,
    /// It is between the cluster's front and an instance (admission,
    /// routing, the gateway's queue, a P/D transfer): ask again later.
    Later,
    /// Not live: it never arrived or already ended.
    Gone,
}

/// A request that left the run: completed, rejected or dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    pub id: u64,
    pub progress: Progress,
}

fn progress_of(r: &Request) -> Progress {
    Progress {
        state: r.state,
        instance: r.instance,
        generated: r.generated,
        first_token_at: r.first_token_at,
        last_token_at: r.last_token_at,
        scheduled_at: r.scheduled_at,
    }
}

impl Cluster {
    /// Make this run one driven from outside (before [`Cluster::begin`]);
    /// its workload must be an external one.
    pub fn drive_externally(&mut self) {
        self.external = Some(Box::default());
    }

    /// A request arriving at `at` (raised to the simulated present), sent
    /// to instance `pin`'s own server or, with `None`, to the cluster's
    /// admission and routing. Returns its id, or `None` when the run is not
    /// driven externally.
    pub fn inject(&mut self, req: Request, at: Tick, pin: Option<u32>) -> Option<u64> {
        let ext = self.external.as_deref_mut()?;
        let mut req = req;
        req.arrival = at.max(self.queue.now());
        let id = ext.injected;
        if !self.workload.push(req) {
            return None;
        }
        ext.injected += 1;
        if let Some(i) = pin {
            ext.pinned.insert(id, i);
        }
        self.schedule_arrivals();
        Some(id)
    }

    /// The simulated present: the time of the last event executed.
    pub fn now(&self) -> Tick {
        self.queue.now()
    }

    /// Write every running request's progress to its record (instances
    /// keep it in their batch between the events that touch a record):
    /// call before [`Cluster::progress`] between events.
    pub fn sync_progress(&mut self) {
        for inst in &self.instances {
            inst.sync(&mut self.store);
        }
    }

    /// The progress of a live injected request (`None` before it arrived
    /// and after it ended).
    pub fn progress(&self, id: u64) -> Option<Progress> {
        let slot = *self.external.as_deref()?.live.get(&id)?;
        Some(progress_of(&self.store[slot]))
    }

    /// Cancel live request `id` (its client went away), as vLLM aborts a
    /// request whose connection closed: it leaves its instance's queue or
    /// running batch at the simulated present, releasing its KV blocks, and
    /// ends `Dropped` (counted with the instance's drops). A step already
    /// running keeps its duration.
    pub fn cancel(&mut self, id: u64) -> Result<Cancel, Box<PluginError>> {
        let Some(slot) = self
            .external
            .as_deref()
            .and_then(|e| e.live.get(&id).copied())
        else {
            return Ok(Cancel::Gone);
        };
        Ok(if self.abort(self.queue.now(), slot)? {
            Cancel::Done
        } else {
            Cancel::Later
        })
    }

    /// Abort the request in `slot` at `t` where it waits or runs (its
    /// client went away: [`Cluster::cancel`], a real client's timeout): it
    /// leaves its instance's queue or batch, releasing its KV blocks, and
    /// ends `Dropped`. False, and nothing changed, when it is not on an
    /// instance's queue or batch.
    pub(super) fn abort(&mut self, t: Tick, slot: Slot) -> Result<bool, Box<PluginError>> {
        if !matches!(
            self.store[slot].state,
            RequestState::Queued | RequestState::Running
        ) {
            return Ok(false);
        }
        let i = self.store[slot].instance;
        self.snapshots.touched(i);
        if !self.instances[i as usize].evict(t, slot, &mut self.store, &mut self.collector) {
            return Ok(false);
        }
        self.release_finished(t)?;
        self.after_instance_event(t, i);
        Ok(true)
    }

    /// The injected requests that ended since the last call, in order.
    pub fn take_ended(&mut self) -> Vec<Ended> {
        self.external
            .as_deref_mut()
            .map(|e| std::mem::take(&mut e.ended))
            .unwrap_or_default()
    }

    /// Instance `i`'s load for a server's metrics: requests waiting and
    /// running, the KV cache's utilisation (0–1), preemptions so far.
    pub fn instance_load(&self, i: usize) -> Option<InstanceLoad> {
        let inst = self.instances.get(i)?;
        Some(InstanceLoad {
            waiting: inst.queue_depth(),
            running: inst.batch_size(),
            kv_utilization: inst.kv_utilization(),
            preemptions: inst.preemption_count(),
            lora: inst.lora_requests(&self.store),
        })
    }

    /// Make instance `i`'s steps take `factor` × as long from its next step
    /// on (`blis serve`'s `slow` fault; 1 restores them).
    pub fn set_slowdown(&mut self, i: usize, factor: f64) {
        if let Some(inst) = self.instances.get_mut(i) {
            inst.set_slowdown(factor);
        }
    }

    /// The LoRA adapter names requests may name.
    pub fn adapter_names(&self) -> &[String] {
        self.workload.adapter_names()
    }

    /// Number of instances.
    pub fn instance_count(&self) -> usize {
        self.instances.len()
    }

    /// An arrival's pin, noting it live. `None`: the usual path.
    pub(super) fn external_arrival(&mut self, slot: Slot) -> Option<u32> {
        let ext = self.external.as_deref_mut()?;
        let id = self.store[slot].id;
        ext.live.insert(id, slot);
        ext.pinned.remove(&id)
    }

    /// A request about to be released: its end, for the caller.
    pub(super) fn external_release(&mut self, slot: Slot) {
        let Some(ext) = self.external.as_deref_mut() else {
            return;
        };
        let r = &self.store[slot];
        if ext.live.remove(&r.id).is_some() {
            ext.ended.push(Ended {
                id: r.id,
                progress: progress_of(r),
            });
        }
    }

    /// Send a pinned request straight to `instance`.
    pub(super) fn pin(
        &mut self,
        t: Tick,
        slot: Slot,
        instance: u32,
    ) -> Result<(), Box<PluginError>> {
        let instance = instance.min(self.instances.len().saturating_sub(1) as u32);
        self.pending[instance as usize] += 1;
        self.in_flight[instance as usize] += 1;
        self.routed_to(instance);
        self.store[slot].instance = instance;
        self.dispatched(t, slot, instance)
    }
}

//! The cluster's side of traffic control (see `crate::gateway`): tenant
//! budgets before admission (`[tenants]`), and the gateway queue
//! (`[flow_control]`): enqueue after admission, dispatch attempts (after an
//! admission, for each request that finished, and on dispatch ticks while
//! the queue is not empty), TTL expiry. Every function here runs only when
//! the run has the feature.
//!
//! A request the queue refuses, sheds or lets expire is counted as rejected
//! (INV-1: `num_requests = injected + rejected + still_in_pipeline`, the
//! gateway's queue being part of the pipeline) and traced as an admission
//! rejection by `flow-control/queue-full`, `flow-control/shed` or
//! `flow-control/expired` — never as admitted.
//!
//! In-flight eviction (`in_flight_eviction = true`): a dispatch attempt that
//! finds the cluster saturated (signal ≥ 1) while a non-sheddable request
//! waits, and a dispatched sheddable request waiting or running at an
//! instance, dispatches nothing and schedules one eviction event at the
//! same instant. The event removes the first such request in eviction
//! order (lowest priority, latest dispatched) from its instance, releasing
//! its KV blocks; it ends `dropped` (counted with its instance's
//! `dropped_unservable`, as an `immediate` drain's drops, and in
//! `flow_control.evicted`), is not queued again, leaves its tenant's
//! budget, and frees capacity like any finished request: one dispatch
//! attempt follows.

use super::{later, Cluster, Event, PluginError, Reject, Tick};
use crate::engine::GatewayTimer;
use crate::gateway::{Enqueued, Eviction};
use crate::metrics::class_index;
use crate::request::{RequestState, RequestStore, Slot, UNSET};

/// The first tracked request, in eviction order, that waits or runs at an
/// instance (one still on its way to an instance cannot be evicted yet).
fn victim(e: &Eviction, store: &RequestStore) -> Option<Slot> {
    e.candidates().find(|&s| {
        store.is_live(s) && matches!(store[s].state, RequestState::Queued | RequestState::Running)
    })
}

impl Cluster {
    /// Reject the request if it is sheddable and its tenant's budget is
    /// full (traced as an admission rejection by `tenant-budget`).
    pub(super) fn over_tenant_budget(
        &mut self,
        t: Tick,
        slot: Slot,
    ) -> Result<bool, Box<PluginError>> {
        let req = &self.store[slot];
        let (tenant, sheddable, id) = (req.tenant, req.slo_class.priority() < 0, req.id);
        // With a control plane the capacity is the routable instances' now.
        let (control, instances) = (self.control.as_deref(), &self.instances);
        let slots = || {
            control.map(|c| {
                c.routable
                    .iter()
                    .map(|&i| u64::from(instances[i as usize].config().max_num_seqs))
                    .sum()
            })
        };
        let over = self
            .tenant_budgets
            .as_mut()
            .is_some_and(|b| b.rejects(tenant, sheddable, slots));
        if over {
            self.gateway_reject(t, slot, id, "tenant-budget", Reject::TenantBudget)?;
        } else {
            self.store[slot].budget_counted = true;
        }
        Ok(over)
    }

    /// A request that passed its tenant's budget check ended (completed,
    /// dropped or rejected later): its tenant has one less in flight.
    pub(super) fn release_budget(&mut self, slot: Slot) {
        let req = &mut self.store[slot];
        if !std::mem::take(&mut req.budget_counted) {
            return;
        }
        if let Some(b) = self.tenant_budgets.as_mut() {
            b.left(req.tenant);
        }
    }

    /// Queue an admitted request in the gateway, then attempt a dispatch.
    pub(super) fn gateway_enqueue(&mut self, t: Tick, slot: Slot) -> Result<(), Box<PluginError>> {
        let g = self.gateway.as_mut().expect("flow control is on");
        let req = &self.store[slot];
        let (band, flow, id) = (class_index(req.slo_class), g.flow(req.tenant), req.id);
        let outcome = g.queue.enqueue_at(band, flow, slot, t);
        g.count(outcome);
        let ttl = g.ttl;
        match outcome {
            Enqueued::Rejected => {
                self.gateway_reject(t, slot, id, "flow-control/queue-full", Reject::Gateway)?;
            }
            Enqueued::Accepted | Enqueued::AcceptedShed(_) => {
                self.store[slot].gateway_queued_at = t;
                if let Some(ttl) = ttl {
                    self.queue
                        .push(later(t, ttl), Event::Gateway(GatewayTimer::Expire(slot)));
                }
                if let Enqueued::AcceptedShed(victim) = outcome {
                    let vid = self.store[victim].id;
                    self.gateway_reject(t, victim, vid, "flow-control/shed", Reject::Gateway)?;
                }
            }
        }
        self.gateway_dispatch(t);
        Ok(())
    }

    /// Trace and count a request the gateway refused, shed or expired.
    fn gateway_reject(
        &mut self,
        t: Tick,
        slot: Slot,
        id: u64,
        why: &str,
        cause: Reject,
    ) -> Result<(), Box<PluginError>> {
        if let Some(tr) = self.trace.as_mut() {
            tr.rejection(id, t, why, None);
        }
        self.reject(t, slot, cause)
    }

    /// One dispatch attempt: at most one request, if the saturation signal
    /// lets its band go; arm a tick while the queue is not empty.
    fn gateway_dispatch(&mut self, t: Tick) {
        let Some(g) = self.gateway.as_mut() else {
            return;
        };
        if g.queue.is_empty() {
            return;
        }
        let snaps = self.snapshots.build(t, &self.instances, &self.pending);
        // With a control plane, the signal is over the routable instances
        // only (loading, draining and stopped ones take no new requests).
        let sat = match self.control.as_deref_mut().filter(|c| !c.all_routable()) {
            Some(c) => {
                c.compact.clear();
                c.compact
                    .extend(c.routable.iter().map(|&i| snaps[i as usize]));
                let flights: Vec<u32> = c
                    .routable
                    .iter()
                    .map(|&i| self.in_flight[i as usize])
                    .collect();
                let tokens: Vec<u64> = match self.epp_tokens.as_deref() {
                    Some(e) => c
                        .routable
                        .iter()
                        .map(|&i| e.per_instance().get(i as usize).copied().unwrap_or(0))
                        .collect(),
                    None => Vec::new(),
                };
                g.detector
                    .saturation(&c.compact, &flights, &tokens, g.in_transit)
            }
            None => {
                let tokens = self
                    .epp_tokens
                    .as_deref()
                    .map_or(&[][..], |e| e.per_instance());
                g.detector
                    .saturation(snaps, &self.in_flight, tokens, g.in_transit)
            }
        };
        let blocked = sat >= 1.0 && g.eviction.is_some() && g.non_sheddable_waiting();
        let evict = match g.eviction.as_mut() {
            Some(e) if blocked => {
                let wanted = e.pending || victim(e, &self.store).is_some();
                if wanted && !e.pending {
                    e.pending = true;
                    self.queue.push(t, Event::Gateway(GatewayTimer::Evict));
                }
                wanted
            }
            _ => false,
        };
        if evict {
            // Nothing is dispatched: the eviction makes room first.
        } else if let Some(slot) = g.queue.dequeue_at(sat, t) {
            g.counts.dispatched += 1;
            g.in_transit += 1;
            self.store[slot].gateway_dispatched_at = t;
            if let Some(e) = g.eviction.as_mut() {
                e.track(slot, &self.store[slot]);
            }
            self.queue
                .push(later(t, self.routing_latency), Event::Routing(slot));
        }
        if !g.queue.is_empty() && !g.tick_pending {
            g.tick_pending = true;
            self.queue
                .push(later(t, g.tick), Event::Gateway(GatewayTimer::Tick));
        }
    }

    /// The routing event of a request the gateway dispatched: it is no
    /// longer in transit; route it (P/D routing when the run has pools).
    pub(super) fn gateway_routing(&mut self, t: Tick, slot: Slot) -> Result<(), Box<PluginError>> {
        if let Some(g) = self.gateway.as_mut() {
            g.in_transit = g.in_transit.saturating_sub(1);
        }
        if self.pd.is_some() {
            self.pd_route(t, slot)
        } else {
            self.on_routing(t, slot)
        }
    }

    /// `freed` requests left their instances: one dispatch attempt each.
    pub(super) fn gateway_capacity_freed(
        &mut self,
        t: Tick,
        freed: usize,
    ) -> Result<(), Box<PluginError>> {
        for _ in 0..freed {
            self.gateway_dispatch(t);
        }
        Ok(())
    }

    /// A gateway timer fired.
    pub(super) fn on_gateway_timer(
        &mut self,
        t: Tick,
        timer: GatewayTimer,
    ) -> Result<(), Box<PluginError>> {
        let Some(g) = self.gateway.as_mut() else {
            return Ok(());
        };
        match timer {
            GatewayTimer::Tick => {
                g.tick_pending = false;
                self.gateway_dispatch(t);
            }
            GatewayTimer::Expire(slot) => {
                // The slot may have been dispatched, released or reused since.
                if !self.store.is_live(slot) {
                    return Ok(());
                }
                let req = &self.store[slot];
                let queued = req.state == RequestState::Pipeline
                    && req.gateway_queued_at != UNSET
                    && req.gateway_dispatched_at == UNSET
                    && g.ttl
                        .is_some_and(|ttl| later(req.gateway_queued_at, ttl) == t);
                let (band, flow, id) = (class_index(req.slo_class), g.flow(req.tenant), req.id);
                if queued && g.queue.remove(band, flow, slot) {
                    g.counts.expired += 1;
                    self.gateway_reject(t, slot, id, "flow-control/expired", Reject::Gateway)?;
                }
            }
            GatewayTimer::Evict => self.evict_sheddable(t)?,
        }
        Ok(())
    }

    /// The eviction event: evict the first evictable tracked request if a
    /// non-sheddable request still waits.
    fn evict_sheddable(&mut self, t: Tick) -> Result<(), Box<PluginError>> {
        let Some(g) = self.gateway.as_mut() else {
            return Ok(());
        };
        let waiting = g.non_sheddable_waiting();
        let Some(e) = g.eviction.as_mut() else {
            return Ok(());
        };
        e.pending = false;
        let Some(slot) = victim(e, &self.store).filter(|_| waiting) else {
            return Ok(());
        };
        e.untrack(slot, &self.store[slot]);
        let i = self.store[slot].instance;
        self.snapshots.touched(i);
        if self.instances[i as usize].evict(t, slot, &mut self.store, &mut self.collector) {
            g.counts.evicted += 1;
            self.release_finished(t)?;
            self.after_instance_event(t, i);
        }
        Ok(())
    }

    /// A request ends: the eviction tracker forgets it.
    #[inline]
    pub(super) fn gateway_untrack(&mut self, slot: Slot) {
        let Some(g) = self.gateway.as_mut() else {
            return;
        };
        let req = &self.store[slot];
        if let Some(e) = g.eviction.as_mut() {
            e.untrack(slot, req);
        }
        // Program-aware fairness: the tenant attained input + 2 × output.
        if req.state == RequestState::Completed {
            let service = f64::from(req.input_len) + 2.0 * f64::from(req.generated);
            let flow = g.flow(req.tenant);
            g.queue.attain(flow, service, req.completed_at);
        }
    }
}

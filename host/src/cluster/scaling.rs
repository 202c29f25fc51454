//! The cluster's side of the control plane ([`crate::control`]): control
//! events on the shared clock, instances added and removed, drains, and the
//! routable set routing is restricted to.
//!
//! Instance indices are stable: an instance added by the autoscaler gets
//! the next index, and a terminated one keeps its index (and its report
//! entry) for the rest of the run.

use abi_stable::std_types::RSlice;
use blis_plugin_api::{ClusterState, ClusterView, InstanceState};

use super::Cluster;
use crate::control::{
    ControlEvent, ControlPlane, DrainPolicy, InstanceLife, NodeState, ScalingStats,
};
use crate::engine::{later, Event, Tick};
use crate::instance::Instance;
use crate::plugins::PluginError;
use crate::request::{prompt_block_hashes, RequestState, UNSET};

fn control(what: ControlEvent, id: u32) -> Event {
    Event::Control {
        what: what.code(),
        id,
    }
}

impl Cluster {
    /// Schedule the first control events: the initial instances' loading
    /// (without a warm start) and the first scaling tick.
    pub(super) fn start_control(&mut self) {
        let Some(c) = self.control.as_mut() else {
            return;
        };
        for i in 0..c.lives.len() {
            if c.lives[i].state == InstanceState::LOADING {
                let d = c.loading.sample(c.lifecycle.loading_delay);
                self.queue
                    .push(later(0, d), control(ControlEvent::Loaded, i as u32));
            }
        }
        for g in 0..c.scalers.len() {
            self.queue.push(0, control(ControlEvent::Tick, g as u32));
        }
        self.states_changed();
    }

    /// After any lifecycle change: the routable set and the 0.2 states.
    fn states_changed(&mut self) {
        let Some(c) = self.control.as_mut() else {
            return;
        };
        c.refresh_routable();
        for (i, l) in c.lives.iter().enumerate() {
            self.snapshots.set_state(i, l.state);
        }
        // Several models: a request's candidates are the routable
        // instances of its model.
        if let Some(m) = self.models.as_deref_mut() {
            m.restrict(|i| c.lives[i].state.is_routable());
        }
    }

    /// A control event.
    pub(super) fn on_control(
        &mut self,
        t: Tick,
        what: u8,
        id: u32,
    ) -> Result<(), Box<PluginError>> {
        match ControlEvent::from_code(what) {
            Some(ControlEvent::Loaded) => {
                let c = self
                    .control
                    .as_mut()
                    .expect("control event without control");
                let l = &mut c.lives[id as usize];
                if l.state == InstanceState::LOADING {
                    let to = l.loaded_state();
                    l.go(to, t);
                }
            }
            Some(ControlEvent::NodeReady) => {
                let c = self
                    .control
                    .as_mut()
                    .expect("control event without control");
                let ready = c.fleet.as_mut().is_some_and(|f| f.ready(id, t));
                if ready {
                    for i in 0..c.lives.len() {
                        let l = &mut c.lives[i];
                        if l.node == Some(id) && l.state == InstanceState::PENDING {
                            l.go(InstanceState::LOADING, t);
                            let d = c.loading.sample(c.lifecycle.loading_delay);
                            self.queue
                                .push(later(t, d), control(ControlEvent::Loaded, i as u32));
                        }
                    }
                }
            }
            Some(ControlEvent::Tick) => self.scaling_tick(t, id)?,
            Some(ControlEvent::Actuate) => self.actuate(t, id)?,
            None => unreachable!("unknown control event {what}"),
        }
        self.states_changed();
        Ok(())
    }

    /// Whether the next event is a scaling tick (of any group) with no
    /// work left: no request to come, none in the system.
    pub(super) fn idle_tick_next(&self) -> bool {
        let tick = ControlEvent::Tick.code();
        self.control.is_some()
            && matches!(self.queue.peek_event(), Some(&Event::Control { what, .. }) if what == tick)
            && self.workload.peek_time().is_none()
            && self.store.live() == 0
    }

    /// One scaling tick of group `g`: ask its autoscaler, filter through
    /// the windows, schedule the actuation, and the next tick while work
    /// remains. With several groups the autoscaler sees its group's
    /// instances only, as a cluster of their own.
    fn scaling_tick(&mut self, t: Tick, g: u32) -> Result<(), Box<PluginError>> {
        self.snapshots.peek(&self.instances, &self.pending);
        self.snapshots
            .build_info(&self.instances, &self.in_flight, &self.store);
        let c = self.control.as_mut().expect("tick without control");
        let ControlPlane {
            scalers,
            group_names,
            group_of,
            view_snaps,
            view_info,
            actuations,
            scrape,
            ..
        } = &mut **c;
        let Some(s) = scalers.get_mut(g as usize) else {
            return Ok(());
        };
        let state = if group_names.is_empty() {
            self.snapshots.whole_cluster(t)
        } else {
            let (snaps, info) = (self.snapshots.snaps(), self.snapshots.info());
            view_snaps.clear();
            view_info.clear();
            for (i, _) in group_of.iter().enumerate().filter(|(_, &k)| k == g) {
                view_snaps.push(snaps[i]);
                view_info.push(info[i]);
            }
            ClusterState {
                view: ClusterView {
                    clock_us: t,
                    instances: RSlice::from_slice(view_snaps),
                },
                candidates: RSlice::from_slice(&[]),
                info: RSlice::from_slice(view_info),
                prefix_blocks: RSlice::from_slice(&[]),
            }
        };
        let delta = s.policy.decide(&state)?;
        s.stats.ticks += 1;
        match delta.signum() {
            1 => s.stats.wanted_up += 1,
            -1 => s.stats.wanted_down += 1,
            _ => {}
        }
        let pass = s.windows.filter(t, delta);
        if delta != 0 && pass == 0 {
            s.stats.suppressed += 1;
        }
        if pass != 0 {
            let id = actuations.len() as u32;
            actuations.push((g, pass));
            let d = scrape.sample(s.scrape_delay);
            self.queue
                .push(later(t, d), control(ControlEvent::Actuate, id));
        }
        // Tick while requests may still come or are being served.
        if self.workload.peek_time().is_some() || self.store.live() > 0 {
            self.queue
                .push(later(t, s.interval), control(ControlEvent::Tick, g));
        }
        Ok(())
    }

    /// Apply actuation `id`: its group moves towards the decided size,
    /// within `[min_instances, max_instances]`.
    fn actuate(&mut self, t: Tick, id: u32) -> Result<(), Box<PluginError>> {
        let c = self.control.as_mut().expect("actuation without control");
        let (g, delta) = c.actuations[id as usize];
        let live = c.live_in(g);
        let Some(s) = c.scalers.get_mut(g as usize) else {
            return Ok(());
        };
        s.stats.actuations += 1;
        let (lo, hi) = (s.min_instances, s.max_instances.unwrap_or(u32::MAX));
        let target =
            (i64::from(live) + i64::from(delta)).clamp(i64::from(lo), i64::from(hi)) as u32;
        if target > live {
            for _ in live..target {
                let added = self.add_instance(t, g);
                let s = self.scaler_stats(g);
                if added {
                    s.instances_added += 1;
                } else {
                    s.unplaced += 1;
                }
            }
        } else if target < live {
            let order = c.removal_order(g);
            for &i in order.iter().take((live - target) as usize) {
                self.remove_instance(t, i)?;
                self.scaler_stats(g).instances_removed += 1;
            }
        }
        Ok(())
    }

    fn scaler_stats(&mut self, g: u32) -> &mut ScalingStats {
        &mut self
            .control
            .as_mut()
            .and_then(|c| c.scalers.get_mut(g as usize))
            .expect("scaler")
            .stats
    }

    /// Add an instance to group `g`: place it on a node (requesting one
    /// when none has room), then it loads. False when no node can take it.
    pub(super) fn add_instance(&mut self, t: Tick, g: u32) -> bool {
        let c = self.control.as_mut().expect("add without control");
        let (node, state) = match c.fleet.as_mut() {
            None => (None, InstanceState::LOADING),
            Some(f) => {
                let node = match f.place() {
                    Some(n) => n,
                    None => match f.provision(t) {
                        Some((n, delay)) => {
                            let d = c.provisioning.sample(delay);
                            self.queue
                                .push(later(t, d), control(ControlEvent::NodeReady, n));
                            f.place().expect("a new node has room")
                        }
                        None => return false,
                    },
                };
                let ready = f.nodes[node as usize].state == NodeState::Ready;
                let state = if ready {
                    InstanceState::LOADING
                } else {
                    InstanceState::PENDING
                };
                (Some(node), state)
            }
        };
        let index = self.instances.len() as u32;
        if state == InstanceState::LOADING {
            let d = c.loading.sample(c.lifecycle.loading_delay);
            self.queue
                .push(later(t, d), control(ControlEvent::Loaded, index));
        }
        c.lives.push(InstanceLife::new(
            state,
            node,
            t,
            c.lifecycle.warm_up_request_count,
        ));
        // Several models: the new instance serves its pool's model.
        if let Some(m) = self.models.as_deref_mut() {
            let peer = c.group_of.iter().position(|&k| k == g);
            let model = peer.map_or(0, |p| m.model_of_instance(p));
            m.push_instance(model);
            if let Some(rec) = self.collector.models.as_mut() {
                rec.of_instance.push(model);
            }
        }
        c.group_of.push(g);
        let f = &c.factories[g as usize];
        let mut inst = Instance::new(index, f.config.clone(), f.latency.clone());
        if let Some(l) = &f.lora {
            inst.set_lora(l.clone());
        }
        self.instances.push(inst);
        self.pending.push(0);
        self.in_flight.push(0);
        self.snapshots.push_instance();
        self.collector.add_instance();
        true
    }

    /// Remove instance `i`: one not serving yet terminates at once; a
    /// serving one drains by the drain policy.
    fn remove_instance(&mut self, t: Tick, i: u32) -> Result<(), Box<PluginError>> {
        let c = self.control.as_mut().expect("remove without control");
        let l = &mut c.lives[i as usize];
        if !l.state.is_routable() {
            self.terminate(t, i);
            return Ok(());
        }
        l.go(InstanceState::DRAINING, t);
        match c.lifecycle.drain_policy {
            DrainPolicy::Wait => {}
            DrainPolicy::Immediate => {
                self.snapshots.touched(i);
                let n = self.instances[i as usize].drop_waiting(
                    t,
                    &mut self.store,
                    &mut self.collector,
                );
                if let Some(c) = self.control.as_mut() {
                    c.drain_dropped += n;
                }
                self.release_finished(t)?;
            }
            DrainPolicy::Redirect => self.redirect_waiting(t, i),
        }
        self.after_instance_event(t, i);
        Ok(())
    }

    /// Send instance `i`'s unstarted waiting requests back to routing.
    fn redirect_waiting(&mut self, t: Tick, i: u32) {
        self.snapshots.touched(i);
        let taken = self.instances[i as usize].take_unstarted_waiting(&self.store);
        let bs = self.block_size;
        for slot in taken {
            self.collector.unqueued(i, &self.store[slot]);
            self.in_flight[i as usize] -= 1;
            if let Some(e) = self.epp_tokens.as_mut() {
                e.release(self.store[slot].id);
            }
            let mut hashes = self.hash_pool.pop().unwrap_or_default();
            let req = &mut self.store[slot];
            req.state = RequestState::Pipeline;
            req.instance = u32::MAX;
            req.enqueued_at = UNSET;
            req.scheduled_at = UNSET;
            if self.hash_prompts {
                prompt_block_hashes(req, bs, &mut hashes);
            }
            req.prompt_hashes = hashes;
            self.queue.push(t, Event::Routing(slot));
            if let Some(c) = self.control.as_mut() {
                c.redirected += 1;
            }
        }
    }

    /// A draining instance with nothing routed to it left terminates.
    #[inline]
    pub(super) fn after_instance_event(&mut self, t: Tick, i: u32) {
        let Some(c) = self.control.as_ref() else {
            return;
        };
        if c.lives[i as usize].state == InstanceState::DRAINING && self.in_flight[i as usize] == 0 {
            self.terminate(t, i);
            self.states_changed();
        }
    }

    fn terminate(&mut self, t: Tick, i: u32) {
        let c = self.control.as_mut().expect("terminate without control");
        let l = &mut c.lives[i as usize];
        if l.go(InstanceState::TERMINATED, t) {
            if let (Some(f), Some(node)) = (c.fleet.as_mut(), l.node) {
                f.free(node, t);
            }
        }
    }

    /// After routing to `chosen`: count a warm-up request.
    pub(super) fn routed_to(&mut self, chosen: u32) {
        let Some(c) = self.control.as_mut() else {
            return;
        };
        let l = &mut c.lives[chosen as usize];
        if l.state == InstanceState::WARMING_UP {
            l.warm_up_left = l.warm_up_left.saturating_sub(1);
            if l.warm_up_left == 0 {
                let t = self.queue.now();
                l.go(InstanceState::ACTIVE, t);
                self.states_changed();
            }
        }
    }
}

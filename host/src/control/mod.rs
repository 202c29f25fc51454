//! The control plane: instances that come and go (`lifecycle`), the GPU
//! nodes they run on and what those cost (`nodes`), and the scaling loop
//! around an autoscaler plugin (`autoscaler`).
//!
//! The state lives here; the cluster drives it through a few hooks
//! (`cluster/scaling.rs`): control events on the shared clock (an instance
//! loaded, a node ready, a scaling tick, an actuation), the routable set
//! that routing is restricted to, and the check after each instance event
//! that terminates a drained instance. A run without `[lifecycle]`,
//! `[[node_pools]]` and `[autoscaler]` has no control plane at all.

pub mod autoscaler;
pub mod delay;
pub mod lifecycle;
pub mod nodes;
mod report;

use blis_plugin_api::{InstanceInfo, InstanceSnapshot, InstanceState};

use crate::instance::lora::LoraConfig;
use crate::instance::{InstanceConfig, LatencyModel};

pub use autoscaler::{Scaler, ScalingStats, Windows};
pub use delay::{Delay, DelayStream};
pub use lifecycle::{DrainPolicy, InstanceLife, Lifecycle};
pub use nodes::{NodeFleet, NodeState, PoolSpec};

/// What a control event on the shared clock means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlEvent {
    /// Instance `id` finished loading.
    Loaded,
    /// Node `id` finished provisioning.
    NodeReady,
    /// A scaling tick.
    Tick,
    /// Actuation `id` of [`Scaler::actuations`].
    Actuate,
}

impl ControlEvent {
    /// The code carried by [`crate::engine::Event::Control`].
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The event of a code.
    pub fn from_code(c: u8) -> Option<Self> {
        [Self::Loaded, Self::NodeReady, Self::Tick, Self::Actuate]
            .get(usize::from(c))
            .copied()
    }
}

/// How to build an instance the autoscaler adds (all instances of a
/// scaling group are alike).
#[derive(Clone, Debug)]
pub struct InstanceFactory {
    pub config: InstanceConfig,
    pub latency: LatencyModel,
    /// `[lora]`: the adapters it serves.
    pub lora: Option<LoraConfig>,
}

/// The control plane of a run, as the config layer assembles it.
///
/// Scaling groups: a single fleet is one group; with serve pools (several
/// models) every pool is a group of its own, scaled by its own autoscaler
/// object within its own bounds, seeing only its own instances.
pub struct ControlSetup {
    pub lifecycle: Lifecycle,
    pub fleet: Option<NodeFleet>,
    /// One per group with `[autoscaler]`, none without.
    pub scalers: Vec<Scaler>,
    /// One per group.
    pub factories: Vec<InstanceFactory>,
    /// The serve pools' names (empty: one fleet).
    pub group_names: Vec<String>,
    /// The group of each initial instance (empty: all in group 0).
    pub group_of: Vec<u32>,
    /// Seeds of the "node-provisioning", "instance-loading" and
    /// "autoscaler" streams.
    pub seeds: [u64; 3],
    /// The node of each initial instance (with node pools).
    pub initial_nodes: Vec<Option<u32>>,
}

/// The control plane while the run goes.
pub struct ControlPlane {
    pub lifecycle: Lifecycle,
    pub fleet: Option<NodeFleet>,
    /// One per scaling group with `[autoscaler]` (see [`ControlSetup`]).
    pub scalers: Vec<Scaler>,
    pub factories: Vec<InstanceFactory>,
    pub group_names: Vec<String>,
    /// The scaling group of each instance ever created, by index.
    pub group_of: Vec<u32>,
    /// Actuations scheduled (group, change); the event carries the index.
    pub actuations: Vec<(u32, i32)>,
    /// A group's autoscaler view: its instances' snapshots and signals
    /// (reused; with several groups only).
    pub view_snaps: Vec<InstanceSnapshot>,
    pub view_info: Vec<InstanceInfo<'static>>,
    /// One per instance ever created, by index.
    pub lives: Vec<InstanceLife>,
    /// Routable instances, ascending.
    pub routable: Vec<u32>,
    /// Snapshots of the routable instances (a router plugin's view).
    pub compact: Vec<InstanceSnapshot>,
    pub provisioning: DelayStream,
    pub loading: DelayStream,
    pub scrape: DelayStream,
    /// Requests that found no routable instance (rejected).
    pub no_instance: u64,
    /// Requests routed again by a `redirect` drain.
    pub redirected: u64,
    /// Requests dropped by an `immediate` drain.
    pub drain_dropped: u64,
    /// Largest number of instances not draining or terminated.
    pub peak_instances: u32,
}

impl ControlPlane {
    /// The control plane of `n` initial instances.
    pub fn new(setup: ControlSetup, n: usize) -> Self {
        let nodes = &setup.initial_nodes;
        let lc = setup.lifecycle;
        let state = if lc.warm_start_initial_instances {
            if lc.warm_up_request_count > 0 {
                InstanceState::WARMING_UP
            } else {
                InstanceState::ACTIVE
            }
        } else {
            InstanceState::LOADING
        };
        let lives: Vec<InstanceLife> = (0..n)
            .map(|i| {
                let mut l = InstanceLife::new(
                    state,
                    nodes.get(i).copied().flatten(),
                    0,
                    lc.warm_up_request_count,
                );
                if state.is_routable() {
                    l.routable_at = Some(0);
                }
                l
            })
            .collect();
        let mut c = ControlPlane {
            lifecycle: lc,
            fleet: setup.fleet,
            scalers: setup.scalers,
            factories: setup.factories,
            group_names: setup.group_names,
            group_of: if setup.group_of.is_empty() {
                vec![0; n]
            } else {
                setup.group_of
            },
            actuations: Vec::new(),
            view_snaps: Vec::new(),
            view_info: Vec::new(),
            lives,
            routable: Vec::new(),
            compact: Vec::new(),
            provisioning: DelayStream::new(setup.seeds[0]),
            loading: DelayStream::new(setup.seeds[1]),
            scrape: DelayStream::new(setup.seeds[2]),
            no_instance: 0,
            redirected: 0,
            drain_dropped: 0,
            peak_instances: n as u32,
        };
        c.refresh_routable();
        c
    }

    /// True when every instance is routable (routing is then unrestricted).
    #[inline]
    pub fn all_routable(&self) -> bool {
        self.routable.len() == self.lives.len()
    }

    /// Recompute the routable set after a state change.
    pub fn refresh_routable(&mut self) {
        self.routable.clear();
        self.routable.extend(
            self.lives
                .iter()
                .enumerate()
                .filter(|(_, l)| l.state.is_routable())
                .map(|(i, _)| i as u32),
        );
        let live = self.live_instances();
        self.peak_instances = self.peak_instances.max(live);
    }

    /// Instances pending, loading, warming up or active (what the bounds count).
    pub fn live_instances(&self) -> u32 {
        self.lives.iter().filter(|l| l.is_live()).count() as u32
    }

    /// The live instances of scaling group `g`.
    pub fn live_in(&self, g: u32) -> u32 {
        self.lives
            .iter()
            .zip(&self.group_of)
            .filter(|(l, &k)| k == g && l.is_live())
            .count() as u32
    }

    /// Instances in `state`.
    pub fn count(&self, state: InstanceState) -> u32 {
        self.lives.iter().filter(|l| l.state == state).count() as u32
    }

    /// Instances on each node (for the GPU conservation check).
    pub fn instances_per_node(&self) -> Vec<u32> {
        let n = self.fleet.as_ref().map_or(0, |f| f.nodes.len());
        let mut out = vec![0; n];
        for l in &self.lives {
            if let (Some(node), false) = (l.node, l.state == InstanceState::TERMINATED) {
                out[node as usize] += 1;
            }
        }
        out
    }

    /// Choose `n` instances to remove: first those not serving yet (pending,
    /// then loading, newest first: nothing is lost), then serving ones on
    /// the most expensive pool, newest first (as a Kubernetes ReplicaSet
    /// removes the youngest pods).
    /// Of scaling group `g` only.
    pub fn removal_order(&self, g: u32) -> Vec<u32> {
        let cost = |l: &InstanceLife| -> f64 {
            match (&self.fleet, l.node) {
                (Some(f), Some(node)) => {
                    let p = &f.pools[f.nodes[node as usize].pool as usize];
                    p.cost_per_hour / f64::from(p.gpus_per_node)
                }
                _ => 0.0,
            }
        };
        let rank = |s: InstanceState| match s {
            InstanceState::PENDING => 0,
            InstanceState::LOADING => 1,
            _ => 2,
        };
        let mut ids: Vec<u32> = (0..self.lives.len() as u32)
            .filter(|&i| self.group_of[i as usize] == g && self.lives[i as usize].is_live())
            .collect();
        ids.sort_by(|&a, &b| {
            let (la, lb) = (&self.lives[a as usize], &self.lives[b as usize]);
            rank(la.state)
                .cmp(&rank(lb.state))
                .then(cost(lb).total_cmp(&cost(la)))
                .then(b.cmp(&a))
        });
        ids
    }
}

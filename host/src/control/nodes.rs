//! Node pools: GPU nodes that are provisioned (after a random delay),
//! Ready, and released; instances placed on their GPUs; and what they cost.
//!
//! Every instance needs `tp` GPUs of the model's type on one node. A node's
//! GPUs are conserved: allocated + free = GPUs per node, always
//! ([`NodeFleet::check`]). A node costs its pool's price per hour from the
//! moment it is requested (clouds bill a booting machine) until it is
//! released or the run ends.

use crate::engine::Tick;

use super::delay::Delay;

/// One pool as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolSpec {
    pub name: String,
    pub gpu_type: String,
    pub gpus_per_node: u32,
    pub initial_nodes: u32,
    pub min_nodes: u32,
    pub max_nodes: u32,
    pub provisioning_delay: Delay,
    pub cost_per_hour: f64,
}

/// Where a node is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    Provisioning,
    Ready,
    Released,
}

/// One node.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub pool: u32,
    /// Index within its pool (the `k` of `<pool>-<k>`).
    pub k: u32,
    pub state: NodeState,
    pub free_gpus: u32,
    /// When it was requested (time 0 for initial nodes).
    pub requested_at: Tick,
    pub ready_at: Option<Tick>,
    pub released_at: Option<Tick>,
}

/// Every pool and node of a run.
#[derive(Clone, Debug)]
pub struct NodeFleet {
    pub pools: Vec<PoolSpec>,
    pub nodes: Vec<Node>,
    /// GPUs an instance needs.
    pub tp: u32,
    /// Nodes requested per pool so far (the next `k`).
    next_k: Vec<u32>,
    /// Largest number of live nodes at once.
    pub peak_nodes: u32,
}

impl NodeFleet {
    /// The pools with their initial nodes, Ready at time 0.
    pub fn new(pools: Vec<PoolSpec>, tp: u32) -> Self {
        let mut f = NodeFleet {
            next_k: vec![0; pools.len()],
            pools,
            nodes: Vec::new(),
            tp: tp.max(1),
            peak_nodes: 0,
        };
        for p in 0..f.pools.len() {
            for _ in 0..f.pools[p].initial_nodes {
                let n = f.add_node(p as u32, 0);
                f.nodes[n as usize].state = NodeState::Ready;
                f.nodes[n as usize].ready_at = Some(0);
            }
        }
        f
    }

    fn add_node(&mut self, pool: u32, at: Tick) -> u32 {
        let k = self.next_k[pool as usize];
        self.next_k[pool as usize] += 1;
        self.nodes.push(Node {
            pool,
            k,
            state: NodeState::Provisioning,
            free_gpus: self.pools[pool as usize].gpus_per_node,
            requested_at: at,
            ready_at: None,
            released_at: None,
        });
        self.peak_nodes = self.peak_nodes.max(self.live_nodes());
        (self.nodes.len() - 1) as u32
    }

    /// `<pool>-<k>`.
    pub fn node_name(&self, node: u32) -> String {
        let n = &self.nodes[node as usize];
        format!("{}-{}", self.pools[n.pool as usize].name, n.k)
    }

    /// Nodes provisioning or Ready.
    pub fn live_nodes(&self) -> u32 {
        self.nodes
            .iter()
            .filter(|n| n.state != NodeState::Released)
            .count() as u32
    }

    fn live_in_pool(&self, pool: u32) -> u32 {
        self.nodes
            .iter()
            .filter(|n| n.pool == pool && n.state != NodeState::Released)
            .count() as u32
    }

    /// Take `tp` GPUs for an instance: the first Ready node (pools in
    /// config order, nodes in order) with room, else the first node still
    /// provisioning with room (the instance waits for it).
    pub fn place(&mut self) -> Option<u32> {
        let tp = self.tp;
        let pick = |want: NodeState| {
            self.nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.state == want && n.free_gpus >= tp)
                .min_by_key(|(i, n)| (n.pool, *i))
                .map(|(i, _)| i as u32)
        };
        let node = pick(NodeState::Ready).or_else(|| pick(NodeState::Provisioning))?;
        self.nodes[node as usize].free_gpus -= tp;
        Some(node)
    }

    /// Request a new node for an instance: in the cheapest pool (per GPU,
    /// then config order) below its `max_nodes` whose nodes can hold one
    /// instance. Returns the node and its provisioning delay's spec.
    pub fn provision(&mut self, at: Tick) -> Option<(u32, Delay)> {
        let tp = self.tp;
        let pool = (0..self.pools.len() as u32)
            .filter(|&p| {
                let s = &self.pools[p as usize];
                s.gpus_per_node >= tp && self.live_in_pool(p) < s.max_nodes
            })
            .min_by(|&a, &b| {
                let c = |p: u32| {
                    let s = &self.pools[p as usize];
                    s.cost_per_hour / f64::from(s.gpus_per_node)
                };
                c(a).total_cmp(&c(b)).then(a.cmp(&b))
            })?;
        let node = self.add_node(pool, at);
        Some((node, self.pools[pool as usize].provisioning_delay))
    }

    /// The node finished provisioning (false if it was released meanwhile).
    pub fn ready(&mut self, node: u32, at: Tick) -> bool {
        let n = &mut self.nodes[node as usize];
        if n.state != NodeState::Provisioning {
            return false;
        }
        n.state = NodeState::Ready;
        n.ready_at = Some(at);
        true
    }

    /// An instance on `node` is gone: give its GPUs back, and release the
    /// node when it is empty and its pool stays at or above `min_nodes`.
    /// Returns true when the node was released.
    pub fn free(&mut self, node: u32, at: Tick) -> bool {
        let tp = self.tp;
        let pool = self.nodes[node as usize].pool;
        let n = &mut self.nodes[node as usize];
        n.free_gpus += tp;
        debug_assert!(n.free_gpus <= self.pools[pool as usize].gpus_per_node);
        if n.free_gpus == self.pools[pool as usize].gpus_per_node
            && self.live_in_pool(pool) > self.pools[pool as usize].min_nodes
        {
            let n = &mut self.nodes[node as usize];
            n.state = NodeState::Released;
            n.released_at = Some(at);
            return true;
        }
        false
    }

    /// Whether another instance could be placed now or on a node that may
    /// still be requested.
    pub fn has_room(&self) -> bool {
        let tp = self.tp;
        self.nodes
            .iter()
            .any(|n| n.state != NodeState::Released && n.free_gpus >= tp)
            || (0..self.pools.len() as u32).any(|p| {
                let s = &self.pools[p as usize];
                s.gpus_per_node >= tp && self.live_in_pool(p) < s.max_nodes
            })
    }

    /// GPU-hours and dollars of each pool up to `end`.
    pub fn cost(&self, end: Tick) -> Vec<(f64, f64)> {
        let mut out = vec![(0.0, 0.0); self.pools.len()];
        for n in &self.nodes {
            let until = n.released_at.unwrap_or(end).max(n.requested_at);
            let hours = (until - n.requested_at) as f64 / 3.6e9;
            let s = &self.pools[n.pool as usize];
            out[n.pool as usize].0 += hours * f64::from(s.gpus_per_node);
            out[n.pool as usize].1 += hours * s.cost_per_hour;
        }
        out
    }

    /// GPU conservation: every node's free GPUs equal its total minus `tp`
    /// per instance on it (`on_node[i]` instances on node `i`), and a
    /// released node holds nothing.
    pub fn check(&self, on_node: &[u32]) -> Result<(), String> {
        for (i, n) in self.nodes.iter().enumerate() {
            let total = self.pools[n.pool as usize].gpus_per_node;
            let used = on_node.get(i).copied().unwrap_or(0) * self.tp;
            if n.free_gpus + used != total {
                return Err(format!(
                    "node {}: {} free + {used} allocated ≠ {total} GPUs",
                    self.node_name(i as u32),
                    n.free_gpus
                ));
            }
            if n.state == NodeState::Released && used > 0 {
                return Err(format!(
                    "node {} released with instances on it",
                    self.node_name(i as u32)
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(name: &str, gpus: u32, init: u32, min: u32, max: u32, cost: f64) -> PoolSpec {
        PoolSpec {
            name: name.into(),
            gpu_type: "H100".into(),
            gpus_per_node: gpus,
            initial_nodes: init,
            min_nodes: min,
            max_nodes: max,
            provisioning_delay: Delay::default(),
            cost_per_hour: cost,
        }
    }

    #[test]
    fn placement_fills_ready_nodes_in_order_and_conserves_gpus() {
        // TP 2 on 4-GPU nodes: two instances per node.
        let mut f = NodeFleet::new(vec![pool("a", 4, 2, 0, 3, 10.0)], 2);
        assert_eq!(f.place(), Some(0));
        assert_eq!(f.place(), Some(0));
        assert_eq!(f.place(), Some(1));
        f.check(&[2, 1]).unwrap();
        assert!(f.check(&[1, 1]).is_err());
        // Node 1 has room for one more; then a third node may be requested.
        assert_eq!(f.place(), Some(1));
        assert_eq!(f.place(), None);
        assert!(f.has_room());
        let (n, _) = f.provision(5).unwrap();
        assert_eq!((n, f.node_name(n)), (2, "a-2".to_string()));
        assert!(f.provision(5).is_none(), "max_nodes = 3");
        // The provisioning node takes the next instance; it waits for it.
        assert_eq!(f.place(), Some(2));
        assert!(f.ready(2, 7));
        f.check(&[2, 2, 1]).unwrap();
        // Freeing: node 2 empties and is released (3 live > min 0).
        assert!(f.free(2, 9));
        assert_eq!(f.live_nodes(), 2);
        f.check(&[2, 2, 0]).unwrap();
    }

    #[test]
    fn min_nodes_keeps_empty_nodes_and_cost_is_hours_times_price() {
        let mut f = NodeFleet::new(vec![pool("a", 8, 1, 1, 2, 16.0)], 8);
        assert_eq!(f.place(), Some(0));
        assert!(!f.free(0, 10), "min_nodes = 1 keeps the only node");
        // A second node requested at 1 h and released at 3 h: 2 h × $16.
        let (n, _) = f.provision(3_600_000_000).unwrap();
        assert_eq!(f.place(), Some(0), "a Ready node first");
        assert_eq!(f.place(), Some(n));
        assert!(f.ready(n, 3_700_000_000));
        assert!(f.free(n, 3 * 3_600_000_000));
        // The first node lives the whole 4 h.
        let cost = f.cost(4 * 3_600_000_000);
        assert_eq!(cost, vec![(6.0 * 8.0, 6.0 * 16.0)]);
    }

    #[test]
    fn new_nodes_come_from_the_cheapest_pool_per_gpu() {
        let mut f = NodeFleet::new(
            vec![
                pool("dear", 8, 0, 0, 4, 80.0),
                pool("cheap", 4, 0, 0, 1, 20.0),
            ],
            4,
        );
        let (n, _) = f.provision(0).unwrap();
        assert_eq!(f.node_name(n), "cheap-0", "$5/GPU-h before $10");
        let (n, _) = f.provision(0).unwrap();
        assert_eq!(f.node_name(n), "dear-0", "cheap is at max_nodes");
    }
}

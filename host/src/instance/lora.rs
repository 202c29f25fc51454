//! LoRA adapters on one instance: the resident set, the cold-load gate and
//! the step-time multiplier (`cluster-head.md` §5.5, as blis decides it).
//!
//! * **Residency.** At most `capacity` adapters are resident. A request
//!   whose adapter is not resident is not admitted into the batch: batch
//!   formation stops at it (it blocks the queue like a request that does
//!   not fit in the KV cache).
//! * **The gate** runs before batch formation: when no load is in flight
//!   and the wait queue's head needs a non-resident adapter, it evicts the
//!   least recently used *unpinned* adapter if the set is full (doing
//!   nothing while every resident adapter is pinned) and starts loading the
//!   head's adapter; the load takes
//!   `max(1, ⌈base + ⌈rank·footprint / bandwidth⌉⌉)` µs. One load at a
//!   time per instance.
//! * **Pins.** A request pins its adapter while it is in the running batch
//!   (admission to completion, preemption or eviction).
//! * **Recency** is the last admission of a request using the adapter (or
//!   its load).
//! * **Step time** is multiplied by `1 + k(r_max)·A`, where `A` is the
//!   number of distinct adapters among the requests granted tokens in the
//!   step and `r_max` their largest rank; `k` is the tier's `k6` when the
//!   step computes a prefill chunk and `k7` for a decode-only step (the
//!   reference's "(k6/k7)"), from the tier of rank `r_max`, else the
//!   nearest calibrated rank (ties → the lower).
//!
//! Adapters are numbered by the workload (`Request::adapter`); the tables
//! here are indexed the same way. The instance has no `Lora` at all when
//! the run has no `[lora]` (one `Option` check per step).

use crate::engine::Tick;

/// Step-overhead coefficients of one rank tier.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OverheadTier {
    /// The tier's rank.
    pub rank: u32,
    /// Overhead per distinct adapter in a step with prefill work.
    pub k6: f64,
    /// Overhead per distinct adapter in a decode-only step.
    pub k7: f64,
}

/// The LoRA settings every instance shares.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    /// Resident adapter slots per instance (≥ 1).
    pub capacity: u32,
    /// Rank of each adapter, by workload adapter index (0 = not served by
    /// this instance's model: such requests never reach it).
    pub ranks: Vec<u32>,
    /// Fixed part of a load, µs.
    pub load_base_latency_us: f64,
    /// Load bandwidth, bytes per µs (> 0).
    pub load_bandwidth_bytes_us: f64,
    /// Adapter bytes per unit of rank.
    pub footprint_bytes_per_rank: u64,
    /// Step-overhead tiers, sorted by rank.
    pub tiers: Vec<OverheadTier>,
}

impl LoraConfig {
    /// Time to load adapter `a`:
    /// `max(1, ⌈base + ⌈rank·footprint / bandwidth⌉⌉)` µs.
    pub fn load_time(&self, a: u32) -> Tick {
        let bytes = f64::from(self.ranks[a as usize]) * self.footprint_bytes_per_rank as f64;
        let t = (self.load_base_latency_us + (bytes / self.load_bandwidth_bytes_us).ceil()).ceil();
        (t.min(crate::engine::TIME_LIMIT as f64) as Tick).max(1)
    }

    /// The tier used for rank `r`: the exact one, else the nearest (ties →
    /// the lower rank). `None` without tiers.
    fn tier(&self, r: u32) -> Option<&OverheadTier> {
        self.tiers
            .iter()
            .min_by_key(|t| (t.rank.abs_diff(r), t.rank))
    }

    /// The step-time factor of a batch with `distinct` distinct adapters of
    /// largest rank `r_max`; `prefill` when the step computes prefill work.
    pub fn step_factor(&self, distinct: u32, r_max: u32, prefill: bool) -> f64 {
        if distinct == 0 {
            return 1.0;
        }
        match self.tier(r_max) {
            Some(t) => 1.0 + if prefill { t.k6 } else { t.k7 } * f64::from(distinct),
            None => 1.0,
        }
    }
}

/// Per-adapter counts of one instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdapterCounts {
    /// Loads completed.
    pub loads: u64,
    /// Evictions from the resident set.
    pub evictions: u64,
}

/// The LoRA state of one instance.
#[derive(Clone, Debug)]
pub struct Lora {
    pub(super) config: LoraConfig,
    /// Resident adapters with the recency stamp of their last use.
    resident: Vec<(u32, u64)>,
    /// Running requests per adapter (by adapter index).
    pins: Vec<u32>,
    /// The adapter being loaded and when the load completes.
    loading: Option<(u32, Tick)>,
    clock: u64,
    counts: Vec<AdapterCounts>,
    /// Scratch for the distinct adapters of a batch.
    seen: Vec<u32>,
}

impl Lora {
    /// The configuration it was made from.
    pub fn config(&self) -> &LoraConfig {
        &self.config
    }

    pub fn new(config: LoraConfig) -> Self {
        let n = config.ranks.len();
        Lora {
            config,
            resident: Vec::new(),
            pins: vec![0; n],
            loading: None,
            clock: 0,
            counts: vec![AdapterCounts::default(); n],
            seen: Vec::new(),
        }
    }

    /// Whether adapter `a` is resident (a request without adapter always is).
    #[inline]
    pub fn is_resident(&self, a: Option<u32>) -> bool {
        match a {
            None => true,
            Some(a) => self.resident.iter().any(|&(x, _)| x == a),
        }
    }

    /// The resident adapters, in ascending index order.
    pub fn resident(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.resident.iter().map(|&(a, _)| a).collect();
        v.sort_unstable();
        v
    }

    /// Write the resident adapters, most recently used first, into `out`
    /// (as many as fit); the number resident.
    pub fn most_recent_first(&self, out: &mut [u32]) -> u32 {
        if out.is_empty() {
            // A query for the count alone (a plugin sizing its buffer).
            return self.resident.len() as u32;
        }
        let mut by_recency = self.resident.clone();
        by_recency.sort_unstable_by_key(|&(_, stamp)| std::cmp::Reverse(stamp));
        for (o, &(a, _)) in out.iter_mut().zip(&by_recency) {
            *o = a;
        }
        by_recency.len() as u32
    }

    /// The load in flight: adapter and completion time.
    pub fn loading(&self) -> Option<(u32, Tick)> {
        self.loading
    }

    /// Per-adapter loads and evictions, by adapter index.
    pub fn counts(&self) -> &[AdapterCounts] {
        &self.counts
    }

    fn touch(&mut self, a: u32) {
        self.clock += 1;
        let c = self.clock;
        if let Some(e) = self.resident.iter_mut().find(|e| e.0 == a) {
            e.1 = c;
        }
    }

    /// A request with adapter `a` entered the running batch.
    #[inline]
    pub fn pin(&mut self, a: Option<u32>) {
        if let Some(a) = a {
            self.pins[a as usize] += 1;
            self.touch(a);
        }
    }

    /// A request with adapter `a` left the running batch.
    #[inline]
    pub fn unpin(&mut self, a: Option<u32>) {
        if let Some(a) = a {
            let p = &mut self.pins[a as usize];
            debug_assert!(*p > 0, "adapter {a} unpinned more often than pinned");
            *p = p.saturating_sub(1);
        }
    }

    /// Complete the load in flight if it is due at `now`.
    pub fn finish_due(&mut self, now: Tick) {
        if let Some((a, at)) = self.loading {
            if at <= now {
                self.loading = None;
                self.clock += 1;
                self.resident.push((a, self.clock));
                self.counts[a as usize].loads += 1;
            }
        }
    }

    /// The gate for a wait-queue head needing `head` (see the module
    /// docs): starts a load when it can; returns its completion time when a
    /// load is in flight afterwards.
    pub fn gate(&mut self, now: Tick, head: Option<u32>) -> Option<Tick> {
        if self.loading.is_none() {
            if let Some(a) = head {
                if !self.is_resident(Some(a)) && self.make_room() {
                    let at = crate::engine::later(now, self.config.load_time(a));
                    self.loading = Some((a, at));
                }
            }
        }
        self.loading.map(|(_, at)| at)
    }

    /// Evict the least recently used unpinned adapter if the set is full;
    /// false when it is full and every resident adapter is pinned.
    fn make_room(&mut self) -> bool {
        if (self.resident.len() as u32) < self.config.capacity {
            return true;
        }
        let victim = self
            .resident
            .iter()
            .enumerate()
            .filter(|(_, &(a, _))| self.pins[a as usize] == 0)
            .min_by_key(|(_, &(_, stamp))| stamp)
            .map(|(i, _)| i);
        match victim {
            Some(i) => {
                let (a, _) = self.resident.swap_remove(i);
                self.counts[a as usize].evictions += 1;
                true
            }
            None => false,
        }
    }

    /// The step-time factor of a batch whose granted requests use the
    /// adapters `adapters` (`prefill`: the step computes prefill work).
    pub fn batch_factor(&mut self, adapters: impl Iterator<Item = u32>, prefill: bool) -> f64 {
        self.seen.clear();
        let mut r_max = 0;
        for a in adapters {
            if !self.seen.contains(&a) {
                self.seen.push(a);
                r_max = r_max.max(self.config.ranks[a as usize]);
            }
        }
        self.config
            .step_factor(self.seen.len() as u32, r_max, prefill)
    }

    /// Internal consistency: pins equal the running requests per adapter
    /// (`running` lists their adapters), the set within capacity.
    pub fn check(&self, running: impl Iterator<Item = Option<u32>>) -> Result<(), String> {
        let mut pins = vec![0u32; self.pins.len()];
        for a in running.flatten() {
            pins[a as usize] += 1;
        }
        if pins != self.pins {
            return Err(format!(
                "LoRA pins {:?} differ from the running requests' adapters {pins:?}",
                self.pins
            ));
        }
        if self.resident.len() as u32 > self.config.capacity {
            return Err(format!(
                "{} adapters resident, capacity {}",
                self.resident.len(),
                self.config.capacity
            ));
        }
        for (a, &p) in pins.iter().enumerate() {
            if p > 0 && !self.is_resident(Some(a as u32)) {
                return Err(format!("adapter {a} pinned but not resident"));
            }
        }
        Ok(())
    }
}

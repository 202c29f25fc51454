//! The gateway queue's structure: one priority band per SLO class (highest
//! priority first), one FIFO flow per tenant inside a band, capacity
//! limits, shedding of sheddable entries, and saturation-gated dequeue.
//!
//! Band `i` of `B` may dispatch while the saturation signal is below its
//! ceiling `1 − i·(1 − usage_limit)/(B − 1)` (1 when `B = 1`); the gated
//! dequeue walks the bands from the highest priority and stops at the first
//! band whose ceiling the signal reaches, so a lower band never dispatches
//! while a higher one is gated.
//!
//! llm-d's `static-usage-limit-policy` puts every band's ceiling at
//! `usage_limit` (`with_static_ceilings`), so the bands differ only in
//! order. Its `soft-reflective-ceiling-policy` replaces the linear ceilings
//! (`with_soft_reflective`): band 0's ceiling is 1; band `i > 0` is open
//! while `s < 1 − i·s/(B − 1)`, closed at `s ≥ 1`, and otherwise every
//! gated band opens together on one dispatch attempt in `round(s/(1 − s))`
//! (one shared counter of such attempts). llm-d's `program-aware-fairness`
//! (least attained service, `Fairness::ProgramAware` with the settings of
//! `with_las`) picks, inside a band, the
//! flow with the highest `w_s·(1 − norm(S)) + w_w·norm(head wait)`, S the
//! tenant's attained service (input + 2 × output tokens of its completed
//! requests, halved every `half_life`), norm a min-max over the band's
//! non-empty flows (0.5 when all are equal), ties to the first flow.

use std::collections::VecDeque;

use crate::request::Slot;

/// Number of bands: one per SLO class, in `SloClass::ALL` order (critical,
/// standard, batch, sheddable, background — descending priority).
pub const BANDS: usize = 5;

/// First band whose entries are sheddable (negative priority: batch,
/// sheddable, background).
pub const FIRST_SHEDDABLE: usize = 2;

/// A queued request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub slot: Slot,
    /// Enqueue order, unique.
    pub seq: u64,
    /// Enqueue time, µs (read by program-aware fairness).
    pub at: i64,
}

/// How fairness picks a flow inside a band.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fairness {
    /// The flow whose head was queued first.
    GlobalStrict,
    /// Tenants in turn (sorted by name), starting after the band's last pick.
    RoundRobin,
    /// Least attained service first, weighed against head wait
    /// ([`Las`], llm-d's program-aware fairness).
    ProgramAware,
}

/// Program-aware fairness settings (llm-d's `las` strategy).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Las {
    /// Weight of the attained-service term (0.8).
    pub w_service: f64,
    /// Weight of the head-wait term (0.2).
    pub w_wait: f64,
    /// Half-life of attained service, µs (0 = no decay).
    pub half_life_us: f64,
}

#[derive(Debug, Default)]
struct Band {
    /// One FIFO per tenant rank (tenants sorted by name).
    flows: Vec<VecDeque<Entry>>,
    len: u64,
    /// Tenant rank of the last dequeue (round-robin).
    last: Option<usize>,
}

/// What happened to an enqueued request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueued {
    Accepted,
    /// The queue (or the request's band) is full: the request is rejected.
    Rejected,
    /// Accepted, and this lower-priority sheddable request was removed to make room.
    AcceptedShed(Slot),
}

/// The bands and their limits.
#[derive(Debug)]
pub struct BandQueue {
    bands: [Band; BANDS],
    ceilings: [f64; BANDS],
    /// Requests each band may hold.
    capacity: [Option<u64>; BANDS],
    max_depth: Option<u64>,
    shedding: bool,
    /// How each band picks a flow.
    fairness: [Fairness; BANDS],
    depth: u64,
    next_seq: u64,
    las: Las,
    /// Per flow: attained service and the time it was last decayed.
    service: Vec<(f64, i64)>,
    /// Soft-reflective ceilings instead of the linear ones.
    soft_reflective: bool,
    /// Soft-reflective: dispatch attempts that reached a gated band.
    soft_calls: u64,
}

impl BandQueue {
    /// An empty queue. `usage_limit` is the lowest band's ceiling, in (0, 1].
    pub fn new(
        tenants: usize,
        usage_limit: f64,
        per_band_capacity: Option<u64>,
        max_depth: Option<u64>,
        shedding: bool,
        fairness: Fairness,
    ) -> BandQueue {
        let mut ceilings = [1.0; BANDS];
        for (i, c) in ceilings.iter_mut().enumerate() {
            *c = 1.0 - i as f64 * (1.0 - usage_limit) / (BANDS - 1) as f64;
        }
        let bands = std::array::from_fn(|_| Band {
            flows: vec![VecDeque::new(); tenants.max(1)],
            len: 0,
            last: None,
        });
        BandQueue {
            bands,
            ceilings,
            capacity: [per_band_capacity; BANDS],
            max_depth,
            shedding,
            fairness: [fairness; BANDS],
            depth: 0,
            next_seq: 0,
            las: Las {
                w_service: 0.8,
                w_wait: 0.2,
                half_life_us: 60e6,
            },
            service: Vec::new(),
            soft_reflective: false,
            soft_calls: 0,
        }
    }

    /// The settings of program-aware fairness, in the bands that have it.
    pub fn with_las(mut self, las: Las) -> BandQueue {
        self.las = las;
        self
    }

    /// Band `band`'s own capacity and fairness (llm-d's per-band
    /// `maxRequests` and `fairnessPolicyRef`).
    pub fn with_band(
        mut self,
        band: usize,
        capacity: Option<u64>,
        fairness: Fairness,
    ) -> BandQueue {
        self.capacity[band] = capacity;
        self.fairness[band] = fairness;
        self
    }

    /// These ceilings, band 0 (the highest priority) first (llm-d's
    /// priority-holdback-policy; see `config/build/flow_control.rs`).
    pub fn with_ceilings(mut self, ceilings: [f64; BANDS]) -> BandQueue {
        self.ceilings = ceilings;
        self
    }

    /// Every band's ceiling at the lowest band's (llm-d's
    /// static-usage-limit-policy).
    pub fn with_static_ceilings(mut self) -> BandQueue {
        let lowest = self.ceilings[BANDS - 1];
        self.ceilings = [lowest; BANDS];
        self
    }

    /// llm-d's soft-reflective ceilings.
    pub fn with_soft_reflective(mut self) -> BandQueue {
        self.soft_reflective = true;
        self
    }

    /// Attained service of `flow` decayed to `now`.
    fn attained(&self, flow: usize, now: i64) -> f64 {
        let Some(&(s, at)) = self.service.get(flow) else {
            return 0.0;
        };
        if self.las.half_life_us > 0.0 && now > at {
            s * (-((now - at) as f64) / self.las.half_life_us).exp2()
        } else {
            s
        }
    }

    /// A request of `flow` completed at `now` with this service (input + 2
    /// × output tokens): program-aware fairness counts it.
    pub fn attain(&mut self, flow: usize, service: f64, now: i64) {
        if !self.fairness.contains(&Fairness::ProgramAware) {
            return;
        }
        if flow >= self.service.len() {
            self.service.resize(flow + 1, (0.0, now));
        }
        let s = self.attained(flow, now);
        self.service[flow] = (s + service, now);
    }

    /// Whether band `i` may dispatch at saturation `sat` (one call per
    /// gated band reached, in band order).
    fn band_open(&mut self, i: usize, sat: f64, gated_seen: &mut bool) -> bool {
        if !self.soft_reflective {
            return sat < self.ceilings[i];
        }
        if sat >= 1.0 {
            return false;
        }
        if i == 0 || sat < 1.0 - i as f64 * sat / (BANDS - 1) as f64 {
            return true;
        }
        // Gated: all gated bands share one draw of the counter per attempt.
        let period = ((sat / (1.0 - sat)).round() as u64).max(1);
        if !*gated_seen {
            *gated_seen = true;
            self.soft_calls += 1;
        }
        (self.soft_calls - 1) % period == 0
    }

    /// Requests queued.
    pub fn depth(&self) -> u64 {
        self.depth
    }

    /// Whether a band holds no request.
    pub fn is_empty(&self) -> bool {
        self.depth == 0
    }

    /// Requests queued in `band`.
    pub fn band_len(&self, band: usize) -> u64 {
        self.bands[band].len
    }

    /// Queue `slot` in `band` (class index) and `flow` (tenant rank).
    pub fn enqueue(&mut self, band: usize, flow: usize, slot: Slot) -> Enqueued {
        self.enqueue_at(band, flow, slot, 0)
    }

    /// [`enqueue`](Self::enqueue) at time `now`, µs.
    pub fn enqueue_at(&mut self, band: usize, flow: usize, slot: Slot, now: i64) -> Enqueued {
        if self.capacity[band].is_some_and(|c| self.bands[band].len >= c) {
            return Enqueued::Rejected;
        }
        let mut shed = None;
        if self.max_depth.is_some_and(|m| self.depth >= m) {
            if !self.shedding {
                return Enqueued::Rejected;
            }
            // The victim: the lowest-priority sheddable band's newest entry;
            // only a strictly lower band than the newcomer's (an equal band's
            // newest entry is older than the newcomer, so it stays).
            let Some(victim_band) = (FIRST_SHEDDABLE.max(band + 1)..BANDS)
                .rev()
                .find(|&b| self.bands[b].len > 0)
            else {
                return Enqueued::Rejected;
            };
            let b = &mut self.bands[victim_band];
            let (f, _) = b
                .flows
                .iter()
                .enumerate()
                .filter_map(|(f, q)| q.back().map(|e| (f, e.seq)))
                .max_by_key(|&(_, seq)| seq)
                .expect("a non-empty band has a non-empty flow");
            let victim = b.flows[f].pop_back().expect("non-empty flow");
            b.len -= 1;
            self.depth -= 1;
            shed = Some(victim.slot);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let b = &mut self.bands[band];
        if flow >= b.flows.len() {
            b.flows.resize(flow + 1, VecDeque::new());
        }
        b.flows[flow].push_back(Entry { slot, seq, at: now });
        b.len += 1;
        self.depth += 1;
        match shed {
            Some(v) => Enqueued::AcceptedShed(v),
            None => Enqueued::Accepted,
        }
    }

    /// Remove `slot` from `band`/`flow` (TTL expiry); false when it is not there.
    pub fn remove(&mut self, band: usize, flow: usize, slot: Slot) -> bool {
        let b = &mut self.bands[band];
        let Some(q) = b.flows.get_mut(flow) else {
            return false;
        };
        let Some(pos) = q.iter().position(|e| e.slot == slot) else {
            return false;
        };
        q.remove(pos);
        b.len -= 1;
        self.depth -= 1;
        true
    }

    /// At most one request, from the highest-priority non-empty band whose
    /// ceiling the saturation `sat` is below (no lower band while a higher
    /// one is gated).
    pub fn dequeue_gated(&mut self, sat: f64) -> Option<Slot> {
        self.dequeue_at(sat, 0)
    }

    /// [`dequeue_gated`](Self::dequeue_gated) at time `now`, µs.
    pub fn dequeue_at(&mut self, sat: f64, now: i64) -> Option<Slot> {
        let mut gated_seen = false;
        for i in 0..BANDS {
            if !self.band_open(i, sat, &mut gated_seen) {
                return None;
            }
            if self.bands[i].len == 0 {
                continue;
            }
            let fairness = self.fairness[i];
            let las_pick = (fairness == Fairness::ProgramAware).then(|| self.las_flow(i, now));
            let b = &mut self.bands[i];
            let n = b.flows.len();
            let f = match fairness {
                Fairness::GlobalStrict => b
                    .flows
                    .iter()
                    .enumerate()
                    .filter_map(|(f, q)| q.front().map(|e| (f, e.seq)))
                    .min_by_key(|&(_, seq)| seq)
                    .map(|(f, _)| f),
                Fairness::RoundRobin => {
                    let start = b.last.map_or(0, |l| l + 1);
                    (0..n)
                        .map(|k| (start + k) % n)
                        .find(|&f| !b.flows[f].is_empty())
                }
                Fairness::ProgramAware => las_pick,
            }
            .expect("a non-empty band has a non-empty flow");
            let e = b.flows[f].pop_front().expect("non-empty flow");
            b.len -= 1;
            b.last = Some(f);
            self.depth -= 1;
            return Some(e.slot);
        }
        None
    }
}

impl BandQueue {
    /// The program-aware pick among band `i`'s non-empty flows.
    fn las_flow(&self, i: usize, now: i64) -> usize {
        let b = &self.bands[i];
        let flows: Vec<(usize, f64, f64)> = b
            .flows
            .iter()
            .enumerate()
            .filter_map(|(f, q)| {
                q.front()
                    .map(|e| (f, self.attained(f, now), (now - e.at).max(0) as f64))
            })
            .collect();
        let range = |v: &dyn Fn(&(usize, f64, f64)) -> f64| {
            flows
                .iter()
                .map(v)
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| {
                    (l.min(x), h.max(x))
                })
        };
        let norm = |x: f64, (lo, hi): (f64, f64)| if hi > lo { (x - lo) / (hi - lo) } else { 0.5 };
        let (sr, wr) = (range(&|f| f.1), range(&|f| f.2));
        let mut best = (usize::MAX, f64::NEG_INFINITY);
        for &(f, s, w) in &flows {
            let score = self.las.w_service * (1.0 - norm(s, sr)) + self.las.w_wait * norm(w, wr);
            if score > best.1 {
                best = (f, score);
            }
        }
        best.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Program-aware fairness by hand: tenant 0 attained 1000 tokens of
    /// service, tenant 1 none. Heads waited 100 µs (tenant 0) and 50 µs
    /// (tenant 1): scores 0.8·0 + 0.2·1 = 0.2 and 0.8·1 + 0.2·0 = 0.8, so
    /// tenant 1 goes first; then only tenant 0 is left. With a 1 s
    /// half-life, 1000 tokens attained 1 s ago count 500.
    #[test]
    fn program_aware_fairness_serves_the_least_attained_tenant() {
        let las = Las {
            w_service: 0.8,
            w_wait: 0.2,
            half_life_us: 1e6,
        };
        let mut q = queue(1.0, Fairness::ProgramAware).with_las(las);
        q.attain(0, 1000.0, 0);
        assert_eq!(q.attained(0, 1_000_000), 500.0);
        q.enqueue_at(1, 0, 10, 1_000_000 - 100);
        q.enqueue_at(1, 1, 11, 1_000_000 - 50);
        assert_eq!(q.las_flow(1, 1_000_000), 1);
        assert_eq!(q.dequeue_at(0.0, 1_000_000), Some(11));
        assert_eq!(q.dequeue_at(0.0, 1_000_000), Some(10));
        // Equal service and wait: 0.5·0.8 + 0.5·0.2 each, the first flow.
        let mut q = queue(1.0, Fairness::ProgramAware).with_las(las);
        q.enqueue_at(1, 2, 20, 0);
        q.enqueue_at(1, 1, 21, 0);
        assert_eq!(q.dequeue_at(0.0, 0), Some(21));
    }

    /// Soft-reflective ceilings by hand (5 bands): at s = 0.3 band 1's
    /// ceiling r = 1 − 0.3/4 = 0.925 > s (open), band 4's r = 0.7 > s too;
    /// at s = 0.7 band 1 (r 0.825) is open, bands 2 (r 0.65) and 3
    /// (r 0.475) gated: together they open on one attempt in
    /// round(0.7/0.3) = 2 (one shared tick per attempt; s = 0.6 would sit
    /// on round(1.4999…) = 1 in floating point); at s ≥ 1 nothing opens.
    #[test]
    fn soft_reflective_ceilings() {
        let mut q = queue(1.0, Fairness::GlobalStrict).with_soft_reflective();
        for slot in 0..4 {
            q.enqueue(3, 0, slot);
        }
        q.enqueue(2, 0, 9);
        assert_eq!(q.dequeue_gated(0.3), Some(9));
        // Bands 2 and 3 gated at 0.7: attempts 1, 3 open (period 2), 2, 4
        // closed.
        assert_eq!(q.dequeue_gated(0.7), Some(0));
        assert_eq!(q.dequeue_gated(0.7), None);
        assert_eq!(q.dequeue_gated(0.7), Some(1));
        assert_eq!(q.dequeue_gated(0.7), None);
        assert_eq!(q.dequeue_gated(1.0), None);
        assert_eq!(q.dequeue_gated(0.3), Some(2));
    }

    fn queue(usage_limit: f64, fairness: Fairness) -> BandQueue {
        BandQueue::new(3, usage_limit, None, None, false, fairness)
    }

    #[test]
    fn ceilings_follow_the_spec_formula() {
        let q = queue(0.6, Fairness::GlobalStrict);
        let want = [1.0, 0.9, 0.8, 0.7, 0.6];
        for (c, w) in q.ceilings.iter().zip(want) {
            assert!((c - w).abs() < 1e-12, "{:?}", q.ceilings);
        }
        assert_eq!(queue(1.0, Fairness::GlobalStrict).ceilings, [1.0; 5]);
    }

    /// Static ceilings at 0.6: every band, critical included, waits from
    /// saturation 0.6 on; below it the bands go in priority order.
    #[test]
    fn static_ceilings_gate_every_band_alike() {
        let mut q = queue(0.6, Fairness::GlobalStrict).with_static_ceilings();
        assert_eq!(q.ceilings, [0.6; 5]);
        for (slot, band) in [(40, 4), (10, 1), (0, 0)] {
            q.enqueue(band, 0, slot);
        }
        assert_eq!(q.dequeue_gated(0.6), None);
        assert_eq!(q.dequeue_gated(0.59), Some(0));
        assert_eq!(q.dequeue_gated(0.59), Some(10));
        assert_eq!(q.dequeue_gated(0.61), None);
        assert_eq!(q.dequeue_gated(0.59), Some(40));
    }

    #[test]
    fn band_gating_dispatches_in_the_spec_order() {
        // Ceilings 1.0, 0.9, 0.8, 0.7, 0.6 for critical … background.
        let mut q = queue(0.6, Fairness::GlobalStrict);
        // Slots named after (band, order): background first, critical last.
        for (slot, band) in [(40, 4), (30, 3), (20, 2), (21, 2), (10, 1), (0, 0)] {
            assert_eq!(q.enqueue(band, 0, slot), Enqueued::Accepted);
        }
        // Saturation 0.75: band 3 (ceiling 0.7) and 4 are gated, but higher
        // bands go first anyway: critical, standard, then batch in FIFO order.
        assert_eq!(q.dequeue_gated(0.75), Some(0));
        assert_eq!(q.dequeue_gated(0.75), Some(10));
        // At 0.85 batch (ceiling 0.8) is gated: nothing, though batch waits.
        assert_eq!(q.dequeue_gated(0.85), None);
        assert_eq!(q.dequeue_gated(0.75), Some(20));
        assert_eq!(q.dequeue_gated(0.75), Some(21));
        // Only sheddable (0.7) and background (0.6) are left: gated at 0.75.
        assert_eq!(q.dequeue_gated(0.75), None);
        assert_eq!(q.dequeue_gated(0.7), None);
        assert_eq!(q.dequeue_gated(0.65), Some(30));
        assert_eq!(q.dequeue_gated(0.65), None);
        assert_eq!(q.dequeue_gated(0.59), Some(40));
        assert!(q.is_empty());
        // Saturation ≥ 1 gates even critical.
        q.enqueue(0, 0, 1);
        assert_eq!(q.dequeue_gated(1.0), None);
        assert_eq!(q.dequeue_gated(0.999), Some(1));
    }

    #[test]
    fn global_strict_takes_the_oldest_head_and_round_robin_takes_turns() {
        // Flows: tenant 0 holds slots 2 4 6, tenant 1 holds 3 5, tenant 2
        // holds 1; slots are numbered in enqueue order.
        for (fairness, want) in [
            (Fairness::GlobalStrict, [1, 2, 3, 4, 5, 6]),
            // Tenants 0, 1, 2 in turn from tenant 0, skipping empty flows.
            (Fairness::RoundRobin, [2, 3, 1, 4, 5, 6]),
        ] {
            let mut q = queue(1.0, fairness);
            for (slot, tenant) in [(1, 2), (2, 0), (3, 1), (4, 0), (5, 1), (6, 0)] {
                q.enqueue(1, tenant, slot);
            }
            let got: Vec<Slot> = (0..6).map(|_| q.dequeue_gated(0.0).unwrap()).collect();
            assert_eq!(got, want, "{fairness:?}");
        }
    }

    /// Per-band settings: the batch band (2) holds one request and takes
    /// tenants in turn, the standard band (1) keeps the global capacity 2
    /// and the oldest head first. Flows as in the test above.
    #[test]
    fn each_band_has_its_own_capacity_and_fairness() {
        let mut q = BandQueue::new(3, 1.0, Some(2), None, false, Fairness::GlobalStrict).with_band(
            2,
            Some(1),
            Fairness::RoundRobin,
        );
        assert_eq!(q.enqueue(2, 0, 100), Enqueued::Accepted);
        assert_eq!(q.enqueue(2, 0, 101), Enqueued::Rejected);
        assert_eq!(q.enqueue(1, 0, 102), Enqueued::Accepted);
        assert_eq!(q.enqueue(1, 0, 103), Enqueued::Accepted);
        assert_eq!(q.enqueue(1, 0, 104), Enqueued::Rejected);
        let drain = |q: &mut BandQueue| -> Vec<Slot> {
            std::iter::from_fn(|| q.dequeue_gated(0.0)).collect()
        };
        assert_eq!(drain(&mut q), [102, 103, 100]);
        let mut q = BandQueue::new(3, 1.0, None, None, false, Fairness::GlobalStrict).with_band(
            2,
            None,
            Fairness::RoundRobin,
        );
        for band in [1, 2] {
            for (slot, tenant) in [(1, 2), (2, 0), (3, 1), (4, 0), (5, 1), (6, 0)] {
                q.enqueue(band, tenant, band as Slot * 10 + slot);
            }
        }
        assert_eq!(
            drain(&mut q),
            [11, 12, 13, 14, 15, 16, 22, 23, 21, 24, 25, 26]
        );
    }

    #[test]
    fn capacity_depth_and_shedding() {
        // Band capacity 2: the third standard request is rejected.
        let mut q = BandQueue::new(1, 1.0, Some(2), None, false, Fairness::GlobalStrict);
        assert_eq!(q.enqueue(1, 0, 1), Enqueued::Accepted);
        assert_eq!(q.enqueue(1, 0, 2), Enqueued::Accepted);
        assert_eq!(q.enqueue(1, 0, 3), Enqueued::Rejected);
        assert_eq!(q.enqueue(0, 0, 4), Enqueued::Accepted);
        assert_eq!(q.depth(), 3);
        // Max depth 3 without shedding: rejected whatever the class.
        let mut q = BandQueue::new(1, 1.0, None, Some(3), false, Fairness::GlobalStrict);
        for s in 0..3 {
            q.enqueue(3, 0, s);
        }
        assert_eq!(q.enqueue(0, 0, 9), Enqueued::Rejected);
        // With shedding: the lowest sheddable band's newest entry goes.
        let mut q = BandQueue::new(2, 1.0, None, Some(3), true, Fairness::GlobalStrict);
        q.enqueue(2, 0, 20); // batch
        q.enqueue(3, 0, 30); // sheddable, older
        q.enqueue(3, 1, 31); // sheddable, newest (other tenant)
        assert_eq!(q.enqueue(0, 0, 1), Enqueued::AcceptedShed(31));
        assert_eq!(q.enqueue(1, 0, 2), Enqueued::AcceptedShed(30));
        // Only batch is sheddable now; a batch newcomer may not shed its own band.
        assert_eq!(q.enqueue(2, 1, 21), Enqueued::Rejected);
        assert_eq!(q.enqueue(4, 1, 40), Enqueued::Rejected);
        assert_eq!(q.enqueue(1, 1, 3), Enqueued::AcceptedShed(20));
        // Nothing sheddable left: a critical newcomer is rejected.
        assert_eq!(q.enqueue(0, 0, 5), Enqueued::Rejected);
        assert_eq!((q.band_len(0), q.band_len(1), q.depth()), (1, 2, 3));
        // TTL removal.
        assert!(q.remove(1, 0, 2));
        assert!(!q.remove(1, 0, 2));
        assert_eq!(q.depth(), 2);
    }
}

//! Tenant budgets (`[tenants]`): a share of the fleet's batch slots per
//! tenant. A sheddable request (batch, sheddable, background) of a tenant
//! whose requests in flight already fill its share is rejected before the
//! admission policy sees it; every other request goes on to the policy.
//!
//! Capacity = the batch slots (`max_num_seqs`) of the instances taking
//! requests at the decision: the whole fleet, or with a control plane the
//! routable (active or warming-up) instances at that instant, so budgets
//! follow autoscaling (no routable instance: capacity 0). A tenant's in-flight count is +1
//! when one of its requests passes the check and −1 when that request ends
//! (completed, dropped, or rejected later by admission, the gateway or
//! routing), so requests admitted in the same instant see each other. A
//! request is over budget when admitting it would exceed `fraction ×
//! capacity`, so a budget of 0 admits no sheddable request of that tenant.

/// Budgets and in-flight counts per tenant index.
#[derive(Debug)]
pub struct TenantBudgets {
    /// Share of the capacity per tenant index (`None`: no budget).
    fractions: Vec<Option<f64>>,
    /// Batch slots of the whole fleet (the capacity without a control plane).
    fleet_slots: u64,
    in_flight: Vec<u64>,
    /// Requests rejected for their tenant's budget, per tenant index.
    pub rejected: Vec<u64>,
}

impl TenantBudgets {
    /// Budgets as fractions, per tenant index, of a fleet of `fleet_slots`
    /// batch slots.
    pub fn new(fractions: Vec<Option<f64>>, fleet_slots: u64) -> TenantBudgets {
        let n = fractions.len();
        TenantBudgets {
            fractions,
            fleet_slots,
            in_flight: vec![0; n],
            rejected: vec![0; n],
        }
    }

    /// Whether a sheddable request of `tenant` is rejected now: counted as
    /// rejected if so, else counted in flight. `slots`: the capacity now
    /// when it is not the whole fleet's (called only for a sheddable
    /// request of a tenant with a budget).
    pub fn rejects(
        &mut self,
        tenant: u32,
        sheddable: bool,
        slots: impl FnOnce() -> Option<u64>,
    ) -> bool {
        let t = tenant as usize;
        let fraction = self.fractions.get(t).copied().flatten();
        let over = match fraction {
            Some(f) if sheddable => {
                let capacity = slots().unwrap_or(self.fleet_slots);
                (self.in_flight[t] + 1) as f64 > f * capacity as f64
            }
            _ => false,
        };
        if over {
            self.rejected[t] += 1;
        } else if let Some(n) = self.in_flight.get_mut(t) {
            *n += 1;
        }
        over
    }

    /// A request of `tenant` that passed the check ended.
    pub fn left(&mut self, tenant: u32) {
        if let Some(n) = self.in_flight.get_mut(tenant as usize) {
            *n = n.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sheddable_requests_are_rejected_once_the_share_is_full() {
        // Capacity 10: tenant 0 may hold 3 (0.3), tenant 1 none, tenant 2 unlimited.
        let mut b = TenantBudgets::new(vec![Some(0.3), Some(0.0), None], 10);
        let fleet = || None;
        for _ in 0..3 {
            assert!(!b.rejects(0, true, fleet));
        }
        assert!(b.rejects(0, true, fleet)); // a 4th would exceed 3
        assert!(!b.rejects(0, false, fleet)); // critical/standard are never refused (4 in flight)
        b.left(0);
        assert!(b.rejects(0, true, fleet)); // 3 in flight: still full
        b.left(0);
        assert!(!b.rejects(0, true, fleet)); // 2 in flight → room for one
        assert!(b.rejects(1, true, fleet)); // budget 0: no sheddable request at all
        assert!(!b.rejects(1, false, fleet));
        for _ in 0..100 {
            assert!(!b.rejects(2, true, fleet));
        }
        assert!(!b.rejects(7, true, fleet)); // a tenant the budgets do not know
        assert_eq!(b.rejected, vec![2, 1, 0]);
        assert_eq!(b.in_flight, vec![3, 1, 100]);
    }

    #[test]
    fn the_capacity_is_the_one_at_the_decision() {
        // Half of the slots: 3 in flight; the fleet (10 slots) would allow 5.
        let mut b = TenantBudgets::new(vec![Some(0.5)], 10);
        let mut asked = 0;
        for _ in 0..3 {
            assert!(!b.rejects(0, true, || {
                asked += 1;
                Some(6)
            }));
        }
        assert!(b.rejects(0, true, || Some(6)));
        // The fleet grew to 10 routable slots: room for two more.
        assert!(!b.rejects(0, true, || Some(10)));
        assert!(!b.rejects(0, true, || None));
        assert!(b.rejects(0, true, || None));
        // No routable instance: no capacity at all.
        b.left(0);
        assert!(b.rejects(0, true, || Some(0)));
        // The capacity is asked for only when it matters.
        assert!(!b.rejects(0, false, || unreachable!()));
        assert_eq!(asked, 3);
    }
}

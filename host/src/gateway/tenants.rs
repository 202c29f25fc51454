//! Tenant budgets (`[tenants]`): a share of the fleet's batch slots per
//! tenant. A sheddable request (batch, sheddable, background) of a tenant
//! whose requests in flight already fill its share is rejected before the
//! admission policy sees it; every other request goes on to the policy.
//!
//! Capacity = instances × `max_num_seqs`. A tenant's in-flight count is +1
//! when one of its requests passes the check and −1 when that request ends
//! (completed, dropped, or rejected later by admission, the gateway or
//! routing), so requests admitted in the same instant see each other. A
//! request is over budget when admitting it would exceed `fraction ×
//! capacity`, so a budget of 0 admits no sheddable request of that tenant.

/// Budgets and in-flight counts per tenant index.
#[derive(Debug)]
pub struct TenantBudgets {
    /// Maximum requests in flight per tenant index (`None`: no budget).
    limit: Vec<Option<f64>>,
    in_flight: Vec<u64>,
    /// Requests rejected for their tenant's budget, per tenant index.
    pub rejected: Vec<u64>,
}

impl TenantBudgets {
    /// Budgets as fractions of `capacity` batch slots, per tenant index.
    pub fn new(fractions: Vec<Option<f64>>, capacity: u64) -> TenantBudgets {
        let n = fractions.len();
        TenantBudgets {
            limit: fractions
                .into_iter()
                .map(|f| f.map(|f| f * capacity as f64))
                .collect(),
            in_flight: vec![0; n],
            rejected: vec![0; n],
        }
    }

    /// Whether a sheddable request of `tenant` is rejected now: counted as
    /// rejected if so, else counted in flight.
    pub fn rejects(&mut self, tenant: u32, sheddable: bool) -> bool {
        let t = tenant as usize;
        let over = sheddable
            && self
                .limit
                .get(t)
                .copied()
                .flatten()
                .is_some_and(|l| (self.in_flight[t] + 1) as f64 > l);
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
        for _ in 0..3 {
            assert!(!b.rejects(0, true));
        }
        assert!(b.rejects(0, true)); // a 4th would exceed 3
        assert!(!b.rejects(0, false)); // critical/standard are never refused (4 in flight)
        b.left(0);
        assert!(b.rejects(0, true)); // 3 in flight: still full
        b.left(0);
        assert!(!b.rejects(0, true)); // 2 in flight → room for one
        assert!(b.rejects(1, true)); // budget 0: no sheddable request at all
        assert!(!b.rejects(1, false));
        for _ in 0..100 {
            assert!(!b.rejects(2, true));
        }
        assert!(!b.rejects(7, true)); // a tenant the budgets do not know
        assert_eq!(b.rejected, vec![2, 1, 0]);
        assert_eq!(b.in_flight, vec![3, 1, 100]);
    }
}

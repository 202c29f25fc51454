//! `[tenants]`: tenant budgets → [`TenantBudgets`](crate::gateway::TenantBudgets).

use super::Problems;
use crate::config::{RunFile, TenantsSection};
use crate::gateway::TenantBudgets;

/// Check the fractions (errors name the tenant).
pub(super) fn check(t: Option<&TenantsSection>, problems: &mut Problems) {
    let Some(t) = t else {
        return;
    };
    if t.budgets.is_empty() {
        problems
            .error("tenants.budgets is empty: give tenant = fraction pairs, or remove [tenants]");
    }
    for (name, f) in &t.budgets {
        if !(0.0..=1.0).contains(f) {
            problems.error(format!(
                "tenants.budgets.{name} = {f}: must be a fraction in [0, 1] of the serving instances' batch slots (max_num_seqs)"
            ));
        }
    }
}

/// The budgets for the workload's tenants, with a note for budgets of
/// tenants the workload does not have.
/// `fleet_slots`: Σ `max_num_seqs` over the instances built (with a control
/// plane the cluster uses the routable instances' at each decision).
pub(super) fn create(
    run: &RunFile,
    tenant_names: &[String],
    fleet_slots: u64,
    notes: &mut Vec<String>,
) -> Option<TenantBudgets> {
    let t = run.tenants.as_ref()?;
    for name in t.budgets.keys() {
        if !tenant_names.contains(name) {
            notes.push(format!(
                "tenants.budgets.{name}: the workload has no tenant '{name}'; the budget applies to nothing"
            ));
        }
    }
    let fractions = tenant_names
        .iter()
        .map(|n| t.budgets.get(n).copied())
        .collect();
    Some(TenantBudgets::new(fractions, fleet_slots))
}

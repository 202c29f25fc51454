//! The run's admission: `[admission] policy`, then each `[[admission.then]]`
//! policy in order. A request is admitted when every one admits it; the
//! first that refuses ends the decision, and the later ones never see that
//! request (so a random admitter draws only for the requests that reach
//! it). Every policy observes every routing decision and receives the
//! lifecycle events it asked for. One policy — every run without `then` —
//! costs what the bare policy does.

use blis_plugin_api::{ClusterState, ClusterView, EventKind, Hooks, RequestEvent, RequestView};

use crate::plugins::{AdmissionPolicy, PluginError};

/// The admission policies of a run, asked in order.
pub struct Admission {
    policies: Vec<AdmissionPolicy>,
    /// `library::name` of each policy.
    descs: Vec<String>,
    /// The policy that refused the last rejected request.
    refused_by: usize,
}

impl Admission {
    /// `first`, then `then` in order.
    pub fn new(first: AdmissionPolicy, then: Vec<AdmissionPolicy>) -> Self {
        let mut policies = vec![first];
        policies.extend(then);
        let descs = policies
            .iter()
            .map(|p| format!("{}::{}", p.label().library, p.label().name))
            .collect();
        Admission {
            policies,
            descs,
            refused_by: 0,
        }
    }

    /// `library::name` of every policy, joined with " then ".
    pub fn describe(&self) -> String {
        self.descs.join(" then ")
    }

    /// True when every policy admits the request (asked in order, up to the
    /// first that refuses).
    #[inline]
    pub fn admit(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> Result<bool, Box<PluginError>> {
        for (i, p) in self.policies.iter_mut().enumerate() {
            if !p.admit(req, cluster)? {
                self.refused_by = i;
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// `library::name` of the policy that refused the last rejected request.
    pub fn refuser(&self) -> &str {
        &self.descs[self.refused_by]
    }

    /// The reason the refusing policy gave, if any (call right after a
    /// refusal).
    pub fn take_reason(&mut self) -> Option<String> {
        self.policies[self.refused_by].take_reason()
    }

    /// Tell every policy where an admitted request was routed.
    pub fn observe(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> Result<(), Box<PluginError>> {
        for p in &mut self.policies {
            p.observe(req, cluster, chosen)?;
        }
        Ok(())
    }

    /// Deliver a lifecycle event to every policy that asked for its kind.
    pub fn on_event(
        &mut self,
        event: &RequestEvent<'_>,
        state: &ClusterState<'_>,
    ) -> Result<(), Box<PluginError>> {
        for p in self.policies.iter_mut().filter(|p| p.wants(event.kind)) {
            p.on_event(event, state)?;
        }
        Ok(())
    }

    /// True when some policy handles events of `kind`.
    pub fn wants(&self, kind: EventKind) -> bool {
        self.policies.iter().any(|p| p.wants(kind))
    }

    /// The event kinds any policy handles.
    pub fn hooks(&self) -> Hooks {
        Hooks(self.policies.iter().fold(0, |h, p| h | p.label().hooks.0))
    }

    /// Whether some policy reads the instance snapshots.
    pub fn reads_snapshots(&self) -> bool {
        self.policies.iter().any(|p| p.label().snapshots)
    }

    /// Whether some policy reads the prompt's block hashes.
    pub fn reads_block_hashes(&self) -> bool {
        self.policies.iter().any(|p| p.label().block_hashes)
    }
}

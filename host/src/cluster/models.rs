//! The host-side model filter of a cluster serving several base models
//! (`[[pools]]` of role `serve`, each with its own model): before any
//! routing policy, a request's candidates are the instances serving its
//! model, so plugins only ever see those. A request whose model no
//! instance serves is rejected at routing (`unroutable_by_model`).
//! `Cluster::models` is an `Option`: a one-model run pays one branch per
//! routing decision.

use blis_plugin_api::InstanceSnapshot;

/// No model (a request whose model no instance serves).
pub const NO_MODEL: u32 = u32::MAX;

/// The instances of each model, and how a request's model maps to them.
#[derive(Clone, Debug)]
pub struct ModelFilter {
    /// Workload model index (`Request::model`) → fleet model.
    of_request: Vec<u32>,
    /// The fleet model of a request without a model (`[model].name`).
    default: u32,
    /// Per fleet model: its instances, ascending (with the control plane:
    /// its routable instances).
    pub(super) members: Vec<Vec<u32>>,
    /// The fleet model of each instance.
    of_instance: Vec<u32>,
    /// Per fleet model: whether a pool serves it (its instances may all be
    /// unroutable for a while under the control plane).
    served: Vec<bool>,
    /// A router plugin's view of the candidates (reused).
    pub(super) compact: Vec<InstanceSnapshot>,
}

impl ModelFilter {
    /// `of_instance[i]`: instance `i`'s fleet model, of `models` in all;
    /// `of_request`/`default` map a request's model to a fleet model.
    pub fn new(models: usize, of_instance: &[u32], of_request: Vec<u32>, default: u32) -> Self {
        let mut members = vec![Vec::new(); models];
        for (i, &m) in of_instance.iter().enumerate() {
            members[m as usize].push(i as u32);
        }
        let served = members.iter().map(|v| !v.is_empty()).collect();
        ModelFilter {
            of_request,
            default,
            members,
            of_instance: of_instance.to_vec(),
            served,
            compact: Vec::new(),
        }
    }

    /// Whether some pool serves fleet model `m`.
    #[inline]
    pub fn serves(&self, m: u32) -> bool {
        self.served.get(m as usize).copied().unwrap_or(false)
    }

    /// The fleet model of instance `i`.
    pub fn model_of_instance(&self, i: usize) -> u32 {
        self.of_instance[i]
    }

    /// A new instance (the autoscaler's), of fleet model `m`; it is a
    /// candidate once [`ModelFilter::restrict`] finds it routable.
    pub fn push_instance(&mut self, m: u32) {
        self.of_instance.push(m);
    }

    /// Make each model's candidates its instances for which `routable`
    /// holds (the control plane's routable set).
    pub fn restrict(&mut self, routable: impl Fn(usize) -> bool) {
        for v in &mut self.members {
            v.clear();
        }
        for (i, &m) in self.of_instance.iter().enumerate() {
            if routable(i) {
                self.members[m as usize].push(i as u32);
            }
        }
    }

    /// The fleet model a request asks for.
    #[inline]
    pub fn model_of(&self, model: Option<u32>) -> u32 {
        match model {
            None => self.default,
            Some(m) => self.of_request.get(m as usize).copied().unwrap_or(NO_MODEL),
        }
    }

    /// The instances serving fleet model `m` (empty: none does).
    #[inline]
    pub fn members(&self, m: u32) -> &[u32] {
        self.members.get(m as usize).map_or(&[], Vec::as_slice)
    }
}

//! Per-model records of a cluster serving several base models: the
//! report's `models` section — for each model, the cluster block computed
//! over its instances (a request only ever reaches an instance of its
//! model), with its arrivals, rejections and `unroutable_by_model`.

use crate::request::Request;

/// The collector's per-model counts (present only with several models).
#[derive(Clone, Debug)]
pub struct ModelRecorder {
    /// Fleet model names.
    pub names: Vec<String>,
    /// Per instance: its fleet model.
    pub of_instance: Vec<u32>,
    /// Workload model index → fleet model.
    of_request: Vec<u32>,
    default: u32,
    pub arrived: Vec<u64>,
    pub rejected: Vec<u64>,
    pub unroutable: Vec<u64>,
}

impl ModelRecorder {
    /// Records for `names` (fleet models); see
    /// [`crate::cluster::ModelFilter::new`] for the maps.
    pub fn new(
        names: Vec<String>,
        of_instance: Vec<u32>,
        of_request: Vec<u32>,
        default: u32,
    ) -> Self {
        let n = names.len();
        ModelRecorder {
            names,
            of_instance,
            of_request,
            default,
            arrived: vec![0; n],
            rejected: vec![0; n],
            unroutable: vec![0; n],
        }
    }

    fn index(&self, req: &Request) -> usize {
        match req.model.get() {
            None => self.default as usize,
            Some(m) => self.of_request.get(m as usize).copied().unwrap_or(u32::MAX) as usize,
        }
    }

    /// A request reached the cluster.
    pub fn arrived(&mut self, req: &Request) {
        let i = self.index(req);
        if let Some(x) = self.arrived.get_mut(i) {
            *x += 1;
        }
    }

    /// A request was rejected (`unroutable`: no instance serves its model).
    pub fn rejected(&mut self, req: &Request, unroutable: bool) {
        let i = self.index(req);
        if let Some(x) = self.rejected.get_mut(i) {
            *x += 1;
        }
        if unroutable {
            if let Some(x) = self.unroutable.get_mut(i) {
                *x += 1;
            }
        }
    }

    /// The model's name of a request (for result lines).
    pub fn name_of(&self, req: &Request) -> Option<&str> {
        self.names.get(self.index(req)).map(String::as_str)
    }
}

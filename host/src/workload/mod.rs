//! Workloads: where requests come from.
//!
//! A [`Workload`] is a stream the cluster pulls from in arrival order and
//! notifies when requests finish (so multi-turn sessions can schedule their
//! next round). Requests are generated lazily: memory is O(requests in
//! flight), never O(num_requests).
//!
//! (Skeleton: the generators, distributions, sessions and trace replay are
//! built in the workloads issue.)

use crate::engine::Tick;
use crate::request::Request;

/// The `[workload]` table of a run file (skeleton; replaced by the workloads issue).
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    pub aggregate_rate: Option<f64>,
    pub num_requests: Option<u64>,
}

/// A workload that cannot be built.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WorkloadError(pub String);

/// Stream of requests in arrival order.
#[derive(Debug, Default)]
pub struct Workload {}

impl Workload {
    /// Build the workload of a run.
    pub fn new(
        _config: &WorkloadConfig,
        _seed: u64,
        _base_dir: &std::path::Path,
    ) -> Result<Workload, WorkloadError> {
        todo!()
    }

    /// Tenant names (index = `Request::tenant`).
    pub fn tenant_names(&self) -> &[String] {
        todo!()
    }

    /// Client names (index = `Request::client`).
    pub fn client_names(&self) -> &[String] {
        todo!()
    }

    /// Requests the workload will generate, if bounded.
    pub fn planned_requests(&self) -> Option<u64> {
        todo!()
    }

    /// Arrival time of the next request, if any.
    pub fn peek_time(&self) -> Option<Tick> {
        todo!()
    }

    /// Write the next request into `req` (a recycled record: overwrite every
    /// identity/content field, reuse the `prompt` vector). Assigns `id` in
    /// arrival order. Returns false when the stream is exhausted.
    pub fn pop_into(&mut self, _req: &mut Request) -> bool {
        todo!()
    }

    /// A request left the system at `at`: `completed` is false when it was
    /// rejected or dropped. Multi-turn sessions schedule their next round here.
    pub fn on_finished(&mut self, _req: &Request, _at: Tick, _completed: bool) {
        todo!()
    }
}

/// Convert a reference v2 workload-spec YAML to `[workload]` TOML (skeleton).
pub fn convert_workload_spec(_yaml: &str) -> Result<(String, Vec<String>), WorkloadError> {
    Err(WorkloadError("not implemented yet".into()))
}

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

/// Stream of requests in arrival order.
#[derive(Debug, Default)]
pub struct Workload {}

impl Workload {
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

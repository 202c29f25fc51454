//! LoRA adapters as a policy sees them (ABI 0.2, through the host's query
//! table, [`crate::host`]): the adapter of the request being decided and
//! the adapters resident or loading on each instance, read live.
//!
//! The answers exist while the host decides a request (admission, routing
//! — router, scorer, filter, picker — and the P/D decider) in a run with
//! `[lora]`; elsewhere, and in a host too old to answer, every request is a
//! base-model request and no instance has LoRA state. Adapters are numbered
//! in the order of the run's `[[lora.adapters]]`.
//!
//! ```
//! use blis_plugin_api::{lora, ClusterView, RequestView, Scores};
//!
//! /// 1 where the request's adapter is resident or loading, else 0.
//! fn affinity(req: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
//!     let adapter = lora::request_adapter(req);
//!     for i in 0..cluster.len() as u32 {
//!         scores.push(match adapter {
//!             Some(a) if lora::residency(cluster, i, a.index) == lora::Residency::Absent => 0.0,
//!             _ => 1.0,
//!         });
//!     }
//! }
//! ```

use abi_stable::std_types::RSliceMut;

use crate::host::{host, NONE};
use crate::views::{ClusterView, RequestView};

/// One adapter of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Adapter<'a> {
    /// Index in `[[lora.adapters]]`.
    pub index: u32,
    /// LoRA rank.
    pub rank: u32,
    /// The adapter's id.
    pub name: &'a str,
}

/// Where an adapter is relative to an instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residency {
    /// Not on the instance (a request for it waits for a cold load).
    Absent,
    /// Resident: requests for it batch at once.
    Resident,
    /// Being loaded now.
    Loading,
}

/// The LoRA state of one instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstanceAdapters {
    /// Resident adapter slots.
    pub capacity: u32,
    /// Adapters resident now.
    pub resident: u32,
    /// The adapter being loaded, if any.
    pub loading: Option<u32>,
}

/// The adapter of `req`, or `None` for a base-model request (and in a run
/// without `[lora]`, or outside a decision on `req`).
pub fn request_adapter<'a>(req: &RequestView<'a>) -> Option<Adapter<'a>> {
    let h = host()?;
    let index = (h.lora_request_adapter())(req.id);
    if index == NONE {
        return None;
    }
    adapter_info(index)
}

/// Adapter `index` of the run, if there is one (and a decision is on).
pub fn adapter<'a>(_cluster: &ClusterView<'a>, index: u32) -> Option<Adapter<'a>> {
    adapter_info(index)
}

fn adapter_info<'a>(index: u32) -> Option<Adapter<'a>> {
    let info = (host()?.lora_adapter()?)(index);
    (info.index != NONE).then(|| Adapter {
        index: info.index,
        rank: info.rank,
        name: info.name.as_str(),
    })
}

/// Whether adapter `adapter` is resident, loading or absent on instance
/// `instance` (cluster index) now. [`Residency::Absent`] when the host has
/// no LoRA state to give.
pub fn residency(_cluster: &ClusterView<'_>, instance: u32, adapter: u32) -> Residency {
    match host()
        .and_then(|h| h.lora_residency())
        .map_or(0, |f| f(instance, adapter))
    {
        1 => Residency::Resident,
        2 => Residency::Loading,
        _ => Residency::Absent,
    }
}

/// The LoRA state of instance `instance` (cluster index), with its
/// resident adapters' indices, most recently used first, in `resident`
/// (cleared first). `None` when the host has no LoRA state to give.
pub fn instance_adapters(
    _cluster: &ClusterView<'_>,
    instance: u32,
    resident: &mut Vec<u32>,
) -> Option<InstanceAdapters> {
    resident.clear();
    let f = host()?.lora_instance()?;
    let mut state = f(instance, RSliceMut::from_mut_slice(&mut []));
    if state.capacity == 0 {
        return None;
    }
    if state.resident > 0 {
        resident.resize(state.resident as usize, NONE);
        state = f(instance, RSliceMut::from_mut_slice(resident));
        resident.truncate(state.resident as usize);
    }
    Some(InstanceAdapters {
        capacity: state.capacity,
        resident: state.resident,
        loading: (state.loading != NONE).then_some(state.loading),
    })
}

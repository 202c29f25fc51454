//! The answers to the plugins' LoRA queries (`plugins::host_queries`) at a
//! decision: the request's adapter, and each instance's adapters — read
//! live, or from a snapshot refreshed every
//! `[routing.freshness] resident_adapters_us` (the reference's periodic
//! ResidentAdapters field; llm-d's scrape of `vllm:lora_requests_info`).

use std::ops::Range;

use blis_plugin_api::host::{InstanceAdapters, NONE};

use super::snapshot::Schedule;
use crate::engine::Tick;
use crate::instance::Instance;
use crate::plugins::host_queries::LoraState;
use crate::request::Request;
use crate::workload::Workload;

/// One instance's adapters as a snapshot holds them.
#[derive(Clone, Debug, Default)]
struct InstanceLora {
    capacity: u32,
    /// Most recently used first.
    resident: Vec<u32>,
    loading: Option<u32>,
}

impl InstanceLora {
    fn read(i: &Instance, into: &mut InstanceLora) {
        let Some(l) = i.lora() else {
            *into = InstanceLora::default();
            return;
        };
        into.capacity = l.config().capacity;
        into.resident.clear();
        into.resident.resize(l.config().capacity as usize, NONE);
        let n = l.most_recent_first(&mut into.resident) as usize;
        into.resident.truncate(n);
        into.loading = l.loading().map(|(a, _)| a);
    }
}

/// The cluster's LoRA view: present when the run has `[lora]`.
#[derive(Debug)]
pub(super) struct LoraView {
    schedule: Schedule,
    /// Used when the adapters are not read live.
    snapshot: Vec<InstanceLora>,
}

impl LoraView {
    /// A view refreshing every `interval` µs (0 = live).
    pub(super) fn new(interval: Tick) -> Self {
        LoraView {
            schedule: Schedule::new(interval),
            snapshot: Vec::new(),
        }
    }

    /// The answers of a decision on `req` at `t` over `range` of the
    /// instances (all of them without one: the view's indices are the
    /// range's), refreshing the snapshot first when it is due.
    pub(super) fn decision<'a>(
        &'a mut self,
        t: Tick,
        req: &Request,
        instances: &'a [Instance],
        workload: &'a Workload,
        range: Option<&Range<u32>>,
    ) -> LoraDecision<'a> {
        let live = self.schedule.is_live();
        if !live && self.schedule.due(t) {
            self.snapshot.resize_with(instances.len(), Default::default);
            for (i, s) in instances.iter().zip(&mut self.snapshot) {
                InstanceLora::read(i, s);
            }
        }
        let (lo, hi) = match range {
            Some(r) => (r.start as usize, r.end as usize),
            None => (0, instances.len()),
        };
        LoraDecision {
            id: req.id,
            adapter: req.adapter.get(),
            names: workload.adapter_names(),
            instances: &instances[lo..hi],
            snapshot: if live {
                None
            } else {
                // Instances added since the last refresh are not in it yet.
                let end = hi.min(self.snapshot.len());
                Some(&self.snapshot[lo.min(end)..end])
            },
        }
    }
}

/// The answers to the plugins' LoRA queries during one decision.
pub(super) struct LoraDecision<'a> {
    id: u64,
    adapter: Option<u32>,
    names: &'a [String],
    /// The instances the decision sees (for their settings, and their
    /// state when it is read live).
    instances: &'a [Instance],
    /// Their adapters as of the last refresh, when not read live.
    snapshot: Option<&'a [InstanceLora]>,
}

impl LoraState for LoraDecision<'_> {
    fn request_id(&self) -> u64 {
        self.id
    }

    fn request_adapter(&self) -> Option<u32> {
        self.adapter
    }

    fn adapter(&self, index: u32) -> Option<(&str, u32)> {
        let name = self.names.get(index as usize)?;
        let rank = self
            .instances
            .iter()
            .filter_map(|i| i.lora())
            .map(|l| l.config().ranks.get(index as usize).copied().unwrap_or(0))
            .find(|&r| r > 0)
            .unwrap_or(0);
        Some((name, rank))
    }

    fn residency(&self, instance: u32, adapter: u32) -> u32 {
        let code = |resident: bool, loading: bool| {
            if resident {
                1
            } else if loading {
                2
            } else {
                0
            }
        };
        match self.snapshot {
            Some(s) => s.get(instance as usize).map_or(0, |i| {
                code(i.resident.contains(&adapter), i.loading == Some(adapter))
            }),
            None => self
                .instances
                .get(instance as usize)
                .and_then(Instance::lora)
                .map_or(0, |l| {
                    code(
                        l.is_resident(Some(adapter)),
                        l.loading().is_some_and(|(a, _)| a == adapter),
                    )
                }),
        }
    }

    fn instance(&self, instance: u32, out: &mut [u32]) -> Option<InstanceAdapters> {
        match self.snapshot {
            Some(s) => {
                let i = s.get(instance as usize)?;
                if i.capacity == 0 {
                    return None;
                }
                for (o, &a) in out.iter_mut().zip(&i.resident) {
                    *o = a;
                }
                Some(InstanceAdapters {
                    capacity: i.capacity,
                    resident: i.resident.len() as u32,
                    loading: i.loading.unwrap_or(NONE),
                })
            }
            None => {
                let l = self.instances.get(instance as usize)?.lora()?;
                Some(InstanceAdapters {
                    capacity: l.config().capacity,
                    resident: l.most_recent_first(out),
                    loading: l.loading().map_or(NONE, |(a, _)| a),
                })
            }
        }
    }
}

//! ABI 0.2: request lifecycle events, delivered to the policies that ask for
//! them (see [`Hooks`](crate::Hooks)) in simulated-time order, each with the
//! cluster as it is at that time.

use abi_stable::StableAbi;

use crate::views::RequestView;

/// What happened to a request, as a stable one-byte code. Later ABI versions
/// add codes; a policy never receives a code it did not ask for.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventKind(pub u8);

impl EventKind {
    /// Routed to `instance` (after every policy's `observe`).
    pub const DISPATCHED: EventKind = EventKind(0);
    /// The client saw its first token (`ttft_us` is set).
    pub const FIRST_TOKEN: EventKind = EventKind(1);
    /// Its last token reached the client (`ttft_us`, `e2e_us`,
    /// `output_tokens` are set).
    pub const COMPLETED: EventKind = EventKind(2);
    /// Refused by admission (`instance` is `u32::MAX`; `reason` is the
    /// admission policy's).
    pub const REJECTED: EventKind = EventKind(3);
    /// Dropped by `instance` as unservable (it can never fit).
    pub const DROPPED: EventKind = EventKind(4);
    /// The run ended (after its last event; never under `blis validate`).
    /// Delivered once per policy, through the same `on_event` call as the
    /// request events (so no ABI type changed to add it): `instance` is
    /// `u32::MAX`, `time_us` the end of the run, `request` an empty view
    /// whose `tenant` holds the run's summary as TOML text, read by the
    /// adapter of [`export_plugin!`](crate::export_plugin) into the
    /// [`RunSummary`] an author receives in
    /// [`PolicyDef::on_run_end`](crate::PolicyDef::on_run_end).
    pub const RUN_END: EventKind = EventKind(5);

    /// The name used in traces and messages.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "dispatched",
            1 => "first_token",
            2 => "completed",
            3 => "rejected",
            4 => "dropped",
            5 => "run_end",
            _ => "unknown",
        }
    }
}

/// One lifecycle event of one request.
///
/// `request.block_hashes` is empty (the prompt's hashes are only kept until
/// routing); every other request field is set.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct RequestEvent<'a> {
    /// What happened.
    pub kind: EventKind,
    /// The instance it concerns (`u32::MAX` for a rejection).
    pub instance: u32,
    /// Simulated time of the event, µs.
    pub time_us: i64,
    /// The request.
    pub request: RequestView<'a>,
    /// Time to first token, µs (−1 when not reached).
    pub ttft_us: i64,
    /// Arrival → last token, µs (−1 unless completed).
    pub e2e_us: i64,
    /// Output tokens the client has seen.
    pub output_tokens: u32,
    /// Reserved, always 0.
    pub reserved: u32,
}

/// The end of a run, as a policy sees it in
/// [`PolicyDef::on_run_end`](crate::PolicyDef::on_run_end): the request
/// counts of the report's `cluster` block. Every request that arrived is
/// completed, rejected, dropped or unfinished (still queued, running or in
/// the gateway when the run stopped); `rejected` is the sum of the
/// `rejected_by_*` counts.
///
/// On the wire it is TOML text (see [`EventKind::RUN_END`]): keys a newer
/// host adds are ignored by an older plugin, and keys an older host lacks
/// read as 0 — the summary grows without an ABI change.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct RunSummary {
    /// Simulated time of the run's last event, µs.
    pub end_us: i64,
    /// Requests that arrived.
    pub arrived: u64,
    /// Requests whose last token reached the client.
    pub completed: u64,
    /// Requests refused before reaching an instance (every cause).
    pub rejected: u64,
    /// … by the admission policy.
    pub rejected_by_admission: u64,
    /// … because the routing profile's filters left no candidate.
    pub rejected_by_filter: u64,
    /// … by the gateway queue of `[flow_control]` (full, shed or expired).
    pub rejected_by_gateway: u64,
    /// … by a tenant's budget (`[tenants]`).
    pub rejected_by_tenant_budget: u64,
    /// … because no instance was routable (instance lifecycle).
    pub rejected_no_instance: u64,
    /// Requests an instance dropped as unservable.
    pub dropped: u64,
    /// Requests still in the system when the run stopped.
    pub unfinished: u64,
}

impl RunSummary {
    /// The summary as the TOML text [`EventKind::RUN_END`] carries.
    pub fn to_toml(&self) -> String {
        format!(
            "end_us = {}\narrived = {}\ncompleted = {}\nrejected = {}\n\
             rejected_by_admission = {}\nrejected_by_filter = {}\n\
             rejected_by_gateway = {}\nrejected_by_tenant_budget = {}\n\
             rejected_no_instance = {}\ndropped = {}\nunfinished = {}\n",
            self.end_us,
            self.arrived,
            self.completed,
            self.rejected,
            self.rejected_by_admission,
            self.rejected_by_filter,
            self.rejected_by_gateway,
            self.rejected_by_tenant_budget,
            self.rejected_no_instance,
            self.dropped,
            self.unfinished
        )
    }

    /// Read the TOML text of a [`EventKind::RUN_END`] event (unknown keys
    /// ignored, missing ones 0; text that is not TOML gives all zeros).
    pub fn from_toml(text: &str) -> RunSummary {
        toml::from_str(text).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::RunSummary;

    #[test]
    fn run_summary_round_trips_and_tolerates_other_versions() {
        let s = RunSummary {
            end_us: 12,
            arrived: 10,
            completed: 6,
            rejected: 3,
            rejected_by_admission: 1,
            rejected_by_filter: 2,
            dropped: 1,
            ..RunSummary::default()
        };
        assert_eq!(RunSummary::from_toml(&s.to_toml()), s);
        // A newer host's extra key, an older host's missing keys.
        let newer = format!("{}future_key = 7\n", s.to_toml());
        assert_eq!(RunSummary::from_toml(&newer), s);
        assert_eq!(
            RunSummary::from_toml("arrived = 4\n"),
            RunSummary {
                arrived: 4,
                ..RunSummary::default()
            }
        );
    }
}

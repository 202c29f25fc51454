//! ABI 0.2 (appended): what a policy may ask the host *during a call*, for
//! state that the frozen views cannot carry — the LoRA adapters of a run
//! with `[lora]` (the adapter of the request being decided and the adapters
//! resident or loading on each instance), the multi-turn session of the
//! request being decided and the HTTP headers its client sends. Authors use
//! [`crate::lora`], [`crate::session`] and [`crate::headers`]; this module
//! is the table behind them.
//!
//! The host hands every library one [`HostQueries`] table at load, through
//! the root module's `set_host` (appended after `create_observer`, so a
//! library built before it still loads and simply has no answers). The
//! table is an abi_stable *prefix type*: later queries are appended to it,
//! never to the root module again, and a library built against a longer
//! table than its host offers finds the missing queries absent (`None`)
//! instead of failing to load.
//!
//! The host answers only while it is deciding something (an admission or
//! routing decision, a P/D decider call) for the request it is deciding;
//! anywhere else the answers are "no adapter" and "no LoRA state". The
//! session and header queries also answer for the last request decided (so
//! a policy's `observe` after the decision may ask them), and "none" for
//! any other.

use std::sync::OnceLock;

use abi_stable::{
    std_types::{ROption, RSliceMut, RStr},
    StableAbi,
};

/// "No adapter" / "no index" in the table's `u32` answers.
pub const NONE: u32 = u32::MAX;

/// One adapter, as the host describes it.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdapterInfo {
    /// The adapter's index (the order of `[[lora.adapters]]`), or [`NONE`]
    /// when there is no such adapter.
    pub index: u32,
    /// Its LoRA rank.
    pub rank: u32,
    /// Its id. Borrowed from the host: valid for the current call only
    /// (the author API ties it to the call's views).
    pub name: RStr<'static>,
}

/// The LoRA state of one instance.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceAdapters {
    /// Resident adapter slots (`adapter_capacity`); 0 when the host has no
    /// LoRA state to give (no `[lora]`, or outside a decision).
    pub capacity: u32,
    /// Adapters resident now (may exceed the buffer handed to the query:
    /// only that many indices are written).
    pub resident: u32,
    /// The adapter being loaded, or [`NONE`].
    pub loading: u32,
}

/// The host's query table (a prefix type: it only ever grows at the end).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = HostQueriesRef)))]
#[sabi(missing_field(option))]
pub struct HostQueries {
    /// The adapter index of request `request_id` if it is the request being
    /// decided now, else [`NONE`] (also for a base-model request).
    #[sabi(last_prefix_field)]
    pub lora_request_adapter: extern "C" fn(request_id: u64) -> u32,
    /// Adapter `index` of the run (its `index` is [`NONE`] when there is
    /// none such, or outside a decision).
    pub lora_adapter: extern "C" fn(index: u32) -> AdapterInfo,
    /// Whether `adapter` is on `instance`: 0 absent, 1 resident, 2 loading.
    pub lora_residency: extern "C" fn(instance: u32, adapter: u32) -> u32,
    /// The LoRA state of `instance`; writes the resident adapters' indices,
    /// most recently used first, into `resident` (as many as fit).
    pub lora_instance:
        extern "C" fn(instance: u32, resident: RSliceMut<'_, u32>) -> InstanceAdapters,
    /// The multi-turn session of request `request_id` if it is the request
    /// being decided (or the last one decided), else [`NO_SESSION`] (also
    /// for a request outside any session). Appended after the LoRA queries.
    pub request_session: extern "C" fn(request_id: u64) -> u64,
    /// The value of HTTP header `name` (matched case-insensitively) that
    /// request `request_id` carries, if it is the request being decided (or
    /// the last one decided) and its client sends that header; else `None`.
    /// The value is borrowed from the host for the length of the run (the
    /// author API ties it to the call's views). Appended after the session
    /// query.
    pub request_header: extern "C" fn(request_id: u64, name: RStr<'_>) -> ROption<RStr<'static>>,
}

/// "No session" in [`HostQueries::request_session`]'s answer.
pub const NO_SESSION: u64 = u64::MAX;

static HOST: OnceLock<HostQueriesRef> = OnceLock::new();

/// The root module's `set_host`: keep the host's table (the first one: a
/// process has one host).
#[cfg_attr(
    any(
        blis_abi_before_decider,
        blis_abi_before_observer,
        blis_abi_before_host
    ),
    allow(dead_code)
)]
pub(crate) extern "C" fn set_host(queries: HostQueriesRef) {
    let _ = HOST.set(queries);
}

/// The host's table, if the host gave one.
pub(crate) fn host() -> Option<HostQueriesRef> {
    HOST.get().copied()
}

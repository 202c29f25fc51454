//! The host side of the plugin query table (`blis_plugin_api::host`): what a
//! policy may ask during a call — the LoRA adapters of the request being
//! decided and of each instance, and the request's multi-turn session.
//!
//! The session and the client are set for every decision ([`deciding`]:
//! three words in a thread-local, kept until the next decision, so a
//! policy's `observe` right after may ask too). The clients' headers are
//! set once per run ([`run_headers`]), as a shared table; a run without
//! headers answers "none" from an empty one.
//!
//! The cluster sets the answers for the length of one decision
//! ([`with_lora`]); the table's functions read them through a thread-local
//! pointer that the guard clears again (a sweep's runs on other threads
//! each have their own). Outside a decision, or in a run without `[lora]`,
//! every answer is "none". Native libraries get the table at load
//! ([`table`]); WebAssembly components reach the same answers through the
//! WIT `lora` interface, which calls the functions of this module.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::std_types::{ROption, RSliceMut, RStr};
use blis_plugin_api::host::{
    AdapterInfo, HostQueries, HostQueriesRef, InstanceAdapters, NONE, NO_SESSION,
};

/// What the cluster knows about LoRA adapters at a decision.
pub trait LoraState {
    /// The request being decided.
    fn request_id(&self) -> u64;
    /// Its adapter index, if any.
    fn request_adapter(&self) -> Option<u32>;
    /// Id and rank of adapter `index`, if the run has it.
    fn adapter(&self, index: u32) -> Option<(&str, u32)>;
    /// 0 absent, 1 resident, 2 loading (0 for an unknown instance).
    fn residency(&self, instance: u32, adapter: u32) -> u32;
    /// Capacity, resident adapters (most recent first, into `out` as far as
    /// it goes; the count is returned whole) and the adapter loading, of
    /// `instance`; `None` for an unknown instance.
    fn instance(&self, instance: u32, out: &mut [u32]) -> Option<InstanceAdapters>;
}

thread_local! {
    static CURRENT: Cell<Option<*const (dyn LoraState + 'static)>> = const { Cell::new(None) };
    /// The request being decided (or last decided), its session and its
    /// client.
    static DECIDING: Cell<(u64, u64, u32)> = const { Cell::new((u64::MAX, NO_SESSION, u32::MAX)) };
    /// The headers of the run's clients (see [`ClientHeaders`]).
    static HEADERS: RefCell<Option<Arc<ClientHeaders>>> = const { RefCell::new(None) };
}

/// The HTTP headers each client of a run sends: entry `c` holds client
/// `c`'s (`Request::client`), names lowercased, sorted by name.
pub type ClientHeaders = Vec<Vec<(String, String)>>;

/// The host is about to decide request `request_id`, of `session` (if any),
/// sent by `client`.
#[inline]
pub fn deciding(request_id: u64, session: Option<u32>, client: u32) {
    let s = session.map_or(NO_SESSION, u64::from);
    DECIDING.with(|c| c.set((request_id, s, client)));
}

/// A run starts on this thread: its clients send `headers` (`None`: none
/// sends any).
pub fn run_headers(headers: Option<Arc<ClientHeaders>>) {
    HEADERS.with(|h| *h.borrow_mut() = headers);
}

/// Header `name` (any case) of `request_id` if it is the request being (or
/// last) decided on this thread and its client sends it; `f` reads it.
pub fn request_header<R>(request_id: u64, name: &str, f: impl FnOnce(&str) -> R) -> Option<R> {
    let (id, _, client) = DECIDING.with(Cell::get);
    if id != request_id {
        return None;
    }
    HEADERS.with(|h| {
        let h = h.borrow();
        let headers = h.as_ref()?.get(client as usize)?;
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| f(v))
    })
}

extern "C" fn header_of(request_id: u64, name: RStr<'_>) -> ROption<RStr<'static>> {
    request_header(request_id, name.as_str(), |v| {
        // SAFETY (lifetime): the value lives in the run's header table,
        // which the thread-local holds until the next run starts on this
        // thread (after every call of this one); the author API ties it to
        // the call's views.
        unsafe { std::mem::transmute::<RStr<'_>, RStr<'static>>(RStr::from(v)) }
    })
    .into()
}

/// The session of `request_id` if it is the request being (or last)
/// decided on this thread.
pub fn request_session(request_id: u64) -> Option<u64> {
    let (id, s, _) = DECIDING.with(Cell::get);
    (id == request_id && s != NO_SESSION).then_some(s)
}

extern "C" fn session_of(request_id: u64) -> u64 {
    request_session(request_id).unwrap_or(NO_SESSION)
}

/// Run `f` (one decision) with `state` answering the LoRA queries; with
/// no state (a run without `[lora]`) just run `f`.
pub fn with_lora<S: LoraState, R>(state: Option<&S>, f: impl FnOnce() -> R) -> R {
    let Some(state) = state else {
        return f();
    };
    let state: &dyn LoraState = state;
    struct Restore(Option<*const (dyn LoraState + 'static)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    // SAFETY: only the lifetime is erased; the pointer is cleared by the
    // guard (also on unwinding) before `state`'s borrow ends, and read
    // only on this thread while `f` runs.
    let erased: *const (dyn LoraState + 'static) =
        unsafe { std::mem::transmute(state as *const dyn LoraState) };
    let _restore = Restore(CURRENT.with(|c| c.replace(Some(erased))));
    f()
}

/// Read the current decision's LoRA state, if one is set.
fn current<R>(f: impl FnOnce(&dyn LoraState) -> R) -> Option<R> {
    CURRENT.with(|c| c.get()).map(|p| {
        // SAFETY: set by `with_lora` for the length of a call on this
        // thread; the state outlives it (see there).
        f(unsafe { &*p })
    })
}

/// The adapter index of `request_id` when it is the request being decided.
pub fn request_adapter(request_id: u64) -> Option<u32> {
    current(|s| {
        if s.request_id() == request_id {
            s.request_adapter()
        } else {
            None
        }
    })
    .flatten()
}

/// Id and rank of adapter `index` (during a decision).
pub fn adapter(index: u32) -> Option<(String, u32)> {
    current(|s| s.adapter(index).map(|(n, r)| (n.to_string(), r))).flatten()
}

/// 0 absent, 1 resident, 2 loading (0 outside a decision).
pub fn residency(instance: u32, adapter: u32) -> u32 {
    current(|s| s.residency(instance, adapter)).unwrap_or(0)
}

/// The LoRA state of `instance`; all zero (and [`NONE`] loading) when
/// there is none to give.
pub fn instance(instance: u32, out: &mut [u32]) -> InstanceAdapters {
    current(|s| s.instance(instance, out))
        .flatten()
        .unwrap_or(InstanceAdapters {
            capacity: 0,
            resident: 0,
            loading: NONE,
        })
}

extern "C" fn lora_request_adapter(request_id: u64) -> u32 {
    request_adapter(request_id).unwrap_or(NONE)
}

extern "C" fn lora_adapter(index: u32) -> AdapterInfo {
    current(|s| {
        s.adapter(index).map(|(name, rank)| AdapterInfo {
            index,
            rank,
            // SAFETY (lifetime): the id is borrowed from the run's LoRA
            // table, which outlives the decision; the author API ties it
            // to the call's views.
            name: unsafe { std::mem::transmute::<RStr<'_>, RStr<'static>>(RStr::from(name)) },
        })
    })
    .flatten()
    .unwrap_or(AdapterInfo {
        index: NONE,
        rank: 0,
        name: RStr::from(""),
    })
}

extern "C" fn lora_residency(instance: u32, adapter: u32) -> u32 {
    residency(instance, adapter)
}

extern "C" fn lora_instance(
    instance_index: u32,
    mut resident: RSliceMut<'_, u32>,
) -> InstanceAdapters {
    instance(instance_index, resident.as_mut_slice())
}

/// The table handed to every native library at load (one per process).
pub fn table() -> HostQueriesRef {
    static TABLE: std::sync::OnceLock<HostQueriesRef> = std::sync::OnceLock::new();
    *TABLE.get_or_init(|| {
        HostQueries {
            lora_request_adapter,
            lora_adapter,
            lora_residency,
            lora_instance,
            request_session: session_of,
            request_header: header_of,
        }
        .leak_into_prefix()
    })
}

//! The canonical-ABI side of the `policy` interface, by hand (wit-bindgen
//! needs a newer Rust than the toolchains that can target wasm32 here):
//! `cabi_realloc`, the argument memory of each call, the return area, the
//! policy table and one entry function per export, which
//! [`export_plugin!`](crate::export_plugin) wraps in the exported symbols.
//!
//! Memory: the host allocates every list and string argument (and, for a
//! function whose arguments flatten to more than 16 values, the argument
//! record itself) through `cabi_realloc`; they are freed when the call
//! returns. They come from a bump arena reset after every call (a
//! decision's 64 instance snapshots, block hashes and tenant fit in it),
//! so the allocator is not involved per call; what does not fit goes to
//! the allocator. Returned lists and strings live in buffers of this
//! module until the next call, so no `cabi_post_*` function is needed.

use std::alloc::{alloc, dealloc, Layout};

use crate::author::{Dyn, Kept, PolicyDef, Scores};
use crate::params::Params;
use crate::views::{
    InstanceSnapshot, PdView, RawClusterState, RawClusterView, RawEvent, RawList, RawRequest,
    RawStr, RunningRequest,
};

/// A library as the export macro describes it.
#[doc(hidden)]
pub struct Library {
    pub name: &'static str,
    pub version: &'static str,
    pub policies: fn() -> Vec<PolicyInfo>,
    #[allow(clippy::type_complexity)]
    pub create: fn(u8, &str, Params, u64) -> Option<Result<Box<dyn Dyn>, String>>,
}

/// `policy-info` as the host reads it.
#[doc(hidden)]
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PolicyInfo {
    kind: u8,
    name: RawStr,
    summary: RawStr,
    params_doc: RawStr,
    hooks: u32,
    uses_state: bool,
    prefix_query: bool,
}

fn raw_str(s: &'static str) -> RawStr {
    RawList::new(s.as_ptr(), s.len())
}

/// The description of policy `P` of kind code `kind`.
#[doc(hidden)]
pub fn info<P: PolicyDef>(kind: u8) -> PolicyInfo {
    PolicyInfo {
        kind,
        name: raw_str(P::NAME),
        summary: raw_str(P::SUMMARY),
        params_doc: raw_str(P::PARAMS_DOC),
        hooks: P::HOOKS.0,
        uses_state: P::USES_STATE,
        prefix_query: P::PREFIX_QUERY,
    }
}

#[repr(C)]
struct LibraryInfo {
    name: RawStr,
    version: RawStr,
    policies: RawList<PolicyInfo>,
}

#[repr(C, align(8))]
struct RetArea([u8; 16]);

/// The buffers of returned values (kept until the next call).
struct Out {
    ret: RetArea,
    described: Vec<PolicyInfo>,
    library: Option<LibraryInfo>,
    text: String,
    scores: Scores,
    kept: Kept,
}

// One wasm instance runs one call at a time on one thread. The statics are
// apart so that no two live `&mut` alias: the policy table (borrowed for
// the policy's call), the argument list (touched only by the host's
// cabi_realloc calls and at the end of a call), the output buffers and the
// reason slot (which a policy writes during its call).
static mut POLICIES: Vec<Box<dyn Dyn>> = Vec::new();
static mut ARGS: Vec<(*mut u8, Layout)> = Vec::new();
static mut OUT: Out = Out {
    ret: RetArea([0; 16]),
    described: Vec::new(),
    library: None,
    text: String::new(),
    scores: Vec::new(),
    kept: Vec::new(),
};
static mut REASON: Option<String> = None;

fn policies() -> &'static mut Vec<Box<dyn Dyn>> {
    // SAFETY: see above; one borrow at a time per static.
    unsafe { &mut *core::ptr::addr_of_mut!(POLICIES) }
}

fn arg_list() -> &'static mut Vec<(*mut u8, Layout)> {
    // SAFETY: see above.
    unsafe { &mut *core::ptr::addr_of_mut!(ARGS) }
}

fn out() -> &'static mut Out {
    // SAFETY: see above.
    unsafe { &mut *core::ptr::addr_of_mut!(OUT) }
}

fn reason_slot() -> &'static mut Option<String> {
    // SAFETY: see above.
    unsafe { &mut *core::ptr::addr_of_mut!(REASON) }
}

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "blis:plugin/host@0.1.2")]
extern "C" {
    #[link_name = "log"]
    fn host_log(ptr: *const u8, len: usize);
    #[link_name = "panic-message"]
    fn host_panic_message(ptr: *const u8, len: usize);
}

/// A log line on blis's stderr, prefixed with the policy (rate-limited).
pub fn log(message: &str) {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: the host reads `len` bytes at `ptr` during the call.
    unsafe {
        host_log(message.as_ptr(), message.len())
    }
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("{message}");
}

/// The reason for the current decision (admission, filter, decider): the
/// host shows it in the decision trace.
pub fn reason(text: &str) {
    *reason_slot() = Some(text.to_string());
}

fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let message = info.to_string();
            #[cfg(target_arch = "wasm32")]
            // SAFETY: as in `log`.
            unsafe {
                host_panic_message(message.as_ptr(), message.len())
            }
            #[cfg(not(target_arch = "wasm32"))]
            eprintln!("{message}");
        }));
    });
}

/// Bytes of the argument arena.
const ARENA_SIZE: usize = 64 * 1024;

// The arena: allocated on first use, `ARENA_USED` bytes handed out in the
// current call (see the statics above: one call at a time).
static mut ARENA: *mut u8 = core::ptr::null_mut();
static mut ARENA_USED: usize = 0;

/// `size` bytes aligned to `align` from the arena, if they fit.
fn arena(align: usize, size: usize) -> Option<*mut u8> {
    // SAFETY: one call at a time (see the statics); the block is allocated
    // once with ARENA_SIZE bytes and never freed.
    unsafe {
        if ARENA.is_null() {
            let layout = Layout::from_size_align(ARENA_SIZE, 16).ok()?;
            ARENA = alloc(layout);
            if ARENA.is_null() {
                return None;
            }
        }
        if align > 16 || !align.is_power_of_two() {
            return None;
        }
        let start = (ARENA_USED + align - 1) & !(align - 1);
        let end = start.checked_add(size)?;
        if end > ARENA_SIZE {
            return None;
        }
        ARENA_USED = end;
        Some(ARENA.add(start))
    }
}

/// `cabi_realloc`: the host's allocations of argument memory.
#[doc(hidden)]
pub fn realloc(old: *mut u8, old_size: usize, align: usize, new_size: usize) -> *mut u8 {
    if old.is_null() && new_size > 0 {
        if let Some(p) = arena(align, new_size) {
            return p;
        }
    }
    // SAFETY: reading the arena's address (see `arena`).
    let base = unsafe { ARENA };
    if !old.is_null() && !base.is_null() && old >= base && old < base.wrapping_add(ARENA_SIZE) {
        // Growing an arena block: a new block, the old bytes copied.
        let new = realloc(core::ptr::null_mut(), 0, align, new_size);
        // SAFETY: both blocks hold at least min(old_size, new_size) bytes.
        unsafe { core::ptr::copy_nonoverlapping(old, new, old_size.min(new_size)) };
        return new;
    }
    let st = arg_list();
    if !old.is_null() {
        if let Some(at) = st.iter().position(|(p, _)| *p == old) {
            let (_, layout) = st.swap_remove(at);
            let new = realloc(core::ptr::null_mut(), 0, align, new_size);
            let keep = old_size.min(new_size).min(layout.size());
            // SAFETY: both blocks are live allocations of at least `keep` bytes.
            unsafe {
                core::ptr::copy_nonoverlapping(old, new, keep);
                dealloc(old, layout);
            }
            return new;
        }
    }
    if new_size == 0 {
        return align as *mut u8;
    }
    let layout = match Layout::from_size_align(new_size, align) {
        Ok(l) => l,
        Err(_) => std::process::abort(),
    };
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { alloc(layout) };
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    arg_list().push((p, layout));
    p
}

/// Free the current call's argument memory.
fn end_call() {
    // SAFETY: one call at a time (see the statics).
    unsafe { ARENA_USED = 0 };
    for (p, layout) in arg_list().drain(..) {
        // SAFETY: allocated by `realloc` with this layout, not freed since.
        unsafe { dealloc(p, layout) }
    }
}

/// Write a (pointer, length) pair into the return area.
fn ret_list<T>(ret: &mut RetArea, ptr: *const T, len: usize) -> *const u8 {
    let r = ret.0.as_mut_ptr();
    // SAFETY: the return area is 16 bytes, 8-aligned.
    unsafe {
        (r as *mut u32).write(ptr as u32);
        (r.add(4) as *mut u32).write(len as u32);
    }
    r
}

fn policy(handle: u32) -> &'static mut dyn Dyn {
    match policies().get_mut(handle as usize) {
        Some(p) => &mut **p,
        None => panic!("no policy with handle {handle}"),
    }
}

fn slice<'a, T>(ptr: i32, len: i32) -> &'a [T] {
    RawList::new(ptr as usize as *const T, len as u32 as usize).as_slice()
}

fn request(
    id: i64,
    arrival: i64,
    input: i32,
    slo: i32,
    tp: i32,
    tl: i32,
    hp: i32,
    hl: i32,
) -> RawRequest {
    RawRequest {
        id: id as u64,
        arrival_us: arrival,
        input_tokens: input as u32,
        slo_class: slo as u8,
        tenant: RawList::new(tp as usize as *const u8, tl as u32 as usize),
        block_hashes: RawList::new(hp as usize as *const u64, hl as u32 as usize),
    }
}

fn view(clock: i64, ip: i32, il: i32) -> RawClusterView {
    RawClusterView {
        clock_us: clock,
        instances: RawList::new(ip as usize as *const InstanceSnapshot, il as u32 as usize),
    }
}

/// A request view and a cluster view, flattened (admit, route, score).
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct Flat {
    pub handle: i32,
    pub id: i64,
    pub arrival: i64,
    pub input: i32,
    pub slo: i32,
    pub tenant_ptr: i32,
    pub tenant_len: i32,
    pub hashes_ptr: i32,
    pub hashes_len: i32,
    pub clock: i64,
    pub instances_ptr: i32,
    pub instances_len: i32,
}

impl Flat {
    fn parts(&self) -> (RawRequest, RawClusterView) {
        (
            request(
                self.id,
                self.arrival,
                self.input,
                self.slo,
                self.tenant_ptr,
                self.tenant_len,
                self.hashes_ptr,
                self.hashes_len,
            ),
            view(self.clock, self.instances_ptr, self.instances_len),
        )
    }
}

#[doc(hidden)]
pub fn describe(lib: &Library) -> *const u8 {
    install_panic_hook();
    let st = out();
    st.described = (lib.policies)();
    st.library = Some(LibraryInfo {
        name: raw_str(lib.name),
        version: raw_str(lib.version),
        policies: RawList::new(st.described.as_ptr(), st.described.len()),
    });
    end_call();
    st.library
        .as_ref()
        .map_or(core::ptr::null(), |l| l as *const LibraryInfo as *const u8)
}

#[doc(hidden)]
pub fn create(
    lib: &Library,
    kind: i32,
    np: i32,
    nl: i32,
    pp: i32,
    pl: i32,
    seed: i64,
) -> *const u8 {
    install_panic_hook();
    let name = RawList::<u8>::new(np as usize as *const u8, nl as u32 as usize).as_str();
    let params = RawList::<u8>::new(pp as usize as *const u8, pl as u32 as usize).as_str();
    let made = match Params::parse(params) {
        Ok(p) => (lib.create)(kind as u8, name, p, seed as u64).unwrap_or_else(|| {
            Err(format!(
                "the library has no policy '{name}' of kind code {kind}"
            ))
        }),
        Err(e) => Err(e),
    };
    let st = out();
    let r = st.ret.0.as_mut_ptr();
    match made {
        Ok(p) => {
            policies().push(p);
            let handle = (policies().len() - 1) as u32;
            // SAFETY: result<u32, string>: tag at 0, payload at 4.
            unsafe {
                r.write(0);
                (r.add(4) as *mut u32).write(handle);
            }
        }
        Err(e) => {
            st.text = e;
            // SAFETY: as above, the string's pointer and length at 4 and 8.
            unsafe {
                r.write(1);
                (r.add(4) as *mut u32).write(st.text.as_ptr() as u32);
                (r.add(8) as *mut u32).write(st.text.len() as u32);
            }
        }
    }
    end_call();
    r
}

#[doc(hidden)]
pub fn admit(f: Flat) -> i32 {
    let (r, c) = f.parts();
    *reason_slot() = None;
    let out = policy(f.handle as u32).admit(&r.view(), &c.view());
    end_call();
    out as i32
}

#[doc(hidden)]
pub fn route(f: Flat) -> i32 {
    let (r, c) = f.parts();
    let out = policy(f.handle as u32).route(&r.view(), &c.view());
    end_call();
    out as i32
}

#[doc(hidden)]
pub fn score(f: Flat) -> *const u8 {
    let (r, c) = f.parts();
    let st = out();
    st.scores.clear();
    policy(f.handle as u32).score(&r.view(), &c.view(), &mut st.scores);
    end_call();
    ret_list(&mut st.ret, st.scores.as_ptr(), st.scores.len())
}

#[doc(hidden)]
pub fn observe(f: Flat, chosen: i32) {
    let (r, c) = f.parts();
    policy(f.handle as u32).observe(&r.view(), &c.view(), chosen as u32);
    end_call();
}

/// The argument record of score-candidates and filter.
#[repr(C)]
struct StateArgs {
    handle: u32,
    request: RawRequest,
    cluster: RawClusterState,
}

fn args<'a, T>(ptr: i32) -> &'a T {
    // SAFETY: the host stored the argument record at `ptr` (allocated
    // through cabi_realloc with T's size and alignment).
    unsafe { &*(ptr as usize as *const T) }
}

#[doc(hidden)]
pub fn score_candidates(ptr: i32) -> *const u8 {
    let a: &StateArgs = args(ptr);
    let st = out();
    st.scores.clear();
    policy(a.handle).score_candidates(&a.request.view(), &a.cluster.view(), &mut st.scores);
    end_call();
    ret_list(&mut st.ret, st.scores.as_ptr(), st.scores.len())
}

#[doc(hidden)]
pub fn filter(ptr: i32) -> *const u8 {
    let a: &StateArgs = args(ptr);
    let st = out();
    st.kept.clear();
    *reason_slot() = None;
    policy(a.handle).filter(&a.request.view(), &a.cluster.view(), &mut st.kept);
    end_call();
    ret_list(&mut st.ret, st.kept.as_ptr(), st.kept.len())
}

#[repr(C)]
struct PickArgs {
    handle: u32,
    request: RawRequest,
    cluster: RawClusterState,
    scores: RawList<f64>,
}

#[doc(hidden)]
pub fn pick(ptr: i32) -> i32 {
    let a: &PickArgs = args(ptr);
    let out = policy(a.handle).pick(&a.request.view(), &a.cluster.view(), a.scores.as_slice());
    end_call();
    out as i32
}

#[repr(C)]
struct EventArgs {
    handle: u32,
    event: RawEvent,
    cluster: RawClusterState,
}

#[doc(hidden)]
pub fn on_event(ptr: i32) {
    let a: &EventArgs = args(ptr);
    policy(a.handle).on_event(&a.event.view(), &a.cluster.view());
    end_call();
}

#[doc(hidden)]
pub fn take_reason(handle: i32) -> *const u8 {
    let _ = handle;
    let st = out();
    st.text = reason_slot().take().unwrap_or_default();
    end_call();
    ret_list(&mut st.ret, st.text.as_ptr(), st.text.len())
}

#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn key(
    h: i32,
    id: i64,
    arrival: i64,
    input: i32,
    slo: i32,
    tp: i32,
    tl: i32,
    hp: i32,
    hl: i32,
) -> i64 {
    let r = request(id, arrival, input, slo, tp, tl, hp, hl);
    let out = policy(h as u32).key(&r.view());
    end_call();
    out
}

#[doc(hidden)]
pub fn victim(h: i32, ptr: i32, len: i32) -> i32 {
    let running: &[RunningRequest] = slice(ptr, len);
    let out = policy(h as u32).victim(running);
    end_call();
    out as i32
}

#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn autoscale(
    h: i32,
    clock: i64,
    ip: i32,
    il: i32,
    cp: i32,
    cl: i32,
    fp: i32,
    fl: i32,
    pp: i32,
    pl: i32,
) -> i32 {
    let c = RawClusterState {
        view: view(clock, ip, il),
        candidates: RawList::new(cp as usize as *const u32, cl as u32 as usize),
        info: RawList::new(fp as usize as *const _, fl as u32 as usize),
        prefix_blocks: RawList::new(pp as usize as *const u32, pl as u32 as usize),
    };
    let out = policy(h as u32).autoscale(&c.view());
    end_call();
    out
}

#[repr(C)]
struct DisaggregateArgs {
    handle: u32,
    request: RawRequest,
    pd: PdView,
    cluster: RawClusterState,
}

#[doc(hidden)]
pub fn disaggregate(ptr: i32) -> i32 {
    let a: &DisaggregateArgs = args(ptr);
    *reason_slot() = None;
    let out = policy(a.handle).disaggregate(&a.request.view(), &a.pd, &a.cluster.view());
    end_call();
    out as i32
}

// The argument records of the functions passed by pointer, as the
// canonical ABI lays them out (checked at compile time on wasm32).
#[cfg(target_arch = "wasm32")]
const _: () = {
    use core::mem::size_of;
    assert!(size_of::<StateArgs>() == 88);
    assert!(size_of::<PickArgs>() == 96);
    assert!(size_of::<EventArgs>() == 128);
    assert!(size_of::<DisaggregateArgs>() == 112);
    assert!(size_of::<PolicyInfo>() == 36);
    assert!(size_of::<LibraryInfo>() == 24);
};

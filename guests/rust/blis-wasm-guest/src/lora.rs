//! LoRA adapters as a policy sees them (WIT 0.1.1's `lora` interface; the
//! native `blis_plugin_api::lora`): the adapter of the request being
//! decided and the adapters resident or loading on each instance, read
//! live. The host answers while it decides a request (admission, routing,
//! the P/D decider) in a run with `[lora]`; elsewhere every request is a
//! base-model request and no instance has LoRA state. Adapters are numbered
//! by the workload (the order it first names them).

use crate::views::{ClusterView, RequestView};

/// One adapter of the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adapter {
    /// The adapter's index.
    pub index: u32,
    /// LoRA rank.
    pub rank: u32,
    /// The adapter's id.
    pub name: String,
}

/// Where an adapter is relative to an instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residency {
    /// Not on the instance.
    Absent,
    /// Resident.
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

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "blis:plugin/lora@0.1.2")]
extern "C" {
    #[link_name = "request-adapter"]
    fn lora_request_adapter(request_id: i64, ret: *mut u8);
    #[link_name = "adapter"]
    fn lora_adapter(index: i32, ret: *mut u8);
    #[link_name = "residency"]
    fn lora_residency(instance: i32, adapter: i32) -> i32;
    #[link_name = "instance-adapters"]
    fn lora_instance_adapters(instance: i32, ret: *mut u8);
}

/// A return area of the canonical ABI (aligned for u32 fields).
#[repr(C, align(8))]
struct RetArea([u8; 24]);

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

/// The host's `option<u32>` answer for `request-adapter`.
fn request_adapter_index(_id: u64) -> Option<u32> {
    #[cfg(target_arch = "wasm32")]
    {
        let mut ret = RetArea([0; 24]);
        // SAFETY: the host writes an option<u32> (8 bytes) at `ret`.
        unsafe { lora_request_adapter(_id as i64, ret.0.as_mut_ptr()) };
        (ret.0[0] != 0).then(|| u32_at(&ret.0, 4))
    }
    #[cfg(not(target_arch = "wasm32"))]
    None
}

/// The adapter of `req`, or `None` for a base-model request (and in a run
/// without `[lora]`, or outside a decision on `req`).
pub fn request_adapter(req: &RequestView<'_>) -> Option<Adapter> {
    adapter_info(request_adapter_index(req.id)?)
}

/// Adapter `index` of the run, if there is one (and a decision is on).
pub fn adapter(_cluster: &ClusterView<'_>, index: u32) -> Option<Adapter> {
    adapter_info(index)
}

fn adapter_info(_index: u32) -> Option<Adapter> {
    #[cfg(target_arch = "wasm32")]
    {
        let mut ret = RetArea([0; 24]);
        // SAFETY: the host writes an option<tuple<string, u32>> (16 bytes)
        // at `ret`; the string's bytes are ours (allocated through
        // cabi_realloc), read before the call returns.
        unsafe { lora_adapter(_index as i32, ret.0.as_mut_ptr()) };
        if ret.0[0] == 0 {
            return None;
        }
        let (ptr, len) = (u32_at(&ret.0, 4) as usize, u32_at(&ret.0, 8) as usize);
        // SAFETY: the host wrote `len` bytes of UTF-8 at `ptr`.
        let name = unsafe {
            String::from_utf8_lossy(core::slice::from_raw_parts(ptr as *const u8, len)).into_owned()
        };
        Some(Adapter {
            index: _index,
            rank: u32_at(&ret.0, 12),
            name,
        })
    }
    #[cfg(not(target_arch = "wasm32"))]
    None
}

/// Whether adapter `adapter` is resident, loading or absent on instance
/// `instance` (cluster index) now; [`Residency::Absent`] when the host has
/// no LoRA state to give.
pub fn residency(_cluster: &ClusterView<'_>, _instance: u32, _adapter: u32) -> Residency {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: a plain call.
    let code = unsafe { lora_residency(_instance as i32, _adapter as i32) };
    #[cfg(not(target_arch = "wasm32"))]
    let code = 0;
    match code {
        1 => Residency::Resident,
        2 => Residency::Loading,
        _ => Residency::Absent,
    }
}

/// The LoRA state of instance `instance` (cluster index), with its resident
/// adapters' indices, most recently used first, in `resident` (cleared
/// first). `None` when the host has no LoRA state to give.
pub fn instance_adapters(
    _cluster: &ClusterView<'_>,
    _instance: u32,
    resident: &mut Vec<u32>,
) -> Option<InstanceAdapters> {
    resident.clear();
    #[cfg(target_arch = "wasm32")]
    {
        let mut ret = RetArea([0; 24]);
        // SAFETY: the host writes an option<instance-adapters> (24 bytes)
        // at `ret`; the list is ours (cabi_realloc), read before returning.
        unsafe { lora_instance_adapters(_instance as i32, ret.0.as_mut_ptr()) };
        if ret.0[0] == 0 {
            return None;
        }
        let (ptr, len) = (u32_at(&ret.0, 8) as usize, u32_at(&ret.0, 12) as usize);
        // SAFETY: the host wrote `len` u32s at `ptr` (4-aligned).
        resident.extend_from_slice(unsafe { core::slice::from_raw_parts(ptr as *const u32, len) });
        Some(InstanceAdapters {
            capacity: u32_at(&ret.0, 4),
            resident: len as u32,
            loading: (ret.0[16] != 0).then(|| u32_at(&ret.0, 20)),
        })
    }
    #[cfg(not(target_arch = "wasm32"))]
    None
}

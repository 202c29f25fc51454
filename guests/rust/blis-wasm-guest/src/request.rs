//! The request being decided as a policy sees it (WIT 0.1.2's `request`
//! interface; the native `blis_plugin_api::session` and
//! `blis_plugin_api::headers`): its multi-turn session and the HTTP headers
//! its client sends. The host answers for the request it is deciding
//! (admission, routing, the P/D decider) and in the `observe` calls right
//! after; for any other request there is nothing.

use crate::views::RequestView;

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "blis:plugin/request@0.1.2")]
extern "C" {
    #[link_name = "session"]
    fn request_session_raw(request_id: i64, ret: *mut u8);
    #[link_name = "header"]
    fn request_header_raw(request_id: i64, name: *const u8, name_len: i32, ret: *mut u8);
}

/// A return area of the canonical ABI (aligned for u64 fields).
#[cfg(target_arch = "wasm32")]
#[repr(C, align(8))]
struct RetArea([u8; 16]);

#[cfg(target_arch = "wasm32")]
fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

/// The session of `req`: every round of one conversation of the workload
/// shares it. `None` for a request outside a session (and outside a
/// decision on `req`).
pub fn request_session(_req: &RequestView<'_>) -> Option<u64> {
    #[cfg(target_arch = "wasm32")]
    {
        let mut ret = RetArea([0; 16]);
        // SAFETY: the host writes an option<u64> (16 bytes: the case at 0,
        // the value at 8) at `ret`.
        unsafe { request_session_raw(_req.id as i64, ret.0.as_mut_ptr()) };
        if ret.0[0] == 0 {
            return None;
        }
        let mut v = [0u8; 8];
        v.copy_from_slice(&ret.0[8..16]);
        Some(u64::from_le_bytes(v))
    }
    #[cfg(not(target_arch = "wasm32"))]
    None
}

/// The value of header `name` (any case) that `req`'s client sends, or
/// `None` when it sends none (and outside a decision on `req`).
pub fn request_header(_req: &RequestView<'_>, _name: &str) -> Option<String> {
    #[cfg(target_arch = "wasm32")]
    {
        let mut ret = RetArea([0; 16]);
        // SAFETY: the host reads `name` during the call and writes an
        // option<string> (12 bytes) at `ret`; the string's bytes are ours
        // (allocated through cabi_realloc), read before the call returns.
        unsafe {
            request_header_raw(
                _req.id as i64,
                _name.as_ptr(),
                _name.len() as i32,
                ret.0.as_mut_ptr(),
            )
        };
        if ret.0[0] == 0 {
            return None;
        }
        let (ptr, len) = (u32_at(&ret.0, 4) as usize, u32_at(&ret.0, 8) as usize);
        // SAFETY: the host wrote `len` bytes of UTF-8 at `ptr`.
        let value = unsafe {
            String::from_utf8_lossy(core::slice::from_raw_parts(ptr as *const u8, len)).into_owned()
        };
        Some(value)
    }
    #[cfg(not(target_arch = "wasm32"))]
    None
}

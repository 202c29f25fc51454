//! The hot calls' arguments lowered without copies: `admit`, `route`,
//! `score` and `observe` take (request, cluster view), and at every routing
//! decision each scorer gets both — 64 instance snapshots and the prompt's
//! block hashes — once to score and once more to observe. The generic
//! lowering of the bindings writes a `list<instance-snapshot>` field by
//! field (most of a wasm scorer's time in `e-64x1m-weighted`); here the
//! request and the view borrow the host's own values, and the snapshots go
//! into the guest's memory as one copy, because `InstanceSnapshot`'s
//! `#[repr(C)]` layout (with its explicit `reserved` word) is the canonical
//! ABI's layout of the WIT record, byte for byte on a little-endian host.
//! The functions are type-checked against the component once, when the
//! policy is created.

use std::mem::MaybeUninit;

use blis_plugin_api::{ClusterView, InstanceSnapshot, RequestView};
use wasmtime::component::__internal::{
    CanonicalAbiInfo, InstanceType, InterfaceType, LowerContext,
};
use wasmtime::component::{ComponentType, Func, Instance, Lower, TypedFunc};
use wasmtime::{AsContextMut, Result};

/// The WIT record `instance-snapshot` field by field: its type check and
/// its element-wise lowering (the fallback of [`Snap`]).
#[derive(ComponentType, Lower, Clone, Copy)]
#[component(record)]
pub(super) struct SnapRecord {
    #[component(name = "queue-depth")]
    queue_depth: u32,
    #[component(name = "batch-size")]
    batch_size: u32,
    #[component(name = "pending-requests")]
    pending_requests: u32,
    #[component(name = "kv-utilization")]
    kv_utilization: f64,
    #[component(name = "free-kv-blocks")]
    free_kv_blocks: u64,
    #[component(name = "cache-hit-rate")]
    cache_hit_rate: f64,
}

/// A host snapshot as the WIT `instance-snapshot`.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub(super) struct Snap(InstanceSnapshot);

// The canonical ABI lays `instance-snapshot` out as u32 @0, u32 @4, u32 @8,
// f64 @16, u64 @24, f64 @32 (size 40, align 8): `InstanceSnapshot`'s layout.
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<InstanceSnapshot>() == 40 && align_of::<InstanceSnapshot>() == 8);
    assert!(offset_of!(InstanceSnapshot, queue_depth) == 0);
    assert!(offset_of!(InstanceSnapshot, batch_size) == 4);
    assert!(offset_of!(InstanceSnapshot, pending_requests) == 8);
    assert!(offset_of!(InstanceSnapshot, kv_utilization) == 16);
    assert!(offset_of!(InstanceSnapshot, free_kv_blocks) == 24);
    assert!(offset_of!(InstanceSnapshot, cache_hit_rate) == 32);
    assert!(<SnapRecord as ComponentType>::SIZE32 == 40);
    assert!(<SnapRecord as ComponentType>::ALIGN32 == 8);
};

impl Snap {
    fn slice(s: &[InstanceSnapshot]) -> &[Snap] {
        // SAFETY: `Snap` is `repr(transparent)` over `InstanceSnapshot`.
        unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<Snap>(), s.len()) }
    }

    fn record(&self) -> SnapRecord {
        let s = &self.0;
        SnapRecord {
            queue_depth: s.queue_depth,
            batch_size: s.batch_size,
            pending_requests: s.pending_requests,
            kv_utilization: s.kv_utilization,
            free_kv_blocks: s.free_kv_blocks,
            cache_hit_rate: s.cache_hit_rate,
        }
    }
}

// SAFETY: every item delegates to `SnapRecord`, the derived implementation
// of the same WIT record.
unsafe impl ComponentType for Snap {
    type Lower = <SnapRecord as ComponentType>::Lower;
    const ABI: CanonicalAbiInfo = <SnapRecord as ComponentType>::ABI;
    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> Result<()> {
        <SnapRecord as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: `lower` and `store` delegate to `SnapRecord`; `store_list` writes
// the bytes `SnapRecord::store` would write (same layout, checked above;
// the `reserved` word fills the record's padding) into the range the
// caller allocated and bounds-checked.
unsafe impl Lower for Snap {
    fn lower<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        ty: InterfaceType,
        dst: &mut MaybeUninit<Self::Lower>,
    ) -> Result<()> {
        self.record().lower(cx, ty, dst)
    }

    fn store<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        ty: InterfaceType,
        offset: usize,
    ) -> Result<()> {
        self.record().store(cx, ty, offset)
    }

    fn store_list<T>(
        cx: &mut LowerContext<'_, T>,
        ty: InterfaceType,
        offset: usize,
        items: &[Self],
    ) -> Result<()> {
        if cfg!(target_endian = "little") {
            let n = std::mem::size_of_val(items);
            // SAFETY: `items` is `n` initialised bytes (no padding: see
            // `reserved`).
            let bytes = unsafe { std::slice::from_raw_parts(items.as_ptr().cast::<u8>(), n) };
            cx.as_slice_mut()[offset..][..n].copy_from_slice(bytes);
            Ok(())
        } else {
            let mut at = offset;
            for item in items {
                item.store(cx, ty, at)?;
                at += Self::SIZE32;
            }
            Ok(())
        }
    }
}

/// The WIT `request-view`, borrowing the host's.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(super) struct Req<'a> {
    id: u64,
    #[component(name = "arrival-us")]
    arrival_us: i64,
    #[component(name = "input-tokens")]
    input_tokens: u32,
    #[component(name = "slo-class")]
    slo_class: u8,
    tenant: &'a str,
    #[component(name = "block-hashes")]
    block_hashes: &'a [u64],
}

impl<'a> Req<'a> {
    pub(super) fn of<'b: 'a>(r: &'a RequestView<'b>) -> Req<'a> {
        Req {
            id: r.id,
            arrival_us: r.arrival_us,
            input_tokens: r.input_tokens,
            slo_class: r.slo_class.0,
            tenant: r.tenant.as_str(),
            block_hashes: r.block_hashes.as_slice(),
        }
    }
}

/// The WIT `cluster-view`, borrowing the host's snapshots.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(super) struct View<'a> {
    #[component(name = "clock-us")]
    clock_us: i64,
    instances: &'a [Snap],
}

impl<'a> View<'a> {
    pub(super) fn of<'b: 'a>(c: &'a ClusterView<'b>) -> View<'a> {
        View {
            clock_us: c.clock_us,
            instances: Snap::slice(c.instances()),
        }
    }
}

type ScoreArgs<'a> = (u32, Req<'a>, View<'a>);
type ObserveArgs<'a> = (u32, Req<'a>, View<'a>, u32);

/// The four (request, view) functions of a component's `policy` export,
/// type-checked.
#[derive(Clone, Copy)]
pub(super) struct ViewCalls {
    admit: Func,
    route: Func,
    score: Func,
    observe: Func,
}

impl ViewCalls {
    /// Look the functions up in `instance` and check their types.
    pub(super) fn new(mut store: impl AsContextMut, instance: &Instance) -> Result<ViewCalls> {
        let mut store = store.as_context_mut();
        let iface = instance
            .get_export_index(&mut store, None, super::POLICY_INTERFACE)
            .ok_or_else(|| {
                wasmtime::Error::msg(format!("no export {}", super::POLICY_INTERFACE))
            })?;
        let mut func = |name: &str| {
            instance
                .get_export_index(&mut store, Some(&iface), name)
                .and_then(|i| instance.get_func(&mut store, i))
                .ok_or_else(|| {
                    wasmtime::Error::msg(format!("no function {name} in the policy export"))
                })
        };
        let calls = ViewCalls {
            admit: func("admit")?,
            route: func("route")?,
            score: func("score")?,
            observe: func("observe")?,
        };
        calls.admit.typed::<ScoreArgs<'static>, (bool,)>(&store)?;
        calls.route.typed::<ScoreArgs<'static>, (u32,)>(&store)?;
        calls
            .score
            .typed::<ScoreArgs<'static>, (Vec<f64>,)>(&store)?;
        calls.observe.typed::<ObserveArgs<'static>, ()>(&store)?;
        Ok(calls)
    }

    /// `admit(handle, request, view)`.
    pub(super) fn admit<T>(
        &self,
        store: &mut wasmtime::Store<T>,
        args: ScoreArgs<'_>,
    ) -> Result<bool> {
        // SAFETY: type-checked in `new` (the same types up to lifetimes).
        let f = unsafe { TypedFunc::<ScoreArgs<'_>, (bool,)>::new_unchecked(self.admit) };
        let (r,) = f.call(&mut *store, args)?;
        f.post_return(store)?;
        Ok(r)
    }

    /// `route(handle, request, view)`.
    pub(super) fn route<T>(
        &self,
        store: &mut wasmtime::Store<T>,
        args: ScoreArgs<'_>,
    ) -> Result<u32> {
        // SAFETY: type-checked in `new`.
        let f = unsafe { TypedFunc::<ScoreArgs<'_>, (u32,)>::new_unchecked(self.route) };
        let (r,) = f.call(&mut *store, args)?;
        f.post_return(store)?;
        Ok(r)
    }

    /// `score(handle, request, view)`, appended to `out`.
    pub(super) fn score<T>(
        &self,
        store: &mut wasmtime::Store<T>,
        args: ScoreArgs<'_>,
        out: &mut abi_stable::std_types::RVec<f64>,
    ) -> Result<()> {
        // SAFETY: type-checked in `new`.
        let f = unsafe { TypedFunc::<ScoreArgs<'_>, (Vec<f64>,)>::new_unchecked(self.score) };
        let (r,) = f.call(&mut *store, args)?;
        f.post_return(store)?;
        out.extend_from_slice(&r);
        Ok(())
    }

    /// `observe(handle, request, view, chosen)`.
    pub(super) fn observe<T>(
        &self,
        store: &mut wasmtime::Store<T>,
        args: ObserveArgs<'_>,
    ) -> Result<()> {
        // SAFETY: type-checked in `new`.
        let f = unsafe { TypedFunc::<ObserveArgs<'_>, ()>::new_unchecked(self.observe) };
        f.call(&mut *store, args)?;
        f.post_return(store)
    }
}

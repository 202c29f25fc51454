//! # blis-wasm-guest — blis policies as WebAssembly components
//!
//! The same author traits as `blis-plugin-api` ([`PolicyDef`] plus one
//! trait per kind), for a `cdylib` built for `wasm32-unknown-unknown` and
//! turned into a component of the world `blis:plugin@0.1.2`
//! (`wit/blis-plugin.wit` in the blis repository). List the policies with
//! [`export_plugin!`] at the crate root:
//!
//! ```ignore
//! blis_wasm_guest::export_plugin! {
//!     library: "my-policies",
//!     version: "0.1.0",
//!     scorers: [MyScorer],
//!     filters: [MyFilter],
//! }
//! ```
//!
//! Build (any Rust ≥ 1.63 with the wasm32-unknown-unknown standard library;
//! on Debian: `apt-get install rustc libstd-rust-dev-wasm32 lld`):
//!
//! ```text
//! cargo build --release --target wasm32-unknown-unknown
//! wasm-tools component embed WIT --world plugin target/…/x.wasm -o x.embed.wasm
//! wasm-tools component new x.embed.wasm -o x.wasm
//! ```
//!
//! A panic traps the component; the host names the policy, the call and
//! the request, with the panic's message. The module imports nothing but
//! the world's `host` interface (and `lora` when a policy asks about LoRA
//! adapters, [`lora`]; `request` when it asks about the session or headers
//! of the request being decided, [`request`]): no files, clock,
//! environment or entropy.

mod author;
pub mod lora;
pub mod request;
mod params;
mod rng;
#[doc(hidden)]
pub mod rt;
mod views;

pub use author::{
    Admission, Autoscaler, Decider, Filter, Hooks, Kept, Observer, Picker, PolicyDef, Preemption,
    Router, Scheduler, Scorer, Scores,
};
#[doc(hidden)]
pub use author::{
    AdmissionAdapter, AutoscalerAdapter, DeciderAdapter, Dyn, FilterAdapter, ObserverAdapter,
    PickerAdapter, PreemptionAdapter, RouterAdapter, SchedulerAdapter, ScorerAdapter,
};
pub use params::{Params, Value};
pub use rng::Rng;
pub use rt::{log, reason};
pub use views::{
    ClusterState, ClusterView, EventKind, InstanceInfo, InstanceSnapshot, InstanceState, PdView,
    RequestEvent, RequestView, RunSummary, RunningRequest, SloClass,
};

/// Kind codes (the native ABI's `KindCode`).
pub mod kind {
    pub const ADMISSION: u8 = 0;
    pub const ROUTER: u8 = 1;
    pub const SCORER: u8 = 2;
    pub const FILTER: u8 = 3;
    pub const PICKER: u8 = 4;
    pub const SCHEDULER: u8 = 5;
    pub const PREEMPTION: u8 = 6;
    pub const DECIDER: u8 = 7;
    pub const AUTOSCALER: u8 = 8;
    pub const OBSERVER: u8 = 9;
}

#[doc(hidden)]
#[macro_export]
macro_rules! __blis_code {
    (admission) => {
        $crate::kind::ADMISSION
    };
    (routers) => {
        $crate::kind::ROUTER
    };
    (scorers) => {
        $crate::kind::SCORER
    };
    (filters) => {
        $crate::kind::FILTER
    };
    (pickers) => {
        $crate::kind::PICKER
    };
    (schedulers) => {
        $crate::kind::SCHEDULER
    };
    (preemption) => {
        $crate::kind::PREEMPTION
    };
    (deciders) => {
        $crate::kind::DECIDER
    };
    (autoscalers) => {
        $crate::kind::AUTOSCALER
    };
    (observers) => {
        $crate::kind::OBSERVER
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __blis_wrap {
    (admission, $p:expr) => {
        $crate::AdmissionAdapter($p)
    };
    (routers, $p:expr) => {
        $crate::RouterAdapter($p)
    };
    (scorers, $p:expr) => {
        $crate::ScorerAdapter($p)
    };
    (filters, $p:expr) => {
        $crate::FilterAdapter($p)
    };
    (pickers, $p:expr) => {
        $crate::PickerAdapter($p)
    };
    (schedulers, $p:expr) => {
        $crate::SchedulerAdapter($p)
    };
    (preemption, $p:expr) => {
        $crate::PreemptionAdapter($p)
    };
    (deciders, $p:expr) => {
        $crate::DeciderAdapter($p)
    };
    (autoscalers, $p:expr) => {
        $crate::AutoscalerAdapter($p)
    };
    (observers, $p:expr) => {
        $crate::ObserverAdapter($p)
    };
}

/// Export the library's policies as the component's `policy` interface.
///
/// Sections (each optional, in any order): `admission`, `routers`,
/// `scorers`, `filters`, `pickers`, `schedulers`, `preemption`, `deciders`,
/// `autoscalers`, `observers`, each a list of types implementing that
/// kind's trait.
#[macro_export]
macro_rules! export_plugin {
    (library: $lib:expr, version: $ver:expr, $( $kind:ident : [ $($ty:ty),* $(,)? ] ),* $(,)?) => {
        fn __blis_policies() -> ::std::vec::Vec<$crate::rt::PolicyInfo> {
            let mut v = ::std::vec::Vec::new();
            $( $( v.push($crate::rt::info::<$ty>($crate::__blis_code!($kind))); )* )*
            v
        }

        #[allow(unused_variables)]
        fn __blis_create(
            kind: u8,
            name: &str,
            params: $crate::Params,
            seed: u64,
        ) -> ::core::option::Option<::core::result::Result<::std::boxed::Box<dyn $crate::Dyn>, ::std::string::String>> {
            $( $(
                if kind == $crate::__blis_code!($kind) && name == <$ty as $crate::PolicyDef>::NAME {
                    return ::core::option::Option::Some(
                        <$ty as $crate::PolicyDef>::create(params, seed).map(|p| {
                            let b: ::std::boxed::Box<dyn $crate::Dyn> =
                                ::std::boxed::Box::new($crate::__blis_wrap!($kind, p));
                            b
                        }),
                    );
                }
            )* )*
            ::core::option::Option::None
        }

        static __BLIS_LIBRARY: $crate::rt::Library = $crate::rt::Library {
            name: $lib,
            version: $ver,
            policies: __blis_policies,
            create: __blis_create,
        };

        const _: () = {
            #[export_name = "cabi_realloc"]
            extern "C" fn __blis_cabi_realloc(old: *mut u8, old_size: usize, align: usize, new_size: usize) -> *mut u8 {
                $crate::rt::realloc(old, old_size, align, new_size)
            }
            #[export_name = "blis:plugin/policy@0.1.2#describe"]
            extern "C" fn __blis_describe() -> *const u8 {
                $crate::rt::describe(&__BLIS_LIBRARY)
            }
            #[export_name = "blis:plugin/policy@0.1.2#create"]
            extern "C" fn __blis_create_export(kind: i32, np: i32, nl: i32, pp: i32, pl: i32, seed: i64) -> *const u8 {
                $crate::rt::create(&__BLIS_LIBRARY, kind, np, nl, pp, pl, seed)
            }
            #[export_name = "blis:plugin/policy@0.1.2#admit"]
            extern "C" fn __blis_admit(handle: i32, id: i64, arrival: i64, input: i32, slo: i32, tenant_ptr: i32, tenant_len: i32, hashes_ptr: i32, hashes_len: i32, clock: i64, instances_ptr: i32, instances_len: i32) -> i32 {
                $crate::rt::admit($crate::rt::Flat { handle, id, arrival, input, slo, tenant_ptr, tenant_len, hashes_ptr, hashes_len, clock, instances_ptr, instances_len })
            }
            #[export_name = "blis:plugin/policy@0.1.2#route"]
            extern "C" fn __blis_route(handle: i32, id: i64, arrival: i64, input: i32, slo: i32, tenant_ptr: i32, tenant_len: i32, hashes_ptr: i32, hashes_len: i32, clock: i64, instances_ptr: i32, instances_len: i32) -> i32 {
                $crate::rt::route($crate::rt::Flat { handle, id, arrival, input, slo, tenant_ptr, tenant_len, hashes_ptr, hashes_len, clock, instances_ptr, instances_len })
            }
            #[export_name = "blis:plugin/policy@0.1.2#score"]
            extern "C" fn __blis_score(handle: i32, id: i64, arrival: i64, input: i32, slo: i32, tenant_ptr: i32, tenant_len: i32, hashes_ptr: i32, hashes_len: i32, clock: i64, instances_ptr: i32, instances_len: i32) -> *const u8 {
                $crate::rt::score($crate::rt::Flat { handle, id, arrival, input, slo, tenant_ptr, tenant_len, hashes_ptr, hashes_len, clock, instances_ptr, instances_len })
            }
            #[export_name = "blis:plugin/policy@0.1.2#observe"]
            extern "C" fn __blis_observe(handle: i32, id: i64, arrival: i64, input: i32, slo: i32, tenant_ptr: i32, tenant_len: i32, hashes_ptr: i32, hashes_len: i32, clock: i64, instances_ptr: i32, instances_len: i32, chosen: i32) {
                $crate::rt::observe($crate::rt::Flat { handle, id, arrival, input, slo, tenant_ptr, tenant_len, hashes_ptr, hashes_len, clock, instances_ptr, instances_len }, chosen)
            }
            #[export_name = "blis:plugin/policy@0.1.2#score-candidates"]
            extern "C" fn __blis_score_candidates(args: i32) -> *const u8 {
                $crate::rt::score_candidates(args)
            }
            #[export_name = "blis:plugin/policy@0.1.2#filter"]
            extern "C" fn __blis_filter(args: i32) -> *const u8 {
                $crate::rt::filter(args)
            }
            #[export_name = "blis:plugin/policy@0.1.2#pick"]
            extern "C" fn __blis_pick(args: i32) -> i32 {
                $crate::rt::pick(args)
            }
            #[export_name = "blis:plugin/policy@0.1.2#on-event"]
            extern "C" fn __blis_on_event(args: i32) {
                $crate::rt::on_event(args)
            }
            #[export_name = "blis:plugin/policy@0.1.2#take-reason"]
            extern "C" fn __blis_take_reason(handle: i32) -> *const u8 {
                $crate::rt::take_reason(handle)
            }
            #[export_name = "blis:plugin/policy@0.1.2#key"]
            extern "C" fn __blis_key(handle: i32, id: i64, arrival: i64, input: i32, slo: i32, tenant_ptr: i32, tenant_len: i32, hashes_ptr: i32, hashes_len: i32) -> i64 {
                $crate::rt::key(handle, id, arrival, input, slo, tenant_ptr, tenant_len, hashes_ptr, hashes_len)
            }
            #[export_name = "blis:plugin/policy@0.1.2#victim"]
            extern "C" fn __blis_victim(handle: i32, ptr: i32, len: i32) -> i32 {
                $crate::rt::victim(handle, ptr, len)
            }
            #[export_name = "blis:plugin/policy@0.1.2#autoscale"]
            extern "C" fn __blis_autoscale(handle: i32, clock: i64, ip: i32, il: i32, cp: i32, cl: i32, fp: i32, fl: i32, pp: i32, pl: i32) -> i32 {
                $crate::rt::autoscale(handle, clock, ip, il, cp, cl, fp, fl, pp, pl)
            }
            #[export_name = "blis:plugin/policy@0.1.2#disaggregate"]
            extern "C" fn __blis_disaggregate(args: i32) -> i32 {
                $crate::rt::disaggregate(args)
            }
        };
    };
}

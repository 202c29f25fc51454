//! Tests of the instance engine: exact hand-computed timelines, the KV cache
//! on its own, its CPU tier, bad input, and property tests of the invariants over random
//! workloads. They drive the instance through a small event loop over the
//! real [`EventQueue`], as the cluster does.

mod harness;
mod kv_cache;
mod kv_offload;
mod lora;
mod props;
mod timeline;

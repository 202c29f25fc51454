//! Presents this crate's types to abi_stable under the ABI's compatibility
//! line, so plugins built against every earlier 0.x minor keep loading.
//!
//! abi_stable records `CARGO_PKG_VERSION` in the layout of every type and in
//! the root module's version strings, and (cargo semver) treats a 0.x minor
//! bump as incompatible. The blis plugin ABI only ever *adds* within a
//! compatibility line, so the version abi_stable sees is
//! `0.<line>.<ABI minor>`: ABI 0.1 was `0.1.0`, ABI 0.2 is `0.1.2`. A
//! breaking ABI change starts a new line (`0.2.0`), which abi_stable then
//! refuses for every older plugin, as it should. The crate's own version
//! (Cargo.toml) is the ABI version people read: 0.2.0.
//!
//! Keep `ABI_LINE_VERSION` in step with `ABI_VERSION` in `src/abi.rs`
//! (a unit test checks it).

const ABI_LINE_VERSION: &str = "0.1.2";

fn main() {
    println!("cargo:rustc-env=CARGO_PKG_VERSION={ABI_LINE_VERSION}");
    println!("cargo:rustc-env=BLIS_ABI_LINE_VERSION={ABI_LINE_VERSION}");
    // Set only by tests/fixtures/plugin-api-before-decider,
    // plugin-api-before-observer and plugin-api-before-host, which compile
    // this crate's source as ABI 0.2 was before the decider kind, the
    // observer kind and the host's query table.
    println!("cargo:rustc-check-cfg=cfg(blis_abi_before_decider)");
    println!("cargo:rustc-check-cfg=cfg(blis_abi_before_observer)");
    println!("cargo:rustc-check-cfg=cfg(blis_abi_before_host)");
    println!("cargo:rerun-if-changed=build.rs");
}

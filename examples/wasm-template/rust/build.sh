#!/usr/bin/env bash
# Build this crate into the WebAssembly component my-blis-plugin.wasm (beside
# this file), which any `blis` loads: `blis plugins list --plugin
# my-blis-plugin.wasm`.
#
#   ./build.sh
#
# Needs a rustc with the wasm32-unknown-unknown standard library — rustup's
# (`rustup target add wasm32-unknown-unknown`) or Debian's (`apt-get install
# rustc cargo libstd-rust-dev-wasm32 lld`: /usr/bin/rustc and /usr/bin/cargo,
# used when present) — and wasm-tools (`cargo install wasm-tools --locked`).
# It is the two steps of any component: `cargo build --release --target
# wasm32-unknown-unknown` (a core module), then `wasm-tools component embed`
# (the WIT world, wit/blis-plugin.wit) and `wasm-tools component new`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
name="my-blis-plugin"
lib="my_blis_plugin"

if [ -x /usr/bin/rustc ] && [ -x /usr/bin/cargo ] && [ -d /usr/lib/rustlib/wasm32-unknown-unknown ]; then
    # Debian's cargo with Debian's rustc (a newer cargo may pass flags an
    # older rustc does not know).
    rustc=/usr/bin/rustc
    cargo=/usr/bin/cargo
elif grep -q '^wasm32-unknown-unknown$' <<<"$(rustup target list --installed 2>/dev/null)"; then
    rustc="$(rustup which rustc)"
    cargo="$(command -v cargo)"
else
    echo "build.sh: no rustc with the wasm32-unknown-unknown standard library: rustup target add wasm32-unknown-unknown, or (Debian) apt-get install rustc cargo libstd-rust-dev-wasm32 lld" >&2
    exit 1
fi
if ! command -v wasm-tools >/dev/null 2>&1; then
    echo "build.sh: wasm-tools is not installed: cargo install wasm-tools --locked" >&2
    exit 1
fi

target="${CARGO_TARGET_DIR:-$here/target}"
# The crate has no dependency beyond blis-wasm-guest (a path): no network.
RUSTC="$rustc" CARGO_TARGET_DIR="$target" "$cargo" build --quiet --release --target wasm32-unknown-unknown
wasm-tools component embed wit/blis-plugin.wit --world plugin \
    "$target/wasm32-unknown-unknown/release/$lib.wasm" -o "$target/$name.core.wasm"
wasm-tools component new "$target/$name.core.wasm" -o "$name.wasm"
echo "built $here/$name.wasm"

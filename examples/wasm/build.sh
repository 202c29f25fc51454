#!/usr/bin/env bash
# Build the WebAssembly components of examples/wasm into OUT_DIR (default
# examples/wasm/out): the Rust one (rust/ → wasm-example.wasm) and the
# Python one (python/app.py → wasm-example-py.wasm).
#
# Needs, for Rust: a rustc that targets wasm32-unknown-unknown (rustup's
# target, or Debian's: apt-get install rustc cargo libstd-rust-dev-wasm32
# lld — /usr/bin/rustc and /usr/bin/cargo, used when present) and wasm-tools (cargo install
# wasm-tools); for Python: componentize-py (pip install componentize-py;
# COMPONENTIZE_PY names it when it is not on PATH). A language whose tools
# are missing is skipped with a message; `--require` makes that an error.
# `--tests` also builds the test components of tests/tests/wasm.rs
# (tests/fixtures/wasm-faulty and wasm-faulty-py).
#
#   examples/wasm/build.sh [--require] [--tests] [OUT_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
require=0
tests=0
while [ $# -gt 0 ]; do
    case "$1" in
    --require) require=1; shift ;;
    --tests) tests=1; shift ;;
    *) break ;;
    esac
done
out="$(mkdir -p "${1:-$here/out}" && cd "${1:-$here/out}" && pwd)"
wit="$root/wit/blis-plugin.wit"

missing() {
    echo "build.sh: $1" >&2
    if [ "$require" = 1 ]; then exit 1; fi
}

# rust_component CRATE_DIR NAME: cargo build for wasm32, then embed + new.
rust_component() {
    local crate="$1" name="$2" rustc cargo
    if [ -x /usr/bin/rustc ] && [ -x /usr/bin/cargo ] && grep -q '^wasm32-unknown-unknown$' <<<"$(/usr/bin/rustc --print target-list 2>/dev/null)" &&
        [ -d /usr/lib/rustlib/wasm32-unknown-unknown ]; then
        # Debian's cargo with Debian's rustc (a newer cargo passes flags rustc
        # 1.63 does not know).
        rustc=/usr/bin/rustc
        cargo=/usr/bin/cargo
    elif grep -q '^wasm32-unknown-unknown$' <<<"$(rustup target list --installed 2>/dev/null)"; then
        rustc=$(rustup which rustc)
        cargo=$(command -v cargo)
    else
        missing "skipped $name: no rustc with the wasm32-unknown-unknown standard library (apt-get install rustc libstd-rust-dev-wasm32 lld, or rustup target add wasm32-unknown-unknown)"
        return 0
    fi
    if ! command -v wasm-tools >/dev/null 2>&1; then
        missing "skipped $name: wasm-tools is not installed (cargo install wasm-tools --locked)"
        return 0
    fi
    local target="$out/target"
    # The guest crates have no dependencies beyond blis-wasm-guest (a path),
    # so this builds offline. RUSTC picks the wasm-capable compiler.
    RUSTC="$rustc" CARGO_TARGET_DIR="$target" "$cargo" build --quiet --release \
        --target wasm32-unknown-unknown --manifest-path "$crate/Cargo.toml"
    local core
    core="$target/wasm32-unknown-unknown/release/$(sed -n 's/^name = "\(.*\)"/\1/p;T;q' "$crate/Cargo.toml" | tr - _).wasm"
    wasm-tools component embed "$wit" --world plugin "$core" -o "$out/$name.core.wasm"
    wasm-tools component new "$out/$name.core.wasm" -o "$out/$name.wasm"
    rm -f "$out/$name.core.wasm"
    echo "built $out/$name.wasm"
}

# python_component APP_DIR MODULE NAME: componentize-py.
python_component() {
    local dir="$1" module="$2" name="$3" cpy="${COMPONENTIZE_PY:-componentize-py}"
    if ! command -v "$cpy" >/dev/null 2>&1; then
        missing "skipped $name: componentize-py is not installed (pip install componentize-py)"
        return 0
    fi
    (cd "$dir" && "$cpy" -d "$wit" -w plugin componentize "$module" \
        -p . -p "$root/guests/python" -o "$out/$name.wasm" >/dev/null)
    echo "built $out/$name.wasm"
}

rust_component "$here/rust" wasm-example
python_component "$here/python" app wasm-example-py
if [ "$tests" = 1 ]; then
    rust_component "$root/tests/fixtures/wasm-faulty" wasm-faulty
    python_component "$root/tests/fixtures/wasm-faulty-py" app wasm-faulty-py
fi

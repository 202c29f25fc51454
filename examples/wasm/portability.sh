#!/usr/bin/env bash
# Portability check of issue 31: the same .wasm files, loaded with no
# rebuild by two blis binaries built by different toolchains (e.g. stable
# and nightly), give byte-identical reports. Build the components first
# (examples/wasm/build.sh OUT_DIR), and a second blis, e.g.
#   CARGO_TARGET_DIR=/tmp/nightly-target cargo +nightly build -p blis-host --bin blis
#
#   examples/wasm/portability.sh BLIS_A BLIS_B OUT_DIR
#
# Each binary compiles the components itself (BLIS_WASM_CACHE=off). Prints
# one line per run file and exits 1 if any pair of reports differs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ $# -ne 3 ]; then
    echo "usage: $0 BLIS_A BLIS_B OUT_DIR" >&2
    exit 2
fi
a="$1" b="$2" out="$(cd "$3" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0
for name in rust python; do
    # The run files name out/…: point them at OUT_DIR.
    sed "s#\"out/#\"$out/#" "$here/$name.toml" >"$work/$name.toml"
    for bin in a b; do
        BLIS_WASM_CACHE=off "${!bin}" run "$work/$name.toml" >"$work/$name.$bin.json" 2>"$work/$name.$bin.err" || {
            echo "$name.toml: ${!bin} failed:" >&2
            cat "$work/$name.$bin.err" >&2
            exit 1
        }
    done
    if cmp -s "$work/$name.a.json" "$work/$name.b.json"; then
        echo "$name.toml: identical reports ($(wc -c <"$work/$name.a.json") bytes, $(sha256sum "$work/$name.a.json" | cut -c1-16))"
    else
        echo "$name.toml: the reports differ"
        status=1
    fi
done
exit $status

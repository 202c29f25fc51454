#!/usr/bin/env bash
# Build app.py into the WebAssembly component my-blis-plugin.wasm (beside
# this file), which any `blis` loads: `blis plugins list --plugin
# my-blis-plugin.wasm`.
#
#   ./build.sh
#
# Needs componentize-py (`pip install componentize-py`; COMPONENTIZE_PY
# names it when it is not on PATH). It runs one command:
#   componentize-py -d wit/blis-plugin.wit -w plugin componentize app -p . -o my-blis-plugin.wasm
# (the component embeds CPython: about 40 MB, built in about a minute).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
cpy="${COMPONENTIZE_PY:-componentize-py}"
if ! command -v "$cpy" >/dev/null 2>&1; then
    echo "build.sh: componentize-py is not installed: pip install componentize-py (or set COMPONENTIZE_PY)" >&2
    exit 1
fi
"$cpy" -d wit/blis-plugin.wit -w plugin componentize app -p . -o my-blis-plugin.wasm >/dev/null
echo "built $here/my-blis-plugin.wasm"

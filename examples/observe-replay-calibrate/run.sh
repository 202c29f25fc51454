#!/usr/bin/env bash
# observe → replay → calibrate (README "Validating blis against your own
# cluster"). Against $URL (an OpenAI-compatible server serving $MODEL), or,
# without URL, against llama.cpp's server of tests/llama, installed and
# started here on 127.0.0.1 and stopped at the end. Outputs in $OUT (out/).
set -euo pipefail
cd "$(dirname "$0")"
blis="${BLIS:-../../target/release/blis}"
out="${OUT:-out}"
mkdir -p "$out"
if [ -z "${URL:-}" ]; then
    venv=$(../../tests/llama/install.sh)
    read -r URL pid < <(../../tests/llama/serve.sh "$venv" "$out/llama")
    trap 'kill "$pid" 2>/dev/null || true' EXIT
fi
"$blis" observe llama-cpp.toml --server-url "$URL" --model "${MODEL:-tiny}" \
    --record-itl --warmup-requests 4 --quiet \
    --trace-header "$out/observed.yaml" --trace-data "$out/observed.csv" >"$out/observe-summary.json"
"$blis" replay llama-cpp.toml --trace-header "$out/observed.yaml" --trace-data "$out/observed.csv" \
    --results-path "$out/sim-results.json" --metrics-path "$out/sim-metrics.json" --quiet >"$out/replay-report.json"
"$blis" calibrate --trace-header "$out/observed.yaml" --trace-data "$out/observed.csv" \
    --sim-results "$out/sim-results.json" --itl-data "$out/observed.itl.csv" \
    --report "$out/calibration.json"
cat "$out/calibration.json"

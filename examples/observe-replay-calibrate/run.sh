#!/usr/bin/env bash
# observe → replay → calibrate (README "Validating blis against your own
# cluster"), then `calibrate fit` on the trace. Against $URL (an OpenAI-compatible server serving $MODEL), or,
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
# Fit the step-time model and the server's per-request overheads (alpha[0]
# before the first token, alpha[2] per token: 0 in the run file, so named
# with their ranges) to the observed trace, 2 folds by request: the
# profile's [error] gives, per metric, the error uncalibrated (start), fitted
# (train) and on requests each fold's fit did not see (held out); the
# trace_*_mean_ms rows are the means of each fold's requests.
"$blis" calibrate fit --trace "llama-cpp.toml=$out/observed.yaml,$out/observed.csv" --holdout 2 \
    --fit 'alpha[0],alpha[2],beta[0],beta[1]' --bounds 'alpha[0]=100:100000' --bounds 'alpha[2]=1:10000' \
    --out "$out/profile.toml" --quiet >"$out/fit-summary.json"
sed -n '/^\[error/,/^\[fit\]/p' "$out/profile.toml" | grep -v '^\[fit\]'
sed -n '/^\[coefficients\]/,/^$/p' "$out/profile.toml"

#!/bin/bash
# Render the HTML reports of examples/weighted-routing.toml and of the example
# sweep (policies-vs-rate.toml), and screenshot both with headless Chromium
# (Debian: apt-get install chromium). Output in $OUT (default: a temp dir):
# run-report.html/.png, sweep-report.html/.png.
#
#   examples/sweeps/screenshot-reports.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
BLIS=${BLIS:-$root/target/release/blis}
OUT=${OUT:-$(mktemp -d)}
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser)}
mkdir -p "$OUT/run"
cd "$OUT"
"$BLIS" run "$root/examples/weighted-routing.toml" \
    --results-path run/results.jsonl --trace-path run/trace.jsonl \
    --timeseries-path run/timeseries.jsonl > run/report.json
"$BLIS" report run -o run-report.html
"$BLIS" sweep "$root/examples/sweeps/policies-vs-rate.toml" --out sweep --quiet
"$BLIS" report sweep -o sweep-report.html --e2e-slo-ms 9000
shot() {
    "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$(mktemp -d)" --hide-scrollbars --window-size=1200,"$2" \
        --screenshot="$OUT/$1.png" "file://$OUT/$1.html" 2>/dev/null
    echo "$OUT/$1.png"
}
shot run-report 2600
shot sweep-report 1900

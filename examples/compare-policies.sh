#!/usr/bin/env bash
# Run several routing policies on one workload and print a small table.
# Usage: examples/compare-policies.sh [RUN_FILE] [BLIS]
# (defaults: examples/weighted-routing.toml and target/release/blis; needs jq)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
run_file="${1:-$here/weighted-routing.toml}"
blis="${2:-$here/../target/release/blis}"
[ -x "$blis" ] || { echo "build blis first: cargo build --release -p blis-host" >&2; exit 2; }
command -v jq >/dev/null || { echo "this script needs jq" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf '%-16s %12s %12s %14s %12s\n' policy ttft_p99_ms e2e_p99_ms tokens_per_s mean_regret
for policy in round-robin least-loaded prefix-affinity weighted; do
  "$blis" run "$run_file" --routing-policy "$policy" --trace-path "$tmp/trace.jsonl" --quiet \
      2>/dev/null > "$tmp/report.json"
  jq -r --arg p "$policy" '.cluster | [$p, (.ttft_p99_ms|tostring), (.e2e_p99_ms|tostring),
      (.tokens_per_sec|tostring), (.mean_regret|tostring)] | @tsv' "$tmp/report.json" |
    awk -F'\t' '{ printf "%-16s %12.2f %12.2f %14.1f %12.4f\n", $1, $2, $3, $4, $5 }'
done

#!/usr/bin/env bash
# Run several routing policies on one workload and print a small table:
# TTFT p99, E2E p99, throughput and mean counterfactual regret.
# Usage: examples/compare-policies.sh [RUN_FILE] [BLIS]
# (defaults: examples/weighted-routing.toml, and target/release/blis if it
# was built, else the blis on PATH). It writes only into a temporary folder.
# Needs only bash, grep, sed and awk: the report's cluster block comes first,
# one field per line, so the first match of a field is the cluster's.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
run_file="${1:-$here/weighted-routing.toml}"
blis="${2:-$here/../target/release/blis}"
if [ -z "${2:-}" ] && [ ! -x "$blis" ]; then blis="$(command -v blis || true)"; fi
[ -n "$blis" ] && [ -x "$blis" ] || {
  echo "build blis first: cargo build --release -p blis-host (or cargo install --path host)" >&2
  exit 2
}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
field() { grep -m1 "\"$1\":" "$tmp/report.json" | sed -e 's/.*: *//' -e 's/,$//'; }
printf '%-16s %12s %12s %14s %12s\n' policy ttft_p99_ms e2e_p99_ms tokens_per_s mean_regret
for policy in round-robin least-loaded prefix-affinity weighted; do
  "$blis" run "$run_file" --routing-policy "$policy" --trace-path "$tmp/trace.jsonl" --quiet \
      2>"$tmp/stderr" > "$tmp/report.json" || { cat "$tmp/stderr" >&2; exit 1; }
  printf '%s\t%s\t%s\t%s\t%s\n' "$policy" "$(field ttft_p99_ms)" "$(field e2e_p99_ms)" \
      "$(field tokens_per_sec)" "$(field mean_regret)" |
    awk -F'\t' '{ printf "%-16s %12.2f %12.2f %14.1f %12.4f\n", $1, $2, $3, $4, $5 }'
done

#!/usr/bin/env bash
# Three of the EndpointPickerConfig files the llm-d Router ships, unchanged
# (tests/data/llm-d-router-configs/), and blis's round-robin for scale, each
# run against examples/llm-d/workload.toml with `--epp-config`. Prints one
# row per configuration: TTFT mean / p99, E2E mean / p99, the prefix-cache
# hit rate, the requests rejected at admission, and the spread of completed
# requests over the 8 instances; then the notes blis printed for each file.
#
#   examples/llm-d/run.sh [BLIS]          (default: target/release/blis)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
configs="$here/../../tests/data/llm-d-router-configs"
blis="${1:-$here/../../target/release/blis}"
[ -x "$blis" ] || { echo "build blis first: cargo build --release -p blis-host" >&2; exit 2; }
command -v jq >/dev/null || { echo "run.sh needs jq" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf '%-40s %9s %9s %9s %9s %8s %8s %s\n' configuration "TTFT ms" "p99" "E2E ms" "p99" "KV hit" rejected "requests per instance (min–max)"
row() {
  jq -r --arg n "$1" '[$n, .cluster.ttft_mean_ms, .cluster.ttft_p99_ms, .cluster.e2e_mean_ms,
      .cluster.e2e_p99_ms, .cluster.kv_cache_hit_rate, .cluster.rejected_requests,
      ([.instances[].completed_requests] | "\(min)–\(max)")]
    | "\(.[0]|tostring) \(.[1]) \(.[2]) \(.[3]) \(.[4]) \(.[5]) \(.[6]) \(.[7])"' "$2" |
    awk '{ printf "%-40s %9.1f %9.1f %9.1f %9.1f %8.3f %8d %s\n", $1, $2, $3, $4, $5, $6, $7, $8 }'
}
"$blis" run "$here/workload.toml" --quiet --routing-policy round-robin >"$tmp/rr.json" 2>"$tmp/rr.err"
row "blis-round-robin" "$tmp/rr.json"
files="epp-config.yaml epp-precise-prefix-cache-config.yaml soft-reflective-ceiling-epp-config.yaml"
for f in $files; do
  "$blis" run "$here/workload.toml" --epp-config "$configs/$f" >"$tmp/$f.json" 2>"$tmp/$f.err"
  row "$f" "$tmp/$f.json"
done
echo
for f in $files; do
  echo "== notes for $f"
  grep -v '^simulated ' "$tmp/$f.err" || true
done

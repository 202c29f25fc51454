#!/usr/bin/env bash
# Run every golden experiment of the reference simulator (examples/sim-to-real/<id>.toml) with
# trained-physics and with roofline, and print blis's predictions next to the reference's golden
# values (golden.tsv): TTFT, E2E and ITL (mean, p90, p99; the reference records no ITL
# percentiles), with the relative difference of each mean.
#
#   examples/sim-to-real/run.sh [BLIS]          (default: target/release/blis)
#
# A `*` after the id marks an experiment the reference ran with a CPU KV tier (cpu_kv_blocks > 0);
# blis runs it with the same CPU tier ([instance.kv_offload]). For roofline, the KV
# settings (GPU and CPU blocks) are the roofline golden file's (it differs from the trained-physics file for 3
# experiments). Needs only bash, grep, sed and awk. Prints the total wall time at the end.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
blis="${1:-$here/../../target/release/blis}"
[ -x "$blis" ] || { echo "build blis first: cargo build --release -p blis-host" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
jobs="${BLIS_JOBS:-$(nproc 2>/dev/null || echo 2)}"
start=$(date +%s.%N)
# The 30 runs, JOBS at a time (default: one per core), each into its own
# report; then one table in golden.tsv's order.
rows=$(grep -v '^#' "$here/golden.tsv" | tail -n +2)
i=0
while IFS=$'\t' read -r id model kv cpu rest; do
  i=$((i + 1))
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  ( "$blis" run "$here/$id.toml" --quiet --set "model.latency_model=\"$model\"" \
      --set "instance.total_kv_blocks=$kv" --set "instance.kv_offload.cpu_blocks=$cpu" \
      2>"$tmp/$i.stderr" >"$tmp/$i.json" || { cat "$tmp/$i.stderr" >&2; touch "$tmp/$i.failed"; } ) &
done <<<"$rows"
wait
if ls "$tmp"/*.failed >/dev/null 2>&1; then exit 1; fi
printf '%-17s %-15s | %-23s %-8s %-8s | %-25s %-9s %-9s | %-21s %-6s %-6s\n' \
  experiment latency_model "TTFT mean blis/ref/Δ%" p90 p99 "E2E mean blis/ref/Δ%" p90 p99 \
  "ITL mean blis/ref/Δ%" p90 p99
i=0
while IFS=$'\t' read -r id model kv cpu completed tm t90 t99 em e90 e99 im; do
  i=$((i + 1))
  mark=""
  [ "$cpu" != 0 ] && mark="*"
  # The report's first value of each field (the cluster-wide one), in one pass.
  awk -v id="$id$mark" -v model="$model" -v tm="$tm" -v em="$em" -v im="$im" -v completed="$completed" '
    function d(b, r) { return r == 0 ? 0 : 100 * (b - r) / r }
    {
      if (match($0, /"[a-z0-9_]+":/)) {
        k = substr($0, RSTART + 1, RLENGTH - 3)
        if (!(k in v)) { x = substr($0, RSTART + RLENGTH); sub(/^ */, "", x); sub(/,$/, "", x); v[k] = x }
      }
    }
    END {
      printf "%-17s %-15s | %7.2f/%7.2f/%+6.1f %8.2f %8.2f | %8.1f/%8.1f/%+6.1f %9.1f %9.1f | %6.2f/%6.2f/%+6.1f %6.2f %6.2f%s\n",
        id, model, v["ttft_mean_ms"], tm, d(v["ttft_mean_ms"], tm), v["ttft_p90_ms"], v["ttft_p99_ms"],
        v["e2e_mean_ms"], em, d(v["e2e_mean_ms"], em), v["e2e_p90_ms"], v["e2e_p99_ms"],
        v["itl_mean_ms"], im, d(v["itl_mean_ms"], im), v["itl_p90_ms"], v["itl_p99_ms"],
        (v["completed_requests"] == completed ? "" : sprintf("  (completed %s of %s)", v["completed_requests"], completed))
    }' "$tmp/$i.json"
done <<<"$rows"
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" -v j="$jobs" 'BEGIN { printf "total wall time: %.1f s (30 runs, %d at a time)\n", e - s, j }'

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
field() { grep -m1 "\"$1\":" "$tmp/report.json" | sed -e 's/.*: *//' -e 's/,$//'; }
start=$(date +%s.%N)
printf '%-17s %-15s | %-23s %-8s %-8s | %-25s %-9s %-9s | %-21s %-6s %-6s\n' \
  experiment latency_model "TTFT mean blis/ref/Δ%" p90 p99 "E2E mean blis/ref/Δ%" p90 p99 \
  "ITL mean blis/ref/Δ%" p90 p99
grep -v '^#' "$here/golden.tsv" | tail -n +2 |
  while IFS=$'\t' read -r id model kv cpu completed tm t90 t99 em e90 e99 im; do
    "$blis" run "$here/$id.toml" --quiet --set "model.latency_model=\"$model\"" \
      --set "instance.total_kv_blocks=$kv" --set "instance.kv_offload.cpu_blocks=$cpu" 2>"$tmp/stderr" >"$tmp/report.json" ||
      { cat "$tmp/stderr" >&2; exit 1; }
    mark=""
    [ "$cpu" != 0 ] && mark="*"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
      "$id$mark" "$model" "$(field ttft_mean_ms)" "$tm" "$(field ttft_p90_ms)" "$t90" \
      "$(field ttft_p99_ms)" "$t99" "$(field e2e_mean_ms)" "$em" "$(field e2e_p90_ms)" "$e90" \
      "$(field e2e_p99_ms)" "$e99" "$(field itl_mean_ms)" "$im" "$(field itl_p90_ms)" \
      "$(field itl_p99_ms)" "$(field completed_requests)" "$completed" |
      awk -F'\t' 'function d(b, r) { return r == 0 ? 0 : 100 * (b - r) / r }
        { printf "%-17s %-15s | %7.2f/%7.2f/%+6.1f %8.2f %8.2f | %8.1f/%8.1f/%+6.1f %9.1f %9.1f | %6.2f/%6.2f/%+6.1f %6.2f %6.2f%s\n",
            $1, $2, $3, $4, d($3, $4), $5, $7, $9, $10, d($9, $10), $11, $13, $15, $16, d($15, $16),
            $17, $18, ($19 == $20 ? "" : sprintf("  (completed %s of %s)", $19, $20)) }'
  done
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" 'BEGIN { printf "total wall time: %.1f s (30 runs)\n", e - s }'

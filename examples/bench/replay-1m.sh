#!/usr/bin/env bash
# Issue 27 speed check (a benchmark, not a test): replaying a 1M-row TraceV2
# trace against `blis run` of the same workload. Exports the trace of
# SCENARIO (default: s-8x1m-short-sketch.toml, 1,000,000 requests) with
# `--trace-output`, then times, RUNS times each, alternating:
#   run     blis run SCENARIO
#   replay  blis replay --trace-header T.yaml --trace-data T.csv SCENARIO
# and prints the median wall seconds of both and their ratio (target ≤ 1.5).
#
#   examples/bench/replay-1m.sh [-n RUNS] [-b BLIS] [SCENARIO]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
runs=3
blis=${CARGO_TARGET_DIR:-$here/../../target}/release/blis
while getopts "n:b:" o; do
    case $o in
    n) runs=$OPTARG ;;
    b) blis=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
scenario=${1:-$here/s-8x1m-short-sketch.toml}
[ -x "$blis" ] || {
    echo "no blis binary at $blis (cargo build --release -p blis-host, or -b PATH)" >&2
    exit 2
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$blis" run "$scenario" --quiet --trace-output "$work/t" >/dev/null 2>&1
rows=$(($(wc -l <"$work/t.csv") - 1))
now() { date +%s.%N; }
run_t=()
rep_t=()
for _ in $(seq "$runs"); do
    s=$(now)
    "$blis" run "$scenario" --quiet >"$work/run.json" 2>/dev/null
    run_t+=("$(echo "$(now) - $s" | bc)")
    s=$(now)
    "$blis" replay --trace-header "$work/t.yaml" --trace-data "$work/t.csv" "$scenario" \
        --horizon 100000000000000 --quiet >"$work/rep.json" 2>/dev/null
    rep_t+=("$(echo "$(now) - $s" | bc)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
r=$(median "${run_t[@]}")
p=$(median "${rep_t[@]}")
printf 'rows %d  run %.2f s  replay %.2f s  ratio %.2f  (runs: %s | %s)\n' \
    "$rows" "$r" "$p" "$(echo "$p / $r" | bc -l)" "${run_t[*]}" "${rep_t[*]}"

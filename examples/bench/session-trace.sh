#!/usr/bin/env bash
# Issue 33 defect 22 (a benchmark, not a test): memory of one long session
# replayed from a CSV trace. ROUNDS rows (default 20,000) of one session,
# 1 ms apart, round k with 5 + 8k input tokens (the previous round's prompt,
# its 3 output tokens and 5 new ones), so every round carries the whole
# context before it; 2 instances of qwen3-14b on H100. Prints the peak RSS
# and wall time of `blis run`. Before prompts shared the session's context
# (host/src/prompt.rs) memory was quadratic in the rounds in flight.
#
#   examples/bench/session-trace.sh [-b BLIS] [ROUNDS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
blis=${CARGO_TARGET_DIR:-$here/../../target}/release/blis
while getopts "b:" o; do
    case $o in
    b) blis=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
rounds=${1:-20000}
[ -x "$blis" ] || {
    echo "no blis binary at $blis (cargo build --release -p blis-host, or -b PATH)" >&2
    exit 2
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk -v n="$rounds" 'BEGIN { print "arrival_us,input_tokens,output_tokens,session_id";
    for (k = 0; k < n; k++) printf "%d,%d,3,s\n", k * 1000, 5 + 8 * k }' >"$tmp/t.csv"
cat >"$tmp/run.toml" <<TOML
seed = 1
[model]
name = "qwen3-14b"
hardware = "H100"
[instance]
count = 2
[workload]
trace = "t.csv"
TOML
/usr/bin/time -f "%M %e" -o "$tmp/time" "$blis" run "$tmp/run.toml" --quiet \
    >"$tmp/report.json" 2>"$tmp/stderr" || { cat "$tmp/stderr" >&2; exit 1; }
read -r rss wall <"$tmp/time"
printf '%d rounds of one session: peak RSS %d MiB, wall %s s, %s requests injected\n' \
    "$rounds" $((rss / 1024)) "$wall" "$(jq .cluster.injected_requests "$tmp/report.json")"

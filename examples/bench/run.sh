#!/usr/bin/env bash
# Whole-run benchmark: runs each scenario N times with /usr/bin/time -v on
# the release `blis` and prints one table row per scenario: median wall
# time, simulated requests per wall second, events per wall second (from the
# summary `blis run` prints on stderr), median peak RSS, and the machine load
# when the scenario started.
#
#   examples/bench/run.sh [-n RUNS] [-b BLIS] [SCENARIO...]
#
# SCENARIO is a run file (examples/bench/*.toml by default) optionally
# followed by `:` and extra `blis run` flags, e.g.
#   examples/bench/run.sh -n 5 examples/bench/d-16x100k-kvgpu.toml
#   examples/bench/run.sh "examples/bench/d-16x100k-kvgpu.toml:--num-requests 1000000"
#   examples/bench/run.sh linearity      # the 100k / 1M / 10M table
#
# BLIS defaults to $CARGO_TARGET_DIR/release/blis (target/release/blis);
# build it first with `cargo build --release -p blis-host`.
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
[ -x "$blis" ] || {
    echo "no blis binary at $blis (cargo build --release -p blis-host, or -b PATH)" >&2
    exit 2
}
if [ $# -eq 0 ]; then
    set -- "$here"/[a-fh]-*.toml
elif [ "$1" = linearity ]; then
    s="$here/d-16x100k-kvgpu.toml"
    set -- "$s:--num-requests 100000" "$s:--num-requests 1000000" "$s:--num-requests 10000000"
fi

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf "%-44s %4s %9s %12s %12s %9s  %s\n" scenario runs "wall s" "sim req/s" "events/s" "peak MiB" "load (1-min avg at start)"
for spec in "$@"; do
    file=${spec%%:*}
    extra=""
    [ "$file" != "$spec" ] && extra=${spec#*:}
    name=$(basename "$file" .toml)
    [ -n "$extra" ] && name="$name $extra"
    load=$(cut -d' ' -f1 /proc/loadavg)
    : >"$tmp/wall"
    : >"$tmp/rss"
    : >"$tmp/req"
    : >"$tmp/ev"
    for _ in $(seq "$runs"); do
        # shellcheck disable=SC2086
        /usr/bin/time -v -o "$tmp/time" "$blis" run "$file" --quiet $extra >"$tmp/out" 2>"$tmp/err" || {
            echo "$name: blis failed:" >&2
            cat "$tmp/err" >&2
            continue
        }
        awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,t,":"); s=0; for(i=1;i<=n;i++) s=s*60+t[i]; print s}' "$tmp/time" >>"$tmp/wall"
        awk -F': ' '/Maximum resident set size/ {print $2/1024}' "$tmp/time" >>"$tmp/rss"
        # "simulated R requests, ... E events in W s wall (X events/s)"
        sed -n 's/^simulated \([0-9]*\) requests, .* \([0-9]*\) events in \([0-9.]*\) s wall.*/\1 \2 \3/p' "$tmp/err" |
            awk '{print $1/$3 >> "'"$tmp/req"'"; print $2/$3 >> "'"$tmp/ev"'"}'
    done
    printf "%-44s %4s %9.3f %12.0f %12.0f %9.1f  %s\n" "$name" "$(wc -l <"$tmp/wall")" \
        "$(median <"$tmp/wall")" "$(median <"$tmp/req")" "$(median <"$tmp/ev")" "$(median <"$tmp/rss")" "$load"
done

#!/usr/bin/env bash
# Byte-identical check of two blis binaries: runs every golden scenario
# (examples/bench/golden/*.toml) and small versions of the bench scenarios
# with several seeds, and compares stdout (the report), the per-request
# results file and the decision trace.
#
#   examples/bench/golden.sh OLD_BLIS NEW_BLIS [SEEDS]      (SEEDS default "1 2 3 4 5")
#
# Exit status 0 when everything is identical.
#
# A change that adds report or trace fields on purpose is compared with an
# older binary by removing the new fields from both sides first (jq filters;
# the rest is still compared value for value):
#   GOLDEN_DROP_REPORT='del(.cluster.rejected_by)' \
#   GOLDEN_DROP_TRACE='del(.candidates[]?.scorer_scores)' golden.sh OLD NEW
set -u
old=$1
new=$2
seeds=${3:-1 2 3 4 5}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
runs=0
drop() { # file jq-filter: apply the filter to every JSON line of the file
    [ -n "$2" ] && [ -s "$1" ] || return 0
    jq -c "$2" "$1" >"$1.dropped" 2>/dev/null && mv "$1.dropped" "$1"
}
check() { # name args...
    local name=$1
    shift
    for s in $seeds; do
        for who in old new; do
            local bin=$old
            [ "$who" = new ] && bin=$new
            "$bin" run "$@" --seed "$s" --quiet \
                --results-path "$tmp/$who.results" --trace-path "$tmp/$who.trace" \
                >"$tmp/$who.out" 2>"$tmp/$who.err" || echo "exit $?" >>"$tmp/$who.out"
        done
        runs=$((runs + 1))
        for who in old new; do
            drop "$tmp/$who.out" "${GOLDEN_DROP_REPORT:-}"
            drop "$tmp/$who.trace" "${GOLDEN_DROP_TRACE:-}"
        done
        for f in out results trace; do
            if ! cmp -s "$tmp/old.$f" "$tmp/new.$f"; then
                echo "DIFF $name seed $s: $f"
                fail=1
            fi
        done
    done
}
for f in "$here"/golden/*.toml; do
    check "$(basename "$f")" "$f"
done
check a-4x500 "$here/a-4x500.toml"
check c-16x3k-kv1m "$here/c-16x20k-kv1m.toml" --num-requests 3000
check c-16x3k-kvgpu "$here/c-16x20k-kvgpu.toml" --num-requests 3000
check f-multiturn-5k "$here/f-multiturn-prefix.toml" --num-requests 5000
check e-64x4k "$here/e-64x1m-weighted.toml" --num-requests 4000
check h-sessions-20k "$here/h-16x400k-sessions.toml" --num-requests 20000
check c-horizon "$here/c-16x20k-kv1m.toml" --num-requests 3000 --horizon 20000000
echo "$runs runs compared: $([ $fail = 0 ] && echo identical || echo DIFFERENCES)"
exit $fail

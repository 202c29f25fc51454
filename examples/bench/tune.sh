#!/usr/bin/env bash
# `blis tune` speed (issue 49, must-show 4): llm-d's default profile
# (examples/llm-d/default-profile.yaml) on the examples/llm-d workload scaled
# to 16 instances and 5,000 requests, its three scorer weights tuned with
# 200 candidates × 3 training seeds (a budget of 600 simulations), judged
# on 3 held-out seeds; timed on all cores.
#
#   examples/bench/tune.sh [BLIS] [JOBS]
#
# BLIS defaults to target/release/blis, JOBS to the number of CPUs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
blis=${1:-$here/../../target/release/blis}
jobs=${2:-$(nproc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/tune.toml" <<TOML
base = "$here/../llm-d/workload.toml"
epp_config = "$here/../llm-d/default-profile.yaml"
budget = 600
seed = 7
population = 10

[objective]
metric = "e2e_mean_ms"
constraints = ["rejected_fraction <= 0.01"]

[train]
seeds = [1, 2, 3]

[held_out]
seeds = [101, 102, 103]

[[param]]
key = "routing.scorers.0.weight"
name = "queue_weight"
min = 0.0
max = 10.0

[[param]]
key = "routing.scorers.1.weight"
name = "kv_weight"
min = 0.0
max = 10.0

[[param]]
key = "routing.scorers.2.weight"
name = "prefix_weight"
min = 0.0
max = 10.0

[set]
"instance.count" = 16
"workload.aggregate_rate" = 96.0
"workload.num_requests" = 5000
TOML
start=$(date +%s.%N)
"$blis" tune "$work/tune.toml" --out "$work/out" --jobs "$jobs" --quiet >"$work/summary.json" 2>"$work/stderr.txt"
end=$(date +%s.%N)
jq -c '{verdict: .verdict.gain, recommended, train, held_out, simulations}' "$work/summary.json"
candidates=$(jq '.search.candidates' "$work/out/tune.json")
echo "tune: $candidates candidates, $(jq '.simulations.distinct' "$work/out/tune.json") simulations in $(echo "$end - $start" | bc) s wall on $jobs jobs"

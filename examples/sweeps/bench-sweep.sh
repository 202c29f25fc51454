#!/bin/bash
# Sweep throughput figures (release build):
#  1. 200 short runs with --jobs 1 and with --jobs 2 (the speed-up);
#  2. 1,000 runs of the built-in default scenario (wall time, runs/s).
# Usage: examples/sweeps/bench-sweep.sh   (BLIS=path/to/blis to override)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
BLIS=${BLIS:-$root/target/release/blis}
work=$(mktemp -d)
cd "$work"

# 200 short runs: the default scenario with 100 requests, 200 seeds.
{ echo 'seeds = ['; seq -s, 1 200; echo ']'; echo '[set]'; echo '"workload.num_requests" = 100'; } > short.toml
for jobs in 1 2; do
    start=$(date +%s%N)
    "$BLIS" sweep short.toml --out "short-j$jobs" --jobs "$jobs" --quiet
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    echo "200 short runs, --jobs $jobs: $ms ms"
done
cmp short-j1/results.csv short-j2/results.csv && echo "results.csv identical for --jobs 1 and 2"

# 1,000 runs of the default scenario (1,000 requests each): 4 rates x 250 seeds.
{ echo 'seeds = ['; seq -s, 1 250; echo ']'; echo '[[axis]]'; echo 'key = "workload.aggregate_rate"';
  echo 'values = [20.0, 30.0, 40.0, 50.0]'; } > thousand.toml
start=$(date +%s%N)
"$BLIS" sweep thousand.toml --out thousand --quiet
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "1000 runs of the default scenario: $ms ms, $(awk -v ms="$ms" 'BEGIN { printf "%.1f", 1000000 / ms }') runs/s ($(nproc) CPUs)"
rm -rf "$work"

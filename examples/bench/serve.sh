#!/usr/bin/env bash
# `blis serve` at scale (issue 50, must-show 3): 16 instances, 1,000
# concurrent streams at --speed 1, on this machine. `blis observe` is the
# load generator (1,000 closed-loop users through the gateway, 6,000
# requests); the report's serve section gives the token delivery lateness,
# /proc gives the serve process's CPU time.
#
#   examples/bench/serve.sh [BLIS]      (BLIS defaults to target/release/blis)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
blis=${1:-$here/../../target/release/blis}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cat > run16.toml <<'TOML'
seed = 7
[model]
name = "qwen3-14b"
hardware = "H100"
[instance]
count = 16
[workload]
aggregate_rate = 200.0
num_requests = 6000
[[workload.clients]]
id = "c"
input = { type = "gaussian", mean = 512, std_dev = 128, min = 64, max = 1024 }
output = { type = "gaussian", mean = 256, std_dev = 64, min = 32, max = 512 }
[routing]
policy = "least-loaded"
TOML
"$blis" serve run16.toml --port 0 --gateway 0 --speed 1 > report.json 2> serve.err &
pid=$!
until grep -q "serve: ready" serve.err; do sleep 0.2; done
gateway=$(grep "serve: gateway at" serve.err | sed 's/.* at //')
"$blis" observe run16.toml --server-url "$gateway" --model qwen3-14b \
  --trace-header t.yaml --trace-data t.csv --concurrency 1000 --num-requests 6000 --quiet > observed.json
read -r utime stime < <(awk '{print $14, $15}' /proc/$pid/stat)
kill -INT $pid
wait $pid
hz=$(getconf CLK_TCK)
python3 - "$utime" "$stime" "$hz" <<'PY'
import json, sys
utime, stime, hz = (int(x) for x in sys.argv[1:])
r = json.load(open("report.json"))
s = r["serve"]
cpu = (utime + stime) / hz
print(f"tokens delivered {s['tokens_delivered']}, delivery lateness p50 {s['delivery_lateness_ms']['p50']} ms, "
      f"p99 {s['delivery_lateness_ms']['p99']} ms, max {s['delivery_lateness_ms']['max']} ms")
print(f"serve CPU {cpu:.1f} s ({utime / hz:.1f} user + {stime / hz:.1f} system): "
      f"{cpu / s['tokens_delivered'] * 1e6:.1f} µs per delivered token")
o = json.load(open("observed.json"))
print(f"observed: {o['ok']} ok; simulated TTFT mean {r['cluster']['ttft_mean_ms']:.1f} ms")
PY

#!/usr/bin/env bash
# blis observe's own CPU per request (issue 27, Must show 5: ≤ 100 µs):
# N requests to a trivial local endpoint (observe_fake_server.py: an
# immediate SSE stream of 8 token chunks, a finish chunk and a usage chunk),
# 8 closed-loop users, 512-token prompts; the CPU time (user + system,
# getrusage of the child) of the blis process divided by N. The server's
# CPU is not counted (another process). 127.0.0.1 only.
#
#   examples/bench/observe-cpu.sh [N]     (default 20000; BLIS=path/to/blis)
set -euo pipefail
cd "$(dirname "$0")/../.."
blis="${BLIS:-target/release/blis}"
n="${1:-20000}"
work=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 examples/bench/observe_fake_server.py "$port" 8 600 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
sleep 1
python3 - "$n" "$blis" "$port" "$work" <<'PY'
import json, resource, subprocess, sys, time
n, blis, port, work = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
t0 = time.time()
out = subprocess.run([blis, "observe", "--server-url", f"http://127.0.0.1:{port}", "--model", "m",
                      "--concurrency", "8", "--num-requests", str(n), "--prompt-tokens", "512",
                      "--output-tokens", "8", "--set", "workload.prompt_tokens_stdev=0",
                      "--set", "workload.output_tokens_stdev=0", "--record-itl", "--quiet",
                      "--trace-header", f"{work}/t.yaml", "--trace-data", f"{work}/t.csv"],
                     capture_output=True, text=True, check=True)
wall = time.time() - t0
r = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = r.ru_utime + r.ru_stime
s = json.loads(out.stdout)
print(f"requests {n}, ok {s['ok']}, wall {wall:.2f} s, blis CPU {cpu:.3f} s "
      f"(user {r.ru_utime:.3f}, sys {r.ru_stime:.3f}): {cpu / n * 1e6:.1f} µs per request")
PY

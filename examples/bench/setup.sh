#!/usr/bin/env bash
# Setup cost as the input grows (issue 53, item 13): each case at two
# sizes 10× apart, wall time and peak memory of `blis validate` / `run`,
# so a superlinear step shows as a ratio far above 10.
#
#   examples/bench/setup.sh [BLIS]
#
# Cases: [[lora.adapters]] behind the lora-affinity scorer; an llm-d config
# with N distinct scorers in one profile; N one-instance serve pools; a
# sweep grid of N runs of which one shard of one run is run.
# BLIS defaults to target/release/blis.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
blis=${1:-$here/../../target/release/blis}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

measure() { # label command…
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o t.txt "$@" >/dev/null 2>err.txt || { cat err.txt >&2; exit 1; }
  read -r s kb < t.txt
  printf '| %s | %s s | %d MB |\n' "$label" "$s" $((kb / 1024))
}

lora() { # n
  python3 - "$1" <<'PY'
import sys
n = int(sys.argv[1])
out = ['seed = 1', '[model]', 'name = "qwen3-14b"', 'hardware = "H100"', '[instance]', 'count = 4',
       '[workload]', 'aggregate_rate = 10.0', 'num_requests = 20', '[[workload.clients]]', 'id = "c"',
       'adapter = "a0"', 'input = { type = "constant", value = 64 }', 'output = { type = "constant", value = 8 }',
       '[routing]', 'policy = "weighted"', '[[routing.scorers]]', 'name = "lora-affinity"', 'weight = 1',
       '[lora]', 'adapter_capacity = 4']
for i in range(n):
    out += ['[[lora.adapters]]', f'id = "a{i}"', 'rank = 8']
open(f'lora{n}.toml', 'w').write('\n'.join(out) + '\n')
PY
}

epp() { # n
  python3 - "$1" <<'PY'
import sys
n = int(sys.argv[1])
out = ['apiVersion: llm-d.ai/v1alpha1', 'kind: EndpointPickerConfig', 'plugins:']
for i in range(n):
    out += [f'- name: q{i}', '  type: queue-scorer']
out += ['- type: max-score-picker', '- type: single-profile-handler', 'schedulingProfiles:',
        '- name: default', '  plugins:', '  - pluginRef: max-score-picker']
for i in range(n):
    out += [f'  - pluginRef: q{i}', '    weight: 1']
open(f'epp{n}.yaml', 'w').write('\n'.join(out) + '\n')
PY
}

pools() { # n
  python3 - "$1" <<'PY'
import sys
n = int(sys.argv[1])
out = ['seed = 1', '[model]', 'name = "qwen3-14b"', 'hardware = "H100"', '[workload]',
       'aggregate_rate = 10.0', 'num_requests = 20']
for i in range(n):
    out += ['[[pools]]', f'name = "p{i}"', 'role = "serve"', 'instances = 1']
open(f'pools{n}.toml', 'w').write('\n'.join(out) + '\n')
PY
}

grid() { # rates (× 400 request counts)
  cp "$here/../single-instance.toml" base.toml
  python3 - "$1" <<'PY'
import sys
n = int(sys.argv[1])
open(f'grid{n}.toml', 'w').write(f'''base = "base.toml"
[[axis]]
key = "workload.num_requests"
values = {list(range(1, 401))}
[[axis]]
key = "workload.aggregate_rate"
values = {[float(x) for x in range(1, n + 1)]}
''')
PY
}

echo "| case | wall | peak memory |"
echo "|---|---:|---:|"
for n in 10000 100000; do lora $n; measure "$n LoRA adapters, lora-affinity (validate)" "$blis" validate lora$n.toml; done
for n in 400 4000; do epp $n; measure "llm-d config, $n scorers (validate)" "$blis" validate "$here/../llm-d/workload.toml" --epp-config epp$n.yaml; done
for n in 800 8000; do pools $n; measure "$n one-instance serve pools (run)" "$blis" run pools$n.toml; done
for n in 80 800; do grid $n; measure "sweep of $((n * 400)) runs, a 1-run shard" "$blis" sweep grid$n.toml --out sw$n --shard 1/$((n * 400)) --quiet; done

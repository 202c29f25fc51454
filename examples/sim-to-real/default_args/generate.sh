#!/usr/bin/env bash
# Writes the run files of the 16 public inference-sim training experiments
# (inference-sim/training, default_args/, commit ed5c1d2) with
# `blis convert inference-perf`:
#
#   faithful/<experiment>.toml  the folder converted: what the client resolved
#                               and ran (results/config.yaml), with
#                               inference-perf 0.2.0's dispatch and metrics;
#   profile/<experiment>.toml   profile.yaml converted, with client =
#                               "reference": the workload the profile asked
#                               for, read the way the reference simulator
#                               reads it (multi-turn sessions, closed loop).
#
# Both get seed = 42 and, for a model blis does not bundle, config_path to
# the model's public config.json under models/. The converter's notes
# (where the run differed from the profile) go to faithful/<experiment>.notes.
set -euo pipefail
cd "$(dirname "$0")"
BLIS=${BLIS:-../../../target/release/blis}
mkdir -p faithful profile
for dir in 2026*/; do
  exp=${dir%/}
  model=$(sed -n 's/^model: *//p' "$exp/exp-config.yaml")
  config=""
  case "$model" in
    meta-llama/Llama-2-70b-hf) config=../models/Llama-2-70b-hf/config.json ;;
    codellama/CodeLlama-34b-Instruct-hf) config=../models/CodeLlama-34b-Instruct-hf/config.json ;;
    mistralai/Mixtral-8x7B-v0.1) config=../models/Mixtral-8x7B-v0.1/config.json ;;
  esac
  finish() { # seed, config_path
    { echo "seed = 42"; cat; } | if [ -n "$config" ]; then
      sed "s|^name = \(.*\)|name = \1\nconfig_path = \"$config\"|"
    else cat; fi
  }
  "$BLIS" convert inference-perf "$exp" 2> "faithful/$exp.notes" | finish > "faithful/$exp.toml"
  # The same deployment, with the profile's workload as the reference reads it.
  head=$(sed -n '/^\[workload\]/q;p' "faithful/$exp.toml")
  workload=$("$BLIS" convert inference-perf "$exp/profile.yaml" 2>/dev/null |
    sed 's/^client = .*/client = "reference"/; /^interval = /d; /^num_workers = /d; /^worker_max_concurrency = /d; /^request_timeout = /d')
  printf '%s\n%s\n' "$head" "$workload" |
    sed "s|^# The inference-perf run in .*|# The profile of the inference-perf run in $exp (profile.yaml), read as the reference simulator reads it.|" \
    > "profile/$exp.toml"
done
echo "wrote $(ls faithful/*.toml | wc -l) faithful and $(ls profile/*.toml | wc -l) profile run files" >&2

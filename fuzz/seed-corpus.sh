#!/usr/bin/env bash
# Fill fuzz/corpus/<target>/ with the seed inputs: every example and bench
# run file and trace from examples/, plus the hand-written seeds in
# fuzz/seeds/<target>/ (YAML workload specs, plugin params, odd CSV).
# libFuzzer adds what it finds to the same folders (git-ignored).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
ex=$here/../examples
for t in run_file csv_trace workload_spec plugin_params inference_perf epp_config; do
    mkdir -p "$here/corpus/$t"
    if [ -d "$here/seeds/$t" ]; then
        cp "$here/seeds/$t"/* "$here/corpus/$t/"
    fi
done
cp "$ex"/*.toml "$ex"/bench/*.toml "$ex"/bench/golden/*.toml "$here/corpus/run_file/"
cp "$ex"/*.csv "$here/corpus/csv_trace/"
# Plugin params as the examples write them: every [*.params] table.
for f in "$ex"/*.toml "$ex"/bench/*.toml; do
    awk '/^\[.*params\]/{p=1; next} /^\[/{p=0} p' "$f" >"$here/corpus/plugin_params/$(basename "$f" .toml).toml"
done
echo "corpus: $(for t in run_file csv_trace workload_spec plugin_params inference_perf epp_config; do printf '%s=%s ' $t "$(ls "$here/corpus/$t" | wc -l)"; done)"

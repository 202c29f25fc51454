#!/usr/bin/env bash
# Synthetic recovery for `blis calibrate fit` (issue 28, "must show" 1): the 15 trained-physics
# experiments of examples/sim-to-real/ run by blis itself with perturbed coefficients (every beta
# ×1.3, every alpha ×0.7: the "truth"), their mean TTFT, E2E and ITL given multiplicative Gaussian
# noise (σ = NOISE %, seeded), taken as measurements; then fitted from the defaults (the run files
# unchanged) with --holdout 5. Prints, per fitted coefficient, the truth, the fit, its 95 %
# interval and whether the truth is inside; and the held-out error against the noisy measurements.
#
#   examples/bench/fit-synthetic.sh [BLIS] [NOISE]   (default: target/release/blis, 0.5)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
s2r="$here/../sim-to-real"
blis="${1:-$here/../../target/release/blis}"
noise="${2:-0.5}"
[ -x "$blis" ] || { echo "build blis first: cargo build --release -p blis-host" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
alpha=(15563.199579 777.3455 45.907545)
beta=(0.152128 0.0 1.36252915 0.752037 32.09546717 4.41684444 126.024825 481.8613888 0.0 1.94710771 0.752037)
scaled() { # factor values… → "[v·factor, …]"
    local f=$1
    shift
    printf '%s\n' "$@" | awk -v f="$f" '{ v[NR] = $1 * f } END { printf "["; for (i = 1; i <= NR; i++) printf "%s%.10g", (i > 1 ? ", " : ""), v[i]; printf "]" }'
}
true_alpha=$(scaled 0.7 "${alpha[@]}")
true_beta=$(scaled 1.3 "${beta[@]}")
echo "run_file,metric,value" >"$tmp/m.csv"
ids=$(grep -v '^#' "$s2r/golden.tsv" | tail -n +2 | awk -F'\t' '$2 == "trained-physics" { print $1 }')
k=0
for id in $ids; do
    # The truth: the run file with the perturbed coefficients.
    sed -e "s/^latency_model = \"trained-physics\"$/latency_model = \"trained-physics\"\nalpha = $true_alpha\nbeta = $true_beta/" \
        "$s2r/$id.toml" >"$tmp/truth-$id.toml"
    "$blis" run "$tmp/truth-$id.toml" --quiet >"$tmp/truth-$id.json" 2>/dev/null
    k=$((k + 1))
    for m in ttft_mean_ms e2e_mean_ms itl_mean_ms; do
        v=$(jq -r ".cluster.$m" "$tmp/truth-$id.json")
        # Box–Muller with a seed per (experiment, metric): the same noise every run.
        awk -v v="$v" -v s="$noise" -v seed="$k$((${#m}))" -v id="$id" -v m="$m" 'BEGIN {
            srand(seed); u1 = rand(); u2 = rand(); if (u1 < 1e-12) u1 = 1e-12
            z = sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2)
            printf "%s.toml,%s,%.6f\n", id, m, v * (1 + s / 100 * z) }' >>"$tmp/m.csv"
    done
    cp "$s2r/$id.toml" "$tmp/$id.toml"
done
echo "== 15 experiments, truth beta x1.3 alpha x0.7, noise sigma $noise %; fit from the defaults, --holdout 5"
start=$(date +%s.%N)
"$blis" calibrate fit --measurements "$tmp/m.csv" --out "$tmp/profile.toml" --holdout 5 --seed 1 >"$tmp/summary.json"
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" 'BEGIN { printf "fit wall time: %.1f s\n", e - s }'
cat "$tmp/summary.json"
echo
sed -n '/^\[error\]/,/^\[fit\]/p' "$tmp/profile.toml"
echo "== each fitted coefficient: truth, fit, 95 % interval"
python3 - "$tmp/profile.toml" "$true_alpha" "$true_beta" <<'EOF'
import sys, tomllib, json
p = tomllib.load(open(sys.argv[1], "rb"))
truth = {"alpha": json.loads(sys.argv[2]), "beta": json.loads(sys.argv[3])}
inside = total = 0
for f in p.get("fitted", []):
    name = f["name"]
    vec, i = name.split("[")
    t = truth[vec][int(i.rstrip("]"))]
    lo, hi = f.get("interval_95", [float("nan"), float("nan")])
    ok = lo <= t <= hi
    ident = f.get("identifiable", True)
    total += 1
    inside += ok
    print(f"{name:9} truth {t:14.6g}  fit {f['value']:14.6g}  ({100 * (f['value'] - t) / t:+6.2f} %)  "
          f"95 % [{lo:.6g}, {hi:.6g}]  {'inside' if ok else 'OUTSIDE'}"
          + ("" if ident else f"  not identifiable: {f.get('note', '')}"))
print(f"truth inside its 95 % interval: {inside} of {total}")
EOF

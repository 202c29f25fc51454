#!/usr/bin/env bash
# Installs the real third parties that sit in front of `blis serve` in
# tests/tests/serve_third_party.rs (issue 50): nginx (Debian's nginx-light,
# for its least_conn upstream), Prometheus (Debian) and inference-perf (PyPI,
# pinned; it needs Python >= 3.12: pyenv's python3.12 where python3 is older)
# into a venv that later runs reuse: $BLIS_THIRD_PARTY_VENV, default
# ~/.cache/blis-ci/inference-perf-venv. Nothing is started here: each test
# starts what it needs on loopback and stops it.
# Prints four lines on stdout — `nginx PATH`, `prometheus PATH`,
# `inference-perf PATH`, `inference-perf-0.2.0 PATH` (a second venv, beside
# the first, for the client-model test) — for what is ready; a part that failed is left out
# (its tests then say they were skipped) and its error is on stderr.
set -uo pipefail
inference_perf_version=0.7.0
venv="${BLIS_THIRD_PARTY_VENV:-$HOME/.cache/blis-ci/inference-perf-venv}"

if ! command -v nginx >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light prometheus >/dev/null; } >&2 ||
        echo "apt-get install nginx-light prometheus failed" >&2
    # The packages start their services; the tests run their own.
    { systemctl stop nginx prometheus 2>/dev/null || service nginx stop 2>/dev/null || true; } >&2
    pkill -x nginx 2>/dev/null || true
    pkill -x prometheus 2>/dev/null || true
fi
nginx=$(command -v nginx || ls /usr/sbin/nginx 2>/dev/null || true)
[ -n "$nginx" ] && echo "nginx $nginx"
prometheus=$(command -v prometheus || true)
[ -n "$prometheus" ] && echo "prometheus $prometheus"

# A Python >= 3.12 (inference-perf needs it), or nothing.
find_python() {
    local c p
    for c in python3.13 python3.12 "$HOME/.pyenv/versions/3.12.1/bin/python3.12" python3; do
        if command -v "$c" >/dev/null 2>&1 &&
            "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
            echo "$c"
            return
        fi
    done
    for p in "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3; do
        [ -x "$p" ] && echo "$p" && return
    done
}

# inference-perf $1 into venv $2 (kept between runs); prints its program.
install_inference_perf() {
    local version=$1 venv=$2 py
    local stamp="$venv/.blis-inference-perf-$version"
    if ! { [ -f "$stamp" ] && [ -x "$venv/bin/inference-perf" ]; }; then
        py=$(find_python)
        if [ -z "$py" ]; then
            echo "no Python >= 3.12 for inference-perf (pyenv install 3.12)" >&2
            return
        fi
        rm -rf "$venv"
        { "$py" -m venv "$venv" &&
            timeout 900 "$venv/bin/pip" install -q --disable-pip-version-check \
                "inference-perf==$version" &&
            touch "$stamp"; } >&2 || echo "pip install inference-perf==$version failed" >&2
    fi
    [ -f "$stamp" ] && echo "$venv/bin/inference-perf"
}

exe=$(install_inference_perf "$inference_perf_version" "$venv")
[ -n "$exe" ] && echo "inference-perf $exe"
# The release nearest the one that drove the public inference-sim training
# runs (a build between 0.2.0 and 0.3.0), for the client-model test.
exe=$(install_inference_perf 0.2.0 "${venv%-venv}-0.2.0-venv")
[ -n "$exe" ] && echo "inference-perf-0.2.0 $exe"
exit 0

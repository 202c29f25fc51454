#!/usr/bin/env bash
# Installs the real third parties that sit in front of `blis serve` in
# tests/tests/serve_third_party.rs (issue 50): nginx (Debian's nginx-light,
# for its least_conn upstream), Prometheus (Debian) and inference-perf (PyPI,
# pinned; it needs Python >= 3.12: pyenv's python3.12 where python3 is older)
# into a venv that later runs reuse: $BLIS_THIRD_PARTY_VENV, default
# ~/.cache/blis-ci/inference-perf-venv. Nothing is started here: each test
# starts what it needs on loopback and stops it.
# Prints three lines on stdout — `nginx PATH`, `prometheus PATH`,
# `inference-perf PATH` — for what is ready; a part that failed is left out
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

stamp="$venv/.blis-inference-perf-$inference_perf_version"
if ! { [ -f "$stamp" ] && [ -x "$venv/bin/inference-perf" ]; }; then
    py=""
    for c in python3.13 python3.12 "$HOME/.pyenv/versions/3.12.1/bin/python3.12" python3; do
        if command -v "$c" >/dev/null 2>&1 &&
            "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
            py="$c"
            break
        fi
    done
    if [ -z "$py" ]; then
        for p in "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3; do
            [ -x "$p" ] && py="$p" && break
        done
    fi
    if [ -z "$py" ]; then
        echo "no Python >= 3.12 for inference-perf (pyenv install 3.12)" >&2
    else
        rm -rf "$venv"
        { "$py" -m venv "$venv" &&
            timeout 900 "$venv/bin/pip" install -q --disable-pip-version-check \
                "inference-perf==$inference_perf_version" &&
            touch "$stamp"; } >&2 || echo "pip install inference-perf failed" >&2
    fi
fi
[ -f "$stamp" ] && echo "inference-perf $venv/bin/inference-perf"
exit 0

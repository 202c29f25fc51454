#!/usr/bin/env bash
# Start llama.cpp's OpenAI-compatible server (llama-cpp-python[server]) on
# 127.0.0.1 with the tiny random-weight model of make_model.py, for the
# `blis observe` tests and the observe-replay-calibrate example.
#
#   tests/llama/serve.sh VENV WORKDIR   → prints "URL PID" once the server answers
#
# The model is written to WORKDIR/tiny.gguf and the server's log to
# WORKDIR/server.log; the port is a free one picked by the kernel. Gives up
# (exit 1, the log's tail on stderr) if the server does not answer in 60 s.
set -euo pipefail
venv="$1"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$work"
"$venv/bin/python" "$here/make_model.py" "$work/tiny.gguf"
port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$venv/bin/python" -m llama_cpp.server --model "$work/tiny.gguf" --model_alias tiny \
    --host 127.0.0.1 --port "$port" --n_ctx 4096 --interrupt_requests false >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 120); do
    if "$venv/bin/python" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/v1/models', timeout=1)" 2>/dev/null; then
        echo "http://127.0.0.1:$port $pid"
        exit 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        break
    fi
    sleep 0.5
done
tail -n 30 "$work/server.log" >&2
kill "$pid" 2>/dev/null || true
exit 1

#!/usr/bin/env bash
# Installs llama.cpp's OpenAI-compatible server (llama-cpp-python[server], which
# builds llama.cpp from source with CMake) and the gguf package into a venv that
# later runs reuse: $BLIS_LLAMA_VENV, default ~/.cache/blis-ci/llama-venv.
# Prints the venv's path on stdout when it is ready; exits non-zero otherwise.
set -euo pipefail
venv="${BLIS_LLAMA_VENV:-$HOME/.cache/blis-ci/llama-venv}"
stamp="$venv/.blis-llama-0.3.36"
if [ -f "$stamp" ] && "$venv/bin/python" -c 'import llama_cpp.server, gguf' 2>/dev/null; then
    echo "$venv"
    exit 0
fi
python3 -m venv "$venv" >&2
# A lean CPU build: no BLAS, no tests, examples, tools or curl.
export CMAKE_ARGS="-DGGML_BLAS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DGGML_OPENMP=OFF"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
"$venv/bin/pip" install -q --disable-pip-version-check \
    'llama-cpp-python[server]==0.3.36' 'gguf==0.19.0' >&2
"$venv/bin/python" -c 'import llama_cpp.server, gguf' >&2
touch "$stamp"
echo "$venv"

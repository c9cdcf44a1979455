#!/usr/bin/env bash
# Configures and builds into build/ (Release). The CUDA backend is compiled when nvcc is found on
# PATH or under /usr/local/cuda; otherwise the build is CPU only. Extra arguments are build
# targets (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
if [ ! -f build/build.ninja ]; then
  cmake --preset default >/dev/null
fi
jobs=$(nproc)
if [ $# -gt 0 ]; then
  cmake --build build -j"$jobs" --target "$@"
else
  cmake --build build -j"$jobs"
fi

#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest (unit, oracle,
# integration; GPU tests skip cleanly on a machine without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build.sh
# OpenMPI refuses to run as root without these; the integration tests launch mpirun.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
# The hardening and fuzz tests under ASan/UBSan (about 2.5 minutes on 2 cores; docs/TESTING.md).
# GPT_SKIP_SANITIZERS=1 leaves them out.
if [ "${GPT_SKIP_SANITIZERS:-0}" != 1 ]; then
  scripts/sanitizer_tests.sh
fi

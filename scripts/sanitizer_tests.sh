#!/usr/bin/env bash
# The hardening tests and the argument fuzz test (issue 16) under AddressSanitizer and
# UndefinedBehaviorSanitizer: the flags of CMakePresets.json's debug preset, CPU only, in
# build-asan/ (so build/ is untouched). About 2.5 minutes on 2 cores from scratch (docs/TESTING.md).
set -euo pipefail
cd "$(dirname "$0")/.."

# weight_grad_split_test: every layer kind, dropout and recompute mode forward and backward in a
# debug build, so the workspace borrows (model/workspace_borrow.h) are checked on the real holders.
tests=(strict_number_test data_validation_test hardening_test argument_fuzz_test weight_grad_split_test)
if [ ! -f build-asan/build.ninja ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DGPT_ENABLE_CUDA=OFF \
    "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-omit-frame-pointer" >/dev/null
fi
cmake --build build-asan -j"$(nproc)" --target "${tests[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
for t in "${tests[@]}"; do
  echo "sanitizers: $t"
  build-asan/bin/"$t" --gtest_brief=1
done

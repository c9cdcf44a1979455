#!/usr/bin/env bash
# Builds here with the CUDA backend for Hopper and packs everything a GPU session runs into .devrt/
# (gitignored): the GPU test binaries, pretrain_gpt, the benchmark scripts, and the shared
# libraries and OpenMPI runtime the GPU machine lacks (../shared/device/pack-runtime.sh), as one
# compressed archive.
# Then, in one device call (see scripts/device/README.md):
#   carry [".devrt"], command "bash .devrt/run.sh"
set -euo pipefail
cd "$(dirname "$0")/../.."
GPT_CUDA_ARCHITECTURES=${GPT_CUDA_ARCHITECTURES:-90a}
if ! command -v nvcc >/dev/null 2>&1; then export CUDACXX=/usr/local/cuda/bin/nvcc; fi
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPT_CUDA_ARCHITECTURES="$GPT_CUDA_ARCHITECTURES" \
      -DCMAKE_CUDA_ARCHITECTURES="$GPT_CUDA_ARCHITECTURES" >/dev/null
programs=(pretrain_gpt cuda_runtime_test ops_test attention_test training_test stream_copy_test nccl_communicator_test
          kernel_workbench)
cmake --build build-device -j"$(nproc)" --target "${programs[@]}"
pack=../shared/device/pack-runtime.sh
[ -x "$pack" ] || pack=/work/shared/device/pack-runtime.sh
bash "$pack" build-device/runtime "${programs[@]/#/build-device/bin/}"
# Compressed, the runtime is ~10 MB instead of ~62 MB (OpenBLAS alone is 36 MB), well inside the
# 64 MiB a device call may carry; run.sh unpacks it on the GPU machine.
rm -rf .devrt && mkdir -p .devrt
tar -C build-device/runtime -cJf .devrt/runtime.tar.xz .
cp scripts/device/run.sh bench/gpu_benchmark.py bench/torch_gpt_baseline.py .devrt/
du -sh .devrt

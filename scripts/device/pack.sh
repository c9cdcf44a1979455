#!/usr/bin/env bash
# Builds here with the CUDA backend for Hopper and packs everything a GPU session runs into .devrt/
# (gitignored): every GPU test binary (the gpt_gpu_test targets of tests/gpu/CMakeLists.txt),
# pretrain_gpt, generate, the kernel workbench and all_to_all_mpi_test (which
# tests/gpu/mpi_all_to_all_cuda_test.py runs on the GPU), the shared libraries and OpenMPI runtime the GPU
# machine lacks (../shared/device/pack-runtime.sh) as one compressed archive, the scripts run.sh
# and device_env.sh, the benchmark scripts, and commit.txt (what was packed, from which commit).
# Then, in one device call (see scripts/device/README.md):
#   carry [".devrt"], command "bash scripts/device/gpu_check.sh"   (or "bash .devrt/run.sh")
# Variables (the CI test packs CPU binaries with them): GPT_DEVICE_BUILD_DIR (build-device),
# GPT_DEVICE_PACK_DIR (.devrt), GPT_DEVICE_SKIP_BUILD=1 (pack what the build directory holds),
# GPT_DEVICE_PROGRAMS (the programs to pack instead of the list above), XZ_OPT (xz's options).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${GPT_DEVICE_BUILD_DIR:-build-device}
pack_dir=${GPT_DEVICE_PACK_DIR:-.devrt}
GPT_CUDA_ARCHITECTURES=${GPT_CUDA_ARCHITECTURES:-90a}
gpu_tests=$(sed -n 's/^ *gpt_gpu_test(\([a-z0-9_]*\) .*/\1/p' tests/gpu/CMakeLists.txt)
read -r -a programs <<< "${GPT_DEVICE_PROGRAMS:-pretrain_gpt generate kernel_workbench all_to_all_mpi_test $(echo $gpu_tests)}"
if [ "${GPT_DEVICE_SKIP_BUILD:-0}" != 1 ]; then
  if ! command -v nvcc >/dev/null 2>&1; then export CUDACXX=/usr/local/cuda/bin/nvcc; fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPT_CUDA_ARCHITECTURES="$GPT_CUDA_ARCHITECTURES" \
        -DCMAKE_CUDA_ARCHITECTURES="$GPT_CUDA_ARCHITECTURES" >/dev/null
  cmake --build "$build" -j"$(nproc)" --target "${programs[@]}"
fi
pack=../shared/device/pack-runtime.sh
[ -x "$pack" ] || pack=/work/shared/device/pack-runtime.sh
bash "$pack" "$build/runtime" "${programs[@]/#/$build/bin/}"
# The runtime must travel compressed (the 64 MiB a device call may carry include the tracked tree,
# 5 MB): the executables link the same static libraries and kernels, so a dictionary that spans
# several of them (256 MiB; xz needs as much to unpack) stores those once. Measured 2026-12-07 on
# the 11 programs built for 90a and 80 (262 MB unpacked): 59 MB with xz's default 8 MiB
# dictionary, 31 MB with this one (single-threaded: threads would cut the stream into blocks).
export XZ_OPT=${XZ_OPT:---lzma2=preset=6,dict=256MiB -T1}
rm -rf "$pack_dir" && mkdir -p "$pack_dir"
tar -C "$build/runtime" -cJf "$pack_dir/runtime.tar.xz" .
cp scripts/device/run.sh scripts/device/device_env.sh bench/gpu_benchmark.py bench/torch_gpt_baseline.py "$pack_dir/"
{
  echo "$(git describe --always --dirty 2>/dev/null || echo unknown) $(git rev-parse HEAD 2>/dev/null || true)"
  git log -1 --format='%s' 2>/dev/null || true
  echo "packed $(date -u '+%Y-%m-%d %H:%M UTC') from $build: ${programs[*]}"
} > "$pack_dir/commit.txt"
du -sh "$pack_dir"

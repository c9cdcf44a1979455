#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .devrt carried (scripts/device/pack.sh):
# checks the libraries, runs every GPU test, the kernel workbench, then the benchmark (ours and the
# PyTorch baseline in the same command). Logs go to $OUT:
#   device.txt gpu_tests.txt workbench.md benchmark.log benchmark.md
# SKIP_BENCHMARK=1: tests and workbench only. BENCHMARK_MODELS="124M 350M": a subset.
# ONLY_TESTS="stream_copy_test ...": just those test binaries (no workbench, no benchmark).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source "$(dirname "$0")/device_env.sh"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  echo "cuDNN used: ${torch_cudnn:-system}"
  echo "missing libraries:"; ldd $bin/pretrain_gpt | grep 'not found' || echo "  none"
} 2>&1 | tee "$OUT/device.txt"

status=0
if [ -n "${ONLY_TESTS:-}" ]; then
  for test in $ONLY_TESTS; do
    echo "=== $test" | tee -a "$OUT/gpu_tests.txt"
    timeout 600 "$bin/$test" 2>&1 | tee -a "$OUT/gpu_tests.txt" | tail -15 || status=1
  done
  exit $status
fi
for test in cuda_runtime_test ops_test attention_test stream_copy_test nccl_communicator_test training_test; do
  [ -x "$bin/$test" ] || continue
  echo "=== $test" | tee -a "$OUT/gpu_tests.txt"
  timeout 600 "$bin/$test" >> "$OUT/gpu_tests.txt" 2>&1 || { status=1; echo "FAILED: $test" | tee -a "$OUT/gpu_tests.txt"; }
  grep -E '^\[  (PASSED|FAILED) |^cuDNN |GPU vs CPU' "$OUT/gpu_tests.txt" | tail -3
done
attention_ok=1
grep -q "FAILED: attention_test" "$OUT/gpu_tests.txt" && attention_ok=0

if [ -x "$bin/kernel_workbench" ]; then
  timeout 300 "$bin/kernel_workbench" --output "$OUT/workbench.md" > "$OUT/workbench.log" 2>&1 || status=1
  tail -40 "$OUT/workbench.log"
fi

if [ "$attention_ok" = 0 ]; then
  # cuDNN's own account of why a graph was refused, for the failing attention case.
  CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$OUT/cudnn_log.txt" timeout 120 "$bin/attention_test" \
    --gtest_filter='*OpsDispatch*' > /dev/null 2>&1
  tail -c 6000 "$OUT/cudnn_log.txt" 2>/dev/null
fi

if [ "${SKIP_BENCHMARK:-0}" != 1 ] && [ "$attention_ok" = 1 ]; then
  # The baseline runs in the machine's own environment (its PyTorch brings its own cuDNN).
  LD_LIBRARY_PATH=$clean_library_path PYTHONUNBUFFERED=1 timeout 1500 python3 .devrt/gpu_benchmark.py \
    --binary $bin/pretrain_gpt --binary-library-path "$LD_LIBRARY_PATH" --baseline .devrt/torch_gpt_baseline.py \
    --models ${BENCHMARK_MODELS:-124M 350M 1.3B} --output "$OUT/benchmark.md" 2>&1 | tee "$OUT/benchmark.log" || status=1
fi
exit $status

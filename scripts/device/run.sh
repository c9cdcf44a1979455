#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .devrt carried: checks the libraries,
# runs every GPU test, then the benchmark (ours and the PyTorch baseline). Logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
mkdir -p .devrt/runtime && tar -C .devrt/runtime -xJf .devrt/runtime.tar.xz
source .devrt/runtime/env.sh
bin=.devrt/runtime/bin
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  echo "missing libraries:"; ldd $bin/pretrain_gpt | grep 'not found' || echo "  none"
} 2>&1 | tee "$OUT/device.txt"
status=0
for test in cuda_runtime_test ops_test nccl_communicator_test training_test; do
  echo "=== $test" | tee -a "$OUT/gpu_tests.txt"
  timeout 900 "$bin/$test" 2>&1 | tee -a "$OUT/gpu_tests.txt" | tail -25 || status=1
done
if [ "${SKIP_BENCHMARK:-0}" != 1 ]; then
  PYTHONUNBUFFERED=1 timeout 1500 python3 .devrt/gpu_benchmark.py --binary $bin/pretrain_gpt \
    --baseline .devrt/torch_gpt_baseline.py --output "$OUT/benchmark.md" 2>&1 | tee "$OUT/benchmark.log" || status=1
fi
exit $status

#!/usr/bin/env bash
# Every GPU test, then a short benchmark, in one device call of at most 8 minutes on one H100 or
# H200 (scripts/device/README.md). Here: scripts/device/pack.sh. There, from the repository root,
# with .devrt carried:
#
#   bash scripts/device/gpu_check.sh                 # writes the results into $OUT
#   bash scripts/device/gpu_check.sh --dry-run       # lists what it would run; needs no GPU
#
# Steps: unpack the runtime (.devrt/runtime.tar.xz, or --bin DIR: binaries built on the machine
# itself), record nvidia-smi and the packed commit, run every GPU test binary (the gpt_gpu_test
# targets of tests/gpu/CMakeLists.txt) with a JUnit report each, the whole-program GPU tests
# (tests/gpu/*_test.py), then bench/gpu_benchmark.py for BENCHMARK_MODELS (default 124M; left out
# when less than BENCHMARK_RESERVE_S of the BUDGET_S seconds remain). $OUT receives at most 8 files
# (the device tool brings back no more):
#   summary.md     commit, device, one row per test (failed and skipped first), benchmark table
#   junit.xml      every report merged
#   device.txt     nvidia-smi (full and queried), cuDNN used, libraries missing
#   commit.txt     the commit packed (git describe, HEAD, date)
#   tests.log      the tail of every test's output
#   benchmark.md   the benchmark's table and per-op breakdown (when run)
#   results.tar.gz every report and whole log
# Exit status: 0 when every test passed (where a GPU is visible, none skipped), 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/../.."
dry_run=0
bin_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --bin) bin_dir=${2:?--bin needs a directory}; shift ;;
    --out) OUT=${2:?--out needs a directory}; shift ;;
    *) echo "error: gpu_check.sh: unknown argument '$1' (--dry-run, --bin DIR, --out DIR)" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-/tmp/gpu_check}
DEVRT=${DEVRT:-.devrt}
BUDGET_S=${BUDGET_S:-330}
BENCHMARK_MODELS=${BENCHMARK_MODELS:-124M}
BENCHMARK_RESERVE_S=${BENCHMARK_RESERVE_S:-110}
TEST_TIMEOUT_S=${TEST_TIMEOUT_S:-240}
PYTHON=${PYTHON:-python3}  # with numpy (the GPU machine's has it)
start=$SECONDS

# The GPU test binaries: tests/gpu/CMakeLists.txt's gpt_gpu_test targets, in its order.
gtests=$(sed -n 's/^ *gpt_gpu_test(\([a-z0-9_]*\) .*/\1/p' tests/gpu/CMakeLists.txt)
scripts=(shared_gpu_layouts generate_cuda mpi_all_to_all_cuda)

if [ "$dry_run" = 1 ]; then
  if [ -n "$bin_dir" ]; then
    packed=$(ls "$bin_dir" 2>/dev/null)
    echo "binaries: $bin_dir"
  elif [ -f "$DEVRT/runtime.tar.xz" ]; then
    packed=$(tar -tJf "$DEVRT/runtime.tar.xz" | sed -n 's|^\./bin/\(.\+\)$|\1|p')
    echo "unpack: $DEVRT/runtime.tar.xz ($(du -h "$DEVRT/runtime.tar.xz" | cut -f1)) into $DEVRT/runtime"
    echo "commit: $(head -n 1 "$DEVRT/commit.txt" 2>/dev/null || echo 'not recorded')"
  else
    packed=""
    echo "unpack: $DEVRT/runtime.tar.xz is not there: run scripts/device/pack.sh first"
  fi
  have() { grep -qx "$1" <<< "$packed" && echo "" || echo "   [MISSING from the pack]"; }
  echo "record: nvidia-smi, nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv"
  for t in $gtests; do
    echo "gtest: $t --gtest_output=xml:REPORTS/$t.xml (timeout ${TEST_TIMEOUT_S}s)$(have "$t")"
  done
  echo "script: shared_gpu_layouts: $PYTHON tests/gpu/shared_gpu_layouts_test.py --pretrain BIN/pretrain_gpt --mpirun orterun$(have pretrain_gpt)"
  echo "script: generate_cuda: $PYTHON tests/gpu/generate_cuda_test.py --generate BIN/generate --pretrain BIN/pretrain_gpt$(have generate)"
  echo "script: mpi_all_to_all_cuda: $PYTHON tests/gpu/mpi_all_to_all_cuda_test.py --binary BIN/all_to_all_mpi_test --mpirun orterun"
  echo "benchmark: $PYTHON bench/gpu_benchmark.py --models $BENCHMARK_MODELS (if ${BENCHMARK_RESERVE_S}s of the ${BUDGET_S}s remain)"
  echo "results: $OUT/{summary.md,junit.xml,device.txt,commit.txt,tests.log,benchmark.md,results.tar.gz}"
  exit 0
fi

mkdir -p "$OUT"
work=$(mktemp -d /tmp/gpu_check.XXXXXX)
reports=$work/reports logs=$work/logs
mkdir -p "$reports" "$logs"
if [ -n "$bin_dir" ]; then
  bin=$bin_dir clean_library_path=${LD_LIBRARY_PATH:-} torch_cudnn=""
else
  source scripts/device/device_env.sh
fi
cp "$DEVRT/commit.txt" "$OUT/commit.txt" 2>/dev/null || git log -1 --format='%H %s' > "$OUT/commit.txt" 2>/dev/null \
  || echo "(no commit recorded)" > "$OUT/commit.txt"
{
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  echo "cuDNN used: ${torch_cudnn:-system}"
  echo "missing libraries:"; ldd "$bin/pretrain_gpt" | grep 'not found' || echo "  none"
} > "$OUT/device.txt" 2>&1

remaining() { echo $(( BUDGET_S - (SECONDS - start) )); }
# run NAME TIMEOUT COMMAND...: the output into logs/NAME.log, "<exit status> <seconds>" into reports/NAME.rc.
run() {
  local name=$1 limit=$2 began=$SECONDS rc; shift 2
  [ "$(remaining)" -lt "$limit" ] && limit=$(remaining)
  if [ "$limit" -le 5 ]; then
    echo "not run: out of time" > "$logs/$name.log"; rc=124
  else
    timeout -k 10 "$limit" "$@" > "$logs/$name.log" 2>&1; rc=$?
  fi
  echo "$rc $((SECONDS - began))" > "$reports/$name.rc"
  printf '%-28s exit %3d  %4ds\n' "$name" "$rc" "$((SECONDS - began))"
  return 0
}

for t in $gtests; do
  if [ -x "$bin/$t" ]; then
    run "$t" "$TEST_TIMEOUT_S" "$bin/$t" --gtest_output="xml:$reports/$t.xml"
  else
    echo "not in the pack: $bin/$t" > "$logs/$t.log"; echo "127 0" > "$reports/$t.rc"
  fi
done
# The packed OpenMPI has orterun (mpirun is a Debian alternatives link that does not travel).
mpirun=$(command -v orterun || command -v mpirun || echo mpirun)
run shared_gpu_layouts 300 "$PYTHON" tests/gpu/shared_gpu_layouts_test.py --pretrain "$bin/pretrain_gpt" --mpirun "$mpirun"
run generate_cuda 200 "$PYTHON" tests/gpu/generate_cuda_test.py --generate "$bin/generate" --pretrain "$bin/pretrain_gpt" \
  --work-dir "$work/generate_cuda"
run mpi_all_to_all_cuda 120 "$PYTHON" tests/gpu/mpi_all_to_all_cuda_test.py --binary "$bin/all_to_all_mpi_test" --mpirun "$mpirun"
for s in "${scripts[@]}"; do
  read -r rc seconds < "$reports/$s.rc"
  "$PYTHON" scripts/device/gpu_results.py script-junit --name "$s" --log "$logs/$s.log" --rc "$rc" --seconds "$seconds" \
    --out "$reports/$s.xml"
done

benchmark=""
if [ "$(remaining)" -ge "$BENCHMARK_RESERVE_S" ]; then
  # The baseline runs in the machine's own environment (its PyTorch brings its own cuDNN).
  LD_LIBRARY_PATH=$clean_library_path PYTHONUNBUFFERED=1 timeout -k 10 "$(( $(remaining) - 15 ))" "$PYTHON" \
    bench/gpu_benchmark.py --binary "$bin/pretrain_gpt" --binary-library-path "$LD_LIBRARY_PATH" \
    --baseline bench/torch_gpt_baseline.py --models $BENCHMARK_MODELS --output "$OUT/benchmark.md" \
    > "$logs/benchmark.log" 2>&1
  [ -f "$OUT/benchmark.md" ] && benchmark=$OUT/benchmark.md
else
  echo "benchmark left out: $(remaining) s left of $BUDGET_S" | tee "$logs/benchmark.log"
fi

for f in "$logs"/*.log; do printf '===== %s\n' "$(basename "$f")"; tail -n 40 "$f"; done > "$OUT/tests.log"
# Where a GPU is visible a skipped test is a failure (it did not find the GPU, or cannot run there).
skips_fail=""
nvidia-smi -L > /dev/null 2>&1 && skips_fail=--skips-fail
"$PYTHON" scripts/device/gpu_results.py summary --reports "$reports" --device "$OUT/device.txt" \
  --commit "$OUT/commit.txt" ${benchmark:+--benchmark "$benchmark"} --markdown "$OUT/summary.md" --junit "$OUT/junit.xml" \
  $skips_fail
status=$?
# The device tool returns the end of the output: the failed and skipped rows, then the benchmark.
grep -E '\| (FAILED|SKIPPED) \|' "$OUT/summary.md" | head -n 40
[ -n "$benchmark" ] && grep -E '^\|' "$benchmark" | head -n 8
tar -C "$work" -czf "$OUT/results.tar.gz" reports logs
echo "elapsed: $((SECONDS - start)) s; results in $OUT"
rm -rf "$work"
exit $status

#!/usr/bin/python3
"""Issue 33: tools check sizes before allocating and refuse nonsense (exit 1 or 2 with one error
line naming the flag, at once), instead of growing until memory runs out, printing nonsense with
exit 0, or dividing by zero.

pipeline_schedule: negative or non-finite costs, latencies, bytes and bandwidths; schedules of
absurd size (p x v x m beyond the tool's limit, checked before the schedule is built); a normal
layout still works. gpt_dataset_indices (the dataset-index test tool): --seq-length 0 on a real
corpus."""

import argparse
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import megatron_dataset  # noqa: E402

LAYOUT = "--pipeline-model-parallel-size 4 --num-layers 8 --num-microbatches 8 --quiet".split()


def run(command):
    started = time.time()
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    errors = [l for l in (result.stdout + result.stderr).splitlines() if l.startswith("error:")]
    return result.returncode, errors, time.time() - started, result.stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipeline-schedule", required=True)
    parser.add_argument("--dataset-indices", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    failures = []
    cases = [
        (["--forward-cost", "-1"], "--forward-cost must be a finite number >= 0 (got -1)"),
        (["--backward-cost", "-2"], "--backward-cost must be a finite number >= 0"),
        (["--forward-cost", "nan"], "--forward-cost must be a finite number >= 0 (got nan)"),
        (["--backward-cost", "inf"], "--backward-cost must be a finite number >= 0 (got inf)"),
        (["--p2p-latency", "-0.5"], "--p2p-latency must be a finite number >= 0"),
        (["--p2p-bytes", "-1e6"], "--p2p-bytes must be a finite number >= 0"),
        (["--p2p-bandwidth", "-5"], "--p2p-bandwidth must be a finite number >= 0 (got -5)"),
        (["--forward-cost", "0", "--backward-cost", "0"], "cannot both be 0"),
    ]
    for extra, expected in cases:
        status, errors, seconds, _ = run([args.pipeline_schedule] + LAYOUT + extra)
        if status != 1 or len(errors) != 1 or expected not in errors[0]:
            failures.append(f"pipeline_schedule {' '.join(extra)}: exit {status}, errors {errors}")
        print(f"pipeline_schedule {' '.join(extra)}: exit {status}: {errors[0] if errors else '(none)'}")
    for sizes in (["--pipeline-model-parallel-size", "4", "--num-layers", "8", "--num-microbatches", "2000000000"],
                  ["--pipeline-model-parallel-size", "1000000", "--num-layers", "1000000", "--num-microbatches",
                   "1000000"],
                  ["--pipeline-model-parallel-size", "2048", "--num-layers", "2048", "--num-microbatches", "2048"]):
        status, errors, seconds, _ = run([args.pipeline_schedule, "--quiet"] + sizes)
        if status != 1 or len(errors) != 1 or "more than this tool draws" not in errors[0] or seconds > 5:
            failures.append(f"pipeline_schedule {' '.join(sizes)}: exit {status} after {seconds:.1f} s, {errors}")
        print(f"pipeline_schedule {' '.join(sizes)}: exit {status} after {seconds:.2f} s: "
              f"{errors[0] if errors else '(none)'}")
    status, errors, _, out = run([args.pipeline_schedule] + LAYOUT)
    if status != 0 or errors or "bubble fraction" not in out:
        failures.append(f"pipeline_schedule {' '.join(LAYOUT)}: exit {status}, {errors}")

    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    prefix = os.path.join(args.work_dir, "corpus")
    megatron_dataset.write(prefix, [[1, 2, 3, 4, 5, 6, 7]] * 20, 8)
    base = [args.dataset_indices, "--data-path", prefix, "--split", "1,0,0", "--seed", "1", "--samples", "4,0,0",
            "--data-cache-path", os.path.join(args.work_dir, "cache"), "--null-vocab-size", "100", "--print", "1"]
    status, errors, _, _ = run(base + ["--seq-length", "0"])
    if status <= 0 or len(errors) != 1 or "--seq-length must be >= 1" not in errors[0]:
        failures.append(f"gpt_dataset_indices --seq-length 0: exit {status}, {errors}")
    print(f"gpt_dataset_indices --seq-length 0: exit {status}: {errors[0] if errors else '(none)'}")
    status, errors, _, out = run(base + ["--seq-length", "4"])
    if status != 0 or "split train 4" not in out:
        failures.append(f"gpt_dataset_indices --seq-length 4: exit {status}, {errors}, {out[:200]}")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""The token dispatcher's variable-size all-to-all on device buffers, 4 ranks on one GPU (ctest label gpu).

NCCL cannot put two ranks on one GPU (tests/gpu/nccl_all_to_all_test.cc checks its one-rank case),
so the ranks talk over MPI, which stages the device row blocks through host memory:
tests/unit/parallel/all_to_all_mpi_test.cc under mpirun -np 4 with GPT_TEST_DEVICE=cuda, on the
world and both pairs of TP 2 x DP 2, random counts with zeros, FP32 and BF16, every received row
checked against what its sender must have sent; the own block and the counts' round trip are
copies on the GPU.

Without a GPU it says so and exits 77, which ctest reports as skipped. --device cpu runs the same
binary on the CPU backend (a check of this script itself).
"""
import argparse
import os
import re
import subprocess
import sys


def gpu_visible():
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True, help="all_to_all_mpi_test")
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    if args.device == "cuda" and not gpu_visible():
        print("skipped: no GPU is visible (nvidia-smi -L)")
        return 77
    if not os.access(args.binary, os.X_OK):
        print(f"FAILED: {args.binary} is not there (scripts/device/pack.sh packs it)")
        return 1
    env = {**os.environ, "GPT_TEST_DEVICE": args.device, "OMPI_ALLOW_RUN_AS_ROOT": "1",
           "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    command = [args.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none", args.binary, "--gtest_color=no"]
    try:
        run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    except subprocess.TimeoutExpired:
        print("FAILED: mpirun -np 4 did not finish in 240 s")
        return 1
    # Rank 0 prints GoogleTest's summary; a failure on any rank fails every rank's exit status.
    passed = re.search(r"\[  PASSED  \] (\d+) tests?\.", run.stdout)
    print("\n".join(run.stdout.strip().splitlines()[-12:]))
    if run.returncode != 0 or not passed or int(passed.group(1)) < 3:
        print(f"FAILED: exit {run.returncode}: {run.stderr.strip()[-800:]}")
        return 1
    print(f"PASSED: {passed.group(1)} all-to-all tests on 4 ranks sharing one {args.device}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

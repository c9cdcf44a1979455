#!/usr/bin/python3
"""A rank that stops answering must end the job, never hang it.


Four ranks; after one collective, rank 1 either stalls or dies. The others wait in an all-reduce
bounded by the timeout: the job must end with a non-zero status well within timeout + margin,
and (stall) the waiting ranks must name the collective, the group and themselves."""

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


TIMEOUT_SECONDS = 3.0
MARGIN_SECONDS = 30.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    failures = []
    for mode in ("stall", "exit"):
        started = time.time()
        run = subprocess.run([args.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none", args.probe,
                              "--mode", mode, "--victim", "1", "--timeout-seconds", str(TIMEOUT_SECONDS)],
                             capture_output=True, text=True, timeout=TIMEOUT_SECONDS + 120)
        elapsed = time.time() - started
        print(f"{mode}: exit {run.returncode} after {elapsed:.1f} s")
        if run.returncode == 0:
            failures.append(f"{mode}: the job exited 0")
        if elapsed > TIMEOUT_SECONDS + MARGIN_SECONDS:
            failures.append(f"{mode}: took {elapsed:.1f} s")
        if mode == "stall":
            lines = [l for l in run.stderr.splitlines() if "timed out on world rank" in l]
            print("  " + (lines[0] if lines else "(no timeout message)"))
            if not lines or "all_reduce on group 'tensor-parallel' (world ranks [0,1,2,3])" not in lines[0]:
                failures.append(f"stall: no message naming the collective and group:\n{run.stderr}")
            if any("world rank 1 " in l for l in lines):
                failures.append("stall: the stalled rank itself reported a timeout")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""--use-tp-pp-dp-mapping from the command line (issue 32): pretrain_gpt prints Megatron's
tp-cp-ep-pp-dp order and its groups at start-up; a PP2 x DP2 run (ZeRO-1) trains bit-identically in
both orders, and checkpoints move between them: saved at iteration 3 in the default order and
resumed in the other (and the reverse), it equals the uninterrupted run bit for bit.

  rank_order_cli_test.py --binary build-cpu/bin/pretrain_gpt --mpirun mpirun
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import harness

MODEL = ["--device", "cpu", "--mock-data", "--vocab-size", "250", "--num-layers", "4", "--hidden-size", "64",
         "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
         "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "1e-3", "--log-interval", "1",
         "--eval-iters", "0", "--train-iters", "6", "--pipeline-model-parallel-size", "2",
         "--use-distributed-optimizer"]
MAPPING = ["--use-tp-pp-dp-mapping"]
GROUPS = ["> process grid: world 4 = TP 1 x PP 2 x DP 2 (order tp-cp-ep-pp-dp, rank = tp + TP*(pp + PP*dp))",
          ">   data-parallel groups: [0,2] [1,3]",
          ">   pipeline-parallel groups: [0,1] [2,3]"]


def run(binary, mpirun, flags, work, name):
    metrics = os.path.join(work, name + ".jsonl")
    done = subprocess.run(mpirun + ["-np", "4", binary] + MODEL + flags + ["--metrics-file", metrics],
                          capture_output=True, text=True, timeout=300, cwd=work)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: exit {done.returncode}: {done.stderr[-1500:]}")
    with open(metrics) as f:
        records = [{k: r[k] for k in ("iteration", "lm_loss", "grad_norm", "learning_rate")}
                   for r in map(json.loads, f) if "lm_loss" in r]
    return records, done.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    mpirun = [args.mpirun, "--oversubscribe", "--bind-to", "none"]
    work = tempfile.mkdtemp(prefix="rank_order_")
    failures = []
    try:
        full, stdout = run(binary, mpirun, MAPPING, work, "full")
        missing = [line for line in GROUPS if line not in stdout.splitlines()]
        if missing:
            failures.append(f"start-up lines missing: {missing}")
        else:
            print("start-up: " + " / ".join(GROUPS))
        default, _ = run(binary, mpirun, [], work, "default")
        if default != full:
            failures.append("the default order's run differs from the tp-pp-dp order's")
        else:
            print("the two orders' uninterrupted runs: bit-identical losses, gradient norms, learning rates")
        for first, second, name in ((["--exit-interval", "3"], MAPPING, "default -> tp-pp-dp"),
                                    (MAPPING + ["--exit-interval", "3"], [], "tp-pp-dp -> default")):
            case = name.replace(" -> ", "_to_")
            save = os.path.join(work, case)
            head, _ = run(binary, mpirun, first + ["--save", save], work, case + "_head")
            # (its own metrics file: a resumed run appends to the one it is given)
            tail, _ = run(binary, mpirun, second + ["--load", save, "--save", save], work, case + "_tail")
            if head + tail != full:
                failures.append(f"{name}: the resumed run differs from the uninterrupted one")
            else:
                print(f"saved at iteration 3, resumed ({name}): 6 iterations bit-identical to the uninterrupted run")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

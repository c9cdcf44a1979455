#!/usr/bin/python3
"""Pipeline parallelism as a user runs it, under mpirun on the CPU backend: the interleaved 1F1B
acceptance run (PP=4, one layer per virtual stage, 8 layers, 8 microbatches, FP32), the ZB-H1
run (--pipeline-schedule zb-h1, PP=4, two layers per stage) and the ZB-V run (--pipeline-schedule
zb-v, PP=4, one layer per chunk, rank r holding layers r and 7 - r, the loss on rank 0) and
--pipeline-schedule auto (which says once that it chose ZB-H1 and why) print the same lm loss values
as one rank; layouts that cannot run end with one clear message naming the flags
and a non-zero exit on every rank, before any training output."""

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from pretrain_cli_test import expect_rejected_everywhere, losses_of  # noqa: E402

ACCEPTANCE = ("--device cpu --mock-data --vocab-size 512 --num-layers 8 --hidden-size 64 --num-attention-heads 4 "
              "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 16 "
              "--train-iters 20 --lr 1e-3 --log-interval 1").split()
PIPELINE = ["--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "1"]
ZERO_BUBBLE = ["--pipeline-model-parallel-size", "4", "--pipeline-schedule", "zb-h1"]
# Issue 27's acceptance command as written: zb-v alone gets its two chunks per rank.
ZERO_BUBBLE_V = ["--pipeline-model-parallel-size", "4", "--pipeline-schedule", "zb-v"]
AUTO = ["--pipeline-model-parallel-size", "4", "--pipeline-schedule", "auto"]

# Under mpirun -np 4: (flags, piece of the single error message).
BAD = [
    (["--pipeline-model-parallel-size", "4", "--num-layers", "6"],
     "--num-layers (6) must be divisible by --pipeline-model-parallel-size (4)"),
    (["--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "1", "--global-batch-size", "12"],
     "to be a multiple of --pipeline-model-parallel-size (4)"),
    (["--pipeline-model-parallel-size", "4", "--num-layers", "3"],
     "--pipeline-model-parallel-size (4) exceeds --num-layers (3)"),
    (["--tensor-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "2"],
     "--num-layers-per-virtual-pipeline-stage (an interleaved schedule) needs --pipeline-model-parallel-size > 1"),
    (["--tensor-model-parallel-size", "4", "--num-virtual-stages-per-pipeline-rank", "2"],
     "--num-virtual-stages-per-pipeline-rank needs --pipeline-model-parallel-size > 1"),
    (["--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "1",
      "--num-virtual-stages-per-pipeline-rank", "2"], "cannot both be given"),
    (["--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "3"],
     "--num-layers (8) must be divisible by --pipeline-model-parallel-size (4) x "
     "--num-layers-per-virtual-pipeline-stage (3)"),
    (["--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "1", "--pipeline-schedule",
      "zb-h1"],
     "--pipeline-schedule zb-h1 runs one model chunk per pipeline rank; drop --num-layers-per-virtual-pipeline-stage"),
    (["--pipeline-model-parallel-size", "4", "--pipeline-schedule", "interleaved"],
     "--pipeline-schedule interleaved needs more than one model chunk per pipeline rank"),
    (["--pipeline-model-parallel-size", "4", "--pipeline-schedule", "gpipe"],
     "--pipeline-schedule must be 1f1b, interleaved, zb-h1, zb-v or auto, got 'gpipe'"),
    (["--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "2", "--pipeline-schedule",
      "zb-v"],
     "--pipeline-schedule zb-v runs two model chunks per pipeline rank placed in a V: give "
     "--num-layers-per-virtual-pipeline-stage = --num-layers / (2 x --pipeline-model-parallel-size) or "
     "--num-virtual-stages-per-pipeline-rank 2 (1 chunks per rank here)"),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    options = parser.parse_args()
    failures = []
    launcher = [options.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none"]

    single = subprocess.run([options.binary] + ACCEPTANCE, capture_output=True, text=True, timeout=300)
    piped = subprocess.run(launcher + [options.binary] + ACCEPTANCE + PIPELINE, capture_output=True, text=True,
                           timeout=300)
    reference, ours = losses_of(single.stdout), losses_of(piped.stdout)
    if piped.returncode != 0 or len(ours) != 20 or len(reference) != 20:
        failures.append(f"PP=4 run: exit {piped.returncode}, {len(ours)} log lines (expected 20, printed once); "
                        f"{piped.stderr[-500:]}")
    else:
        worst = max(abs(float(a) - float(b)) / float(b) for a, b in zip(ours, reference))
        print(f"PP=4, v=2 (interleaved 1F1B), 8 microbatches vs 1 rank: 20 lm loss values, max relative "
              f"difference {worst:.1e}, identical printed values {sum(a == b for a, b in zip(ours, reference))}/20")
        if worst > 1e-5:  # at least 5 significant digits
            failures.append(f"PP=4 lm loss differs from 1 rank by {worst:.1e}")

    for name, flags in (("zb-h1", ZERO_BUBBLE), ("zb-v", ZERO_BUBBLE_V), ("auto", AUTO)):
        run = subprocess.run(launcher + [options.binary] + ACCEPTANCE + flags, capture_output=True, text=True,
                             timeout=300)
        ours = losses_of(run.stdout)
        if run.returncode != 0 or len(ours) != 20 or len(reference) != 20:
            failures.append(f"PP=4 {name} run: exit {run.returncode}, {len(ours)} log lines (expected 20); "
                            f"{run.stderr[-500:]}")
            continue
        if name == "auto":
            # One rank says what it chose and why: with FLOP costs, ZB-H1 (its memory fits).
            chosen = [line for line in run.stdout.splitlines() if line.startswith("--pipeline-schedule auto:")]
            if len(chosen) != 1 or not chosen[0].startswith("--pipeline-schedule auto: zb-h1, the fastest"):
                failures.append(f"PP=4 auto: expected one line choosing zb-h1, got {chosen}")
            else:
                print(chosen[0])
        worst = max(abs(float(a) - float(b)) / float(b) for a, b in zip(ours, reference))
        print(f"PP=4, {name}, 8 microbatches vs 1 rank: 20 lm loss values, max relative difference {worst:.1e}, "
              f"identical printed values {sum(a == b for a, b in zip(ours, reference))}/20")
        if worst > 1e-5:
            failures.append(f"PP=4 {name} lm loss differs from 1 rank by {worst:.1e}")

    expect_rejected_everywhere(launcher, options.binary, ACCEPTANCE, BAD, 4, failures)
    return harness.finish(failures, f"{len(BAD)} bad pipeline layouts rejected under mpirun -np 4 with one message "
                                    "and a non-zero exit on every rank")


if __name__ == "__main__":
    sys.exit(main())

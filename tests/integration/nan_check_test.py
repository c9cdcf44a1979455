#!/usr/bin/python3
"""Issue 33: a non-finite loss ends the run (Megatron's --check-for-nan-in-loss-and-grad, on by
default), and --no-check-for-nan-in-loss-and-grad keeps training, skipping those updates.

A learning rate of 1e30 makes the parameters overflow after the first update, so iteration 2's loss
and gradient norm are NaN. By default: exit 1, one error line naming iteration 2, no log line for
it, on one rank, under TP=2 x PP=2 (where only the last stage knows the loss; every rank must
stop, none hang) and under TP=2 x DP=2 with ZeRO-2 (gradient shards only). With --no-check-for-nan-in-loss-and-grad: exit 0, every iteration logged, the log
lines counting the skipped and nan iterations. A normal learning rate trains to the end (the check
does not fire on finite losses)."""

import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

BASE = ("--device cpu --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
        "--max-position-embeddings 32 --vocab-size 512 --micro-batch-size 1 --global-batch-size 4 "
        "--log-interval 1 --eval-iters 0 --train-iters 5").split()
LOG = re.compile(r"iteration +(\d+)/ +\d+ \|.*\| lm loss: (\S+) \|.*number of skipped iterations: +(\d+) \| "
                 r"number of nan iterations: +(\d+) \|$")


def run(command, timeout=300):
    started = time.time()
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    logged = [LOG.search(l) for l in result.stdout.splitlines()]
    logged = [(int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))) for m in logged if m]
    errors = [l for l in (result.stdout + result.stderr).splitlines() if l.startswith("error:")]
    return result.returncode, logged, errors, time.time() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    args = parser.parse_args()
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    failures = []
    grid = [args.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none"]
    layouts = [("1 rank", [], []), ("TP2 x PP2", grid, ["--tensor-model-parallel-size", "2",
                                                         "--pipeline-model-parallel-size", "2"]),
               # ZeRO-2: the norm and the skip read the gradient shards (two microbatches per rank).
               ("TP2 x DP2 ZeRO-2", grid, ["--tensor-model-parallel-size", "2", "--use-megatron-fsdp",
                                           "--data-parallel-sharding-strategy", "optim_grads"])]
    for name, launcher, layout in layouts:
        status, logged, errors, seconds = run(launcher + [args.binary] + BASE + layout + ["--lr", "1e30"])
        ok = (status == 1 and len(errors) == 1 and "iteration 2: the " in errors[0] and " is nan" in errors[0]
              and "--no-check-for-nan-in-loss-and-grad" in errors[0] and [l[0] for l in logged] == [1])
        if not ok:
            failures.append(f"{name}, default: exit {status}, logged {logged}, errors {errors}")
        print(f"{name}: NaN at iteration 2: exit {status} after {seconds:.1f} s: {errors[0] if errors else '(none)'}")
        status, logged, errors, _ = run(launcher + [args.binary] + BASE + layout +
                                        ["--lr", "1e30", "--no-check-for-nan-in-loss-and-grad"])
        skipped = sum(l[2] for l in logged)
        nans = sum(l[3] for l in logged)
        if status != 0 or errors or [l[0] for l in logged] != [1, 2, 3, 4, 5] or skipped != 4 or nans != 4:
            failures.append(f"{name}, --no-check-for-nan-in-loss-and-grad: exit {status}, logged {logged}, "
                            f"errors {errors}")
        print(f"  with --no-check-for-nan-in-loss-and-grad: exit {status}, iterations {[l[0] for l in logged]}, "
              f"{skipped} skipped, {nans} nan iterations")
        status, logged, errors, _ = run(launcher + [args.binary] + BASE + layout + ["--lr", "1e-3"])
        if status != 0 or [l[0] for l in logged] != [1, 2, 3, 4, 5] or any(l[1] in ("NAN", "INF") for l in logged):
            failures.append(f"{name}, --lr 1e-3: exit {status}, logged {logged}, errors {errors}")
        print(f"  with --lr 1e-3: exit {status}, losses {[l[1] for l in logged]}")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

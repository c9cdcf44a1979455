#!/usr/bin/python3
"""Context parallelism as a user runs it, under mpirun on the CPU backend.

- Issue 26's acceptance command: CP=2 x TP=2 x PP=2 with sequence parallelism and RoPE (FP32, a
  small model) prints the same lm loss values as one rank to 5 significant digits.
- Any CP layout loads any checkpoint: a run saved at CP=2 (a2a) resumes at CP=1 and at CP=4 (p2p)
  with the losses of the uninterrupted one-rank run.
- Bad context-parallel command lines end with one message naming the flags, from one rank, and a
  non-zero exit on every rank.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from pretrain_cli_test import expect_rejected_everywhere, losses_of  # noqa: E402

MODEL = ("--device cpu --mock-data --vocab-size 512 --num-layers 4 --hidden-size 64 --num-attention-heads 4 "
         "--seq-length 64 --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 8 "
         "--train-iters 12 --lr 1e-3 --lr-decay-style constant --log-interval 1 --eval-iters 0 "
         "--position-embedding-type rope").split()
ACCEPTANCE = ["--context-parallel-size", "2", "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size",
              "2", "--sequence-parallel"]

BAD = [
    (["--context-parallel-size", "2", "--seq-length", "62", "--max-position-embeddings", "62"],
     "--seq-length (62) must be divisible by 2 x --context-parallel-size (4)"),
    (["--context-parallel-size", "4", "--cp-comm-type", "a2a", "--num-attention-heads", "2"],
     "--cp-comm-type a2a needs the attention heads (2) and key/value groups (2) of each tensor-parallel rank "
     "divisible by --context-parallel-size (4)"),
    (["--context-parallel-size", "2", "--cp-comm-type", "p2p", "a2a", "p2p"],
     "--cp-comm-type takes one value for every layer or one per layer: 3 values for --num-layers 4"),
    (["--context-parallel-size", "3", "--seq-length", "96", "--max-position-embeddings", "96"],
     "world size (4) must be divisible by --tensor-model-parallel-size (1) x --pipeline-model-parallel-size (1) x "
     "--context-parallel-size (3)"),
    (["--context-parallel-size", "2", "--cp-comm-type", "allgather"],
     "--cp-comm-type allgather is not built in this program"),
    (["--context-parallel-size", "2", "--hierarchical-context-parallel-sizes", "2 2"],
     "--hierarchical-context-parallel-sizes (2 x 2 = 4) must multiply to --context-parallel-size (2)"),
    (["--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p"],
     "--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes"),
]


def run(command, timeout=600):
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def compare(name, ours, reference, first, failures, digits=5):
    """ours: lm loss strings of iterations first.., against the reference's same iterations."""
    wanted = reference[first - 1:first - 1 + len(ours)]
    if not ours or len(ours) != len(wanted):
        failures.append(f"{name}: {len(ours)} lm loss values, expected {len(wanted)}")
        return
    worst = max(abs(float(a) - float(b)) / abs(float(b)) for a, b in zip(ours, wanted))
    same = sum(f"{float(a):.{digits - 1}e}" == f"{float(b):.{digits - 1}e}" for a, b in zip(ours, wanted))
    print(f"{name}: {len(ours)} lm loss values, max relative difference {worst:.1e}, equal to {digits} significant "
          f"digits {same}/{len(ours)}")
    if same != len(ours):
        failures.append(f"{name}: lm loss differs from one rank beyond {digits} significant digits ({worst:.1e})")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    options = parser.parse_args()
    failures = []
    launcher = lambda ranks: [options.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none"]  # noqa: E731

    single = run([options.binary] + MODEL)
    reference = losses_of(single.stdout)
    if single.returncode != 0 or len(reference) != 12:
        failures.append(f"one-rank run: exit {single.returncode}; {single.stderr[-600:]}")
        return harness.finish(failures)

    accepted = run(launcher(8) + [options.binary] + MODEL + ACCEPTANCE)
    if accepted.returncode != 0:
        failures.append(f"CP2 x TP2 x PP2 run: exit {accepted.returncode}; {accepted.stderr[-800:]}")
    else:
        compare("CP=2 x TP=2 x PP=2, SP, RoPE (mpirun -np 8) vs 1 rank", losses_of(accepted.stdout), reference, 1,
                failures)

    work = tempfile.mkdtemp(prefix="cp_ckpt_")
    try:
        save = ["--save", work, "--save-interval", "6"]
        first = run(launcher(2) + [options.binary] + MODEL + save +
                    ["--exit-interval", "6", "--context-parallel-size", "2", "--cp-comm-type", "a2a"])
        if first.returncode != 0:
            failures.append(f"CP=2 save run: exit {first.returncode}; {first.stderr[-800:]}")
        else:
            for ranks, flags in ((1, []), (4, ["--context-parallel-size", "4"])):
                resumed = run(launcher(ranks) + [options.binary] + MODEL + ["--load", work] + flags)
                if resumed.returncode != 0:
                    failures.append(f"resume at {flags}: exit {resumed.returncode}; {resumed.stderr[-800:]}")
                    continue
                compare(f"saved at CP=2 (a2a), resumed with {ranks} rank(s) {' '.join(flags)}",
                        losses_of(resumed.stdout), reference, 7, failures)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    expect_rejected_everywhere(launcher(4), options.binary, MODEL, BAD, 4, failures)
    return harness.finish(failures, f"{len(BAD)} bad context-parallel command lines rejected on every rank")


if __name__ == "__main__":
    sys.exit(main())

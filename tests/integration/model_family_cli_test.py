#!/usr/bin/python3
"""Issue 14's acceptance run as a user types it: a Llama-style model (RoPE, RMSNorm, SwiGLU,
grouped-query attention, no biases, untied head) with Megatron's dropout of 0.1 trains with a
falling loss; the same command under mpirun -np 2 with --tensor-model-parallel-size 2 prints the
same lm loss values to 5 significant digits; dropout really changes the numbers (it is not
accepted and ignored); Qwen2-style q/k/v biases (--add-qkv-bias) with Llama 3.1's RoPE scaling train
to the same losses (5 significant digits) under TP=2 with SP and under CP=2 as on one rank; bad model-family flags end with
one message naming the flag."""

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from pretrain_cli_test import expect_rejected_everywhere, losses_of, with_flags  # noqa: E402

ITERATIONS = 40
LLAMA = ("--device cpu --mock-data --vocab-size 512 --num-layers 2 --hidden-size 64 --num-attention-heads 8 "
         "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 "
         f"--train-iters {ITERATIONS} --lr 1e-3 --log-interval 1 "
         "--position-embedding-type rope --normalization RMSNorm --swiglu --group-query-attention "
         "--num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights "
         "--hidden-dropout 0.1 --attention-dropout 0.1").split()

# (extra flags, piece of the one error line); one rank.
BAD = [
    (["--num-query-groups", "3"], "--num-attention-heads (8) must be divisible by --num-query-groups (3)"),
    (["--rotary-percent", "0"], "--rotary-percent must be in (0, 1] (got 0)"),
    (["--rotary-percent", "1.5"], "--rotary-percent must be in (0, 1] (got 1.5)"),
    (["--hidden-dropout", "1"], "--hidden-dropout must be in [0, 1) (got 1)"),
    (["--hidden-dropout", "-0.5"], "--hidden-dropout must be in [0, 1) (got -0.5)"),
    (["--attention-dropout", "1.0"], "--attention-dropout must be in [0, 1) (got 1)"),
    (["--normalization", "ScaleNorm"], "--normalization must be LayerNorm or RMSNorm"),
    (["--use-rope-scaling", "--position-embedding-type", "learned_absolute"],
     "--use-rope-scaling needs --position-embedding-type rope"),
    (["--use-rope-scaling", "--rope-scaling-factor", "0"], "--rope-scaling-factor must be positive (got 0)"),
]
# Under mpirun -np 4: tensor parallelism must split whole query groups.
BAD_MPI = [
    (["--tensor-model-parallel-size", "4"], "--num-query-groups (2) must be divisible by --tensor-model-parallel-size (4)"),
]


def significant(value, digits=5):
    return f"{float(value):.{digits - 1}e}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    options = parser.parse_args()
    binary, failures = options.binary, []
    launcher = [options.mpirun, "--oversubscribe", "--bind-to", "none"]

    single = subprocess.run([binary] + LLAMA, capture_output=True, text=True, timeout=600)
    losses = losses_of(single.stdout)
    if single.returncode != 0 or len(losses) != ITERATIONS:
        failures.append(f"one rank: exit {single.returncode}, {len(losses)} log lines: {single.stderr[-2000:]}")
    else:
        values = [float(v) for v in losses]
        first, last = sum(values[:5]) / 5, sum(values[-5:]) / 5
        print(f"Llama-style, 1 rank: lm loss {values[0]:.4f} -> {values[-1]:.4f} (first five {first:.4f}, "
              f"last five {last:.4f})")
        if not last < first - 0.2:
            failures.append(f"loss did not fall: first five {first:.4f}, last five {last:.4f}")

        tp2 = subprocess.run(launcher + ["-np", "2", binary] + LLAMA + ["--tensor-model-parallel-size", "2"],
                             capture_output=True, text=True, timeout=600)
        theirs = losses_of(tp2.stdout)
        if tp2.returncode != 0 or len(theirs) != ITERATIONS:
            failures.append(f"TP=2: exit {tp2.returncode}, {len(theirs)} log lines: {tp2.stderr[-2000:]}")
        else:
            same = sum(significant(a) == significant(b) for a, b in zip(losses, theirs))
            worst = max(abs(float(a) - float(b)) / float(b) for a, b in zip(losses, theirs))
            print(f"TP=2 vs 1 rank: {same}/{ITERATIONS} lm loss values equal to 5 significant digits, "
                  f"max relative difference {worst:.1e}")
            if same != ITERATIONS:
                failures.append(f"TP=2 differs from one rank: {same}/{ITERATIONS} equal to 5 digits")

        # Dropout is applied: without it the same run gives other losses (after the first update
        # at the latest; the first forward already differs).
        plain = subprocess.run([binary] + with_flags(LLAMA, ["--hidden-dropout", "0", "--attention-dropout", "0"]),
                               capture_output=True, text=True, timeout=600)
        plain_losses = losses_of(plain.stdout)
        differing = sum(a != b for a, b in zip(losses, plain_losses))
        print(f"dropout 0.1 vs 0: {differing}/{ITERATIONS} lm loss values differ")
        if plain.returncode != 0 or differing < ITERATIONS // 2:
            failures.append(f"dropout seems to have no effect: {differing} of {ITERATIONS} losses differ")

    # --add-qkv-bias --disable-bias-linear --use-rope-scaling: the same losses in every layout (the
    # bias split with the QKV rows under TP, the scaled frequencies at each CP chunk's positions).
    qwen2 = with_flags(LLAMA, ["--add-qkv-bias", "--use-rope-scaling", "--rope-scaling-factor", "4",
                               "--rotary-base", "500000", "--train-iters", "6", "--hidden-dropout", "0",
                               "--attention-dropout", "0"])
    runs = {"1 rank": [binary] + qwen2,
            "TP=2 + SP": launcher + ["-np", "2", binary] + qwen2 + ["--tensor-model-parallel-size", "2",
                                                                   "--sequence-parallel"],
            "CP=2": launcher + ["-np", "2", binary] + qwen2 + ["--context-parallel-size", "2"]}
    layouts = {name: losses_of(subprocess.run(command, capture_output=True, text=True, timeout=300).stdout)
               for name, command in runs.items()}
    print("qkv bias + RoPE scaling: " + "; ".join(f"{name}: {' '.join(v)}" for name, v in layouts.items()))
    # FP32; CP's attention sums its chunks in another order: the same losses to 5 significant digits.
    rounded = {name: [significant(v) for v in values] for name, values in layouts.items()}
    if len(layouts["1 rank"]) != 6 or any(v != rounded["1 rank"] for v in rounded.values()):
        failures.append(f"qkv bias + RoPE scaling: losses differ between layouts: {layouts}")

    for extra, expected in BAD:
        bad = subprocess.run([binary] + with_flags(LLAMA, extra), capture_output=True, text=True, timeout=60)
        error_lines = [line for line in bad.stderr.splitlines() if line.strip()]
        if bad.returncode == 0 or "iteration" in bad.stdout or len(error_lines) != 1 or expected not in error_lines[0]:
            failures.append(f"{extra}: exit {bad.returncode}, stderr {bad.stderr!r}, expected {expected!r}")
    expect_rejected_everywhere(launcher + ["-np", "4"], binary, LLAMA, BAD_MPI, 4, failures)
    return harness.finish(failures, f"{len(BAD) + len(BAD_MPI)} bad model-family command lines rejected")


if __name__ == "__main__":
    sys.exit(main())

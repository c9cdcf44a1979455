#!/usr/bin/python3
"""pretrain_gpt as a user runs it: the foundation acceptance run prints one Megatron-format log line
per iteration with a falling loss, and bad command lines end with one clear error naming the flag,
a non-zero exit, and no training output."""

import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


# The README's command (one Megatron also accepts: NullTokenizer's vocabulary is 512 + 1).
ACCEPTANCE = ("--device cpu --mock-data --tokenizer-type NullTokenizer --vocab-size 512 --num-layers 2 "
              "--hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 "
              "--micro-batch-size 2 --global-batch-size 8 --train-iters 50 --lr 1e-3 --log-interval 1 "
              "--log-throughput").split()

# Megatron's training_log line (megatron/training/training.py in Megatron-LM).
LOG_LINE = re.compile(
    r"^ \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \| "
    r"elapsed time per iteration \(ms\): [\d.]+ \| "
    r"(?:throughput per GPU \(TFLOP/s/GPU\): [\d.]+ \| tokens per GPU \(tokens/s/GPU\): [\d.]+ \| )?"
    r"learning rate: (\d\.\d{6}E[+-]\d\d) \| global batch size: +(\d+) \| lm loss: (\d\.\d{6}E[+-]\d\d) \| "
    r"loss scale: 1\.0 \| grad norm: [\d.]+ \| number of skipped iterations: +0 \| "
    r"number of nan iterations: +0 \|$")

BAD = [
    (["--no-such-flag", "1"], "--no-such-flag"),
    (["--num-attention-heads", "3"], "--hidden-size (64) must be divisible by --num-attention-heads (3)"),
    (["--global-batch-size", "7"], "--global-batch-size (7) must be divisible by --micro-batch-size (2)"),
    (["--seq-length", "64"], "--seq-length (64) must not exceed --max-position-embeddings (32)"),
    (["--hidden-size", "0"], "--hidden-size must be a positive integer (got 0)"),
    (["--tensor-model-parallel-size", "2"], "world size (1) must be divisible by --tensor-model-parallel-size (2)"),
]


# Under mpirun -np 4: (extra flags, piece of the single error message).
BAD_MPI = [
    (["--tensor-model-parallel-size", "3", "--num-attention-heads", "12", "--hidden-size", "96"],
     "world size (4) must be divisible by --tensor-model-parallel-size (3)"),
    (["--tensor-model-parallel-size", "4", "--num-attention-heads", "2", "--hidden-size", "64"],
     "--num-attention-heads (2) must be divisible by --tensor-model-parallel-size (4)"),
    (["--tensor-model-parallel-size", "4", "--hidden-size", "66", "--num-attention-heads", "4", "--kv-channels", "16"],
     "--hidden-size (66) must be divisible by --tensor-model-parallel-size (4)"),
    (["--tensor-model-parallel-size", "4", "--ffn-hidden-size", "90"],
     "--ffn-hidden-size (90) must be divisible by --tensor-model-parallel-size (4)"),
    (["--tensor-model-parallel-size", "4", "--sequence-parallel", "--seq-length", "30"],
     "--seq-length (30) must be divisible by --tensor-model-parallel-size (4) with --sequence-parallel"),
    (["--distributed-backend", "nccl"], "--distributed-backend nccl needs a GPU"),
]


def losses_of(stdout):
    return [m.group(6) for m in (LOG_LINE.match(l) for l in stdout.splitlines()) if m]


def check_mpi(binary, mpirun, failures):
    """TP=4 under mpirun prints the 1-rank losses once; bad layouts fail cleanly on every rank."""
    single = subprocess.run([binary] + ACCEPTANCE, capture_output=True, text=True, timeout=300)
    launcher = [mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none"]
    tp4 = subprocess.run(launcher + [binary] + ACCEPTANCE + ["--tensor-model-parallel-size", "4"],
                         capture_output=True, text=True, timeout=300)
    ours, reference = losses_of(tp4.stdout), losses_of(single.stdout)
    if tp4.returncode != 0 or len(ours) != 50:
        failures.append(f"TP=4 run: exit {tp4.returncode}, {len(ours)} log lines (expected 50, printed once)")
    else:
        worst = max(abs(float(a) - float(b)) / float(b) for a, b in zip(ours, reference))
        print(f"TP=4 vs 1 rank: 50 lm loss values, max relative difference {worst:.1e}, "
              f"identical printed values: {sum(a == b for a, b in zip(ours, reference))}/50")
        if worst > 5e-6:
            failures.append(f"TP=4 lm loss differs from 1 rank by {worst:.1e}")
    expect_rejected_everywhere(launcher, binary, ACCEPTANCE, BAD_MPI, 4, failures)
    print(f"{len(BAD_MPI)} bad layouts rejected under mpirun -np 4 with one message and a non-zero exit on every rank")


def expect_rejected_everywhere(launcher, binary, base, cases, ranks, failures):
    """Each (extra flags, expected text) case, run under `launcher` with `ranks` ranks, must print
    exactly one error line containing the text, exit non-zero on every rank and train nothing."""
    # Each rank reports its own exit status through the wrapper.
    wrapper = 'exec 3>&2; "$@"; echo "exit-status $?" >&3'
    for extra, expected in cases:
        run = subprocess.run(launcher + ["sh", "-c", wrapper, "sh", binary] + with_flags(base, extra),
                             capture_output=True, text=True, timeout=120)
        errors = [l for l in run.stderr.splitlines() if l.startswith("error:")]
        statuses = [l for l in run.stderr.splitlines() if l.startswith("exit-status")]
        if len(errors) != 1 or expected not in errors[0] or len(statuses) != ranks or any(
                s == "exit-status 0" for s in statuses) or "iteration" in run.stdout:
            failures.append(f"mpirun {extra}: errors {errors}, statuses {statuses}, expected {expected!r}")


def with_flags(base, extra):
    """Replaces or appends flags; a flag followed by another flag (or nothing) is a switch."""
    args, i = list(base), 0
    while i < len(extra):
        has_value = i + 1 < len(extra) and not extra[i + 1].startswith("--")
        if extra[i] in args and has_value:
            args[args.index(extra[i]) + 1] = extra[i + 1]
        elif extra[i] not in args:
            args += extra[i:i + 2] if has_value else [extra[i]]
        i += 2 if has_value else 1
    return args


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun")
    options = parser.parse_args()
    binary = options.binary
    failures = []

    run = subprocess.run([binary] + ACCEPTANCE, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        failures.append(f"acceptance run exited {run.returncode}: {run.stderr}")
    matches = [LOG_LINE.match(line) for line in run.stdout.splitlines() if line.startswith(" [")]
    if any("throughput per GPU (TFLOP/s/GPU)" not in line for line in run.stdout.splitlines()
           if line.startswith(" [")):
        failures.append("--log-throughput: an iteration line without the throughput field")
    if len(matches) != 50 or not all(matches):
        failures.append(f"expected 50 Megatron log lines, got {sum(1 for m in matches if m)} of {len(matches)}")
    else:
        iterations = [int(m.group(1)) for m in matches]
        losses = [float(m.group(6)) for m in matches]
        consumed = [int(m.group(3)) for m in matches]
        if iterations != list(range(1, 51)) or consumed != [8 * i for i in range(1, 51)]:
            failures.append("iteration or consumed-sample counts are wrong")
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        print(f"acceptance run: lm loss {losses[0]:.4f} -> {losses[-1]:.4f} (mean of first 5 {first:.4f}, last 5 {last:.4f})")
        if not last < first - 0.2:
            failures.append(f"loss did not fall: first five {first:.4f}, last five {last:.4f}")

    for extra, expected in BAD:
        bad = subprocess.run([binary] + with_flags(ACCEPTANCE, extra), capture_output=True, text=True, timeout=60)
        error_lines = [line for line in bad.stderr.splitlines() if line.strip()]
        if bad.returncode == 0 or "iteration" in bad.stdout or len(error_lines) != 1 or expected not in error_lines[0]:
            failures.append(f"{extra}: exit {bad.returncode}, stderr {bad.stderr!r}, expected {expected!r}")
    if options.mpirun:
        check_mpi(binary, options.mpirun, failures)
    return harness.finish(failures, f"{len(BAD)} bad command lines rejected")


if __name__ == "__main__":
    sys.exit(main())

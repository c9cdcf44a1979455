#!/usr/bin/python3
"""pretrain_gpt as a user runs it: the foundation acceptance run prints one Megatron-format log line
per iteration with a falling loss, and bad command lines end with one clear error naming the flag,
a non-zero exit, and no training output."""
import argparse
import re
import subprocess
import sys

ACCEPTANCE = ("--mock-data --vocab-size 512 --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
              "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 "
              "--train-iters 50 --lr 1e-3 --log-interval 1").split()

# Megatron's training_log line (see ../shared/reference/FACTS.md).
LOG_LINE = re.compile(
    r"^ \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \| "
    r"elapsed time per iteration \(ms\): [\d.]+ \| throughput per GPU \(TFLOP/s/GPU\): [\d.]+ \| "
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


def with_flags(base, extra):
    args = list(base)
    for i in range(0, len(extra), 2):
        if extra[i] in args:
            args[args.index(extra[i]) + 1] = extra[i + 1]
        else:
            args += extra[i:i + 2]
    return args


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    binary = parser.parse_args().binary
    failures = []

    run = subprocess.run([binary] + ACCEPTANCE, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        failures.append(f"acceptance run exited {run.returncode}: {run.stderr}")
    matches = [LOG_LINE.match(line) for line in run.stdout.splitlines() if "iteration " in line]
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
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print(f"PASSED ({len(BAD)} bad command lines rejected)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

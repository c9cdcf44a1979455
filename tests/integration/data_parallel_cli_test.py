#!/usr/bin/python3
"""The full grid as a user runs it, under mpirun on the CPU backend: TP=2 x PP=2 (interleaved) x DP=2
with sequence parallelism, the distributed optimizer and overlapped gradient reduction (FP32,
4 layers, global batch 16) prints the same lm loss values as one rank, and its start-up memory
report shows the optimizer state sharded over DP (moments = 2 x owned elements = the gradients'
bytes with DP=2, where an unsharded optimizer holds twice them). ZeRO-2 (Megatron-FSDP's
optim_grads) at DP=4 reports a quarter of one rank's gradients and moments plus two units' working
buffers; ZeRO-3 (optim_grads_params) a quarter of its parameters, gradients and moments plus two
gathered units and two gradient buffers. Issue 24's acceptance command (TP2 x PP2 (v2) x DP2 ZeRO-3
with SP, overlap, prefetch and offload) prints one rank's losses and reports 1/DP. Data-parallel
options that cannot run end with one message and a non-zero exit on every rank."""

import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from pretrain_cli_test import expect_rejected_everywhere, losses_of  # noqa: E402

ACCEPTANCE = ("--device cpu --mock-data --vocab-size 512 --num-layers 4 --hidden-size 64 --num-attention-heads 4 "
              "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 16 "
              "--train-iters 20 --lr 1e-3 --log-interval 1").split()
GRID = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
        "--num-layers-per-virtual-pipeline-stage", "1", "--use-distributed-optimizer", "--overlap-grad-reduce",
        "--sequence-parallel"]
ROW = re.compile(r"^\s+(gradients \(FP32\)|optimizer moments \(FP32\))\s+([\d.]+) /\s+([\d.]+)")

BAD = [
    (["--overlap-param-gather"], "--overlap-param-gather needs --use-distributed-optimizer"),
    (["--num-distributed-optimizer-instances", "2"],
     "--num-distributed-optimizer-instances 2 needs --use-distributed-optimizer"),
    (["--use-distributed-optimizer", "--num-distributed-optimizer-instances", "3"],
     "data-parallel size (4) must be divisible by --num-distributed-optimizer-instances (3)"),
    (["--use-megatron-fsdp", "--num-distributed-optimizer-instances", "2"],
     "--num-distributed-optimizer-instances 2 with --use-megatron-fsdp asks for hybrid sharding (HSDP)"),
    (["--global-batch-size", "12"], "--global-batch-size (12) must be divisible by --micro-batch-size (2) x "
                                    "data-parallel size (4)"),
    (["--ddp-bucket-size", "-5"], "--ddp-bucket-size must be a positive integer"),
    (["--use-megatron-fsdp", "--check-weight-hash-across-dp-replicas-interval", "5"],
     "each data-parallel rank holds another shard of them, so there are no replicas to compare"),
    (["--data-parallel-sharding-strategy", "optim_grads"], "takes effect only with --use-megatron-fsdp"),
    (["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "no_shard", "--use-distributed-optimizer"],
     "--use-distributed-optimizer shards the optimizer state, --data-parallel-sharding-strategy no_shard does not"),
    (["--optimizer-cpu-offload", "--use-precision-aware-optimizer"],
     "--optimizer-cpu-offload needs a distributed optimizer"),
    (["--use-distributed-optimizer", "--optimizer-cpu-offload", "--use-precision-aware-optimizer",
      "--optimizer-offload-fraction", "-0.1"], "--optimizer-offload-fraction must be in [0, 1] (got -0.1)"),
]
ZERO2 = ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads"]
# ZeRO-2's memory report, from one rank to DP=4: 4 layers of h = 64 (each 12h^2 + 13h = 49,984
# elements, 50,048 with 64-element alignment, the largest unit), a 512 x 64 word and 32 x 64
# position embedding.
REPORT = re.compile(r"^\s+(parameters|gradients \(FP32\)|optimizer moments \(FP32\)|host optimizer \(FP32\))"
                    r"\s+([\d.]+) /\s+([\d.]+)")
ZERO3 = ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"]
# Issue 24's acceptance command: TP2 x PP2 (v2) x DP2, ZeRO-3 with SP, overlapped reduction,
# prefetched gathers and the whole optimizer state on the host.
ZERO3_GRID = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
              "--num-virtual-stages-per-pipeline-rank", "2"] + ZERO3 + [
              "--sequence-parallel", "--overlap-grad-reduce", "--overlap-param-gather", "--optimizer-cpu-offload",
              "--use-precision-aware-optimizer"]
PARAMETERS_ON_RANK = re.compile(r"number of parameters on \(tensor, pipeline\) model parallel rank \(0, 0\): (\d+)")


def memory_rows(stdout):
    rows = {}
    for line in stdout.splitlines():
        match = REPORT.match(line)
        if match and match.group(1) not in rows:
            rows[match.group(1)] = (float(match.group(2)), float(match.group(3)))
    return rows


def memory_one_and_four(binary, mpirun, flags, name, failures):
    """The memory report's rows of a 2-iteration run on one rank and of one on DP=4 with `flags`
    (None, None when a run failed)."""
    short = [f for f in ACCEPTANCE]
    short[short.index("--train-iters") + 1] = "2"
    one = subprocess.run([binary] + short, capture_output=True, text=True, timeout=300)
    four = subprocess.run([mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none", binary] + short + flags,
                          capture_output=True, text=True, timeout=300)
    mine, theirs = memory_rows(four.stdout), memory_rows(one.stdout)
    if four.returncode != 0 or len(mine) != 3 or len(theirs) != 3:
        failures.append(f"{name} memory runs: exit {one.returncode}/{four.returncode}; {four.stderr[-600:]}")
        return None, None
    return mine, theirs


def zero2_memory(binary, mpirun, failures):
    """DP=4 under ZeRO-2 holds a quarter of one rank's gradients and moments, plus two working
    buffers of the largest unit (and their reduce-scatter results, a quarter of that)."""
    mine, theirs = memory_one_and_four(binary, mpirun, ZERO2, "ZeRO-2", failures)
    if mine is None:
        return
    unit_mb = 2 * 50048 * 4 * (1 + 1 / 4) / 2**20  # two working buffers and their quarter-size results
    gradients_one, gradients_four = theirs["gradients (FP32)"][1], mine["gradients (FP32)"]
    moments_one, moments_four = theirs["optimizer moments (FP32)"][1], mine["optimizer moments (FP32)"][1]
    print(f"memory report (MB per rank) DP=1 -> DP=4 ZeRO-2: gradients {gradients_one} -> {gradients_four[0]} shards "
          f"+ {gradients_four[1] - gradients_four[0]:.2f} working buffers (two units: {unit_mb:.2f}), optimizer "
          f"moments {moments_one} -> {moments_four}")
    # Within bucket padding (each unit padded to a multiple of 128 elements) and the report's rounding.
    if abs(gradients_four[0] - gradients_one / 4) > 0.02 or abs(moments_four - moments_one / 4) > 0.02:
        failures.append(f"ZeRO-2 at DP=4 does not hold a quarter of the gradients and moments: {mine} vs {theirs}")
    if abs(gradients_four[1] - gradients_four[0] - unit_mb) > 0.02:
        failures.append(f"ZeRO-2 working buffers {gradients_four[1] - gradients_four[0]:.2f} MB, expected {unit_mb:.2f}")


def zero3_memory(binary, mpirun, failures):
    """DP=4 under ZeRO-3 holds a quarter of one rank's parameters, gradients and moments, plus the
    working set: two gathered units' values (FP32 here) and ZeRO-2's two gradient buffers."""
    mine, theirs = memory_one_and_four(binary, mpirun, ZERO3, "ZeRO-3", failures)
    if mine is None:
        return
    unit_mb = 50048 * 4 / 2**20  # one layer, the largest unit, in FP32
    expected_set = 2 * unit_mb + 2 * unit_mb * (1 + 1 / 4)  # gathered values; gradients and their scatter
    whole_one = sum(theirs[row][1] for row in theirs)
    shards_four = sum(mine[row][0] for row in mine)
    set_four = sum(mine[row][1] - mine[row][0] for row in mine)
    print(f"memory report (MB per rank) DP=1 -> DP=4 ZeRO-3: parameters {theirs['parameters'][1]} -> "
          f"{mine['parameters'][0]} shards + {mine['parameters'][1] - mine['parameters'][0]:.2f} gathered units, "
          f"gradients {theirs['gradients (FP32)'][1]} -> {mine['gradients (FP32)'][0]} shards + "
          f"{mine['gradients (FP32)'][1] - mine['gradients (FP32)'][0]:.2f} buffers, moments "
          f"{theirs['optimizer moments (FP32)'][1]} -> {mine['optimizer moments (FP32)'][1]}; all three "
          f"{whole_one:.2f} -> {shards_four:.2f} + working set {set_four:.2f} (expected {expected_set:.2f})")
    # Within bucket padding (each unit padded to a multiple of 128 elements) and the report's rounding.
    if abs(shards_four - whole_one / 4) > 0.04:
        failures.append(f"ZeRO-3 at DP=4 does not hold a quarter of the parameters, gradients and moments: "
                        f"{mine} vs {theirs}")
    if abs(set_four - expected_set) > 0.04:
        failures.append(f"ZeRO-3 working set {set_four:.2f} MB, expected {expected_set:.2f}")


def zero3_acceptance(binary, mpirun, reference, failures):
    """Issue 24's acceptance command (FP32): the one-rank lm loss values to 5 significant digits (1e-5
    relative), and the memory report's parameters, gradients and (host) optimizer state at 1/DP of
    the rank's slice."""
    launcher = [mpirun, "-np", "8", "--oversubscribe", "--bind-to", "none"]
    run = subprocess.run(launcher + [binary] + ACCEPTANCE + ZERO3_GRID, capture_output=True, text=True, timeout=600)
    ours = losses_of(run.stdout)
    count = PARAMETERS_ON_RANK.search(run.stdout)
    rows = memory_rows(run.stdout)
    if run.returncode != 0 or len(ours) != 20 or not count or len(rows) != 4:
        failures.append(f"ZeRO-3 acceptance run: exit {run.returncode}, {len(ours)} log lines; {run.stderr[-800:]}")
        return
    worst = max(abs(float(a) - float(b)) / float(b) for a, b in zip(ours, reference))
    slice_mb = int(count.group(1)) * 4 / 2**20
    print(f"ZeRO-3 TP=2 x PP=2 (v=2) x DP=2, SP, overlap, offload 1.0 vs 1 rank: 20 lm loss values, max relative "
          f"difference {worst:.1e}; memory report (theoretical MB, first stage; slice {slice_mb:.3f} MB): "
          f"parameters {rows['parameters'][0]}, gradients {rows['gradients (FP32)'][0]}, host optimizer "
          f"{rows['host optimizer (FP32)'][0]}, device moments {rows['optimizer moments (FP32)'][0]}")
    if worst > 1e-5:
        failures.append(f"ZeRO-3 acceptance lm loss differs from 1 rank by {worst:.1e}")
    expected = {"parameters": slice_mb / 2, "gradients (FP32)": slice_mb / 2, "host optimizer (FP32)": slice_mb,
                "optimizer moments (FP32)": 0.0}
    for row, value in expected.items():
        if abs(rows[row][0] - value) > 0.011:
            failures.append(f"ZeRO-3 acceptance memory report: {row} {rows[row][0]} MB, expected {value:.3f} (1/DP)")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    options = parser.parse_args()
    failures = []

    single = subprocess.run([options.binary] + ACCEPTANCE, capture_output=True, text=True, timeout=300)
    launcher = [options.mpirun, "-np", "8", "--oversubscribe", "--bind-to", "none"]
    grid = subprocess.run(launcher + [options.binary] + ACCEPTANCE + GRID, capture_output=True, text=True, timeout=600)
    reference, ours = losses_of(single.stdout), losses_of(grid.stdout)
    if grid.returncode != 0 or len(ours) != 20 or len(reference) != 20:
        failures.append(f"3D run: exit {grid.returncode}, {len(ours)} log lines; {grid.stderr[-800:]}")
    else:
        worst = max(abs(float(a) - float(b)) / float(b) for a, b in zip(ours, reference))
        print(f"TP=2 x PP=2 (v=2) x DP=2, SP, distributed optimizer, overlapped reduction vs 1 rank: 20 lm loss "
              f"values, max relative difference {worst:.1e}, identical printed values "
              f"{sum(a == b for a, b in zip(ours, reference))}/20")
        if worst > 1e-5:
            failures.append(f"3D lm loss differs from 1 rank by {worst:.1e}")
    rows = {}
    for line in grid.stdout.splitlines():
        match = ROW.match(line)
        if match and match.group(1) not in rows:  # the first stage's rows come first
            rows[match.group(1)] = (float(match.group(2)), float(match.group(3)))
    if len(rows) != 2:
        failures.append(f"no memory report with gradient and moment rows in the 3D run's output")
    else:
        gradients, moments = rows["gradients (FP32)"][1], rows["optimizer moments (FP32)"][1]
        print(f"memory report, first stage: gradients {gradients} MB, optimizer moments {moments} MB (sharded over DP=2)")
        if not 0.9 <= moments / gradients <= 1.2:
            failures.append(f"optimizer moments {moments} MB are not half of unsharded (2 x {gradients} MB)")

    zero2_memory(options.binary, options.mpirun, failures)
    zero3_memory(options.binary, options.mpirun, failures)
    if len(reference) == 20:
        zero3_acceptance(options.binary, options.mpirun, reference, failures)
    expect_rejected_everywhere([options.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none"], options.binary,
                               ACCEPTANCE, BAD, 4, failures)
    return harness.finish(failures, f"{len(BAD)} bad data-parallel command lines rejected on every rank")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""The interleaved schedule's order of (chunk, microbatch) steps with Megatron's
--microbatch-group-size-per-virtual-pipeline-stage, against an independent reimplementation of
Megatron-LM's forward_backward_pipelining_with_interleaving (megatron/core/pipeline_parallel/
schedules.py: get_schedule_table, get_pp_rank_microbatches' warm-up, the backward's chunk order and
its per-chunk first-in-first-out inputs). pipeline_schedule prints each rank's steps for a layout;
every rank's compute order, training and forward only, must be Megatron's, and the simulation that
pipeline_schedule runs (transfers matched, no deadlock) must succeed. Group sizes that Megatron
refuses (outside [PP, M], or a last group of fewer than PP microbatches) end with one error line."""

import argparse
import re
import subprocess
import sys

# (p, v, m, group): group = p (Megatron's default, also given explicitly), groups larger than p
# that divide m, and a last group of the m % group left over (at least p).
LAYOUTS = [(2, 2, 5, 3), (2, 2, 4, 2), (2, 2, 4, 4), (4, 3, 10, 5), (4, 2, 8, 4), (4, 2, 9, 5), (3, 2, 7, 4),
           (2, 3, 7, 7), (4, 3, 12, 6), (3, 4, 6, 3), (4, 2, 16, 6)]
DEFAULT_GROUP = [(4, 2, 8), (2, 3, 6)]  # without the flag: groups of p
# (p, v, m, group, piece of the error).
REFUSED = [(4, 2, 10, 3, "must range in [--pipeline-model-parallel-size (4), the number of microbatches (10"),
           (4, 2, 8, 9, "must range in [--pipeline-model-parallel-size (4), the number of microbatches (8"),
           (4, 2, 11, 5, "the remainder of the number of microbatches (11) divided by "
                         "--microbatch-group-size-per-virtual-pipeline-stage (5) must be 0 or at least "
                         "--pipeline-model-parallel-size (4), but it is 1")]


def schedule_table(m, v, group):
    """Megatron's get_schedule_table: (microbatch, chunk) per virtual microbatch."""
    table = []
    for first in range(0, m, group):
        last = m if first + group >= m else first + group
        table += [(mb, chunk) for chunk in range(v) for mb in range(first, last)]
    return table


def megatron_order(p, v, m, group, rank, forward_only=False):
    table = schedule_table(m, v, group)
    total = m * v
    warmup = total if forward_only else min((p - rank - 1) * 2 + (v - 1) * group, total)
    order = []
    backward_taken = [0] * v  # Megatron pops each chunk's stored inputs first in, first out

    def forward(k):
        mb, chunk = table[k]
        order.append(f"F c{chunk} mb{mb}")

    def backward(k):
        chunk = v - 1 - table[k % total][1]
        order.append(f"B c{chunk} mb{backward_taken[chunk]}")
        backward_taken[chunk] += 1

    for k in range(warmup):
        forward(k)
    for k in range(total - warmup):
        forward(warmup + k)
        backward(k)
    if not forward_only:
        for k in range(total - warmup, total):
            backward(k)
    return order


def program_orders(tool, p, v, m, group, forward_only):
    command = [tool, "--pipeline-model-parallel-size", str(p), "--num-layers-per-virtual-pipeline-stage", "1",
               "--num-layers", str(p * v), "--num-microbatches", str(m)]
    if group is not None:
        command += ["--microbatch-group-size-per-virtual-pipeline-stage", str(group)]
    if forward_only:
        command.append("--forward-only")
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed: {result.stderr.strip()}")
    orders, rank = {}, None
    for line in result.stdout.splitlines():
        header = re.match(r"rank (\d+) \(", line)
        if header:
            rank = int(header.group(1))
            orders[rank] = []
            continue
        step = re.match(r"\s+\d+\s+([FB]) c(\d+) mb(\d+)$", line)
        if step and rank is not None:
            orders[rank].append(f"{step.group(1)} c{step.group(2)} mb{step.group(3)}")
    return orders


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tool", required=True, help="the pipeline_schedule binary")
    args = parser.parse_args()
    failures, compared = [], 0
    cases = [(p, v, m, g, g) for p, v, m, g in LAYOUTS] + [(p, v, m, None, p) for p, v, m in DEFAULT_GROUP]
    for p, v, m, flag, group in cases:
        for forward_only in (False, True):
            name = f"p={p} v={v} m={m} group={flag}{' forward only' if forward_only else ''}"
            try:
                orders = program_orders(args.tool, p, v, m, flag, forward_only)
            except AssertionError as error:
                failures.append(f"{name}: {error}")
                continue
            for rank in range(p):
                expected = megatron_order(p, v, m, group, rank, forward_only)
                if orders.get(rank) != expected:
                    failures.append(f"{name} rank {rank}:\n  program  {orders.get(rank)}\n  megatron {expected}")
                compared += 1
    for p, v, m, group, message in REFUSED:
        command = [args.tool, "--pipeline-model-parallel-size", str(p), "--num-layers-per-virtual-pipeline-stage",
                   "1", "--num-layers", str(p * v), "--num-microbatches", str(m),
                   "--microbatch-group-size-per-virtual-pipeline-stage", str(group)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        lines = result.stderr.strip().splitlines()
        if result.returncode == 0 or len(lines) != 1 or message not in lines[0]:
            failures.append(f"p={p} v={v} m={m} group={group}: expected one error with '{message}', got "
                            f"exit {result.returncode}: {result.stderr.strip()}")
    if failures:
        print("\n".join(failures))
        print(f"FAILED: {len(failures)} mismatches")
        return 1
    print(f"PASSED: {compared} rank orders equal to Megatron's ({len(cases)} layouts, training and forward only); "
          f"{len(REFUSED)} refusals")
    return 0


if __name__ == "__main__":
    sys.exit(main())

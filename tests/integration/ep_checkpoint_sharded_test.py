#!/usr/bin/python3
"""Checkpoints under expert parallelism with the experts' optimizer state sharded over expert data
parallelism (docs/CHECKPOINTS.md, issue 41; ep_checkpoint_test.py runs without the distributed
optimizer) on the CPU backend, the DeepSeek-style MoE model of moe_checkpoint_test.py (8 experts,
the expert bias moving, a shared expert, a dense first layer):

  * EP4 x DP8 (8 ranks: expert data parallelism 2) with the distributed optimizer, 10 iterations
    saving at 5 and 10: its losses within 1e-5 (relative) of one rank's; 5 + exit + load + 5 gives
    identical printed losses and a final checkpoint identical bit for bit;
  * its checkpoint at 5 resumed at EP2 (2 ranks, expert data parallelism 1) and on one rank: the
    losses of 6..10 within 1e-5 of the uninterrupted runs';
  * each expert tensor written once: ckpt_tool inspect lists every expert weight of the EP4 x DP8
    checkpoint in its own pieces only (fc1's two SwiGLU row blocks, fc2 whole), however many expert
    data-parallel replicas hold it; of an EP2 x TP2 checkpoint (ETP 2) in the experts' two
    tensor-parallel slices, which one rank loads and continues with the losses of its own
    uninterrupted run."""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from checkpoint_test import (Checks, Runner, compare_bitwise, iteration_dir, loaded_iteration, losses,  # noqa: E402
                             same_losses, tracker)
from moe_checkpoint_test import BASE as MOE_BASE, EXPERTS, MOE_LAYERS  # noqa: E402

# The MoE model with a global batch of 8 (8 data-parallel ranks of one microbatch each).
BASE = [flag for flag in MOE_BASE]
BASE[BASE.index("--global-batch-size") + 1] = "8"
EP4 = ["--expert-model-parallel-size", "4", "--use-distributed-optimizer", "--moe-token-dispatcher-type", "alltoall"]
EP2 = ["--expert-model-parallel-size", "2", "--use-distributed-optimizer"]
EP2_TP2 = ["--expert-model-parallel-size", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"]
INSPECT_LINE = re.compile(r"^  (\S+) (\[[^\]]*\]) (\S+) pieces=(\d+)$")


def relative(ours, reference, iterations):
    worst = 0.0
    for i in iterations:
        if i not in ours or i not in reference:
            return float("inf")
        worst = max(worst, abs(float(ours[i]) - float(reference[i])) / abs(float(reference[i])))
    return worst


def pieces(ckpt_tool, checks, checkpoint):
    """{tensor: pieces} from ckpt_tool inspect."""
    result = subprocess.run([ckpt_tool, "inspect", checkpoint], capture_output=True, text=True, timeout=120)
    if not checks.expect(result.returncode == 0, f"ckpt_tool inspect exit {result.returncode}: {result.stderr[-400:]}"):
        return {}
    listed = {}
    for line in result.stdout.splitlines():
        match = INSPECT_LINE.match(line)
        if match:
            listed[match.group(1)] = int(match.group(4))
    return listed


def expert_pieces(etp):
    """{expert weight: its pieces when each is written once}: SwiGLU's fc1 [gate; up] is two row
    blocks of each ETP slice, fc2 one column slice."""
    return {f"model/decoder.layers.{layer}.mlp.experts.linear_fc{fc}.weight{e}": (2 if fc == 1 else 1) * etp
            for layer in MOE_LAYERS for fc in (1, 2) for e in range(EXPERTS)}


def run_full(runner, checks, label, ranks, flags, save):
    status, out, err = runner.run(label, ranks, BASE + flags + ["--save", save, "--save-interval", "5"])
    checks.expect(status == 0 and tracker(save) == "10", f"{label}: exit {status}, tracker {tracker(save)}: {err[-600:]}")
    return losses(out)


def continue_from(runner, checks, label, ranks, flags, source, save):
    status, out, err = runner.run(label, ranks, BASE + flags + ["--load", source, "--ckpt-step", "5", "--save", save])
    checks.expect(status == 0 and loaded_iteration(out) == 5, f"{label}: exit {status}, loaded "
                                                              f"{loaded_iteration(out)}: {err[-600:]}")
    return losses(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--ckpt-tool", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    options = parser.parse_args()
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    work = os.path.abspath(options.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    checks = Checks()
    runner = Runner(os.path.abspath(options.binary), options.mpirun, work)
    ckpt_tool = os.path.abspath(options.ckpt_tool)
    start = time.time()
    path = lambda name: os.path.join(work, name)  # noqa: E731

    one = run_full(runner, checks, "1rank", 1, [], path("1rank"))
    ep4 = run_full(runner, checks, "ep4_dp8", 8, EP4, path("ep4_dp8"))
    worst = relative(ep4, one, range(1, 11))
    checks.expect(worst <= 1e-5, f"EP4 x DP8 losses {[ep4.get(i) for i in range(1, 11)]} vs one rank's "
                                 f"{[one.get(i) for i in range(1, 11)]}")
    print(f"  EP4 x DP8 against one rank: losses 1..10 max relative difference {worst:.2e}")

    # Bit-exact resume under EP.
    split = path("ep4_dp8_split")
    status, first, err = runner.run("ep4_dp8_first5", 8, BASE + EP4 + ["--save", split, "--exit-interval", "5"])
    checks.expect(status == 0 and tracker(split) == "5", f"EP4 x DP8 --exit-interval 5: exit {status}: {err[-600:]}")
    status, second, err = runner.run("ep4_dp8_resume", 8, BASE + EP4 + ["--load", split, "--save", split])
    checks.expect(status == 0 and loaded_iteration(second) == 5, f"EP4 x DP8 resume: exit {status}: {err[-600:]}")
    same_losses(checks, "EP4 x DP8 first 5", losses(first), ep4, range(1, 6))
    same_losses(checks, "EP4 x DP8 resumed", losses(second), ep4, range(6, 11))
    problems, count = compare_bitwise(iteration_dir(path("ep4_dp8"), 10), iteration_dir(split, 10))
    checks.failures += [f"EP4 x DP8 final checkpoints: {p}" for p in problems]
    print(f"  EP4 x DP8 resumed at 5: {count} tensors of iter_0000010 "
          f"{'identical bit for bit' if not problems else 'DIFFER'}")

    # Resharded: EP2 (2 ranks) and one rank from the EP4 x DP8 checkpoint at 5.
    for label, ranks, flags in (("ep2", 2, EP2), ("1rank_from_ep4", 1, [])):
        ours = continue_from(runner, checks, label, ranks, flags, path("ep4_dp8"), path(label))
        for reference_label, reference in (("EP4 x DP8", ep4), ("one rank", one)):
            worst = relative(ours, reference, range(6, 11))
            checks.expect(worst <= 1e-5, f"{label} from EP4 x DP8 at 5: losses 6..10 "
                                         f"{[ours.get(i) for i in range(6, 11)]} vs the {reference_label} run's "
                                         f"{[reference.get(i) for i in range(6, 11)]}")
        print(f"  EP4 x DP8 at 5 -> {label}: losses 6..10 within {relative(ours, one, range(6, 11)):.2e} of one rank's")

    # Each expert tensor once: its row blocks under EP4 x DP8 (ETP 1) written by one of the two
    # expert data-parallel replicas, its ETP slices under EP2 x TP2 (ETP 2).
    listed = pieces(ckpt_tool, checks, iteration_dir(path("ep4_dp8"), 10))
    wrong = [(k, listed.get(k), n) for k, n in expert_pieces(1).items() if listed.get(k) != n]
    checks.expect(not wrong, f"EP4 x DP8 checkpoint: (expert tensor, pieces, expected) {wrong[:4]}")
    tp_losses = run_full(runner, checks, "ep2_tp2", 4, EP2_TP2, path("ep2_tp2"))
    listed = pieces(ckpt_tool, checks, iteration_dir(path("ep2_tp2"), 10))
    wrong = [(k, listed.get(k), n) for k, n in expert_pieces(2).items() if listed.get(k) != n]
    checks.expect(not wrong, f"EP2 x TP2 checkpoint: (expert tensor, pieces, expected ETP slices) {wrong[:4]}")
    ours = continue_from(runner, checks, "1rank_from_ep2_tp2", 1, [], path("ep2_tp2"), path("1rank_from_ep2_tp2"))
    worst = relative(ours, tp_losses, range(6, 11))
    checks.expect(worst <= 1e-5, f"one rank from EP2 x TP2 at 5: losses 6..10 {[ours.get(i) for i in range(6, 11)]} "
                                 f"vs EP2 x TP2's {[tp_losses.get(i) for i in range(6, 11)]}")
    print(f"  expert tensors written once (EP4 x DP8: their own pieces; EP2 x TP2: 2 ETP slices); EP2 x TP2 at 5 -> one "
          f"rank: losses 6..10 within {worst:.2e}")
    print(f"{runner.count} runs, {time.time() - start:.0f} s")
    return harness.finish(checks.failures)


if __name__ == "__main__":
    sys.exit(main())

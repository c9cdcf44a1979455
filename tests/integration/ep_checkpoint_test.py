#!/usr/bin/python3
"""Checkpoints under expert parallelism (issue 41) on the CPU backend, with moe_checkpoint_test.py's
DeepSeek-style model (8 experts, sigmoid group-limited routing, the expert bias moving, seq_aux_loss,
z-loss, a shared expert, a dense first layer):

  * EP4 x DP2 (8 ranks: world 8 = DP 8, expert grid EP 4 x EDP 2, alltoall dispatcher): bit-exact
    resume, 10 iterations straight against 5 + exit + load + 5 (identical printed losses, the final
    checkpoints identical bit for bit in every tensor);
  * its checkpoint at 5 continued at EP2 (4 ranks, allgather) and on one rank: losses 6..10 within
    1e-5 (relative) of the uninterrupted EP4 x DP2 run's, and the final expert bias equal to it;
  * every expert under its global name: each MoE layer's linear_fc1.weight<e> of the EP4 x DP2
    checkpoint present with one whole expert's shape, for all E experts (that each is written by one
    rank only is ep_checkpoint_sharded_test.py's ckpt_tool check)."""

import argparse
import os
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from checkpoint_test import (Checks, Runner, compare_bitwise, iteration_dir, loaded_iteration, losses,  # noqa: E402
                             same_losses, state_tensors, tracker)
from moe_checkpoint_test import BASE as MOE_BASE, EXPERTS, HIDDEN, MOE_FFN, MOE_LAYERS, expert_bias_key  # noqa: E402

# Eight data-parallel replicas need a global batch of at least 8.
BASE = list(MOE_BASE)
BASE[BASE.index("--global-batch-size") + 1] = "8"
EP4_DP2 = ["--expert-model-parallel-size", "4", "--moe-token-dispatcher-type", "alltoall"]
EP2 = ["--expert-model-parallel-size", "2"]


def run_ok(runner, checks, name, ranks, flags, save, expect_tracker):
    status, out, err = runner.run(name, ranks, BASE + flags)
    ok = checks.expect(status == 0 and tracker(save) == expect_tracker,
                       f"{name}: exit {status}, tracker {tracker(save)}: {err[-600:]}")
    return out if ok else None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
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
    start = time.time()
    full_dir, split_dir = os.path.join(work, "ep4dp2_full"), os.path.join(work, "ep4dp2_split")
    full_out = run_ok(runner, checks, "ep4dp2_full", 8, EP4_DP2 + ["--save", full_dir, "--save-interval", "5"],
                      full_dir, "10")
    first_out = run_ok(runner, checks, "ep4dp2_first5", 8, EP4_DP2 + ["--save", split_dir, "--exit-interval", "5"],
                       split_dir, "5")
    second_out = run_ok(runner, checks, "ep4dp2_resume", 8, EP4_DP2 + ["--load", split_dir, "--save", split_dir],
                        split_dir, "10")
    if not (full_out and first_out and second_out):
        return harness.finish(checks.failures)
    full = losses(full_out)
    checks.expect(loaded_iteration(second_out) == 5, f"resumed run loaded {loaded_iteration(second_out)}")
    same_losses(checks, "EP4 x DP2 first 5", losses(first_out), full, range(1, 6))
    same_losses(checks, "EP4 x DP2 resumed", losses(second_out), full, range(6, 11))
    problems, count = compare_bitwise(iteration_dir(full_dir, 10), iteration_dir(split_dir, 10))
    checks.failures += [f"EP4 x DP2 final checkpoints: {p}" for p in problems]
    print(f"  EP4 x DP2: resume bit-exact over {count} tensors" if not problems else "  EP4 x DP2: checkpoints DIFFER")
    # Every expert once, whole, under its global name.
    saved = state_tensors(iteration_dir(full_dir, 10))
    for layer in MOE_LAYERS:
        for e in range(EXPERTS):
            key = f"model/decoder.layers.{layer}.mlp.experts.linear_fc1.weight{e}"
            checks.expect(key in saved and saved[key].shape == (2 * MOE_FFN, HIDDEN),
                          f"EP4 x DP2 checkpoint: {key} is {saved[key].shape if key in saved else 'absent'}")
    # Resharded: the checkpoint at 5 continued at EP2 and on one rank.
    for name, ranks, flags in (("ep2", 4, EP2), ("one_rank", 1, [])):
        save = os.path.join(work, f"reshard_{name}")
        out = run_ok(runner, checks, f"reshard_{name}", ranks,
                     flags + ["--load", full_dir, "--ckpt-step", "5", "--save", save], save, "10")
        if not out:
            continue
        checks.expect(loaded_iteration(out) == 5, f"{name}: loaded {loaded_iteration(out)}")
        ours, worst = losses(out), 0.0
        for i in range(6, 11):
            if checks.expect(i in ours and i in full, f"{name}: no loss at iteration {i}"):
                worst = max(worst, abs(float(ours[i]) - float(full[i])) / float(full[i]))
        checks.expect(worst <= 1e-5, f"EP4 x DP2 at 5 -> {name}: losses 6..10 {[ours.get(i) for i in range(6, 11)]} "
                                     f"vs uninterrupted {[full.get(i) for i in range(6, 11)]}")
        final = state_tensors(iteration_dir(save, 10))
        for layer in MOE_LAYERS:
            key = expert_bias_key(layer)
            checks.expect(key in final and np.array_equal(final[key], saved.get(key)),
                          f"{name}: {key} at 10 differs from the uninterrupted run's")
        print(f"  EP4 x DP2 -> {name} at 5: losses 6..10 max relative difference {worst:.2e}")
    print(f"{runner.count} runs, {time.time() - start:.0f} s")
    return harness.finish(checks.failures)


if __name__ == "__main__":
    sys.exit(main())

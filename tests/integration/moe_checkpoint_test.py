#!/usr/bin/python3
"""Checkpoints of a mixture-of-experts model (docs/CHECKPOINTS.md, issue 40) on the CPU backend: the
DeepSeek-style model (sigmoid scores with group-limited routing, the expert bias moving at rate 1e-2,
seq_aux_loss, z-loss, a shared expert, a dense first layer by --moe-layer-freq, SwiGLU, RMSNorm,
RoPE, no linear biases).

  * bit-exact resume, one rank, TP=2 + SP x PP=2 and TP=2 + SP x DP=2 with the distributed optimizer
    (4 ranks each): 10 iterations in one process against
    5 + exit + load + 5: identical printed losses, and the two final checkpoints identical bit for
    bit in every tensor, the expert bias of every MoE layer included (it is nonzero: it moved, so a
    resume that dropped it would start it from zero and end elsewhere);
  * resharding: the TP=2 + SP x PP=2 run's checkpoint at iteration 5 loaded on one rank and
    continued to 10: losses within 1e-5 (relative) of the saving layout's uninterrupted run and of
    the one-rank uninterrupted run; its final checkpoint's expert bias equal to the one-rank run's;
  * the checkpoints hold Megatron-Core's names: router weight [E, h], grouped experts
    mlp.experts.linear_fc1.weight<e> [2 f, h] and linear_fc2.weight<e> [h, f], shared experts,
    and mlp.router.expert_bias [E] float32 for the MoE layers only (none for the dense layer 0);
    `ckpt_tool inspect` lists them with these shapes, the expert bias as one piece (TP rank 0 writes
    the replicated tensor once)."""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from checkpoint_test import (Checks, Runner, compare_bitwise, iteration_dir, loaded_iteration, losses,  # noqa: E402
                             same_losses, state_tensors, tracker)

EXPERTS, HIDDEN, MOE_FFN, SHARED_FFN, LAYERS = 8, 64, 32, 64, 4
MOE_LAYERS = [1, 2, 3]  # --moe-layer-freq ([0]*1+[1]*3): layer 0 is dense
BASE = ["--device", "cpu", "--mock-data", "--num-layers", str(LAYERS), "--hidden-size", str(HIDDEN),
        "--num-attention-heads", "4", "--seq-length", "16", "--max-position-embeddings", "16", "--vocab-size", "256",
        "--micro-batch-size", "1", "--global-batch-size", "4", "--lr", "2e-3", "--log-interval", "1",
        "--eval-iters", "0", "--train-iters", "10",
        "--num-experts", str(EXPERTS), "--moe-router-topk", "2", "--moe-router-score-function", "sigmoid",
        "--moe-router-num-groups", "4", "--moe-router-group-topk", "2", "--moe-router-enable-expert-bias",
        "--moe-router-bias-update-rate", "1e-2", "--moe-router-load-balancing-type", "seq_aux_loss",
        "--moe-aux-loss-coeff", "1e-3", "--moe-z-loss-coeff", "1e-3", "--moe-router-topk-scaling-factor", "2.5",
        "--moe-shared-expert-intermediate-size", str(SHARED_FFN), "--moe-ffn-hidden-size", str(MOE_FFN),
        "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope", "--disable-bias-linear",
        "--moe-layer-freq", "([0]*1+[1]*3)"]
TP2PP2 = ["--tensor-model-parallel-size", "2", "--sequence-parallel", "--pipeline-model-parallel-size", "2"]
# TP2+SP x DP2 with the distributed optimizer: the replicated expert bias is written by one data-parallel
# replica (the fully parallel save's choice) and read back by both.
TP2DP2 = ["--tensor-model-parallel-size", "2", "--sequence-parallel", "--use-distributed-optimizer"]
LAYOUTS = {"1rank": (1, []), "tp2sp_pp2": (4, TP2PP2), "tp2sp_dp2_zero1": (4, TP2DP2)}


def expert_bias_key(layer):
    return f"model/decoder.layers.{layer}.mlp.router.expert_bias"


def resume(runner, checks, work, name):
    """10 iterations straight (saving at 5 and 10) against 5 + exit + load + 5: returns the
    uninterrupted run's directory and losses."""
    ranks, flags = LAYOUTS[name]
    full_dir, split_dir = os.path.join(work, f"{name}_full"), os.path.join(work, f"{name}_split")
    status, full_out, err = runner.run(f"{name}_full", ranks, BASE + flags + ["--save", full_dir,
                                                                               "--save-interval", "5"])
    if not checks.expect(status == 0 and tracker(full_dir) == "10", f"{name}: uninterrupted run exit {status}: "
                                                                    f"{err[-600:]}"):
        return None, None
    status, first_out, err = runner.run(f"{name}_first5", ranks, BASE + flags + ["--save", split_dir,
                                                                                  "--exit-interval", "5"])
    checks.expect(status == 0 and tracker(split_dir) == "5", f"{name}: --exit-interval 5 run exit {status}, tracker "
                                                            f"{tracker(split_dir)}: {err[-600:]}")
    status, second_out, err = runner.run(f"{name}_resume", ranks, BASE + flags + ["--load", split_dir,
                                                                                   "--save", split_dir])
    if not checks.expect(status == 0, f"{name}: resumed run exit {status}: {err[-600:]}"):
        return None, None
    checks.expect(loaded_iteration(second_out) == 5, f"{name}: resumed run loaded {loaded_iteration(second_out)}")
    full, first, second = losses(full_out), losses(first_out), losses(second_out)
    checks.expect(sorted(second) == list(range(6, 11)), f"{name}: resumed run logged iterations {sorted(second)}")
    same_losses(checks, f"{name} first 5", first, full, range(1, 6))
    same_losses(checks, f"{name} resumed", second, full, range(6, 11))
    problems, count = compare_bitwise(iteration_dir(full_dir, 10), iteration_dir(split_dir, 10))
    checks.failures += [f"{name} final checkpoints: {p}" for p in problems]
    # The expert bias must have moved (or a dropped one could pass) and be in the compared tensors.
    saved = state_tensors(iteration_dir(full_dir, 10))
    at5 = state_tensors(iteration_dir(split_dir, 5))
    for layer in MOE_LAYERS:
        key = expert_bias_key(layer)
        if not checks.expect(key in saved and key in at5, f"{name}: checkpoint lacks {key}"):
            continue
        checks.expect(saved[key].shape == (EXPERTS,) and saved[key].dtype == np.float32,
                      f"{name}: {key} is {saved[key].shape} {saved[key].dtype}, expected ({EXPERTS},) float32")
        checks.expect(np.abs(at5[key]).max() > 0 and not np.array_equal(at5[key], saved[key]),
                      f"{name}: {key} did not move (iteration 5 {at5[key]}, 10 {saved[key]})")
    checks.expect(expert_bias_key(0) not in saved, f"{name}: the dense layer 0 has an expert bias in the checkpoint")
    identical = sum(second.get(i) == full.get(i) for i in range(6, 11))
    print(f"  {name}: losses 6..10 identical {identical}/5 (iteration 10: {second.get(10)}); {count} tensors of "
          f"iter_0000010 {'identical bit for bit' if not problems else 'DIFFER'}; layer 3 expert bias at 10: "
          f"{saved.get(expert_bias_key(3))}")
    return full_dir, full


def reshard(runner, checks, work, source_dir, source_losses, one_rank_dir, one_rank_losses):
    """The TP2+SP x PP2 checkpoint at 5 continued on one rank to 10."""
    save = os.path.join(work, "reshard_1rank")
    status, out, err = runner.run("reshard_1rank", 1, BASE + ["--load", source_dir, "--ckpt-step", "5",
                                                              "--save", save])
    if not checks.expect(status == 0 and tracker(save) == "10", f"reshard to one rank: exit {status}: {err[-600:]}"):
        return
    checks.expect(loaded_iteration(out) == 5, f"reshard to one rank: loaded {loaded_iteration(out)}")
    ours = losses(out)
    worst = {}
    for label, reference in (("TP2+SP x PP2", source_losses), ("one rank", one_rank_losses)):
        worst[label] = 0.0
        for i in range(6, 11):
            if checks.expect(i in ours and i in reference, f"reshard: no loss at iteration {i} ({label})"):
                worst[label] = max(worst[label], abs(float(ours[i]) - float(reference[i])) / float(reference[i]))
        checks.expect(worst[label] <= 1e-5, f"reshard to one rank: losses 6..10 {[ours.get(i) for i in range(6, 11)]} "
                                            f"vs the {label} uninterrupted run's "
                                            f"{[reference.get(i) for i in range(6, 11)]}")
    saved, reference = state_tensors(iteration_dir(save, 10)), state_tensors(iteration_dir(one_rank_dir, 10))
    for layer in MOE_LAYERS:
        key = expert_bias_key(layer)
        checks.expect(key in saved and key in reference and np.array_equal(saved[key], reference[key]),
                      f"reshard to one rank: {key} at 10 {saved.get(key)} differs from the one-rank run's "
                      f"{reference.get(key)}")
    print(f"  TP2+SP x PP2 -> one rank at 5: losses 6..10 max relative difference {worst}; expert bias at 10 "
          f"equal to the one-rank run's")


INSPECT_LINE = re.compile(r"^  (\S+) (\[[^\]]*\]) (\S+) pieces=(\d+)$")


def inspect(ckpt_tool, checks, checkpoint):
    """ckpt_tool inspect of the TP2+SP x PP2 checkpoint: Megatron-Core's MoE names and shapes."""
    result = subprocess.run([ckpt_tool, "inspect", checkpoint], capture_output=True, text=True, timeout=120)
    if not checks.expect(result.returncode == 0, f"ckpt_tool inspect exit {result.returncode}: {result.stderr[-400:]}"):
        return
    listed = {}
    for line in result.stdout.splitlines():
        match = INSPECT_LINE.match(line)
        if match:
            listed[match.group(1)] = (match.group(2), match.group(3), int(match.group(4)))
    expected = {}
    for layer in MOE_LAYERS:
        mlp = f"model/decoder.layers.{layer}.mlp"
        expected[f"{mlp}.router.weight"] = f"[{EXPERTS}, {HIDDEN}]"
        expected[f"{mlp}.router.expert_bias"] = f"[{EXPERTS}]"
        for e in range(EXPERTS):
            expected[f"{mlp}.experts.linear_fc1.weight{e}"] = f"[{2 * MOE_FFN}, {HIDDEN}]"
            expected[f"{mlp}.experts.linear_fc2.weight{e}"] = f"[{HIDDEN}, {MOE_FFN}]"
        expected[f"{mlp}.shared_experts.linear_fc1.weight"] = f"[{2 * SHARED_FFN}, {HIDDEN}]"
        expected[f"{mlp}.shared_experts.linear_fc2.weight"] = f"[{HIDDEN}, {SHARED_FFN}]"
    wrong = [(k, listed.get(k, ("absent",))[0], v) for k, v in expected.items() if listed.get(k, ("",))[0] != v]
    checks.expect(not wrong, f"ckpt_tool inspect: (tensor, listed shape, expected) {wrong[:4]}")
    for layer in MOE_LAYERS:
        entry = listed.get(expert_bias_key(layer))
        checks.expect(entry is not None and entry[1:] == ("float32", 1),
                      f"ckpt_tool inspect: {expert_bias_key(layer)} listed as {entry}, expected float32 in one piece")
    dense = [k for k in listed if k.startswith("model/decoder.layers.0.mlp.") and ("router" in k or "experts" in k)]
    checks.expect(not dense and "model/decoder.layers.0.mlp.linear_fc1.weight" in listed,
                  f"ckpt_tool inspect: the dense layer 0 lists MoE tensors {dense[:3]} or lacks its linear_fc1")
    print(f"  ckpt_tool inspect: {len(expected)} MoE tensors listed with Megatron-Core's names and shapes, "
          f"e.g. {expert_bias_key(1)} {listed.get(expert_bias_key(1))}")


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
    start = time.time()
    one_dir, one_losses = resume(runner, checks, work, "1rank")
    grid_dir, grid_losses = resume(runner, checks, work, "tp2sp_pp2")
    resume(runner, checks, work, "tp2sp_dp2_zero1")
    if one_dir and grid_dir:
        reshard(runner, checks, work, grid_dir, grid_losses, one_dir, one_losses)
    if grid_dir:
        inspect(os.path.abspath(options.ckpt_tool), checks, iteration_dir(grid_dir, 10))
    print(f"{runner.count} runs, {time.time() - start:.0f} s")
    return harness.finish(checks.failures)


if __name__ == "__main__":
    sys.exit(main())

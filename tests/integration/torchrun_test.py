#!/usr/bin/python3
"""torchrun launches (issue 43): pretrain_gpt started by torchrun (python3 -m torch.distributed.run
--no-python, Debian's python3-torch, its static rendezvous) prints the same lm loss at every
iteration as the same command under `mpirun -np N`, to the printed digit, and as one process
within 1e-5 (relative); the argument dump names the communicator each launcher used (gloo, mpi).
Layouts (FP32, a tiny GPT, 20 iterations): TP2 x PP2, DP4 with ZeRO-2 (Megatron-FSDP's
optim_grads), CP2 x TP2."""

import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import torchrun_launch  # noqa: E402

MODEL = ["--device", "cpu", "--mock-data", "--vocab-size", "250", "--num-layers", "2", "--hidden-size", "64",
         "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
         "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "2e-3", "--min-lr", "2e-4",
         "--lr-warmup-iters", "3", "--lr-decay-style", "cosine", "--clip-grad", "0.5", "--seed", "11",
         "--train-iters", "20", "--log-interval", "1", "--eval-iters", "0", "--distributed-timeout-minutes", "2"]
LAYOUTS = {
    "tp2_pp2": ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"],
    "dp4_zero2": ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads"],
    "cp2_tp2": ["--context-parallel-size", "2", "--tensor-model-parallel-size", "2"],
}
LOSS = re.compile(r"iteration\s+(\d+)/\s*\d+ .*?lm loss: (\S+) \|")


def losses(output):
    """{iteration: the printed lm loss text}."""
    return {int(m.group(1)): m.group(2) for m in LOSS.finditer(output)}


def run(command, env=None):
    started = time.time()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:6])} ... exited {done.returncode}:\n{done.stdout[-3000:]}")
    return done.stdout, time.time() - started


def backend(output):
    found = re.search(r"distributed_backend \.+ (\S+)", output)
    return found.group(1) if found else None


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS))
    args = parser.parse_args()
    failures, timings = [], []
    reference, _ = run([args.binary] + MODEL)
    one_rank = losses(reference)
    if len(one_rank) != 20:
        failures.append(f"one rank printed {len(one_rank)} losses, not 20")
    for name in args.layouts:
        flags = MODEL + LAYOUTS[name]
        mpi_out, mpi_seconds = run([args.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none", args.binary] + flags)
        torchrun_out, torchrun_seconds = run(torchrun_launch.command(["--nproc-per-node", "4"], [args.binary] + flags),
                                             env=torchrun_launch.environment())
        timings.append(f"{name}: mpirun {mpi_seconds:.1f} s, torchrun {torchrun_seconds:.1f} s")
        by_mpi, by_torchrun = losses(mpi_out), losses(torchrun_out)
        if backend(torchrun_out) != "gloo" or backend(mpi_out) != "mpi":
            failures.append(f"{name}: backends {backend(torchrun_out)} (torchrun), {backend(mpi_out)} (mpirun)")
        if len(by_torchrun) != 20 or by_torchrun != by_mpi:
            differing = [i for i in by_mpi if by_torchrun.get(i) != by_mpi[i]]
            failures.append(f"{name}: torchrun's losses differ from mpirun's at iterations {differing[:5]} "
                            f"({len(by_torchrun)} printed)")
        for iteration, text in by_torchrun.items():
            ref = float(one_rank.get(iteration, "nan"))
            if not abs(float(text) - ref) <= 1e-5 * abs(ref):
                failures.append(f"{name}: iteration {iteration}: {text} vs one rank's {ref}")
                break
        print(f"{name}: iteration 20 lm loss {by_torchrun.get(20)} (torchrun) {by_mpi.get(20)} (mpirun) "
              f"{one_rank.get(20)} (one rank)")
    return harness.finish(failures, "; ".join(timings))


if __name__ == "__main__":
    sys.exit(main())

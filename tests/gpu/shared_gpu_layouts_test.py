#!/usr/bin/python3
"""Multi-rank layouts on one GPU (ctest label gpu; docs/TESTING.md, "Every CUDA path run once").

NCCL cannot put two ranks on one GPU, so these ranks talk over MPI (the launcher's choice when
ranks share a GPU; the transfers are staged through host memory) while every kernel runs on the
GPU: context parallelism's ring (p2p; also without dropout, against one rank's cuDNN fused
attention), all-to-all (a2a) and two-level a2a+p2p cores, the
sequence-parallel re-gather overlapped with the input-gradient GEMM (TP2 + SP), ZB-H1's deferred
weight gradients, ZeRO-3's unit gathers with prefetch, the pipelined optimizer offload, two
distributed-optimizer instances, and FP16 with the dynamic loss scaler on TP2 x DP2 (its first
steps overflow on every rank alike). Each layout trains 10 steps (BF16 unless FP16, dropout 0.1,
Megatron's default) and must print the losses of one rank on the same device within 2e-2 relative.

Without a GPU (or in a CPU-only build) it says so and exits 77, which ctest reports as skipped.
--device cpu runs the same comparisons on the CPU backend (a check of this script itself).
"""
import argparse
import os
import re
import subprocess
import sys

MODEL = ["--mock-data", "--vocab-size", "1000", "--num-layers", "2", "--hidden-size", "128",
         "--num-attention-heads", "4", "--seq-length", "64", "--max-position-embeddings", "64",
         "--micro-batch-size", "2", "--global-batch-size", "16", "--train-iters", "10", "--lr", "1e-3",
         "--lr-warmup-iters", "2", "--eval-iters", "0", "--log-interval", "1", "--seed", "7"]
LLAMA = ["--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear",
         "--group-query-attention", "--num-query-groups", "2", "--untie-embeddings-and-output-weights"]

# Instead of --bf16, in the layout and its one-rank reference: from 2^26 the first steps overflow,
# then the updates go through.
FP16 = ["--fp16", "--initial-loss-scale", "67108864"]

NO_DROPOUT = ["--attention-dropout", "0", "--hidden-dropout", "0"]

# name: (ranks, flags of the layout and its one-rank reference, flags of the layout alone)
LAYOUTS = {
    "cp2_p2p": (2, [], ["--context-parallel-size", "2", "--cp-comm-type", "p2p"]),
    # Without dropout one rank's BF16 attention is cuDNN's fused kernel (one K/V head per query
    # head): the ring's block kernels against it.
    "cp2_p2p_against_cudnn": (2, NO_DROPOUT, ["--context-parallel-size", "2", "--cp-comm-type", "p2p"]),
    "cp2_a2a_llama": (2, LLAMA, ["--context-parallel-size", "2", "--cp-comm-type", "a2a"]),
    "cp4_a2a_p2p": (4, [], ["--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p",
                            "--hierarchical-context-parallel-sizes", "2", "2"]),
    "tp2_sp": (2, [], ["--tensor-model-parallel-size", "2", "--sequence-parallel"]),
    "pp2_zb_h1": (2, [], ["--pipeline-model-parallel-size", "2", "--pipeline-schedule", "zb-h1"]),
    "dp2_zero3_prefetch": (2, [], ["--use-megatron-fsdp", "--overlap-grad-reduce", "--overlap-param-gather"]),
    "dp2_offload_pipelined": (2, [], ["--use-distributed-optimizer", "--optimizer-cpu-offload",
                                      "--use-precision-aware-optimizer", "--optimizer-offload-fraction", "0.5",
                                      "--overlap-cpu-optimizer-d2h-h2d"]),
    "dp2_two_optimizer_instances": (2, [], ["--use-distributed-optimizer", "--num-distributed-optimizer-instances",
                                            "2"]),
    "fp16_tp2_sp_dp2_zero1": (4, FP16, ["--tensor-model-parallel-size", "2", "--sequence-parallel",
                                        "--use-distributed-optimizer"]),
}
TOLERANCE = 2e-2
LOSS = re.compile(r"iteration\s+(\d+)/\s*\d+ .*?lm loss: ([0-9.E+-]+)")


def losses(output):
    return [float(m.group(2)) for m in LOSS.finditer(output)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--only", nargs="*", help="layouts to run (default: all)")
    args = parser.parse_args()

    def one_rank(shared):
        precision = [] if "--fp16" in shared else ["--bf16"]
        return [args.pretrain] + precision + MODEL + ["--device", args.device] + shared

    # The one-rank BF16 GPT run first: where --device cuda cannot run it says why in one line.
    probe = subprocess.run(one_rank([]), capture_output=True, text=True, timeout=300)
    if probe.returncode != 0 and args.device == "cuda" and re.search(r"cuda|GPU", probe.stderr):
        reason = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"skipped: --device cuda does not run here ({reason})")
        return 77

    failures = []
    references = {(): losses(probe.stdout)} if probe.returncode == 0 else {}
    for name in args.only or LAYOUTS:
        ranks, shared, flags = LAYOUTS[name]
        if tuple(shared) not in references:
            run = subprocess.run(one_rank(shared), capture_output=True, text=True, timeout=300)
            references[tuple(shared)] = losses(run.stdout)
        reference = references[tuple(shared)]
        if len(reference) != 10:
            failures.append(f"{name}: the one-rank reference printed {len(reference)} losses")
            continue
        command = [args.mpirun, "-np", str(ranks), "--oversubscribe"] + one_rank(shared) + flags + \
                  ["--distributed-backend", "mpi"]
        run = subprocess.run(command, capture_output=True, text=True, timeout=300)
        ours = losses(run.stdout)
        if run.returncode != 0 or len(ours) != len(reference):
            failures.append(f"{name}: exit {run.returncode}, {len(ours)} losses: {run.stderr.strip()[-400:]}")
            continue
        worst = max(abs(a - b) / abs(b) for a, b in zip(ours, reference))
        print(f"{name:30s} {ranks} ranks on one {args.device}: max relative loss difference {worst:.3e} "
              f"(last {ours[-1]:.6f} vs {reference[-1]:.6f})")
        if not worst <= TOLERANCE:
            failures.append(f"{name}: losses differ from one rank's by {worst:.3e} > {TOLERANCE}")
    for failure in failures:
        print("FAILED:", failure)
    print("PASSED" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

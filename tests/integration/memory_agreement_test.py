#!/usr/bin/python3
"""Memory stated once (issue 39): perf_model's memory per rank is what pretrain_gpt allocates. For
five layouts of a tiny BF16 model -- one rank, TP2 + SP with full recompute, PP2 x DP2 with the
distributed optimizer, PP2 interleaved (2 virtual stages per rank) and ZeRO-3 over DP2 -- and four
of its mixture-of-experts variant (8 experts top-2: one rank, TP2 + SP, PP2 with a layer pattern,
a shared expert with a padded capacity and the expert bias) -- the
largest "all allocations" of pretrain_gpt's start-up memory report (MB = MiB per rank, the first,
middle and last stage's) and perf_model's memory per GPU (its JSON's memory_gib_per_gpu) agree
within 1%, and for the MoE layouts so does perf_model --memory's total (issue 41). Both read the memory plan (train/memory_plan.h): what perf_model prints is the plan the
trainer checks its arena against at every start; the report's total also holds the trainer's few
scalars and its gather buffer.

  memory_agreement_test.py --binary build-cpu/bin/pretrain_gpt --perf-model build-cpu/bin/perf_model \
      --mpirun mpirun
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MODEL = ["--mock-data", "--vocab-size", "250", "--num-layers", "4", "--hidden-size", "64",
         "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
         "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "1e-3", "--bf16"]
MOE = ["--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32", "--moe-aux-loss-coeff", "1e-2"]
RUN = ["--device", "cpu", "--train-iters", "1", "--eval-iters", "0", "--log-interval", "1"]
LAYOUTS = [  # (name, ranks, flags)
    ("one rank", 1, []),
    ("TP2 + SP, full recompute", 2, ["--tensor-model-parallel-size", "2", "--sequence-parallel",
                                      "--recompute-granularity", "full", "--recompute-method", "uniform",
                                      "--recompute-num-layers", "1"]),
    ("PP2 x DP2, distributed optimizer", 4, ["--pipeline-model-parallel-size", "2", "--use-distributed-optimizer"]),
    ("PP2 interleaved", 2, ["--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2"]),
    ("ZeRO-3 DP2", 2, ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"]),
    # Mixture of experts (issue 40): expert weights, the MoE stash and workspace, expert-major
    # buffers sized by the dropless worst case or by the padded capacity, the expert bias.
    ("MoE one rank", 1, MOE),
    ("MoE TP2 + SP", 2, MOE + ["--tensor-model-parallel-size", "2", "--sequence-parallel", "--disable-bias-linear"]),
    ("MoE PP2, layer pattern", 2, MOE + ["--pipeline-model-parallel-size", "2", "--moe-layer-freq", "([0]*1+[1]*3)"]),
    ("MoE shared expert, padded capacity, expert bias", 1,
     MOE + ["--disable-bias-linear", "--swiglu", "--moe-shared-expert-intermediate-size", "48",
            "--moe-expert-capacity-factor", "1.0", "--moe-pad-expert-input-to-capacity",
            "--moe-router-enable-expert-bias", "--moe-router-score-function", "sigmoid"]),
]
ALL_ALLOCATIONS = re.compile(r"^\s+all allocations\s+([\d.]+)", re.MULTILINE)
TOLERANCE = 0.01


def allocated_mib(binary, mpirun, ranks, flags, work):
    """The largest "all allocations" (MiB) of the memory report's stages."""
    command = ([binary] if ranks == 1 else mpirun + ["-np", str(ranks), binary]) + MODEL + RUN + flags
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=work)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: {done.stderr[-1500:]}")
    totals = [float(x) for x in ALL_ALLOCATIONS.findall(done.stdout)]
    if not totals:
        raise RuntimeError(f"no memory report in the output of {' '.join(command)}")
    return max(totals)


def predicted_mib(perf_model, ranks, flags):
    command = [perf_model, "--cluster", "cpu", "--world-size", str(ranks), "--json"] + MODEL + flags
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: {done.stderr[-1500:]}")
    return json.loads(done.stdout)["memory_gib_per_gpu"] * 1024.0


MEMORY_TOTAL = re.compile(r"^\s+total\s+[\d.]+ GiB \(([\d.]+) MiB\)", re.MULTILINE)


def memory_flag_mib(perf_model, ranks, flags):
    """perf_model --memory's total (MiB): what a user reads before launch."""
    command = [perf_model, "--cluster", "cpu", "--world-size", str(ranks), "--memory"] + MODEL + flags
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    totals = MEMORY_TOTAL.findall(done.stdout)
    if done.returncode != 0 or len(totals) != 1:
        raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: {done.stdout[-500:]}{done.stderr[-1500:]}")
    return float(totals[0])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--perf-model", required=True)
    parser.add_argument("--mpirun", required=True)
    args = parser.parse_args()
    mpirun = [args.mpirun, "--oversubscribe", "--bind-to", "none"]
    failures = []
    with tempfile.TemporaryDirectory() as work:
        for name, ranks, flags in LAYOUTS:
            try:
                allocated = allocated_mib(args.binary, mpirun, ranks, flags, work)
                predicted = predicted_mib(args.perf_model, ranks, flags)
                # Issue 41: perf_model --memory of the MoE layouts is the same report.
                if name.startswith("MoE"):
                    shown = memory_flag_mib(args.perf_model, ranks, flags)
                    if abs(shown - allocated) / allocated > TOLERANCE:
                        failures.append(f"{name}: perf_model --memory's {shown:.3f} MB is more than "
                                        f"{100 * TOLERANCE:.0f}% from pretrain_gpt's {allocated:.2f} MB")
            except RuntimeError as error:
                failures.append(f"{name}: {error}")
                continue
            apart = abs(predicted - allocated) / allocated
            print(f"{name}: perf_model {predicted:.4f} MB, pretrain_gpt all allocations {allocated:.2f} MB "
                  f"({100 * apart:.2f}% apart)")
            if apart > TOLERANCE:
                failures.append(f"{name}: perf_model's {predicted:.4f} MB per rank is {100 * apart:.2f}% from "
                                f"pretrain_gpt's {allocated:.2f} MB (more than {100 * TOLERANCE:.0f}%)")
    return harness.finish(failures, f"{len(LAYOUTS)} layouts within {100 * TOLERANCE:.0f}%")


if __name__ == "__main__":
    sys.exit(main())

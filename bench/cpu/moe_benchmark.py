#!/usr/bin/env python3
"""CPU step time of a mixture-of-experts model against the dense model of the same active size.

Both models are the same Mixtral-like transformer (SwiGLU, RMSNorm, RoPE, no linear biases;
4 layers, hidden 256, 4 heads, sequence 128, micro batch 4, global batch 8 = 2 micro-batches,
vocabulary 4,096, FP32, mock data), on the CPU backend:
  dense: every layer's MLP ffn = 2 F (F = 512 by default);
  MoE:   every layer 8 experts of ffn F, top-2 (softmax, aux loss 1e-2): each token passes through
         2 experts of F, the dense model's active parameters and FLOPs (Megatron's formula), plus
         the router's [h, 8] GEMM, routing, permutation and combine.
The same tokens go through both. Trials alternate (dense, MoE, dense, MoE, ...) so that the drift
of a shared machine falls on both alike; each trial runs `--iters` iterations and the time per
iteration is read from the metrics file (iterations after `--skip`). The report gives each model's
median, the ratio MoE / dense (target <= 1.3), and from `--profile RUNS` alternating per-op
profiles (GPT_OP_PROFILE_FROM=4, kernels/op_profile.h) the share of the MoE step spent in the
router (moe_route*, moe_aux*, moe_logsumexp, moe_z_loss*) and the permutation (moe_permute,
moe_combine*), the host dispatch in "outside the ops".

    /usr/bin/python3 bench/cpu/moe_benchmark.py build-cpu/bin/pretrain_gpt --trials 5 --profile 3
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

MODEL = ["--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "4095",
         "--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "4",
         "--seq-length", "128", "--max-position-embeddings", "128",
         "--micro-batch-size", "4", "--global-batch-size", "8", "--swiglu", "--disable-bias-linear",
         "--normalization", "RMSNorm", "--position-embedding-type", "rope",
         "--lr", "3e-4", "--hidden-dropout", "0", "--attention-dropout", "0", "--log-interval", "1"]
ROUTER_OPS = ("moe_route", "moe_route_backward", "moe_aux_statistics", "moe_aux_backward", "moe_logsumexp",
              "moe_z_loss_backward")
PERMUTATION_OPS = ("moe_permute", "moe_combine", "moe_combine_weight_grad")


def models(expert_ffn, experts, topk):
    dense = ["--ffn-hidden-size", str(topk * expert_ffn)]
    moe = ["--ffn-hidden-size", str(topk * expert_ffn), "--num-experts", str(experts), "--moe-router-topk",
           str(topk), "--moe-ffn-hidden-size", str(expert_ffn), "--moe-aux-loss-coeff", "1e-2"]
    return {"dense": dense, "moe": moe}


def environment(threads, profile=False):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    if profile:
        env.update(GPT_OP_PROFILE="1", GPT_OP_PROFILE_FROM="4")
    return env


def run(binary, flags, iters, threads, profile=False):
    """(ms per iteration of each logged iteration, the per-op profile {op: ms per iteration})."""
    with tempfile.TemporaryDirectory() as directory:
        metrics = os.path.join(directory, "metrics.jsonl")
        command = [binary, "--device", "cpu", *MODEL, *flags, "--train-iters", str(iters), "--eval-iters", "0",
                   "--metrics-file", metrics]
        result = subprocess.run(command, env=environment(threads, profile), capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
        times = []
        with open(metrics) as f:
            for line in f:
                record = json.loads(line)
                if "elapsed_time_per_iteration_ms" in record:
                    times.append((record["iteration"], record["elapsed_time_per_iteration_ms"]))
    ops = {}
    for line in result.stdout.splitlines():
        match = re.match(r"\| (.+?) \| ?(\d*) ?\| ([\d.]+) \|", line)
        if match:
            ops[match.group(1)] = float(match.group(3))
    return times, ops


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("binary")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--skip", type=int, default=2, help="iterations left out at the start of each trial")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--expert-ffn", type=int, default=512)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--topk", type=int, default=2)
    parser.add_argument("--profile", type=int, default=0, metavar="RUNS", help="alternating per-op profiles")
    args = parser.parse_args()
    configs = models(args.expert_ffn, args.experts, args.topk)
    samples = {name: [] for name in configs}
    for trial in range(args.trials):
        for name, flags in configs.items():
            times, _ = run(args.binary, flags, args.iters, args.threads)
            kept = [ms for iteration, ms in times if iteration > args.skip]
            samples[name].extend(kept)
            print(f"trial {trial + 1} {name}: median {statistics.median(kept):.1f} ms/iter", flush=True)
    median = {name: statistics.median(values) for name, values in samples.items()}
    print(f"\n{args.experts} experts top-{args.topk} of ffn {args.expert_ffn} against dense ffn "
          f"{args.topk * args.expert_ffn}, {args.trials} alternating trials of {args.iters} iterations "
          f"(first {args.skip} left out), {args.threads} threads")
    print("| model | median ms/iter | min ms/iter | vs dense |")
    print("|---|---|---|---|")
    for name in configs:
        print(f"| {name} | {median[name]:.1f} | {min(samples[name]):.1f} | {median[name] / median['dense']:.3f} |")
    ratio = median["moe"] / median["dense"]
    print(f"MoE / dense step time: {ratio:.3f} (target <= 1.3: {'met' if ratio <= 1.3 else 'NOT met'})")
    if args.profile > 0:
        profiles = {name: [] for name in configs}
        for _ in range(args.profile):
            for name, flags in configs.items():
                profiles[name].append(run(args.binary, flags, 8, args.threads, profile=True)[1])
        ops = {name: {op: statistics.median(p.get(op, 0.0) for p in runs) for op in set().union(*runs)}
               for name, runs in profiles.items()}
        step = ops["moe"].get("step (measured)", float("nan"))
        router = sum(ops["moe"].get(op, 0.0) for op in ROUTER_OPS)
        permutation = sum(ops["moe"].get(op, 0.0) for op in PERMUTATION_OPS)
        host = ops["moe"].get("outside the ops (communication, launch gaps, host)", 0.0)
        print(f"\nper-op profiles, median of {args.profile} alternating runs (ms per iteration):")
        print("| op | dense | MoE |")
        print("|---|---|---|")
        for op in sorted(ops["moe"], key=lambda o: -ops["moe"][o]):
            print(f"| {op} | {ops['dense'].get(op, 0.0):.3f} | {ops['moe'][op]:.3f} |")
        print(f"MoE step {step:.1f} ms: router {router:.2f} ms ({100 * router / step:.1f}%), permutation and "
              f"combine {permutation:.2f} ms ({100 * permutation / step:.1f}%), together "
              f"{100 * (router + permutation) / step:.1f}%; outside the ops (host dispatch included) {host:.2f} ms "
              f"({100 * host / step:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

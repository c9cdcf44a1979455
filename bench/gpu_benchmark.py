#!/usr/bin/env python3
"""One-GPU benchmark: pretrain_gpt (BF16, --mock-data, GPT-2 vocabulary) for GPT-2 124M, GPT-2
350M and a 1.3B model, each against the PyTorch baseline (torch_gpt_baseline.py) of the same model
and micro batch. Reports tokens/s, model TFLOP/s per GPU (Megatron's formula, attention term not
halved), MFU against 989 TFLOP/s (H100 SXM dense BF16) and peak device memory, as a markdown
table for docs/PERFORMANCE.md."""
import argparse
import json
import re
import subprocess
import sys

MODELS = [  # name, layers, hidden, heads, seq, micro batch
    ("GPT-2 124M", 12, 768, 12, 1024, 16),
    ("GPT-2 350M", 24, 1024, 16, 1024, 8),
    ("GPT 1.3B", 24, 2048, 16, 2048, 4),
]
PEAK_TFLOPS = 989.0
ITERATIONS, LOG_INTERVAL = 20, 10
LOG = re.compile(r"elapsed time per iteration \(ms\): ([\d.]+) \| throughput per GPU \(TFLOP/s/GPU\): ([\d.]+)")
MEMORY = re.compile(r"max reserved: ([\d.]+)")


def ours(binary, layers, hidden, heads, seq, micro_batch):
    command = [binary, "--device", "cuda", "--bf16", "--mock-data", "--vocab-size", "50257",
               "--num-layers", str(layers), "--hidden-size", str(hidden), "--num-attention-heads", str(heads),
               "--seq-length", str(seq), "--max-position-embeddings", str(seq), "--micro-batch-size", str(micro_batch),
               "--global-batch-size", str(micro_batch), "--train-iters", str(ITERATIONS), "--lr", "1e-4",
               "--log-interval", str(LOG_INTERVAL), "--eval-iters", "0"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    lines = [LOG.search(l) for l in run.stdout.splitlines()]
    lines = [m for m in lines if m]
    if run.returncode != 0 or not lines:
        raise RuntimeError(f"pretrain_gpt failed ({run.returncode}): {run.stderr[-2000:]}")
    ms, tflops = float(lines[-1].group(1)), float(lines[-1].group(2))  # the last interval: warm
    memory = MEMORY.search(run.stdout)
    return {"ms_per_iteration": ms, "tokens_per_second": micro_batch * seq / (ms / 1e3), "tflops": tflops,
            "peak_memory_gib": float(memory.group(1)) / 1024 if memory else float("nan")}


def baseline(python, script, layers, hidden, heads, seq, micro_batch):
    run = subprocess.run([python, script, "--layers", str(layers), "--hidden", str(hidden), "--heads", str(heads),
                          "--seq", str(seq), "--micro-batch", str(micro_batch)],
                         capture_output=True, text=True, timeout=1200)
    if run.returncode != 0:
        raise RuntimeError(f"baseline failed: {run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--python", default="python3")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    rows = ["| model | micro batch x seq | ours ms/iter | ours tokens/s | ours TFLOP/s | ours MFU | ours memory GiB "
            "| PyTorch tokens/s | PyTorch TFLOP/s | PyTorch memory GiB | ours / PyTorch |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    failed = False
    for name, *shape in MODELS:
        try:
            a = ours(args.binary, *shape)
            print(f"{name}: ours {a}", flush=True)
            b = baseline(args.python, args.baseline, *shape)
            print(f"{name}: PyTorch {b}", flush=True)
            rows.append(f"| {name} | {shape[4]} x {shape[3]} | {a['ms_per_iteration']:.1f} | {a['tokens_per_second']:.0f} "
                        f"| {a['tflops']:.1f} | {100 * a['tflops'] / PEAK_TFLOPS:.1f}% | {a['peak_memory_gib']:.1f} "
                        f"| {b['tokens_per_second']:.0f} | {b['tflops']:.1f} | {b['peak_memory_gib']:.1f} "
                        f"| {a['tokens_per_second'] / b['tokens_per_second']:.2f} |")
        except Exception as error:  # keep going: report every model
            print(f"{name}: {error}", flush=True)
            rows.append(f"| {name} | failed: {str(error)[:200]} |")
            failed = True
    with open(args.output, "w") as f:
        f.write("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

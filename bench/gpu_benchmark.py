#!/usr/bin/env python3
"""One-GPU benchmark: pretrain_gpt (BF16, --mock-data, GPT-2 vocabulary) for GPT-2 124M, GPT-2
350M and a 1.3B model, each against the PyTorch baseline (torch_gpt_baseline.py) of the same model
and micro batch, in the same command. Reports tokens/s, model TFLOP/s per GPU (Megatron's formula,
attention term not halved), MFU against 989 TFLOP/s (H100 SXM dense BF16), peak device memory and
our/PyTorch ratio as a markdown table for docs/PERFORMANCE.md, then a per-op time breakdown of ours
for each model. One run of ours per model: iterations 11-20 (warm, unprofiled) give the table's
figures, iterations 21-30 are profiled (GPT_OP_PROFILE_FROM=21) for the breakdown."""
import argparse
import json
import os
import re
import subprocess
import sys

MODELS = {  # name: (label, layers, hidden, heads, seq, micro batch)
    "124M": ("GPT-2 124M", 12, 768, 12, 1024, 16),
    "350M": ("GPT-2 350M", 24, 1024, 16, 1024, 8),
    "1.3B": ("GPT 1.3B", 24, 2048, 16, 2048, 4),
}
PEAK_TFLOPS = 989.0
ITERATIONS, LOG_INTERVAL, PROFILE_FROM = 30, 10, 21
LOG = re.compile(r"iteration +(\d+)/.*elapsed time per iteration \(ms\): ([\d.]+) \| "
                 r"throughput per GPU \(TFLOP/s/GPU\): ([\d.]+)")
MEMORY = re.compile(r"max reserved: ([\d.]+)")


def ours_command(binary, layers, hidden, heads, seq, micro_batch, iterations):
    return [binary, "--device", "cuda", "--bf16", "--mock-data", "--vocab-size", "50257",
            "--num-layers", str(layers), "--hidden-size", str(hidden), "--num-attention-heads", str(heads),
            "--seq-length", str(seq), "--max-position-embeddings", str(seq), "--micro-batch-size", str(micro_batch),
            "--global-batch-size", str(micro_batch), "--train-iters", str(iterations), "--lr", "1e-4",
            "--log-interval", str(LOG_INTERVAL), "--log-throughput", "--eval-iters", "0",
            # The PyTorch baseline has no dropout; Megatron's default 0.1 would also move attention
            # off cuDNN (layout-independent masks run the exact kernels).
            "--hidden-dropout", "0", "--attention-dropout", "0"]


def ours(binary, library_path, shape):
    """Figures of iterations 11-20 and the per-op table of iterations 21-30."""
    env = dict(os.environ, GPT_OP_PROFILE_FROM=str(PROFILE_FROM))
    if library_path:
        env["LD_LIBRARY_PATH"] = library_path
    run = subprocess.run(ours_command(binary, *shape, ITERATIONS), capture_output=True, text=True, timeout=1200,
                         env=env)
    if run.returncode != 0:
        raise RuntimeError(f"pretrain_gpt failed ({run.returncode}): {run.stdout[-1500:]} {run.stderr[-2500:]}")
    # The line of iteration 2 x LOG_INTERVAL covers iterations 11-20: warm, unprofiled (iteration 1
    # has a line of its own, as in Megatron).
    lines = [m for m in (LOG.search(l) for l in run.stdout.splitlines()) if m and int(m.group(1)) == 2 * LOG_INTERVAL]
    if len(lines) != 1:
        raise RuntimeError(f"pretrain_gpt printed no line for iteration {2 * LOG_INTERVAL}: {run.stdout[-2000:]}")
    ms, tflops = float(lines[0].group(2)), float(lines[0].group(3))
    micro_batch, seq = shape[4], shape[3]
    memory = MEMORY.search(run.stdout)
    start = run.stdout.find("per-op time")
    return {"ms_per_iteration": ms, "tokens_per_second": micro_batch * seq / (ms / 1e3), "tflops": tflops,
            "peak_memory_gib": float(memory.group(1)) / 1024 if memory else float("nan"),
            "breakdown": run.stdout[start:].strip() if start >= 0 else "(no per-op table printed)"}


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
    parser.add_argument("--binary-library-path", default="", help="LD_LIBRARY_PATH for pretrain_gpt only")
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--python", default="python3")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    rows = ["| model | micro batch x seq | ours ms/iter | ours tokens/s | ours TFLOP/s | ours MFU | ours memory GiB "
            "| PyTorch ms/iter | PyTorch tokens/s | PyTorch TFLOP/s | PyTorch MFU | PyTorch memory GiB | ours / PyTorch |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    sections = []
    failed = False
    for key in args.models:
        name, *shape = MODELS[key]
        try:
            a = ours(args.binary, args.binary_library_path, shape)
            table = a.pop("breakdown")
            print(f"{name}: ours {a}", flush=True)
            b = baseline(args.python, args.baseline, *shape)
            print(f"{name}: PyTorch {b}", flush=True)
            rows.append(f"| {name} | {shape[4]} x {shape[3]} | {a['ms_per_iteration']:.1f} | {a['tokens_per_second']:.0f} "
                        f"| {a['tflops']:.1f} | {100 * a['tflops'] / PEAK_TFLOPS:.1f}% | {a['peak_memory_gib']:.1f} "
                        f"| {b['ms_per_iteration']:.1f} | {b['tokens_per_second']:.0f} | {b['tflops']:.1f} "
                        f"| {100 * b['tflops'] / PEAK_TFLOPS:.1f}% | {b['peak_memory_gib']:.1f} "
                        f"| {a['tokens_per_second'] / b['tokens_per_second']:.2f} |")
            print(f"{name}: {table}", flush=True)
            sections.append(f"### {name}, ours: {table}")
        except Exception as error:  # keep going: report every model
            print(f"{name}: {error}", flush=True)
            rows.append(f"| {name} | failed: {str(error)[:300]} |")
            failed = True
    text = "\n".join(rows) + "\n\n" + "\n\n".join(sections) + "\n"
    with open(args.output, "w") as f:
        f.write(text)
    print("\n".join(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

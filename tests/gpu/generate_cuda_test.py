#!/usr/bin/python3
"""generate --device cuda against --device cpu (ctest label gpu; docs/GENERATION.md).

Three small FP32 models trained here on the CPU (GPT-2 style: learned positions, GeLU, tied
embedding; Llama style: GQA 8 heads / 2 groups, RoPE, RMSNorm, SwiGLU, untied; and GQA with
--qk-layernorm, the norms on rows of kv_channels = 8), each generated greedily and sampled (seeded
temperature, top-k, top-p) for three prompts of different lengths in one batch, 16 new tokens,
through the KV cache: the GPU must give the CPU's token ids and every step's logits (prefill and
each decode step, --logits-file) within 1e-4 relative (the GEMMs' own rounding).

Without a GPU (or in a CPU-only build) it says so and exits 77, which ctest reports as skipped.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

import numpy as np

COMMON = ["--device", "cpu", "--mock-data", "--num-layers", "2", "--hidden-size", "64", "--seq-length", "32",
          "--max-position-embeddings", "48", "--micro-batch-size", "2", "--global-batch-size", "4",
          "--train-iters", "20", "--lr", "3e-3", "--hidden-dropout", "0", "--attention-dropout", "0", "--seed", "11",
          "--vocab-size", "200", "--make-vocab-size-divisible-by", "1"]
FAMILIES = {
    "gpt2": ["--num-attention-heads", "4"],
    "llama": ["--num-attention-heads", "8", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
              "--swiglu", "--group-query-attention", "--num-query-groups", "2", "--disable-bias-linear",
              "--untie-embeddings-and-output-weights", "--rotary-base", "500"],
    "qk_layernorm": ["--num-attention-heads", "8", "--group-query-attention", "--num-query-groups", "2",
                     "--position-embedding-type", "rope", "--qk-layernorm"],
}
PROMPTS = ["3 14 15 92 65", "7", "100 101 102 103 104 105 106 107 108 109 110 111"]
MODES = {
    "greedy": ["--greedy"],
    "sampled": ["--temperature", "0.9", "--top-k", "50", "--top-p", "0.95", "--seed", "5"],
}
TOLERANCE = 1e-4


def run(command):
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def token_ids(stdout):
    return [line for line in stdout.splitlines() if line.startswith("ids:")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generate", required=True)
    parser.add_argument("--pretrain", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    # Where --device cuda cannot run, pretrain_gpt says why in one line before doing anything.
    probe = run([args.pretrain] + [f if f != "cpu" else "cuda" for f in COMMON] + FAMILIES["gpt2"] +
                ["--save", os.path.join(args.work_dir, "probe")])
    if probe.returncode != 0 and re.search(r"--device cuda", probe.stderr):
        print(f"skipped: --device cuda does not run here ({probe.stderr.strip().splitlines()[-1]})")
        return 77
    failures = []
    prompt_flags = [t for p in PROMPTS for t in ("--prompt", p)]
    for family, extra in FAMILIES.items():
        save = os.path.join(args.work_dir, family)
        trained = run([args.pretrain] + COMMON + extra + ["--save", save])
        if trained.returncode != 0:
            failures.append(f"{family}: training failed: {trained.stderr.strip()[-500:]}")
            continue
        base = [args.generate, save, "--max-new-tokens", "16", "--threads", "1", "--print-ids", "--ignore-eod"]
        for mode, flags in MODES.items():
            results = {}
            for device in ("cpu", "cuda"):
                logits = os.path.join(args.work_dir, f"{family}_{mode}_{device}.logits")
                result = run(base + prompt_flags + flags + ["--device", device, "--logits-file", logits])
                if device == "cuda" and result.returncode != 0 and re.search(r"--device cuda", result.stderr):
                    print(f"skipped: --device cuda does not run here ({result.stderr.strip().splitlines()[-1]})")
                    return 77
                if result.returncode != 0:
                    failures.append(f"{family} {mode} {device}: exit {result.returncode}: {result.stderr.strip()[-400:]}")
                    break
                results[device] = (token_ids(result.stdout), np.fromfile(logits, "<f4"))
            if len(results) != 2:
                continue
            (cpu_ids, cpu_logits), (gpu_ids, gpu_logits) = results["cpu"], results["cuda"]
            relative = (float(np.linalg.norm(gpu_logits - cpu_logits) / np.linalg.norm(cpu_logits))
                        if gpu_logits.shape == cpu_logits.shape and cpu_logits.size else float("inf"))
            same = gpu_ids == cpu_ids and len(cpu_ids) == len(PROMPTS)
            print(f"{family:13s} {mode:8s} cuda vs cpu: ids {'equal' if same else 'DIFFERENT'}, "
                  f"logits relative {relative:.2e}")
            if not same or not relative <= TOLERANCE:
                failures.append(f"{family} {mode}: ids {'equal' if same else 'differ'}, logits relative {relative:.3g}")
    for failure in failures:
        print("FAILED:", failure)
    print("PASSED" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

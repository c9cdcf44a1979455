#!/usr/bin/python3
"""generate under tensor parallelism (docs/GENERATION.md, "Tensor parallelism"):

  * both model families, saved under other layouts than they are read in (GPT-2 under PP=2 with an
    odd vocabulary of 201 unpadded rows, so that the vocabulary-parallel tables end in zero rows; the
    Llama-style one, GQA 8 heads / 2 groups, SwiGLU, untied, under TP=2; one with --qk-layernorm
    under PP=2), generated with mpirun at
    TP=2 (and TP=4 for GPT-2's 4 heads) and on one rank, three prompts of different lengths in one
    batch, 16 new tokens each;
  * greedy and sampled (temperature, top-k, top-p, a seed): the same token ids as one rank, and
    every step's logits (prefill and each decode step, --logits-file) within 1e-5 relative (FP32:
    the row-parallel sums are added in another order);
  * cached vs uncached under TP=2 (--check-uncached) within 1e-5;
  * output once: rank 0 prints the samples and the speed line;
  * --device cuda: with a GPU, the CPU's tokens and logits (1e-4); without one, one error line;
  * bad input: a TP size that does not divide the key/value groups, TP=2 without a launcher, a
    world that is not the TP size, --pipeline-model-parallel-size 2: one 'error:' line, non-zero
    exit.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402

COMMON = ["--device", "cpu", "--mock-data", "--num-layers", "2", "--hidden-size", "64",
          "--seq-length", "32", "--max-position-embeddings", "48", "--micro-batch-size", "2",
          "--global-batch-size", "4", "--train-iters", "20", "--lr", "3e-3", "--hidden-dropout", "0",
          "--attention-dropout", "0", "--seed", "11"]
FAMILIES = {
    # name: (vocabulary, saving ranks, flags, TP sizes to generate with)
    "gpt2": (201, 2, ["--num-attention-heads", "4", "--pipeline-model-parallel-size", "2",
                      "--make-vocab-size-divisible-by", "1"], [2, 4]),
    "llama": (200, 2, ["--num-attention-heads", "8", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
                       "--swiglu", "--group-query-attention", "--num-query-groups", "2", "--disable-bias-linear",
                       "--untie-embeddings-and-output-weights", "--rotary-base", "500",
                       "--tensor-model-parallel-size", "2"], [2]),
    # --qk-layernorm (LayerNorm over each query and key head, replicated on every TP rank), saved
    # under PP=2 and generated at TP=2.
    "qk_layernorm": (200, 2, ["--num-attention-heads", "8", "--group-query-attention", "--num-query-groups", "2",
                              "--position-embedding-type", "rope", "--qk-layernorm",
                              "--pipeline-model-parallel-size", "2"], [2]),
}
PROMPTS = ["3 14 15 92 65", "7", "100 101 102 103 104 105 106 107 108 109 110 111"]
NEW_TOKENS = 16
MODES = {
    "greedy": ["--greedy"],
    "sampled": ["--temperature", "0.9", "--top-k", "50", "--top-p", "0.95", "--seed", "5"],
}


def run(command):
    return subprocess.run(command, capture_output=True, text=True)


def token_ids(stdout):
    return [[int(t) for t in line[4:].split()] for line in stdout.splitlines() if line.startswith("ids:")]


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--generate", required=True)
    parser.add_argument("--pretrain", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    failures = []

    def mpirun(ranks):
        return [args.mpirun, "-n", str(ranks), "--oversubscribe"]

    prompt_flags = [t for p in PROMPTS for t in ("--prompt", p)]
    for family, (vocab, ranks, extra, tensor_sizes) in FAMILIES.items():
        save = os.path.join(args.work_dir, family)
        trained = run(mpirun(ranks) + [args.pretrain] + COMMON + ["--vocab-size", str(vocab)] + extra + ["--save", save])
        if trained.returncode != 0:
            failures.append(f"{family}: training failed: {trained.stderr[-500:]}")
            continue
        base = [args.generate, save, "--max-new-tokens", str(NEW_TOKENS), "--threads", "1", "--print-ids",
                "--ignore-eod"] + prompt_flags
        for mode, flags in MODES.items():
            outputs = {}
            for tp in [1] + tensor_sizes:
                logits_file = os.path.join(args.work_dir, f"{family}_{mode}_tp{tp}.logits")
                command = base + flags + ["--logits-file", logits_file]
                if tp > 1:
                    command = mpirun(tp) + command + ["--tensor-model-parallel-size", str(tp)]
                result = run(command)
                if result.returncode != 0:
                    failures.append(f"{family} {mode} TP={tp}: generate failed: {result.stderr.strip()[-500:]}")
                    continue
                headers = [l for l in result.stdout.splitlines() if l.startswith("=== sample")]
                speed = [l for l in result.stdout.splitlines() if l.startswith("prefill:")]
                if len(headers) != len(PROMPTS) or len(speed) != 1:
                    failures.append(f"{family} {mode} TP={tp}: {len(headers)} sample headers and {len(speed)} speed "
                                    f"lines (want {len(PROMPTS)} and 1: rank 0 prints once)")
                logits = np.fromfile(logits_file, "<f4").reshape(-1, vocab)
                outputs[tp] = (token_ids(result.stdout), logits)
            if 1 not in outputs:
                continue
            ids, logits = outputs[1]
            if len(ids) != len(PROMPTS) or any(len(i) != NEW_TOKENS for i in ids):
                failures.append(f"{family} {mode}: one rank gave {ids}")
            # One row per prompt for the prefill, then one per sequence and step.
            if logits.shape[0] != len(PROMPTS) * NEW_TOKENS:
                failures.append(f"{family} {mode}: {logits.shape[0]} logits rows, want {len(PROMPTS) * NEW_TOKENS}")
            for tp in tensor_sizes:
                if tp not in outputs:
                    continue
                tp_ids, tp_logits = outputs[tp]
                if tp_ids != ids:
                    failures.append(f"{family} {mode} TP={tp}: tokens {tp_ids} differ from one rank's {ids}")
                if tp_logits.shape != logits.shape:
                    failures.append(f"{family} {mode} TP={tp}: logits {tp_logits.shape} vs one rank's {logits.shape}")
                    continue
                relative = np.linalg.norm(tp_logits - logits, axis=1) / np.linalg.norm(logits, axis=1)
                absolute = float(np.abs(tp_logits - logits).max())
                print(f"{family} {mode} TP={tp} vs one rank: {len(tp_ids)} x {NEW_TOKENS} tokens "
                      f"{'equal' if tp_ids == ids else 'DIFFERENT'}; logits of {logits.shape[0]} steps: max relative "
                      f"{relative.max():.2g}, max absolute {absolute:.2g}")
                if not relative.max() <= 1e-5:
                    failures.append(f"{family} {mode} TP={tp}: logits differ from one rank's by {relative.max():.3g}")
        # Cached vs uncached under TP=2.
        checked = run(mpirun(2) + base + ["--greedy", "--check-uncached", "--tensor-model-parallel-size", "2"])
        m = re.search(r"(\d+) steps checked, max relative difference ([0-9.e+-]+)", checked.stdout)
        if checked.returncode != 0 or not m or int(m.group(1)) != len(PROMPTS) * NEW_TOKENS \
                or not float(m.group(2)) <= 1e-5:
            failures.append(f"{family} TP=2: cached vs uncached: {m.group(0) if m else checked.stderr.strip()[-300:]}")
        else:
            print(f"{family} TP=2 cached vs uncached: {m.group(0)}")

    # --device cuda: on a machine with a GPU (CUDA build) the same tokens and logits as the CPU's
    # (the GEMMs' own rounding: 1e-4); elsewhere one line saying why not.
    llama = os.path.join(args.work_dir, "llama")
    base = [args.generate, llama, "--max-new-tokens", str(NEW_TOKENS), "--threads", "1", "--print-ids",
            "--ignore-eod", "--greedy"] + prompt_flags
    cpu_logits, gpu_logits = (os.path.join(args.work_dir, f"device_{d}.logits") for d in ("cpu", "cuda"))
    cpu = run(base + ["--logits-file", cpu_logits])
    gpu = run(base + ["--device", "cuda", "--logits-file", gpu_logits])
    if gpu.returncode == 0:
        a, b = np.fromfile(cpu_logits, "<f4"), np.fromfile(gpu_logits, "<f4")
        relative = float(np.linalg.norm(a - b) / np.linalg.norm(a)) if a.shape == b.shape else float("inf")
        print(f"--device cuda vs cpu: tokens {'equal' if token_ids(gpu.stdout) == token_ids(cpu.stdout) else 'DIFFERENT'}, "
              f"logits relative {relative:.2g}")
        if token_ids(gpu.stdout) != token_ids(cpu.stdout) or not relative <= 1e-4:
            failures.append(f"--device cuda: tokens or logits differ from the CPU's (relative {relative:.3g})")
    elif len(error_lines(gpu.stderr)) != 1 or "--device cuda:" not in gpu.stderr:
        failures.append(f"--device cuda without a GPU: exit {gpu.returncode}, {gpu.stderr!r}")
    else:
        print(f"--device cuda here: exit {gpu.returncode}: {error_lines(gpu.stderr)[0]}")

    # Bad input: one error line, non-zero exit.
    gpt2 = os.path.join(args.work_dir, "gpt2")
    one = [args.generate, llama, "--prompt", "1 2", "--max-new-tokens", "2", "--threads", "1"]
    for name, command, expected in [
        ("TP=4 of 2 key/value groups", mpirun(4) + one + ["--tensor-model-parallel-size", "4"],
         "does not divide the model's 2 key/value groups"),
        ("TP=2 without a launcher", one + ["--tensor-model-parallel-size", "2"], "needs 2 ranks"),
        ("a world of 2 for TP=1", mpirun(2) + one, "needs 1 ranks, this job has 2"),
        ("pipeline parallelism", one + ["--pipeline-model-parallel-size", "2"], "without pipeline parallelism"),
        ("a missing checkpoint under TP=2",
         mpirun(2) + [args.generate, gpt2 + "_nowhere", "--prompt", "1", "--tensor-model-parallel-size", "2"],
         "nowhere"),
    ]:
        bad = run(command)
        lines = error_lines(bad.stderr)
        if bad.returncode == 0 or len(lines) != 1 or expected not in lines[0]:
            failures.append(f"{name}: exit {bad.returncode}, error lines {lines} (want one naming {expected!r})")
        else:
            print(f"{name}: exit {bad.returncode}: {lines[0]}")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

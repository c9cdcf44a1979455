#!/usr/bin/env python3
"""llm.c's CPU trainer (train_gpt2.c) on the demo model, for the side-by-side table of
docs/PERFORMANCE.md.

llm.c's trainer reads a GPT-2 checkpoint (gpt2_124M.bin) and token files that its Python scripts
download from the Hugging Face hub; this machine cannot reach it, and a step's time does not depend
on the weights' values. So this module writes, in llm.c's own formats, a randomly initialised
checkpoint of the demo model's shape (vocabulary 50,257 padded to 50,304, 4 layers, hidden 128, 4
heads, positions 128, tied embeddings as GPT-2) and uniform random token files, then builds the
user's llm.c checkout with its own flags (-Ofast -march=native, OpenMP) and with one change to its
main(): batch and sequence set to the demo's step (8 x 128 tokens: llm.c takes the 8 sequences in
one batch, pretrain_gpt in two micro-batches of 4 - the same tokens and model FLOPs per step) and
the number of steps set by the caller. Nothing of llm.c is stored in this repository: pass the
path of a checkout (`git clone https://github.com/karpathy/llm.c`).

    /usr/bin/python3 bench/cpu/llmc_baseline.py --llmc ~/llm.c --iters 12
"""
import argparse
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile

import numpy as np

# The demo model (bench/cpu/step_benchmark.py's MODEL), in llm.c's header fields.
VOCAB, PADDED_VOCAB, LAYERS, HEADS, CHANNELS, MAX_T = 50257, 50304, 4, 4, 128, 128
BATCH, SEQ = 8, 128
MODEL_MAGIC, MODEL_VERSION = 20240326, 3  # train_gpt2.c's gpt2_build_from_checkpoint
DATA_MAGIC, DATA_VERSION = 20240520, 1  # llmc/dataloader.h

# train_gpt2.c's main() lines this module changes, each of which must be found exactly once.
EDITS = [(r"int B = 4;", f"int B = {BATCH};"), (r"int T = 64;", f"int T = {SEQ};"),
         (r"step <= 40;", "step <= GPT_BENCH_STEPS;")]


def parameter_sizes(vp=PADDED_VOCAB, c=CHANNELS, max_t=MAX_T, layers=LAYERS):
    """train_gpt2.c's 16 parameter tensors in file order (fill_in_parameter_sizes)."""
    return [("wte", vp * c), ("wpe", max_t * c), ("ln1w", layers * c), ("ln1b", layers * c),
            ("qkvw", layers * 3 * c * c), ("qkvb", layers * 3 * c), ("attprojw", layers * c * c),
            ("attprojb", layers * c), ("ln2w", layers * c), ("ln2b", layers * c), ("fcw", layers * 4 * c * c),
            ("fcb", layers * 4 * c), ("fcprojw", layers * c * 4 * c), ("fcprojb", layers * c),
            ("lnfw", c), ("lnfb", c)]


def write_checkpoint(path, seed=1234):
    """GPT-2 initialisation: N(0, 0.02) weights, zero biases, unit LayerNorm scales."""
    rng = np.random.default_rng(seed)
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [MODEL_MAGIC, MODEL_VERSION, MAX_T, VOCAB, LAYERS, HEADS, CHANNELS, PADDED_VOCAB]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for name, size in parameter_sizes():
            if name in ("ln1w", "ln2w", "lnfw"):
                values = np.ones(size, dtype=np.float32)
            elif name.endswith("b"):
                values = np.zeros(size, dtype=np.float32)
            else:
                values = (rng.standard_normal(size) * 0.02).astype(np.float32)
            f.write(values.tobytes())


def write_tokens(path, count, seed):
    rng = np.random.default_rng(seed)
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [DATA_MAGIC, DATA_VERSION, count]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(rng.integers(0, VOCAB, size=count, dtype=np.uint16).tobytes())


def prepare(llmc, work, iters):
    """Builds the patched trainer (steps 0 .. iters-1) in `work` with its checkpoint and data;
    returns the binary."""
    source = os.path.join(llmc, "train_gpt2.c")
    if not os.path.isfile(source) or not os.path.isdir(os.path.join(llmc, "llmc")):
        sys.exit(f"--llmc {llmc}: not an llm.c checkout (no train_gpt2.c and llmc/)")
    shutil.copytree(os.path.join(llmc, "llmc"), os.path.join(work, "llmc"))
    with open(source) as f:
        text = f.read()
    for pattern, replacement in EDITS:
        if len(re.findall(re.escape(pattern), text)) != 1:
            sys.exit(f"llm.c's train_gpt2.c has changed: '{pattern}' is not found exactly once")
        text = text.replace(pattern, replacement)
    with open(os.path.join(work, "train_gpt2.c"), "w") as f:
        f.write(text)
    binary = os.path.join(work, "train_gpt2")
    # llm.c's Makefile: CFLAGS = -Ofast ... -march=native, and -fopenmp -DOMP when OpenMP is found.
    subprocess.run(["gcc", "-Ofast", "-march=native", "-fopenmp", "-DOMP", f"-DGPT_BENCH_STEPS={iters - 1}",
                    "-Wno-unused-result", "train_gpt2.c", "-lm", "-o", binary], cwd=work, check=True)
    write_checkpoint(os.path.join(work, "gpt2_124M.bin"))
    data = os.path.join(work, "dev", "data", "tinyshakespeare")
    os.makedirs(data)
    write_tokens(os.path.join(data, "tiny_shakespeare_train.bin"), 64 * BATCH * SEQ + 1, seed=1)
    write_tokens(os.path.join(data, "tiny_shakespeare_val.bin"), 8 * BATCH * SEQ + 1, seed=2)
    return binary


def trial(binary, skip, threads):
    """One run: the step times (ms) after the first `skip` steps (as pretrain_gpt's trials), from llm.c's own
    "step N: train loss L (took T ms)" lines (forward, backward and update, as it times them)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    result = subprocess.run([binary], cwd=os.path.dirname(binary), env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"llm.c failed ({result.returncode}): {(result.stdout + result.stderr)[-2000:]}")
    times = [float(m.group(2)) for m in re.finditer(r"step (\d+): train loss \S+ \(took ([\d.]+) ms\)", result.stdout)
             if int(m.group(1)) >= skip]
    if not times:
        sys.exit(f"llm.c printed no step times: {result.stdout[-2000:]}")
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llmc", required=True, help="an llm.c checkout (train_gpt2.c, llmc/)")
    parser.add_argument("--iters", type=int, default=12)
    parser.add_argument("--skip", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trials", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        binary = prepare(args.llmc, work, args.iters)
        times = [t for _ in range(args.trials) for t in trial(binary, args.skip, args.threads)]
    print(json.dumps({"median_ms": statistics.median(times), "min_ms": min(times), "times_ms": times}))


if __name__ == "__main__":
    main()

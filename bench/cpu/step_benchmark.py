#!/usr/bin/env python3
"""CPU step time of pretrain_gpt on the demo model, one binary or several side by side.

The demo's model (vocabulary 50,304 after padding, 4 layers, hidden 128, 4 heads, sequence 128,
micro batch 4, global batch 8, FP32) on mock data; each binary runs `--iters` iterations per trial
and the trials alternate between binaries (A B A B ...), so that drift of the machine (other
processes, frequency) falls on all of them alike. The time per iteration comes from the metrics
file (`elapsed_time_per_iteration_ms` of each logged iteration after the first `--skip`), and the
report gives each binary's median and the ratio to the first.

    /usr/bin/python3 bench/cpu/step_benchmark.py build/bin/pretrain_gpt other/bin/pretrain_gpt --trials 5

Extra pretrain_gpt flags after `--` (e.g. `-- --hidden-dropout 0.1`).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODEL = ["--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "50256",
         "--num-layers", "4", "--hidden-size", "128", "--num-attention-heads", "4",
         "--seq-length", "128", "--max-position-embeddings", "128",
         "--micro-batch-size", "4", "--global-batch-size", "8",
         "--lr", "3e-4", "--hidden-dropout", "0", "--attention-dropout", "0", "--log-interval", "1"]


def trial(binary, iters, skip, extra, threads):
    with tempfile.TemporaryDirectory() as directory:
        metrics = os.path.join(directory, "metrics.jsonl")
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
        command = [binary, *MODEL, "--train-iters", str(iters), "--metrics-file", metrics, *extra]
        result = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            sys.exit(f"{binary} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
        times = []
        with open(metrics) as f:
            for line in f:
                record = json.loads(line)
                if "elapsed_time_per_iteration_ms" in record and record["iteration"] > skip:
                    times.append(record["elapsed_time_per_iteration_ms"])
        return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--iters", type=int, default=12)
    parser.add_argument("--skip", type=int, default=2, help="iterations left out at the start of each trial")
    parser.add_argument("--threads", type=int, default=2)
    args, extra = parser.parse_known_args()
    extra = [e for e in extra if e != "--"]
    if args.iters <= args.skip:
        sys.exit("--iters must exceed --skip")
    samples = {b: [] for b in args.binaries}
    for t in range(args.trials):
        for binary in args.binaries:
            samples[binary].extend(trial(binary, args.iters, args.skip, extra, args.threads))
    first = statistics.median(samples[args.binaries[0]])
    print(f"{'binary':60s} {'median ms/iter':>15s} {'min':>9s} {'ratio':>7s}")
    for binary in args.binaries:
        median = statistics.median(samples[binary])
        print(f"{binary:60s} {median:15.1f} {min(samples[binary]):9.1f} {median / first:7.3f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""CPU step time of pretrain_gpt on the demo model, one binary or several side by side.

The demo's model (vocabulary 50,304 after padding, 4 layers, hidden 128, 4 heads, sequence 128,
micro batch 4, global batch 8, FP32) on mock data; each binary runs `--iters` iterations per trial
and the trials alternate between binaries (A B A B ...), so that drift of the machine (other
processes, frequency) falls on all of them alike. The time per iteration comes from the metrics
file (`elapsed_time_per_iteration_ms` of each logged iteration after the first `--skip`), and the
report gives each binary's median and the ratio to the first.

    /usr/bin/python3 bench/cpu/step_benchmark.py build/bin/pretrain_gpt other/bin/pretrain_gpt --trials 5

Extra pretrain_gpt flags after `--` (e.g. `-- --hidden-dropout 0.1`). Options for the side-by-side
table of docs/PERFORMANCE.md, each measured inside the same alternation:
  --torch             PyTorch eager on the same model (bench/torch_gpt_baseline.py --device cpu,
                      the same threads, two micro-batches of 4 per step) as one more column;
  --llmc DIR          llm.c's CPU trainer (train_gpt2.c of the llm.c checkout DIR, built and fed by
                      bench/cpu/llmc_baseline.py: same model, 8 x 128 tokens a step) as one more column;
  --sgemm PROBE       OpenBLAS SGEMM GFLOP/s (bench/cpu/sgemm_probe.cc) once per trial, printed
                      with each binary's model GFLOP/s (Megatron's formula);
  --profile RUNS      afterwards, each binary's per-op profile (GPT_OP_PROFILE_FROM=4, 8 iterations),
                      per op the median of RUNS alternating runs.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llmc_baseline  # noqa: E402

MODEL = ["--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "50256",
         "--num-layers", "4", "--hidden-size", "128", "--num-attention-heads", "4",
         "--seq-length", "128", "--max-position-embeddings", "128",
         "--micro-batch-size", "4", "--global-batch-size", "8",
         "--lr", "3e-4", "--hidden-dropout", "0", "--attention-dropout", "0", "--log-interval", "1"]


def trial(binary, iters, skip, extra, threads):
    with tempfile.TemporaryDirectory() as directory:
        metrics = os.path.join(directory, "metrics.jsonl")
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
        command = [binary, *MODEL, "--train-iters", str(iters), "--eval-iters", "0", "--metrics-file", metrics, *extra]
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


def megatron_flops(batch=8, seq=128, layers=4, hidden=128, vocab=50304):
    """Model FLOPs of one iteration (Megatron's formula, no recomputation)."""
    return 72 * batch * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))


def torch_trial(iters, skip, threads):
    command = ["/usr/bin/python3", os.path.join(HERE, "..", "torch_gpt_baseline.py"), "--device", "cpu",
               "--layers", "4", "--hidden", "128", "--heads", "4", "--seq", "128", "--micro-batch", "4",
               "--accumulation", "2", "--threads", str(threads), "--warmup", str(skip),
               "--iterations", str(iters - skip)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"torch baseline failed: {result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])["times_ms"]


def sgemm_trial(probe, threads):
    result = subprocess.run([probe, "--threads", str(threads)], capture_output=True, text=True, check=True)
    rates = {}
    for line in result.stdout.splitlines():
        record = json.loads(line)
        rates[record["shape"]] = record["gflops"]
    return rates


def profile(binary, extra, threads):
    """One per-op profile (GPT_OP_PROFILE_FROM=4, 8 iterations): {op: ms per iteration}."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), GPT_OP_PROFILE="1",
               GPT_OP_PROFILE_FROM="4")
    with tempfile.TemporaryDirectory() as directory:
        command = [binary, *MODEL, "--train-iters", "8", "--eval-iters", "0",
                   "--metrics-file", os.path.join(directory, "m.jsonl"), *extra]
        result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{binary} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
    ops = {}
    for line in (result.stdout + result.stderr).splitlines():
        match = re.match(r"\| (.+?) \| ?(\d*) ?\| ([\d.]+) \|", line)
        if match:
            ops[match.group(1)] = float(match.group(3))
    return ops


def print_profiles(binaries, runs, extra, threads):
    """Per op, the median over `runs` profiles of each binary (alternating), and its share of the
    median measured step."""
    samples = {b: {} for b in binaries}
    for _ in range(runs):
        for binary in binaries:
            for op, ms in profile(binary, extra, threads).items():
                samples[binary].setdefault(op, []).append(ms)
    for binary in binaries:
        ops = samples[binary]
        step = statistics.median(ops.pop("step (measured)"))
        print(f"\nper-op profile of {binary} {' '.join(extra)}: median of {runs} runs, ms per iteration")
        print("| op | ms / iteration | share of step |\n|---|---|---|")
        for op, values in sorted(ops.items(), key=lambda kv: -statistics.median(kv[1])):
            if statistics.median(values) >= 0.05:
                print(f"| {op} | {statistics.median(values):.1f} | {100 * statistics.median(values) / step:.1f}% |")
        print(f"| step (measured) | {step:.1f} | 100% |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--iters", type=int, default=12)
    parser.add_argument("--skip", type=int, default=2, help="iterations left out at the start of each trial")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--torch", action="store_true", help="PyTorch eager on the same model, alternated too")
    parser.add_argument("--llmc", metavar="DIR", help="an llm.c checkout: its CPU trainer, alternated too")
    parser.add_argument("--sgemm", metavar="PROBE", help="sgemm_probe binary, run once per trial")
    parser.add_argument("--profile", type=int, default=0, metavar="RUNS",
                        help="afterwards, each binary's per-op profile: medians of RUNS alternating runs")
    args, extra = parser.parse_known_args()
    extra = [e for e in extra if e != "--"]
    if args.iters <= args.skip:
        sys.exit("--iters must exceed --skip")
    samples = {b: [] for b in args.binaries}
    torch_name = "PyTorch eager (torch_gpt_baseline.py --device cpu)"
    if args.torch:
        samples[torch_name] = []
    llmc_name = "llm.c train_gpt2.c (-Ofast -march=native, OpenMP)"
    llmc_work = tempfile.TemporaryDirectory() if args.llmc else None
    if args.llmc:
        samples[llmc_name] = []
        llmc_binary = llmc_baseline.prepare(args.llmc, llmc_work.name, args.iters)
    sgemm = []
    for t in range(args.trials):
        for binary in args.binaries:
            samples[binary].extend(trial(binary, args.iters, args.skip, extra, args.threads))
        if args.torch:
            samples[torch_name].extend(torch_trial(args.iters, args.skip, args.threads))
        if args.llmc:
            samples[llmc_name].extend(llmc_baseline.trial(llmc_binary, args.skip, args.threads))
        if args.sgemm:
            sgemm.append(sgemm_trial(args.sgemm, args.threads))
    first = statistics.median(samples[args.binaries[0]])
    flops = megatron_flops()
    print(f"{'binary':60s} {'median ms/iter':>15s} {'min':>9s} {'ratio':>7s} {'model GFLOP/s':>14s}")
    for binary, times in samples.items():
        median = statistics.median(times)
        print(f"{binary:60s} {median:15.1f} {min(times):9.1f} {median / first:7.3f} {flops / median / 1e6:14.1f}")
    if sgemm:
        for shape in sgemm[0]:
            rates = [r[shape] for r in sgemm]
            print(f"OpenBLAS SGEMM {shape:12s} median {statistics.median(rates):7.1f} GFLOP/s "
                  f"(max {max(rates):.1f}, {len(rates)} trials, {args.threads} threads)")
    if args.profile:
        print_profiles(args.binaries, args.profile, extra, args.threads)


if __name__ == "__main__":
    main()

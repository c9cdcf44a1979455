#!/usr/bin/python3
"""MoE against the dense model of the same active size, per parallel layout, on this machine, with
perf_model's prediction of both (issue 41). The machine is shared (its load moves absolute times by
several times between runs), so the figure checked is the ratio MoE / dense of the same layout,
measured with the two models alternating run by run (dense, MoE, dense, ...) and trials in
alternating layout order: a load change falls on both sides of a ratio alike.

    bench/cpu/moe_layout_ratio.py --binary build-cpu/bin/pretrain_gpt --perf-model build-cpu/bin/perf_model \
        [--layouts dp2 tp2-sp pp2] [--trials 3] [--iterations 12] [--warmup 4] [--cluster cpu-measured]

Dense: ffn 512 in every layer. MoE: 4 experts of ffn 256, top-2 (the same active ffn 2 x 256 and
the same model FLOPs by Megatron's formula), aux loss 1e-2, dropless, the allgather dispatcher (the
trainer's one-rank layout: EP 1, the experts split over TP). Prints per layout the medians, the
measured and predicted ratios and the ratio's error (predicted / measured - 1).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODEL = ("--device cpu --mock-data --lr 1e-3 --vocab-size 1024 --num-layers 4 --hidden-size 128 "
         "--num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 --micro-batch-size 2 "
         "--global-batch-size 16 --disable-bias-linear").split()
DENSE = ["--ffn-hidden-size", "512"]
MOE = ["--ffn-hidden-size", "512", "--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "256",
       "--moe-aux-loss-coeff", "1e-2"]
LAYOUTS = {"dp2": [], "tp2-sp": ["--tensor-model-parallel-size", "2", "--sequence-parallel"],
           "pp2": ["--pipeline-model-parallel-size", "2"], "tp2": ["--tensor-model-parallel-size", "2"],
           # Expert parallelism over the two data-parallel ranks (the dense model ignores the flags'
           # absence: it runs plain dp2); allgather and alltoall dispatchers.
           "dp2-ep2": ["--expert-model-parallel-size", "2"],
           "dp2-ep2-a2a": ["--expert-model-parallel-size", "2", "--moe-token-dispatcher-type", "alltoall"]}
EXPERT_ONLY = ("--expert-model-parallel-size", "--moe-token-dispatcher-type")


def layout_flags(layout, model):
    """The layout's flags; the dense model drops the expert ones (it has no experts)."""
    flags = LAYOUTS[layout]
    if model == "moe":
        return flags
    kept, skip = [], False
    for flag in flags:
        if skip:
            skip = False
        elif flag in EXPERT_ONLY:
            skip = True
        else:
            kept.append(flag)
    return kept


def measured_ms(args, flags, work, name):
    metrics = os.path.join(work, name + ".jsonl")
    command = [args.mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none", args.binary] + flags + [
        "--train-iters", str(args.iterations), "--log-interval", "1", "--metrics-file", metrics]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit {done.returncode}: {done.stderr[-1500:]}")
    with open(metrics) as f:
        logs = [json.loads(line) for line in f if line.strip()]
    times = [r["elapsed_time_per_iteration_ms"] for r in logs
             if "elapsed_time_per_iteration_ms" in r and r.get("iteration", 0) > args.warmup]
    return statistics.mean(times)


def predicted_ms(args, flags):
    model_flags = [f for f in flags if f not in ("--device", "cpu", "--mock-data")]
    done = subprocess.run([args.perf_model, "--cluster", args.cluster, "--world-size", "2", "--json"] + model_flags,
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"perf_model: {done.stderr}")
    return json.loads(done.stdout)["iteration_time_s"] * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--perf-model", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--cluster", default="cpu-measured")
    parser.add_argument("--layouts", nargs="+", default=["dp2", "tp2-sp", "pp2"], choices=sorted(LAYOUTS))
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=4)
    args = parser.parse_args()
    times = {(layout, model): [] for layout in args.layouts for model in ("dense", "moe")}
    with tempfile.TemporaryDirectory() as work:
        for trial in range(args.trials):
            order = args.layouts if trial % 2 == 0 else list(reversed(args.layouts))
            for layout in order:
                models = ("dense", "moe") if trial % 2 == 0 else ("moe", "dense")
                for model in models:
                    flags = MODEL + (DENSE if model == "dense" else MOE) + layout_flags(layout, model)
                    ms = measured_ms(args, flags, work, f"{layout}-{model}-{trial}")
                    times[(layout, model)].append(ms)
                    print(f"trial {trial + 1} {layout:7} {model:5} {ms:8.1f} ms/iter", flush=True)
    print(f"\n| layout | dense ms (median; trials) | MoE ms (median; trials) | measured MoE / dense | "
          f"predicted MoE / dense ({args.cluster}) | ratio error |")
    print("|---|---|---|---|---|---|")
    errors = []
    for layout in args.layouts:
        dense, moe = times[(layout, "dense")], times[(layout, "moe")]
        # The ratio of each trial's pair (run back to back), then their median.
        measured = statistics.median(m / d for m, d in zip(moe, dense))
        predicted = (predicted_ms(args, MODEL + MOE + layout_flags(layout, "moe")) /
                     predicted_ms(args, MODEL + DENSE + layout_flags(layout, "dense")))
        error = predicted / measured - 1
        errors.append(abs(error))
        print(f"| {layout} | {statistics.median(dense):.1f} ({'; '.join(f'{t:.0f}' for t in dense)}) | "
              f"{statistics.median(moe):.1f} ({'; '.join(f'{t:.0f}' for t in moe)}) | {measured:.3f} | "
              f"{predicted:.3f} | {100 * error:+.1f}% |")
    print(f"\nmean absolute ratio error {100 * statistics.mean(errors):.1f}% over {len(errors)} layouts")
    return 0


if __name__ == "__main__":
    sys.exit(main())

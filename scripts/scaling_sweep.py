#!/usr/bin/python3
"""Throughput scaling study: runs pretrain_gpt once per layout under mpirun, reads each run's
--metrics-file, and writes sweep.csv plus two plots (throughput per GPU and scaling efficiency
against world size; a stacked per-iteration time breakdown per layout).

    scripts/scaling_sweep.py --out sweep/ --layouts tp1 tp2 dp2 tp2-dp2 tp2-pp2-dp2-zero \
        [--scaling strong|weak] [--iterations 20] [--warmup 5] [--trials 1] -- <pretrain_gpt model flags>

A layout is dash-separated parts: tpN, ppN, dpN (world size = their product), vN (virtual
stages per pipeline rank), cpN (context parallel; world size times N), sp (sequence parallel), zero
(distributed optimizer, ZeRO-1), zero2 / zero3 (--use-megatron-fsdp with
--data-parallel-sharding-strategy optim_grads / optim_grads_params), mbsN, rfull (full
recompute, every layer: --recompute-granularity full --recompute-method uniform
--recompute-num-layers 1), rsel (--recompute-granularity selective). Strong
scaling keeps --global-batch-size; weak scaling multiplies it by the layout's DP size (the model
flags give the batch of DP = 1). The model flags must not set the layout, --train-iters,
--log-interval or --metrics-file: the sweep sets them. Works unchanged on the CPU backend and on
GPUs; docs/SCALING.md has an example.

Per layout, over the logged iterations after the warm-up: mean elapsed ms per iteration, tokens/s,
tokens/s per GPU, TFLOP/s per GPU (Megatron's formula, as the log line), and the timers' slowest
rank (forward-backward, all-grads-sync, optimizer; 'other' = elapsed minus their sum). Scaling
efficiency = tokens/s per GPU over that of the smallest world size in the sweep (for weak and
strong scaling alike: 1.0 means perfect scaling).

--trials N runs the whole list N times, in order and then in reverse order alternately, so that a
change of the machine's load during the sweep falls on every layout alike; a layout's figures are
then those of its median trial (by elapsed ms), with every trial's ms in elapsed_ms_trials.
"""

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import textwrap

TIMERS = ("forward-backward", "all-grads-sync", "optimizer")
LAYOUT_PART = re.compile(r"^(tp|pp|dp|cp|v|mbs)(\d+)$|^(sp|zero|zero2|zero3|rfull|rsel)$")
OWNED_FLAGS = ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
               "--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage",
               "--sequence-parallel", "--use-distributed-optimizer", "--train-iters", "--log-interval",
               "--metrics-file", "--timing-log-level", "--recompute-granularity", "--recompute-method",
               "--recompute-num-layers", "--recompute-activations", "--use-megatron-fsdp",
               "--data-parallel-sharding-strategy", "--context-parallel-size")


class SweepError(Exception):
    pass


def parse_layout(text):
    """'tp2-pp2-dp2-zero' -> dict(tp, pp, dp, v, sp, zero, mbs)."""
    layout = {"name": text, "tp": 1, "pp": 1, "dp": 1, "cp": 1, "v": 1, "sp": False, "zero": False, "zero2": False,
              "zero3": False, "mbs": None, "rfull": False, "rsel": False}
    for part in text.split("-"):
        m = LAYOUT_PART.match(part)
        if not m:
            raise SweepError(f"layout '{text}': unknown part '{part}' (expected tpN, ppN, dpN, cpN, vN, mbsN, sp, "
                             "zero, zero2, zero3, rfull, rsel)")
        if m[1]:
            value = int(m[2])
            if value < 1:
                raise SweepError(f"layout '{text}': {m[1]} must be at least 1")
            layout[m[1]] = value
        else:
            layout[m[3]] = True
    if layout["rfull"] and layout["rsel"]:
        raise SweepError(f"layout '{text}': rfull and rsel exclude each other")
    if sum(layout[z] for z in ("zero", "zero2", "zero3")) > 1:
        raise SweepError(f"layout '{text}': name one of zero, zero2, zero3")
    layout["world"] = layout["tp"] * layout["pp"] * layout["dp"] * layout["cp"]
    return layout


def flag_value(flags, name):
    for i, flag in enumerate(flags):
        if flag == name and i + 1 < len(flags):
            return flags[i + 1]
        if flag.startswith(name + "="):
            return flag.split("=", 1)[1]
    return None


def layout_flags(layout, model_flags, scaling):
    flags = ["--tensor-model-parallel-size", str(layout["tp"]), "--pipeline-model-parallel-size", str(layout["pp"])]
    if layout["v"] > 1:
        flags += ["--num-virtual-stages-per-pipeline-rank", str(layout["v"])]
    if layout["sp"]:
        flags.append("--sequence-parallel")
    if layout["zero"]:
        flags.append("--use-distributed-optimizer")
    if layout["zero2"] or layout["zero3"]:
        flags += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                  "optim_grads" if layout["zero2"] else "optim_grads_params"]
    if layout["cp"] > 1:
        flags += ["--context-parallel-size", str(layout["cp"])]
    if layout["mbs"]:
        flags += ["--micro-batch-size", str(layout["mbs"])]
    if layout["rfull"]:
        flags += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if layout["rsel"]:
        flags += ["--recompute-granularity", "selective"]
    if scaling == "weak":
        gbs = flag_value(model_flags, "--global-batch-size")
        if gbs is None:
            raise SweepError("weak scaling needs --global-batch-size in the model flags (the batch of DP = 1)")
        flags += ["--global-batch-size", str(int(gbs) * layout["dp"])]
    return flags


def without(flags, names):
    """flags less the given flags (and their values)."""
    out, skip = [], False
    for flag in flags:
        if skip:
            skip = False
            continue
        if flag in names:
            skip = flag not in ("--sequence-parallel", "--use-distributed-optimizer", "--use-megatron-fsdp")
            continue
        out.append(flag)
    return out


def launcher(mpirun, world):
    command = [mpirun, "-np", str(world), "--oversubscribe", "--bind-to", "none"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-run-as-root")
    return command


def summarize(layout, records, warmup):
    """One CSV row from a run's metrics records (training log records only, after the warm-up)."""
    logs = [r for r in records
            if not r.get("validation") and not r.get("pipeline_timeline") and r["iteration"] > warmup]
    if not logs:
        raise SweepError(f"layout {layout['name']}: no logged iteration after the warm-up of {warmup}")

    def mean(values):
        return sum(values) / len(values)

    elapsed = mean([r["elapsed_time_per_iteration_ms"] for r in logs])
    tokens = mean([r["tokens_per_second"] for r in logs])
    row = {
        "layout": layout["name"], "world_size": layout["world"], "tp": layout["tp"], "pp": layout["pp"],
        "dp": layout["dp"], "v": layout["v"], "sp": int(layout["sp"]), "zero": int(layout["zero"]),
        "global_batch_size": logs[-1]["global_batch_size"], "iterations": len(logs),
        "elapsed_ms": elapsed, "tokens_per_s": tokens, "tokens_per_s_per_gpu": tokens / layout["world"],
        "tflops_per_gpu": mean([r["throughput_tflops_per_gpu"] for r in logs]),
        "lm_loss_last": logs[-1]["lm_loss"],
    }
    timed = 0.0
    for name in TIMERS:
        values = [r.get("timers_ms", {}).get(name, {}).get("max") for r in logs]
        value = mean(values) if all(v is not None for v in values) else 0.0
        row[f"{name}_ms"] = value
        timed += value
    row["other_ms"] = max(0.0, elapsed - timed)
    return row


def add_efficiency(rows):
    base = min(rows, key=lambda r: (r["world_size"], -r["tokens_per_s_per_gpu"]))
    for row in rows:
        row["scaling_efficiency"] = row["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"]


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)


def plot(rows, out, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_world = sorted(rows, key=lambda r: (r["world_size"], r["layout"]))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    worlds = [r["world_size"] for r in by_world]
    left.plot(worlds, [r["tokens_per_s_per_gpu"] for r in by_world], "o")
    for r in by_world:
        left.annotate(r["layout"], (r["world_size"], r["tokens_per_s_per_gpu"]), fontsize=7,
                      textcoords="offset points", xytext=(4, 4))
    left.set_xscale("log", base=2)
    left.set_xlabel("world size (ranks)")
    left.set_ylabel("tokens/s per GPU (rank)")
    left.set_title("throughput per GPU")
    right.plot(worlds, [r["scaling_efficiency"] for r in by_world], "s", color="tab:green")
    for r in by_world:
        right.annotate(r["layout"], (r["world_size"], r["scaling_efficiency"]), fontsize=7,
                       textcoords="offset points", xytext=(4, 4))
    right.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
    right.set_xscale("log", base=2)
    right.set_xlabel("world size (ranks)")
    right.set_ylabel("efficiency vs smallest world")
    right.set_title("scaling efficiency")
    fig.suptitle(textwrap.fill(title, 140), fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput.png"), dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(by_world) + 2), 4.2))
    names = [r["layout"] for r in by_world]
    bottom = [0.0] * len(by_world)
    for part in [f"{t}_ms" for t in TIMERS] + ["other_ms"]:
        values = [r[part] for r in by_world]
        ax.bar(names, values, bottom=bottom, label=part[:-3])
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("ms per iteration (slowest rank)")
    ax.set_title("time breakdown per layout")
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "breakdown.png"), dpi=110)
    plt.close(fig)


def run_layout(args, layout, model_flags, trial):
    """One run of one layout under mpirun: its summary row (None with --dry-run)."""
    suffix = "" if trial == 0 else f".t{trial}"
    metrics = os.path.join(args.out, f"{layout['name']}{suffix}.jsonl")
    # The layout's batch flags replace the model's.
    replaced = (["--micro-batch-size"] if layout["mbs"] else []) + (["--global-batch-size"] if args.scaling == "weak"
                                                                    else [])
    flags = without(model_flags, replaced)
    command = launcher(args.mpirun, layout["world"]) + [args.binary] + flags + layout_flags(
        layout, model_flags, args.scaling) + ["--train-iters", str(args.iterations), "--log-interval", "1",
                                              "--timing-log-level", "1", "--metrics-file", metrics]
    print("sweep:", " ".join(command), flush=True)
    if args.dry_run:
        return None
    run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with open(os.path.join(args.out, f"{layout['name']}{suffix}.log"), "w") as log:
        log.write(run.stdout + run.stderr)
    if run.returncode != 0:
        tail = (run.stderr.strip() or run.stdout.strip()).splitlines()[-3:]
        raise SweepError(f"layout {layout['name']} failed (exit {run.returncode}): " + " / ".join(tail))
    with open(metrics) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return summarize(layout, records, args.warmup)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for the metrics files, sweep.csv and the plots")
    parser.add_argument("--layouts", nargs="+", default=[], help="e.g. tp1 tp2 dp2 tp2-pp2-dp2-zero")
    parser.add_argument("--scaling", choices=("strong", "weak"), default="strong")
    parser.add_argument("--iterations", type=int, default=20, help="training iterations per run")
    parser.add_argument("--warmup", type=int, default=5, help="first iterations left out of the means")
    parser.add_argument("--trials", type=int, default=1, help="runs of the whole list, alternating its order")
    parser.add_argument("--binary", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                         "build", "bin", "pretrain_gpt"))
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--replot", action="store_true", help="redraw the plots from --out's sweep.csv, run nothing")
    parser.add_argument("model_flags", nargs=argparse.REMAINDER, help="-- then pretrain_gpt's model flags")
    args = parser.parse_args(argv)
    model_flags = args.model_flags[1:] if args.model_flags[:1] == ["--"] else args.model_flags
    try:
        if args.replot:
            with open(os.path.join(args.out, "sweep.csv")) as f:
                text_columns = ("layout", "elapsed_ms_trials")
                rows = [{k: (v if k in text_columns else float(v)) for k, v in r.items()} for r in csv.DictReader(f)]
            plot(rows, args.out, f"{args.scaling} scaling: " + " ".join(model_flags))
            return 0
        if not args.layouts:
            raise SweepError("--layouts: give at least one layout (e.g. tp1 tp2 dp2)")
        if args.iterations <= args.warmup:
            raise SweepError(f"--iterations ({args.iterations}) must exceed --warmup ({args.warmup})")
        for flag in OWNED_FLAGS:
            if flag_value(model_flags, flag) is not None or flag in model_flags:
                raise SweepError(f"the model flags must not set {flag}: the sweep sets it per layout")
        if args.trials < 1:
            raise SweepError(f"--trials must be at least 1 (got {args.trials})")
        layouts = [parse_layout(text) for text in args.layouts]
        os.makedirs(args.out, exist_ok=True)
        trials = {layout["name"]: [] for layout in layouts}
        for trial in range(args.trials):
            for layout in (layouts if trial % 2 == 0 else layouts[::-1]):
                row = run_layout(args, layout, model_flags, trial)
                if row is not None:
                    trials[layout["name"]].append(row)
        if args.dry_run:
            return 0
        rows = []
        for layout in layouts:
            runs = sorted(trials[layout["name"]], key=lambda r: r["elapsed_ms"])
            row = dict(runs[(len(runs) - 1) // 2])
            if args.trials > 1:
                row["elapsed_ms_trials"] = ";".join(f"{r['elapsed_ms']:.1f}" for r in trials[layout["name"]])
            rows.append(row)
        add_efficiency(rows)
        write_csv(rows, os.path.join(args.out, "sweep.csv"))
        plot(rows, args.out, f"{args.scaling} scaling: " + " ".join(model_flags))
        for row in rows:
            print(f"sweep: {row['layout']:>20} world {row['world_size']:2d} | {row['elapsed_ms']:9.1f} ms/iter | "
                  f"{row['tokens_per_s_per_gpu']:10.1f} tokens/s/GPU | efficiency {row['scaling_efficiency']:.2f}")
        print(f"sweep: wrote {os.path.join(args.out, 'sweep.csv')}, throughput.png, breakdown.png")
        return 0
    except SweepError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

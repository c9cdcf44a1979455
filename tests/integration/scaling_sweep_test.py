#!/usr/bin/python3
"""scripts/scaling_sweep.py on a tiny CPU model: a weak-scaling sweep over three layouts (1, 2
and 4 ranks) writes sweep.csv whose rows equal what this test computes from the runs' own metrics
files (means after the warm-up, per-GPU throughput, efficiency against the one-rank run, the
weak-scaling batch of each layout), and two PNG plots; a bad layout or a model flag the sweep
owns ends with one error line and exit status 1."""

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MODEL = ("--device cpu --mock-data --vocab-size 512 --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
         "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 "
         "--lr 1e-3").split()
LAYOUTS = {"tp1": (1, 1, 1), "dp2": (1, 1, 2), "tp2-dp2-zero": (2, 1, 2)}  # (tp, pp, dp)
ITERATIONS, WARMUP = 5, 2


def sweep(args, out, layouts, extra_model=(), scaling="weak"):
    command = ["/usr/bin/python3", args.sweep, "--out", out, "--layouts", *layouts, "--scaling", scaling,
               "--iterations", str(ITERATIONS), "--warmup", str(WARMUP), "--binary", args.binary,
               "--mpirun", args.mpirun, "--", *MODEL, *extra_model]
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)


def expected_row(out, name):
    with open(os.path.join(out, f"{name}.jsonl")) as f:
        logs = [r for r in map(json.loads, f) if not r.get("validation") and r["iteration"] > WARMUP]
    tp, pp, dp = LAYOUTS[name]
    world = tp * pp * dp
    mean = lambda key: sum(r[key] for r in logs) / len(logs)  # noqa: E731
    return {"world_size": world, "tp": tp, "pp": pp, "dp": dp, "iterations": len(logs),
            "global_batch_size": 4 * dp, "elapsed_ms": mean("elapsed_time_per_iteration_ms"),
            "tokens_per_s_per_gpu": mean("tokens_per_second") / world,
            "forward-backward_ms": sum(r["timers_ms"]["forward-backward"]["max"] for r in logs) / len(logs)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweep", required=True)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    failures = []

    out = os.path.join(args.work, "weak")
    run = sweep(args, out, list(LAYOUTS))
    if run.returncode != 0:
        return harness.finish([f"sweep failed (exit {run.returncode}):\n{run.stdout}\n{run.stderr}"])
    with open(os.path.join(out, "sweep.csv")) as f:
        rows = {r["layout"]: r for r in csv.DictReader(f)}
    if sorted(rows) != sorted(LAYOUTS):
        failures.append(f"sweep.csv has layouts {sorted(rows)}, expected {sorted(LAYOUTS)}")
    else:
        base = expected_row(out, "tp1")["tokens_per_s_per_gpu"]
        for name in LAYOUTS:
            want = expected_row(out, name)
            got = rows[name]
            for key, value in want.items():
                if not math.isclose(float(got[key]), value, rel_tol=1e-9, abs_tol=1e-12):
                    failures.append(f"{name}: {key} = {got[key]}, expected {value} from its metrics file")
            efficiency = want["tokens_per_s_per_gpu"] / base
            if not math.isclose(float(got["scaling_efficiency"]), efficiency, rel_tol=1e-9):
                failures.append(f"{name}: scaling_efficiency {got['scaling_efficiency']}, expected {efficiency}")
            parts = sum(float(got[k]) for k in ("forward-backward_ms", "all-grads-sync_ms", "optimizer_ms",
                                                 "other_ms"))
            if parts < float(got["elapsed_ms"]) * (1 - 1e-9):
                failures.append(f"{name}: the breakdown ({parts} ms) does not cover the iteration "
                                f"({got['elapsed_ms']} ms)")
    for png in ("throughput.png", "breakdown.png"):
        path = os.path.join(out, png)
        with open(path, "rb") as f:
            head = f.read(8)
        if head != b"\x89PNG\r\n\x1a\n" or os.path.getsize(path) < 2000:
            failures.append(f"{png} is not a plot ({os.path.getsize(path)} bytes, header {head!r})")

    # Bad input: one error line, exit 1, no run started.
    for layouts, extra, message in ((["tp2-xx3"], [], "unknown part 'xx3'"),
                                    (["tp1"], ["--train-iters", "9"], "must not set --train-iters"),
                                    (["tp1-rfull-rsel"], [], "rfull and rsel exclude each other"),
                                    (["tp1"], ["--recompute-granularity", "full"],
                                     "must not set --recompute-granularity")):
        bad = sweep(args, os.path.join(args.work, "bad"), layouts, extra)
        lines = bad.stderr.strip().splitlines()
        if bad.returncode != 1 or len(lines) != 1 or message not in lines[0]:
            failures.append(f"{layouts} {extra}: exit {bad.returncode}, stderr {bad.stderr!r}; expected '{message}'")

    # --trials alternates the order of the list; rfull and rsel set the recompute flags.
    dry = subprocess.run(["/usr/bin/python3", args.sweep, "--out", os.path.join(args.work, "dry"), "--layouts",
                          "tp1-rfull", "dp2-rsel", "--trials", "3", "--dry-run", "--binary", args.binary,
                          "--mpirun", args.mpirun, "--", *MODEL],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    commands = [line for line in dry.stdout.splitlines() if line.startswith("sweep:")]
    order = ["rfull" if "--recompute-method uniform" in c else "rsel" for c in commands]
    if dry.returncode != 0 or order != ["rfull", "rsel", "rsel", "rfull", "rfull", "rsel"]:
        failures.append(f"--trials 3 --dry-run: exit {dry.returncode}, order {order}, stderr {dry.stderr!r}")
    if not any("--recompute-granularity selective" in c for c in commands):
        failures.append("rsel does not set --recompute-granularity selective")
    return harness.finish(failures, f"{len(LAYOUTS)} layouts")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""--metrics-file: every line is a JSON object whose values equal those of the log lines, timer
lines and evaluation lines printed by the same run, on one rank and under mpirun -np 4 (TP2 x DP2);
a resumed run (--save, then --load) appends to the file; a file that cannot be opened ends the job
with one error line before training. Mixture of experts (issue 40): Megatron's load-balancing and
z-loss fields equal the printed ones, the per-layer values (--moe-per-layer-logging) average to
them over the MoE layers and are 0 on a dense layer, and the expert load of every MoE layer counts
each (token, expert) pair of the global batch once -- on one rank and TP2 x DP2 alike."""

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

TINY = ("--device cpu --mock-data --vocab-size 512 --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
        "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 "
        "--train-iters 6 --lr 1e-3 --log-interval 2 --eval-interval 3 --eval-iters 1 "
        "--timing-log-level 1 --log-throughput").split()
GBS, SEQ = 8, 32

LOG_LINE = re.compile(
    r"^ \[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \| "
    r"elapsed time per iteration \(ms\): ([\d.]+) \| throughput per GPU \(TFLOP/s/GPU\): ([\d.]+) \| "
    r"tokens per GPU \(tokens/s/GPU\): ([\d.]+) \| "
    r"learning rate: (\S+) \| global batch size: +(\d+) \| (?:lm loss: (\S+) \| )?"
    r"loss scale: ([\d.]+) \| grad norm: (\S+) \| number of skipped iterations: +(\d+) \| "
    r"number of nan iterations: +(\d+) \|$")
TIMER = re.compile(r"^    (\S+) \.*: \(([\d.-]+), ([\d.-]+)\)$")
# During training "at iteration N", after it "at iteration N on validation set" / "... on test set".
VALIDATION = re.compile(r"^ validation loss at iteration (\d+)( on (validation|test) set)? \| "
                        r"lm loss value: (\S+) \| lm loss PPL: (\S+) \| $")


def printed_records(stdout):
    """The run's printed log lines (with the timer lines after each) and evaluations, in order."""
    records = []
    for line in stdout.splitlines():
        if m := LOG_LINE.match(line):
            records.append({"kind": "log", "timestamp": m[1], "iteration": int(m[2]), "train_iters": int(m[3]),
                            "consumed": int(m[4]), "elapsed": m[5], "tflops": m[6], "tokens": m[7], "lr": m[8],
                            "gbs": int(m[9]), "loss": m[10], "loss_scale": m[11], "grad_norm": m[12],
                            "skipped": int(m[13]), "nan": int(m[14]), "timers": {}})
        elif (m := TIMER.match(line)) and records and records[-1]["kind"] == "log":
            records[-1]["timers"][m[1]] = (m[2], m[3])
        elif m := VALIDATION.match(line):
            records.append({"kind": "validation", "iteration": int(m[1]),
                            "split": "test" if m[3] == "test" else "valid", "end": m[2] is not None,
                            "loss": m[4], "ppl": m[5]})
    return records


def compare(name, lines, printed, layout, failures):
    """Each JSON line against the printed record at the same position."""
    before = len(failures)
    if len(lines) != len(printed):
        failures.append(f"{name}: {len(lines)} metrics lines, {len(printed)} printed log/evaluation lines")
        return
    last_iteration = 0
    for i, (text, p) in enumerate(zip(lines, printed)):
        try:
            r = json.loads(text)
        except ValueError as error:
            failures.append(f"{name}: line {i + 1} is not JSON ({error}): {text!r}")
            continue
        where = f"{name}: line {i + 1}"
        if p["kind"] == "validation":
            got = (r.get("validation"), r.get("split"), r.get("end_of_training"), f"{r['lm_loss']:.6E}",
                   f"{r['lm_loss_ppl']:.6E}")
            want = (True, p["split"], p["end"], p["loss"], p["ppl"])
            # End-of-training evaluations carry the last iteration.
            if got != want or r["iteration"] != p["iteration"] or (p["end"] and p["iteration"] != last_iteration):
                failures.append(f"{where}: validation record {r} does not match the printed {p}")
            continue
        last_iteration = r["iteration"]
        seconds = r["elapsed_time_per_iteration_ms"] / 1e3
        got = {"timestamp": r["timestamp"], "iteration": r["iteration"], "train_iters": r["train_iters"],
               "consumed": r["consumed_samples"], "elapsed": f"{r['elapsed_time_per_iteration_ms']:.1f}",
               "tflops": f"{r['throughput_tflops_per_gpu']:.1f}",
               "tokens": f"{r['tokens_per_second'] / r['world_size']:.1f}", "lr": f"{r['learning_rate']:.6E}",
               "gbs": r["global_batch_size"], "loss": f"{r['lm_loss']:.6E}",
               "loss_scale": f"{r['loss_scale']:.1f}", "grad_norm": f"{r['grad_norm']:.3f}",
               "skipped": r["skipped_iterations"], "nan": r["nan_iterations"],
               "timers": {k: (f"{v['min']:.2f}", f"{v['max']:.2f}") for k, v in r.get("timers_ms", {}).items()}}
        want = {k: v for k, v in p.items() if k != "kind"}
        if got != want:
            failures.append(f"{where}: {got} differs from the printed line {want}")
        if not math.isclose(r["tokens_per_second"], GBS * SEQ / seconds, rel_tol=1e-9):
            failures.append(f"{where}: tokens_per_second {r['tokens_per_second']} is not {GBS * SEQ} / {seconds} s")
        if set(got["timers"]) != {"forward-backward", "all-grads-sync", "optimizer"}:
            failures.append(f"{where}: timers {sorted(got['timers'])}")
        shape = (r["world_size"], r["tensor_model_parallel_size"], r["pipeline_model_parallel_size"],
                 r["data_parallel_size"])
        if shape != layout:
            failures.append(f"{where}: layout {shape}, expected {layout}")
        if not r["memory"]["arena_bytes"] > 0:
            failures.append(f"{where}: memory {r['memory']}")
    if len(failures) == before:
        print(f"{name}: {len(lines)} JSON lines equal to the printed log, timer and evaluation lines")


MOE = ("--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 1e-2 "
       "--moe-z-loss-coeff 1e-3 --moe-layer-freq ([0]*1+[1]*2) --moe-per-layer-logging --num-layers 3 "
       "--disable-bias-linear --eval-iters 0").split()
MOE_FIELD = re.compile(r" (load_balancing_loss|z_loss): (\S+) \|")


def check_moe(name, lines, stdout, failures):
    """An MoE run's JSON lines against its printed MoE fields and against the batch's pair count."""
    before = len(failures)
    printed = [dict(MOE_FIELD.findall(line)) for line in stdout.splitlines() if " iteration " in line and "|" in line
               and "lm loss:" in line]
    records = [json.loads(line) for line in lines]
    records = [r for r in records if "iteration" in r and "validation" not in r]
    if len(records) != len(printed) or not records:
        failures.append(f"MoE {name}: {len(records)} records for {len(printed)} log lines")
        return None
    loads = []
    for record, fields in zip(records, printed):
        where = f"MoE {name}, iteration {record['iteration']}"
        for key in ("load_balancing_loss", "z_loss"):
            if key not in record or f"{record[key]:.6E}" != fields.get(key):
                failures.append(f"{where}: {key} {record.get(key)} against the printed {fields.get(key)}")
            layers = [record["moe_layers"].get(f"moe/{key}_layer_{i}") for i in range(3)]
            if None in layers or layers[0] != 0 or not math.isclose((layers[1] + layers[2]) / 2, record[key],
                                                                    rel_tol=1e-6):
                failures.append(f"{where}: per-layer {key} {layers} against the mean {record.get(key)}")
        load = record.get("expert_load", {})
        if sorted(load) != ["layer_1", "layer_2"]:
            failures.append(f"{where}: expert load of layers {sorted(load)}, expected the MoE layers 1 and 2")
            continue
        for layer, figures in load.items():
            tokens = figures["tokens_per_expert"]
            # Dropless: every token of the global batch (8 x 32) goes to 2 experts.
            if len(tokens) != 4 or sum(tokens) != GBS * SEQ * 2 or figures["max"] != max(tokens) or \
                    figures["mean"] != GBS * SEQ * 2 / 4 or \
                    not math.isclose(figures["max_over_mean"], max(tokens) / figures["mean"], rel_tol=1e-12):
                failures.append(f"{where}: {layer} load {figures}")
        loads.append(load)
    if len(failures) == before:
        print(f"MoE {name}: {len(records)} records with the printed MoE losses, per-layer values and the expert load "
              f"(first: {loads[0]['layer_1']['tokens_per_expert']})")
    return loads


def read_lines(path):
    with open(path) as f:
        text = f.read()
    if text and not text.endswith("\n"):
        return text.split("\n") + ["<no final newline>"]
    return text.splitlines()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    failures = []
    launcher = [args.mpirun, "-np", "4", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]

    def run(command, name):
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            failures.append(f"{name}: exit {result.returncode}: {result.stderr[-2000:]}")
        return result

    for name, prefix, extra, layout in [("1 rank", [], [], (1, 1, 1, 1)),
                                        ("TP2 x DP2", launcher, ["--tensor-model-parallel-size", "2"], (4, 2, 1, 2))]:
        path = os.path.join(args.work_dir, name.replace(" ", "_") + ".jsonl")
        with open(path, "w") as f:
            f.write("stale line from an earlier run\n")  # a run from iteration 0 truncates
        result = run(prefix + [args.binary] + TINY + extra + ["--metrics-file", path], name)
        printed = printed_records(result.stdout)
        # Iteration 1 (the first of the run, as Megatron) and every --log-interval 2.
        if [p["iteration"] for p in printed if p["kind"] == "log"] != [1, 2, 4, 6] or \
                sum(p["kind"] == "validation" for p in printed) < 3:
            failures.append(f"{name}: expected log lines at 1, 2, 4, 6 and at least 3 evaluations, got {printed}")
        # Megatron's progress lines for the evaluations after training: one set per split, each
        # "Evaluating on" followed by its "Evaluating iter". Under mpirun another rank's lines (the
        # logging rank's validation result) may come between the two, so not adjacent.
        progress = [line for line in result.stdout.splitlines() if line.startswith("Evaluating ")]
        if progress != ["Evaluating on 8 samples", "Evaluating iter 1/1"] * 2:
            failures.append(f"{name}: expected Megatron's 'Evaluating on 8 samples' / 'Evaluating iter 1/1' "
                            f"twice, got {progress}")
        compare(name, read_lines(path), printed, layout, failures)

    # Mixture of experts on one rank and TP2 x DP2: the same routing, so the same expert load.
    moe_loads = []
    for name, prefix, extra in [("1 rank", [], []), ("TP2 x DP2", launcher, ["--tensor-model-parallel-size", "2",
                                                                          "--sequence-parallel"])]:
        path = os.path.join(args.work_dir, "moe_" + name.replace(" ", "_") + ".jsonl")
        result = run(prefix + [args.binary] + TINY + MOE + extra + ["--metrics-file", path], "MoE " + name)
        if result.returncode == 0:
            moe_loads.append(check_moe(name, read_lines(path), result.stdout, failures))
    if len(moe_loads) == 2 and None not in moe_loads:
        first = [loads[0]["layer_1"]["tokens_per_expert"] for loads in moe_loads]
        if moe_loads[0] != moe_loads[1]:
            failures.append(f"MoE: one rank's expert load {first[0]} differs from TP2 x DP2's {first[1]}")
        else:
            print("MoE: TP2 x DP2's expert load equals one rank's")

    # Resumed: iterations 1-4 saved, then 5-6 loaded from the checkpoint append to the same file.
    path = os.path.join(args.work_dir, "resumed.jsonl")
    checkpoint = os.path.join(args.work_dir, "checkpoint")
    flags = TINY + ["--metrics-file", path, "--save", checkpoint]
    first = run([args.binary] + flags + ["--exit-interval", "4"], "resumed, first part")
    lines_first = len(read_lines(path)) if os.path.exists(path) else 0
    second = run([args.binary] + flags + ["--load", checkpoint], "resumed, second part")
    printed = printed_records(first.stdout) + printed_records(second.stdout)
    # The second part's first iteration (5) is logged as the first of its run.
    if [p["iteration"] for p in printed if p["kind"] == "log"] != [1, 2, 4, 5, 6]:
        failures.append(f"resumed: printed log iterations {[p['iteration'] for p in printed if p['kind'] == 'log']}")
    if lines_first == 0 or lines_first >= len(printed):
        failures.append(f"resumed: {lines_first} lines after the first part of {len(printed)} printed records")
    compare("resumed (--save, then --load appends)", read_lines(path), printed, (1, 1, 1, 1), failures)

    # A file that cannot be opened: one error line naming it, no training, non-zero exit.
    bad = os.path.join(args.work_dir, "no", "such", "dir", "m.jsonl")
    for name, prefix, extra in [("1 rank", [], []), ("TP2 x DP2", launcher, ["--tensor-model-parallel-size", "2"])]:
        result = subprocess.run(prefix + [args.binary] + TINY + extra + ["--metrics-file", bad], capture_output=True,
                                text=True, timeout=300)
        errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
        if result.returncode == 0 or len(errors) != 1 or f"--metrics-file {bad}" not in errors[0] or \
                "No such file or directory" not in errors[0] or LOG_LINE.search(result.stdout) or \
                any(LOG_LINE.match(l) for l in result.stdout.splitlines()):
            failures.append(f"{name}, unopenable file: exit {result.returncode}, errors {errors}")
        else:
            print(f"{name}: an unopenable --metrics-file ends the job with: {errors[0]}")
    # A FIFO nobody reads (issue 33): one error line at once, not a wait before training forever.
    fifo = os.path.join(args.work_dir, "metrics.fifo")
    os.mkfifo(fifo)
    started = time.time()
    result = subprocess.run([args.binary] + TINY + ["--metrics-file", fifo], capture_output=True, text=True, timeout=120)
    errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    if result.returncode == 0 or len(errors) != 1 or "a FIFO with no reader" not in errors[0] or fifo not in errors[0] \
            or time.time() - started > 60:
        failures.append(f"FIFO without a reader: exit {result.returncode} after {time.time() - started:.1f} s, {errors}")
    else:
        print(f"a FIFO without a reader: {errors[0]}")
    result = subprocess.run([args.binary] + TINY + ["--metrics-file", ""], capture_output=True, text=True, timeout=60)
    if result.returncode == 0 or "--metrics-file needs a path" not in result.stdout + result.stderr:
        failures.append(f"empty --metrics-file: exit {result.returncode}, {result.stdout[-300:]} {result.stderr[-300:]}")
    return harness.finish(failures, "metrics file")


if __name__ == "__main__":
    sys.exit(main())

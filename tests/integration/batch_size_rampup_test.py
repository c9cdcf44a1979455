#!/usr/bin/python3
"""Batch-size ramp-up (--rampup-batch-size) and step schedules (--step-batch-size-schedule) as
Megatron-LM computes them (issue 32).

  1. Per iteration, the global batch size, the consumed samples and the learning rate pretrain_gpt
     logs (--metrics-file), and the number of iterations, equal this file's own reimplementation of
     Megatron's calculators (megatron/core/num_microbatches_calculator.py: the ramp-up calculator
     before its removal, the step calculator of the head), update_train_iters and
     OptimizerParamScheduler, for a ramp-up, a step schedule with --train-samples and one with
     --train-iters.
  2. Layouts change nothing: TP2 x PP2, DP2, PP2 interleaved, PP2 x DP2 with ZeRO-1, PP2 zero-bubble
     V, DP2 ZeRO-2 with overlap train the ramp with the one-rank losses (relative 1e-5, FP32); the
     pipeline schedule is rebuilt at each new number of microbatches.
  3. Checkpoints: with --save, a checkpoint before each change of the number of microbatches
     (Megatron's train loop); a run stopped mid-ramp (--exit-interval) and resumed equals the
     uninterrupted run bit for bit (losses, learning rates, batch sizes, consumed samples).
  4. Megatron's refusals, one error line each.

  batch_size_rampup_test.py --binary build-cpu/bin/pretrain_gpt --mpirun mpirun
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import harness

MODEL = ["--device", "cpu", "--mock-data", "--vocab-size", "250", "--num-layers", "4", "--hidden-size", "64",
         "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
         "--micro-batch-size", "2", "--lr", "1e-3", "--min-lr", "1e-4", "--lr-decay-style", "cosine",
         "--clip-grad", "1.0", "--seed", "7", "--log-interval", "1", "--eval-iters", "0"]
RAMP = ["--global-batch-size", "16", "--rampup-batch-size", "4", "4", "40", "--train-samples", "120",
        "--lr-warmup-samples", "20"]
# Thresholds in tokens (--seq-length 32): 6 and 20 samples, one with a K suffix.
STEPS_BY_SAMPLES = ["--step-batch-size-schedule", "0:4 192:8 0.64K:16", "--train-samples", "100",
                    "--lr-warmup-samples", "12", "--lr-decay-samples", "90"]
STEPS_BY_ITERATIONS = ["--step-batch-size-schedule", "0:4,192:8,640:16", "--train-iters", "8",
                       "--lr-warmup-iters", "2", "--lr-decay-iters", "20"]
SEQ_LENGTH = 32
MICRO_BATCH = 2


# ---- Megatron's calculators, update_train_iters and scheduler, written again from its source ----

class RampUp:
    """RampupBatchsizeNumMicroBatchesCalculator (Megatron-LM before 532ad926)."""

    def __init__(self, start, increment, samples, global_batch_size):
        self.start, self.increment, self.samples, self.final = start, increment, samples, global_batch_size
        self.per_increment = samples / ((global_batch_size - start) // increment)

    def at(self, consumed):
        if consumed > self.samples:
            return self.final
        return self.start + int(consumed / self.per_increment) * self.increment

    def train_iters(self, train_samples):
        iterations = consumed = 0
        while consumed <= self.samples and consumed <= train_samples:
            consumed += self.at(consumed)
            iterations += 1
        if train_samples > consumed:
            iterations += (train_samples - consumed) // self.final
        return iterations


class Steps:
    """StepBatchsizeNumMicroBatchesCalculator (Megatron-LM head) with seq_length: token thresholds."""

    def __init__(self, text, seq_length):
        def number(value):
            value = value.strip().upper()
            scale = {"T": 10 ** 12, "B": 10 ** 9, "M": 10 ** 6, "K": 10 ** 3}.get(value[-1:], 1)
            return int(float(value[:-1] if scale != 1 else value) * scale)
        self.schedule = sorted(((number(t) // seq_length, number(b)) for t, b in
                                (entry.split(":", 1) for entry in text.replace(",", " ").split())),
                               key=lambda entry: entry[0])

    def at(self, consumed):
        batch = self.schedule[0][1]
        for threshold, size in self.schedule:
            if consumed < threshold:
                break
            batch = size
        return batch

    def train_iters(self, train_samples):
        iterations = consumed = 0
        while consumed < train_samples:
            consumed += self.at(consumed)
            iterations += 1
        return iterations


def megatron_lr(num_steps, max_lr, min_lr, warmup, decay, style):
    """OptimizerParamScheduler.get_lr (init_lr 0)."""
    if warmup > 0 and num_steps <= warmup:
        return max_lr * num_steps / warmup
    if style == "constant":
        return max_lr
    if num_steps > decay:
        return min_lr
    ratio = (num_steps - warmup) / (decay - warmup)
    coefficient = 1.0 - ratio if style == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1.0)
    return min_lr + coefficient * (max_lr - min_lr)


def expected(flags, data_parallel=1):
    """[(iteration, global batch size, consumed samples, learning rate)] of a one-run of `flags`."""
    value = lambda flag: flags[flags.index(flag) + 1] if flag in flags else None  # noqa: E731
    if "--rampup-batch-size" in flags:
        i = flags.index("--rampup-batch-size")
        calculator = RampUp(*(int(v) for v in flags[i + 1:i + 4]), int(value("--global-batch-size")))
    else:
        calculator = Steps(value("--step-batch-size-schedule"), SEQ_LENGTH)
    if value("--train-samples"):
        train_samples = int(value("--train-samples"))
        iterations = calculator.train_iters(train_samples)
        decay = int(value("--lr-decay-samples") or train_samples)
        warmup = int(value("--lr-warmup-samples") or 0)
    else:
        # Iteration-based: Megatron's scheduler counts iterations x args.global_batch_size, which a
        # step schedule leaves at micro batch x data-parallel size.
        iterations = int(value("--train-iters"))
        per_iteration = MICRO_BATCH * data_parallel
        decay = int(value("--lr-decay-iters") or iterations) * per_iteration
        warmup = int(value("--lr-warmup-iters") or 0) * per_iteration
    rows, consumed = [], 0
    for iteration in range(1, iterations + 1):
        batch = calculator.at(consumed)
        consumed += batch
        rows.append((iteration, batch, consumed, megatron_lr(consumed, 1e-3, 1e-4, warmup, decay, "cosine")))
    return rows


# ---- runs ----

def run(binary, mpirun, ranks, flags, work, name, check=True):
    metrics = os.path.join(work, name + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    command = [binary] + MODEL + flags + ["--metrics-file", metrics]
    if ranks > 1:
        command = mpirun + ["-np", str(ranks)] + command
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=work)
    if check and done.returncode != 0:
        raise RuntimeError(f"{name}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    records = []
    if os.path.exists(metrics):
        with open(metrics) as f:
            records = [r for r in map(json.loads, f) if "lm_loss" in r]
    return records, done


def compare_to_megatron(name, records, rows, failures):
    if len(records) != len(rows):
        failures.append(f"{name}: {len(records)} iterations logged, Megatron's calculator gives {len(rows)}")
        return
    for record, (iteration, batch, consumed, lr) in zip(records, rows):
        got = (record["iteration"], record["global_batch_size"], record["consumed_samples"], record["train_iters"])
        if got != (iteration, batch, consumed, len(rows)):
            failures.append(f"{name} iteration {iteration}: (iteration, global batch size, consumed samples, "
                            f"train iters) {got}, Megatron's {(iteration, batch, consumed, len(rows))}")
        if abs(record["learning_rate"] - lr) > 1e-9 * max(lr, 1e-30) + 1e-15:
            failures.append(f"{name} iteration {iteration}: learning rate {record['learning_rate']!r}, Megatron's {lr!r}")
    print(f"{name}: {len(rows)} iterations, batch sizes {[r[1] for r in rows]} equal Megatron's calculator "
          f"(and consumed samples, learning rates)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    mpirun = [args.mpirun, "--oversubscribe", "--bind-to", "none"]
    work = tempfile.mkdtemp(prefix="rampup_")
    failures = []
    try:
        # 1. Against Megatron's calculators.
        reference, _ = run(binary, mpirun, 1, RAMP, work, "ramp")
        compare_to_megatron("ramp-up", reference, expected(RAMP), failures)
        records, _ = run(binary, mpirun, 1, STEPS_BY_SAMPLES, work, "steps_samples")
        compare_to_megatron("steps (--train-samples)", records, expected(STEPS_BY_SAMPLES), failures)
        records, _ = run(binary, mpirun, 1, STEPS_BY_ITERATIONS, work, "steps_iterations")
        compare_to_megatron("steps (--train-iters)", records, expected(STEPS_BY_ITERATIONS), failures)
        records, _ = run(binary, mpirun, 2, STEPS_BY_ITERATIONS, work, "steps_iterations_dp2")
        compare_to_megatron("steps (--train-iters) DP2", records, expected(STEPS_BY_ITERATIONS, 2), failures)

        # 2. Layouts: the one-rank losses.
        layouts = {"tp2_pp2": (4, ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"]),
                   "dp2": (2, []),
                   "pp2_interleaved": (2, ["--pipeline-model-parallel-size", "2",
                                           "--num-layers-per-virtual-pipeline-stage", "1"]),
                   "pp2_dp2_zero1": (4, ["--pipeline-model-parallel-size", "2", "--use-distributed-optimizer"]),
                   "pp2_zb_v": (2, ["--pipeline-model-parallel-size", "2", "--pipeline-schedule", "zb-v",
                                    "--num-virtual-stages-per-pipeline-rank", "2"]),
                   "dp2_zero2_overlap": (2, ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads",
                                             "--overlap-grad-reduce", "--overlap-param-gather"])}
        for name, (ranks, flags) in layouts.items():
            records, _ = run(binary, mpirun, ranks, RAMP + flags, work, name)
            worst = max(abs(r["lm_loss"] - q["lm_loss"]) / abs(q["lm_loss"]) for r, q in zip(records, reference))
            same_batches = [r["global_batch_size"] for r in records] == [q["global_batch_size"] for q in reference]
            print(f"ramp-up {name} ({ranks} ranks): losses within {worst:.2e} of one rank")
            if len(records) != len(reference) or not same_batches or not worst <= 1e-5:
                failures.append(f"ramp-up {name}: losses differ from one rank's by {worst:.3e} "
                                f"(or the batch sizes / iterations differ)")

        # 3. Checkpoints: saved before each change of the number of microbatches; resume mid-ramp.
        save = os.path.join(work, "save")
        full, _ = run(binary, mpirun, 2, RAMP + ["--save", save, "--save-interval", "1000"], work, "full")
        saved = sorted(int(d[5:]) for d in os.listdir(save) if d.startswith("iter_"))
        changes = [r["iteration"] for r, n in zip(full, full[1:]) if r["global_batch_size"] != n["global_batch_size"]]
        if saved != changes + [len(full)]:
            failures.append(f"checkpoints at iterations {saved}; Megatron saves before each change of the number of "
                            f"microbatches (after iterations {changes}) and at the end ({len(full)})")
        else:
            print(f"checkpoints at iterations {saved}: before each new number of microbatches, and the last")
        resumed_dir = os.path.join(work, "resumed")
        first, _ = run(binary, mpirun, 2, RAMP + ["--save", resumed_dir, "--exit-interval", "5"], work, "first")
        second, _ = run(binary, mpirun, 2, RAMP + ["--save", resumed_dir, "--load", resumed_dir], work, "second")
        keys = ["iteration", "consumed_samples", "global_batch_size", "learning_rate", "lm_loss", "grad_norm"]
        stitched = [{k: r[k] for k in keys} for r in first + second]
        if stitched != [{k: r[k] for k in keys} for r in full]:
            failures.append("a run stopped at iteration 5 (mid-ramp) and resumed differs from the uninterrupted run")
        else:
            print(f"stopped at iteration 5 of {len(full)} (batch {first[-1]['global_batch_size']}) and resumed: "
                  f"bit-identical losses, learning rates, batch sizes")

        # 4. Refusals.
        base = ["--train-samples", "120"]
        refusals = [
            (1, ["--global-batch-size", "16", "--step-batch-size-schedule", "0:4"] + base,
             "Cannot specify both --step-batch-size-schedule and --global-batch-size"),
            (1, ["--global-batch-size", "16", "--rampup-batch-size", "4", "4", "40", "--train-iters", "5"],
             "expected no batch-size rampup for iteration-based training"),
            (1, ["--rampup-batch-size", "4", "4", "40", "--step-batch-size-schedule", "0:4"] + base,
             "cannot both be given"),
            (1, ["--global-batch-size", "16", "--rampup-batch-size", "4", "5", "40"] + base,
             "to be divisible by the batch size increment (5)"),
            (1, ["--global-batch-size", "16", "--rampup-batch-size", "32", "4", "40"] + base,
             "greater than or equal to the start batch size (32)"),
            (1, ["--global-batch-size", "16", "--rampup-batch-size", "4", "4", "0"] + base,
             "the ramp-up samples must be positive"),
            (1, ["--step-batch-size-schedule", "0:4 x:8"] + base, "is not a number"),
            (1, ["--step-batch-size-schedule", "0:4 64"] + base, "invalid entry \"64\""),
            (1, ["--step-batch-size-schedule", "64:4"] + base, "the first entry must have threshold 0, got 2"),
            (1, ["--step-batch-size-schedule", "0:4 64:8 70:16"] + base, "strictly increasing"),
            (1, ["--step-batch-size-schedule", "0:0"] + base, "batch size must be positive"),
            (2, ["--step-batch-size-schedule", "0:4 192:6"] + base,
             "current global batch size (6, from 8 consumed samples on) is not divisible by micro_batch_size (2) * "
             "data_parallel_size (2)"),
            (1, ["--step-batch-size-schedule", "0:1 192:4"] + base,
             "current global batch size (1, from 0 consumed samples on) is not divisible"),
            (1, ["--step-batch-size-schedule", "0:8 192:4"] + base, "Number of microbatches should not decrease"),
            (2, ["--step-batch-size-schedule", "0:4 192:8", "--pipeline-model-parallel-size", "2",
                 "--timing-log-level", "2"] + base, "the measured pipeline timeline is drawn against one schedule"),
        ]
        for ranks, flags, message in refusals:
            _, done = run(binary, mpirun, ranks, flags, work, "refused", check=False)
            errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
            if done.returncode == 0 or len(errors) != 1 or message not in errors[0]:
                failures.append(f"{' '.join(flags)}: expected one error line with \"{message}\", got exit "
                                f"{done.returncode} and {errors or done.stderr[-600:]}")
            else:
                print(f"refused: {errors[0]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

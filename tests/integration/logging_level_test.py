#!/usr/bin/env python3
"""--logging-level and MEGATRON_LOGGING_LEVEL (Megatron's setup_logging): Python's level numbers set
which diagnostic lines are printed.

A one-rank FP16 run under mpirun with --distributed-backend gloo prints a start-up note (INFO: the
MPI communicator stands in for Gloo) and, with GPT_GRADIENT_FAULT, a warning (WARNING: the injected
infinite gradient; the loss scaler skips the step). Expected, as Python's root
logger filters records below its level:
  - no level, 10 and 20: the note and the warnings; 30: the warnings only; 40 and 50: neither;
  - MEGATRON_LOGGING_LEVEL alone acts as the flag; the flag wins over it (Megatron's precedence);
  - the iteration lines and the argument dump (Megatron's print()s) in every run;
  - MEGATRON_LOGGING_LEVEL that is not an integer: one error line naming it, exit 1.

  logging_level_test.py --binary build-cpu/bin/pretrain_gpt --mpirun mpirun
"""
import argparse
import os
import subprocess
import sys

import harness

FLAGS = ["--device", "cpu", "--mock-data", "--vocab-size", "200", "--num-layers", "2", "--hidden-size", "32",
         "--num-attention-heads", "4", "--seq-length", "16", "--max-position-embeddings", "16",
         "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "2", "--lr", "1e-3", "--fp16",
         "--distributed-backend", "gloo", "--log-interval", "1"]
NOTE = "--distributed-backend gloo: started by mpirun"
WARNINGS = ["warning: GPT_GRADIENT_FAULT: an infinite gradient on rank 0 at iteration 1"]


def run(mpirun, binary, extra, env_level=None):
    env = dict(os.environ, GPT_GRADIENT_FAULT="1:0")
    env.pop("MEGATRON_LOGGING_LEVEL", None)
    if env_level is not None:
        env["MEGATRON_LOGGING_LEVEL"] = env_level
    return subprocess.run([mpirun, "-np", "1", "--oversubscribe", binary] + FLAGS + extra, capture_output=True,
                          text=True, env=env, timeout=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    failures = []
    # (flag, environment variable, note shown, warnings shown)
    cases = [([], None, True, True), (["--logging-level", "10"], None, True, True),
             (["--logging-level", "20"], None, True, True), (["--logging-level", "30"], None, False, True),
             (["--logging-level", "40"], None, False, False), (["--logging-level", "50"], None, False, False),
             ([], "30", False, True), ([], " 40 ", False, False), (["--logging-level", "20"], "40", True, True),
             (["--logging-level", "40"], "10", False, False)]
    for flag, env_level, note, warnings in cases:
        name = f"{' '.join(flag) or 'no flag'}, MEGATRON_LOGGING_LEVEL={env_level!r}"
        result = run(args.mpirun, args.binary, flag, env_level)
        text = result.stdout + result.stderr
        if result.returncode != 0:
            failures.append(f"{name}: exit {result.returncode}: {result.stderr[-400:]}")
            continue
        if (NOTE in text) != note:
            failures.append(f"{name}: the start-up note {'missing' if note else 'printed'}")
        for warning in WARNINGS:
            if (warning in text) != warnings:
                failures.append(f"{name}: '{warning}' {'missing' if warnings else 'printed'}")
        if " iteration        2/" not in result.stdout or "------------------------ arguments" not in result.stdout:
            failures.append(f"{name}: the iteration lines or the argument dump missing")
    bad = run(args.mpirun, args.binary, [], "warning")
    errors = [l for l in bad.stderr.splitlines() + bad.stdout.splitlines() if "MEGATRON_LOGGING_LEVEL" in l]
    if bad.returncode != 1 or len(errors) != 1 or not errors[0].startswith("error: MEGATRON_LOGGING_LEVEL=warning"):
        failures.append(f"MEGATRON_LOGGING_LEVEL=warning: exit {bad.returncode}, lines {errors}")
    return harness.finish(failures, f"{len(cases) + 1} runs")


if __name__ == "__main__":
    sys.exit(main())

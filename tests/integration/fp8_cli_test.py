#!/usr/bin/python3
"""FP8 training from the command line (Megatron's --fp8-* flags, emulated on the CPU backend):

- delayed scaling resumes bit for bit: a run saved at iteration 4 and resumed to 8 prints the same
  losses as the uninterrupted run (the scales and amax histories are checkpoint records), under
  TP2 x PP2 as on one rank; a resume with another --fp8-amax-history-len is refused naming it;
- both recipes train a BF16 model with the loss falling, and the losses differ from the run without
  FP8 (the flag is not ignored);
- bad input gets one error line and exit 1: an unknown format, the block-scaled recipes, the
  delayed-only flags with tensorwise, FP8 flags without --fp8-format, --fp8-interval other than 1."""

import argparse
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

BASE = ("--device cpu --mock-data --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
        "--max-position-embeddings 32 --vocab-size 512 --micro-batch-size 2 --global-batch-size 8 "
        "--lr 2e-3 --log-interval 1 --eval-iters 0 --train-iters 8").split()
DELAYED = "--fp8-format hybrid --fp8-amax-history-len 3 --fp8-amax-compute-algo max".split()
LOSS = re.compile(r"iteration +(\d+)/ +\d+ \|.*\| lm loss: (\S+) \|")


def run(command):
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    losses = {int(m.group(1)): m.group(2) for m in map(LOSS.search, result.stdout.splitlines()) if m}
    errors = [l for l in (result.stdout + result.stderr).splitlines() if l.startswith("error:")]
    return result.returncode, losses, errors


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    mpirun = [args.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none"]
    failures = []

    # Resume under delayed scaling, one rank and TP2 x PP2.
    for name, prefix, layout in [("1 rank", [], []),
                                 ("TP2 x PP2", mpirun, ["--tensor-model-parallel-size", "2",
                                                        "--pipeline-model-parallel-size", "2"])]:
        command = prefix + [args.binary] + BASE + DELAYED + layout
        code, whole, errors = run(command)
        checkpoint = os.path.join(args.work_dir, name.replace(" ", "_"))
        code_first, first, _ = run(command + ["--save", checkpoint, "--save-interval", "4", "--exit-interval", "4"])
        code_second, second, errors_second = run(command + ["--load", checkpoint])
        if code or code_first or code_second or sorted(whole) != list(range(1, 9)):
            failures.append(f"{name}: exits {code}, {code_first}, {code_second}: {errors + errors_second}")
            continue
        resumed = {**first, **second}
        if resumed != whole:
            failures.append(f"{name}: resumed losses {resumed} differ from the uninterrupted run's {whole}")
        else:
            print(f"{name}: delayed FP8 resumed at iteration 4 prints the uninterrupted losses "
                  f"({whole[5]} ... {whole[8]})")
        if name == "1 rank":
            code, _, errors = run(command + ["--load", checkpoint, "--fp8-amax-history-len", "2"])
            if code != 1 or len(errors) != 1 or "--fp8-amax-history-len is 2" not in errors[0]:
                failures.append(f"a resume with another history length: exit {code}, {errors}")
            else:
                print(f"another history length on resume: {errors[0]}")

    # Both recipes train a BF16 model; FP8 changes the numbers.
    _, plain, _ = run([args.binary] + BASE + ["--bf16"])
    for recipe in [["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"], ["--fp8-format", "e4m3"]]:
        code, losses, errors = run([args.binary] + BASE + ["--bf16"] + recipe)
        values = [float(losses[i]) for i in sorted(losses)]
        if code or len(values) != 8 or not values[-1] < values[0] - 0.05:
            failures.append(f"{' '.join(recipe)} BF16: exit {code}, losses {values}, {errors}")
        elif losses == plain:
            failures.append(f"{' '.join(recipe)}: the same losses as without FP8")
        else:
            print(f"{' '.join(recipe)} --bf16: loss {values[0]:.4f} -> {values[-1]:.4f} "
                  f"(without FP8 {float(plain[1]):.4f} -> {float(plain[8]):.4f})")

    # Bad input: one error line naming the flag, exit 1.
    for flags, needle in [(["--fp8-format", "e5m2"], "--fp8-format must be e4m3 or hybrid"),
                          (["--fp8-format", "hybrid", "--fp8-recipe", "mxfp8"], "--fp8-recipe mxfp8 is not available"),
                          (["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise", "--fp8-margin", "1"],
                           "--fp8-margin applies only with --fp8-recipe delayed"),
                          (["--fp8-amax-history-len", "4"], "--fp8-amax-history-len applies only with --fp8-format"),
                          (["--fp8-format", "e4m3", "--fp8-interval", "2"], "--fp8-interval 2 is not available"),
                          (["--fp8-format", "e4m3", "--fp8-amax-history-len", "0"],
                           "--fp8-amax-history-len must be in [1, 1024]")]:
        code, _, errors = run([args.binary] + BASE + flags)
        if code != 1 or len(errors) != 1 or needle not in errors[0]:
            failures.append(f"{' '.join(flags)}: exit {code}, errors {errors} (wanted '{needle}')")
        else:
            print(f"{' '.join(flags)}: {errors[0]}")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

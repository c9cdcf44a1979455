"""Megatron's console output (issue 15): the log line's optional fields and when it is printed,
and the diagnostics --log-params-norm / --log-num-zeros-in-grad, which must not depend on the
layout (a TP duplicate counted twice or a ZeRO shard left out would change them).

  - without --log-throughput the line has no throughput field; iteration 1 is logged even when
    --log-interval does not divide it, and the interval average still covers iterations 1-5;
  - params norm and num zeros equal on 1 rank, TP2, PP2 and DP2 with the distributed optimizer,
    iteration by iteration (untied embeddings: the unseen rows of the input embedding have zero
    gradients, so num zeros is positive);
  - --timing-log-level 2 prints Megatron's level-2 timers in its order; on one rank the
    tensor-parallel and pipeline timers are exactly zero, with TP2 x PP2 they are not, and no
    part exceeds forward-backward.
"""
import argparse
import re
import subprocess
import sys
import os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

TINY = ("--device cpu --mock-data --tokenizer-type NullTokenizer --vocab-size 511 --num-layers 4 --hidden-size 64 "
        "--num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 "
        "--global-batch-size 8 --lr 1e-3 --eval-iters 0").split()
LINE = re.compile(r"^ \[[^\]]+\] iteration +(\d+)/ +(\d+) \| (.*)$")
FIELDS = re.compile(r" ([^|:]+): ([^|]+) \|")
TIMER = re.compile(r"^    (\S+) \.*: \(([\d.-]+), ([\d.-]+)\)$", re.M)


def log_lines(stdout):
    """{iteration: {field: value}} of the printed iteration lines."""
    lines = {}
    for line in stdout.splitlines():
        if m := LINE.match(line):
            lines[int(m[1])] = {k.strip(): v.strip() for k, v in FIELDS.findall("| " + m[3])}
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    args = parser.parse_args()
    failures = []
    launcher = [args.mpirun, "-np", "2", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]

    def run(command, name):
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            failures.append(f"{name}: exit {result.returncode}: {result.stderr[-1500:]}")
        return result

    # When the line is printed, and its fields without --log-throughput.
    plain = run([args.binary] + TINY + ["--train-iters", "10", "--log-interval", "5"], "--log-interval 5")
    lines = log_lines(plain.stdout)
    if sorted(lines) != [1, 5, 10]:
        failures.append(f"--log-interval 5: lines for iterations {sorted(lines)}, expected [1, 5, 10]")
    elif any("throughput per GPU (TFLOP/s/GPU)" in f or "tokens per GPU (tokens/s/GPU)" in f or "params norm" in f
             or "num zeros" in f for f in lines.values()):
        failures.append(f"without --log-throughput / --log-params-norm / --log-num-zeros-in-grad: {lines[1]}")
    else:
        print(f"--log-interval 5 logs iterations {sorted(lines)}; fields without the optional flags: {list(lines[1])}")

    # The diagnostics across layouts.
    flags = TINY + ["--train-iters", "3", "--log-interval", "1", "--log-params-norm", "--log-num-zeros-in-grad",
                    "--untie-embeddings-and-output-weights", "--log-throughput"]
    layouts = [("1 rank", [], []), ("TP2", launcher, ["--tensor-model-parallel-size", "2"]),
               ("PP2", launcher, ["--pipeline-model-parallel-size", "2"]),
               ("DP2 distributed optimizer", launcher, ["--use-distributed-optimizer"])]
    reference = None
    for name, prefix, extra in layouts:
        lines = log_lines(run(prefix + [args.binary] + flags + extra, name).stdout)
        if sorted(lines) != [1, 2, 3] or not all("params norm" in f and "num zeros" in f and
                                                 "tokens per GPU (tokens/s/GPU)" in f for f in lines.values()):
            failures.append(f"{name}: iteration lines without the requested fields: {lines}")
            continue
        figures = [(float(lines[i]["params norm"]), int(lines[i]["num zeros"])) for i in (1, 2, 3)]
        if reference is None:
            reference = figures
            print(f"1 rank: (params norm, num zeros) per iteration {figures}")
            if not all(zeros > 0 for _, zeros in figures):
                failures.append(f"1 rank: num zeros {figures}: the unseen embedding rows should give zeros")
            continue
        worst = max(abs(a[0] - b[0]) / b[0] for a, b in zip(figures, reference))
        if worst > 1e-5 or [z for _, z in figures] != [z for _, z in reference]:
            failures.append(f"{name}: (params norm, num zeros) {figures} differ from 1 rank's {reference}")
        else:
            print(f"{name}: params norm within {worst:.1e} of 1 rank's, num zeros equal")
    # Level-2 timers.
    names = ["forward-backward", "forward-compute", "backward-compute", "batch-generator", "pipeline-send-recv",
             "tp-comm", "all-grads-sync", "params-all-gather", "optimizer"]
    timed = TINY + ["--train-iters", "4", "--log-interval", "2", "--timing-log-level", "2"]
    four = [args.mpirun, "-np", "4", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
    for name, prefix, extra in [("1 rank", [], []),
                                ("TP2 x PP2", four, ["--tensor-model-parallel-size", "2",
                                                     "--pipeline-model-parallel-size", "2"])]:
        result = run(prefix + [args.binary] + timed + extra, f"--timing-log-level 2, {name}")
        timers = [(m[1], float(m[2]), float(m[3])) for m in TIMER.finditer(result.stdout)]
        last = {t[0]: (t[1], t[2]) for t in timers[-len(names):]}
        if [t[0] for t in timers[-len(names):]] != names:
            failures.append(f"--timing-log-level 2, {name}: timers {[t[0] for t in timers[-len(names):]]}")
            continue
        communication = [last["tp-comm"][1], last["pipeline-send-recv"][1]]
        parts_fit = all(last[n][1] <= last["forward-backward"][1] * 1.05 + 0.05
                        for n in ["forward-compute", "backward-compute", "batch-generator", "tp-comm"])
        if not (last["forward-compute"][0] > 0 and last["backward-compute"][0] > 0 and parts_fit) or \
                (prefix == [] and communication != [0.0, 0.0]) or (prefix != [] and min(communication) <= 0):
            failures.append(f"--timing-log-level 2, {name}: {last}")
        else:
            print(f"--timing-log-level 2, {name}: " + ", ".join(f"{n} {last[n][1]:.2f}" for n in names))
    return harness.finish(failures, "console output")


if __name__ == "__main__":
    sys.exit(main())

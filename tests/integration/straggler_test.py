#!/usr/bin/python3
"""--log-straggler (train/report/straggler_report.h): a DP=4 job under mpirun with one rank slowed by
GPT_INJECT_DELAY (500 ms in each iteration's forward-backward, far above the tiny model's compute)
names that rank, with this host as its node, as the slowest by compute time and the lowest by
throughput in every report, first in the Bottom list of --straggler-minmax-count 2 and in no Top
list; the losses equal a run without the flag. A run without the flag prints no report."""

import argparse
import os
import re
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MODEL = ("--device cpu --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
         "--max-position-embeddings 32 --vocab-size 512 --micro-batch-size 1 --global-batch-size 8 --lr 1e-3 "
         "--eval-iters 0 --train-iters 4 --log-interval 2").split()
SLOW_RANK = 2
REPORT = re.compile(r"^\[[^\]]*\] \| MnRtt/Rnk: ([\d.]+)ms/(\d+) \((.*?)\) \| MxRtt/Rnk: ([\d.]+)ms/(\d+) \((.*?)\) \| "
                    r"MnEtpt/Rnk: ([\d.]+)TF/(\d+) \((.*?)\) \| MxEtpt/Rnk: ([\d.]+)TF/(\d+) \((.*?)\)$")
LOSS = re.compile(r"\| lm loss: (\S+) \|")


def run(options, extra, env=None):
    result = subprocess.run([options.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none", options.binary]
                            + MODEL + extra, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, **(env or {})))
    return result.returncode, result.stdout, result.stderr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    options = parser.parse_args()
    failures = []
    host = socket.gethostname()

    status, plain, err = run(options, [])
    if status != 0 or REPORT.search(plain) or "^^^^" in plain:
        failures.append(f"without --log-straggler: exit {status}, or a report printed: {err[-500:]}")
    status, out, err = run(options, ["--log-straggler", "--straggler-minmax-count", "2"],
                           {"GPT_INJECT_DELAY": f"500:{SLOW_RANK}"})
    reports = [REPORT.match(line) for line in out.splitlines() if REPORT.match(line)]
    bottoms = [line for line in out.splitlines() if line.startswith("^^^^ Bottom 2")]
    tops = [line for line in out.splitlines() if line.startswith("^^^^ Top    2")]
    if status != 0 or len(reports) != 2 or len(bottoms) != 2 or len(tops) != 2:
        failures.append(f"--log-straggler: exit {status}, {len(reports)} reports, {len(bottoms)} bottom and "
                        f"{len(tops)} top lines (expected 2 each, iterations 2 and 4): {err[-500:]}")
    for report in reports:
        slowest, slowest_node = int(report.group(5)), report.group(6)
        lowest, lowest_node = int(report.group(8)), report.group(9)
        if slowest != SLOW_RANK or lowest != SLOW_RANK or slowest_node != host or lowest_node != host:
            failures.append(f"the report does not name rank {SLOW_RANK} on {host}: {report.group(0)}")
        if float(report.group(4)) < 500.0:
            failures.append(f"the slowest compute time is below the injected 500 ms: {report.group(0)}")
    for line in bottoms:
        if not re.match(rf"^\^\^\^\^ Bottom 2 Ranks with lowest  Etpt\(TF\): [\d.]+/{SLOW_RANK} \({re.escape(host)}\),", line):
            failures.append(f"rank {SLOW_RANK} is not first in the Bottom list: {line}")
    for line in tops:
        if f"/{SLOW_RANK} (" in line:
            failures.append(f"rank {SLOW_RANK} is in the Top list: {line}")
    if LOSS.findall(out) != LOSS.findall(plain) or not LOSS.findall(out):
        failures.append("the losses changed with --log-straggler and the delay")
    for line in out.splitlines():
        if REPORT.match(line) or line.startswith("^^^^"):
            print(line)
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

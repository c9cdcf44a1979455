#!/usr/bin/python3
"""The measured pipeline timeline (train/report/pipeline_timeline.h) as a user gets it, under mpirun on the
CPU backend: a ZB-V run at PP=4 with --timing-log-level 2 and --metrics-file writes one
pipeline_timeline record per log line, whose passes are each (chunk, microbatch)'s F and backward
(fused, or B and W) once per rank, in order and without overlap; pipeline_schedule --metrics-file
reports each rank's measured busy time as the record's own sum and draws the timeline;
--pipeline-schedule auto with --pipeline-schedule-costs picks what the tool's simulation of the
layout's schedules with those costs finds fastest, and a timeline of another layout is refused
naming the flag. (Timings themselves are not asserted: the machine is shared.)"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from pretrain_cli_test import expect_rejected_everywhere  # noqa: E402

BASE = ("--device cpu --mock-data --vocab-size 512 --num-layers 8 --hidden-size 64 --num-attention-heads 4 "
        "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 16 "
        "--train-iters 4 --lr 1e-3 --log-interval 2 --pipeline-model-parallel-size 4").split()
V_LAYOUT = ["--num-layers-per-virtual-pipeline-stage", "1"]


def check_record(record, failures):
    p, v, m = record["pipeline_size"], record["virtual_size"], record["microbatches"]
    if (p, v, m, record["schedule"]) != (4, 2, 8, "zb-v") or len(record["ranks"]) != p:
        failures.append(f"timeline record layout {(p, v, m, record['schedule'])}, {len(record['ranks'])} ranks")
        return
    for r, passes in enumerate(record["ranks"]):
        seen = {}
        previous_end = 0.0
        for op, chunk, microbatch, start, end in passes:
            seen.setdefault((chunk, microbatch), []).append(op)
            if not (start >= previous_end - 1e-3 and end >= start):
                failures.append(f"rank {r}: pass {op} c{chunk} mb{microbatch} [{start}, {end}] overlaps or "
                                f"goes back (previous end {previous_end})")
            previous_end = end
        expected = {(c, j) for c in range(v) for j in range(m)}
        if set(seen) != expected:
            failures.append(f"rank {r}: passes of {sorted(set(seen) ^ expected)} missing or extra")
        for key, ops in seen.items():
            if ops not in (["F", "B"], ["F", "Bi", "W"]):
                failures.append(f"rank {r} (chunk, microbatch) {key}: passes {ops}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--tool", required=True, help="build/bin/pipeline_schedule")
    parser.add_argument("--mpirun", required=True)
    options = parser.parse_args()
    failures = []
    launcher = [options.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none"]
    with tempfile.TemporaryDirectory() as work:
        metrics = os.path.join(work, "metrics.jsonl")
        run = subprocess.run(launcher + [options.binary] + BASE + V_LAYOUT + [
            "--pipeline-schedule", "zb-v", "--timing-log-level", "2", "--metrics-file", metrics],
            capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            return harness.finish([f"zb-v run with a timeline: exit {run.returncode}: {run.stderr[-600:]}"])
        with open(metrics) as f:
            records = [json.loads(line) for line in f]
        timelines = [r for r in records if r.get("pipeline_timeline")]
        # Log lines at iterations 1 (the first of the run), 2 and 4: one timeline each.
        if [t["iteration"] for t in timelines] != [1, 2, 4]:
            failures.append(f"timeline records at iterations {[t['iteration'] for t in timelines]}, expected [1, 2, 4]")
        for record in timelines:
            check_record(record, failures)

        svg = os.path.join(work, "measured.svg")
        tool = subprocess.run([options.tool, "--metrics-file", metrics, "--svg", svg], capture_output=True, text=True,
                              timeout=120)
        if tool.returncode != 0:
            failures.append(f"pipeline_schedule --metrics-file: exit {tool.returncode}: {tool.stderr}")
        else:
            last = timelines[-1]
            busy = {int(m.group(1)): float(m.group(2))
                    for m in re.finditer(r"^(\d+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+$", tool.stdout, re.M)}
            for r, passes in enumerate(last["ranks"]):
                ours = sum(end - start for _, _, _, start, end in passes)
                if r not in busy or abs(busy[r] - ours) > 2e-3 * max(1.0, ours):
                    failures.append(f"rank {r}: the tool's measured busy {busy.get(r)} ms, the record's sum {ours:.3f}")
            try:
                ET.parse(svg)
            except (ET.ParseError, OSError) as error:
                failures.append(f"measured SVG: {error}")
            simulated = dict(re.findall(r"^  (\S+)\s+makespan ([\d.]+) ms", tool.stdout, re.M))
            if set(simulated) != {"interleaved", "zb-v"}:
                failures.append(f"the tool simulated {sorted(simulated)} with the measured costs")
            else:
                fastest = min(simulated, key=lambda k: float(simulated[k]))
                chosen = subprocess.run(launcher + [options.binary] + BASE + V_LAYOUT + [
                    "--train-iters", "1", "--pipeline-schedule", "auto", "--pipeline-schedule-costs", metrics],
                    capture_output=True, text=True, timeout=300)
                lines = [l for l in chosen.stdout.splitlines() if l.startswith("--pipeline-schedule auto:")]
                if chosen.returncode != 0 or len(lines) != 1 or not lines[0].startswith(
                        f"--pipeline-schedule auto: {fastest}") or "measured in" not in lines[0]:
                    failures.append(f"auto with the measured costs: {lines} (exit {chosen.returncode}), the tool's "
                                    f"fastest is {fastest} ({simulated})")
                else:
                    print(f"{lines[0]}\n  (pipeline_schedule with the same costs: {simulated})")
        expect_rejected_everywhere(launcher, options.binary, BASE, [
            (["--pipeline-schedule", "auto", "--pipeline-schedule-costs", metrics],
             f"--pipeline-schedule-costs {metrics} was measured on PP 4 with 2 chunks per rank and 8 layers; this "
             "run has PP 4, 1 chunks per rank and 8 layers"),
            (["--pipeline-schedule-costs", metrics], "--pipeline-schedule-costs gives the costs --pipeline-schedule "
             "auto chooses by; it needs --pipeline-schedule auto"),
            (["--pipeline-schedule", "auto", "--pipeline-schedule-costs", os.path.join(work, "none.jsonl")],
             "--pipeline-schedule-costs: cannot open the metrics file"),
        ], 4, failures)
    return harness.finish(failures, f"{len(timelines)} timeline records of 4 ranks with every pass once, the tool's "
                                    "report and SVG, auto from the measured costs, 3 refusals")


if __name__ == "__main__":
    sys.exit(main())

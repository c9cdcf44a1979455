#!/usr/bin/python3
"""Issue 44, class 3: floats compared in ways NaN, infinities and sentinels slip through, through
every program's command line and the cost files, as a hostile but realistic user types them.

  * every float option finite and in its documented range (generate --temperature / --top-p,
    pipeline_schedule's costs, perf_calibrate --memory-gib / --peak-tflops, ...): NaN, inf, 1e400,
    1e308 and values outside the range are one `error: --flag: ...` line with exit 1
  * values outside the documented set refused, never reinterpreted as "the default": -1 or 0 for
    --weight-cost, --threads, --num-layers-per-virtual-pipeline-stage, --microbatch-group-size...,
    --peak-tflops, --memory-gib, --ffn-hidden-size
  * a weight-gradient cost above the backward it is part of, a transfer time that overflows
  * measured pipeline timelines (pipeline_schedule --metrics-file, pretrain_gpt --pipeline-schedule
    auto --pipeline-schedule-costs) with NaN, Infinity, 1e308, negative or reversed times, fractional
    or huge chunk / size fields: refused naming the rank and pass, never chosen on
  * readable messages: no bound of more than a few digits (CLI11 printed a 309-digit one)
  * positive controls: values at the edges of the ranges still work
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SCHEDULE = ["--num-layers", "8", "--num-microbatches", "8", "--pipeline-model-parallel-size", "4", "--quiet"]
TINY = ("--device cpu --mock-data --vocab-size 512 --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
        "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 1 --global-batch-size 4 "
        "--train-iters 1 --lr 1e-3 --log-interval 1 --eval-iters 0").split()


def check_refusal(what, command, expected, failures, timeout=60, **kwargs):
    """exit 1, one non-empty stderr line 'error: ...' containing `expected`, readable (no run of 20
    digits, under 400 characters), nothing on stdout that looks like a result."""
    start = time.monotonic()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired:
        failures.append(f"{what}: timed out")
        return
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    problems = []
    if result.returncode != 1:
        problems.append(f"exit {result.returncode}")
    if len(lines) != 1 or not lines[0].startswith("error: ") or expected not in lines[0]:
        problems.append(f"stderr {lines!r}, expected one error line with {expected!r}")
    elif re.search(r"\d{20}", lines[0]) or len(lines[0]) > 400:
        problems.append(f"unreadable message {lines[0]!r}")
    if "makespan" in result.stdout or "iteration" in result.stdout or "TFLOP" in result.stdout:
        problems.append("it produced a result")
    if time.monotonic() - start > 30:
        problems.append("slow")
    if problems:
        failures.append(f"{what}: " + "; ".join(problems))


def check_runs(what, command, expected_stdout, failures, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, **kwargs)
    if result.returncode != 0 or expected_stdout not in result.stdout:
        failures.append(f"{what}: exit {result.returncode}, expected {expected_stdout!r} on stdout: "
                        f"{result.stdout[-500:]} {result.stderr[-500:]}")


def generate_cases(generate, work, failures):
    checkpoint = os.path.join(work, "no_checkpoint")  # options are refused before it is opened
    cases = [
        (["--temperature", "nan"], "--temperature: expected a finite decimal number, got 'nan'"),
        (["--temperature", "inf"], "--temperature"),
        (["--temperature", "-inf"], "--temperature"),
        (["--temperature", "-1"], "--temperature: must be from 0 to 1e30 (got -1)"),
        (["--temperature", "1e31"], "--temperature: must be from 0 to 1e30"),
        (["--temperature", "1e400"], "--temperature"),
        (["--temperature", "0x1p3"], "--temperature"),
        (["--top-p", "nan"], "--top-p: expected a finite decimal number, got 'nan'"),
        (["--top-p", "NaN"], "--top-p"),
        (["--top-p", "-0.1"], "--top-p: must be from 0 to 1 (got -0.1)"),
        (["--top-p", "1.5"], "--top-p: must be from 0 to 1 (got 1.5)"),
        (["--top-p", "inf"], "--top-p"),
        (["--top-k", "-1"], "--top-k: must be at least 0 (got -1)"),
        (["--top-k", "2.5"], "--top-k"),
        (["--threads", "0"], "--threads: must be from 1"),
        (["--threads", "-1"], "--threads: must be from 1"),
        (["--threads", "100000"], "--threads: must be from 1 to 4096"),
        (["--max-new-tokens", "-1"], "--max-new-tokens: must be at least 0"),
        (["--seed", "-1"], "--seed: must be at least 0"),
        (["--seed", "0x10"], "--seed: expected a decimal integer"),
        (["--iteration", "-1"], "--iteration: must be at least 0"),
        (["--vocab-size", "0"], "--vocab-size: must be at least 1"),
        (["--eod-id", "-1"], "--eod-id: must be from 0"),
        (["--eod-id", "2147483648"], "--eod-id"),
        (["--tensor-model-parallel-size", "0"], "--tensor-model-parallel-size: must be from 1"),
        (["--pipeline-model-parallel-size", "-1"], "--pipeline-model-parallel-size: must be from 1"),
    ]
    for extra, expected in cases:
        check_refusal("generate " + " ".join(extra), [generate, checkpoint, "--prompt", "1 2"] + extra, expected,
                      failures)
    return len(cases)


def schedule_cases(tool, failures):
    cases = [
        (["--forward-cost", "nan"], "--forward-cost must be a finite number >= 0 (got nan)"),
        (["--forward-cost", "inf"], "--forward-cost"),
        (["--forward-cost", "-1"], "--forward-cost must be a finite number >= 0 (got -1)"),
        (["--forward-cost", "1e308"], "--forward-cost must be at most 1e12 (got 1e308)"),
        (["--forward-cost", "1e400"], "--forward-cost"),
        (["--backward-cost", "nan"], "--backward-cost"),
        (["--backward-cost", "-2"], "--backward-cost must be a finite number >= 0"),
        (["--backward-cost", "1e13"], "--backward-cost must be at most 1e12 (got 1e13)"),
        (["--weight-cost", "-1"], "--weight-cost must be a finite number >= 0 (got -1)"),
        (["--weight-cost", "nan"], "--weight-cost must be a finite number >= 0 (got nan)"),
        (["--weight-cost", "1e308"], "--weight-cost must be at most 1e12"),
        (["--weight-cost", "3"], "--weight-cost 3 is more than --backward-cost 2"),
        (["--backward-cost", "1", "--weight-cost", "1.5"], "--weight-cost 1.5 is more than --backward-cost 1"),
        (["--forward-cost", "0", "--backward-cost", "0"], "cannot both be 0"),
        (["--p2p-latency", "nan"], "--p2p-latency"),
        (["--p2p-latency", "-1"], "--p2p-latency must be a finite number >= 0"),
        (["--p2p-bytes", "nan"], "--p2p-bytes"),
        (["--p2p-bytes", "1e19"], "--p2p-bytes must be at most 1e18 (got 1e19)"),
        (["--p2p-bandwidth", "-1"], "--p2p-bandwidth must be a finite number >= 0"),
        (["--p2p-bandwidth", "inf"], "--p2p-bandwidth"),
        (["--p2p-bytes", "1e18", "--p2p-bandwidth", "1e-300"], "a transfer takes"),
        (["--p2p-bytes", "1e18", "--p2p-bandwidth", "1"], "more than the largest cost (1e12)"),
        (["--num-layers-per-virtual-pipeline-stage", "0"], "--num-layers-per-virtual-pipeline-stage: must be from 1"),
        (["--num-layers-per-virtual-pipeline-stage", "-1"], "--num-layers-per-virtual-pipeline-stage"),
        (["--microbatch-group-size-per-virtual-pipeline-stage", "0"], "--microbatch-group-size-per-virtual"),
        (["--pipeline-model-parallel-size", "0"], "--pipeline-model-parallel-size: must be from 1"),
        (["--num-layers", "-8"], "--num-layers: must be from 1"),
        (["--num-microbatches", "0"], "--num-microbatches: must be from 1"),
        (["--num-microbatches", "99999999999"], "--num-microbatches"),
    ]
    for extra, expected in cases:
        check_refusal("pipeline_schedule " + " ".join(extra), [tool] + SCHEDULE + extra, expected, failures)
    # The edges of the documented ranges still run: W equal to the backward, free transfers
    # (bandwidth 0 means unlimited), zero forward cost, the largest cost.
    for extra in (["--weight-cost", "2"], ["--weight-cost", "0"], ["--p2p-bandwidth", "0", "--p2p-bytes", "1e18"],
                  ["--forward-cost", "0"], ["--forward-cost", "1e12", "--backward-cost", "1e12"]):
        check_runs("pipeline_schedule " + " ".join(extra), [tool] + SCHEDULE + extra, "makespan", failures)
    return len(cases) + 5


def timeline():
    """A valid measured timeline record (PP 2, one chunk, 2 microbatches, 1F1B)."""
    record = {"pipeline_timeline": True, "iteration": 1, "schedule": "1f1b", "pipeline_size": 2, "virtual_size": 1,
              "microbatches": 2, "num_layers": 2,
              "ranks": [[["F", 0, 0, 0.0, 1.0], ["F", 0, 1, 1.0, 2.0], ["B", 0, 0, 4.0, 6.0], ["B", 0, 1, 8.0, 10.0]],
                        [["F", 0, 0, 1.0, 2.0], ["B", 0, 0, 2.0, 4.0], ["F", 0, 1, 4.0, 5.0], ["B", 0, 1, 5.0, 7.0]]]}
    return record


def write_timeline(path, record, raw_replacements=()):
    text = json.dumps(record)
    for old, new in raw_replacements:
        assert old in text, old
        text = text.replace(old, new, 1)
    with open(path, "w") as out:
        out.write('{"iteration": 1, "lm loss": 5.0}\n' + text + "\n")


def timeline_cases(tool, binary, mpirun, work, failures):
    """(label, raw text replacements in the record, expected message part)."""
    cases = [
        ("start NaN", [("[\"F\", 0, 1, 1.0, 2.0]", "[\"F\", 0, 1, NaN, 2.0]")], "rank 0 pass 1: start_ms must be from 0 to 1e9 (got nan)"),
        ("end Infinity", [("[\"B\", 0, 0, 4.0, 6.0]", "[\"B\", 0, 0, 4.0, Infinity]")], "rank 0 pass 2: end_ms must be from 0 to 1e9 (got inf)"),
        ("end -Infinity", [("[\"B\", 0, 1, 5.0, 7.0]", "[\"B\", 0, 1, 5.0, -Infinity]")], "end_ms must be from 0 to 1e9"),
        ("end 1e308", [("[\"B\", 0, 1, 8.0, 10.0]", "[\"B\", 0, 1, 8.0, 1e308]")], "rank 0 pass 3: end_ms must be from 0 to 1e9 (got 1e308)"),
        ("end 1e400", [("[\"B\", 0, 1, 8.0, 10.0]", "[\"B\", 0, 1, 8.0, 1e400]")], "end_ms must be from 0 to 1e9 (got inf)"),
        ("negative start", [("[\"F\", 0, 0, 0.0, 1.0]", "[\"F\", 0, 0, -5.0, 1.0]")], "rank 0 pass 0: start_ms must be from 0 to 1e9 (got -5)"),
        ("negative times", [("[\"F\", 0, 0, 0.0, 1.0]", "[\"F\", 0, 0, -5.0, -1.0]")], "start_ms must be from 0"),
        ("reversed", [("[\"F\", 0, 0, 1.0, 2.0]", "[\"F\", 0, 0, 3.0, 2.0]")], "rank 1 pass 0: it ends (2 ms) before it starts (3 ms)"),
        ("chunk 0.5", [("[\"F\", 0, 1, 1.0, 2.0]", "[\"F\", 0.5, 1, 1.0, 2.0]")], "the chunk must be a whole number (got 0.5)"),
        ("microbatch NaN", [("[\"F\", 0, 1, 1.0, 2.0]", "[\"F\", 0, NaN, 1.0, 2.0]")], "the microbatch must be a whole number (got nan)"),
        ("microbatch 1e300", [("[\"F\", 0, 1, 1.0, 2.0]", "[\"F\", 0, 1e300, 1.0, 2.0]")], "the microbatch must be a whole number"),
        ("iteration NaN", [("\"iteration\": 1,", "\"iteration\": NaN,")], "\"iteration\" must be a positive integer"),
        ("pipeline_size 1e300", [("\"pipeline_size\": 2", "\"pipeline_size\": 1e300")], "\"pipeline_size\" must be a positive integer"),
        ("microbatches 2.5", [("\"microbatches\": 2", "\"microbatches\": 2.5")], "\"microbatches\" must be a positive integer"),
        ("virtual_size 4294967297", [("\"virtual_size\": 1", "\"virtual_size\": 4294967297")], "\"virtual_size\" must be a positive integer"),
    ]
    good = os.path.join(work, "timeline_good.jsonl")
    write_timeline(good, timeline())
    check_runs("pipeline_schedule --metrics-file (valid)", [tool, "--metrics-file", good], "measured: 1f1b", failures)
    for label, replacements, expected in cases:
        path = os.path.join(work, "timeline_" + re.sub(r"\W+", "_", label) + ".jsonl")
        write_timeline(path, timeline(), replacements)
        check_refusal(f"pipeline_schedule --metrics-file ({label})", [tool, "--metrics-file", path], expected, failures)
    count = len(cases) + 1
    if mpirun:
        # The same files as --pipeline-schedule auto's costs: refused before the choice, one line.
        auto = [mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none", binary] + TINY + [
            "--pipeline-model-parallel-size", "2", "--pipeline-schedule", "auto", "--distributed-timeout-minutes", "1"]
        result = subprocess.run(auto + ["--pipeline-schedule-costs", good], capture_output=True, text=True, timeout=120)
        if result.returncode != 0 or "--pipeline-schedule auto:" not in result.stdout:
            failures.append(f"--pipeline-schedule-costs (valid): exit {result.returncode}: {result.stdout[-600:]} "
                            f"{result.stderr[-600:]}")
        for label in ("start NaN", "end 1e308", "negative start", "reversed"):
            path = os.path.join(work, "timeline_" + re.sub(r"\W+", "_", label) + ".jsonl")
            expected = dict((c[0], c[2]) for c in cases)[label]
            result = subprocess.run(auto + ["--pipeline-schedule-costs", path], capture_output=True, text=True,
                                    timeout=120)
            errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
            if result.returncode == 0 or len(errors) != 1 or expected not in errors[0] or \
                    "--pipeline-schedule-costs" not in errors[0] or "iteration" in result.stdout:
                failures.append(f"--pipeline-schedule-costs ({label}): exit {result.returncode}, errors {errors}")
        count += 5
    return count


def tool_cases(perf_model, perf_calibrate, ckpt_tool, work, failures):
    missing = os.path.join(work, "no_checkpoint")
    cases = [
        ([perf_model, "--cluster", "cpu", "--world-size", "0"], "--world-size: must be at least 1"),
        ([perf_model, "--cluster", "cpu", "--world-size", "-8"], "--world-size: must be at least 1"),
        ([perf_model, "--cluster", "cpu", "--world-size", "nan"], "--world-size: expected a decimal integer"),
        ([perf_model, "--cluster", "cpu", "--world-size", "8.5"], "--world-size"),
        ([perf_model, "--cluster", "cpu", "--world-size", "8", "--top", "0"], "--top: must be from 1"),
        ([perf_model, "--cluster", "cpu", "--world-size", "8", "--top", "-1"], "--top: must be from 1"),
        ([perf_calibrate, "--memory-gib", "nan"], "--memory-gib: expected a finite decimal number, got 'nan'"),
        ([perf_calibrate, "--memory-gib", "0"], "--memory-gib: must be from 1e-9 to 1048576 (got 0)"),
        ([perf_calibrate, "--memory-gib", "-1"], "--memory-gib: must be from 1e-9"),
        ([perf_calibrate, "--memory-gib", "1e-300"], "--memory-gib: must be from 1e-9 to 1048576 (got 1e-300)"),
        ([perf_calibrate, "--memory-gib", "inf"], "--memory-gib"),
        ([perf_calibrate, "--memory-gib", "1e400"], "--memory-gib"),
        ([perf_calibrate, "--peak-tflops", "nan"], "--peak-tflops"),
        ([perf_calibrate, "--peak-tflops", "0"], "--peak-tflops: must be from 1e-9 to 1e6 (got 0)"),
        ([perf_calibrate, "--peak-tflops", "-5"], "--peak-tflops: must be from 1e-9"),
        ([perf_calibrate, "--peak-tflops", "1e308"], "--peak-tflops: must be from 1e-9 to 1e6"),
        ([perf_calibrate, "--repeats", "0"], "--repeats: must be from 1 to 1000"),
        ([perf_calibrate, "--repeats", "1001"], "--repeats: must be from 1 to 1000"),
        ([perf_calibrate, "--hidden-size", "0"], "--hidden-size: must be from 1"),
        ([perf_calibrate, "--ffn-hidden-size", "0"], "--ffn-hidden-size: must be from 1"),
        ([perf_calibrate, "--max-tp", "-1"], "--max-tp: must be from 1"),
        ([perf_calibrate, "--vocab-size", "0x10"], "--vocab-size: expected a decimal integer"),
        ([ckpt_tool, "inspect", missing, "--iteration", "-1"], "--iteration: must be at least 0"),
        ([ckpt_tool, "verify", missing, "--iteration", "nan"], "--iteration: expected a decimal integer"),
        ([ckpt_tool, "export", missing, "-o", "x.safetensors", "--vocab-size", "0"], "--vocab-size: must be at least 1"),
        ([ckpt_tool, "export", missing, "--output-dir", "x", "--max-shard-size", "0"], "--max-shard-size: must be at least 1"),
        ([ckpt_tool, "export", missing, "--output-dir", "x", "--max-shard-size", "5e9"], "--max-shard-size"),
        ([ckpt_tool, "import", missing, "-o", "x", "--make-vocab-size-divisible-by", "0"],
         "--make-vocab-size-divisible-by: must be at least 1"),
        ([ckpt_tool, "import", missing, "-o", "x", "--tensor-model-parallel-size", "-2"],
         "--tensor-model-parallel-size: must be at least 1"),
    ]
    for command, expected in cases:
        check_refusal(" ".join(os.path.basename(c) for c in command), command, expected, failures, cwd=work)
    return len(cases)


CLUSTER = """name = test
gpus_per_node = 4
peak_tflops = 100
memory_gib = 16
memory_bandwidth_GBps = 1000
intra_node_bandwidth_GBps = 200
inter_node_bandwidth_GBps = 25
gemm_efficiency = 1e9:0.5, 1e11:0.7
attention_forward_efficiency = 0.4
attention_backward_efficiency = 0.3
"""
MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 "
         "--vocab-size 512 --micro-batch-size 1 --global-batch-size 8").split()


def cluster_cases(perf_model, work, failures):
    """perf_model --cluster FILE: every value finite and of a magnitude the predictions survive."""
    cases = [
        ("peak_tflops = 100", "peak_tflops = nan", "peak_tflops must be a number"),
        ("peak_tflops = 100", "peak_tflops = inf", "peak_tflops must be a number"),
        ("memory_gib = 16", "memory_gib = 1e300", "memory_gib must be at most 1e18 (got 1e300)"),
        ("memory_gib = 16", "memory_gib = 1e400", "memory_gib must be a number"),
        ("inter_node_bandwidth_GBps = 25", "inter_node_bandwidth_GBps = 1e-300",
         "inter_node_bandwidth_GBps must be at least 1e-9 (got 1e-300)"),
        ("memory_bandwidth_GBps = 1000", "memory_bandwidth_GBps = -1000", "memory_bandwidth_GBps must be positive"),
        ("attention_forward_efficiency = 0.4", "attention_forward_efficiency = nan", "must be a number"),
        ("gemm_efficiency = 1e9:0.5, 1e11:0.7", "gemm_efficiency = 1e9:0.5, 1e300:0.7",
         "gemm_efficiency flops must be at most 1e18"),
        ("gemm_efficiency = 1e9:0.5, 1e11:0.7", "gemm_efficiency = 1e9:nan, 1e11:0.7", "must be a number"),
    ]
    good = os.path.join(work, "good.conf")
    with open(good, "w") as out:
        out.write(CLUSTER)
    check_runs("perf_model --cluster (valid)", [perf_model, "--cluster", good, "--world-size", "1"] + MODEL,
               "Iteration time", failures)
    for index, (old, new, expected) in enumerate(cases):
        path = os.path.join(work, f"bad{index}.conf")
        with open(path, "w") as out:
            out.write(CLUSTER.replace(old, new))
        check_refusal(f"perf_model --cluster ({new})", [perf_model, "--cluster", path, "--world-size", "1"] + MODEL,
                      expected, failures)
    return len(cases) + 1


def main():
    parser = argparse.ArgumentParser()
    for name in ("--generate", "--pipeline-schedule", "--perf-model", "--perf-calibrate", "--ckpt-tool", "--binary",
                 "--work-dir"):
        parser.add_argument(name, required=True)
    parser.add_argument("--mpirun")
    options = parser.parse_args()
    for name in ("generate", "pipeline_schedule", "perf_model", "perf_calibrate", "ckpt_tool", "binary"):
        setattr(options, name, os.path.abspath(getattr(options, name)))
    work = os.path.abspath(options.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    failures = []
    counts = [generate_cases(options.generate, work, failures),
              schedule_cases(options.pipeline_schedule, failures),
              timeline_cases(options.pipeline_schedule, options.binary, options.mpirun, work, failures),
              tool_cases(options.perf_model, options.perf_calibrate, options.ckpt_tool, work, failures)
              + cluster_cases(options.perf_model, work, failures)]
    print(f"{sum(counts)} cases (generate {counts[0]}, pipeline_schedule flags {counts[1]}, timelines {counts[2]}, "
          f"perf_model / perf_calibrate / ckpt_tool and cluster files {counts[3]})")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

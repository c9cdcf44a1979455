#!/usr/bin/python3
"""Issue 16 through the programs, as a hostile but realistic user runs them: every bad input ends
with exit 1 and one "error: ..." line that says what is wrong, quickly; never a signal, a hang or
an exit 0 after training something other than what was asked.

  * numbers and sizes: octal-looking, overflowing, inf / nan flags; layouts too large for the
    machine refused by the memory plan before allocation (they segfaulted, aborted in the
    allocator or grew memory for minutes before)
  * data validated up front: an out-of-vocabulary token, a truncated .idx, a directory, blend
    weights inf / 1e308
  * preprocess_data: a directory as --input, empty input, --json-keys duplicates, duplicate keys
    in a JSON line (last wins, as Python's json), --batch-lines 0 / negative / not decimal
  * ranks that must agree (mpirun -np 2): different --seed per rank fails fast naming --seed; one
    rank's missing data file ends the job quickly with that rank's message
  * a sample of the fuzz test through the binary (the in-process part is argument_fuzz_test)
"""

import argparse
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from pretrain_cli_test import with_flags  # noqa: E402

TINY = ("--device cpu --mock-data --vocab-size 512 --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
        "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 "
        "--train-iters 3 --lr 1e-3 --log-interval 1 --eval-iters 0").split()

# (extra flags, text the one error line must contain, seconds it may take at most)
BAD_NUMBERS_AND_SIZES = [
    (["--make-vocab-size-divisible-by", "4611686018427387904"], "overflows", 10),
    (["--hidden-size", "2147483648", "--num-attention-heads", "1"], "--hidden-size", 10),
    (["--vocab-size", "2147483648"], "does not fit in host memory", 10),
    (["--seq-length", "1000000000", "--max-position-embeddings", "1000000000"], "does not fit in host memory", 10),
    (["--micro-batch-size", "1000000000", "--global-batch-size", "1000000000"], "does not fit in host memory", 10),
    (["--num-layers", "100000000"], "does not fit in host memory", 10),
    (["--micro-batch-size", "1", "--global-batch-size", "1000000000"], "does not fit in host memory", 10),
    (["--train-iters", "99999999999999999999"], "--train-iters", 10),
    (["--lr", "inf"], "--lr", 10),
    (["--lr", "1e400"], "--lr", 10),
    (["--init-method-std", "nan"], "--init-method-std", 10),
    (["--weight-decay", "inf"], "--weight-decay", 10),
    (["--adam-eps", "inf"], "--adam-eps", 10),
    (["--norm-epsilon", "inf"], "--norm-epsilon", 10),
    (["--seed", "0x10"], "--seed", 10),
]


def run(command, timeout=120, **kwargs):
    start = time.monotonic()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired:
        return None, timeout
    return result, time.monotonic() - start


def check_one_error(what, result, seconds, expected, limit, failures, mpirun=False):
    """exit 1, exactly one non-empty stderr line "error: ..." containing `expected`, no training.
    Under mpirun only the lines of our programs count (mpirun adds its own banner and exit code)."""
    if result is None:
        failures.append(f"{what}: timed out")
        return
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if mpirun:
        lines = [line for line in lines if line.startswith("error")]
    problems = []
    if result.returncode != 1 and not (mpirun and result.returncode > 0):
        problems.append(f"exit {result.returncode}" + (" (a signal)" if result.returncode < 0 else ""))
    if len(lines) != 1 or not lines[0].startswith("error: ") or expected not in lines[0]:
        problems.append(f"stderr {lines!r}, expected one error line with {expected!r}")
    if "iteration" in result.stdout:
        problems.append("it trained")
    if seconds > limit:
        problems.append(f"took {seconds:.1f} s (limit {limit} s)")
    if problems:
        failures.append(f"{what}: " + "; ".join(problems))


def check_numbers_and_sizes(binary, failures):
    for extra, expected, limit in BAD_NUMBERS_AND_SIZES:
        result, seconds = run([binary] + with_flags(TINY, extra), timeout=max(60, 3 * limit))
        check_one_error(" ".join(extra), result, seconds, expected, limit, failures)
    # Leading zeros are decimal: --train-iters 010 trains 10 iterations, --seed 0042 is 42.
    result, _ = run([binary] + with_flags(TINY, ["--train-iters", "010", "--seed", "0042"]))
    if result is None or result.returncode != 0 or "iteration       10/      10" not in result.stdout or \
            "iteration       11/" in result.stdout:
        failures.append(f"--train-iters 010: expected 10 iterations: {result and result.stdout[-400:]!r}")
    seed_lines = [line for line in (result.stdout if result else "").splitlines() if line.strip().startswith("seed ")]
    if not seed_lines or not seed_lines[0].rstrip().endswith(" 42"):
        failures.append(f"--seed 0042: expected seed 42 in the argument dump, got {seed_lines}")
    print(f"{len(BAD_NUMBERS_AND_SIZES)} bad numbers and sizes refused; 010 and 0042 read as decimal")


def write_dataset(prefix, documents, dtype_code=8, element="H"):
    """A Megatron indexed dataset, one sequence per document (the format in indexed_dataset.h)."""
    sizes = [len(d) for d in documents]
    width = struct.calcsize("<" + element)
    pointers, offset = [], 0
    for size in sizes:
        pointers.append(offset)
        offset += size * width
    with open(prefix + ".bin", "wb") as out:
        for document in documents:
            out.write(struct.pack(f"<{len(document)}{element}", *document))
    with open(prefix + ".idx", "wb") as out:
        out.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, dtype_code, len(sizes), len(sizes) + 1))
        out.write(struct.pack(f"<{len(sizes)}i", *sizes))
        out.write(struct.pack(f"<{len(sizes)}q", *pointers))
        out.write(struct.pack(f"<{len(sizes) + 1}q", *range(len(sizes) + 1)))


def data_flags(path, work):
    """TINY on --data-path `path` (a list: one prefix or weight prefix pairs) with the NullTokenizer."""
    return with_flags([f for f in TINY if f != "--mock-data"],
                      ["--tokenizer-type", "NullTokenizer", "--split", "1,0,0",
                       "--data-cache-path", os.path.join(work, "cache")]) + ["--data-path"] + path


def check_data(binary, work, failures):
    rng = random.Random(16)
    good = [[rng.randrange(500) for _ in range(rng.randrange(20, 80))] for _ in range(200)]
    write_dataset(os.path.join(work, "good"), good)
    bad = [list(d) for d in good]
    bad[123][7] = 600  # one id outside --vocab-size 512 (NullTokenizer: ids [0, 512] valid)
    write_dataset(os.path.join(work, "oov"), bad)
    write_dataset(os.path.join(work, "wide"), [[1, 2, (1 << 32) + 5]] + good[:10], dtype_code=5, element="q")
    shutil.copy(os.path.join(work, "good.bin"), os.path.join(work, "short.bin"))
    with open(os.path.join(work, "good.idx"), "rb") as source, open(os.path.join(work, "short.idx"), "wb") as out:
        out.write(source.read()[:100])
    os.makedirs(os.path.join(work, "folder.idx"), exist_ok=True)
    shutil.copy(os.path.join(work, "good.bin"), os.path.join(work, "folder.bin"))
    cases = [
        ([os.path.join(work, "oov")], "token id 600 in document 123, position 7"),
        ([os.path.join(work, "wide")], "token id 4294967301"),
        ([os.path.join(work, "short")], "truncated"),
        ([os.path.join(work, "folder")], "is a directory"),
        ([os.path.join(work, "missing")], "not found"),
        (["inf", os.path.join(work, "good"), "1", os.path.join(work, "good")], "the weight of"),
        (["nan", os.path.join(work, "good"), "1", os.path.join(work, "good")], "is not a positive weight"),
        (["-1", os.path.join(work, "good"), "1", os.path.join(work, "good")], "is not a positive weight"),
    ]
    for path, expected in cases:
        result, seconds = run([binary] + data_flags(path, work))
        check_one_error(f"--data-path {' '.join(os.path.basename(p) for p in path)}", result, seconds, expected, 30,
                        failures)
    # Blend weights of 1e308 are an even blend, not inf / inf.
    result, _ = run([binary] + data_flags(["1e308", os.path.join(work, "good"), "1e308", os.path.join(work, "good")],
                                          work))
    if result is None or result.returncode != 0 or "iteration        3/       3" not in result.stdout:
        failures.append(f"blend weights 1e308 1e308: {result and (result.returncode, result.stderr[-300:])}")
    print(f"{len(cases)} bad datasets refused with their messages; a 1e308 / 1e308 blend trains")


def check_preprocess(preprocess, source_dir, work, failures):
    tokenizer = harness.gpt2_tokenizer_flags(source_dir)
    corpus = os.path.join(work, "corpus.jsonl")
    with open(corpus, "w") as out:
        out.write(json.dumps({"text": "hello world"}) + "\n" + json.dumps({"text": "second document"}) + "\n")

    def preprocess_run(inputs, prefix, extra=()):
        return run([preprocess, "--input", inputs, "--output-prefix", os.path.join(work, prefix)] + tokenizer +
                   list(extra), timeout=120)

    def outputs(prefix):
        return [f for f in os.listdir(work) if f.startswith(prefix + "_")]

    checks = 0
    # A directory as --input.
    result, seconds = preprocess_run(work, "dir")
    check_one_error("preprocess_data --input <directory>", result, seconds, "is a directory", 30, failures)
    # Empty input: an error unless --allow-empty.
    empty = os.path.join(work, "empty.jsonl")
    open(empty, "w").close()
    result, seconds = preprocess_run(empty, "empty")
    check_one_error("preprocess_data empty --input", result, seconds, "no documents", 30, failures)
    if outputs("empty"):
        failures.append(f"empty input left output files {outputs('empty')}")
    blank = os.path.join(work, "blank.jsonl")
    with open(blank, "w") as out:
        out.write("\n  \n\n")
    result, seconds = preprocess_run(blank, "blank")
    check_one_error("preprocess_data blank --input", result, seconds, "no documents", 30, failures)
    result, _ = preprocess_run(empty, "allowed", ["--allow-empty"])
    if result is None or result.returncode != 0 or sorted(outputs("allowed")) != [
            "allowed_text_document.bin", "allowed_text_document.idx"]:
        failures.append(f"--allow-empty: {result and (result.returncode, result.stderr)}, outputs {outputs('allowed')}")
    checks += 4
    # --json-keys duplicates: refused before any work (no output, no tokenizer loaded).
    result, seconds = preprocess_run(corpus, "dupkeys", ["--json-keys", "text", "title", "text"])
    check_one_error("--json-keys text title text", result, seconds, "'text' is given more than once", 5, failures)
    if outputs("dupkeys"):
        failures.append(f"--json-keys duplicates left output files {outputs('dupkeys')}")
    checks += 1
    # A key twice in one line: Python's json keeps the last value, and so do we.
    twice = os.path.join(work, "twice.jsonl")
    with open(twice, "w") as out:
        out.write('{"text": "the first value", "text": "the second value"}\n')
        out.write('{"te\\u0078t": "escaped key"}\n')
    once = os.path.join(work, "once.jsonl")
    with open(once, "w") as out:
        for line in open(twice):
            out.write(json.dumps(json.loads(line)) + "\n")
    result_twice, _ = preprocess_run(twice, "twice")
    result_once, _ = preprocess_run(once, "once")
    same = all(r is not None and r.returncode == 0 for r in (result_twice, result_once)) and all(
        open(os.path.join(work, f"twice_text_document{e}"), "rb").read() ==
        open(os.path.join(work, f"once_text_document{e}"), "rb").read() for e in (".bin", ".idx"))
    if not same:
        failures.append(f"duplicate JSON keys are not resolved as Python's json: "
                        f"{result_twice and result_twice.stderr}, {result_once and result_once.stderr}")
    checks += 1
    # Numeric flags: strict and in range.
    for flag, value in [("--batch-lines", "0"), ("--batch-lines", "-1"), ("--batch-lines", "0x10"),
                        ("--batch-lines", "99999999999999999999"), ("--batch-lines", ""), ("--workers", "0"),
                        ("--workers", "-3"), ("--workers", "1e3"), ("--batch-lines", "2147483648")]:
        result, seconds = preprocess_run(corpus, "numbers", [flag, value])
        check_one_error(f"preprocess_data {flag} {value!r}", result, seconds, flag, 10, failures)
        checks += 1
    result, _ = preprocess_run(corpus, "octal", ["--batch-lines", "010", "--workers", "02"])
    if result is None or result.returncode != 0 or "2 documents" not in result.stdout:
        failures.append(f"--batch-lines 010 --workers 02: {result and (result.returncode, result.stderr)}")
    checks += 1
    print(f"{checks} preprocess_data checks")


def check_ranks(binary, mpirun, work, failures):
    launcher = [mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none"]
    base = with_flags(TINY, ["--global-batch-size", "4", "--distributed-timeout-minutes", "10"])
    # Rank 1 gets another seed: a wrapper picks the flag by the rank OpenMPI gives it.
    script = ('if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec "$@" --seed 7; else exec "$@" --seed 1234; fi')
    result, seconds = run(launcher + ["sh", "-c", script, "sh", binary] + base, timeout=120)
    check_one_error("mpirun -np 2 with --seed 1234 / 7", result, seconds, "rank 1: given different arguments from "
                    "rank 0: --seed 7 (rank 0: 1234)", 60, failures, mpirun=True)
    # One rank cannot find its data: the same relative --data-path, run from two directories, only
    # one of which has the dataset (MPMD: one -wdir per rank).
    here, there = os.path.join(work, "rank0"), os.path.join(work, "rank1")
    for d in (here, there):
        os.makedirs(os.path.join(d, "data"), exist_ok=True)
    rng = random.Random(5)
    write_dataset(os.path.join(here, "data", "corpus"),
                  [[rng.randrange(500) for _ in range(40)] for _ in range(100)])
    flags = with_flags(data_flags(["data/corpus"], here), ["--data-cache-path", "cache"])
    common = ["-np", "1", "--oversubscribe", "--bind-to", "none"]
    result, seconds = run([mpirun] + common + ["-wdir", here, binary] + flags + [":"] + common[:2] +
                          ["-wdir", there, binary] + flags, timeout=300)
    check_one_error("mpirun -np 2, rank 1 without the data", result, seconds, "rank 1: ", 60, failures, mpirun=True)
    if result is not None and "data/corpus.idx not found" not in result.stderr:
        failures.append(f"rank 1's message does not name its missing file: {result.stderr!r}")
    print(f"ranks: different seeds and one rank's missing file end the job in seconds ({seconds:.1f} s)")


# The binary sample of the fuzz test: hostile values for flags whose accepted values stay tiny
# (a huge size is refused by the memory plan; iteration counts are either refused or small).
FUZZ_FLAGS = {
    "size": ["--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--kv-channels",
             "--seq-length", "--max-position-embeddings", "--make-vocab-size-divisible-by", "--vocab-size",
             "--micro-batch-size", "--global-batch-size", "--tensor-model-parallel-size",
             "--pipeline-model-parallel-size", "--recompute-num-layers"],
    "count": ["--train-iters", "--lr-decay-iters", "--lr-warmup-iters", "--eval-iters", "--eval-interval",
              "--log-interval", "--seed", "--timing-log-level", "--ddp-bucket-size"],
    "number": ["--lr", "--min-lr", "--init-method-std", "--norm-epsilon", "--weight-decay", "--clip-grad",
               "--adam-beta1", "--adam-beta2", "--adam-eps", "--lr-warmup-fraction", "--distributed-timeout-minutes",
               "--hidden-dropout"],
    "switch": ["--bf16", "--fp16", "--untie-embeddings-and-output-weights", "--sequence-parallel",
               "--use-distributed-optimizer", "--recompute-activations", "--deterministic-mode"],
}
FUZZ_VALUES = {
    "size": ["0", "-1", "010", "0x10", "", "inf", "nan", "1e400", "1.5", "99999999999999999999", "2147483648",
             "4611686018427387904", "9223372036854775807", "-9223372036854775808", "1000000000", "2", "8", "64"],
    "count": ["0", "-1", "010", "0x10", "", "inf", "nan", "1e3", "99999999999999999999", "-9223372036854775808",
              "1", "2", "3"],
    "number": ["0", "-1", "010", "0x1p3", "", "inf", "-inf", "nan", "1e400", "1e-400", "1e308", "1e39", "0.5",
               "1e-3", "0.999"],
}


def fuzz_binary(binary, cases, seed, failures):
    rng = random.Random(seed)
    outcomes = {"exit 0": 0, "exit 1": 0}
    slowest = 0.0
    for c in range(cases):
        extra = []
        for _ in range(rng.randrange(1, 5)):
            kind = rng.choice(list(FUZZ_FLAGS))
            flag = rng.choice(FUZZ_FLAGS[kind])
            extra += [flag] if kind == "switch" else [flag, rng.choice(FUZZ_VALUES[kind])]
        argv = list(TINY)
        i = 0
        while i < len(extra):  # replace or append, keeping empty values as values
            flag = extra[i]
            if flag in FUZZ_FLAGS["switch"]:
                if flag not in argv:
                    argv.append(flag)
                i += 1
                continue
            if flag in argv:
                argv[argv.index(flag) + 1] = extra[i + 1]
            else:
                argv += extra[i:i + 2]
            i += 2
        result, seconds = run([binary] + argv, timeout=120)
        slowest = max(slowest, seconds)
        shown = " ".join(repr(a) if a == "" else a for a in extra)
        if result is None:
            failures.append(f"fuzz case {c} ({shown}): timed out")
            continue
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        if result.returncode == 0:
            outcomes["exit 0"] += 1
            if any(line.startswith("error") for line in lines):
                failures.append(f"fuzz case {c} ({shown}): exit 0 with an error line {lines}")
        elif result.returncode == 1:
            outcomes["exit 1"] += 1
            if len(lines) != 1 or not lines[0].startswith("error: ") or len(lines[0]) <= len("error: "):
                failures.append(f"fuzz case {c} ({shown}): exit 1 with stderr {lines}")
        else:
            name = signal.Signals(-result.returncode).name if result.returncode < 0 else "?"
            failures.append(f"fuzz case {c} ({shown}): exit {result.returncode} {name}: {lines[-3:]}")
    print(f"binary fuzz sample: {cases} cases (seed {seed}): {outcomes['exit 0']} trained (exit 0), "
          f"{outcomes['exit 1']} refused with one error line, slowest {slowest:.1f} s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--preprocess", required=True)
    parser.add_argument("--mpirun")
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--fuzz-cases", type=int, default=30)
    parser.add_argument("--fuzz-seed", type=int, default=16)
    parser.add_argument("--only", help="one of: numbers, data, preprocess, ranks, fuzz")
    options = parser.parse_args()
    options.binary, options.preprocess = os.path.abspath(options.binary), os.path.abspath(options.preprocess)
    shutil.rmtree(options.work_dir, ignore_errors=True)
    os.makedirs(options.work_dir)
    failures = []
    steps = {
        "numbers": lambda: check_numbers_and_sizes(options.binary, failures),
        "data": lambda: check_data(options.binary, options.work_dir, failures),
        "preprocess": lambda: check_preprocess(options.preprocess, options.source_dir, options.work_dir, failures),
        "ranks": lambda: options.mpirun and check_ranks(options.binary, options.mpirun, options.work_dir, failures),
        "fuzz": lambda: fuzz_binary(options.binary, options.fuzz_cases, options.fuzz_seed, failures),
    }
    for name, step in steps.items():
        if options.only in (None, name):
            step()
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

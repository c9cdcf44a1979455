#!/usr/bin/python3
"""Issue 44 (classes 1, 2, 6 and 7) through the programs, as a hostile but realistic user runs them:
every bad input ends with exit 1 and one "error: ..." line naming the problem, quickly; never a
traceback, a signal, std::bad_alloc, or tokens printed from NaN logits.

  * imported hyper-parameters (class 1): config.json's epsilon, RoPE base and shapes go through
    pretrain_gpt's own validation; nothing is written when they fail
  * saved arguments (class 1): a checkpoint whose saved arguments were edited (checksum kept valid)
    to values pretrain_gpt refuses is refused by generate, ckpt_tool export and pretrain_gpt --load
  * non-finite logits (class 1): a model with NaN / infinite weights makes generate stop with an
    error, printing no token
  * sizes (class 2): config.json sizes of a billion layers or a 2^40 vocabulary refused by what the
    files hold, before any table is built; perf_model --search's work counted and refused
  * --load (class 6): a file, one checkpoint, committed checkpoints without a tracker, a directory
    of other things: refused with the remedy; a missing or empty directory is a fresh start
  * messages (class 7): a directory as --prompt-file, a file as the checkpoint, a timeline's NaN
    or negative times, a binary or 10 MB cluster file line (not echoed)

One tiny imported Llama checkpoint is reused for the checkpoint cases.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from hf_interop_test import numpy_gpt2, numpy_llama, write_hf  # noqa: E402

TINY = ("--device cpu --mock-data --vocab-size 512 --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
        "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 "
        "--train-iters 2 --lr 1e-3 --log-interval 1 --eval-iters 0").split()


class Counter:
    def __init__(self):
        self.cases = 0


COUNT = Counter()


def run(command, timeout=120, **kwargs):
    start = time.monotonic()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, errors="replace", **kwargs)
    except subprocess.TimeoutExpired:
        return None, timeout
    return result, time.monotonic() - start


def refused(what, command, expected, failures, limit=30, forbidden=None):
    """exit 1, exactly one stderr line "error: ..." containing each `expected` text (a str or a
    list), no stdout line containing `forbidden`, within `limit` seconds."""
    COUNT.cases += 1
    result, seconds = run(command, timeout=max(60, 3 * limit))
    if result is None:
        failures.append(f"{what}: timed out")
        return None
    # generate's banner (stderr, before decoding) is not a message.
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("generate: ")]
    problems = []
    if result.returncode != 1:
        problems.append(f"exit {result.returncode}")
    texts = [expected] if isinstance(expected, str) else expected
    if len(lines) != 1 or not lines[0].startswith("error: ") or any(t not in lines[0] for t in texts):
        problems.append(f"stderr {[line[:300] for line in lines[:4]]!r}, expected one error line with {texts!r}")
    elif len(lines[0]) > 600:
        problems.append(f"the error line is {len(lines[0])} characters long")
    if forbidden and forbidden in result.stdout:
        problems.append(f"stdout has {forbidden!r}: {result.stdout[-300:]!r}")
    if seconds > limit:
        problems.append(f"took {seconds:.1f} s (limit {limit} s)")
    if problems:
        failures.append(f"{what}: " + "; ".join(problems))
    return result


def succeeded(what, command, failures, expected_stdout=None):
    COUNT.cases += 1
    result, _ = run(command)
    if result is None or result.returncode != 0 or (expected_stdout and expected_stdout not in result.stdout):
        failures.append(f"{what}: {result and (result.returncode, result.stdout[-300:], result.stderr[-300:])}")
    return result


# ---- class 1: imported hyper-parameters ---------------------------------------------------------

def bad_import_configs():
    """(name, family, changes to config.json, texts the error line must contain)."""
    llama, gpt2 = "llama", "gpt2"
    cases = []
    for value in [-1, 0, -1e-5, 1e300, 1e39, 1e-50, -1e300]:
        cases.append((f"rms_norm_eps {value}", llama, {"rms_norm_eps": value}, ["--norm-epsilon", '"rms_norm_eps"']))
    for value in [-1, 0, 1e300, 1e39, 1e-60]:
        cases.append((f"layer_norm_epsilon {value}", gpt2, {"layer_norm_epsilon": value},
                      ["--norm-epsilon", '"layer_norm_epsilon"']))
    for value in [0, -5, 1, 0.5, -1e300, 1e300, 1e39]:
        cases.append((f"rope_theta {value}", llama, {"rope_theta": value}, ["--rotary-base", '"rope_theta"']))
    cases += [
        ("n_positions 0", gpt2, {"n_positions": 0}, ["a size is 0"]),
        ("vocab_size 0", llama, {"vocab_size": 0}, ["a size is 0"]),
        ("num_hidden_layers 0", llama, {"num_hidden_layers": 0}, ["a size is 0"]),
        ("num_key_value_heads 3", llama, {"num_key_value_heads": 3}, ["num_key_value_heads"]),
        ("num_attention_heads 0", llama, {"num_attention_heads": 0}, ["num_attention_heads"]),
        ("n_head 5", gpt2, {"n_head": 5}, ["n_head"]),
        ("head_dim 0", llama, {"head_dim": 0}, ["a size is 0"]),
        ("head_dim 7 (odd: RoPE pairs)", llama, {"head_dim": 7}, ["--rotary-percent"]),
        ("rms_norm_eps a string", llama, {"rms_norm_eps": "tiny"}, ["rms_norm_eps"]),
        ("rope_theta null-ish list", llama, {"rope_theta": [1, 2]}, ["rope_theta"]),
        ("hidden_size negative", llama, {"hidden_size": -64}, ["hidden_size"]),
        ("vocab_size 2^63", llama, {"vocab_size": 9223372036854775807}, ["config.json"]),
        ("n_embd 2^62", gpt2, {"n_embd": 4611686018427387904}, ["config.json"]),
    ]
    return cases


def check_imports(ckpt_tool, work, failures):
    rng = np.random.default_rng(44)
    families = {"llama": numpy_llama(rng), "gpt2": numpy_gpt2(rng)}
    for i, (name, family, changes, expected) in enumerate(bad_import_configs()):
        config, tensors = families[family]
        directory = os.path.join(work, f"bad_import_{i}")
        write_hf(directory, dict(config, **changes), tensors)
        output = os.path.join(work, f"bad_import_{i}_out")
        refused(f"import {family} {name}", [ckpt_tool, "import", directory, "--output", output], expected, failures, 10)
        if os.path.exists(output):
            failures.append(f"import {family} {name}: wrote {output}")
    # The good ones still import (and are reused below).
    for family in ("llama", "gpt2"):
        config, tensors = families[family]
        write_hf(os.path.join(work, f"good_{family}"), config, tensors)
        succeeded(f"import good {family}", [ckpt_tool, "import", os.path.join(work, f"good_{family}"), "--output",
                                             os.path.join(work, f"ckpt_{family}")], failures, "imported")
    print(f"imports: {len(bad_import_configs())} hostile config.json values refused before writing; good ones import")
    return families


# ---- class 2: sizes in config.json ---------------------------------------------------------------

def check_import_sizes(ckpt_tool, work, families, failures):
    cases = [
        ("num_hidden_layers 1e9", "llama", {"num_hidden_layers": 1000000000}),
        ("num_hidden_layers 2^40", "llama", {"num_hidden_layers": 1 << 40}),
        ("n_layer 1e6", "gpt2", {"n_layer": 1000000}),
        ("n_layer 2^50", "gpt2", {"n_layer": 1 << 50}),
        ("vocab_size 2^40", "llama", {"vocab_size": 1 << 40}),
        ("vocab_size 1e9", "gpt2", {"vocab_size": 1000000000}),
        ("intermediate_size 2^40", "llama", {"intermediate_size": 1 << 40}),
        ("max_position_embeddings 2^40", "gpt2", {"n_positions": 1 << 40}),
        ("hidden_size 2^31 (head_dim kept)", "llama", {"hidden_size": 1 << 31}),
        ("n_inner 2^45", "gpt2", {"n_inner": 1 << 45}),
        ("layers x hidden overflow", "llama", {"num_hidden_layers": 1 << 40, "hidden_size": 1 << 30,
                                               "intermediate_size": 1 << 30}),
        ("three layers for two", "llama", {"num_hidden_layers": 3}),
    ]
    for i, (name, family, changes) in enumerate(cases):
        config, tensors = families[family]
        directory = os.path.join(work, f"big_import_{i}")
        write_hf(directory, dict(config, **changes), tensors)
        output = os.path.join(work, f"big_import_{i}_out")
        refused(f"import {family} {name}", [ckpt_tool, "import", directory, "--output", output], "config.json",
                failures, 10)
        if os.path.exists(output):
            failures.append(f"import {family} {name}: wrote {output}")
    # The padding multiple is sized too: a 2^40 multiple pads a 250-token vocabulary to 2^40 rows.
    refused("import --make-vocab-size-divisible-by 2^40",
            [ckpt_tool, "import", os.path.join(work, "good_llama"), "--output", os.path.join(work, "pad_out"),
             "--make-vocab-size-divisible-by", str(1 << 40)], "host memory", failures, 10)
    print(f"import sizes: {len(cases) + 1} oversized config.json values refused by what the files hold, in seconds")


# ---- class 1: saved arguments edited (their checksum kept valid) ---------------------------------

def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def edit_saved_arguments(save_dir, copy_to, changes):
    """A copy of an imported save directory whose saved arguments have `changes` (flag -> value;
    None removes the line), with the index's arguments checksum recomputed."""
    import h5py
    shutil.copytree(save_dir, copy_to)
    with h5py.File(os.path.join(copy_to, "iter_0000000", "index.h5"), "r+") as index:
        lines = bytes(index["_arguments"][()]).decode().splitlines()
        by_flag = dict(line.split(" ", 1) for line in lines if line)
        for flag, value in changes.items():
            if value is None:
                by_flag.pop(flag, None)
            else:
                by_flag[flag] = value
        text = "".join(f"{flag} {value}\n" for flag, value in by_flag.items()).encode()
        del index["_arguments"]
        index.create_dataset("_arguments", data=np.frombuffer(text, dtype=np.uint8))
        index.attrs.modify("arguments_checksum", np.int64(crc32c(text)))


SAVED_ARGUMENT_EDITS = [
    ({"--norm-epsilon": "-1"}, "--norm-epsilon"),
    ({"--norm-epsilon": "0"}, "--norm-epsilon"),
    ({"--norm-epsilon": "nan"}, "--norm-epsilon"),
    ({"--norm-epsilon": "inf"}, "--norm-epsilon"),
    ({"--norm-epsilon": "1e300"}, "--norm-epsilon"),
    ({"--rotary-base": "0"}, "--rotary-base"),
    ({"--rotary-base": "-10000"}, "--rotary-base"),
    ({"--rotary-base": "nan"}, "--rotary-base"),
    ({"--rotary-percent": "0"}, "--rotary-percent"),
    ({"--rotary-percent": "2"}, "--rotary-percent"),
    ({"--num-layers": "-1"}, "--num-layers"),
    ({"--num-layers": "two"}, "--num-layers"),
    ({"--hidden-dropout": "1.5"}, "--hidden-dropout"),
    ({"--num-query-groups": "3"}, "--num-query-groups"),
    ({"--normalization": "'BatchNorm'"}, "--normalization"),
    ({"--position-embedding-type": "'yarn'"}, "--position-embedding-type"),
    ({"--seq-length": "1000"}, "--seq-length"),
    ({"--swiglu": "maybe"}, "--swiglu"),
    ({"--make-vocab-size-divisible-by": "0"}, "--make-vocab-size-divisible-by"),
    ({"--init-method-std": "-0.02"}, "--init-method-std"),
    # Sizes (class 2): bounded by what the checkpoint holds before its parameter table is built.
    ({"--num-layers": "1000000000"}, "1000000000 layers"),
    ({"--kv-channels": "4611686018427387904"}, "--kv-channels"),
    ({"--ffn-hidden-size": "1099511627776"}, "linear_fc1"),
]


def check_saved_arguments(ckpt_tool, generate, pretrain, work, failures):
    base = os.path.join(work, "ckpt_llama")
    for i, (changes, flag) in enumerate(SAVED_ARGUMENT_EDITS):
        edited = os.path.join(work, f"edited_{i}")
        edit_saved_arguments(base, edited, changes)
        shown = " ".join(f"{k} {v}" for k, v in changes.items())
        refused(f"generate, saved {shown}", [generate, edited, "--prompt-ids", "--prompt", "1 2 3",
                                             "--max-new-tokens", "4"], ["saved arguments", flag], failures, 20, "===")
        refused(f"export, saved {shown}", [ckpt_tool, "export", edited, "--output-dir", edited + "_hf"],
                ["saved arguments", flag], failures, 20)
    # The trainer: --load of such a checkpoint (finetuning the imported Llama).
    llama = ["--device", "cpu", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "8",
             "--group-query-attention", "--num-query-groups", "2", "--kv-channels", "8", "--ffn-hidden-size", "96",
             "--seq-length", "64", "--max-position-embeddings", "64", "--position-embedding-type", "rope",
             "--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
             "--norm-epsilon", "1e-6", "--mock-data", "--vocab-size", "250", "--micro-batch-size", "1",
             "--global-batch-size", "1", "--train-iters", "1", "--lr", "1e-4", "--eval-iters", "0", "--finetune"]
    for i in (0, 5, 10, 14):
        changes, flag = SAVED_ARGUMENT_EDITS[i]
        refused(f"pretrain_gpt --load, saved {changes}", [pretrain] + llama + ["--load", os.path.join(work, f"edited_{i}")],
                ["saved arguments", flag], failures, 30, "iteration        1/")
    succeeded("generate, the unedited import", [generate, base, "--prompt-ids", "--prompt", "1 2 3",
                                                "--max-new-tokens", "4"], failures, "=== sample 0")
    print(f"saved arguments: {len(SAVED_ARGUMENT_EDITS)} edits refused by generate and export, 4 by --load")
    return llama


def check_nonfinite_logits(ckpt_tool, generate, work, families, failures):
    config, tensors = families["llama"]
    for name, value in (("nan", np.nan), ("inf", np.inf), ("-inf", -np.inf)):
        poisoned = dict(tensors)
        weight = poisoned["model.norm.weight"].copy()
        weight[3] = value
        poisoned["model.norm.weight"] = weight
        directory = os.path.join(work, f"poisoned_{name}")
        write_hf(directory, config, poisoned)
        save = directory + "_ckpt"
        succeeded(f"import a {name} weight", [ckpt_tool, "import", directory, "--output", save], failures)
        for greedy in ([], ["--greedy"]):
            refused(f"generate from a {name} weight {greedy}", [generate, save, "--prompt-ids", "--prompt", "5 6 7",
                                                                "--max-new-tokens", "3"] + greedy,
                    "logits are not finite", failures, 20, "===")
    print("non-finite logits: 6 generate runs refused, no token printed")


# ---- class 6: what --load may name ---------------------------------------------------------------

def check_load(pretrain, llama, work, failures):
    base = os.path.join(work, "ckpt_llama")
    trained = os.path.join(work, "trained")
    succeeded("--save X --load X, X missing: a fresh start", [pretrain] + TINY + ["--save", trained, "--load", trained,
                                                                             "--save-interval", "1"],
              failures, "iteration        2/")
    a_file = os.path.join(work, "a_file")
    open(a_file, "w").write("not a checkpoint\n")
    data_dir = os.path.join(work, "data_dir")
    os.makedirs(data_dir, exist_ok=True)
    for name in ("corpus.bin", "corpus.idx"):
        open(os.path.join(data_dir, name), "wb").write(b"\x00" * 16)
    runs = os.path.join(work, "runs")
    shutil.copytree(trained, os.path.join(runs, "run1"))
    untracked = os.path.join(work, "untracked")
    shutil.copytree(trained, untracked)
    os.remove(os.path.join(untracked, "latest_checkpointed_iteration.txt"))
    link = os.path.join(work, "link_to_file")
    if not os.path.lexists(link):
        os.symlink(a_file, link)
    odd = os.path.join(work, "odd_names")
    os.makedirs(odd, exist_ok=True)
    open(os.path.join(odd, "x" * 200 + "\x01\x02"), "w").close()
    cases = [
        (a_file, ["is a file", "not a save directory"]),
        (a_file + "/", ["is a file"]),
        (link, ["is a file"]),
        ("/dev/null", ["not a directory"]),
        (os.path.join(trained, "iter_0000002"), ["one checkpoint", f"--load {trained} --ckpt-step 2"]),
        (os.path.join(trained, "iter_0000001") + "/", ["one checkpoint", "--ckpt-step 1"]),
        (os.path.join(trained, "iter_0000002", "shard_00000.h5"), ["is a file"]),
        (untracked, ["no latest_checkpointed_iteration.txt", "--ckpt-step 2"]),
        (data_dir, ["not a save directory", "'corpus.bin'"]),
        (runs, ["not a save directory", "'run1'"]),
        (odd, ["not a save directory", "..."]),
    ]
    for path, expected in cases:
        refused(f"--load {path}", [pretrain] + TINY + ["--load", path], expected, failures, 30, "iteration        1/")
        # The same with --save equal to --load (Megatron's usual pair): the --load message, not "resume with --load".
        if os.path.isdir(path):
            result = refused(f"--save = --load {path}", [pretrain] + TINY + ["--load", path, "--save", path],
                             expected, failures, 30, "iteration        1/")
            if result is not None and "resume with --load" in result.stderr:
                failures.append(f"--save = --load {path}: told to resume with --load, which was given")
    # What still works: an empty directory (fresh start), the remedies the messages give.
    empty = os.path.join(work, "empty_dir")
    os.makedirs(empty, exist_ok=True)
    succeeded("--load <empty directory>", [pretrain] + TINY + ["--load", empty], failures, "iteration        2/")
    succeeded("--load <missing directory>", [pretrain] + TINY + ["--load", os.path.join(work, "never_made")], failures,
              "iteration        2/")
    succeeded("--load X --ckpt-step 2 without a tracker", [pretrain] + TINY + ["--load", untracked, "--ckpt-step", "2", "--use-checkpoint-opt_param-scheduler",
                                                                              "--train-iters", "3"],
              failures, "iteration        3/")
    succeeded("--load IMPORT --finetune", [pretrain] + llama + ["--load", base], failures, "iteration        1/")
    print(f"--load: {len(cases)} paths refused (with --save too where a directory); empty, missing and the remedies work")


# ---- class 7: messages ---------------------------------------------------------------------------

def timeline_record(passes_rank0, passes_rank1, **changes):
    record = {"pipeline_timeline": True, "iteration": 1, "pipeline_size": 2, "virtual_size": 1, "microbatches": 2,
              "num_layers": 2, "schedule": "1f1b", "ranks": [passes_rank0, passes_rank1]}
    record.update(changes)
    return record


GOOD_RANK0 = [["F", 0, 0, 0.0, 1.0], ["F", 0, 1, 1.0, 2.0], ["B", 0, 0, 4.0, 6.0], ["B", 0, 1, 8.0, 10.0]]
GOOD_RANK1 = [["F", 0, 0, 1.0, 2.0], ["B", 0, 0, 2.0, 4.0], ["F", 0, 1, 4.0, 5.0], ["B", 0, 1, 5.0, 7.0]]


def check_messages(generate, ckpt_tool, pipeline_schedule, perf_model, work, failures):
    base = os.path.join(work, "ckpt_llama")
    prompt_dir = os.path.join(work, "prompt_dir")
    os.makedirs(prompt_dir, exist_ok=True)
    refused("generate --prompt-file <directory>", [generate, base, "--prompt-file", prompt_dir], "is a directory",
            failures, 20, "===")
    a_file = os.path.join(work, "a_file")
    shard = os.path.join(base, "iter_0000000", "shard_00000.h5")
    refused("generate <a file>", [generate, a_file, "--prompt", "1"], "is a file, not a checkpoint", failures, 20)
    refused("generate <a shard file>", [generate, shard, "--prompt", "1"], "is a file, not a checkpoint", failures, 20)
    refused("ckpt_tool export <a file>", [ckpt_tool, "export", a_file, "--output-dir", os.path.join(work, "x_hf")],
            "is a file", failures, 20)
    refused("ckpt_tool import <a file>", [ckpt_tool, "import", a_file, "--output", os.path.join(work, "y")],
            "is a file", failures, 20)
    refused("pipeline_schedule --metrics-file <directory>", [pipeline_schedule, "--metrics-file", prompt_dir],
            "is a directory", failures, 20)
    refused("perf_model --cluster <directory>", [perf_model, "--cluster", prompt_dir + "/", "--world-size", "8",
                                                 "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads",
                                                 "4", "--seq-length", "32", "--max-position-embeddings", "32",
                                                 "--vocab-size", "512", "--global-batch-size", "8"],
            "is a directory", failures, 20)
    # A measured timeline's bad passes, each by its name.
    bad_passes = [
        ("NaN start", [["F", 0, 0, float("nan"), 1.0]], "start_ms must be from 0 to 1e9"),
        ("NaN end", [["F", 0, 0, 0.0, float("nan")]], "end_ms must be from 0 to 1e9"),
        ("infinite end", [["F", 0, 0, 0.0, float("inf")]], "end_ms must be from 0 to 1e9"),
        ("negative start", [["F", 0, 0, -5.0, -1.0]], "start_ms must be from 0"),
        ("end before start", [["F", 0, 0, 3.0, 1.0]], "before it starts"),
        ("chunk 1 of 1", [["F", 1, 0, 0.0, 1.0]], "chunk 1"),
        ("microbatch 7 of 2", [["F", 0, 7, 0.0, 1.0]], "microbatch 7"),
        ("chunk 0.5", [["F", 0.5, 0, 0.0, 1.0]], "the chunk must be a whole number"),
        ("microbatch 1e300", [["F", 0, 1e300, 0.0, 1.0]], "the microbatch must be a whole number"),
        ("microbatch NaN", [["F", 0, float("nan"), 0.0, 1.0]], "the microbatch must be a whole number"),
    ]
    for i, (name, passes, expected) in enumerate(bad_passes):
        path = os.path.join(work, f"timeline_{i}.jsonl")
        with open(path, "w") as out:
            out.write(json.dumps(timeline_record(passes + GOOD_RANK0[1:], GOOD_RANK1)) + "\n")
        refused(f"timeline: {name}", [pipeline_schedule, "--metrics-file", path], expected, failures, 10)
    for i, (key, value) in enumerate([("microbatches", float("nan")), ("microbatches", 1e300), ("pipeline_size", 2.5),
                                      ("num_layers", -3)]):
        path = os.path.join(work, f"timeline_header_{i}.jsonl")
        with open(path, "w") as out:
            out.write(json.dumps(timeline_record(GOOD_RANK0, GOOD_RANK1, **{key: value})) + "\n")
        refused(f"timeline: {key} {value}", [pipeline_schedule, "--metrics-file", path], f'"{key}"', failures, 10)
    # Cluster files: a binary, a 10 MB line, a long unknown key: one short line, nothing echoed at length.
    binary = os.path.join(work, "binary.conf")
    open(binary, "wb").write(bytes(range(256)) * 64)
    long_line = os.path.join(work, "long.conf")
    open(long_line, "w").write("name = " + "x" * (10 << 20) + "\n")
    long_key = os.path.join(work, "long_key.conf")
    open(long_key, "w").write("name = a\n" + "k" * 3000 + " = 1\n")
    garbage = os.path.join(work, "garbage.conf")
    open(garbage, "w").write("name = a\n" + "\u00e9\u00e8" * 500 + "\n")
    perf = ["--world-size", "8", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
            "--seq-length", "32", "--max-position-embeddings", "32", "--vocab-size", "512", "--micro-batch-size", "1",
            "--global-batch-size", "8"]
    for path, expected in ((binary, "binary bytes"), (long_line, "a line of 10485767 bytes"),
                           (long_key, "unknown key kkkk"), (garbage, "expected key = value")):
        refused(f"perf_model --cluster {os.path.basename(path)}", [perf_model, "--cluster", path] + perf, expected,
                failures, 20)
    print(f"messages: prompt directory, file checkpoints, {len(bad_passes) + 4} timeline records, 4 cluster files")


# ---- class 2: perf_model --search's work ----------------------------------------------------------

def check_search(perf_model, failures):
    model = ["--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "4096",
             "--max-position-embeddings", "4096", "--vocab-size", "32000", "--bf16"]
    cases = [
        (["--world-size", "1099511627776", "--num-layers", "1099511627776", "--global-batch-size", "1099511627776"],
         "more than 16777216 pipeline"),
        (["--world-size", "65536", "--num-layers", "4096", "--global-batch-size", "16777216"], "search's limits"),
        (["--world-size", "4096", "--num-layers", "96", "--global-batch-size", "1073741824"], "search's limits"),
        (["--world-size", "1048576", "--num-layers", "1048576", "--global-batch-size", "1048576"], "--search"),
    ]
    for extra, expected in cases:
        refused(f"perf_model --search {' '.join(extra)}", [perf_model, "--search", "--cluster", "dgx-h100"] + model +
                extra, expected, failures, 30)
    print(f"perf_model --search: {len(cases)} searches too large refused in seconds")


# ---- class 2: pretrain_gpt's own pipeline schedule, sized by the memory plan ---------------------

def check_pipeline_sizes(pretrain, pipeline_schedule, mpirun, failures):
    launcher = [mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none"]
    base = [f for f in TINY] + ["--pipeline-model-parallel-size", "2", "--micro-batch-size", "1"]
    cases = [
        (["--global-batch-size", "1000000000"], []),
        (["--global-batch-size", "300000000"], ["--pipeline-schedule", "zb-h1"]),
        (["--global-batch-size", "200000000", "--num-layers", "4", "--num-layers-per-virtual-pipeline-stage", "1"],
         []),
        (["--global-batch-size", "4000000000"], []),
    ]
    for extra, schedule in cases:
        argv = list(base)
        for i in range(0, len(extra), 2):
            if extra[i] in argv:
                argv[argv.index(extra[i]) + 1] = extra[i + 1]
            else:
                argv += extra[i:i + 2]
        COUNT.cases += 1
        result, seconds = run(launcher + [pretrain] + argv + schedule, timeout=120)
        lines = [line for line in (result.stderr if result else "").splitlines() if line.startswith("error")]
        if result is None or result.returncode == 0 or len(lines) != 1 or seconds > 60 or \
                not any(t in lines[0] for t in ("pipeline schedules", "too large", "overflows")):
            failures.append(f"PP 2 {' '.join(extra + schedule)}: {result and (result.returncode, lines)}, {seconds:.0f} s")
    # The pipeline_schedule tool refuses the same sizes with its own limit.
    for microbatches in ("1000000000", "2147483647"):
        refused(f"pipeline_schedule --num-microbatches {microbatches}",
                [pipeline_schedule, "--pipeline-model-parallel-size", "2", "--num-layers", "2", "--num-microbatches", microbatches],
                "microbatch", failures, 10)
    print(f"pipeline sizes: {len(cases)} PP 2 runs with huge batches refused before building their schedules")


def main():
    parser = argparse.ArgumentParser()
    for name in ("ckpt-tool", "generate", "pretrain", "pipeline-schedule", "perf-model", "work-dir"):
        parser.add_argument("--" + name, required=True)
    parser.add_argument("--mpirun")
    parser.add_argument("--only", help="imports, sizes, saved, logits, load, messages, search, pipeline")
    options = parser.parse_args()
    work = options.work_dir
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    failures = []
    families = check_imports(options.ckpt_tool, work, failures)
    if options.only in (None, "sizes"):
        check_import_sizes(options.ckpt_tool, work, families, failures)
    llama = None
    if options.only in (None, "saved", "load"):
        llama = check_saved_arguments(options.ckpt_tool, options.generate, options.pretrain, work, failures)
    if options.only in (None, "logits"):
        check_nonfinite_logits(options.ckpt_tool, options.generate, work, families, failures)
    if options.only in (None, "load"):
        check_load(options.pretrain, llama, work, failures)
    if options.only in (None, "messages"):
        open(os.path.join(work, "a_file"), "w").write("not a checkpoint\n")
        check_messages(options.generate, options.ckpt_tool, options.pipeline_schedule, options.perf_model, work,
                       failures)
    if options.only in (None, "search"):
        check_search(options.perf_model, failures)
    if options.only in (None, "pipeline") and options.mpirun:
        check_pipeline_sizes(options.pretrain, options.pipeline_schedule, options.mpirun, failures)
    return harness.finish(failures, f"{COUNT.cases} cases")


if __name__ == "__main__":
    sys.exit(main())

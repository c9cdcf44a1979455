#!/usr/bin/python3
"""Sharded HDF5 checkpoints as a user runs them (docs/CHECKPOINTS.md, issue 11's guarantees), on the
CPU backend, alone and under mpirun. Every check compares numbers with an independent run.

--part resume: bit-exact resume (20 iterations uninterrupted versus 10, exit, new process, load,
    10 more: identical printed losses and every model/optimizer tensor of the two final
    checkpoints equal bit for bit), FP32 and BF16, one rank and TP=2 x PP=2 (v=2) x DP=2 with SP and
    the distributed optimizer; the index's virtual datasets against the shards' pieces read by hand
    (h5py), h5dump; --keep-latest-checkpoints, --async-save (bit-identical to a synchronous save),
    --no-save-optim / --no-load-optim, --ckpt-format torch_dist (HDF5 written, said once), --load of an
    empty directory.
--part reshard: a checkpoint saved under TP=2 x PP=2 (v=2) x DP=2 with the distributed optimizer,
    loaded under TP1xPP1xDP1, TP4xPP1xDP2, TP1xPP4xDP2, TP2xPP1xDP1 (no ZeRO) and PP2xDP2 in ZB-V's V
    placement (rank 0 holds the first and the last layer, the embedding and the loss): the losses of the
    three iterations after loading equal the saving layout's uninterrupted run (1e-5 relative), and
    the resharded job's next checkpoint holds the uninterrupted run's optimizer moments. A
    --qk-layernorm checkpoint (TP=2 x DP=2, ZeRO-1) holds Megatron-Core's q_layernorm / k_layernorm
    tensors of kv_channels, resumes under TP1 and TP4 with the uninterrupted run's losses and state,
    and is refused, naming the flag, by a run without --qk-layernorm.
--part faults: a rank SIGKILLed after writing its shard, rank 0 before the rename and before the
    tracker update: the job dies (no hang), the tracker and the previous checkpoint survive, the
    next run resumes from it and trains bit-exactly, leaving no temporary directory; a bit-flipped
    or truncated shard and a missing index are refused naming the file (and tensor), and
    --load-fallback-to-previous loads the previous checkpoint; SIGTERM to one rank under
    --exit-signal-handler saves, exits 0, and the job resumes from that iteration with the
    uninterrupted run's loss.
--part zero: ZeRO-2 (--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads) at DP=4:
    bit-exact resume, FP32 and BF16, with and without half the optimizer state offloaded to the host,
    and ZeRO-3 (optim_grads_params, prefetching) with half offloaded, its copies and host steps
    pipelined (--overlap-cpu-optimizer-d2h-h2d): each checkpoint bit-identical
    to plain ZeRO-2's; a ZeRO-3 checkpoint resharded to ZeRO-1 at DP=2 and on to one rank, each hop
    with the uninterrupted run's losses (1e-5) and the final checkpoint its state."""

import argparse
import filecmp
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

BASE = ("--device cpu --mock-data --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
        "--max-position-embeddings 32 --vocab-size 512 --micro-batch-size 1 --global-batch-size 8 --lr 1e-3 "
        "--log-interval 1 --eval-iters 0").split()
GRID = ("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
        "--use-distributed-optimizer --sequence-parallel").split()
GRID_RANKS = 8
# Where each reshard target loads the TP2xPP2xDP2 v2 ZeRO checkpoint: (name, ranks, flags).
RESHARD_TARGETS = [
    ("TP1xPP1xDP1", 1, []),
    ("TP4xPP1xDP2", 8, "--tensor-model-parallel-size 4 --use-distributed-optimizer".split()),
    ("TP1xPP4xDP2", 8, "--pipeline-model-parallel-size 4 --use-distributed-optimizer".split()),
    ("TP2xPP1xDP1", 2, "--tensor-model-parallel-size 2".split()),
    # ZB-V's V placement: rank 0 holds layers 0 and 3, the embedding, the tied head and the loss.
    ("TP1xPP2xDP2-zb-v", 4, ("--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
                             "--pipeline-schedule zb-v --use-distributed-optimizer").split()),
    # Megatron's uneven split: the stages hold layers 0, 1-2 and 3.
    ("TP1xPP3xDP2-uneven", 6, ("--pipeline-model-parallel-size 3 --decoder-first-pipeline-num-layers 1 "
                               "--decoder-last-pipeline-num-layers 1 --use-distributed-optimizer").split()),
]
# The crash tests' job: two ranks, data-parallel with the distributed optimizer.
FAULT_RANKS = 2
FAULT_LAYOUT = ["--use-distributed-optimizer"]
SIGTERM_RANKS = 4
SIGTERM_LAYOUT = "--tensor-model-parallel-size 2 --use-distributed-optimizer".split()

LOSS = re.compile(r"^ \[[^\]]*\] iteration +(\d+)/ +\d+ \|.*\| lm loss: (\S+) \|")
LOADED = re.compile(r"successfully loaded checkpoint from .* at iteration (\d+)")
TRACKER = "latest_checkpointed_iteration.txt"


class Runner:
    """Runs pretrain_gpt alone (one rank) or under mpirun, keeping every run's output in the work
    directory (run_<n>_<label>.log) for a failure's post-mortem."""

    def __init__(self, binary, mpirun, work_dir):
        self.binary, self.mpirun, self.work_dir = binary, mpirun, work_dir
        self.count = 0

    def command(self, ranks, args):
        if ranks == 1:
            return [self.binary] + args
        return [self.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none", self.binary] + args

    def run(self, label, ranks, args, env=None, timeout=300):
        """Returns (exit status, stdout, stderr); a run past `timeout` is killed (its whole process
        group) and reported with status None."""
        self.count += 1
        environment = dict(os.environ)
        environment.update(env or {})
        process = subprocess.Popen(self.command(ranks, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=environment, start_new_session=True, cwd=self.work_dir)
        try:
            out, err = process.communicate(timeout=timeout)
            status = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            status = None
        with open(os.path.join(self.work_dir, f"run_{self.count:02d}_{label}.log"), "w") as log:
            log.write(" ".join(self.command(ranks, args)) + f"\nexit status {status}\n--- stdout\n{out}\n--- stderr\n{err}")
        return status, out, err


def losses(stdout):
    """{iteration: lm loss as printed}."""
    result = {}
    for line in stdout.splitlines():
        match = LOSS.match(line)
        if match:
            result[int(match.group(1))] = match.group(2)
    return result


def loaded_iteration(stdout):
    match = LOADED.search(stdout)
    return int(match.group(1)) if match else None


def tracker(directory):
    path = os.path.join(directory, TRACKER)
    return open(path).read().strip() if os.path.exists(path) else None


def iteration_dir(directory, iteration):
    return os.path.join(directory, f"iter_{iteration:07d}")


def state_tensors(checkpoint):
    """Every model/ and optimizer/ tensor of a committed checkpoint, whole, from the index's
    virtual datasets."""
    tensors = {}
    with h5py.File(os.path.join(checkpoint, "index.h5"), "r") as index:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and name.split("/")[0] in ("model", "optimizer"):
                tensors[name] = obj[()]
        index.visititems(visit)
    return tensors


def bits(array):
    """The array's bit patterns (so that -0.0 differs from 0.0 and a NaN equals itself)."""
    array = np.ascontiguousarray(array)
    return array.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[array.dtype.itemsize])


def compare_bitwise(first, second):
    """(differences between two checkpoints' tensors as text, [] when identical bit for bit; the
    number of tensors)."""
    a, b = state_tensors(first), state_tensors(second)
    problems = []
    if set(a) != set(b):
        problems.append(f"keys differ: only in {first}: {sorted(set(a) - set(b))[:4]}, "
                        f"only in {second}: {sorted(set(b) - set(a))[:4]}")
    if not any(k.startswith("optimizer/") for k in a):
        problems.append(f"{first} holds no optimizer state")
    for key in sorted(set(a) & set(b)):
        if a[key].shape != b[key].shape or a[key].dtype != b[key].dtype or not np.array_equal(bits(a[key]),
                                                                                              bits(b[key])):
            differing = int(np.count_nonzero(bits(a[key]) != bits(b[key]))) if a[key].shape == b[key].shape else -1
            problems.append(f"{key}: {differing} elements differ")
    return problems, len(a)


def copy_tree(source, destination):
    shutil.rmtree(destination, ignore_errors=True)
    shutil.copytree(source, destination)


def error_lines(stdout, stderr):
    return [line for line in (stdout + "\n" + stderr).splitlines() if line.startswith("error:")]


class Checks:
    def __init__(self):
        self.failures = []

    def expect(self, condition, text):
        if not condition:
            self.failures.append(text)
        return condition


def same_losses(checks, label, ours, reference, iterations):
    """Printed losses identical at `iterations`."""
    missing = [i for i in iterations if i not in ours or i not in reference]
    if not checks.expect(not missing, f"{label}: no lm loss logged for iterations {missing}"):
        return
    differing = [(i, ours[i], reference[i]) for i in iterations if ours[i] != reference[i]]
    checks.expect(not differing, f"{label}: lm loss differs from the uninterrupted run at (iteration, ours, "
                                 f"reference) {differing[:4]}")


# ------------------------------------------------------------------------------------------------
# --part resume


def bit_exact_resume(runner, checks, work, name, ranks, flags):
    """20 iterations in one process against 10 + exit + load + 10: returns the uninterrupted run's
    checkpoint directory (with iter_0000020) and losses for the other checks."""
    full_dir, split_dir = os.path.join(work, f"{name}_full"), os.path.join(work, f"{name}_split")
    for d in (full_dir, split_dir):
        shutil.rmtree(d, ignore_errors=True)
    common = BASE + flags + ["--train-iters", "20"]
    status, full_out, full_err = runner.run(f"{name}_full", ranks, common + ["--save", full_dir])
    if not checks.expect(status == 0, f"{name}: uninterrupted run exit {status}: {full_err[-600:]}"):
        return None
    status, first_out, first_err = runner.run(f"{name}_first10", ranks,
                                              common + ["--exit-interval", "10", "--save", split_dir])
    checks.expect(status == 0 and "exiting program at iteration 10" in first_out,
                  f"{name}: --exit-interval 10 run exit {status} {first_err[-600:]}")
    checks.expect(tracker(split_dir) == "10", f"{name}: tracker after --exit-interval 10 is {tracker(split_dir)}")
    status, second_out, second_err = runner.run(f"{name}_resume", ranks,
                                                common + ["--load", split_dir, "--save", split_dir])
    if not checks.expect(status == 0, f"{name}: resumed run exit {status}: {second_err[-600:]}"):
        return None
    checks.expect(loaded_iteration(second_out) == 10, f"{name}: resumed run loaded {loaded_iteration(second_out)}")
    full, first, second = losses(full_out), losses(first_out), losses(second_out)
    checks.expect(sorted(second) == list(range(11, 21)), f"{name}: resumed run logged iterations {sorted(second)}")
    same_losses(checks, f"{name} first 10", first, full, range(1, 11))
    same_losses(checks, f"{name} resumed", second, full, range(11, 21))
    problems, count = compare_bitwise(iteration_dir(full_dir, 20), iteration_dir(split_dir, 20))
    checks.failures += [f"{name} final checkpoints: {p}" for p in problems]
    identical = sum(second.get(i) == full.get(i) for i in range(11, 21))
    print(f"  {name}: losses 11..20 identical {identical}/10 (e.g. iteration 20: {second.get(20)}); "
          f"{count} tensors of iter_0000020 {'identical bit for bit' if not problems else 'DIFFER'}")
    return full_dir, full


def pieces_by_hand(checkpoint, checks, label):
    """Each virtual dataset of the index against its pieces read from the shard files (the index's
    _pieces table): equal, every element covered once, no NaN."""
    with h5py.File(os.path.join(checkpoint, "index.h5"), "r") as index:
        shard_names = index.attrs["shard_files"]
        shard_names = (shard_names.decode() if isinstance(shard_names, bytes) else shard_names).split(",")
        table = index["_pieces"][()].tobytes().decode()
        rows = [line.split("\t") for line in table.splitlines() if line]
        shards = [h5py.File(os.path.join(checkpoint, n), "r") for n in shard_names]
        assembled, coverage = {}, {}
        try:
            for key, dataset, _dtype, global_shape, offsets, counts, shard in rows:
                shape = tuple(int(x) for x in global_shape.split(","))
                start = [int(x) for x in offsets.split(",")]
                count = [int(x) for x in counts.split(",")]
                if key not in assembled:
                    assembled[key] = np.zeros(shape, np.float64)
                    coverage[key] = np.zeros(shape, np.int32)
                box = tuple(slice(s, s + c) for s, c in zip(start, count))
                piece = shards[int(shard)][dataset][()]
                checks.expect(list(piece.shape) == count, f"{label}: {dataset} has shape {piece.shape}, table {count}")
                assembled[key][box] = piece
                coverage[key][box] += 1
        finally:
            for s in shards:
                s.close()
        mismatched = []
        for key in assembled:
            whole = index[key][()]
            if not (np.all(coverage[key] == 1) and np.array_equal(whole.astype(np.float64), assembled[key])
                    and not np.isnan(whole).any()):
                mismatched.append(key)
        checks.expect(not mismatched, f"{label}: virtual datasets differ from the pieces by hand (or NaN, or "
                                      f"elements not covered exactly once): {mismatched[:4]}")
        checks.expect(set(assembled) == {k for k in state_tensors(checkpoint)},
                      f"{label}: the piece table's keys are not the index's datasets")
        print(f"  {label}: {len(assembled)} virtual datasets equal their {len(rows)} pieces from "
              f"{len(shard_names)} shards read by hand, every element once, no NaN")


def h5dump_header(checkpoint, checks):
    h5dump = shutil.which("h5dump")
    if h5dump is None:
        print("  h5dump: not installed, skipped")
        return
    run = subprocess.run([h5dump, "-H", os.path.join(checkpoint, "index.h5")], capture_output=True, text=True,
                         timeout=120)
    checks.expect(run.returncode == 0 and "embedding.word_embeddings.weight" in run.stdout and "VIRTUAL" in subprocess.run(
        [h5dump, "-p", "-H", os.path.join(checkpoint, "index.h5")], capture_output=True, text=True, timeout=120).stdout,
                  f"h5dump -H index.h5: exit {run.returncode} {run.stderr[-400:]}")
    data = subprocess.run([h5dump, "-d", "/model/decoder.final_layernorm.weight", os.path.join(checkpoint, "index.h5")],
                          capture_output=True, text=True, timeout=120)
    checks.expect(data.returncode == 0 and "DATA" in data.stdout,
                  f"h5dump -d (virtual dataset): exit {data.returncode} {data.stderr[-400:]}")
    print(f"  h5dump -H index.h5: exit {run.returncode}; h5dump -d of a virtual dataset: exit {data.returncode}")


def options_checks(runner, checks, work, fp32_1rank_losses, grid_full):
    """--keep-latest-checkpoints, --async-save, --no-save-optim, --ckpt-format, empty --load."""
    # --keep-latest-checkpoints 2: saves at 2, 4, ..., 10: only 8 and 10 remain.
    keep = os.path.join(work, "keep")
    shutil.rmtree(keep, ignore_errors=True)
    status, out, err = runner.run("keep_latest", 1, BASE + ["--train-iters", "10", "--save", keep, "--save-interval",
                                                            "2", "--keep-latest-checkpoints", "2"])
    left = sorted(n for n in os.listdir(keep) if n.startswith("iter_")) if os.path.isdir(keep) else []
    checks.expect(status == 0 and left == ["iter_0000008", "iter_0000010"] and tracker(keep) == "10",
                  f"--keep-latest-checkpoints 2: exit {status}, left {left}, tracker {tracker(keep)}")
    print(f"  --keep-latest-checkpoints 2 with saves every 2 of 10 iterations leaves {left}")

    # --async-save under the full grid: its iteration-20 checkpoint is the synchronous one's, bit for bit.
    asynchronous = os.path.join(work, "async")
    shutil.rmtree(asynchronous, ignore_errors=True)
    status, out, err = runner.run("async_save", GRID_RANKS, BASE + GRID + ["--train-iters", "20", "--save",
                                                                           asynchronous, "--save-interval", "5",
                                                                           "--async-save"])
    if checks.expect(status == 0, f"--async-save run exit {status}: {err[-600:]}"):
        committed = sorted(n for n in os.listdir(asynchronous) if n.startswith("iter_"))
        checks.expect(committed == [f"iter_{i:07d}" for i in (5, 10, 15, 20)] and tracker(asynchronous) == "20",
                      f"--async-save: committed {committed}, tracker {tracker(asynchronous)}")
        checks.expect(out.count("successfully saved checkpoint") == 4,
                      f"--async-save: {out.count('successfully saved checkpoint')} saves reported, expected 4")
        if grid_full:
            problems, count = compare_bitwise(iteration_dir(asynchronous, 20), iteration_dir(grid_full, 20))
            checks.failures += [f"--async-save vs synchronous save: {p}" for p in problems]
            print(f"  --async-save (TP2xPP2xDP2, saves at 5/10/15/20): iter_0000020's {count} tensors "
                  f"{'identical to the synchronous save' if not problems else 'DIFFER from the synchronous save'}")

    # --no-save-optim: loading it needs --no-load-optim (the message says so), and works with it.
    no_optim = os.path.join(work, "no_optim")
    shutil.rmtree(no_optim, ignore_errors=True)
    status, out, err = runner.run("no_save_optim", 1, BASE + ["--train-iters", "20", "--exit-interval", "5",
                                                              "--save", no_optim, "--no-save-optim"])
    checks.expect(status == 0, f"--no-save-optim run exit {status}: {err[-400:]}")
    if status == 0:
        keys = state_tensors(iteration_dir(no_optim, 5))
        checks.expect(keys and not any(k.startswith("optimizer/") for k in keys),
                      "--no-save-optim checkpoint holds optimizer state")
    status, out, err = runner.run("load_without_optim", 1, BASE + ["--train-iters", "20", "--load", no_optim])
    errors = error_lines(out, err)
    checks.expect(status not in (0, None) and len(errors) == 1 and "--no-load-optim" in errors[0]
                  and not losses(out), f"--load of a --no-save-optim checkpoint without --no-load-optim: exit "
                                       f"{status}, errors {errors}")
    print(f"  --no-save-optim then --load: exit {status}, {errors[0] if errors else 'no error line'}")
    status, out, err = runner.run("load_no_load_optim", 1, BASE + ["--train-iters", "20", "--exit-interval", "7",
                                                                   "--load", no_optim, "--no-load-optim"])
    checks.expect(status == 0 and loaded_iteration(out) == 5 and sorted(losses(out)) == [6, 7],
                  f"--no-load-optim load: exit {status}, loaded {loaded_iteration(out)}, logged {sorted(losses(out))}")

    # --ckpt-format torch_dist (Megatron's default, asked for by name): accepted, one start-up note
    # naming the format written, and the checkpoint is this program's HDF5 one.
    torch_dist = os.path.join(work, "torch_dist")
    shutil.rmtree(torch_dist, ignore_errors=True)
    status, out, err = runner.run("torch_dist", 1, BASE + ["--train-iters", "2", "--ckpt-format", "torch_dist",
                                                           "--save", torch_dist])
    notes = [l for l in (out + err).splitlines() if "--ckpt-format torch_dist" in l]
    written = os.path.exists(os.path.join(iteration_dir(torch_dist, 2), "index.h5"))
    checks.expect(status == 0 and len(notes) == 1 and "HDF5" in notes[0] and written and len(losses(out)) == 2,
                  f"--ckpt-format torch_dist: exit {status}, notes {notes}, index.h5 written {written}")
    print(f"  --ckpt-format torch_dist: exit {status}, {notes[0] if notes else 'no note'}")

    # --load of an empty directory: a warning, then the same training as without --load.
    empty = os.path.join(work, "empty")
    shutil.rmtree(empty, ignore_errors=True)
    os.makedirs(empty)
    status, out, err = runner.run("load_empty", 1, BASE + ["--train-iters", "20", "--exit-interval", "3",
                                                           "--load", empty])
    checks.expect(status == 0 and "WARNING: could not find the metadata file" in out + err
                  and loaded_iteration(out) is None, f"--load of an empty directory: exit {status}, {err[-300:]}")
    if fp32_1rank_losses:
        same_losses(checks, "--load of an empty directory", losses(out), fp32_1rank_losses, range(1, 4))
    print(f"  --load of an empty directory: exit {status}, warned, trained from scratch "
          f"(losses 1..3 {[losses(out).get(i) for i in (1, 2, 3)]})")


def part_resume(runner, checks, work):
    full_dirs, full_losses = {}, {}
    for precision, precision_flags in (("fp32", []), ("bf16", ["--bf16"])):
        for layout, ranks, flags in (("1rank", 1, []), ("tp2pp2dp2", GRID_RANKS, GRID)):
            name = f"{precision}_{layout}"
            full_dirs[name], full_losses[name] = bit_exact_resume(runner, checks, work, name, ranks,
                                                                  flags + precision_flags) or (None, None)
    for name in ("fp32_tp2pp2dp2", "bf16_tp2pp2dp2"):
        if full_dirs.get(name):
            pieces_by_hand(iteration_dir(full_dirs[name], 20), checks, f"{name} iter_0000020")
    if full_dirs.get("bf16_tp2pp2dp2"):
        keys = state_tensors(iteration_dir(full_dirs["bf16_tp2pp2dp2"], 20))
        checks.expect(any(k.startswith("optimizer/master/") for k in keys), "BF16 checkpoint lacks master weights")
        # The BF16 parameters are the master weights rounded to BF16 (round to nearest even).
        name = "embedding.word_embeddings.weight"
        master = keys[f"optimizer/master/{name}"].astype(np.float32)
        rounded = ((master.view(np.uint32).astype(np.uint64) + 0x7FFF + ((master.view(np.uint32) >> 16) & 1))
                   >> 16 << 16).astype(np.uint32).view(np.float32)
        checks.expect(np.array_equal(keys[f"model/{name}"], rounded),
                      "BF16 checkpoint: model/ parameters are not the master weights rounded to BF16")
    if full_dirs.get("fp32_tp2pp2dp2"):
        h5dump_header(iteration_dir(full_dirs["fp32_tp2pp2dp2"], 20), checks)
    options_checks(runner, checks, work, full_losses.get("fp32_1rank"), full_dirs.get("fp32_tp2pp2dp2"))


# ------------------------------------------------------------------------------------------------
# --part reshard


def close_tensors(saved, reference):
    """(keys whose tensors differ beyond the tolerance, the largest |difference| / max |value|):
    rtol 1e-5 plus an absolute term at 1e-4 of the tensor's largest element (a moment's small
    elements carry the summation-order differences of another layout)."""
    bad, worst = [], 0.0
    for key in sorted(set(saved) & set(reference)):
        a, b = saved[key].astype(np.float64), reference[key].astype(np.float64)
        scale = max(float(np.abs(b).max()) if b.size else 0.0, 1e-30)
        if a.shape != b.shape or not np.allclose(a, b, rtol=1e-5, atol=1e-4 * scale):
            bad.append(key)
        elif a.size:
            worst = max(worst, float(np.abs(a - b).max() / scale))
    return bad, worst


def part_reshard(runner, checks, work):
    source = os.path.join(work, "reshard_source")
    shutil.rmtree(source, ignore_errors=True)
    # The saving layout, uninterrupted to 13: its checkpoint at 10 is the one to reshard, its losses
    # 11..13 and its checkpoint at 13 the reference.
    status, out, err = runner.run("reshard_source", GRID_RANKS, BASE + GRID + [
        "--train-iters", "20", "--save", source, "--save-interval", "10", "--exit-interval", "13"])
    if not checks.expect(status == 0 and tracker(source) == "13", f"reshard source run exit {status}, tracker "
                                                                  f"{tracker(source)}: {err[-600:]}"):
        return
    reference = losses(out)
    reference13 = state_tensors(iteration_dir(source, 13))
    # The checkpoint at 10 moved to a directory of its own (the index finds its shards beside it).
    moved = os.path.join(work, "reshard_10")
    shutil.rmtree(moved, ignore_errors=True)
    os.makedirs(moved)
    shutil.copytree(iteration_dir(source, 10), iteration_dir(moved, 10))
    with open(os.path.join(moved, TRACKER), "w") as f:
        f.write("10\n")
    for name, ranks, flags in RESHARD_TARGETS:
        save = os.path.join(work, f"reshard_{name}")
        shutil.rmtree(save, ignore_errors=True)
        # One target loads from the source directory by --ckpt-step, the others from the moved copy.
        load = ["--load", source, "--ckpt-step", "10"] if name == "TP1xPP1xDP1" else ["--load", moved]
        status, out, err = runner.run(f"reshard_{name}", ranks, BASE + flags + load + [
            "--train-iters", "20", "--exit-interval", "13", "--save", save])
        if not checks.expect(status == 0, f"reshard to {name}: exit {status}: {err[-600:]}"):
            continue
        checks.expect(loaded_iteration(out) == 10, f"reshard to {name}: loaded {loaded_iteration(out)}")
        ours = losses(out)
        worst = 0.0
        for i in (11, 12, 13):
            if checks.expect(i in ours, f"reshard to {name}: no loss at iteration {i}"):
                worst = max(worst, abs(float(ours[i]) - float(reference[i])) / float(reference[i]))
        checks.expect(worst <= 1e-5, f"reshard to {name}: losses 11..13 {[ours.get(i) for i in (11, 12, 13)]} vs "
                                     f"{[reference[i] for i in (11, 12, 13)]} (max relative {worst:.1e})")
        # Its checkpoint at 13: optimizer moments (and parameters) those of the uninterrupted run.
        saved = state_tensors(iteration_dir(save, 13)) if tracker(save) == "13" else {}
        if not checks.expect(saved, f"reshard to {name}: no checkpoint at 13 (tracker {tracker(save)})"):
            continue
        checks.expect(set(saved) == set(reference13), f"reshard to {name}: checkpoint keys differ from the "
                                                      f"reference's: {sorted(set(saved) ^ set(reference13))[:4]}")
        moments = [k for k in reference13 if k.startswith("optimizer/exp_avg")]
        bad, worst_state = close_tensors(saved, reference13)
        checks.expect(not bad, f"reshard to {name}: checkpoint at 13 differs from the uninterrupted run's in "
                               f"{len(bad)} tensors: {bad[:4]}")
        nonzero = all(np.abs(saved[k]).max() > 0 for k in moments if k in saved)
        checks.expect(nonzero and len(moments) > 0, f"reshard to {name}: optimizer moments missing or zero")
        print(f"  TP2xPP2xDP2 v2 ZeRO -> {name} ({ranks} ranks): losses 11..13 "
              f"{[ours.get(i) for i in (11, 12, 13)]} vs {[reference[i] for i in (11, 12, 13)]}, max relative "
              f"{worst:.1e}; checkpoint at 13: {len(moments)} moment tensors, max |difference| / max|value| "
              f"{worst_state:.1e} over {len(saved)} tensors")
    # The control: the same load with --no-load-optim (moments restarted from zero) must fail the
    # comparison of the moments, or the comparison above could not see dropped optimizer state.
    control = os.path.join(work, "reshard_control")
    shutil.rmtree(control, ignore_errors=True)
    status, out, err = runner.run("reshard_control", 1, BASE + ["--load", moved, "--no-load-optim", "--train-iters",
                                                                "20", "--exit-interval", "13", "--save", control])
    if checks.expect(status == 0 and tracker(control) == "13", f"reshard control run: exit {status}: {err[-400:]}"):
        bad, _ = close_tensors(state_tensors(iteration_dir(control, 13)), reference13)
        dropped = [k for k in bad if k.startswith("optimizer/exp_avg")]
        checks.expect(len(dropped) > 0, "reshard control: moments restarted from zero pass the comparison")
        print(f"  control: the same load with --no-load-optim differs from the reference in {len(dropped)} moment "
              f"tensors (the comparison detects dropped optimizer state)")
    reshard_qk_layernorm(runner, checks, work)


# RoPE: without it the key norm's bias has an exactly-zero gradient, on whose rounding noise Adam takes
# steps of the learning rate's size that differ between layouts (see the oracle).
QK = "--qk-layernorm --apply-wd-to-qk-layernorm --kv-channels 8 --position-embedding-type rope".split()


def reshard_qk_layernorm(runner, checks, work):
    """--qk-layernorm's norms (replicated across TP, summed over it) through a checkpoint: saved at
    TP2 x DP2 with ZeRO-1, resumed at TP1 and at TP4, each against the uninterrupted run."""
    source = os.path.join(work, "qk_source")
    shutil.rmtree(source, ignore_errors=True)
    layout = "--tensor-model-parallel-size 2 --use-distributed-optimizer".split()
    status, out, err = runner.run("qk_source", 4, BASE + QK + layout + [
        "--train-iters", "20", "--save", source, "--save-interval", "10", "--exit-interval", "13"])
    if not checks.expect(status == 0 and tracker(source) == "13", f"qk-layernorm source run exit {status}: "
                                                                  f"{err[-600:]}"):
        return
    reference = losses(out)
    reference13 = state_tensors(iteration_dir(source, 13))
    assert QK[:2] == ["--qk-layernorm", "--apply-wd-to-qk-layernorm"]  # the run without them keeps the rest
    names = [f"model/decoder.layers.{layer}.self_attention.{norm}_layernorm.{part}"
             for layer in range(4) for norm in ("q", "k") for part in ("weight", "bias")]
    missing = [n for n in names if n not in reference13 or reference13[n].shape != (8,)]
    checks.expect(not missing, f"qk-layernorm checkpoint: tensors missing or not of kv_channels 8: {missing[:4]}")
    for name, ranks, flags in (("TP1", 1, []), ("TP4", 4, ["--tensor-model-parallel-size", "4"])):
        save = os.path.join(work, f"qk_{name}")
        shutil.rmtree(save, ignore_errors=True)
        status, out, err = runner.run(f"qk_{name}", ranks, BASE + QK + flags + [
            "--load", source, "--ckpt-step", "10", "--train-iters", "20", "--exit-interval", "13", "--save", save])
        if not checks.expect(status == 0 and tracker(save) == "13", f"qk-layernorm to {name}: exit {status}: "
                                                                    f"{err[-600:]}"):
            continue
        ours = losses(out)
        worst = max(abs(float(ours.get(i, "nan")) - float(reference[i])) / float(reference[i]) for i in (11, 12, 13))
        checks.expect(worst <= 1e-5, f"qk-layernorm to {name}: losses 11..13 {[ours.get(i) for i in (11, 12, 13)]} "
                                     f"vs {[reference[i] for i in (11, 12, 13)]}")
        saved = state_tensors(iteration_dir(save, 13))
        bad, worst_state = close_tensors(saved, reference13)
        checks.expect(set(saved) == set(reference13) and not bad,
                      f"qk-layernorm to {name}: checkpoint at 13 differs from the uninterrupted run's: {bad[:4]}")
        print(f"  --qk-layernorm TP2xDP2 ZeRO-1 -> {name}: losses 11..13 max relative {worst:.1e}, checkpoint at 13 "
              f"max |difference| / max|value| {worst_state:.1e} over {len(saved)} tensors")
    status, out, err = runner.run("qk_without_flag", 1, BASE + QK[2:] + ["--load", source,
                                                               "--train-iters", "20", "--exit-interval", "14"])
    errors = error_lines(out, err)
    checks.expect(status not in (0, None) and any("--qk-layernorm" in line for line in errors),
                  f"a --qk-layernorm checkpoint loaded without the flag: exit {status}, errors {errors[:2]}")


# ------------------------------------------------------------------------------------------------
# --part zero

ZERO2 = "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads".split()
ZERO3 = "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --overlap-param-gather".split()
OFFLOAD = "--optimizer-cpu-offload --use-precision-aware-optimizer --optimizer-offload-fraction 0.5".split()


def part_zero(runner, checks, work):
    """ZeRO-2 (gradient shards only) and ZeRO-3 (parameter shards too, with half the optimizer state
    on the host) at DP=4: bit-exact resume, and checkpoints bit-identical to each other (the same
    arithmetic); a ZeRO-3 checkpoint resharded to ZeRO-1 at DP=2, whose own checkpoint then loads
    on one rank, each hop training on with the saving layout's uninterrupted losses and ending at
    its state."""
    # Offload: resumed bit-exactly (the host's moments, master weights and the step count restored;
    # a stale step would change the bias correction), and bit-identical to the state kept on the
    # device (the host step is the same op on the CPU backend).
    for precision, precision_flags in (("fp32", []), ("bf16", ["--bf16"])):
        plain = bit_exact_resume(runner, checks, work, f"{precision}_zero2_dp4", 4, ZERO2 + precision_flags)
        offloaded = bit_exact_resume(runner, checks, work, f"{precision}_zero2_dp4_offload_half", 4,
                                     ZERO2 + OFFLOAD + precision_flags)
        zero3 = bit_exact_resume(runner, checks, work, f"{precision}_zero3_dp4_offload_half", 4,
                                 ZERO3 + OFFLOAD + ["--overlap-cpu-optimizer-d2h-h2d"] + precision_flags)
        for name, other in (("ZeRO-2 DP4, half the optimizer state on the host", offloaded),
                            ("ZeRO-3 DP4, half the optimizer state on the host", zero3)):
            if not (plain and other):
                continue
            problems, count = compare_bitwise(iteration_dir(plain[0], 20), iteration_dir(other[0], 20))
            checks.failures += [f"{precision} {name} vs ZeRO-2 on the device: {p}" for p in problems]
            same_losses(checks, f"{precision} {name} vs ZeRO-2 on the device", other[1], plain[1], range(1, 21))
            print(f"  {precision} {name} vs ZeRO-2 with none: losses 1..20 identical, "
                  f"{count} tensors of iter_0000020 {'identical bit for bit' if not problems else 'DIFFER'}")
    source = os.path.join(work, "zero_source")
    shutil.rmtree(source, ignore_errors=True)
    status, out, err = runner.run("zero_source", 4, BASE + ZERO3 + [
        "--train-iters", "20", "--save", source, "--save-interval", "5", "--exit-interval", "15"])
    if not checks.expect(status == 0 and tracker(source) == "15", f"ZeRO-3 source run exit {status}, tracker "
                                                                  f"{tracker(source)}: {err[-600:]}"):
        return
    reference, reference15 = losses(out), state_tensors(iteration_dir(source, 15))
    hops = [("ZeRO-1 DP2", 2, ["--use-distributed-optimizer"], ["--load", source, "--ckpt-step", "5"], 5, 10),
            ("one rank", 1, [], ["--load", os.path.join(work, "zero_hop_ZeRO-1 DP2")], 10, 15)]
    for name, ranks, flags, load, loaded, end in hops:
        save = os.path.join(work, f"zero_hop_{name}")
        shutil.rmtree(save, ignore_errors=True)
        status, out, err = runner.run(f"zero_hop_{name}", ranks, BASE + flags + load + [
            "--train-iters", "20", "--exit-interval", str(end), "--save", save])
        if not checks.expect(status == 0 and tracker(save) == str(end), f"ZeRO-3 -> {name}: exit {status}, tracker "
                                                                        f"{tracker(save)}: {err[-600:]}"):
            return
        checks.expect(loaded_iteration(out) == loaded, f"ZeRO-3 -> {name}: loaded {loaded_iteration(out)}")
        ours = losses(out)
        worst = max(abs(float(ours.get(i, "nan")) - float(reference[i])) / float(reference[i])
                    for i in range(loaded + 1, end + 1))
        checks.expect(worst <= 1e-5, f"ZeRO-3 -> {name}: losses {loaded + 1}..{end} max relative {worst:.1e}")
        print(f"  ZeRO-3 DP4 -> {name} ({ranks} ranks): loaded iteration {loaded}, losses {loaded + 1}..{end} "
              f"max relative {worst:.1e}")
    saved = state_tensors(iteration_dir(save, 15))
    checks.expect(set(saved) == set(reference15), f"one rank's checkpoint keys differ from ZeRO-3's: "
                                                  f"{sorted(set(saved) ^ set(reference15))[:4]}")
    # The QKV bias's key part has an exactly-zero gradient in exact arithmetic (softmax is invariant
    # to it); in FP32 it gets rounding noise of ~1e-10 that Adam's m / sqrt(v) turns into full
    # learning-rate steps, differently in every layout (layout_parity_test skips it too).
    bad, worst_state = close_tensors({k: v for k, v in saved.items() if not k.endswith("linear_qkv.bias")},
                                     reference15)
    checks.expect(not bad, f"after ZeRO-3 DP4 -> ZeRO-1 DP2 -> one rank, the checkpoint at 15 differs from the "
                           f"uninterrupted ZeRO-3 run's in {len(bad)} tensors: {bad[:4]}")
    print(f"  checkpoint at 15 after both hops vs the uninterrupted ZeRO-3 run: {len(saved)} tensors, max "
          f"|difference| / max|value| {worst_state:.1e}")


# ------------------------------------------------------------------------------------------------
# --part faults


def fault_job(extra):
    return BASE + FAULT_LAYOUT + ["--train-iters", "20"] + extra


def crash_during_save(runner, checks, work, base_dir, reference, point, rank):
    label = f"{point}:{rank}"
    d = os.path.join(work, f"fault_{point}")
    copy_tree(base_dir, d)
    before = {n: open(os.path.join(iteration_dir(d, 10), n), "rb").read() for n in os.listdir(iteration_dir(d, 10))}
    start = time.time()
    status, out, err = runner.run(f"fault_{point}", FAULT_RANKS, fault_job(["--load", d, "--save", d, "--save-interval", "5"]),
                                  env={"GPT_CHECKPOINT_FAULT": label}, timeout=120)
    elapsed, crash_status = time.time() - start, status
    checks.expect(status is not None, f"{label}: the job hung (killed after 120 s)")
    checks.expect(status not in (0, None), f"{label}: exit {status}, expected a failure")
    checks.expect(f"GPT_CHECKPOINT_FAULT: rank {rank} killed at {point}" in err,
                  f"{label}: the fault did not fire: {err[-400:]}")
    checks.expect(tracker(d) == "10", f"{label}: tracker says {tracker(d)}, expected 10")
    after = {n: open(os.path.join(iteration_dir(d, 10), n), "rb").read() for n in os.listdir(iteration_dir(d, 10))}
    checks.expect(after == before, f"{label}: iter_0000010 changed")
    committed15 = os.path.exists(os.path.join(iteration_dir(d, 15), "index.h5"))
    temporary15 = os.path.isdir(iteration_dir(d, 15) + ".tmp")
    if point == "before-tracker":
        checks.expect(committed15 and not temporary15, f"{label}: iter_0000015 committed {committed15}, "
                                                       f"temporary {temporary15}")
    else:
        checks.expect(not os.path.exists(iteration_dir(d, 15)) and temporary15,
                      f"{label}: iter_0000015 exists {os.path.exists(iteration_dir(d, 15))}, temporary {temporary15}")
    left = sorted(os.listdir(d))
    if temporary15:
        # Make the stale temporary directory look complete (an index of its own): still never read,
        # and replaced by the next save of iteration 15.
        shutil.copy(os.path.join(iteration_dir(d, 10), "index.h5"), iteration_dir(d, 15) + ".tmp")
    # A crashed save of another iteration is removed by the next save too.
    os.makedirs(iteration_dir(d, 12) + ".tmp", exist_ok=True)
    # The next run resumes from 10 and trains as the uninterrupted run.
    status, out, err = runner.run(f"fault_{point}_resume", FAULT_RANKS, fault_job(["--load", d, "--save", d, "--save-interval", "5"]))
    if not checks.expect(status == 0, f"{label}: resumed run exit {status}: {err[-600:]}"):
        return
    checks.expect(loaded_iteration(out) == 10, f"{label}: resumed run loaded {loaded_iteration(out)}, expected 10")
    same_losses(checks, f"{label} resumed", losses(out), reference, range(11, 21))
    now = sorted(os.listdir(d))
    if checks.expect(os.path.exists(os.path.join(iteration_dir(d, 15), "index.h5")), f"{label}: no iter_0000015"):
        with h5py.File(os.path.join(iteration_dir(d, 15), "index.h5"), "r") as index:
            checks.expect(int(index.attrs["iteration"]) == 15, f"{label}: iter_0000015's index says iteration "
                                                               f"{index.attrs['iteration']}")
    checks.expect(not any(n.endswith(".tmp") or n.endswith(".old") for n in now) and tracker(d) == "20",
                  f"{label}: after the resumed run: {now}, tracker {tracker(d)}")
    print(f"  {label}: died in {elapsed:.1f} s with exit {crash_status}, left {left}, tracker "
          f"10; the next run loaded 10, losses 11..20 identical to the uninterrupted run, then {now}")


def damaged_checkpoint(runner, checks, work, base_dir, reference, kind):
    d = os.path.join(work, f"damaged_{kind}")
    copy_tree(base_dir, d)
    shard_name = "shard_00001.h5"
    shard = os.path.join(iteration_dir(d, 10), shard_name)
    key = None
    if kind == "bitflip":
        with h5py.File(shard, "r") as f:
            names = []
            f.visit(names.append)
            datasets = [n for n in names if isinstance(f[n], h5py.Dataset) and n != "_pieces"]
            dataset = max(datasets, key=lambda n: f[n].size)
            info = f[dataset].id.get_chunk_info(0)
            key = dataset.rsplit("/", 1)[0]
        with open(shard, "r+b") as f:
            f.seek(info.byte_offset + info.size // 2)
            byte = f.read(1)
            f.seek(info.byte_offset + info.size // 2)
            f.write(bytes([byte[0] ^ 0x10]))
    elif kind == "truncated":
        os.truncate(shard, os.path.getsize(shard) // 2)
    elif kind == "no_index":
        os.remove(os.path.join(iteration_dir(d, 10), "index.h5"))
    job = BASE + FAULT_LAYOUT + ["--train-iters", "20", "--exit-interval", "12", "--load", d]
    status, out, err = runner.run(f"damaged_{kind}", FAULT_RANKS, job)
    errors = error_lines(out, err)
    if kind == "no_index":
        expected = ["index.h5", iteration_dir(d, 10)]
    else:
        expected = [shard_name, "tensor '"] + ([f"tensor '{key}'"] if key else [])
    checks.expect(status == 1 and len(errors) == 1 and all(e in errors[0] for e in expected) and not losses(out),
                  f"damaged ({kind}): exit {status}, errors {errors}, expected one line with {expected}")
    print(f"  {kind}: exit {status}: {errors[0] if errors else 'no error line'}")
    if kind == "no_index":
        return
    status, out, err = runner.run(f"damaged_{kind}_fallback", FAULT_RANKS, job + ["--load-fallback-to-previous"])
    if checks.expect(status == 0, f"damaged ({kind}) with --load-fallback-to-previous: exit {status}: {err[-500:]}"):
        checks.expect(loaded_iteration(out) == 5, f"damaged ({kind}) with --load-fallback-to-previous: loaded "
                                                  f"{loaded_iteration(out)}, expected 5")
        same_losses(checks, f"damaged ({kind}) fallback", losses(out), reference, range(6, 13))
        print(f"    with --load-fallback-to-previous: loaded iteration {loaded_iteration(out)}, losses 6..12 "
              f"identical to the uninterrupted run")


def rank_pids(mpirun_pid):
    """{world rank: pid} of the processes mpirun started (its children, by /proc)."""
    pids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent != mpirun_pid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            if b"OMPI_COMM_WORLD_RANK" in environ:
                pids[int(environ[b"OMPI_COMM_WORLD_RANK"])] = int(entry)
        except (OSError, ValueError, IndexError):
            continue
    return pids


def sigterm(runner, checks, work):
    d = os.path.join(work, "sigterm")
    shutil.rmtree(d, ignore_errors=True)
    job = BASE + SIGTERM_LAYOUT + ["--train-iters", "1000", "--exit-signal-handler"]
    log_path = os.path.join(work, "sigterm_job.log")
    environment = dict(os.environ)
    with open(log_path, "w") as log:
        process = subprocess.Popen(runner.command(SIGTERM_RANKS, job + ["--save", d]), stdout=log,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=work,
                                   env=environment)
        signalled, deadline = None, time.time() + 120
        while time.time() < deadline and process.poll() is None:
            logged = losses(open(log_path).read())
            if logged and max(logged) >= 3:
                pids = rank_pids(process.pid)
                if 1 in pids:
                    os.kill(pids[1], signal.SIGTERM)
                    signalled = max(logged)
                    break
            time.sleep(0.05)
        try:
            status = process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            status = process.wait()
            checks.failures.append("SIGTERM: the job did not exit within 120 s")
    out = open(log_path).read()
    if not checks.expect(signalled is not None, f"SIGTERM: never sent (job exit {process.returncode}): {out[-500:]}"):
        return
    logged = losses(out)
    stopped = max(logged) if logged else None
    checks.expect(status == 0 and "exiting program after receiving SIGTERM." in out,
                  f"SIGTERM: exit {status}, no exit message: {out[-500:]}")
    checks.expect(stopped is not None and stopped < 1000 and tracker(d) == str(stopped)
                  and os.path.exists(os.path.join(iteration_dir(d, stopped), "index.h5")),
                  f"SIGTERM: stopped at {stopped}, tracker {tracker(d)}")
    if stopped is None or tracker(d) != str(stopped):
        return
    committed = tracker(d)
    # The uninterrupted job to one iteration past the stop, and the resumed job to the same.
    status, reference_out, err = runner.run("sigterm_reference", SIGTERM_RANKS,
                                            job + ["--exit-interval", str(stopped + 1)])
    reference = losses(reference_out)
    same_losses(checks, "SIGTERM run", logged, reference, range(1, stopped + 1))
    status, resumed_out, err = runner.run("sigterm_resume", SIGTERM_RANKS,
                                          job + ["--exit-interval", str(stopped + 1), "--load", d, "--save", d])
    checks.expect(status == 0 and loaded_iteration(resumed_out) == stopped,
                  f"SIGTERM resume: exit {status}, loaded {loaded_iteration(resumed_out)}: {err[-400:]}")
    same_losses(checks, "SIGTERM resumed", losses(resumed_out), reference, [stopped + 1])
    print(f"  SIGTERM to rank 1 after iteration {signalled} was logged: exit 0 at iteration {stopped}, committed "
          f"iter_{stopped:07d}, tracker {committed}; resumed: loss at {stopped + 1} "
          f"{losses(resumed_out).get(stopped + 1)} (uninterrupted {reference.get(stopped + 1)})")


def part_faults(runner, checks, work):
    # The uninterrupted job, and the committed checkpoints at 5 and 10 the crashes start from.
    status, out, err = runner.run("faults_reference", FAULT_RANKS, fault_job([]))
    reference = losses(out)
    if not checks.expect(status == 0 and sorted(reference) == list(range(1, 21)),
                         f"faults: uninterrupted run exit {status}: {err[-400:]}"):
        return
    base_dir = os.path.join(work, "faults_base")
    shutil.rmtree(base_dir, ignore_errors=True)
    status, out, err = runner.run("faults_base", FAULT_RANKS, fault_job(["--exit-interval", "10", "--save", base_dir,
                                                                         "--save-interval", "5"]))
    if not checks.expect(status == 0 and tracker(base_dir) == "10", f"faults: base run exit {status}, tracker "
                                                                   f"{tracker(base_dir)}: {err[-400:]}"):
        return
    same_losses(checks, "faults base run", losses(out), reference, range(1, 11))
    print("crash during a save (2 ranks, DP=2 with ZeRO; checkpoint at 10 committed, next save at 15):")
    for point, rank in (("after-shard", 1), ("before-rename", 0), ("before-tracker", 0)):
        crash_during_save(runner, checks, work, base_dir, reference, point, rank)
    print("damaged checkpoint at 10 (5 committed before it):")
    for kind in ("bitflip", "truncated", "no_index"):
        damaged_checkpoint(runner, checks, work, base_dir, reference, kind)
    print(f"SIGTERM under --exit-signal-handler ({SIGTERM_RANKS} ranks, TP=2 x DP=2):")
    sigterm(runner, checks, work)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--part", choices=["resume", "reshard", "faults", "zero", "all"], default="all")
    options = parser.parse_args()
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    checks = Checks()
    parts = {"resume": part_resume, "reshard": part_reshard, "faults": part_faults, "zero": part_zero}
    for name in (parts if options.part == "all" else [options.part]):
        work = os.path.abspath(os.path.join(options.work_dir, name))
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        runner = Runner(os.path.abspath(options.binary), options.mpirun, work)
        start = time.time()
        print(f"--part {name}:")
        parts[name](runner, checks, work)
        print(f"--part {name}: {runner.count} runs, {time.time() - start:.0f} s")
    return harness.finish(checks.failures)


if __name__ == "__main__":
    sys.exit(main())

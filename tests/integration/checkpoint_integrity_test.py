#!/usr/bin/python3
"""Issue 33: nothing lost, nothing mixed. What surrounds the tensor bytes of a checkpoint, as a
hostile but realistic user damages it (docs/CHECKPOINTS.md, "Integrity").

--part integrity: a shard copied in from another run and from another iteration of the same run,
    an index.h5 of another iteration, one flipped bit in the index's iteration, consumed samples and
    optimizer steps, one changed name in its piece table, an edited saved argument: pretrain_gpt
    --load exits 1 with one error line naming the file and what differs, `ckpt_tool verify` exits 1
    naming the same; --load-fallback-to-previous loads the previous checkpoint and trains as the
    uninterrupted run; a checkpoint of format version 1 (the index downgraded) still loads, with
    one note, and resumes exactly; a resume with another --seed is said in one warning.
--part tracker_disk: a tracker that is a directory or a symbolic link to nothing is an error
    naming it (pretrain_gpt and ckpt_tool), never a fresh start; a full disk during a save
    (RLIMIT_FSIZE, so that every write past the limit fails with EFBIG as on a full file system),
    synchronous and --async-save: exit 1 (no SIGSEGV), one error line, no HDF5 error stack, the
    previous checkpoint and the tracker intact; a failed `ckpt_tool export` leaves no temporary file;
    an unreadable tracker, index or shard (read as nobody through setpriv) is an error naming the
    file and the permission, from pretrain_gpt and ckpt_tool.
--part ownership: a second job with the same --save exits 1 naming the lock file and the first
    job's PID, while the first trains on; the lock of a SIGKILLed job is reported as stale (its
    PID) and taken over, and a clean exit removes it; a fresh start into a directory holding another
    run's checkpoints (or --load of it with its tracker deleted) is refused naming
    --allow-other-run-checkpoints, and allowed with it; --finetune with --save equal to --load never
    replaces or prunes the checkpoint it loaded."""

import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from checkpoint_test import Checks, Runner, error_lines, iteration_dir, loaded_iteration, losses, same_losses, \
    tracker  # noqa: E402

BASE = ("--device cpu --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
        "--max-position-embeddings 32 --vocab-size 512 --micro-batch-size 1 --global-batch-size 4 --lr 1e-3 "
        "--log-interval 1 --eval-iters 0 --lr-decay-iters 8").split()
# Jobs that resume with another --train-iters keep the schedule (--lr-decay-iters fixed): a resume
# whose learning-rate schedule differs from the checkpoint's is refused (Megatron's rule).
ITERS = 8


def job(extra, iters=ITERS):
    return BASE + ["--train-iters", str(iters)] + extra


def tool(ckpt_tool, *args):
    run = subprocess.run([ckpt_tool] + list(args), capture_output=True, text=True, timeout=120)
    return run.returncode, run.stdout, run.stderr


def refused(checks, label, status, out, err, expected):
    """Exit 1, exactly one error line, holding every string of `expected`, and no training."""
    errors = error_lines(out, err)
    ok = checks.expect(status == 1 and len(errors) == 1 and all(e in errors[0] for e in expected) and not losses(out),
                       f"{label}: exit {status}, errors {errors}, expected one line with {expected}")
    print(f"  {label}: exit {status}: {errors[0] if errors else '(no error line)'}")
    return ok


# ------------------------------------------------------------------------------------------------
# --part integrity


def edit_index(path, edit):
    with h5py.File(path, "r+") as index:
        edit(index)


def flip_attribute(name):
    def edit(index):
        index.attrs[name] = np.int64(int(index.attrs[name]) ^ 1)
    return edit


def rename_in_text(dataset, old, new):
    def edit(index):
        text = bytes(index[dataset][()])
        changed = text.replace(old.encode(), new.encode(), 1)
        assert changed != text, f"{old} not in {dataset}"
        del index[dataset]
        index[dataset] = np.frombuffer(changed, dtype=np.uint8)
    return edit


def downgrade_to_version_1(index):
    """What the index of a checkpoint saved before whole-checkpoint checksums held."""
    index.attrs["format_version"] = np.int64(1)
    for name in ("save_id", "shard_bytes", "shard_table_checksums", "run_state_checksum", "arguments_checksum",
                 "pieces_checksum"):
        del index.attrs[name]


def part_integrity(runner, checks, work, ckpt_tool):
    status, out, err = runner.run("reference", 1, job([]))
    reference = losses(out)
    if not checks.expect(status == 0 and len(reference) == ITERS, f"reference run exit {status}: {err[-400:]}"):
        return
    ours, theirs = os.path.join(work, "ours"), os.path.join(work, "theirs")
    for d, seed in ((ours, "1234"), (theirs, "99")):
        shutil.rmtree(d, ignore_errors=True)
        status, out, err = runner.run(f"base_{seed}", 1, job(["--save", d, "--save-interval", "2", "--exit-interval",
                                                             "4", "--seed", seed]))
        if not checks.expect(status == 0 and tracker(d) == "4", f"base run {seed}: exit {status}: {err[-400:]}"):
            return
    shard = "shard_00000.h5"
    index4 = lambda d: os.path.join(iteration_dir(d, 4), "index.h5")  # noqa: E731
    cases = [
        ("shard of another run", lambda d: shutil.copy(os.path.join(iteration_dir(theirs, 4), shard), iteration_dir(d, 4)),
         [shard, "belongs to another save"]),
        ("shard of another iteration", lambda d: shutil.copy(os.path.join(iteration_dir(d, 2), shard), iteration_dir(d, 4)),
         [shard, "belongs to another save", "iteration 2"]),
        ("index of another iteration", lambda d: shutil.copy(os.path.join(iteration_dir(d, 2), "index.h5"), index4(d)),
         ["index.h5 records iteration 2 but lies in iter_0000004"]),
        ("iteration bit flipped", lambda d: edit_index(index4(d), flip_attribute("iteration")),
         ["index.h5", "run state", "does not match its checksum"]),
        ("consumed samples bit flipped", lambda d: edit_index(index4(d), flip_attribute("consumed_train_samples")),
         ["index.h5", "run state", "consumed samples 17", "does not match its checksum"]),
        ("optimizer steps bit flipped", lambda d: edit_index(index4(d), flip_attribute("optimizer_steps")),
         ["index.h5", "run state", "optimizer steps 5", "does not match its checksum"]),
        ("piece table name changed", lambda d: edit_index(index4(d), rename_in_text(
            "_pieces", "model/decoder.layers.0.mlp.linear_fc1.weight\t", "model/decoder.layers.0.mlp.linear_fc2.weight\t")),
         ["index.h5", "piece table", "does not match its checksum"]),
        ("saved argument edited", lambda d: edit_index(index4(d), rename_in_text("_arguments", "--seed 1234", "--seed 1235")),
         ["index.h5", "saved arguments", "do not match their checksum"]),
    ]
    print("a checkpoint at 4 (2 committed before it), damaged, then --load:")
    for label, damage, expected in cases:
        d = os.path.join(work, "case_" + label.replace(" ", "_"))
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(ours, d)
        damage(d)
        status, out, err = runner.run(label.replace(" ", "_"), 1, job(["--load", d]))
        refused(checks, label, status, out, err, expected)
        status, out, err = tool(ckpt_tool, "verify", d)
        checks.expect(status == 1 and all(e in err for e in expected) and "OK" not in out,
                      f"{label}: ckpt_tool verify exit {status}: {out} {err}")
        print(f"    ckpt_tool verify: exit {status}: {err.strip()}")
        if label in ("shard of another run", "consumed samples bit flipped"):
            status, out, err = runner.run(label.replace(" ", "_") + "_fallback", 1,
                                          job(["--load", d, "--load-fallback-to-previous"]))
            if checks.expect(status == 0 and loaded_iteration(out) == 2,
                             f"{label} with --load-fallback-to-previous: exit {status}, loaded {loaded_iteration(out)}"):
                same_losses(checks, f"{label} fallback", losses(out), reference, range(3, ITERS + 1))
                print(f"    with --load-fallback-to-previous: loaded 2, losses 3..{ITERS} as the uninterrupted run")
    # The same shard damage under two ranks: one error line, from the rank that read it.
    two = os.path.join(work, "two_ranks")
    shutil.rmtree(two, ignore_errors=True)
    status, out, err = runner.run("two_ranks_base", 2, job(["--save", two, "--save-interval", "2", "--exit-interval", "4",
                                                            "--use-distributed-optimizer"]))
    if checks.expect(status == 0, f"two ranks base: exit {status}: {err[-400:]}"):
        shutil.copy(os.path.join(iteration_dir(two, 2), "shard_00001.h5"), iteration_dir(two, 4))
        status, out, err = runner.run("two_ranks_mixed", 2, job(["--load", two, "--use-distributed-optimizer"]))
        refused(checks, "2 ranks, shard_00001.h5 of iteration 2", status, out, err,
                ["shard_00001.h5", "belongs to another save"])
    # Format version 1: loads with one note and resumes exactly.
    legacy = os.path.join(work, "legacy")
    shutil.rmtree(legacy, ignore_errors=True)
    shutil.copytree(ours, legacy)
    for i in (2, 4):
        edit_index(os.path.join(iteration_dir(legacy, i), "index.h5"), downgrade_to_version_1)
    status, out, err = runner.run("legacy", 1, job(["--load", legacy]))
    notes = [l for l in out.splitlines() if l.startswith("note: checkpoint") and "format version 1" in l]
    if checks.expect(status == 0 and loaded_iteration(out) == 4 and len(notes) == 1,
                     f"legacy: exit {status}, loaded {loaded_iteration(out)}, notes {notes}: {err[-400:]}"):
        same_losses(checks, "legacy resume", losses(out), reference, range(5, ITERS + 1))
        print(f"  format version 1: exit 0, loaded 4, losses 5..{ITERS} as the uninterrupted run; {notes[0]}")
    status, out, err = tool(ckpt_tool, "verify", legacy)
    checks.expect(status == 0 and "format version 1" in out and "OK:" in out, f"legacy verify: {status} {out} {err}")
    # A resume with another seed: allowed, but said once.
    status, out, err = runner.run("other_seed", 1, job(["--load", ours, "--seed", "99"]))
    warned = [l for l in (out + err).splitlines() if "--seed 99 (checkpoint: 1234)" in l]
    checks.expect(status == 0 and loaded_iteration(out) == 4 and len(warned) == 1,
                  f"resume with another seed: exit {status}, warnings {warned}")
    print(f"  resume with --seed 99: exit {status}: {warned[0] if warned else '(no warning)'}")


# ------------------------------------------------------------------------------------------------
# --part tracker_disk


def limit_file_size(limit):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from write(), as ENOSPC on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def part_tracker_disk(runner, checks, work, ckpt_tool):
    base = os.path.join(work, "base")
    shutil.rmtree(base, ignore_errors=True)
    status, out, err = runner.run("base", 1, job(["--save", base, "--save-interval", "2", "--exit-interval", "4"]))
    if not checks.expect(status == 0 and tracker(base) == "4", f"base run: exit {status}: {err[-400:]}"):
        return
    print("an unreadable tracker:")
    for kind in ("directory", "dangling symlink"):
        d = os.path.join(work, "tracker_" + kind.replace(" ", "_"))
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
        path = os.path.join(d, "latest_checkpointed_iteration.txt")
        os.remove(path)
        if kind == "directory":
            os.mkdir(path)
        else:
            os.symlink(os.path.join(d, "nowhere"), path)
        status, out, err = runner.run("tracker_" + kind.replace(" ", "_"), 1, job(["--load", d, "--save", d]))
        refused(checks, f"tracker is a {kind}", status, out, err, [path])
        checks.expect(sorted(n for n in os.listdir(d) if n.startswith("iter_")) == ["iter_0000002", "iter_0000004"],
                      f"tracker is a {kind}: the save directory changed: {os.listdir(d)}")
        status, out, err = tool(ckpt_tool, "inspect", d)
        checks.expect(status == 1 and path in err, f"tracker is a {kind}: ckpt_tool inspect exit {status}: {err}")
        print(f"    ckpt_tool inspect: exit {status}: {err.strip()}")
    # Unreadable files, read as an unprivileged user (root reads anything): an error naming the
    # file and the permission, never "missing" and never a fresh start.
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        print("unreadable files: SKIPPED (needs root and setpriv to run as nobody)")
    else:
        as_nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        print("unreadable files (read as nobody):")
        for name in ("latest_checkpointed_iteration.txt", "iter_0000004/index.h5", "iter_0000004/shard_00000.h5"):
            d = os.path.join(work, "unreadable_" + name.replace("/", "_"))
            shutil.rmtree(d, ignore_errors=True)
            shutil.copytree(base, d)
            os.chmod(work, 0o755)
            for root, dirs, files in os.walk(d):
                os.chmod(root, 0o755)
                for f in files:
                    os.chmod(os.path.join(root, f), 0o644)
            path = os.path.join(d, name)
            os.chmod(path, 0)
            run = subprocess.run(as_nobody + runner.command(1, job(["--load", d])), capture_output=True, text=True,
                                 timeout=120, cwd="/")
            errors = error_lines(run.stdout, run.stderr)
            checks.expect(run.returncode == 1 and len(errors) == 1 and path in errors[0] and
                          "Permission denied" in errors[0] and not losses(run.stdout),
                          f"unreadable {name}: exit {run.returncode}, errors {errors}")
            print(f"  {name}: exit {run.returncode}: {errors[0] if errors else '(no error line)'}")
            run = subprocess.run(as_nobody + [ckpt_tool, "verify", d], capture_output=True, text=True, timeout=120,
                                 cwd="/")
            checks.expect(run.returncode == 1 and path in run.stderr and "Permission denied" in run.stderr,
                          f"unreadable {name}: ckpt_tool verify exit {run.returncode}: {run.stderr}")
    # A failed export (the output is a directory) leaves no temporary file.
    target = os.path.join(work, "export_target")
    os.makedirs(target, exist_ok=True)
    status, out, err = tool(ckpt_tool, "export", base, "--output", target)
    checks.expect(status == 1 and "cannot rename" in err and not os.path.exists(target + ".tmp"),
                  f"export onto a directory: exit {status}, temporary left {os.path.exists(target + '.tmp')}: {err}")
    print(f"ckpt_tool export --output <a directory>: exit {status}: {err.strip()}; temporary left: "
          f"{os.path.exists(target + '.tmp')}")
    print("a full disk during a save (RLIMIT_FSIZE 600 KiB; the shard needs about 1.5 MiB):")
    for mode in ("sync", "async"):
        d = os.path.join(work, f"full_{mode}")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
        before = {n: open(os.path.join(iteration_dir(d, 4), n), "rb").read() for n in os.listdir(iteration_dir(d, 4))}
        command = runner.command(1, job(["--load", d, "--save", d, "--save-interval", "2"]
                                        + (["--async-save"] if mode == "async" else [])))
        run = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=work,
                             preexec_fn=limit_file_size(600 * 1024))
        errors = error_lines(run.stdout, run.stderr)
        checks.expect(run.returncode == 1 and len(errors) == 1 and "disk full" in errors[0] and
                      "iter_0000006.tmp/shard_00000.h5" in errors[0],
                      f"full disk ({mode}): exit {run.returncode}, errors {errors}")
        checks.expect("HDF5-DIAG" not in run.stderr and len(run.stderr.splitlines()) <= 3,
                      f"full disk ({mode}): stderr has {len(run.stderr.splitlines())} lines: {run.stderr[-800:]}")
        after = {n: open(os.path.join(iteration_dir(d, 4), n), "rb").read() for n in os.listdir(iteration_dir(d, 4))}
        checks.expect(tracker(d) == "4" and after == before and not os.path.exists(iteration_dir(d, 6)),
                      f"full disk ({mode}): tracker {tracker(d)}, iter_0000004 unchanged {after == before}")
        print(f"  {mode}: exit {run.returncode}, {len(run.stderr.splitlines())} stderr lines: "
              f"{errors[0] if errors else '(no error line)'}; tracker {tracker(d)}, iter_0000004 intact")


# ------------------------------------------------------------------------------------------------
# --part ownership


def files_of(directory):
    return {n: open(os.path.join(directory, n), "rb").read() for n in os.listdir(directory)}


def part_ownership(runner, checks, work, ckpt_tool):
    d = os.path.join(work, "shared")
    shutil.rmtree(d, ignore_errors=True)
    status, out, err = runner.run("base", 1, job(["--save", d, "--save-interval", "2", "--exit-interval", "4"]))
    if not checks.expect(status == 0 and tracker(d) == "4", f"base run: exit {status}: {err[-400:]}"):
        return
    lock = os.path.join(d, "pretrain_gpt.lock")
    checks.expect(not os.path.exists(lock), "a clean exit left the lock file")
    print("two jobs with the same --save:")
    log_path = os.path.join(work, "first_job.log")
    with open(log_path, "w") as log:
        first = subprocess.Popen(runner.command(1, job(["--load", d, "--save", d, "--save-interval", "1000"],
                                                       iters=1000000)),
                                 stdout=log, stderr=subprocess.STDOUT, cwd=work, start_new_session=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not (os.path.exists(lock) and "PID" in open(lock).read()):
            time.sleep(0.05)
        status, out, err = runner.run("second_job", 1, job(["--load", d, "--save", d]))
        refused(checks, "second job", status, out, err, [lock, f"PID {first.pid}", "in use by another job"])
        checks.expect(first.poll() is None, f"the first job ended: {open(log_path).read()[-400:]}")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    checks.expect(os.path.exists(lock), "SIGKILL removed the lock file?")
    status, out, err = runner.run("after_sigkill", 1, job(["--load", d, "--save", d], iters=6))
    stale = [l for l in (out + err).splitlines() if "stale lock" in l]
    checks.expect(status == 0 and len(stale) == 1 and f"PID {first.pid}" in stale[0] and lock in stale[0]
                  and not os.path.exists(lock), f"after SIGKILL: exit {status}, {stale}, lock left "
                                                f"{os.path.exists(lock)}: {err[-400:]}")
    print(f"  the next job after a SIGKILL: exit {status}: {stale[0] if stale else '(no stale-lock warning)'}")

    print("a fresh start into a directory holding another run's checkpoints:")
    status, out, err = runner.run("fresh_into_other", 1, job(["--save", d]))
    refused(checks, "fresh start", status, out, err, [f"--save {d} holds checkpoints this run did not load",
                                                      "--allow-other-run-checkpoints"])
    no_tracker = os.path.join(work, "no_tracker")
    shutil.rmtree(no_tracker, ignore_errors=True)
    shutil.copytree(d, no_tracker)
    os.remove(os.path.join(no_tracker, "latest_checkpointed_iteration.txt"))
    status, out, err = runner.run("load_without_tracker", 1, job(["--load", no_tracker, "--save", no_tracker]))
    refused(checks, "--load/--save of a directory whose tracker was deleted", status, out, err,
            ["holds checkpoints this run did not load", "iterations 2, 4, 6"])
    allowed = os.path.join(work, "allowed")
    shutil.rmtree(allowed, ignore_errors=True)
    shutil.copytree(d, allowed)
    status, out, err = runner.run("allowed", 1, job(["--save", allowed, "--allow-other-run-checkpoints"], iters=2))
    checks.expect(status == 0 and tracker(allowed) == "2", f"--allow-other-run-checkpoints: exit {status}, tracker "
                                                          f"{tracker(allowed)}: {err[-300:]}")
    print(f"  with --allow-other-run-checkpoints: exit {status}, tracker {tracker(allowed)}")

    print("--finetune with --save equal to --load (the base checkpoint at 4):")
    base = os.path.join(work, "finetune")
    shutil.rmtree(base, ignore_errors=True)
    status, out, err = runner.run("finetune_base", 1, job(["--save", base, "--save-interval", "2", "--exit-interval",
                                                           "4"]))
    before = files_of(iteration_dir(base, 4))
    status, out, err = runner.run("finetune_same_iteration", 1, job(["--load", base, "--save", base, "--finetune"],
                                                                    iters=4))
    refused(checks, "--finetune to iteration 4", status, out, err, ["--finetune", "iter_0000004",
                                                                    "the checkpoint it finetunes from"])
    status, out, err = runner.run("finetune_pruning", 1, job(["--load", base, "--save", base, "--finetune",
                                                              "--save-interval", "3", "--keep-latest-checkpoints", "1"],
                                                             iters=6))
    left = sorted(n for n in os.listdir(base) if n.startswith("iter_"))
    checks.expect(status == 0 and tracker(base) == "6" and files_of(iteration_dir(base, 4)) == before,
                  f"--finetune with pruning: exit {status}, tracker {tracker(base)}, left {left}: {err[-300:]}")
    print(f"  saves at 3 and 6 with --keep-latest-checkpoints 1: exit {status}, left {left}, iter_0000004 "
          f"{'unchanged' if files_of(iteration_dir(base, 4)) == before else 'CHANGED'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--ckpt-tool", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--part", choices=["integrity", "tracker_disk", "ownership"], required=True)
    options = parser.parse_args()
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    checks = Checks()
    work = os.path.abspath(os.path.join(options.work_dir, options.part))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    runner = Runner(os.path.abspath(options.binary), options.mpirun, work)
    parts = {"integrity": part_integrity, "tracker_disk": part_tracker_disk, "ownership": part_ownership}
    parts[options.part](runner, checks, work, os.path.abspath(options.ckpt_tool))
    return harness.finish(checks.failures)


if __name__ == "__main__":
    sys.exit(main())

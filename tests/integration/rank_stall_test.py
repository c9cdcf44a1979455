#!/usr/bin/python3
"""Issue 33: nothing hangs. A rank stopped with SIGSTOP (GPT_CHECKPOINT_FAULT=<point>:<rank>:stop)
on one of four ranks where the ranks agree outside the training collectives (at start-up, when they compare their
arguments and when a node's ranks compare their GPUs; during a checkpoint load; in a save's
handshake) must end the job within
--distributed-timeout-minutes plus a margin, with a non-zero status and one line naming the
agreement and the rank that did not arrive; when rank 0 (which gathers every agreement) is the one
stopped, the others say that rank 0 did not answer. Before, these agreements called MPI directly
and waited forever."""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# 6 s: short, yet well above how far apart healthy ranks reach an agreement on a loaded machine.
TIMEOUT_MINUTES = 0.1
MARGIN_SECONDS = 30.0
BASE = ("--device cpu --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
        "--max-position-embeddings 32 --vocab-size 512 --micro-batch-size 1 --global-batch-size 4 --lr 1e-3 "
        "--log-interval 1 --eval-iters 0 --use-distributed-optimizer --lr-decay-iters 6").split()
STALLED = ["--distributed-timeout-minutes", str(TIMEOUT_MINUTES)]


def run(command, env=None):
    environment = dict(os.environ)
    environment.update(env or {})
    started = time.time()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
                               start_new_session=True)
    try:
        out, err = process.communicate(timeout=TIMEOUT_MINUTES * 60 + MARGIN_SECONDS + 60)
        status = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        status = None
    return status, out, err, time.time() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    failures = []
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    save = os.path.join(args.work_dir, "checkpoints")
    mpirun = [args.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none", args.binary]
    status, _, err, _ = run(mpirun + BASE + ["--train-iters", "4", "--save", save, "--save-interval", "2"])
    if status != 0:
        return harness.finish([f"base run: exit {status}: {err[-500:]}"])
    job = BASE + STALLED + ["--train-iters", "6", "--load", save, "--save", save, "--save-interval", "5"]
    cases = [
        ("startup", 1, "agreement 'argument digests'", "world ranks [1] did not arrive"),
        ("ranks-per-gpu", 2, "MPI_Iallgather of the GPU keys' lengths on the node's 4 ranks",
         "a rank of this node did not arrive"),
        ("load", 2, "agreement 'checkpoint load status'", "world ranks [2] did not arrive"),
        ("save-handshake", 3, "agreement 'checkpoint save status'", "world ranks [3] did not arrive"),
        ("load", 0, "agreement 'checkpoint load status'", "world rank 0, which gathers it, did not answer"),
    ]
    for point, rank, agreement, who in cases:
        status, out, err, seconds = run(mpirun + job, env={"GPT_CHECKPOINT_FAULT": f"{point}:{rank}:stop"})
        lines = [l for l in err.splitlines() if "timed out" in l]
        label = f"rank {rank} stopped at {point}"
        if status is None or seconds > TIMEOUT_MINUTES * 60 + MARGIN_SECONDS:
            failures.append(f"{label}: the job did not end within the timeout + {MARGIN_SECONDS:.0f} s "
                            f"({seconds:.1f} s, exit {status})")
        elif status == 0:
            failures.append(f"{label}: exit 0")
        if f"GPT_CHECKPOINT_FAULT: rank {rank} stopped at {point}" not in err:
            failures.append(f"{label}: the fault did not fire: {err[-400:]}")
        if len(lines) != 1 or agreement not in lines[0] or who not in lines[0]:
            failures.append(f"{label}: expected one timeout line with {agreement!r} and {who!r}: {lines}")
        print(f"{label}: exit {status} after {seconds:.1f} s: {lines[0] if lines else '(no timeout line)'}")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

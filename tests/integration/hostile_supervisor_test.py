#!/usr/bin/python3
"""Issue 44, classes 4 and 5: the restart supervisor and the job's start-up, as a hostile but
realistic user meets them.

  * scripts/elastic_run.py's options: every bad value (negative, zero or NaN waits, negative
    restarts, a missing launcher or program, an unsplittable --mpirun-args, unknown options, ...) is one
    `elastic: error:` line on stderr with exit status 2, never a Python traceback, nothing started
  * the orphan test: the supervisor gives up on a job whose rank hangs in an iteration while the other
    holds the --save directory's lock (ranks under --exit-signal-handler, which outlive SIGTERM until
    their iteration ends); afterwards no process of the job is left and the lock is free (another job
    takes the directory)
  * bounded start-up: a rank stopped (SIGSTOP) or killed before MPI_Init completes; the job ends within
    --distributed-timeout-minutes (3 s here), with one line naming the start-up phase, exit non-zero
"""

import argparse
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SUPERVISOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "elastic_run.py")
TINY = ("--device cpu --mock-data --vocab-size 512 --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
        "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 1 --global-batch-size 4 "
        "--lr 1e-3 --log-interval 1 --eval-iters 0").split()
TAG = f"hostile_supervisor_{os.getpid()}"


def job_processes():
    """PIDs of this test's job processes (mpirun and ranks carry TAG in their environment)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as env_file:
                env = env_file.read()
            with open(f"/proc/{entry}/stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"HOSTILE_TAG={TAG}".encode() in env.split(b"\0") and state != "Z":
            found.append(int(entry))
    return found


def kill_left(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def lock_is_free(save):
    """Whether a process could take the --save directory's lock now (pretrain_gpt's fcntl lock)."""
    path = os.path.join(save, "pretrain_gpt.lock")
    if not os.path.exists(path):
        return True
    with open(path, "r+") as lock_file:
        try:
            fcntl.lockf(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        fcntl.lockf(lock_file, fcntl.LOCK_UN)
    return True


def bad_options(options, work, failures):
    """(label, supervisor options, job, text the one error line must contain)."""
    save = os.path.join(work, "bad_options")
    job = [options.binary] + TINY + ["--save", save, "--load", save, "--train-iters", "1"]
    base = ["--nnodes", "1", "--nproc-per-node", "2", "--single-host", "--mpirun", options.mpirun]
    not_executable = os.path.join(work, "not_executable")
    with open(not_executable, "w") as out:
        out.write("#!/bin/sh\n")
    cases = [
        ("kill-wait 0", base + ["--kill-wait", "0"], job, "--kill-wait must be above 0"),
        ("kill-wait -1", base + ["--kill-wait", "-1"], job, "--kill-wait must be above 0"),
        ("kill-wait nan", base + ["--kill-wait", "nan"], job, "--kill-wait 'nan' is not a finite decimal number"),
        ("kill-wait inf", base + ["--kill-wait", "inf"], job, "--kill-wait 'inf'"),
        ("kill-wait 1e400", base + ["--kill-wait", "1e400"], job, "--kill-wait must be above 0 and at most 3600"),
        ("kill-wait empty", base + ["--kill-wait", ""], job, "--kill-wait '' is not"),
        ("kill-wait text", base + ["--kill-wait", "ten"], job, "--kill-wait 'ten'"),
        ("heartbeat nan", base + ["--heartbeat-timeout", "nan"], job, "--heartbeat-timeout 'nan'"),
        ("heartbeat -5", base + ["--heartbeat-timeout", "-5"], job, "--heartbeat-timeout must be from 0 to 604800"),
        ("heartbeat inf", base + ["--heartbeat-timeout", "inf"], job, "--heartbeat-timeout 'inf'"),
        ("heartbeat 1e308", base + ["--heartbeat-timeout", "1e308"], job, "--heartbeat-timeout must be from 0"),
        ("heartbeat 1_0", base + ["--heartbeat-timeout", "1_0"], job, "--heartbeat-timeout '1_0'"),
        ("max-restarts -1", base + ["--max-restarts", "-1"], job, "--max-restarts must be from 0 to 1000000"),
        ("max-restarts 1.5", base + ["--max-restarts", "1.5"], job, "--max-restarts '1.5' is not a decimal integer"),
        ("max-restarts nan", base + ["--max-restarts", "nan"], job, "--max-restarts 'nan'"),
        ("max-restarts huge", base + ["--max-restarts", "99999999999999999999"], job, "--max-restarts must be"),
        ("nproc 0", ["--nnodes", "1", "--nproc-per-node", "0", "--single-host"], job, "--nproc-per-node must be from 1"),
        ("nproc -2", ["--nnodes", "1", "--nproc-per-node", "-2", "--single-host"], job, "--nproc-per-node must be"),
        ("nproc x", ["--nnodes", "1", "--nproc-per-node", "x", "--single-host"], job, "--nproc-per-node 'x'"),
        ("nproc 1e9", ["--nnodes", "1", "--nproc-per-node", "1000000000"], job, "--nproc-per-node must be from 1 to 4096"),
        ("nnodes 0", ["--nnodes", "0", "--nproc-per-node", "2"], job, "the minimum must be at least 1"),
        ("nnodes unicode digit", ["--nnodes", "\u0663", "--nproc-per-node", "2"], job, "is not MIN:MAX"),
        ("nnodes=-1:2", ["--nnodes=-1:2", "--nproc-per-node", "2"], job, "is not MIN:MAX"),
        ("nnodes 2:1", ["--nnodes", "2:1", "--nproc-per-node", "2"], job, "the minimum 2 is above the maximum 1"),
        ("missing mpirun", base + ["--mpirun", os.path.join(work, "no_such_mpirun")], job, "the launcher"),
        ("mpirun not on PATH", base + ["--mpirun", "no-such-mpirun-anywhere"], job, "not found on PATH"),
        ("mpirun not executable", base + ["--mpirun", not_executable], job, "not an executable file"),
        ("missing program", base, [os.path.join(work, "no_such_program")] + job[1:], "the job's program"),
        ("program not executable", base, [not_executable] + job[1:], "not an executable file"),
        ("mpirun-args unbalanced", base + ["--mpirun-args", "--mca 'x"], job, "cannot be split into words"),
        ("empty node-check", base + ["--node-check", " "], job, "--node-check is empty"),
        ("unknown option", base + ["--bogus", "1"], job, "unrecognized arguments: --bogus"),
        ("launcher choice", base + ["--launcher", "ssh"], job, "invalid choice: 'ssh'"),
        ("no --", base, None, "give the job after '--'"),
        ("nothing after --", base, [], "no program after '--'"),
        ("job gbs not decimal", base, job + ["--global-batch-size", "4.0"], "--global-batch-size '4.0' is not an integer"),
        ("job tp 1_0", base, job + ["--tensor-model-parallel-size", "1_0"], "is not an integer"),
    ]
    env = dict(os.environ, HOSTILE_TAG=TAG)
    for label, supervisor_args, job_args, expected in cases:
        command = [sys.executable, SUPERVISOR] + supervisor_args + ([] if job_args is None else ["--"] + job_args)
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=work, timeout=60)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        problems = []
        if result.returncode != 2:
            problems.append(f"exit {result.returncode}")
        if len(lines) != 1 or not lines[0].startswith("elastic: error: ") or expected not in lines[0]:
            problems.append(f"stderr {lines!r}, expected one 'elastic: error:' line with {expected!r}")
        if "Traceback" in result.stderr or "launching" in result.stdout:
            problems.append("a traceback or a launch")
        if problems:
            failures.append(f"supervisor option '{label}': " + "; ".join(problems))
    left = job_processes()
    if left:
        failures.append(f"supervisor options: job processes left {left}")
        kill_left(left)
    print(f"{len(cases)} bad supervisor options refused with one line and exit 2")
    return len(cases)


def hostile_runs(options, work, failures):
    """Inputs the options cannot show: a tracker that is a directory or binary, a launcher that
    refuses its arguments. The supervisor logs them, gives up or finishes; never a traceback."""
    env = dict(os.environ, HOSTILE_TAG=TAG)
    cases = []
    for label in ("tracker directory", "tracker binary"):
        save = os.path.join(work, label.replace(" ", "_"))
        os.makedirs(save)
        tracker = os.path.join(save, "latest_checkpointed_iteration.txt")
        if label == "tracker directory":
            os.makedirs(tracker)
        else:
            with open(tracker, "wb") as out:
                out.write(b"\xff\xfe\x00\x01garbage")
        cases.append((label, ["--max-restarts", "0"], [options.binary] + TINY + ["--save", save, "--load", save,
                                                                                 "--train-iters", "1"]))
    save = os.path.join(work, "bad_mpirun_args")
    cases.append(("mpirun refuses its arguments", ["--max-restarts", "1", "--mpirun-args=--no-such-mpirun-option"],
                  [options.binary] + TINY + ["--save", save, "--load", save, "--train-iters", "1"]))
    for label, extra, job in cases:
        result = subprocess.run([sys.executable, SUPERVISOR, "--nnodes", "1", "--nproc-per-node", "1", "--single-host",
                                 "--mpirun", options.mpirun, "--kill-wait", "1"] + extra + ["--"] + job,
                                capture_output=True, text=True, env=env, cwd=work, timeout=120)
        text = result.stdout + result.stderr
        if "Traceback" in text or result.returncode not in (0, 1) or "attempt 1:" not in result.stdout:
            failures.append(f"supervisor '{label}': exit {result.returncode}: {text[-1200:]}")
        if label == "mpirun refuses its arguments" and ("restart 1 of at most 1" not in result.stdout
                                                        or result.returncode != 1):
            failures.append(f"supervisor '{label}': expected one restart and giving up: {text[-800:]}")
        left = job_processes()
        if left:
            failures.append(f"supervisor '{label}': job processes left {left}")
            kill_left(left)
        print(f"supervisor '{label}': exit {result.returncode}; "
              f"{[line for line in result.stdout.splitlines() if 'attempt 1' in line][:1]}")
    return len(cases)


def orphans(options, work, failures):
    """The supervisor gives up (--max-restarts 0) on a job whose rank 1 sleeps in its first iteration
    (GPT_INJECT_DELAY) while rank 0 holds the --save lock and waits for it. The ranks catch SIGTERM
    (--exit-signal-handler: they save at the end of the iteration, which rank 1 does not reach), so only
    the supervisor's SIGKILL to each rank ends them; Open MPI gives each rank a process group of its own,
    which a signal to mpirun's group does not reach."""
    save = os.path.join(work, "orphans")
    job = [options.binary] + TINY + ["--save", save, "--load", save, "--train-iters", "50", "--save-interval", "100",
                                     "--exit-signal-handler"]
    env = dict(os.environ, HOSTILE_TAG=TAG, GPT_INJECT_DELAY="600000:1")
    start = time.monotonic()
    result = subprocess.run([sys.executable, SUPERVISOR, "--nnodes", "1", "--nproc-per-node", "2", "--single-host",
                             "--mpirun", options.mpirun, "--heartbeat-timeout", "6", "--kill-wait", "0.5",
                             "--max-restarts", "0", "--"] + job, capture_output=True, text=True, env=env, cwd=work,
                            timeout=120)
    seconds = time.monotonic() - start
    left = job_processes()
    if result.returncode != 1 or "missed heartbeat" not in result.stdout or "giving up" not in result.stdout:
        failures.append(f"orphans: exit {result.returncode}, expected a missed heartbeat and giving up: "
                        f"{result.stdout[-1500:]} {result.stderr[-1500:]}")
    if left:
        failures.append(f"orphans: the supervisor gave up and left job processes running: {left}")
    if not lock_is_free(save):
        failures.append("orphans: the --save directory's lock is still held after the supervisor gave up")
    if "Traceback" in result.stderr:
        failures.append(f"orphans: a traceback: {result.stderr[-1500:]}")
    kill_left(left)
    # The directory is usable at once: the next job takes the lock.
    again = subprocess.run([options.binary] + TINY + ["--save", save, "--train-iters", "1"], capture_output=True,
                           text=True, timeout=120)
    if again.returncode != 0 or "in use by another job" in again.stderr:
        failures.append(f"orphans: the next job on the directory: exit {again.returncode}: {again.stderr[-800:]}")
    print(f"orphans: supervisor gave up after {seconds:.1f} s; job processes left: {len(left)}; "
          f"next job exit {again.returncode}")


def stop_wrapper(work):
    path = os.path.join(work, "stop_before_start.sh")
    with open(path, "w") as out:
        out.write('#!/bin/sh\n'
                  '# Rank $HOSTILE_STOP_RANK stops (or dies) before its program starts, so before MPI_Init.\n'
                  'if [ "$OMPI_COMM_WORLD_RANK" = "$HOSTILE_STOP_RANK" ]; then\n'
                  '  if [ "$HOSTILE_HOW" = kill ]; then kill -KILL $$; else kill -STOP $$; fi\n'
                  'fi\n'
                  'exec "$@"\n')
    os.chmod(path, 0o755)
    return path


def bounded_startup(options, work, failures):
    """A rank that never reaches MPI_Init: the others give up within --distributed-timeout-minutes
    (0.05 = 3 s, and 2 s more per rank before it in rank order), one line naming the start-up phase."""
    wrapper = stop_wrapper(work)
    cases = [("rank 1 stopped, 2 ranks", 2, 1, "stop", "3"), ("rank 0 stopped, 2 ranks", 2, 0, "stop", "3"),
             ("rank 2 stopped, 3 ranks", 3, 2, "stop", "3"), ("rank 0 stopped, 3 ranks", 3, 0, "stop", "3"),
             ("rank 1 killed, 2 ranks", 2, 1, "kill", "3")]
    for label, ranks, stopped, how, _ in cases:
        env = dict(os.environ, HOSTILE_TAG=TAG, HOSTILE_STOP_RANK=str(stopped), HOSTILE_HOW=how)
        command = [options.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none", "-x", "HOSTILE_TAG",
                   "-x", "HOSTILE_STOP_RANK", "-x", "HOSTILE_HOW", wrapper, options.binary] + TINY + [
                       "--train-iters", "1", "--distributed-timeout-minutes", "0.05"]
        start = time.monotonic()
        try:
            result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
        except subprocess.TimeoutExpired:
            failures.append(f"start-up '{label}': still running after 60 s")
            kill_left(job_processes())
            continue
        seconds = time.monotonic() - start
        errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
        problems = []
        if result.returncode == 0:
            problems.append("exit 0")
        if how == "stop":
            if len(errors) != 1 or "start-up timed out" not in errors[0] or "MPI_Init" not in errors[0]:
                problems.append(f"errors {errors!r}, expected one 'start-up timed out ... MPI_Init' line")
            if seconds > 20:
                problems.append(f"took {seconds:.1f} s (3 s timeout)")
        elif seconds > 20:  # a rank that dies: the launcher ends the job at once
            problems.append(f"took {seconds:.1f} s")
        if "iteration" in result.stdout:
            problems.append("it trained")
        left = job_processes()
        if left:
            problems.append(f"processes left {left}")
            kill_left(left)
        if problems:
            failures.append(f"start-up '{label}': " + "; ".join(problems))
        print(f"start-up '{label}': exit {result.returncode} after {seconds:.1f} s: {errors[:1]}")
    # The timeout read before MPI_Init is the flag's, in either spelling; a bad value keeps the
    # default and is refused by the parser once MPI is up (one line, no wait).
    env = dict(os.environ, HOSTILE_TAG=TAG, HOSTILE_STOP_RANK="1", HOSTILE_HOW="stop")
    start = time.monotonic()
    result = subprocess.run([options.mpirun, "-np", "2", "--oversubscribe", "-x", "HOSTILE_TAG", "-x",
                             "HOSTILE_STOP_RANK", "-x", "HOSTILE_HOW", wrapper, options.binary] + TINY +
                            ["--train-iters", "1", "--distributed-timeout-minutes=0.02"], capture_output=True,
                            text=True, env=env, timeout=60)
    seconds = time.monotonic() - start
    if result.returncode == 0 or "after 1.2 s" not in result.stderr or seconds > 15:
        failures.append(f"start-up '--distributed-timeout-minutes=0.02': exit {result.returncode} after "
                        f"{seconds:.1f} s: {result.stderr[-600:]}")
    kill_left(job_processes())
    result = subprocess.run([options.mpirun, "-np", "2", "--oversubscribe", options.binary] + TINY +
                            ["--train-iters", "1", "--distributed-timeout-minutes", "nan"], capture_output=True,
                            text=True, timeout=60)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    if result.returncode == 0 or len(errors) != 1 or "--distributed-timeout-minutes" not in errors[0]:
        failures.append(f"start-up '--distributed-timeout-minutes nan': exit {result.returncode}, errors {errors}")
    print(f"start-up: '--distributed-timeout-minutes=0.02' ended after {seconds:.1f} s; nan refused: {errors[:1]}")
    return len(cases) + 2


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--only", help="one of: options, runs, orphans, startup")
    options = parser.parse_args()
    work = os.path.abspath(options.work_dir)
    options.binary, options.mpirun = os.path.abspath(options.binary), shutil.which(options.mpirun) or options.mpirun
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    failures = []
    if options.only in (None, "options"):
        bad_options(options, work, failures)
    if options.only in (None, "runs"):
        hostile_runs(options, work, failures)
    if options.only in (None, "orphans"):
        orphans(options, work, failures)
    if options.only in (None, "startup"):
        bounded_startup(options, work, failures)
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""pretrain_gpt under a real Slurm (slurmctld, slurmd and munged started by tests/integration/
slurm_cluster.py on this machine), through the example batch script examples/slurm/pretrain_gpt.sbatch
(docs/SLURM.md).

--part srun: on two fake nodes, `srun --mpi=pmix -N2 --ntasks-per-node=2 pretrain_gpt` (TP2 x DP2) and
    `mpirun` inside `sbatch -N2` (where every rank inherits SLURM_PROCID=0) both train with the
    losses of `mpirun -np 4` outside Slurm: rank and size come from MPI.
--part timelimit: the batch script with --time=1 --signal=B:USR1@45 --requeue: the first run (slowed
    by GPT_INJECT_DELAY) gets SIGUSR1 before its time limit, saves, requeues itself; the rerun loads
    that checkpoint and completes. Every iteration printed by either run equals the uninterrupted
    run's loss; the job ends COMPLETED after one restart.
--part preempt: the same job in the low-priority partition (GraceTime 5 s) is preempted by a job
    that needs the whole node in the high one: its ranks get SIGTERM, save, the job is requeued and
    completes with the uninterrupted losses once the high job is done.
--part early-signal: the job is signalled (scancel --batch --signal=USR1, Slurm's time-limit signal
    without the wait) mid-run, again as soon as the rerun's training step exists (its first second:
    the step may die before pretrain_gpt starts; the script requeues it), and again 0.2 s after the
    third run's pretrain_gpt processes started (they save on it): the job still completes with the
    uninterrupted losses.

--part elastic: scripts/elastic_run.py in `sbatch --no-kill -N2` (DP=4 on two fake nodes); n2 is set
    DOWN after a checkpoint; the supervisor relaunches on n1 at DP=2 and the job completes with the
    uninterrupted DP=4 losses.

Each part prints the job's timeline. Skips (exit 0, saying why) only when Slurm is not installed."""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from slurm_cluster import SlurmCluster  # noqa: E402

SOURCE = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BATCH_SCRIPT = os.path.join(SOURCE, "examples", "slurm", "pretrain_gpt.sbatch")
MODEL = ("--device cpu --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
         "--max-position-embeddings 32 --vocab-size 512 --micro-batch-size 1 --global-batch-size 8 --lr 1e-3 "
         "--log-interval 1 --eval-iters 0").split()
# Searched anywhere in a line: under mpirun another rank's output may share the logging rank's line.
LOSS = re.compile(r" \[[^\]]*\] iteration +(\d+)/ +\d+ \|.*\| lm loss: (\S+) \|")
TIMELINE = re.compile(r"^(\[sbatch .*|.*saving checkpoint at iteration.*|.*successfully loaded checkpoint.*|"
                      r"exiting program after.*|.*CANCELLED AT.*|.*DUE TO PREEMPTION.*)$")
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY")


def losses(text):
    return [(int(m.group(1)), float(m.group(2))) for m in map(LOSS.search, text.splitlines()) if m]


def compare(failures, label, reference, got):
    if not got:
        failures.append(f"{label}: no iteration printed")
    for iteration, loss in got:
        expected = reference.get(iteration)
        if expected is None or abs(loss - expected) > 1e-5 * abs(expected):
            failures.append(f"{label}: iteration {iteration}: loss {loss} != uninterrupted {expected}")


def reference_losses(options, ranks, extra, iterations):
    run = subprocess.run([options.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none", options.binary]
                         + MODEL + extra + ["--train-iters", str(iterations)], capture_output=True, text=True,
                         timeout=300)
    result = dict(losses(run.stdout))
    if run.returncode != 0 or len(result) != iterations:
        raise RuntimeError(f"the uninterrupted run failed: {run.stderr[-2000:]}")
    return result


def wrapper(work_dir, delay_first_run_ms):
    """pretrain_gpt, slowed by GPT_INJECT_DELAY on the job's first run only (SLURM_RESTART_COUNT is set
    from the first requeue on), so that the first run is still training when its signal comes."""
    path = os.path.join(work_dir, "pretrain_gpt_wrapper.sh")
    with open(path, "w") as out:
        out.write("#!/bin/bash\n"
                  f'if [ -z "${{SLURM_RESTART_COUNT:-}}" ]; then export GPT_INJECT_DELAY={delay_first_run_ms}; fi\n'
                  'exec "$PRETRAIN_GPT_BINARY" "$@"\n')
    os.chmod(path, 0o755)
    return path


class BatchJob:
    """examples/slurm/pretrain_gpt.sbatch submitted with the test's options."""

    def __init__(self, cluster, options, work_dir, sbatch_options, iterations, delay_ms):
        self.cluster = cluster
        self.output = os.path.join(work_dir, "job.out")
        self.checkpoints = os.path.join(work_dir, "checkpoints")
        env = dict(cluster.env, CHECKPOINT_DIR=self.checkpoints, LAYOUT="", PRETRAIN_GPT=wrapper(work_dir, delay_ms),
                   PRETRAIN_GPT_BINARY=options.binary)
        self.started = time.monotonic()
        result = cluster.run(["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", f"--output={self.output}",
                              f"--chdir={work_dir}"] + sbatch_options + [BATCH_SCRIPT] + MODEL +
                             ["--train-iters", str(iterations)], env=env)
        if result.returncode != 0:
            raise RuntimeError(f"sbatch failed: {result.stderr}")
        self.id = result.stdout.strip().split(";")[0]

    def text(self):
        return open(self.output).read() if os.path.exists(self.output) else ""

    def wait_for(self, predicate, timeout=180):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.1)
        return False

    def finish(self, timeout=240):
        """Waits for the job to end; returns (state, restarts)."""
        state = (None, None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.cluster.job_state(self.id)
            if state[0] in FINAL:
                return state
            time.sleep(0.5)
        return state

    def timeline(self):
        lines = [line for line in self.text().splitlines() if TIMELINE.match(line)]
        return "\n".join("    " + line.strip()[:150] for line in lines)


def run_part(failures, label, job, reference, iterations, minimum_runs):
    state, restarts = job.finish()
    elapsed = time.monotonic() - job.started
    text = job.text()
    print(f"{label}: job {job.id} ended {state} after {restarts} restart(s), {elapsed:.1f} s; timeline:")
    print(job.timeline())
    if state != "COMPLETED":
        failures.append(f"{label}: the job ended {state}")
    runs = len(re.findall(r"^\[sbatch [^\]]*\] job \d+ run \d+: start", text, re.M))
    if runs < minimum_runs:
        failures.append(f"{label}: {runs} run(s) of the batch script, expected at least {minimum_runs}")
    got = losses(text)
    compare(failures, label, reference, got)
    if not got or got[-1][0] != iterations:
        failures.append(f"{label}: the last iteration printed is {got[-1][0] if got else None}, not {iterations}")
    return text


def part_srun(options, work_dir, failures):
    reference = reference_losses(options, 4, ["--tensor-model-parallel-size", "2"], 6)
    with SlurmCluster(os.path.join(work_dir, "cluster"), nodes=2, cpus_per_node=4) as cluster:
        args = [options.binary] + MODEL + ["--tensor-model-parallel-size", "2", "--train-iters", "6"]
        srun = cluster.run(["srun", "--mpi=pmix", "-N2", "--ntasks-per-node=2"] + args, timeout=300)
        got = losses(srun.stdout)
        if srun.returncode != 0 or "process grid: world 4 = TP 2 x PP 1 x DP 2" not in srun.stdout:
            failures.append(f"srun: exit {srun.returncode}, world size line missing: {srun.stderr[-1500:]}")
        compare(failures, "srun --mpi=pmix -N2", reference, got)
        print(f"srun --mpi=pmix -N2 --ntasks-per-node=2: exit {srun.returncode}, {len(got)} iterations equal to mpirun's")
        script = os.path.join(work_dir, "mpirun_inside.sh")
        with open(script, "w") as out:
            out.write("#!/bin/bash\necho SLURM_PROCID=$SLURM_PROCID\nmpirun --bind-to none " +
                      " ".join(args) + "\n")
        batch = cluster.run(["sbatch", "--wait", "-N2", "--ntasks-per-node=2", f"--output={work_dir}/mpirun.out",
                             script], timeout=300)
        text = open(f"{work_dir}/mpirun.out").read() if os.path.exists(f"{work_dir}/mpirun.out") else ""
        got = losses(text)
        if batch.returncode != 0 or "process grid: world 4 = TP 2 x PP 1 x DP 2" not in text or "SLURM_PROCID=0" not in text:
            failures.append(f"mpirun inside sbatch: exit {batch.returncode}: {text[-1500:]}")
        compare(failures, "mpirun inside sbatch -N2", reference, got)
        print(f"mpirun inside sbatch -N2 (SLURM_PROCID=0 inherited): exit {batch.returncode}, {len(got)} iterations "
              "equal to mpirun's outside Slurm")


def part_timelimit(options, work_dir, failures):
    iterations = 100
    reference = reference_losses(options, 2, [], iterations)
    with SlurmCluster(os.path.join(work_dir, "cluster")) as cluster:
        # 100 iterations of >= 0.5 s: longer than the minute, so the signal (45 s before the limit,
        # Slurm checks about every 30 s) comes while it trains.
        job = BatchJob(cluster, options, work_dir, ["--time=1", "--signal=B:USR1@45", "--requeue",
                                                    "--open-mode=append"], iterations, 500)
        text = run_part(failures, "time limit", job, reference, iterations, 2)
        if "got SIGUSR1" not in text or "exiting program after receiving SIGTERM" not in text:
            failures.append("time limit: the first run was not signalled and saved on the signal")


def part_preempt(options, work_dir, failures):
    iterations = 60
    reference = reference_losses(options, 2, [], iterations)
    with SlurmCluster(os.path.join(work_dir, "cluster"), grace_time=5) as cluster:
        job = BatchJob(cluster, options, work_dir, ["--partition=low", "--requeue", "--open-mode=append"],
                       iterations, 300)
        if not job.wait_for(lambda: len(losses(job.text())) >= 5):
            failures.append("preempt: the low-priority job did not start training")
        high = cluster.run(["sbatch", "--parsable", "--partition=high", "-n", str(cluster.cpus),
                            f"--output={work_dir}/high.out", "--wrap", "sleep 2"])
        print(f"preempt: high-priority job {high.stdout.strip()} submitted after iteration "
              f"{losses(job.text())[-1][0]} of the low one")
        text = run_part(failures, "preempt", job, reference, iterations, 2)
        if "exiting program after receiving SIGTERM" not in text:
            failures.append("preempt: the preempted run did not save on SIGTERM")


def part_early_signal(options, work_dir, failures):
    iterations = 60
    reference = reference_losses(options, 2, [], iterations)
    with SlurmCluster(os.path.join(work_dir, "cluster")) as cluster:
        job = BatchJob(cluster, options, work_dir, ["--requeue", "--open-mode=append"], iterations, 300)
        if not job.wait_for(lambda: len(losses(job.text())) >= 5):
            failures.append("early signal: the job did not start training")
        cluster.run(["scancel", "--batch", "--signal=USR1", job.id])

        def rerun_step_exists():
            if "run 2: start" not in job.text():
                return False
            steps = cluster.run(["squeue", "-h", "-s", "-j", job.id, "-o", "%i"]).stdout.split()
            return any(re.fullmatch(r"\d+\.\d+", step) for step in steps)  # the training step, not N.batch

        if not job.wait_for(rerun_step_exists):
            failures.append("early signal: the rerun's training step never appeared")
        signalled = time.monotonic()
        cluster.run(["scancel", "--batch", "--signal=USR1", job.id])
        print(f"early signal: the rerun signalled {signalled - job.started:.1f} s after submission, as soon as its "
              "step existed")
        # Run 3: signalled 0.2 s after its pretrain_gpt processes started (their SIGTERM handler is
        # installed before MPI starts): they load, train an iteration, save and exit 0.
        if not job.wait_for(lambda: len(training_processes(job.id, "2")) == 2):
            failures.append("early signal: run 3's training processes never appeared")
        time.sleep(0.2)
        cluster.run(["scancel", "--batch", "--signal=USR1", job.id])
        text = run_part(failures, "early signal", job, reference, iterations, 4)
        if text.count("exiting program after receiving SIGTERM") < 2:
            failures.append("early signal: run 3, signalled 0.2 s after its processes started, did not save on it")


def training_processes(job, restart_count):
    """PIDs of pretrain_gpt processes of Slurm job `job` in its run with SLURM_RESTART_COUNT `restart_count`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if not os.path.basename(os.readlink(f"/proc/{entry}/exe")).startswith("pretrain_gpt"):
                continue
            with open(f"/proc/{entry}/environ", "rb") as env_file:
                env = dict(item.split(b"=", 1) for item in env_file.read().split(b"\0") if b"=" in item)
        except (OSError, ValueError):
            continue
        if env.get(b"SLURM_JOB_ID") == job.encode() and env.get(b"SLURM_RESTART_COUNT") == restart_count.encode():
            found.append(int(entry))
    return found


def part_elastic(options, work_dir, failures):
    """scripts/elastic_run.py inside `sbatch --no-kill -N2`: n2 is set DOWN after a checkpoint; the job
    loses it, and the supervisor relaunches on n1 (DP=2) from the checkpoint."""
    iterations = 30
    reference = reference_losses(options, 4, [], iterations)
    supervisor = os.path.join(SOURCE, "scripts", "elastic_run.py")
    checkpoints = os.path.join(work_dir, "checkpoints")
    script = os.path.join(work_dir, "elastic.sbatch")
    with open(script, "w") as out:
        out.write("#!/bin/bash\nexec /usr/bin/python3 " + " ".join(
            [supervisor, "--nnodes", "1:2", "--nproc-per-node", "2", "--max-restarts", "2", "--", options.binary] +
            MODEL + ["--train-iters", str(iterations), "--save", checkpoints, "--load", checkpoints,
                     "--save-interval", "5"]) + "\n")
    output = os.path.join(work_dir, "elastic.out")
    with SlurmCluster(os.path.join(work_dir, "cluster"), nodes=2, cpus_per_node=4) as cluster:
        env = dict(cluster.env, GPT_INJECT_DELAY="100")  # every rank: the job outlasts the test's steps
        submitted = cluster.run(["sbatch", "--parsable", "--no-kill", "-N2", "--ntasks-per-node=2",
                                 f"--output={output}", script], env=env)
        job = submitted.stdout.strip()
        started = time.monotonic()

        def checkpointed():
            path = os.path.join(checkpoints, "latest_checkpointed_iteration.txt")
            return os.path.exists(path) and int(open(path).read()) >= 5

        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not checkpointed():
            time.sleep(0.1)
        lost_at = time.monotonic()
        cluster.run(["scontrol", "update", "nodename=n2", "state=down", "reason=lost in the elastic test"])
        state = (None, None)
        while time.monotonic() < deadline:
            state = cluster.job_state(job)
            if state[0] in FINAL:
                break
            time.sleep(0.5)
        cluster.run(["scontrol", "update", "nodename=n2", "state=resume"])
    text = open(output).read() if os.path.exists(output) else ""
    attempts = re.findall(r"elastic: attempt (\d+): \d+ node\(s\) (\S+): \d+ ranks = TP 1 x PP 1 x DP (\d+)", text)
    print(f"elastic under Slurm: job {job} {state[0]} after {time.monotonic() - started:.1f} s; n2 set DOWN "
          f"{lost_at - started:.1f} s after submission; attempts {attempts}")
    for line in re.findall(r"^elastic: (?:node|attempt \d+ ended|recovered).*$", text, re.M):
        print("    " + line)
    if state[0] != "COMPLETED" or attempts[:2] != [("1", "n1,n2", "4"), ("2", "n1", "2")]:
        failures.append(f"elastic under Slurm: {state[0]}, attempts {attempts} (expected DP 4 on n1,n2 then DP 2 on n1)")
    if "node n2 is not healthy" not in text:
        failures.append("elastic under Slurm: n2's loss was not reported")
    got = losses(text)
    compare(failures, "elastic under Slurm", reference, got)
    if not got or got[-1][0] != iterations:
        failures.append(f"elastic under Slurm: the last iteration is {got[-1][0] if got else None}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--part", required=True, choices=["srun", "timelimit", "preempt", "early-signal", "elastic"])
    options = parser.parse_args()
    missing = SlurmCluster.unavailable()
    if missing:
        print(f"SKIPPED: {missing}")
        return 0
    options.binary = os.path.abspath(options.binary)
    work_dir = os.path.abspath(os.path.join(options.work_dir, options.part))
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(work_dir)
    failures = []
    {"srun": part_srun, "timelimit": part_timelimit, "preempt": part_preempt,
     "early-signal": part_early_signal, "elastic": part_elastic}[options.part](options, work_dir, failures)
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

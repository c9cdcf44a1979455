#!/usr/bin/python3
"""The restart on the nodes left (scripts/elastic_run.py, docs/ELASTIC.md), under mpirun on one host
with two labelled rank groups as nodes n1 and n2 (2 ranks each).

1. Node loss and growth: a DP=4 job (2 nodes x 2 ranks) saves every 5 iterations; once it has
   committed a checkpoint the test marks n2 down (the supervisor's --node-check) and SIGKILLs n2's two
   ranks. The supervisor relaunches from the latest checkpoint on n1 alone: DP=2 with twice the
   gradient accumulation. Once that run has committed a newer checkpoint the test brings n2 back and
   SIGKILLs one of n1's ranks; the next restart grows back to DP=4. Every iteration printed by any
   attempt equals the uninterrupted DP=4 run's loss to 1e-5 (relative), and the job completes.
2. A missed heartbeat: a rank stopped with SIGSTOP hangs the job; the supervisor stops it after
   --heartbeat-timeout and relaunches; the run completes with the uninterrupted losses.
3. SIGTERM to the supervisor reaches the job, which saves and exits 0; no restart.
4. Bad input: contradictory --nnodes, fewer ranks than TP x PP, --load not --save, no --save, a global
   batch no node count can divide, too few healthy nodes at a restart, a --save directory a node
   does not see: one `elastic: error:` line, a non-zero exit, no training process left."""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SUPERVISOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "elastic_run.py")
MODEL = ("--device cpu --mock-data --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 64 "
         "--max-position-embeddings 64 --vocab-size 512 --micro-batch-size 1 --global-batch-size 8 --lr 1e-3 "
         "--log-interval 1 --eval-iters 0 --train-iters 40").split()
# Searched anywhere in a line: under mpirun another rank's output may share the logging rank's line.
LOSS = re.compile(r" \[[^\]]*\] iteration +(\d+)/ +\d+ \|.*\| lm loss: (\S+) \|")
TRACKER = "latest_checkpointed_iteration.txt"
TAG = f"elastic_test_{os.getpid()}"


def losses(text):
    """[(iteration, loss)] in the order printed (iterations repeat after a restart)."""
    return [(int(m.group(1)), float(m.group(2))) for m in map(LOSS.search, text.splitlines()) if m]


def training_ranks():
    """{world rank: pid} of this test's pretrain_gpt ranks (their environment carries TAG)."""
    ranks = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as env_file:
                env = dict(item.split(b"=", 1) for item in env_file.read().split(b"\0") if b"=" in item)
            with open(f"/proc/{entry}/stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError):
            continue
        if env.get(b"ELASTIC_TEST_TAG") == TAG.encode() and b"OMPI_COMM_WORLD_RANK" in env and state != "Z":
            if os.path.basename(os.readlink(f"/proc/{entry}/exe")).startswith("pretrain_gpt"):
                ranks[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(entry)
    return ranks


def tracker(directory):
    path = os.path.join(directory, TRACKER)
    return int(open(path).read()) if os.path.exists(path) else 0


class Supervised:
    """The supervisor running in the background, its output collected line by line."""

    def __init__(self, args, work_dir, label):
        env = dict(os.environ, ELASTIC_TEST_TAG=TAG)
        self.log_path = os.path.join(work_dir, f"{label}.log")
        self.process = subprocess.Popen([sys.executable, SUPERVISOR] + args, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=env, cwd=work_dir,
                                        start_new_session=True)
        self.lines = []
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for line in self.process.stdout:
            self.lines.append(line)

    def text(self):
        return "".join(self.lines)

    def wait_for(self, predicate, timeout=240):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            if self.process.poll() is not None:
                return predicate()
            time.sleep(0.01)
        return False

    def finish(self, timeout=300):
        try:
            status = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            status = None
        self.reader.join(timeout=10)
        with open(self.log_path, "w") as log:
            log.write(self.text())
        return status


def compare(failures, label, reference, got):
    """Every (iteration, loss) printed equals the uninterrupted run's to 1e-5 (relative)."""
    worst = 0.0
    for iteration, loss in got:
        if iteration not in reference:
            failures.append(f"{label}: iteration {iteration} is not in the uninterrupted run")
            continue
        difference = abs(loss - reference[iteration]) / abs(reference[iteration])
        worst = max(worst, difference)
        if difference > 1e-5:
            failures.append(f"{label}: iteration {iteration}: loss {loss} != uninterrupted {reference[iteration]}")
    return worst


def node_loss_and_growth(options, work_dir, reference, failures):
    save = os.path.join(work_dir, "node_loss")
    down = os.path.join(work_dir, "down")
    os.makedirs(down)
    job = MODEL + ["--save", save, "--load", save, "--save-interval", "5"]
    supervised = Supervised(["--nnodes", "1:2", "--nproc-per-node", "2", "--nodes", "n1,n2", "--single-host",
                             "--mpirun", options.mpirun, "--node-check", f"test ! -e {down}/{{node}}",
                             "--max-restarts", "3", "--", options.binary] + job, work_dir, "node_loss")
    # 1. After the first committed checkpoint: n2 is lost (marked down, its ranks killed).
    if not supervised.wait_for(lambda: tracker(save) >= 5 and len(training_ranks()) == 4):
        failures.append("node loss: the DP=4 job never committed a checkpoint")
    open(os.path.join(down, "n2"), "w").close()
    ranks = training_ranks()
    for rank in (2, 3):
        if rank in ranks:
            os.kill(ranks[rank], signal.SIGKILL)
    first_checkpoint = tracker(save)
    # 2. The DP=2 run resumes; once it commits a newer checkpoint, n2 returns and one of n1's ranks dies.
    resumed = supervised.wait_for(lambda: "attempt 2:" in supervised.text() and tracker(save) > first_checkpoint
                                  and len(training_ranks()) == 2)
    if not resumed:
        failures.append("node loss: the job did not resume on n1 with a newer checkpoint")
    os.remove(os.path.join(down, "n2"))
    ranks = training_ranks()
    if 1 in ranks:
        os.kill(ranks[1], signal.SIGKILL)
    status = supervised.finish()
    text = supervised.text()
    attempts = re.findall(r"elastic: attempt (\d+): (\d+) node\(s\) (\S+): (\d+) ranks = TP 1 x PP 1 x DP (\d+)", text)
    if [(a[0], a[2], a[4]) for a in attempts] != [("1", "n1,n2", "4"), ("2", "n1", "2"), ("3", "n1,n2", "4")]:
        failures.append(f"node loss: attempts {attempts}, expected DP 4 on n1,n2, DP 2 on n1, DP 4 on n1,n2")
    if "node n2 is not healthy" not in text:
        failures.append("node loss: the supervisor did not report n2 as unhealthy")
    if status != 0:
        failures.append(f"node loss: the supervisor exited {status}")
    got = losses(text)
    worst = compare(failures, "node loss", reference, got)
    if not got or got[-1][0] != 40:
        failures.append("node loss: the job did not reach iteration 40")
    ended = re.findall(r"elastic: attempt (\d+) ended: (.*)", text)
    recoveries = re.findall(r"elastic: (recovered: .*)", text)
    print("node loss: attempts", attempts, "ended", ended, recoveries, f"largest relative difference {worst:.2e}")
    resumes = [int(m) for m in re.findall(r"latest committed checkpoint: iteration (\d+)", text)]
    print(f"node loss: restarts resumed after iterations {resumes}; the first iterations after each "
          "(elastic / uninterrupted DP=4):")
    for iteration, loss in got:
        if any(iteration in (r + 1, r + 2) for r in resumes):
            print(f"  {iteration}: {loss:.6e} / {reference[iteration]:.6e}")


def missed_heartbeat(options, work_dir, reference, failures):
    save = os.path.join(work_dir, "heartbeat")
    job = MODEL + ["--save", save, "--load", save, "--save-interval", "5", "--distributed-timeout-minutes", "10"]
    supervised = Supervised(["--nnodes", "1:1", "--nproc-per-node", "2", "--nodes", "n1", "--single-host",
                             "--mpirun", options.mpirun, "--heartbeat-timeout", "5", "--kill-wait", "2",
                             "--", options.binary] + job, work_dir, "heartbeat")
    if not supervised.wait_for(lambda: tracker(save) >= 5 and len(training_ranks()) == 2):
        failures.append("heartbeat: the job never committed a checkpoint")
    ranks = training_ranks()
    if 1 in ranks:
        os.kill(ranks[1], signal.SIGSTOP)
    status = supervised.finish()
    text = supervised.text()
    if "missed heartbeat" not in text or "attempt 2:" not in text:
        failures.append("heartbeat: the stopped rank was not detected by the missed heartbeat and restarted")
    if status != 0:
        failures.append(f"heartbeat: the supervisor exited {status}")
    compare(failures, "heartbeat", reference, losses(text))
    print("heartbeat:", re.findall(r"elastic: (missed heartbeat.*|attempt \d+ ended: .*)", text))


def supervisor_signalled(options, work_dir, reference, failures):
    """SIGTERM to the supervisor (a time limit, a preemption) goes to the job, which saves under
    --exit-signal-handler; the supervisor exits with it and does not restart."""
    save = os.path.join(work_dir, "signalled")
    job = MODEL + ["--save", save, "--load", save, "--save-interval", "5", "--exit-signal-handler"]
    supervised = Supervised(["--nnodes", "1:1", "--nproc-per-node", "2", "--nodes", "n1", "--single-host",
                             "--mpirun", options.mpirun, "--", options.binary] + job, work_dir, "signalled")
    if not supervised.wait_for(lambda: tracker(save) >= 5):
        failures.append("signalled: the job never committed a checkpoint")
    os.kill(supervised.process.pid, signal.SIGTERM)
    status = supervised.finish()
    text = supervised.text()
    saved = tracker(save)
    if (status != 0 or "exiting program after receiving SIGTERM" not in text or "attempt 2:" in text
            or not 5 <= saved < 40):
        failures.append(f"signalled: exit {status}, checkpoint {saved}; expected a save on SIGTERM, exit 0, no restart")
    compare(failures, "signalled", reference, losses(text))
    print(f"signalled: the supervisor passed SIGTERM on; the job saved iteration {saved} and exited {status}")


def bad_input(options, work_dir, failures):
    save = os.path.join(work_dir, "bad")
    base = ["--nproc-per-node", "2", "--nodes", "n1,n2", "--single-host", "--mpirun", options.mpirun]
    job = [options.binary] + MODEL + ["--save", save, "--load", save]
    cases = [
        ("contradictory bounds", ["--nnodes", "3:2"] + base + ["--"] + job, "minimum 3 is above the maximum 2"),
        ("fewer ranks than TP x PP", ["--nnodes", "1:2"] + base + ["--"] + job +
         ["--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "2"], "needs 8 ranks"),
        ("minimum above the nodes given", ["--nnodes", "3:4"] + base + ["--"] + job, "only 2 are given"),
        ("load is not save", ["--nnodes", "1:2"] + base + ["--"] + job + ["--load", save + "_other"],
         "is not its --save directory"),
        ("no save", ["--nnodes", "1:2"] + base + ["--", options.binary] + MODEL, "has no --save"),
        ("indivisible global batch", ["--nnodes", "2:2"] + base + ["--"] + job + ["--global-batch-size", "6"],
         "global batch 6 is not divisible by micro batch x DP = 1 x 4"),
        ("too few healthy nodes", ["--nnodes", "2:2"] + base + ["--node-check", "test {node} = n1", "--"] + job,
         "only 1 healthy node(s) (n1), fewer than the minimum 2"),
    ]
    for label, args, expected in cases:
        env = dict(os.environ, ELASTIC_TEST_TAG=TAG)
        result = subprocess.run([sys.executable, SUPERVISOR] + args, capture_output=True, text=True, env=env,
                                cwd=work_dir, timeout=60)
        errors = [line for line in (result.stdout + result.stderr).splitlines() if "error:" in line]
        if result.returncode == 0 or len(errors) != 1 or expected not in errors[0]:
            failures.append(f"bad input '{label}': exit {result.returncode}, errors {errors}, expected '{expected}'")
        if training_ranks():
            failures.append(f"bad input '{label}': training processes left running")
        print(f"bad input '{label}': exit {result.returncode}: {errors[0] if errors else '(no error line)'}")
    # A --save directory that a node does not see: srun (a stand-in on PATH answering as Slurm's would
    # when n2's `test -e` fails: that task prints its host name) makes the supervisor refuse.
    fake_bin = os.path.join(work_dir, "fake_bin")
    os.makedirs(fake_bin, exist_ok=True)
    with open(os.path.join(fake_bin, "srun"), "w") as fake:
        fake.write("#!/bin/sh\necho n2\n")
    os.chmod(os.path.join(fake_bin, "srun"), 0o755)
    env = dict(os.environ, ELASTIC_TEST_TAG=TAG, PATH=fake_bin + os.pathsep + os.environ["PATH"])
    result = subprocess.run([sys.executable, SUPERVISOR, "--nnodes", "1:2", "--nproc-per-node", "2", "--nodes", "n1,n2",
                             "--launcher", "srun", "--"] + job, capture_output=True, text=True, env=env, cwd=work_dir,
                            timeout=60)
    errors = [line for line in (result.stdout + result.stderr).splitlines() if "error:" in line]
    if result.returncode != 2 or len(errors) != 1 or "is not shared: a file written there is not visible on n2" not in errors[0]:
        failures.append(f"non-shared --save: exit {result.returncode}, errors {errors}")
    if any(name.startswith(".elastic_shared_check") for name in os.listdir(save)):
        failures.append("non-shared --save: the supervisor left its check file")
    print(f"bad input 'non-shared checkpoint directory': exit {result.returncode}: {errors[0] if errors else ''}")
    # The indivisible count is skipped with its reason when a smaller one works (3 nodes x 1 rank, gbs 4).
    result = subprocess.run([sys.executable, SUPERVISOR, "--nnodes", "1:3", "--nproc-per-node", "1", "--nodes",
                             "n1,n2,n3", "--single-host", "--mpirun", options.mpirun, "--"] + job +
                            ["--global-batch-size", "4", "--train-iters", "2"], capture_output=True, text=True,
                            env=dict(os.environ, ELASTIC_TEST_TAG=TAG), cwd=work_dir, timeout=120)
    if (result.returncode != 0 or "not using more nodes: on 3 node(s) DP would be 3" not in result.stdout
            or "attempt 1: 2 node(s) n1,n2" not in result.stdout):
        failures.append(f"3 nodes, gbs 4: exit {result.returncode}, expected 2 nodes used and 3 refused with the reason")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    options = parser.parse_args()
    work_dir = os.path.abspath(options.work_dir)
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(work_dir)
    failures = []

    reference_run = subprocess.run([options.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none",
                                    options.binary] + MODEL, capture_output=True, text=True, timeout=300)
    reference = dict(losses(reference_run.stdout))
    if reference_run.returncode != 0 or len(reference) != 40:
        print(reference_run.stdout[-3000:], reference_run.stderr[-3000:])
        return harness.finish(["the uninterrupted DP=4 run failed"])

    node_loss_and_growth(options, work_dir, reference, failures)
    missed_heartbeat(options, work_dir, reference, failures)
    supervisor_signalled(options, work_dir, reference, failures)
    bad_input(options, work_dir, failures)
    left = training_ranks()
    if left:
        failures.append(f"training processes left running: {left}")
        for pid in left.values():
            os.kill(pid, signal.SIGKILL)
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

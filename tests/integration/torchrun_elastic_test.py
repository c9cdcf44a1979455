#!/usr/bin/python3
"""torchrun's own agent across two fake nodes on this machine (issue 43): two agents
(python3 -m torch.distributed.run, Debian's python3-torch) meeting through the c10d rendezvous, each
starting 2 workers of pretrain_gpt; rank 0 hosts the key-value store at the MASTER_PORT the agents
chose.

1. Two nodes (--nnodes 2), TP2 x DP2: every lm loss equals mpirun -np 4's, to the printed digit.
2. Elastic (--nnodes 1:2 --max-restarts 3), DP4 over the two agents with a checkpoint every 5
   iterations: once iteration 5's checkpoint is committed, the second node is lost (its agent and
   workers SIGKILLed). The first node's workers end with exit status 1 (their Gloo peers are gone),
   its agent re-rendezvouses alone and restarts them; they resume from the latest committed
   checkpoint at DP=2 (twice the accumulation, the global batch kept), and every loss any attempt
   prints equals the uninterrupted DP=4 run's (1e-5 relative). The recovery time (node lost to the
   first iteration printed after the restart) is printed.
3. A worker killed during a save (after writing its shard of iteration 10): the save is never
   committed, torchrun restarts the workers, they load iteration 5, and the losses equal the
   uninterrupted run's."""

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
import torchrun_launch  # noqa: E402

TINY = ["--device", "cpu", "--mock-data", "--vocab-size", "250", "--num-layers", "2", "--hidden-size", "64",
        "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32", "--seed", "11",
        "--lr", "2e-3", "--min-lr", "2e-4", "--lr-warmup-iters", "3", "--lr-decay-style", "cosine",
        "--clip-grad", "0.5", "--log-interval", "1", "--eval-iters", "0", "--distributed-timeout-minutes", "1"]
LOSS = re.compile(r"iteration +(\d+)/ +\d+ \|.*?\| lm loss: (\S+) \|")
TRACKER = "latest_checkpointed_iteration.txt"


def losses(text):
    """[(iteration, printed loss)] in the order printed (iterations repeat after a restart)."""
    return [(int(m.group(1)), m.group(2)) for m in map(LOSS.search, text.splitlines()) if m]


class Agent:
    """One torchrun agent (a fake node) in its own session, its output collected line by line."""

    def __init__(self, torchrun_flags, program, env):
        self.process = subprocess.Popen(torchrun_launch.command(torchrun_flags, program), stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
        self.lines, self.times = [], []
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for line in self.process.stdout:
            self.lines.append(line)
            self.times.append(time.monotonic())

    def text(self):
        return "".join(self.lines)

    def kill_node(self):
        """SIGKILL to the agent's session: the agent and the workers it started (a lost node)."""
        os.killpg(self.process.pid, signal.SIGKILL)
        for pid in descendants(self.process.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def finish(self, timeout=240):
        try:
            status = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_node()
            status = None
        self.reader.join(timeout=10)
        return status


def descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def two_agents(flags, program, env, node_flags):
    """Starts the rendezvous host's agent, then the other's (the one a test may lose)."""
    first = Agent(node_flags, program, env)
    time.sleep(1.0)  # the first agent binds the rendezvous endpoint: losing the other keeps it
    second = Agent(node_flags, program, env)
    return first, second


def rendezvous_flags(nnodes, port, run_id, extra=()):
    return ["--nnodes", nnodes, "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
            f"127.0.0.1:{port}", "--rdzv-id", run_id] + list(extra)


def two_node_parity(options, failures):
    flags = TINY + ["--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "20",
                    "--tensor-model-parallel-size", "2"]
    mpi = subprocess.run([options.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none", options.binary] + flags,
                         capture_output=True, text=True, timeout=300)
    reference = losses(mpi.stdout)
    env = torchrun_launch.environment()
    nodes = two_agents(flags, [options.binary] + flags, env,
                       rendezvous_flags("2", torchrun_launch.free_port(), "two-nodes"))
    statuses = [node.finish() for node in nodes]
    got = losses("".join(node.text() for node in nodes))
    if statuses != [0, 0]:
        failures.append(f"two nodes: agents exited {statuses}:\n{nodes[0].text()[-2000:]}\n{nodes[1].text()[-2000:]}")
    if len(reference) != 20 or got != reference:
        failures.append(f"two nodes: losses {got[-3:]} differ from mpirun's {reference[-3:]}")
    print(f"two nodes (TP2 x DP2): iteration 20 lm loss {got[-1][1] if got else None}, mpirun "
          f"{reference[-1][1] if reference else None}")


def elastic(options, work_dir, failures):
    save = os.path.join(work_dir, "checkpoints")
    shutil.rmtree(save, ignore_errors=True)
    flags = TINY + ["--micro-batch-size", "1", "--global-batch-size", "8", "--train-iters", "20",
                    "--save", save, "--load", save, "--save-interval", "5"]
    uninterrupted = subprocess.run([options.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none",
                                    options.binary] + TINY + ["--micro-batch-size", "1", "--global-batch-size", "8",
                                                              "--train-iters", "20"],
                                   capture_output=True, text=True, timeout=300)
    reference = {i: float(v) for i, v in losses(uninterrupted.stdout)}
    if uninterrupted.returncode != 0 or len(reference) != 20:
        failures.append(f"elastic: the uninterrupted run failed:\n{uninterrupted.stdout[-2000:]}{uninterrupted.stderr[-2000:]}")
        return
    env = dict(torchrun_launch.environment(), GPT_INJECT_DELAY="150")  # time to lose a node mid-run
    survivor, lost = two_agents(flags, [options.binary] + flags, env,
                                rendezvous_flags("1:2", torchrun_launch.free_port(), "elastic",
                                                 ["--max-restarts", "3", "--rdzv-conf", "last_call_timeout=2"]))
    tracker = os.path.join(save, TRACKER)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (os.path.exists(tracker) and open(tracker).read().strip() == "5"):
        time.sleep(0.01)
    if not os.path.exists(tracker):
        failures.append("elastic: the DP=4 job never committed a checkpoint")
        lost.kill_node()
        survivor.kill_node()
        return
    lines_before = len(survivor.lines) + len(lost.lines)
    lost_at = time.monotonic()
    lost.kill_node()
    lost.finish()
    status = survivor.finish()
    for name, agent in (("survivor", survivor), ("lost", lost)):
        with open(os.path.join(work_dir, f"elastic_{name}.log"), "w") as log:
            log.writelines(f"{t - lost_at:8.2f} {line}" for t, line in zip(agent.times, agent.lines))
    text = survivor.text() + lost.text()
    got = losses(text)
    after = [(t, line) for t, line in zip(survivor.times, survivor.lines) if t > lost_at and LOSS.search(line)]
    resumed = [int(m) for m in re.findall(r"loaded checkpoint from .*? at iteration (\d+)", survivor.text())]
    if status != 0:
        failures.append(f"elastic: the surviving agent exited {status}:\n{survivor.text()[-3000:]}")
    if not after:
        failures.append("elastic: no iteration printed after the node was lost")
    worst = 0.0
    for iteration, loss in got:
        difference = abs(float(loss) - reference.get(iteration, float("nan"))) / abs(reference.get(iteration, 1.0))
        if not difference <= 1e-5:
            failures.append(f"elastic: iteration {iteration}: loss {loss} != uninterrupted {reference.get(iteration)}")
            break
        worst = max(worst, difference)
    if max((i for i, _ in got), default=0) != 20:
        failures.append(f"elastic: the job did not reach iteration 20 ({got[-3:]})")
    if "torchrun: attempt 2 of run 'elastic'" not in survivor.text():
        failures.append("elastic: the restarted job did not say which attempt it is")
    dp2 = re.search(r"data_parallel_size \.+ 2\b", survivor.text())
    if not dp2:
        failures.append("elastic: the restarted job's argument dump does not show data_parallel_size 2")
    recovery = after[0][0] - lost_at if after else float("nan")
    print(f"elastic: node lost after {lines_before} lines (checkpoint of iteration 5 committed); resumed from "
          f"iteration {resumed[-1] if resumed else '?'} at DP=2; recovery time {recovery:.1f} s (node lost to the "
          f"first iteration printed after the restart); worst loss difference {worst:.1e}")


def save_interrupted(options, work_dir, failures):
    """A worker killed during a save: the save is never committed, torchrun restarts the workers, and
    they load the checkpoint before it."""
    save = os.path.join(work_dir, "checkpoints_save_killed")
    shutil.rmtree(save, ignore_errors=True)
    flags = TINY + ["--micro-batch-size", "1", "--global-batch-size", "8", "--train-iters", "12",
                    "--save", save, "--load", save, "--save-interval", "5"]
    uninterrupted = subprocess.run([options.mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none",
                                    options.binary] + flags[:flags.index("--save")] + ["--train-iters", "12"],
                                   capture_output=True, text=True, timeout=300)
    reference = {i: float(v) for i, v in losses(uninterrupted.stdout)}
    env = torchrun_launch.environment()
    rendezvous = ["--nproc-per-node", "4", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                  f"127.0.0.1:{torchrun_launch.free_port()}", "--rdzv-id", "save-killed", "--max-restarts", "1"]
    # First attempt: iteration 5 saved, then exit (--exit-interval), so that a committed checkpoint exists.
    first = subprocess.run(torchrun_launch.command(rendezvous, [options.binary] + flags + ["--exit-interval", "5"]),
                           capture_output=True, text=True, env=env, timeout=300)
    # Then: rank 1 SIGKILLs itself after writing its shard of iteration 10 (GPT_CHECKPOINT_FAULT),
    # in the first attempt only; the restarted workers must load iteration 5.
    wrapper = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then export GPT_CHECKPOINT_FAULT=after-shard:1; fi; '
               'exec "$0" "$@"')
    second = subprocess.run(torchrun_launch.command(rendezvous, ["/bin/sh", "-c", wrapper, options.binary] + flags),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=300)
    loaded = [int(m) for m in re.findall(r"loaded checkpoint from .*? at iteration (\d+)", second.stdout)]
    got = losses(first.stdout) + losses(second.stdout)
    if first.returncode != 0 or second.returncode != 0:
        failures.append(f"save killed: torchrun exited {first.returncode}, {second.returncode}:\n{second.stdout[-3000:]}")
    if loaded != [5, 5]:
        failures.append(f"save killed: checkpoints loaded at iterations {loaded}, expected [5, 5] (the save of "
                        f"iteration 10 was cut off)")
    for iteration, loss in got:
        if not abs(float(loss) - reference.get(iteration, float("nan"))) <= 1e-5 * abs(reference.get(iteration, 1.0)):
            failures.append(f"save killed: iteration {iteration}: {loss} != uninterrupted {reference.get(iteration)}")
            break
    if max((i for i, _ in got), default=0) != 12:
        failures.append(f"save killed: the job did not reach iteration 12 ({got[-3:]})")
    print(f"save killed: rank 1 killed during the save of iteration 10; the restarted workers loaded "
          f"iteration {loaded[-1] if loaded else '?'}; {len(got)} losses equal to the uninterrupted run's")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--only", choices=["two-nodes", "elastic", "save-killed"])
    options = parser.parse_args()
    os.makedirs(options.work_dir, exist_ok=True)
    failures = []
    if options.only in (None, "two-nodes"):
        two_node_parity(options, failures)
    if options.only in (None, "elastic"):
        elastic(options, os.path.abspath(options.work_dir), failures)
    if options.only in (None, "save-killed"):
        save_interrupted(options, os.path.abspath(options.work_dir), failures)
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

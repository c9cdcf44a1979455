#!/usr/bin/python3
"""Runs a pretrain_gpt job and restarts it on the nodes left when a rank or a node is lost.

In the spirit of torchrun's elastic agent (--nnodes MIN:MAX): the supervisor launches the job on
every healthy node up to MAX (mpirun, or srun inside a Slurm allocation), watches it (its exit
status or signal, and a heartbeat: the iteration lines the job prints), and when the job fails it
checks the nodes, then relaunches from the latest committed checkpoint (--load, the same directory
as --save) on the nodes still healthy. Tensor and pipeline parallelism stay fixed; data parallelism
shrinks to what the nodes hold; the global batch stays the same, so gradient accumulation grows
(global batch / (micro batch x DP)). Layouts never change the numbers here, so the relaunched run
continues the same loss curve. A node that comes back is used again at the next restart (up to
MAX). docs/ELASTIC.md describes it; tests/integration/elastic_restart_test.py tests it.

Usage:
    scripts/elastic_run.py --nnodes 1:2 --nproc-per-node 2 [--nodes n1,n2] [--launcher mpirun|srun]
        [--single-host] [--node-check 'CMD {node}'] [--max-restarts 3] [--heartbeat-timeout 300]
        -- build/bin/pretrain_gpt --save DIR --load DIR ...

Every refusal is one line `elastic: error: ...` on stderr and exit status 2, before anything runs.
"""

import argparse
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

# The lines that count as a heartbeat: pretrain_gpt's iteration lines (printed by the last rank).
ITERATION_LINE = re.compile(r"\] iteration +(\d+)/")
TRACKER = "latest_checkpointed_iteration.txt"
NODE_CHECK_SECONDS = 120  # a --node-check that hangs counts as an unhealthy node
# Slurm node states that mean the node cannot run the job (scontrol's State= field, any of them).
UNHEALTHY_SLURM_STATES = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "POWER", "REBOOT", "MAINT")


class Refusal(Exception):
    """Bad input: one message, exit status 2, nothing started."""


def log(message):
    print(f"elastic: {message}", flush=True)


def job_flag(job_args, name, default=None):
    """The value of `--name V` or `--name=V` in the job's command line (the last one wins)."""
    value = default
    for i, arg in enumerate(job_args):
        if arg == name and i + 1 < len(job_args):
            value = job_args[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1:]
    return value


def positive_int(job_args, name, default):
    text = job_flag(job_args, name, default)
    if not isinstance(text, str) or not re.fullmatch(r"[+-]?[0-9]+", text):
        raise Refusal(f"the job's {name} '{text}' is not an integer")
    value = int(text)
    if value < 1:
        raise Refusal(f"the job's {name} is {value}; it must be at least 1")
    return value


class Layout:
    """What the job fixes (TP, PP, micro and global batch) and what a node count makes of it."""

    def __init__(self, job_args, nproc_per_node):
        self.tp = positive_int(job_args, "--tensor-model-parallel-size", "1")
        self.pp = positive_int(job_args, "--pipeline-model-parallel-size", "1")
        self.mbs = positive_int(job_args, "--micro-batch-size", "1")
        gbs = job_flag(job_args, "--global-batch-size")
        if gbs is None:
            raise Refusal("the job has no --global-batch-size: without it the global batch would change "
                          "with data parallelism, and a restart on fewer nodes would not continue the same run")
        self.gbs = positive_int(job_args, "--global-batch-size", gbs)
        self.nproc_per_node = nproc_per_node

    def model_ranks(self):
        return self.tp * self.pp

    def why_not(self, nodes):
        """None when `nodes` nodes can run the job, otherwise the reason."""
        world = nodes * self.nproc_per_node
        if world % self.model_ranks():
            return (f"{nodes} node(s) x {self.nproc_per_node} ranks = {world} ranks is not a multiple of "
                    f"TP x PP = {self.tp} x {self.pp} = {self.model_ranks()}")
        dp = world // self.model_ranks()
        if self.gbs % (self.mbs * dp):
            return (f"on {nodes} node(s) DP would be {dp}, and the global batch {self.gbs} is not divisible by "
                    f"micro batch x DP = {self.mbs} x {dp}: the global batch cannot be kept")
        return None

    def describe(self, nodes):
        world = nodes * self.nproc_per_node
        dp = world // self.model_ranks()
        return (f"{world} ranks = TP {self.tp} x PP {self.pp} x DP {dp}, global batch {self.gbs} = micro batch "
                f"{self.mbs} x DP {dp} x {self.gbs // (self.mbs * dp)} accumulation steps")


def committed_iteration(save):
    """The tracker's text for the log line (the job itself validates it when it loads)."""
    path = os.path.join(save, TRACKER)
    if not os.path.exists(path):
        return "none (a fresh start)"
    try:
        with open(path, errors="replace") as tracker:
            text = tracker.read(64).strip()
    except OSError as error:
        return f"unreadable tracker {path} ({error.strerror})"
    return text if text.isdigit() else f"{text[:20]!r} (not an iteration number; the job will say)"


def parse_bounds(text):
    match = re.fullmatch(r"([0-9]+)(?::([0-9]+))?", text or "")
    if not match:
        raise Refusal(f"--nnodes '{text}' is not MIN:MAX (or N)")
    low = int(match.group(1))
    high = int(match.group(2)) if match.group(2) is not None else low
    if low < 1:
        raise Refusal(f"--nnodes {text}: the minimum must be at least 1")
    if low > high:
        raise Refusal(f"--nnodes {text}: the minimum {low} is above the maximum {high}")
    return low, high


def slurm_nodes():
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        return None
    result = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True)
    if result.returncode != 0:
        raise Refusal(f"scontrol show hostnames {nodelist} failed: {result.stderr.strip()}")
    return result.stdout.split()


def slurm_job_nodes():
    """The nodes the Slurm job holds now (a node lost under `sbatch --no-kill` leaves the job's
    NodeList; SLURM_JOB_NODELIST keeps the nodes the job started with)."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    result = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True)
    match = re.search(r"\bNodeList=(\S+)", result.stdout)
    if result.returncode != 0 or not match or match.group(1) == "(null)":
        return []
    names = subprocess.run(["scontrol", "show", "hostnames", match.group(1)], capture_output=True, text=True)
    return names.stdout.split()


def slurm_node_healthy(node):
    held = slurm_job_nodes()
    if held is not None and node not in held:
        return False, "no longer in the Slurm job's allocation"
    result = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True)
    if result.returncode != 0:
        return False, f"scontrol show node {node}: {result.stderr.strip()}"
    match = re.search(r"\bState=(\S+)", result.stdout)
    state = match.group(1) if match else "UNKNOWN"
    bad = [s for s in UNHEALTHY_SLURM_STATES if s in state] + (["NOT_RESPONDING"] if state.endswith("*") else [])
    return (not bad), f"Slurm state {state}"


def process_table():
    """{pid: (parent, state, start time)} of every process on this host (from /proc)."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            table[int(entry)] = (int(fields[1]), fields[0], int(fields[19]))
        except (OSError, ValueError, IndexError):
            continue
    return table


def descendants(root, table=None):
    """PIDs of the processes below `root` on this host (from /proc)."""
    table = process_table() if table is None else table
    children = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def become_subreaper():
    """Processes of the job that lose their parent (ranks whose mpirun died) become the supervisor's
    children instead of init's, so that they are still found below it and can be stopped (Linux
    prctl PR_SET_CHILD_SUBREAPER; without it the supervisor relies on the tree it last saw)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class JobTree:
    """The launcher's process and everything below it: mpirun, its ranks (Open MPI puts each rank in a
    process group of its own, so a signal to mpirun's group misses them), their helpers. Each process
    is remembered with its start time, so that a PID reused by an unrelated process is never signalled."""

    def __init__(self, root):
        self.root = root
        self.known = {}  # pid -> start time

    def refresh(self):
        table = process_table()
        below = descendants(self.root, table) + descendants(os.getpid(), table)
        for pid in [self.root] + below:
            if pid in table and pid != os.getpid() and table[pid][1] != "Z":
                self.known.setdefault(pid, table[pid][2])
        return table

    def alive(self):
        """The remembered processes still running (not zombies), same start time."""
        table = self.refresh()
        return [pid for pid, start in self.known.items()
                if pid in table and table[pid][2] == start and table[pid][1] != "Z"]

    def signal(self, number):
        for pid in self.alive():
            try:
                os.kill(pid, number)
            except (ProcessLookupError, PermissionError):
                pass

    def reap(self):
        """Collects the exit status of orphans that became the supervisor's children (not the
        launcher's, which subprocess collects)."""
        for pid in list(self.known):
            if pid == self.root:
                continue
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def stop(self, kill_wait):
        """SIGTERM to every process of the job, SIGKILL to those left after `kill_wait` seconds; returns
        once none is left (or, for a process that survives SIGKILL, after 30 s more)."""
        if not self.alive():
            return
        self.signal(signal.SIGCONT)  # a stopped rank must run to act on SIGTERM
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + kill_wait
        while self.alive() and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.05)
        deadline = time.monotonic() + 30
        while self.alive() and time.monotonic() < deadline:
            self.signal(signal.SIGKILL)
            self.reap()
            time.sleep(0.05)
        self.reap()
        left = self.alive()
        if left:
            log(f"error: processes of the job survive SIGKILL: {', '.join(map(str, sorted(left)))}")


class Supervisor:
    def __init__(self, options, job_args):
        self.options = options
        self.job_args = job_args
        self.low, self.high = parse_bounds(options.nnodes)
        if options.nproc_per_node < 1:
            raise Refusal(f"--nproc-per-node {options.nproc_per_node} must be at least 1")
        self.launcher = options.launcher or ("srun" if os.environ.get("SLURM_JOB_ID") else "mpirun")
        executable(options.mpirun if self.launcher == "mpirun" else "srun", "the launcher")
        executable(job_args[0], "the job's program")
        if options.nodes:
            self.nodes = [n for n in options.nodes.split(",") if n]
        else:
            self.nodes = slurm_nodes() or [socket.gethostname()]
        if len(set(self.nodes)) != len(self.nodes):
            raise Refusal(f"--nodes names a node twice: {','.join(self.nodes)}")
        if self.low > len(self.nodes):
            raise Refusal(f"--nnodes {options.nnodes} needs at least {self.low} nodes, but only {len(self.nodes)} "
                          f"are given ({','.join(self.nodes)})")
        self.layout = Layout(job_args, options.nproc_per_node)
        most = min(self.high, len(self.nodes)) * options.nproc_per_node
        if most < self.layout.model_ranks():
            raise Refusal(f"TP x PP = {self.layout.tp} x {self.layout.pp} needs {self.layout.model_ranks()} ranks, "
                          f"but at most {min(self.high, len(self.nodes))} node(s) x {options.nproc_per_node} ranks "
                          f"= {most} are available")
        if all(self.layout.why_not(n) for n in range(self.low, min(self.high, len(self.nodes)) + 1)):
            reasons = "; ".join(self.layout.why_not(n) for n in range(self.low, min(self.high, len(self.nodes)) + 1))
            raise Refusal(f"no node count in --nnodes {options.nnodes} can run the job: {reasons}")
        save, load = job_flag(job_args, "--save"), job_flag(job_args, "--load")
        if not save:
            raise Refusal("the job has no --save: a restart would have no checkpoint to resume from")
        if not load or os.path.realpath(load) != os.path.realpath(save):
            raise Refusal(f"the job's --load ({load or 'none'}) is not its --save directory ({save}): a restart "
                          "must resume from the checkpoints the job writes")
        self.save = save
        self.child = None
        self.tree = None  # JobTree of the running attempt
        self.stopping = None  # the signal the supervisor itself got
        self.failed_at = None  # when the last failure was noticed (monotonic seconds)

    # ----- nodes
    def node_healthy(self, node):
        """(healthy, why) for one node."""
        if self.options.node_check:
            command = self.options.node_check.replace("{node}", shlex.quote(node))
            try:
                result = subprocess.run(command, shell=True, capture_output=True, text=True,
                                        timeout=NODE_CHECK_SECONDS)
            except subprocess.TimeoutExpired:
                return False, f"node check still running after {NODE_CHECK_SECONDS} s"
            return result.returncode == 0, f"node check exit status {result.returncode}"
        if self.launcher == "srun":
            return slurm_node_healthy(node)
        return True, "no node check given"

    def healthy_nodes(self):
        healthy = []
        for node in self.nodes:
            ok, why = self.node_healthy(node)
            if ok:
                healthy.append(node)
            else:
                log(f"node {node} is not healthy ({why}); left out")
        return healthy

    def check_shared_directory(self, nodes):
        """The --save directory must be the same directory on every node: a token written here must
        be seen from each node (srun or mpirun one task per node; one host needs no check)."""
        if self.options.single_host or nodes == [socket.gethostname()]:
            return
        os.makedirs(self.save, exist_ok=True)
        token = os.path.join(os.path.abspath(self.save), f".elastic_shared_check_{os.getpid()}")
        with open(token, "w") as out:
            out.write("shared\n")
        try:
            if self.launcher == "srun":
                command = ["srun", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
                           f"--nodelist={','.join(nodes)}",
                           "--mpi=none", "sh", "-c", f'test -e {shlex.quote(token)} || hostname']
            else:
                command = [self.options.mpirun, "-np", str(len(nodes)), "--host", ",".join(nodes), "--map-by", "node",
                           "sh", "-c", f'test -e {shlex.quote(token)} || hostname']
            result = subprocess.run(command, capture_output=True, text=True, timeout=120)
            missing = result.stdout.split()
            if result.returncode != 0 or missing:
                where = ", ".join(missing) if missing else f"({' '.join(command[:1])} exit status {result.returncode})"
                raise Refusal(f"the checkpoint directory {self.save} is not shared: a file written there is not "
                              f"visible on {where}; every node must see the same --save directory")
        finally:
            os.unlink(token)

    def choose(self, healthy):
        """(the first of the healthy nodes, as many as the largest count in [MIN, MAX] that can run the
        job, or None; the reasons the larger counts could not)."""
        skipped = []
        for count in range(min(self.high, len(healthy)), self.low - 1, -1):
            reason = self.layout.why_not(count)
            if reason is None:
                return healthy[:count], skipped
            skipped.append(reason)
        return None, skipped

    # ----- the job
    def command(self, nodes):
        world = len(nodes) * self.options.nproc_per_node
        if self.launcher == "srun":
            return (["srun", "--mpi=pmix", f"--nodes={len(nodes)}", f"--ntasks={world}",
                     f"--ntasks-per-node={self.options.nproc_per_node}",
                     f"--nodelist={','.join(nodes)}", "--kill-on-bad-exit=1"] + self.job_args)
        launch = [self.options.mpirun, "-np", str(world), "--bind-to", "none"]
        if self.options.single_host:
            launch.append("--oversubscribe")
        else:
            launch += ["--host", ",".join(f"{n}:{self.options.nproc_per_node}" for n in nodes)]
        return launch + self.options.mpirun_words + self.job_args

    def run_once(self, nodes):
        """Runs the job until it ends; returns (ok, what happened)."""
        command = self.command(nodes)
        log("launching: " + " ".join(shlex.quote(c) for c in command))
        beat = {"time": time.monotonic(), "iteration": None}

        self.child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True,
                                      bufsize=1)
        self.tree = JobTree(self.child.pid)

        def pump():
            for line in self.child.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                match = ITERATION_LINE.search(line)
                if match:
                    if beat["iteration"] is None and self.failed_at is not None:
                        log(f"recovered: iteration {match.group(1)} came {time.monotonic() - self.failed_at:.1f} s "
                            "after the failure was noticed")
                    beat["time"], beat["iteration"] = time.monotonic(), int(match.group(1))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        missed = False
        while self.child.poll() is None:
            time.sleep(0.2)
            self.tree.refresh()
            silent = time.monotonic() - beat["time"]
            if self.options.heartbeat_timeout > 0 and silent > self.options.heartbeat_timeout and not self.stopping:
                log(f"missed heartbeat: no iteration line for {silent:.0f} s (--heartbeat-timeout "
                    f"{self.options.heartbeat_timeout:g}; last iteration {beat['iteration']}); stopping the job")
                missed = True
                noticed = time.monotonic()
                self.terminate_child()
                break
        else:
            noticed = time.monotonic()
        status = self.child.wait()
        # Whatever of the job outlived the launcher (a rank mpirun did not take down) is stopped
        # before a relaunch, so that no rank keeps training or holding the --save directory's lock.
        self.tree.stop(self.options.kill_wait)
        reader.join(timeout=5)
        self.child = None
        last = beat["iteration"]
        if missed:
            return False, f"missed heartbeat after iteration {last}"
        if status == 0:
            return True, f"exit status 0 (last iteration {last})"
        self.failed_at = noticed
        how = f"signal {signal.Signals(-status).name}" if status < 0 else f"exit status {status}"
        return False, f"{how} after iteration {last}"

    def terminate_child(self):
        """Stops the whole job: the launcher's process group and every process below it."""
        if self.child is None:
            return
        if self.child.poll() is None:
            try:
                os.killpg(self.child.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.tree.stop(self.options.kill_wait)
        if self.child.poll() is None:
            try:
                os.killpg(self.child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def on_signal(self, number, _frame):
        """A signal to the supervisor (Slurm's time limit or preemption) goes to the job's ranks as
        SIGTERM, which save under --exit-signal-handler; the supervisor then exits with the job,
        without restarting."""
        self.stopping = number
        log(f"got {signal.Signals(number).name}: passing SIGTERM to the job's ranks and not restarting")
        if self.child is None or self.child.poll() is not None:
            return
        if self.launcher == "srun" and os.environ.get("SLURM_JOB_ID"):
            # To the tasks of the job's steps: SIGTERM to srun itself ends the step without a save.
            subprocess.run(["scancel", "--signal=TERM", os.environ["SLURM_JOB_ID"]], capture_output=True)
            return
        # mpirun ends the job on SIGTERM without passing it on: the ranks on this host get it directly.
        for pid in descendants(self.child.pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def run(self):
        self.check_shared_directory(self.nodes)
        restarts = 0
        while True:
            healthy = self.healthy_nodes()
            if len(healthy) < self.low:
                log(f"error: only {len(healthy)} healthy node(s) ({','.join(healthy) or 'none'}), fewer than the "
                    f"minimum {self.low} of --nnodes {self.options.nnodes}: giving up")
                return 1
            chosen, skipped = self.choose(healthy)
            if chosen is None:
                log("error: the healthy nodes cannot run the job: " + "; ".join(skipped))
                return 1
            for reason in skipped:
                log(f"not using more nodes: {reason}")
            resume = committed_iteration(self.save)
            log(f"attempt {restarts + 1}: {len(chosen)} node(s) {','.join(chosen)}: "
                f"{self.layout.describe(len(chosen))}; latest committed checkpoint: iteration {resume}")
            started = time.monotonic()
            ok, what = self.run_once(chosen)
            log(f"attempt {restarts + 1} ended: {what}, after {time.monotonic() - started:.1f} s")
            if ok:
                return 0
            if self.stopping:
                log(f"the job ended after {signal.Signals(self.stopping).name}: {what}; not restarting")
                return 128 + self.stopping
            restarts += 1
            if restarts > self.options.max_restarts:
                log(f"error: {restarts - 1} restart(s) used (--max-restarts {self.options.max_restarts}): giving up")
                return 1
            log(f"restart {restarts} of at most {self.options.max_restarts}: checking the nodes")


class OneLineParser(argparse.ArgumentParser):
    """argparse's refusals as one `elastic: error:` line and exit status 2 (not its usage block)."""

    def error(self, message):
        raise Refusal(message)


def number(text, name, low, high, integer=False, low_open=False):
    """A finite decimal number in [low, high] ((low, high] with low_open), or a Refusal naming the
    option and the range as a user writes it. Python's float() takes 'nan', 'inf' and '1_0'; this does not."""
    pattern = r"[+-]?[0-9]+" if integer else r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"
    if not re.fullmatch(pattern, text):
        raise Refusal(f"{name} '{text}' is not {'a decimal integer' if integer else 'a finite decimal number'}")
    value = int(text) if integer else float(text)
    if value != value or value in (float("inf"), float("-inf")) or value > high or value < low or (
            low_open and value == low):
        def shown(bound):
            return str(bound) if isinstance(bound, int) else re.sub(r"e\+?(-?)0*(\d)", r"e\1\2", f"{bound:g}")
        where = f"above {shown(low)} and at most {shown(high)}" if low_open else f"from {shown(low)} to {shown(high)}"
        raise Refusal(f"{name} must be {where} (got {text})")
    return value


def executable(program, what):
    """`program` as the launcher would find it, or a Refusal: a missing launcher or job program is
    named before anything starts, not a Python traceback at the first launch."""
    found = shutil.which(program)
    if found is None:
        why = "not an executable file" if os.sep in program and os.path.exists(program) else "not found"
        raise Refusal(f"{what} '{program}': {why}" + ("" if os.sep in program else " on PATH"))
    return found


def parse_options(argv):
    parser = OneLineParser(description=__doc__.split("\n\n")[0], usage="%(prog)s [options] -- PROGRAM ARGS...")
    parser.add_argument("--nnodes", required=True, help="MIN:MAX nodes (or N): the job runs on as many healthy nodes "
                        "as it can up to MAX, and gives up below MIN")
    parser.add_argument("--nproc-per-node", required=True, help="ranks on each node (1 to 4096)")
    parser.add_argument("--nodes", help="comma-separated node names (default: the Slurm allocation's, or this host)")
    parser.add_argument("--launcher", choices=["mpirun", "srun"], help="default: srun inside a Slurm job, else mpirun")
    parser.add_argument("--single-host", action="store_true",
                        help="the node names are labels of rank groups on this host (tests): mpirun --oversubscribe")
    parser.add_argument("--node-check", help="shell command with {node}; exit status 0 means the node is healthy "
                        "(default: Slurm's node state under srun, every node healthy under mpirun)")
    parser.add_argument("--max-restarts", default="3", help="restarts before giving up (0 to 1000000, default 3)")
    parser.add_argument("--heartbeat-timeout", default="0",
                        help="seconds without an iteration line after which the job is stopped and restarted "
                        "(0: off, the default; at most 604800; the first one counts from the launch, so leave room "
                        "for start-up and loading)")
    parser.add_argument("--kill-wait", default="10",
                        help="seconds between SIGTERM and SIGKILL (above 0 and at most 3600, default 10)")
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--mpirun-args", default="", help="extra mpirun arguments (one string)")
    if "--" not in argv:
        raise Refusal("give the job after '--' (scripts/elastic_run.py [options] -- PROGRAM ARGS...)")
    split = argv.index("--")
    options = parser.parse_args(argv[:split])
    job_args = argv[split + 1:]
    if not job_args:
        raise Refusal("no program after '--'")
    options.nproc_per_node = number(options.nproc_per_node, "--nproc-per-node", 1, 4096, integer=True)
    options.max_restarts = number(options.max_restarts, "--max-restarts", 0, 1000000, integer=True)
    options.heartbeat_timeout = number(options.heartbeat_timeout, "--heartbeat-timeout", 0, 604800)
    options.kill_wait = number(options.kill_wait, "--kill-wait", 0, 3600, low_open=True)
    if options.node_check is not None and not options.node_check.strip():
        raise Refusal("--node-check is empty: give a shell command (with {node}) or leave the option out")
    try:
        options.mpirun_words = shlex.split(options.mpirun_args)
    except ValueError as error:
        raise Refusal(f"--mpirun-args '{options.mpirun_args}' cannot be split into words: {error}") from None
    return options, job_args


def main():
    try:
        options, job_args = parse_options(sys.argv[1:])
        supervisor = Supervisor(options, job_args)
    except Refusal as refusal:
        print(f"elastic: error: {refusal}", file=sys.stderr)
        return 2
    become_subreaper()
    try:
        for number in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(number, supervisor.on_signal)
        return supervisor.run()
    except Refusal as refusal:
        print(f"elastic: error: {refusal}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"elastic: error: {error.strerror or error}"
              + (f": {error.filename}" if error.filename else ""), file=sys.stderr)
        return 2
    finally:
        supervisor.terminate_child()


if __name__ == "__main__":
    sys.exit(main())

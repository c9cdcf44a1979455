"""A real Slurm cluster on this machine for the tests (docs/SLURM.md, "Testing"): munged, slurmctld
and one slurmd per node (one node, or fake nodes sharing this host), all under one directory, on
free ports. Stopped by their PIDs after every job is cancelled and drained; nothing is left outside
the directory.

    with SlurmCluster(work_dir, nodes=2) as cluster:
        cluster.run(["sbatch", "--wait", script])      # SLURM_CONF set

SlurmCluster.unavailable() says why Slurm cannot run here (None when it can)."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "sinfo", "scancel")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class SlurmCluster:
    def __init__(self, work_dir, nodes=1, cpus_per_node=8, grace_time=5):
        # The daemons run in a short directory under /tmp (munge's and PMIx's Unix sockets live there,
        # and a socket path has at most 107 bytes); stop() copies the logs to `work_dir`/logs.
        self.work_dir = os.path.abspath(work_dir)
        self.dir = tempfile.mkdtemp(prefix="gpt-slurm-", dir="/tmp")
        os.chmod(self.dir, 0o755)  # munged wants every directory above its socket searchable by all
        self.node_count = nodes
        self.cpus = cpus_per_node
        self.grace_time = grace_time
        self.host = socket.gethostname().split(".")[0]
        self.nodes = [self.host] if nodes == 1 else [f"n{i + 1}" for i in range(nodes)]
        self.pids = {}
        self.processes = {}  # the daemons started in the foreground (slurmctld, slurmd): their Popen
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.dir, "slurm.conf"))
        if nodes > 1:
            # The fake nodes share the host name and /dev/shm: Open MPI's shared-memory transport
            # would mix them up (docs/SLURM.md).
            self.env["OMPI_MCA_btl"] = "self,tcp"

    @staticmethod
    def unavailable():
        missing = [d for d in DAEMONS if shutil.which(d) is None and not os.path.exists(f"/usr/sbin/{d}")]
        if missing:
            return "Slurm is not installed (missing " + ", ".join(missing) + "; scripts/setup.sh installs it)"
        return None

    def write_config(self):
        d = self.dir
        ctld_port, slurmd_port = free_port(), free_port()
        lines = [
            "ClusterName=test", f"SlurmctldHost={self.host}(127.0.0.1)", "SlurmUser=root", "SlurmdUser=root",
            f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}", "AuthType=auth/munge", "CredType=cred/munge",
            # cred_expire: how long a requeued job waits before it runs again (120 s by default).
            f"AuthInfo=socket={d}/munge/munge.sock,cred_expire=10",
            f"StateSaveLocation={d}/state", f"SlurmctldPidFile={d}/run/slurmctld.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log", "MailProg=/bin/true", "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none", "SwitchType=switch/none", "MpiDefault=pmix", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "SlurmdParameters=config_overrides", "ReturnToService=2",
            "SchedulerParameters=sched_interval=2,bf_interval=1", "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none", "JobCompType=jobcomp/none", "InactiveLimit=0", "MinJobAge=300",
            "KillWait=5", "PreemptType=preempt/partition_prio", "PreemptMode=REQUEUE",
        ]
        if self.node_count == 1:
            lines += [f"SlurmdSpoolDir={d}/spool", f"SlurmdPidFile={d}/run/slurmd.pid",
                      f"SlurmdLogFile={d}/log/slurmd.log", f"TmpFS={d}/tmp",
                      f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} Sockets=1 "
                      f"CoresPerSocket={self.cpus} ThreadsPerCore=1 RealMemory=4000"]
        else:
            lines += [f"SlurmdSpoolDir={d}/spool/%n", f"SlurmdPidFile={d}/run/slurmd.%n.pid",
                      f"SlurmdLogFile={d}/log/slurmd.%n.log", f"TmpFS={d}/tmp/%n"]
            for node in self.nodes:
                lines.append(f"NodeName={node} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={free_port()} "
                             f"CPUs={self.cpus} Sockets=1 CoresPerSocket={self.cpus} ThreadsPerCore=1 RealMemory=2000")
        lines += [f"PartitionName=low Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 "
                  f"GraceTime={self.grace_time}",
                  "PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10"]
        with open(os.path.join(d, "slurm.conf"), "w") as conf:
            conf.write("\n".join(lines) + "\n")

    def start(self):
        d = self.dir
        for sub in ("log", "state", "spool", "run", "tmp"):
            os.makedirs(os.path.join(d, sub))
        for node in self.nodes if self.node_count > 1 else []:
            os.makedirs(os.path.join(d, "spool", node))
            os.makedirs(os.path.join(d, "tmp", node))
        os.makedirs(os.path.join(d, "munge"), mode=0o755)
        os.makedirs(os.path.join(d, "munge-key"), mode=0o700)
        os.chmod(os.path.join(d, "munge"), 0o755)
        os.chmod(os.path.join(d, "munge-key"), 0o700)
        key = os.path.join(d, "munge-key", "munge.key")
        with open(key, "wb") as out:
            out.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.write_config()
        # munged forks into the background; its PID is in its pid file.
        subprocess.run(["munged", f"--socket={d}/munge/munge.sock", f"--key-file={key}",
                        f"--pid-file={d}/munge/munged.pid", f"--log-file={d}/munge/munged.log",
                        f"--seed-file={d}/munge-key/munged.seed"], check=True, env=self.env)
        self.pids["munged"] = int(open(f"{d}/munge/munged.pid").read())
        conf = os.path.join(d, "slurm.conf")
        self.spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", conf])
        for node in self.nodes:
            extra = ["-N", node] if self.node_count > 1 else []
            self.spawn(f"slurmd {node}", ["slurmd", "-D", "-f", conf] + extra)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = self.run(["sinfo", "-h", "-N", "-p", "low", "-o", "%N %T"]).stdout.split("\n")
            idle = [line for line in states if line.endswith(" idle")]
            if len(idle) == len(self.nodes):
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the Slurm nodes did not become idle in 60 s (see {d}/log)")

    def spawn(self, name, command):
        log = open(os.path.join(self.dir, "log", name.replace(" ", "_") + ".out"), "w")
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=self.env, start_new_session=True)
        self.pids[name] = process.pid
        self.processes[name] = process

    def run(self, command, **kwargs):
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("timeout", 120)
        return subprocess.run(command, env=kwargs.pop("env", self.env), **kwargs)

    def job_state(self, job):
        """(state, restart count) from scontrol, or (None, None) when the job is unknown."""
        result = self.run(["scontrol", "show", "job", "-o", str(job)])
        if result.returncode != 0:
            return None, None
        fields = dict(f.split("=", 1) for f in result.stdout.split() if "=" in f)
        return fields.get("JobState"), int(fields.get("Restarts", "0"))

    def stop(self):
        """Cancels and drains every job, then stops the daemons by their PIDs."""
        if self.pids.get("slurmctld"):
            self.run(["scancel", "--full", "--user", "root"], timeout=30)
            # squeue lists the jobs still pending, running or completing.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.run(["squeue", "-h", "-o", "%i"], timeout=30).stdout.strip():
                time.sleep(0.3)
        for name, pid in self.pids.items():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for name, process in self.processes.items():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.exists(f"/proc/{self.pids.get('munged', 0)}"):
            time.sleep(0.1)
        self.pids, self.processes = {}, {}
        if os.path.isdir(os.path.join(self.dir, "log")):
            logs = os.path.join(self.work_dir, "logs")
            shutil.rmtree(logs, ignore_errors=True)
            shutil.copytree(os.path.join(self.dir, "log"), logs)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()

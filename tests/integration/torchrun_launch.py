"""Starts a program under torchrun (Debian's python3-torch: python3 -m torch.distributed.run) on a
free port of this machine, so that tests run side by side: `torchrun_launch.py [torchrun flags] --
program args`. Without --rdzv-backend it is torchrun's static rendezvous, whose agent hosts the
key-value store at MASTER_PORT. Also importable: command(), free_port()."""
import os
import socket
import subprocess
import sys

PYTHON = "/usr/bin/python3"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Debian's torch 1.13 on Python 3.11 cannot parse its own defaults --redirects 0 and --tee 0 (its
# Std.from_str iterates an IntFlag, which no longer yields the zero member, and fails with
# "'NoneType' object has no attribute 'get'"). A mapping that names only a local rank no test has
# (9) leaves every worker's output on the console, as the defaults mean.
DEBIAN_TORCH_FIX = ["--redirects", "9:0", "--tee", "9:0"]


def spelled_for_this_torch(flag):
    """torch 1.13's torchrun knows only --nproc_per_node, --rdzv_backend, ...; torch 2 accepts these
    and the hyphenated --nproc-per-node that Megatron's newer scripts use."""
    return "--" + flag[2:].replace("-", "_") if flag.startswith("--") else flag


def command(torchrun_flags, program):
    """The torchrun command line: `torchrun_flags` (a port added unless given), --no-python, `program`."""
    flags = [spelled_for_this_torch(f) for f in torchrun_flags]
    if "--rdzv_backend" not in flags and "--master_port" not in flags and "--standalone" not in flags:
        flags += ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    if "--monitor_interval" not in flags:
        flags += ["--monitor_interval", "0.5"]  # the agent notices ended workers sooner than its 5 s
    return [PYTHON, "-m", "torch.distributed.run"] + flags + DEBIAN_TORCH_FIX + ["--no_python"] + list(program)


def environment():
    """This environment without an MPI launcher's variables (ctest may run under one) and with
    torch's agent quiet about OMP_NUM_THREADS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


if __name__ == "__main__":
    split = sys.argv.index("--")
    sys.exit(subprocess.run(command(sys.argv[1:split], sys.argv[split + 1:]), env=environment()).returncode)

#!/usr/bin/python3
"""Bad torchrun launches (issue 43), started the way torchrun starts workers (its environment
variables) but by hand, so each case takes seconds: MASTER_PORT where nothing listens, ranks that
disagree on WORLD_SIZE, a rank that never arrives, torchrun's variables beside
mpirun's, a malformed variable, and --distributed-backend mpi under torchrun. Every case must end
every process with exit status 1 within the bounded wait (--distributed-timeout-minutes 0.05 = 3 s,
plus the grace periods), with exactly one `error:` line among all of them that names the problem,
and no crash, traceback or abort."""

import argparse
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

FLAGS = ["--device", "cpu", "--mock-data", "--vocab-size", "250", "--num-layers", "2", "--hidden-size", "64",
         "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
         "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "1e-3", "--train-iters", "2",
         "--eval-iters", "0", "--distributed-timeout-minutes", "0.05"]
BOUND_SECONDS = 15  # 3 s of waiting, the grace periods, start-up on a shared 2-core machine


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(rank, world_size, port, extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    env.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": "bad-input"})
    env.update(extra or {})
    return env


def run_case(binary, workers, flags=()):
    """Starts one process per (rank, world size, extra environment); returns their exit codes, the
    error lines of all of them, everything they printed, and the seconds until the last ended."""
    port = free_port()
    started = time.time()
    procs = [subprocess.Popen([binary] + FLAGS + list(flags), env=worker_env(rank, size, port, extra),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank, size, extra in workers]
    outputs, codes = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n[hung: killed after 60 s]"
        outputs.append(out)
        codes.append(p.returncode)
    text = "\n".join(outputs)
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    return codes, errors, text, time.time() - started


CASES = [
    # name, workers (rank, WORLD_SIZE, extra env), extra flags, what the one line must say
    ("MASTER_PORT unreachable", [(1, 2, None)], [], "did not accept a connection"),
    ("WORLD_SIZE disagreeing", [(0, 2, None), (1, 3, None), (2, 3, None)], [],
     "disagree on WORLD_SIZE: world rank 0 has 2, world rank 1 has 3"),
    ("a rank that never arrives", [(0, 3, None), (1, 3, None)], [], "world ranks [2] of WORLD_SIZE=3 did not arrive"),
    ("mixed launchers", [(0, 1, {"OMPI_COMM_WORLD_SIZE": "1"})], [], "both torchrun's variables"),
    ("malformed MASTER_PORT", [(0, 1, {"MASTER_PORT": "http"})], [], "MASTER_PORT=http is not a whole number"),
    ("--distributed-backend mpi", [(0, 2, None), (1, 2, None)], ["--distributed-backend", "mpi"],
     "--distributed-backend mpi needs an MPI launcher"),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True)
    args = parser.parse_args()
    failures, timings = [], []
    for name, workers, flags, expected in CASES:
        codes, errors, text, seconds = run_case(args.binary, workers, flags)
        timings.append(f"{name} {seconds:.1f} s")
        if any(code != 1 for code in codes):
            failures.append(f"{name}: exit codes {codes}, expected 1 everywhere:\n{text[-1500:]}")
        if len(errors) != 1 or expected not in errors[0]:
            failures.append(f"{name}: expected one error line with '{expected}', got {errors}:\n{text[-1500:]}")
        if "Traceback" in text or "Aborted" in text or "hung" in text or "check failed" in text.lower():
            failures.append(f"{name}: crashed or hung:\n{text[-1500:]}")
        if seconds > BOUND_SECONDS:
            failures.append(f"{name}: took {seconds:.1f} s, beyond the bounded wait ({BOUND_SECONDS} s)")
    return harness.finish(failures, ", ".join(timings))


if __name__ == "__main__":
    sys.exit(main())

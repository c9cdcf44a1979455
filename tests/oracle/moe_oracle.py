#!/usr/bin/python3
"""Independent mixture-of-experts oracle for the project's CPU backend.

Runs the project's `training_dump` for a small MoE configuration and rebuilds the model in PyTorch
(float64, autograd) from the dumped initial weights. The attention, norms, embeddings, dense MLPs,
learning-rate schedule and weight-decay rules are gpt_oracle.py's; the MoE layer here is written from
Megatron-Core's definitions (router.py, moe_utils.py, experts.py, shared_experts.py; the Switch
Transformer, DeepSeek-V2/V3 and ST-MoE papers), sharing no code with the project:
  * router logits x W^T (+ b) on the layer's normalized input, tokens in Megatron's [s, b] order
    (token t = position * b + sample);
  * softmax after top-k (top-k of the logits, softmax over the k), softmax before top-k
    (--moe-router-pre-softmax: full softmax, top-k, no renormalization), or sigmoid scores (top-k of
    sigmoid + expert bias, the unbiased scores renormalized over the k when k > 1); group-limited
    top-k; --moe-router-topk-scaling-factor;
  * capacity ceil(T k / E * factor) per expert and microbatch, tokens dropped by their probability or
    their position, optionally every expert padded to its capacity with zero-probability rows;
  * experts y_t = sum over kept (t, e) of p[t, e] (W2_e act(W1_e x_t + b1_e) + b2_e), plus a shared
    expert (an ordinary MLP of --moe-shared-expert-intermediate-size, no biases);
  * the load-balancing losses (aux_loss: coeff E / (k T^2) sum_e (sum_t s[t, e]) c_e over the
    microbatch; seq_aux_loss: the same per sequence, averaged over the b sequences), with s the full
    softmax or the sum-normalized sigmoid of the logits and c the counts of their plain top-k, and
    the z-loss coeff * mean_t logsumexp(logits_t)^2, added to each microbatch's objective with the
    weight of its mean LM loss (objective = mean over microbatches of LM loss + all layers' aux terms);
  * the expert bias (aux-loss-free balancing): per MoE layer, a buffer starting at zero, used for the
    selection only, moved once per iteration after the backward by rate * sign(mean count - count)
    with the counts of that iteration's kept (token, expert) pairs over all microbatches;
  * --moe-layer-freq (an integer N: layers i with i % N == 0; or a Python list expression).
It checks the dump's parameter names and shapes, the logits and loss of one microbatch (evaluation:
no aux losses, no counting), every gradient of the first global batch, the LM losses, gradient norms
and learning rates of 20 AdamW steps, and (FP32) the final parameters, router included.
The dump has no record of which (token, expert) pairs were dropped; the capacity variants check
instead that our gradients are much nearer the reference with this drop policy than the reference
with the other policy and the dropless one (each must differ, or the test could not tell them apart).
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

import gpt_oracle as go

STEPS = 20
BASE_FLAGS = go.merge_flags(go.BASE_FLAGS, ["--train-iters", str(STEPS)])
GPT_MOE = ["--num-experts", "4", "--moe-router-topk", "2", "--moe-router-load-balancing-type", "aux_loss",
           "--moe-aux-loss-coeff", "1e-2"]
CAPACITY = GPT_MOE + ["--moe-expert-capacity-factor", "1.0"]
VARIANTS = {
    # name: (flags replacing or adding to BASE_FLAGS, tolerance, compare final parameters)
    # GPT-style: learned positions, LayerNorm, the (tanh) bias-GeLU with biases, 4 experts, top-2.
    "gpt_softmax_top2_aux": (GPT_MOE, 1e-5, True),
    # DeepSeek-V3-style router on a Llama-style model: sigmoid scores, 4 groups of 2 experts of which
    # 2 groups are eligible, an expert bias that moves (rate 1e-2), per-sequence aux loss, z-loss,
    # scaling 2.5 and a shared expert.
    "llama_sigmoid_groups_bias_seq_z_shared": (
        go.LLAMA_FLAGS + ["--ffn-hidden-size", "96", "--num-experts", "8", "--moe-router-topk", "2",
                          "--moe-router-score-function", "sigmoid", "--moe-router-num-groups", "4",
                          "--moe-router-group-topk", "2", "--moe-router-enable-expert-bias",
                          "--moe-router-bias-update-rate", "1e-2", "--moe-router-load-balancing-type", "seq_aux_loss",
                          "--moe-aux-loss-coeff", "1e-3", "--moe-z-loss-coeff", "1e-3",
                          "--moe-router-topk-scaling-factor", "2.5", "--moe-ffn-hidden-size", "32",
                          "--moe-shared-expert-intermediate-size", "48"], 1e-5, True),
    "capacity_probs": (CAPACITY + ["--moe-token-drop-policy", "probs"], 1e-5, True),
    "capacity_position": (CAPACITY + ["--moe-token-drop-policy", "position"], 1e-5, True),
    "capacity_pad": (CAPACITY + ["--moe-token-drop-policy", "probs", "--moe-pad-expert-input-to-capacity"], 1e-5, True),
    # Layers 1 and 3 MoE (0 and 2 dense), the experts narrower than the dense MLPs.
    "layer_pattern": (GPT_MOE + ["--num-layers", "4", "--moe-layer-freq", "([0]*1+[1]*1)*2",
                                 "--ffn-hidden-size", "96", "--moe-ffn-hidden-size", "48"], 1e-5, True),
    "pre_softmax_top1": (["--num-experts", "4", "--moe-router-topk", "1", "--moe-router-pre-softmax",
                          "--moe-router-load-balancing-type", "aux_loss", "--moe-aux-loss-coeff", "1e-2"], 1e-5, True),
    "bf16": (GPT_MOE + ["--bf16"], 2e-2, False),
    # Sinkhorn routing (no aux loss): top-2 with softmax weights and a z-loss; top-1 with sigmoid
    # weights (no --moe-router-pre-softmax needed).
    "sinkhorn_top2_z": (["--num-experts", "4", "--moe-router-topk", "2", "--moe-router-load-balancing-type", "sinkhorn",
                         "--moe-z-loss-coeff", "1e-3"], 1e-5, True),
    # Megatron's global_aux_loss on one rank: each microbatch's switch loss with the running mean of
    # the iteration's counts so far (4 microbatches a step), plus a z-loss.
    "global_aux_z": (["--num-experts", "4", "--moe-router-topk", "2", "--moe-router-load-balancing-type",
                      "global_aux_loss", "--moe-aux-loss-coeff", "1e-2", "--moe-z-loss-coeff", "1e-3"], 1e-5, True),
    # The same over two data-parallel ranks: each microbatch's counts summed over both ranks' k-th
    # microbatches (T = both ranks' tokens), the reference running every rank's microbatches.
    "global_aux_z_dp2": (["--num-experts", "4", "--moe-router-topk", "2", "--moe-router-load-balancing-type",
                          "global_aux_loss", "--moe-aux-loss-coeff", "1e-2", "--moe-z-loss-coeff", "1e-3"], 1e-5, True),
    "sinkhorn_top1": (["--num-experts", "4", "--moe-router-topk", "1", "--moe-router-load-balancing-type", "sinkhorn"],
                      1e-5, True),
}


# Variants run on several data-parallel ranks (the others: one rank).
DATA_PARALLEL = {"global_aux_z_dp2": 2}


def moe_settings(flags, num_layers):
    """The MoE settings of a command line with Megatron's defaults (None: a dense model)."""
    experts = int(go.flag_value(flags, "--num-experts", 0))
    if experts == 0:
        return None
    freq = go.flag_value(flags, "--moe-layer-freq", "1")
    if "[" in freq:
        pattern = list(eval(freq))  # Megatron's moe_freq_type evaluates the list expression
    else:
        pattern = [1 if i % int(freq) == 0 else 0 for i in range(num_layers)]
    assert len(pattern) == num_layers, "invalid --moe-layer-freq pattern length"
    capacity = go.flag_value(flags, "--moe-expert-capacity-factor")
    scaling = go.flag_value(flags, "--moe-router-topk-scaling-factor")
    groups = go.flag_value(flags, "--moe-router-num-groups")
    group_topk = go.flag_value(flags, "--moe-router-group-topk")
    shared = go.flag_value(flags, "--moe-shared-expert-intermediate-size")
    ffn = go.flag_value(flags, "--moe-ffn-hidden-size")
    return {
        "experts": experts, "pattern": pattern, "topk": int(go.flag_value(flags, "--moe-router-topk", 2)),
        "score": go.flag_value(flags, "--moe-router-score-function", "softmax"),
        "pre_softmax": go.flag_value(flags, "--moe-router-pre-softmax", False) is True,
        "scaling": None if scaling is None else float(scaling),
        "groups": None if groups is None else int(groups),
        "group_topk": None if group_topk is None else int(group_topk),
        "expert_bias": go.flag_value(flags, "--moe-router-enable-expert-bias", False) is True,
        "bias_rate": float(go.flag_value(flags, "--moe-router-bias-update-rate", 1e-3)),
        "balancing": go.flag_value(flags, "--moe-router-load-balancing-type", "aux_loss"),
        "aux_coeff": float(go.flag_value(flags, "--moe-aux-loss-coeff", 0.0)),
        "z_coeff": float(go.flag_value(flags, "--moe-z-loss-coeff", 0.0)),
        "capacity_factor": None if capacity is None or float(capacity) < 0 else float(capacity),
        "drop_policy": go.flag_value(flags, "--moe-token-drop-policy", "probs"),
        "pad": go.flag_value(flags, "--moe-pad-expert-input-to-capacity", False) is True,
        "ffn": None if ffn is None else int(ffn),  # None: --ffn-hidden-size (resolved in main)
        "shared": None if shared is None else int(shared),
    }


def expected_shapes(cfg, moe):
    """gpt_oracle's shapes with each MoE layer's MLP replaced by Megatron's router, experts (TEGroupedMLP
    names) and shared expert."""
    shapes = go.expected_shapes(cfg)
    h, E, bias = cfg["hidden_size"], moe["experts"], not cfg["disable_bias_linear"]
    glu = 2 if cfg["swiglu"] else 1
    for layer, is_moe in enumerate(moe["pattern"]):
        if not is_moe:
            continue
        pre = f"decoder.layers.{layer}.mlp."
        for name in [n for n in shapes if n.startswith(pre)]:
            del shapes[name]
        shapes[pre + "router.weight"] = (E, h)
        if bias:
            shapes[pre + "router.bias"] = (E,)
        for e in range(E):
            shapes[pre + f"experts.linear_fc1.weight{e}"] = (glu * moe["ffn"], h)
            shapes[pre + f"experts.linear_fc2.weight{e}"] = (h, moe["ffn"])
            if bias:
                shapes[pre + f"experts.linear_fc1.bias{e}"] = (glu * moe["ffn"],)
                shapes[pre + f"experts.linear_fc2.bias{e}"] = (h,)
        if moe["shared"]:
            shapes[pre + "shared_experts.linear_fc1.weight"] = (glu * moe["shared"], h)
            shapes[pre + "shared_experts.linear_fc2.weight"] = (h, moe["shared"])
    return shapes


def top_k(scores, k):
    """Indices [T, k] of the k largest entries of each row (no gradient)."""
    return torch.topk(scores.detach(), k, dim=-1).indices


def group_limited_top_k(scores, k, groups, group_topk):
    """Megatron's group_limited_topk: experts in `groups` contiguous groups; each group scored by the
    sum of its top (k // group_topk) entries; only the best `group_topk` groups are eligible."""
    T, E = scores.shape
    grouped = scores.detach().view(T, groups, E // groups)
    group_scores = grouped.topk(k // group_topk, dim=-1).values.sum(dim=-1)  # [T, groups]
    chosen = group_scores.topk(group_topk, dim=-1).indices
    eligible = torch.zeros(T, groups, dtype=torch.bool).scatter(1, chosen, True)
    eligible = eligible[:, :, None].expand(T, groups, E // groups).reshape(T, E)
    return top_k(scores.detach().masked_fill(~eligible, float("-inf")), k)


def sinkhorn(logits):
    """Megatron's moe_utils.sinkhorn (S-BASE): the cost exp(logits) [T, E] scaled by rows d0 [T] and
    columns d1 [E] toward row sums 1/T and column sums 1/E, until the mean change of d1 <= 1e-4."""
    cost = torch.exp(logits)
    T, E = cost.shape
    d1, error = torch.ones(E), 1e9
    while error > 1e-4:
        d0 = (1.0 / T) / (cost @ d1 + 1e-8)
        new_d1 = (1.0 / E) / (d0 @ cost + 1e-8)
        error = (new_d1 - d1).abs().mean().item()
        d1 = new_d1
    return d1[None, :] * cost * d0[:, None]


class MoeGpt(go.Gpt):
    """gpt_oracle's model with Megatron's MoE layer in the layers of the pattern."""

    def __init__(self, params, cfg, moe, expert_bias=None):
        super().__init__(params, cfg)
        self.moe = moe
        self.training = False  # True: aux losses, expert-bias counting
        self.aux_terms = []  # the current microbatch's aux and z losses
        # Per MoE layer: the expert bias (buffer) and this iteration's counts of kept pairs.
        self.expert_bias = expert_bias or {}
        self.counts = {}
        self.dropped = {}  # per layer, each training microbatch's dropped [token, expert] pairs
        self.sinkhorn_moved = 0  # training tokens whose sinkhorn selection differs from the plain top-k
        self.global_counts, self.global_steps = {}, {}  # global_aux_loss: per layer, reset each iteration
        # global_aux_loss over data-parallel ranks: the microbatch index, the counts a first pass
        # collects per (layer, index), and the running means the second pass uses.
        self.microbatch, self.collect, self.global_override = 0, None, None

    def select(self, logits):
        """(combine probabilities [T, k] with gradient, expert indices [T, k]) of Megatron's
        topk_routing_with_score_function."""
        m = self.moe
        k = m["topk"]

        def choose(scores):
            if m["group_topk"]:
                return group_limited_top_k(scores, k, m["groups"], m["group_topk"])
            return top_k(scores, k)

        if m["balancing"] == "sinkhorn":
            # Router.sinkhorn_load_balancing: the activation's weights (sigmoid for k = 1, else the
            # full softmax), not renormalised; in training the selection (no gradient) from the
            # sinkhorn-balanced logits, in evaluation from the activation.
            act = torch.sigmoid(logits) if k == 1 else torch.softmax(logits, dim=-1)
            idx = top_k(act, k)
            if self.training and not m.get("sinkhorn_off"):
                plain, idx = idx, top_k(sinkhorn(logits.detach()), k)
                self.sinkhorn_moved += int((plain.sort(-1).values != idx.sort(-1).values).any(-1).sum())
            return act.gather(1, idx), idx
        if m["score"] == "softmax":
            if m["pre_softmax"]:
                scores = torch.softmax(logits, dim=-1)
                idx = choose(scores)
                p = scores.gather(1, idx)
            else:
                idx = choose(logits)
                p = torch.softmax(logits.gather(1, idx), dim=-1)
        else:
            scores = torch.sigmoid(logits)
            bias = self.expert_bias.get(self.layer) if m["expert_bias"] else None
            idx = choose(scores if bias is None else scores + bias)
            p = scores.gather(1, idx)
            if k > 1:
                p = p / (p.sum(dim=-1, keepdim=True) + 1e-20)
        if m["scaling"]:
            p = p * m["scaling"]
        return p, idx

    def drop(self, probs, routing):
        """Megatron's apply_router_token_dropping on probs / routing [T, E]."""
        m = self.moe
        T, E = routing.shape
        capacity = math.ceil((T * m["topk"]) / E * m["capacity_factor"])
        if capacity > T:
            return probs, routing
        if m["drop_policy"] == "probs":
            # Ties (identical tokens: the same token id at position 0 of two sequences) to the lower
            # token index, the rule Megatron's spec recommends: a stable descending sort.
            kept = torch.sort(probs.detach(), dim=0, descending=True, stable=True).indices[:capacity]
        else:
            # The earliest routed tokens of each expert (then, only padding, the earliest others).
            order = torch.arange(T, dtype=torch.float64)[:, None]
            key = routing.to(torch.float64) * 2 * T - order  # routed first, each by ascending index
            kept = torch.topk(key, capacity, dim=0).indices
        keep = torch.zeros(T, E, dtype=torch.bool).scatter(0, kept, True)
        new_routing = keep if m["pad"] else routing & keep
        if self.training:
            self.dropped.setdefault(self.layer, []).append((routing & ~keep).nonzero().tolist())
        return probs * new_routing, new_routing

    def aux_losses(self, logits, s, b):
        """The active load-balancing losses and z-loss of one MoE layer and microbatch."""
        m = self.moe
        T, E = logits.shape
        k = m["topk"]
        total = logits.new_zeros(())
        if m["z_coeff"] > 0:
            total = total + m["z_coeff"] * (torch.logsumexp(logits, dim=-1) ** 2).mean()
        if m["aux_coeff"] > 0 and m["balancing"] in ("aux_loss", "seq_aux_loss", "global_aux_loss"):
            if m["score"] == "softmax":
                scores = torch.softmax(logits, dim=-1)
            else:
                scores = torch.sigmoid(logits)
                scores = scores / (scores.sum(dim=-1, keepdim=True) + 1e-20)
            counts = torch.zeros(T, E).scatter(1, top_k(scores, k), 1.0)  # no gradient
            if m["balancing"] == "aux_loss":
                total = total + m["aux_coeff"] * E / (k * T * T) * (scores.sum(0) * counts.sum(0)).sum()
            elif m["balancing"] == "global_aux_loss":
                if self.collect is not None:
                    key = (self.layer, self.microbatch)
                    self.collect[key] = self.collect.get(key, 0) + counts.sum(0)
                if self.global_override is not None:  # several ranks: T over all of them
                    mean, tokens = self.global_override[(self.layer, self.microbatch)], T * m["ranks"]
                else:
                    # The iteration's counts so far over the microbatches seen (Router._apply_global_aux_loss's
                    # global_tokens_per_expert / ga_steps; one rank: T tokens a microbatch).
                    seen = self.global_counts.get(self.layer, torch.zeros(E)) + counts.sum(0)
                    steps = self.global_steps.get(self.layer, 0) + 1
                    self.global_counts[self.layer], self.global_steps[self.layer] = seen, steps
                    mean, tokens = seen / steps, T
                total = total + m["aux_coeff"] * E / (k * tokens * tokens) * (scores.sum(0) * mean).sum()
            else:  # per sequence: [s, b, E], summed over positions, mean over the b sequences
                per_seq = (scores.view(s, b, E).sum(0) * counts.view(s, b, E).sum(0)).sum(-1)  # [b]
                total = total + m["aux_coeff"] / b * (E / (k * s * s) * per_seq).sum()
        return total

    def expert(self, x, prefix, index, ffn):
        """One expert's MLP (index None: the shared expert, no biases) on rows x [n, h]."""
        suffix = "" if index is None else str(index)
        w1, w2 = self.p[prefix + "linear_fc1.weight" + suffix], self.p[prefix + "linear_fc2.weight" + suffix]
        u = x @ w1.T
        biased = index is not None and not self.cfg["disable_bias_linear"]
        if biased:
            u = u + self.p[prefix + "linear_fc1.bias" + suffix]
        out = self.activation(u, ffn) @ w2.T
        return out + self.p[prefix + "linear_fc2.bias" + suffix] if biased else out

    def mlp(self, norm_out, layer):
        m = self.moe
        if not m["pattern"][layer]:
            return super().mlp(norm_out, layer)
        self.layer = layer
        pre = f"decoder.layers.{layer}.mlp."
        s, b, h = norm_out.shape
        x = norm_out.reshape(s * b, h)  # token t = position * b + sample
        T, E = x.shape[0], m["experts"]
        logits = x @ self.p[pre + "router.weight"].T
        if not self.cfg["disable_bias_linear"]:
            logits = logits + self.p[pre + "router.bias"]
        p, idx = self.select(logits)
        probs = torch.zeros(T, E).scatter(1, idx, p)
        routing = torch.zeros(T, E, dtype=torch.bool).scatter(1, idx, True)
        if m["capacity_factor"] is not None:
            probs, routing = self.drop(probs, routing)
        if self.training:
            self.aux_terms.append(self.aux_losses(logits, s, b))
            if m["expert_bias"]:
                self.counts[layer] = self.counts.get(layer, 0) + routing.sum(0).to(torch.float64)
        y = torch.zeros(T, h)
        for e in range(E):
            rows = routing[:, e].nonzero().flatten()
            if rows.numel():
                out = self.expert(x[rows], pre + "experts.", e, m["ffn"])
                y = y.index_add(0, rows, probs[rows, e, None] * out)
        if m["shared"]:
            y = y + self.expert(x, pre + "shared_experts.", None, m["shared"])
        return y.view(s, b, h)

    def update_expert_bias(self):
        """Once per iteration, after the backward: bias += rate * sign(mean count - count)."""
        for layer, counts in self.counts.items():
            bias = self.expert_bias.get(layer, torch.zeros(self.moe["experts"]))
            self.expert_bias[layer] = bias + self.moe["bias_rate"] * torch.sign(counts.mean() - counts)
        self.counts = {}

    def objective(self, tokens, targets):
        """(LM loss + this microbatch's aux terms, LM loss) of one microbatch."""
        self.aux_terms = []
        lm = self.loss(tokens, targets)
        return lm + sum(self.aux_terms, lm.new_zeros(())), lm


def global_running_counts(model, tokens, targets, step):
    """global_aux_loss over data-parallel ranks: per (layer, microbatch index j), the mean over the
    indices 0..j of the counts summed over the ranks' microbatches of that index (no gradient: a
    first forward of every rank's microbatches collects them)."""
    per_rank = tokens.shape[1] // model.moe["ranks"]
    model.collect = {}
    with torch.no_grad():
        for column in range(tokens.shape[1]):
            model.microbatch = column % per_rank
            model.objective(tokens[step, column], targets[step, column])
    collected, model.collect = model.collect, None
    running = {}
    for layer in {layer for layer, _ in collected}:
        seen = 0
        for j in range(per_rank):
            seen = seen + collected[(layer, j)]
            running[(layer, j)] = seen / (j + 1)
    return running


def batch(model, tokens, targets, step):
    """(objective, LM loss): each the mean over the step's microbatches (of every data-parallel rank:
    rank r's microbatch j is column r * m + j)."""
    model.training = True
    model.global_override = None
    if model.moe["ranks"] > 1 and model.moe["balancing"] == "global_aux_loss":
        model.global_override = global_running_counts(model, tokens, targets, step)
    model.global_counts, model.global_steps = {}, {}
    pairs = []
    for column in range(tokens.shape[1]):
        model.microbatch = column % (tokens.shape[1] // model.moe["ranks"])
        pairs.append(model.objective(tokens[step, column], targets[step, column]))
    return torch.stack([o for o, _ in pairs]).mean(), torch.stack([lm for _, lm in pairs]).mean()


def first_gradients(initial, cfg, moe, tokens, targets):
    """Every parameter's gradient of the first global batch, and the model (its dropped pairs)."""
    params = {name: value.clone().requires_grad_(True) for name, value in initial.items()}
    model = MoeGpt(params, cfg, moe)
    batch(model, tokens, targets, 0)[0].backward()
    return {name: value.grad.numpy() for name, value in params.items()}, model


def train(initial, cfg, moe, tokens, targets):
    """STEPS AdamW steps with Megatron's schedule, weight decay on matrices only and clipping; the
    expert bias moved after each backward. Returns (LM losses, grad norms, lrs, params, largest
    |gradient| of each element over the steps)."""
    params = {name: value.clone().requires_grad_(True) for name, value in initial.items()}
    model = MoeGpt(params, cfg, moe)

    def decays(name, param):
        return not (param.dim() == 1 or name.endswith(".bias"))

    groups = [{"params": [p for n, p in params.items() if decays(n, p) == d],
               "weight_decay": cfg["weight_decay"] if d else 0.0} for d in (True, False)]
    optimizer = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["adam_beta1"], cfg["adam_beta2"]),
                                  eps=cfg["adam_eps"])
    losses, norms, lrs = [], [], []
    largest = {name: np.zeros(value.shape) for name, value in params.items()}
    for step in range(cfg["steps"]):
        lr = go.megatron_lr(cfg, step * cfg["global_batch_size"])
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad()
        objective, lm = batch(model, tokens, targets, step)
        objective.backward()
        model.update_expert_bias()
        for name, value in params.items():
            largest[name] = np.maximum(largest[name], np.abs(value.grad.numpy()))
        norms.append(torch.nn.utils.clip_grad_norm_(list(params.values()), cfg["clip_grad"]).item())
        optimizer.step()
        losses.append(lm.item())
        lrs.append(lr)
    return losses, norms, lrs, params, largest, model


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dump-binary", required=True)
    parser.add_argument("--variant", choices=sorted(VARIANTS), required=True)
    parser.add_argument("--work-dir", default=".")
    parser.add_argument("--mpirun", default="mpirun", help="for the data-parallel variants")
    args = parser.parse_args()
    extra, tolerance, compare_final = VARIANTS[args.variant]
    ranks = DATA_PARALLEL.get(args.variant, 1)
    prefix = os.path.join(args.work_dir, f"oracle_moe_{args.variant}")
    flags = go.merge_flags(BASE_FLAGS, extra)
    launcher = [args.mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(ranks)] if ranks > 1 else []
    subprocess.run(launcher + [args.dump_binary, "--output", prefix, "--steps", str(STEPS)] + flags, check=True)

    torch.set_default_dtype(torch.float64)
    failures, report = [], []

    def check(what, error, limit):
        report.append((what, error, limit))
        if not error <= limit:
            failures.append(f"{what}: relative error {error:.3e} > {limit:.1e}")

    with h5py.File(prefix + "_rank0.h5", "r") as f:
        cfg = go.read_config(f)
        names = list(f["initial"].keys())
        initial = {name: torch.tensor(f["initial"][name][()], dtype=torch.float64) for name in names}
        ours_grads = {name: f["grads"][name][()] for name in names}
        ours_final = {name: f["final"][name][()] for name in names}
        tokens = torch.tensor(f["tokens"][()], dtype=torch.long)
        targets = torch.tensor(f["targets"][()], dtype=torch.long)
        ours_logits0, ours_loss0 = f["logits0"][()], float(f["loss0"][()])
        ours_losses, ours_norms, ours_lrs = f["losses"][()], f["grad_norms"][()], f["learning_rates"][()]
    for rank in range(1, ranks):  # the other data-parallel ranks' microbatches, after rank 0's
        with h5py.File(f"{prefix}_rank{rank}.h5", "r") as f:
            tokens = torch.cat([tokens, torch.tensor(f["tokens"][()], dtype=torch.long)], dim=1)
            targets = torch.cat([targets, torch.tensor(f["targets"][()], dtype=torch.long)], dim=1)

    # 0. The configuration the flags ask for, and Megatron's parameter names and shapes for it.
    for key, wanted in go.resolve_from_flags(flags).items():
        dumped = cfg.get("untie_embeddings_and_output_weights" if key == "untied" else key)
        same = (dumped is None and wanted is None) or (
            dumped is not None and wanted is not None
            and (math.isclose(float(dumped), float(wanted), rel_tol=1e-12)
                 if isinstance(wanted, (bool, int, float)) else dumped == wanted))
        if not same:
            failures.append(f"configuration: the dump says {key} = {dumped!r}, the flags ask for {wanted!r}")
        cfg[key] = wanted
    moe = moe_settings(flags, cfg["num_layers"])
    moe["ffn"] = moe["ffn"] or cfg["ffn_hidden_size"]
    moe["ranks"] = ranks
    shapes = expected_shapes(cfg, moe)
    dumped_shapes = {name: tuple(value.shape) for name, value in initial.items()}
    if dumped_shapes != shapes:
        missing, unexpected = sorted(set(shapes) - set(dumped_shapes)), sorted(set(dumped_shapes) - set(shapes))
        wrong = sorted(n for n in set(shapes) & set(dumped_shapes) if shapes[n] != dumped_shapes[n])
        print(f"FAILED: parameters differ from Megatron's: missing {missing}, unexpected {unexpected}, "
              f"shape {[(n, dumped_shapes[n], shapes[n]) for n in wrong]}")
        return 1
    key_bias_is_inert = cfg["position_embedding_type"] != "rope"
    s, b = cfg["seq_length"], cfg["micro_batch_size"]

    # 1. Logits and loss of microbatch 0 (evaluation: no aux losses, no expert-bias counting).
    with torch.no_grad():
        model = MoeGpt(initial, cfg, moe)
        ref_logits = model.logits(tokens[0, 0]).reshape(s * b, -1).numpy()
        ref_loss0 = model.loss(tokens[0, 0], targets[0, 0]).item()
    check("logits (microbatch 0)", go.relative_error(ours_logits0, ref_logits), tolerance)
    check("loss (microbatch 0)", abs(ours_loss0 - ref_loss0) / abs(ref_loss0), tolerance)

    # 2. Gradients of the first global batch, aux losses included.
    ref_grads, model = first_gradients(initial, cfg, moe, tokens, targets)
    for name in names:
        check(f"grad {name}", go.relative_error(ours_grads[name], ref_grads[name]), tolerance)
        if name.endswith("linear_qkv.bias") and key_bias_is_inert:
            keys = go.key_bias_mask(cfg)
            largest = np.abs(ours_grads[name]).max()
            check(f"grad {name} key part is zero (relative to the largest entry)",
                  np.abs(ours_grads[name][keys]).max() / largest, tolerance)
    worst_grad = max(names, key=lambda n: go.relative_error(ours_grads[n], ref_grads[n]))
    router = [n for n in names if ".router." in n]
    for coeff, what in (("aux_coeff", f"the {moe['balancing']} loss"), ("z_coeff", "the z-loss")):
        if moe[coeff] == 0:
            continue
        # Each loss must be seen: the router's gradients are much nearer this reference than one
        # without that loss.
        plain = first_gradients(initial, cfg, dict(moe, **{coeff: 0.0}), tokens, targets)[0]
        mine = max(go.relative_error(ours_grads[n], ref_grads[n]) for n in router)
        to_plain = max(go.relative_error(ours_grads[n], plain[n]) for n in router)
        print(f"  router gradients: max relative error {mine:.3e} to this reference, {to_plain:.3e} to the one "
              f"without {what}")
        if not to_plain > 10 * mine:
            failures.append(f"router gradients are not nearer this reference ({mine:.3e}) than the one without "
                            f"{what} ({to_plain:.3e}) by a factor of 10")
    if moe["balancing"] == "global_aux_loss":
        # The running mean of the counts must be seen: the router's gradients are much nearer this
        # reference than the microbatch-level aux_loss one.
        local = first_gradients(initial, cfg, dict(moe, balancing="aux_loss"), tokens, targets)[0]
        mine = max(go.relative_error(ours_grads[n], ref_grads[n]) for n in router)
        to_local = max(go.relative_error(ours_grads[n], local[n]) for n in router)
        print(f"  router gradients: max relative error {mine:.3e} to this reference, {to_local:.3e} to aux_loss's")
        if not to_local > 10 * max(mine, 1e-12):
            failures.append(f"router gradients are not nearer this reference ({mine:.3e}) than aux_loss's "
                            f"({to_local:.3e}) by a factor of 10")
    if moe["balancing"] == "sinkhorn":
        # Sinkhorn must be seen: it moves selections, and the gradients are much nearer this reference
        # than one selecting by the plain top-k of the same activation.
        print(f"  tokens whose sinkhorn selection differs from the plain top-k (ref, first global batch): "
              f"{model.sinkhorn_moved}")
        if model.sinkhorn_moved == 0:
            failures.append("sinkhorn never changed a selection in the reference: the test cannot see it")
        plain = first_gradients(initial, cfg, dict(moe, sinkhorn_off=True), tokens, targets)[0]
        mine = max(go.relative_error(ours_grads[n], ref_grads[n]) for n in names)
        to_plain = max(go.relative_error(ours_grads[n], plain[n]) for n in names)
        print(f"  gradients: max relative error {mine:.3e} to this reference, {to_plain:.3e} to the plain top-k one")
        if not to_plain > 10 * max(mine, 1e-12):
            failures.append(f"gradients are not nearer this reference ({mine:.3e}) than the plain top-k one "
                            f"({to_plain:.3e}) by a factor of 10")
    if moe["capacity_factor"] is not None:
        # Which pairs were dropped is not in the dump: the gradients must tell this policy from the
        # other and from no dropping at all.
        dropped = {layer: sum(len(d) for d in per_mb) for layer, per_mb in model.dropped.items()}
        print(f"  dropped (token, expert) pairs in the first global batch (ref), per MoE layer: {dropped}")
        if not all(dropped.values()):
            failures.append("the reference dropped no pair in some layer: the test cannot see dropping")
        others = {"dropless": dict(moe, capacity_factor=None),
                  "other policy": dict(moe, drop_policy="position" if moe["drop_policy"] == "probs" else "probs")}
        mine = max(go.relative_error(ours_grads[n], ref_grads[n]) for n in names)
        for what, setting in others.items():
            other = first_gradients(initial, cfg, setting, tokens, targets)[0]
            to_other = max(go.relative_error(ours_grads[n], other[n]) for n in names)
            print(f"  gradients: max relative error {mine:.3e} to this reference, {to_other:.3e} to the {what} one")
            if not to_other > 10 * max(mine, 1e-12):
                failures.append(f"gradients are not nearer this reference ({mine:.3e}) than the {what} one "
                                f"({to_other:.3e}) by a factor of 10")

    # 3. Training steps.
    ref_losses, ref_norms, ref_lrs, params, largest, model = train(initial, cfg, moe, tokens, targets)
    for step, (o, r) in enumerate(zip(ours_losses, ref_losses)):
        check(f"loss step {step + 1}", abs(o - r) / abs(r), tolerance)
    check("grad norms (all steps)", go.relative_error(ours_norms, ref_norms), tolerance)
    check("learning rates (all steps)", go.relative_error(ours_lrs, ref_lrs), 1e-6)
    if moe["expert_bias"]:
        moved = {layer: bias.abs().max().item() for layer, bias in model.expert_bias.items()}
        print(f"  expert bias after {STEPS} steps (ref), largest |entry| per MoE layer: {moved}")
        if not all(v > 0 for v in moved.values()):
            failures.append("the reference's expert bias did not move")
        # The bias must change the selection visibly: the losses of a reference whose bias stays at
        # zero are far from this reference's (and, were ours never updated, ours would match those).
        frozen = train(initial, cfg, dict(moe, bias_rate=0.0), tokens, targets)[0]
        apart = max(abs(f - r) / abs(r) for f, r in zip(frozen, ref_losses))
        ours_to_frozen = max(abs(o - f) / abs(f) for o, f in zip(ours_losses, frozen))
        print(f"  losses: max relative difference {apart:.3e} between this reference and one with the expert bias "
              f"held at zero; ours to that one: {ours_to_frozen:.3e}")
        if not apart > 10 * tolerance:
            failures.append(f"the expert bias does not change the reference's losses visibly ({apart:.3e})")
    if compare_final:
        for name in names:
            ours, ref, seen = ours_final[name], params[name].detach().numpy(), largest[name]
            if name.endswith("linear_qkv.bias") and key_bias_is_inert:
                keep = go.key_bias_mask(cfg, invert=True)  # as gpt_oracle: the key part's gradient is zero
                ours, ref, seen = ours[keep], ref[keep], seen[keep]
            conditioned = (seen == 0) | (seen >= 1e-6 * seen.max())
            if not conditioned.all():
                print(f"  final {name}: {int((~conditioned).sum())} of {conditioned.size} elements with gradients "
                      f"in (0, 1e-6 of the largest) left out")
            check(f"final {name}", go.relative_error(ours[conditioned], ref[conditioned]), tolerance)

    print(f"oracle variant moe_{args.variant}: {len(report)} checks, tolerance {tolerance:.0e}")
    categories = {}
    for what, error, _ in report:
        key = what.split(" ")[0]
        categories[key] = max(categories.get(key, 0.0), error)
    for key, error in categories.items():
        print(f"  max relative error [{key}]: {error:.3e}")
    print(f"  router: max relative error grad {max(go.relative_error(ours_grads[n], ref_grads[n]) for n in router):.3e}"
          + (f", final {max(go.relative_error(ours_final[n], params[n].detach().numpy()) for n in router):.3e}"
             if compare_final else ""))
    print(f"  worst gradient: {worst_grad}")
    print("  losses ours: " + " ".join(f"{v:.6f}" for v in ours_losses))
    print("  losses ref:  " + " ".join(f"{v:.6f}" for v in ref_losses))
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())

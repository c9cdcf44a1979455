// Megatron-LM's activation memory per rank, for predicting runs of Megatron (the published
// measurements the model is validated on) rather than of this trainer. The two differ by design:
// under sequence parallelism this trainer keeps both LayerNorm outputs gathered to the full
// sequence ([s, b, h] each, 2 s b h t bytes per layer; model/layer_activations.h) so that its
// backward needs no second all-gather, while Megatron stashes the local [s/TP, b, h] shard and
// all-gathers it again for the weight gradient (which the time model charges: 4 all-gathers in
// backward). With TP 8 that is 4 s b h against Megatron's 34 s b h / 8 per layer in BF16: the
// trainer's stash is ~1.8x Megatron's, and Megatron's 530B / 1T layouts that ran in 80 GB are
// over the H100's usable memory under the trainer's plan.
//
// Per layer and microbatch in flight (Korthikanti et al. 2022, "Reducing Activation Recomputation
// in Large Transformer Models", section 4, with a flash-style attention core, GQA and SwiGLU
// widths), e bytes per element, rows r = s b, split = TP under sequence parallelism (else 1):
//   LayerNorm inputs                2 r h e / split
//   QKV input (LN1's output)        r h e / split
//   Q, K, V                         r (heads + 2 groups) d e / TP
//   core output (projection input)  r heads d e / TP
//   core statistics (fp32 lse)      4 b heads s / TP           (not under selective recompute)
//   fc1 input (LN2's output)        r h e / split
//   fc1 output, activation output   r (fc1 + ffn) e / TP
//   dropout masks (1 byte)          2 r h / split               (with hidden dropout)
// In BF16 without GQA, SwiGLU and the lse this is Korthikanti's 34 s b h / TP (SP + selective) and
// s b h (10 + 24 / TP) without SP. Full recompute keeps a group's input, r h e / split, and
// rebuilds one group's activations at a time. Korthikanti's 5 a s^2 b term of materialised
// softmax scores is absent: the time model prices a fused attention core too.
//
// Per rank: the schedule's peak chunk-microbatches in flight (pipeline::expected_peak_live: 1F1B's
// min(p - rank, m); interleaved, on the first rank, 2 (p - 1) + (v - 1) p + 1, i.e. Korthikanti's
// L (1 + (p - 1) / (p v)) layers' worth), plus, on the stage holding the output layer, one
// microbatch's logits (BF16 output and FP32 softmax, (e + 4) r V / TP), and one recomputed
// group's activations; the larger of the first and the last stage.
#pragma once

#include <cstdint>

#include "train/args/arguments.h"

namespace gpt::perf {

// One layer's stash per microbatch, without recompute, in Megatron's accounting.
double megatron_layer_stash_bytes(const Arguments& validated);

// The largest rank's activation bytes under Megatron's accounting (validated arguments).
double megatron_activation_bytes(const Arguments& validated, int64_t world_size);

}  // namespace gpt::perf

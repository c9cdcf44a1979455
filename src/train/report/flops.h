// Model FLOPs per iteration, Megatron's num_floating_point_operations (no recomputation counted,
// full s/h attention-score term, i.e. not halved for the causal mask):
//   12 B s l h^2 [ (1 + groups/heads + s/h) * (heads d / h) + g ffn/h + V_padded / (2 l h) ]
// with groups the key/value heads (--num-query-groups with GQA, else heads) and g = 3/2 with
// --swiglu (else 1),
// which for ffn = 4h and d = h/heads is 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
// With mixture of experts (Megatron's transformer_flops) ffn is the layers' mean active width:
//   ffn = (ffn (l - l_moe) + (ffn_moe k + ffn_shared) l_moe) / l
// over the l_moe MoE layers of --moe-layer-freq's pattern, k = --moe-router-topk: each token passes
// through k experts and the shared expert; the router's GEMM, permutation and combine not counted.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace gpt {

double model_flops_per_iteration(const ModelConfig& config, int64_t global_batch_size);

}  // namespace gpt

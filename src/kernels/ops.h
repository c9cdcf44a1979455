// The GPT op set. Every op takes the Context and non-owning views, and dispatches on the context's
// device: the CPU implementation (kernels/cpu) is the reference, plain C++ with FP32 accumulation;
// the CUDA implementation (kernels/cuda) is the product. The ops and their contracts are listed
// once, in kernels/op_list.inc; this header declares them from that list.
//
// Conventions. Activations are stored in the compute dtype T (float32, or bfloat16 with --bf16);
// every reduction accumulates in FP32 (or wider); gradients of parameters are accumulated (+=) into
// FP32 buffers ("main_grad"). Shapes use s = sequence, b = micro batch, h = hidden, n = s*b rows,
// following Megatron's [s, b, h] activation layout. Tensors of rank > 2 are seen as matrices
// [rows, cols] with all leading dims folded into rows where an op says "matrix".
#pragma once

#include <cstdint>
#include <span>

#include "core/context.h"
#include "core/fp8.h"
#include "core/tensor.h"
#include "kernels/dropout_mask.h"
#include "kernels/rope_frequencies.h"

namespace gpt::ops {

struct MatmulOptions {
  bool transpose_a = false;
  bool transpose_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;  // out = alpha * op(a) @ op(b) + beta * out
  Tensor bias;        // [n], added after the product when defined (same dtype as out or float32)
  // When defined: out = gelu(product + bias) and pre_gelu receives product + bias.
  Tensor pre_gelu;
  // FP8 operands (Transformer Engine's per-tensor scaling): when enabled, op(a) and op(b) are cast
  // to FP8 as round_to_fp8(value * scale) in their formats, multiplied with FP32 accumulation, and
  // the product scaled by alpha / (a_scale * b_scale), as cuBLASLt applies the inverse scales.
  struct Fp8Operands {
    bool enabled = false;
    Fp8Format a_format = Fp8Format::kE4M3;
    Fp8Format b_format = Fp8Format::kE4M3;
    float a_scale = 1.0f;
    float b_scale = 1.0f;
  } fp8;
};

// The per-group epilogues of grouped_matmul (model/moe_block.h's expert GEMMs): group g's bias is
// bias[g] when bias is not empty (an undefined entry: none); pre_gelu, when defined, is a tensor
// like the output whose rows take each group's product + bias (the output then its GeLU), as
// MatmulOptions' pre_gelu.
struct GroupedMatmulOptions {
  bool transpose_b = false;
  std::span<const Tensor> bias;
  Tensor pre_gelu;
};

struct AdamWStep {
  float learning_rate = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;         // 1-based, for bias correction
  float grad_scale = 1.0f;  // applied to the gradient first (gradient clipping)
};

// One block of context-parallel attention (attention_block_forward/backward): queries are rows
// [query_row, query_row + query_rows) of this rank's qkv, out and lse, at global sequence
// positions query_position onward; keys and values are rows [key_row, key_row + key_rows) of a
// key/value tensor, at positions key_position onward. A key attends to a query when its position is
// not after the query's (causal over global positions: a diagonal block is causal, a block of
// earlier keys is full). sequence: the whole sequence S (the dropout coordinates are global).
struct AttentionBlock {
  int64_t query_row = 0, query_rows = 0, query_position = 0;
  int64_t key_row = 0, key_rows = 0, key_position = 0;
  int64_t sequence = 0;
  bool accumulate = false;  // forward: merge into out and lse (else overwrite them)
};

// A range of the flat optimizer state for adamw_update_segments.
struct AdamWSegment {
  int64_t offset = 0;         // first element in the flat tensors
  int64_t length = 0;
  bool weight_decay = false;  // step.weight_decay applies (matrices) or not (biases, norms: 0)
};

// A mixture-of-experts router's selection (Megatron-Core's topk_routing_with_score_function,
// model/moe_config.h): from logits [T, E] float32 to each token's k experts and their weights.
struct RouterOptions {
  int64_t topk = 1;
  bool sigmoid = false;      // scores sigmoid(logits); else softmax
  bool pre_softmax = false;  // softmax over all E before the top-k (else over the k selected logits)
  int64_t num_groups = 0;    // group-limited selection (0: none): E / num_groups experts per group
  int64_t group_topk = 0;    //   the top group_topk groups by the sum of their top (topk / group_topk) scores
  float scaling = 1.0f;      // the weights' factor (--moe-router-topk-scaling-factor)
};

// Megatron's sinkhorn (moe_utils.sinkhorn): its tolerance on the mean change of the column
// scaling, its epsilon, and this program's bound on its rounds (Megatron's loop has none; a
// positive matrix converges long before).
inline constexpr double kSinkhornTolerance = 1e-4;
inline constexpr double kSinkhornEpsilon = 1e-8;
inline constexpr int kSinkhornMaxRounds = 10000;

#define GPT_OP(name, parameters, arguments, tensors) void name parameters;
#define GPT_OP_CUSTOM GPT_OP
#include "kernels/op_list.inc"
#undef GPT_OP
#undef GPT_OP_CUSTOM

// matmul with default options: out = a @ b.
inline void matmul(Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b) {
  matmul(ctx, out, a, b, MatmulOptions{});
}

}  // namespace gpt::ops

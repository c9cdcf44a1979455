// One pre-LayerNorm GPT block with tensor-parallel attention and MLP:
//
//   a = LN1(x);  x2 = x + proj(attn(qkv(a)));  b = LN2(x2);  y = x2 + fc2(gelu(fc1(b)))
//
// qkv and fc1 are column-parallel (heads and ffn split across TP), proj and fc2 row-parallel
// (partial sums reduced across TP; their biases added once, after the reduction).
#pragma once

#include <vector>

#include "model/layer_shapes.h"
#include "model/param_store.h"

namespace gpt {

class TransformerLayer {
 public:
  TransformerLayer(const ModelConfig& config, int64_t layer, ParamStore& params, const TensorParallel& tp,
                   const LayerShapes& shapes, LayerWorkspace& workspace, Arena& arena, int stash_slots);

  // input [s_l, b, h] (kept by reference in the stash until backward) -> output [s_l, b, h],
  // owned by this layer's stash slot.
  Tensor forward(Context& ctx, int slot, const Tensor& input);
  // grad_output [s_l, b, h] -> grad_input [s_l, b, h]; grad_input may alias grad_output.
  Tensor backward(Context& ctx, int slot, const Tensor& grad_output, const Tensor& grad_input);

 private:
  // What backward needs from forward, per in-flight microbatch.
  struct Stash {
    Tensor input;                       // [s_l, b, h] view of the previous layer's output
    Tensor ln1, ln1_mean, ln1_rstd;     // [s_l, b, h], [s_l b], [s_l b]
    Tensor ln1_gathered;                // [s, b, h] under sequence parallelism
    Tensor qkv;                         // [s b, 3 heads_l d]  ([s, b, heads_l, 3d] for attention)
    Tensor attention;                   // [s b, heads_l d]
    Tensor lse;                         // [b, heads_l, s]
    Tensor residual;                    // [s_l, b, h]  x + attention block
    Tensor ln2, ln2_mean, ln2_rstd;
    Tensor ln2_gathered;
    Tensor fc1_pre, fc1_act;            // [s, b, ffn_l]
    Tensor output;                      // [s_l, b, h]
  };

  // [s b, parts heads_l d] seen as [s, b, heads_l, parts d], the attention op's layout.
  Tensor heads_view(const Tensor& matrix, int parts) const;

  float epsilon_;
  float attention_scale_;
  const TensorParallel& tp_;
  LayerShapes shapes_;
  LayerWorkspace& ws_;
  Param &ln1_weight_, &ln1_bias_, &qkv_weight_, &qkv_bias_, &proj_weight_, &proj_bias_;
  Param &ln2_weight_, &ln2_bias_, &fc1_weight_, &fc1_bias_, &fc2_weight_, &fc2_bias_;
  std::vector<Stash> stash_;
};

}  // namespace gpt

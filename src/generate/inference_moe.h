// The feed-forward of an MoE layer for generation (InferenceModel's layer, model/moe_block.h's
// arithmetic on plain GEMMs over checkpoint tensors), on the n rows of a ragged batch:
//
//   b [n, h] (N2's output) -> logits = b W_r^T (+ b_r) [n, E] FP32 -> ops::moe_route (the saved
//     score function, pre-softmax, top-k, groups, scaling; the checkpoint's expert bias for the
//     selection of sigmoid routing) -> each token's k experts and weights [n, k]
//   -> the dispatch on the host (model/expert_dispatch.h), dropless: all n k pairs get a row
//   -> ops::moe_permute b into rows [M = n k, h] -> per expert over its rows: fc1_e, the
//      activation (model/mlp_block.h's mlp_up_forward), fc2_e (+ b2_e)
//   -> ops::moe_combine: y_t = sum_j p_tj rows[dest_tj]  (+ the shared expert, a dense MLP on b)
//
// Generation is dropless whatever capacity factor the run trained with (generate/checkpoint_moe.h).
// Tensor parallelism: every rank routes all n rows alike (the router is replicated), runs its
// slice of every expert (fc1 column-, fc2 row-parallel, as the dense MLP) and of the shared
// expert, and returns partial sums the caller reduces over the group; the replicated fc2 biases
// are added on rank 0 only, so that the reduction adds each once.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/memory.h"
#include "generate/tensor_slice.h"
#include "model/config.h"
#include "model/mlp_block.h"

namespace gpt {

class InferenceMoe {
 public:
  // A parameter of the rank's slice on the context's device, [shape] (undefined: absent).
  using WeightFn = std::function<Tensor(const std::string& name, Shape shape)>;

  // `params`: the model's parameters (global names; generate/checkpoint_moe.h's expert biases
  // among them when the model has them, else zeros are used).
  InferenceMoe(const ModelConfig& config, TensorSlice slice, const std::map<std::string, std::vector<float>>& params,
               Context& ctx);

  // out [n, h] = this rank's partial sum of layer `layer`'s MoE block on b [n, h].
  void forward(int64_t layer, const Tensor& b, const Tensor& out, const WeightFn& weight);

 private:
  Tensor scratch(Buffer& buffer, DType dtype, Shape shape);
  // The routed experts: out = their combination for b's rows, from the router's choice.
  void routed_experts(const std::string& prefix, const Tensor& b, const Tensor& out, const WeightFn& weight);
  void shared_expert(const std::string& prefix, const Tensor& b, const Tensor& out, const WeightFn& weight);

  const ModelConfig& config_;
  MoeConfig dropless_;  // the model's, without a capacity
  TensorSlice slice_;
  Context& ctx_;
  MlpActivation activation_;
  int64_t expert_ffn_, expert_fc1_, shared_ffn_, shared_fc1_;  // this rank's widths
  std::map<int64_t, Buffer> expert_bias_;                     // per MoE layer, [E] FP32 on the device
  Buffer logits_, indices_, weights_, source_, destination_, rows_, pre_, act_, expert_out_;
  Buffer shared_pre_, shared_act_, shared_out_;
  // The dispatch's host side.
  std::vector<int32_t> host_indices_;
  std::vector<float> host_weights_;
};

}  // namespace gpt

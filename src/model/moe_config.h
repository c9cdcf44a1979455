// Mixture of experts (Megatron-Core's MoE layer, megatron/core/transformer/moe/): what the model
// reads, resolved from the --moe-* flags (train/configs.cc). An MoE layer replaces the dense MLP
// by a router and num_experts expert MLPs (each as the family's dense MLP, moe_ffn_hidden_size
// wide), plus an optional shared expert that every token passes through:
//
//   x [n, h] -> logits = x W_r^T [n, E] (FP32) -> scores -> top-k experts and their weights p [n, k]
//            -> the tokens permuted expert-major -> each expert's MLP -> unpermuted and combined
//               y_t = sum_j p_tj expert_{e_tj}(x_t)  (+ shared(x_t))
//
// Load balancing adds auxiliary losses (their gradients reach the router only) or, without them,
// an expert bias added to the scores for selection only and moved once per global batch toward
// the mean load (DeepSeek-V3's auxiliary-loss-free balancing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpt {

// --moe-router-score-function.
enum class RouterScore { kSoftmax, kSigmoid };
// --moe-router-load-balancing-type (Megatron's names): the switch transformer's auxiliary loss
// over each microbatch's tokens, per sequence, over the global batch's tokens, Sinkhorn routing,
// none.
enum class LoadBalancing { kAuxLoss, kSeqAuxLoss, kGlobalAuxLoss, kSinkhorn, kNone };
// --moe-token-drop-policy: with a capacity, which tokens an over-full expert keeps: those of the
// highest routing weight, or the first in token order.
enum class TokenDropPolicy { kProbs, kPosition };

struct MoeLoss {
  LoadBalancing type = LoadBalancing::kAuxLoss;
  double coefficient = 0.0;
};

struct MoeConfig {
  int64_t num_experts = 0;  // 0: a dense model
  int64_t ffn_hidden_size = 0;
  // moe_layers[l]: whether global layer l is an MoE layer (--moe-layer-freq's pattern).
  std::vector<bool> moe_layers;
  int64_t shared_expert_size = 0;  // 0: no shared expert
  int64_t topk = 2;
  RouterScore score = RouterScore::kSoftmax;
  bool pre_softmax = false;
  double topk_scaling_factor = 1.0;
  bool router_fp64 = false;
  int64_t num_groups = 0;  // group-limited routing: 0 none
  int64_t group_topk = 0;
  bool expert_bias = false;
  double bias_update_rate = 1e-3;
  std::vector<MoeLoss> losses;  // the auxiliary losses (kAuxLoss / kSeqAuxLoss / kGlobalAuxLoss), each with its coefficient
  bool sinkhorn = false;
  double z_loss_coeff = 0.0;  // 0: none
  double capacity_factor = -1.0;  // negative: dropless
  TokenDropPolicy drop_policy = TokenDropPolicy::kProbs;
  bool pad_to_capacity = false;
  bool per_layer_logging = false;
  // The experts' layout (Megatron's expert grid, parallel/process_grid.h): each of EP ranks holds
  // num_experts / EP experts, each split over ETP ranks (0: the tensor-parallel size).
  int64_t expert_model_parallel = 1;
  int64_t expert_tensor_parallel = 0;
  // --moe-token-dispatcher-type alltoall: only the routed rows travel (model/moe_all_to_all.h);
  // allgather: every member gathers the group's rows. The same numbers either way.
  bool alltoall = false;

  bool enabled() const { return num_experts > 0; }
  int64_t local_experts() const { return num_experts / expert_model_parallel; }
  int64_t expert_tensor_size(int64_t tensor_parallel) const {
    return expert_tensor_parallel > 0 ? expert_tensor_parallel : tensor_parallel;
  }
  // Tokens travel to the ranks of their experts (EP > 1 or ETP != TP: model/moe_block.h's exchange);
  // otherwise every TP rank computes its slice of every expert over its gathered rows.
  bool exchanges_tokens(int64_t tensor_parallel) const {
    return expert_model_parallel > 1 || expert_tensor_size(tensor_parallel) != tensor_parallel;
  }
  bool is_moe_layer(int64_t layer) const {
    return enabled() && layer >= 0 && static_cast<size_t>(layer) < moe_layers.size() && moe_layers[static_cast<size_t>(layer)];
  }
  bool dropless() const { return capacity_factor < 0.0; }
  int64_t moe_layer_count() const;
};

// With a capacity factor: each expert's capacity among `tokens` routed rows (Megatron's
// get_capacity, ceil(tokens k / E x factor), in double as Python computes it), at most `tokens`
// (a larger capacity keeps every token: Megatron's mask is then all true).
int64_t moe_capacity(const MoeConfig& moe, int64_t tokens);

}  // namespace gpt

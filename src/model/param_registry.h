// Every parameter of the global (unsplit) model: its stable global name (Megatron-Core's names),
// global shape, how tensor parallelism splits it, how it is initialized and whether weight decay
// applies. Layouts, checkpoints and the optimizer all refer to parameters through these specs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace gpt {

// How a parameter is divided across tensor-parallel ranks.
enum class TensorSplit {
  kReplicated,  // every TP rank holds all of it (norms, row-parallel biases, position embedding)
  kRows,        // dim 0 split: column-parallel weights and biases, vocab-parallel tables
  kColumns,     // dim 1 split: row-parallel weights
  // dim 0 is two stacked halves, each split like kRows: SwiGLU's fc1 [gate; up], so that a rank
  // holds [gate_r; up_r] and the global tensor stays [gate; up] in every layout (Megatron-Core's
  // checkpoint layout of linear_fc1 with --swiglu).
  kGatedRows,
};

enum class ParamInit { kNormal, kZeros, kOnes };

// Which part of the model a parameter belongs to, for pipeline stage assignment.
enum class ParamSection { kEmbedding, kLayer, kFinal };

// The word embedding, also the LM head unless --untie-embeddings-and-output-weights.
inline constexpr const char* kWordEmbeddingName = "embedding.word_embeddings.weight";

struct ParamSpec {
  std::string name;                  // e.g. "decoder.layers.3.mlp.linear_fc1.weight"
  std::vector<int64_t> global_shape; // rank 1 or 2
  TensorSplit split = TensorSplit::kReplicated;
  ParamInit init = ParamInit::kZeros;
  float init_std = 0.0f;             // for kNormal
  bool weight_decay = false;         // false for biases and norm parameters (Megatron's rule)
  // The word embedding and output_layer.weight: Megatron's is_embedding_or_output_parameter, the
  // parameters --decoupled-lr trains on their own learning rate (not the position embedding).
  bool embedding_or_output = false;
  ParamSection section = ParamSection::kLayer;
  int64_t layer = -1;                // global layer index for kLayer
  // A routed expert's global index e (decoder.layers.L.mlp.experts.linear_fc*.*<e>), -1 for every
  // other parameter. Under expert parallelism EP rank ep holds experts [ep E/EP, (ep+1) E/EP), each
  // split over the expert tensor-parallel group (not TP) and reduced over expert data parallelism.
  int64_t expert = -1;
  // Replicated across TP but fed by rows of the sequence-split stream under sequence parallelism:
  // its gradient must be all-reduced over TP in that case (LayerNorm, row-parallel bias, positions).
  bool sequence_parallel_grad = false;
  // Replicated across TP but fed by only this rank's heads in every layout (--qk-layernorm's
  // q_layernorm / k_layernorm): its gradient is all-reduced over TP whenever TP > 1, as Megatron's
  // finalize_model_grads does for "q_layernorm" / "k_layernorm" parameters.
  bool tensor_parallel_grad = false;

  int64_t global_numel() const;
  // Replicated, and each TP rank computes its gradient from part of the work, so the gradient is
  // summed over TP before the data-parallel reduction: the sequence-parallel ones under SP, the
  // q/k norms whenever TP > 1 (train/data_parallel/gradient_sums.h; the memory plan's staging).
  bool summed_over_tensor_parallel(int tensor_parallel_size, bool sequence_parallel) const {
    return tensor_parallel_size > 1 && (tensor_parallel_grad || (sequence_parallel && sequence_parallel_grad));
  }
};

// All parameters of the model in order of first use in forward (embedding, layers, final norm,
// output layer).
std::vector<ParamSpec> build_param_specs(const ModelConfig& config);

// An expert-parallel rank's share of the routed experts (Megatron's local experts): EP rank `rank`
// of `size` holds experts [rank E / size, (rank + 1) E / size).
struct ExpertShare {
  int rank = 0;
  int size = 1;
};
// Whether a rank with `share` holds `spec`: every parameter but other ranks' experts. `num_experts`
// must be divisible by share.size (the arguments refuse anything else).
bool holds_param(const ParamSpec& spec, int64_t num_experts, ExpertShare share);
// The number of routed experts among `specs` (1 + the largest ParamSpec::expert; 0 without any).
int64_t routed_experts(const std::vector<ParamSpec>& specs);

// The model's persistent tensors that are not parameters (no gradient, no optimizer state), which
// checkpoints keep beside the parameters under the same "model/" names: each MoE layer's expert
// bias with --moe-router-enable-expert-bias, "decoder.layers.<L>.mlp.router.expert_bias" [E]
// float32 (Megatron-Core's persistent buffer of the router). In layer order.
std::vector<std::string> model_buffer_names(const ModelConfig& config);
// The expert bias's name of (global) layer `layer`.
std::string expert_bias_name(int64_t layer);

// Initial value of element `global_index` (row-major in the global shape) of a parameter. Depends
// only on (seed, name, index), never on the layout.
float initial_value(const ParamSpec& spec, uint64_t seed, int64_t global_index);

}  // namespace gpt

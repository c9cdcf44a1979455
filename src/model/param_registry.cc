#include "model/param_registry.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/check.h"
#include "core/philox.h"

namespace gpt {

int64_t ParamSpec::global_numel() const {
  int64_t n = 1;
  for (int64_t d : global_shape) n *= d;
  return n;
}

namespace {

ParamSpec make(std::string name, std::vector<int64_t> shape, TensorSplit split, ParamInit init, float std,
               ParamSection section, int64_t layer) {
  ParamSpec spec;
  spec.name = std::move(name);
  spec.global_shape = std::move(shape);
  spec.split = split;
  spec.init = init;
  spec.init_std = std;
  spec.section = section;
  spec.layer = layer;
  // Megatron: no weight decay for biases and 1-D parameters.
  spec.weight_decay = spec.global_shape.size() > 1;
  spec.sequence_parallel_grad = split == TensorSplit::kReplicated;
  return spec;
}

// LayerNorm: weight and bias; RMSNorm: weight only. With --apply-layernorm-1p the weight is
// zero-centred (the norm scales by 1 + weight) and starts at 0, as Megatron's (TE's zero_centered_gamma).
void add_norm(std::vector<ParamSpec>& specs, const ModelConfig& c, const std::string& prefix, ParamSection section,
              int64_t layer) {
  const int64_t h = c.hidden_size;
  const ParamInit weight_init = c.layernorm_zero_centered_gamma ? ParamInit::kZeros : ParamInit::kOnes;
  specs.push_back(make(prefix + ".weight", {h}, TensorSplit::kReplicated, weight_init, 0, section, layer));
  if (c.has_layernorm_bias()) {
    specs.push_back(make(prefix + ".bias", {h}, TensorSplit::kReplicated, ParamInit::kZeros, 0, section, layer));
  }
}

// --qk-layernorm: the query and key norms of a layer, each over the d = kv_channels dims of a head
// (weight, and bias with LayerNorm), replicated across TP, their gradients summed over TP since
// each rank normalizes only its own heads. Weight decay only with --apply-wd-to-qk-layernorm
// (Megatron's rule, which then decays their biases as well).
void add_qk_norms(std::vector<ParamSpec>& specs, const ModelConfig& c, const std::string& attention_prefix,
                  int64_t layer) {
  const ParamInit weight_init = c.layernorm_zero_centered_gamma ? ParamInit::kZeros : ParamInit::kOnes;
  auto add = [&](const std::string& name, ParamInit init) {
    ParamSpec spec = make(name, {c.kv_channels}, TensorSplit::kReplicated, init, 0, ParamSection::kLayer, layer);
    spec.weight_decay = c.apply_wd_to_qk_layernorm;
    spec.sequence_parallel_grad = false;  // summed over TP in every layout instead
    spec.tensor_parallel_grad = true;
    specs.push_back(std::move(spec));
  };
  for (const char* norm : {".q_layernorm", ".k_layernorm"}) {
    add(attention_prefix + norm + ".weight", weight_init);
    if (c.has_layernorm_bias()) add(attention_prefix + norm + ".bias", ParamInit::kZeros);
  }
}

// An MoE layer's MLP (model/moe_block.h), with Megatron-Core's names: the router's weight [E, h]
// (and bias with linear biases, initialised as the weight), replicated and whole on every TP rank
// (each routes every row: no TP sum); the experts as TEGroupedMLP's linear_fc1.weight<e> /
// linear_fc2.weight<e>, split over TP as the dense MLP's; the shared expert as a dense MLP without
// biases (Megatron refuses them there).
void add_moe(std::vector<ParamSpec>& specs, const ModelConfig& c, const std::string& mlp, int64_t layer) {
  const MoeConfig& moe = c.moe;
  const float std = c.init_method_std;
  const float scaled_std = std / std::sqrt(2.0f * static_cast<float>(c.num_layers));
  const int64_t h = c.hidden_size, gate = c.swiglu ? 2 : 1;
  const TensorSplit fc1_split = c.swiglu ? TensorSplit::kGatedRows : TensorSplit::kRows;
  const auto section = ParamSection::kLayer;
  auto replicated_whole = [&](std::string name, std::vector<int64_t> shape) {
    ParamSpec spec = make(std::move(name), std::move(shape), TensorSplit::kReplicated, ParamInit::kNormal, std,
                          section, layer);
    spec.sequence_parallel_grad = false;
    specs.push_back(std::move(spec));
  };
  replicated_whole(mlp + ".router.weight", {moe.num_experts, h});
  if (c.add_bias_linear) replicated_whole(mlp + ".router.bias", {moe.num_experts});
  for (int64_t e = 0; e < moe.num_experts; ++e) {
    const std::string index = std::to_string(e), fc1 = mlp + ".experts.linear_fc1.", fc2 = mlp + ".experts.linear_fc2.";
    const int64_t ffn = moe.ffn_hidden_size;
    const size_t first = specs.size();
    specs.push_back(make(fc1 + "weight" + index, {gate * ffn, h}, fc1_split, ParamInit::kNormal, std, section, layer));
    if (c.add_bias_linear) {
      specs.push_back(make(fc1 + "bias" + index, {gate * ffn}, fc1_split, ParamInit::kZeros, 0, section, layer));
    }
    specs.push_back(
        make(fc2 + "weight" + index, {h, ffn}, TensorSplit::kColumns, ParamInit::kNormal, scaled_std, section, layer));
    if (c.add_bias_linear) {
      specs.push_back(make(fc2 + "bias" + index, {h}, TensorSplit::kReplicated, ParamInit::kZeros, 0, section, layer));
    }
    for (size_t i = first; i < specs.size(); ++i) specs[i].expert = e;
  }
  if (moe.shared_expert_size > 0) {
    const int64_t ffn = moe.shared_expert_size;
    specs.push_back(make(mlp + ".shared_experts.linear_fc1.weight", {gate * ffn, h}, fc1_split, ParamInit::kNormal, std,
                         section, layer));
    specs.push_back(make(mlp + ".shared_experts.linear_fc2.weight", {h, ffn}, TensorSplit::kColumns,
                         ParamInit::kNormal, scaled_std, section, layer));
  }
}

}  // namespace

std::vector<ParamSpec> build_param_specs(const ModelConfig& c) {
  const float std = c.init_method_std;
  // Megatron's output_layer_init_method: std / sqrt(2 * num_layers) for the two layers that write
  // into the residual stream.
  const float scaled_std = std / std::sqrt(2.0f * static_cast<float>(c.num_layers));
  const int64_t h = c.hidden_size, projection = c.attention_projection_size();
  const bool bias = c.add_bias_linear;
  const TensorSplit fc1_split = c.swiglu ? TensorSplit::kGatedRows : TensorSplit::kRows;
  std::vector<ParamSpec> specs;
  specs.push_back(make(kWordEmbeddingName, {c.padded_vocab_size, h}, TensorSplit::kRows,
                       ParamInit::kNormal, std, ParamSection::kEmbedding, -1));
  specs.back().embedding_or_output = true;
  if (c.position_embedding == PositionEmbedding::kLearnedAbsolute) {
    specs.push_back(make("embedding.position_embeddings.weight", {c.max_position_embeddings, h},
                         TensorSplit::kReplicated, ParamInit::kNormal, std, ParamSection::kEmbedding, -1));
  }
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    const std::string prefix = "decoder.layers." + std::to_string(layer);
    const auto section = ParamSection::kLayer;
    add_norm(specs, c, prefix + ".input_layernorm", section, layer);
    // QKV rows are ordered [groups, (queries per group + 2), d] (Megatron's packing; [heads, 3, d]
    // without GQA) so that a split of groups across TP ranks is contiguous.
    specs.push_back(make(prefix + ".self_attention.linear_qkv.weight", {c.qkv_size(), h}, TensorSplit::kRows,
                         ParamInit::kNormal, std, section, layer));
    if (c.has_qkv_bias()) {
      specs.push_back(make(prefix + ".self_attention.linear_qkv.bias", {c.qkv_size()}, TensorSplit::kRows,
                           ParamInit::kZeros, 0, section, layer));
    }
    if (c.qk_layernorm) add_qk_norms(specs, c, prefix + ".self_attention", layer);
    specs.push_back(make(prefix + ".self_attention.linear_proj.weight", {h, projection}, TensorSplit::kColumns,
                         ParamInit::kNormal, scaled_std, section, layer));
    if (bias) {
      specs.push_back(make(prefix + ".self_attention.linear_proj.bias", {h}, TensorSplit::kReplicated,
                           ParamInit::kZeros, 0, section, layer));
    }
    add_norm(specs, c, prefix + ".pre_mlp_layernorm", section, layer);
    if (c.moe.is_moe_layer(layer)) {
      add_moe(specs, c, prefix + ".mlp", layer);
      continue;
    }
    specs.push_back(make(prefix + ".mlp.linear_fc1.weight", {c.fc1_size(), h}, fc1_split, ParamInit::kNormal, std,
                         section, layer));
    if (bias) {
      specs.push_back(make(prefix + ".mlp.linear_fc1.bias", {c.fc1_size()}, fc1_split, ParamInit::kZeros, 0,
                           section, layer));
    }
    specs.push_back(make(prefix + ".mlp.linear_fc2.weight", {h, c.ffn_hidden_size}, TensorSplit::kColumns,
                         ParamInit::kNormal, scaled_std, section, layer));
    if (bias) {
      specs.push_back(make(prefix + ".mlp.linear_fc2.bias", {h}, TensorSplit::kReplicated, ParamInit::kZeros, 0,
                           section, layer));
    }
  }
  add_norm(specs, c, "decoder.final_layernorm", ParamSection::kFinal, -1);
  if (c.untie_embeddings_and_output_weights) {
    specs.push_back(make("output_layer.weight", {c.padded_vocab_size, h}, TensorSplit::kRows, ParamInit::kNormal,
                         std, ParamSection::kFinal, -1));
    specs.back().embedding_or_output = true;
  }
  return specs;
}

bool holds_param(const ParamSpec& spec, int64_t num_experts, ExpertShare share) {
  if (spec.expert < 0 || share.size == 1) return true;
  GPT_CHECK(share.size > 0 && share.rank >= 0 && share.rank < share.size && num_experts % share.size == 0)
      << num_experts << " experts over expert-parallel rank " << share.rank << " of " << share.size;
  const int64_t local = num_experts / share.size;
  return spec.expert / local == share.rank;
}

int64_t routed_experts(const std::vector<ParamSpec>& specs) {
  int64_t largest = -1;
  for (const ParamSpec& spec : specs) largest = std::max(largest, spec.expert);
  return largest + 1;
}

std::vector<std::string> model_buffer_names(const ModelConfig& c) {
  std::vector<std::string> names;
  if (!c.moe.expert_bias) return names;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    if (c.moe.is_moe_layer(layer)) names.push_back(expert_bias_name(layer));
  }
  return names;
}

std::string expert_bias_name(int64_t layer) {
  return "decoder.layers." + std::to_string(layer) + ".mlp.router.expert_bias";
}

float initial_value(const ParamSpec& spec, uint64_t seed, int64_t global_index) {
  switch (spec.init) {
    case ParamInit::kZeros: return 0.0f;
    case ParamInit::kOnes: return 1.0f;
    case ParamInit::kNormal: {
      const uint64_t key = philox_key(seed, spec.name);
      return static_cast<float>(philox_normal(key, static_cast<uint64_t>(global_index)) * spec.init_std);
    }
  }
  GPT_FATAL() << "unknown init for " << spec.name;
  return 0.0f;
}

}  // namespace gpt

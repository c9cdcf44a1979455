#include "hf/hf_moe.h"

#include <charconv>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/checked_math.h"

namespace gpt {
namespace {

// The shortest decimal text that reads back as the same number.
std::string number_text(double value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

std::string float_text(float value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

std::function<int64_t(int64_t)> offset_by(int64_t offset) {
  return [offset](int64_t i) { return i + offset; };
}

// Hugging Face's router_aux_loss_coef from the run's aux_loss coefficient (hf_moe.h), 0 without one.
double hf_aux_coefficient(const ModelConfig& c) {
  for (const MoeLoss& loss : c.moe.losses) {
    if (loss.type == LoadBalancing::kAuxLoss) {
      return loss.coefficient * static_cast<double>(c.moe.moe_layer_count()) / static_cast<double>(c.moe.topk);
    }
  }
  return 0.0;
}

absl::Status refuse(const std::string& path, const std::string& why) {
  return absl::FailedPreconditionError(absl::StrCat(path, ": ", why, " does not map to this program's models"));
}

}  // namespace

bool is_hf_moe_family(HfFamily family) { return family == HfFamily::kMixtral || family == HfFamily::kQwen3Moe; }

bool is_hf_moe_model_type(const std::string& type) { return type == "mixtral" || type == "qwen3_moe"; }

const char* hf_architecture(HfFamily family) {
  switch (family) {
    case HfFamily::kGpt2: return "GPT2LMHeadModel";
    case HfFamily::kLlama: return "LlamaForCausalLM";
    case HfFamily::kQwen2: return "Qwen2ForCausalLM";
    case HfFamily::kMixtral: return "MixtralForCausalLM";
    case HfFamily::kQwen3Moe: return "Qwen3MoeForCausalLM";
  }
  return "";
}

absl::StatusOr<HfFamily> hf_moe_family(const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  std::vector<std::string> problems;
  if (c.position_embedding != PositionEmbedding::kRope || c.rotary_dim != c.kv_channels || c.rotary_interleaved) {
    problems.push_back("positions other than RoPE over every head dimension in halves (--position-embedding-type "
                       "rope, --rotary-percent 1, no --rotary-interleaved)");
  }
  if (c.normalization != Normalization::kRMSNorm) problems.push_back("LayerNorm (they use --normalization RMSNorm)");
  if (!c.swiglu) problems.push_back("experts without SwiGLU (they use --swiglu)");
  if (c.add_bias_linear) problems.push_back("linear biases (they have none: --disable-bias-linear)");
  if (!c.add_bias_linear && c.has_qkv_bias()) problems.push_back("biases on q, k and v (--add-qkv-bias)");
  if (c.rope_scaling.enabled) problems.push_back("Llama 3.1 RoPE scaling (--use-rope-scaling)");
  if (m.score != RouterScore::kSoftmax) problems.push_back("sigmoid router scores (--moe-router-score-function)");
  if (m.group_topk > 0) problems.push_back("group-limited routing (--moe-router-num-groups / --moe-router-group-topk)");
  if (m.topk_scaling_factor != 1.0) problems.push_back("a routing-weight scale (--moe-router-topk-scaling-factor)");
  if (m.expert_bias) problems.push_back("an expert bias (--moe-router-enable-expert-bias)");
  if (m.sinkhorn) problems.push_back("sinkhorn routing (--moe-router-load-balancing-type sinkhorn)");
  if (m.shared_expert_size > 0) {
    problems.push_back("a shared expert (--moe-shared-expert-intermediate-size; Qwen2-MoE has one, not exported here)");
  }
  const bool qwen3 = c.qk_layernorm;
  if (!qwen3) {
    if (c.moe.moe_layer_count() != c.num_layers) {
      problems.push_back("dense layers (--moe-layer-freq) without --qk-layernorm (Mixtral's layers are all MoE; "
                         "Qwen3-MoE, which has dense layers, has query/key norms)");
    }
    if (m.pre_softmax) {
      problems.push_back("--moe-router-pre-softmax without --qk-layernorm (Mixtral renormalizes the top k; "
                         "Qwen3-MoE with norm_topk_prob false does not, but has query/key norms)");
    }
  }
  if (!problems.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("no Hugging Face MoE family (Mixtral, Qwen3-MoE) holds this model: ",
                                                      absl::StrJoin(problems, ", ")));
  }
  return qwen3 ? HfFamily::kQwen3Moe : HfFamily::kMixtral;
}

std::vector<HfMapping> hf_moe_mappings(const ModelConfig& c, HfFamily family) {
  // Llama's table for the embedding, attention, norms, head and the dense layers' MLPs.
  ModelConfig dense = c;
  dense.moe = MoeConfig{};
  const std::vector<HfMapping> llama = hf_mappings(dense, HfFamily::kLlama);
  const int64_t h = c.hidden_size, f = c.moe.ffn_hidden_size, d = c.kv_channels;
  const bool mixtral = family == HfFamily::kMixtral;
  std::vector<HfMapping> m;
  std::set<int64_t> emitted;
  for (const HfMapping& entry : llama) {
    int64_t layer = -1;
    if (entry.ours.rfind("decoder.layers.", 0) == 0) layer = std::stoll(entry.ours.substr(15));
    const std::string ours = absl::StrCat("decoder.layers.", layer, "."), hf = absl::StrCat("model.layers.", layer, ".");
    if (layer >= 0 && c.moe.is_moe_layer(layer) && entry.ours.rfind(ours + "mlp.", 0) == 0) {
      if (!emitted.insert(layer).second) continue;
      // The layer's sparse block in place of its dense MLP.
      const std::string block = hf + (mixtral ? "block_sparse_moe." : "mlp.");
      m.push_back({block + "gate.weight", {c.moe.num_experts, h}, ours + "mlp.router.weight", offset_by(0)});
      for (int64_t e = 0; e < c.moe.num_experts; ++e) {
        const std::string expert = absl::StrCat(block, "experts.", e, ".");
        const std::string fc1 = absl::StrCat(ours, "mlp.experts.linear_fc1.weight", e);
        const std::string fc2 = absl::StrCat(ours, "mlp.experts.linear_fc2.weight", e);
        m.push_back({expert + (mixtral ? "w1" : "gate_proj") + ".weight", {f, h}, fc1, offset_by(0)});
        m.push_back({expert + (mixtral ? "w3" : "up_proj") + ".weight", {f, h}, fc1, offset_by(f * h)});
        m.push_back({expert + (mixtral ? "w2" : "down_proj") + ".weight", {h, f}, fc2, offset_by(0)});
      }
      continue;
    }
    m.push_back(entry);
    if (!mixtral && entry.hf_name == hf + "self_attn.o_proj.weight") {
      // Qwen3's per-head RMSNorms of the queries and keys (weights [head_dim] shared by the heads).
      m.push_back({hf + "self_attn.q_norm.weight", {d}, ours + "self_attention.q_layernorm.weight", offset_by(0)});
      m.push_back({hf + "self_attn.k_norm.weight", {d}, ours + "self_attention.k_layernorm.weight", offset_by(0)});
    }
  }
  return m;
}

std::string hf_moe_config_json(const ModelConfig& c, HfFamily family, const std::string& ids) {
  const MoeConfig& m = c.moe;
  std::ostringstream o;
  o << "{\n" << ids << "  \"architectures\": [\"" << hf_architecture(family) << "\"],\n  \"model_type\": \""
    << (family == HfFamily::kMixtral ? "mixtral" : "qwen3_moe") << "\",\n  \"vocab_size\": " << c.vocab_size
    << ",\n  \"hidden_size\": " << c.hidden_size << ",\n  \"num_hidden_layers\": " << c.num_layers
    << ",\n  \"num_attention_heads\": " << c.num_attention_heads << ",\n  \"num_key_value_heads\": " << c.query_groups()
    << ",\n  \"head_dim\": " << c.kv_channels << ",\n  \"max_position_embeddings\": " << c.max_position_embeddings
    << ",\n  \"rms_norm_eps\": " << float_text(c.layernorm_epsilon) << ",\n  \"rope_theta\": " << float_text(c.rotary_base)
    << ",\n  \"rope_scaling\": null,\n  \"sliding_window\": null,\n  \"hidden_act\": \"silu\",\n"
    << "  \"attention_dropout\": 0.0,\n  \"num_experts_per_tok\": " << m.topk
    << ",\n  \"router_aux_loss_coef\": " << number_text(hf_aux_coefficient(c)) << ",\n  \"output_router_logits\": false,\n";
  if (family == HfFamily::kMixtral) {
    o << "  \"intermediate_size\": " << m.ffn_hidden_size << ",\n  \"num_local_experts\": " << m.num_experts
      << ",\n  \"router_jitter_noise\": 0.0,\n";
  } else {
    std::vector<int64_t> dense;
    for (int64_t layer = 0; layer < c.num_layers; ++layer) {
      if (!m.is_moe_layer(layer)) dense.push_back(layer);
    }
    o << "  \"intermediate_size\": " << c.ffn_hidden_size << ",\n  \"moe_intermediate_size\": " << m.ffn_hidden_size
      << ",\n  \"num_experts\": " << m.num_experts << ",\n  \"norm_topk_prob\": " << (m.pre_softmax ? "false" : "true")
      << ",\n  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [" << absl::StrJoin(dense, ", ")
      << "],\n  \"attention_bias\": false,\n  \"use_sliding_window\": false,\n  \"max_window_layers\": " << c.num_layers
      << ",\n";
  }
  o << "  \"tie_word_embeddings\": " << (c.untie_embeddings_and_output_weights ? "false" : "true")
    << ",\n  \"torch_dtype\": \"float32\"\n}\n";
  return o.str();
}

absl::StatusOr<HfFamily> read_hf_moe_config(const JsonConfig& j, ModelConfig& c) {
  const bool mixtral = j.text("model_type", "") == "mixtral";
  if (j.has("rope_scaling")) return refuse(j.path(), "rope_scaling (only plain RoPE in the MoE families)");
  GPT_ASSIGN_OR_RETURN(const bool attention_bias, j.boolean("attention_bias", false));
  if (attention_bias) return refuse(j.path(), "attention_bias (biases on q, k, v and o projections)");
  if (j.has("sliding_window")) {
    GPT_ASSIGN_OR_RETURN(const bool sliding, j.boolean("use_sliding_window", mixtral));
    GPT_ASSIGN_OR_RETURN(const int64_t window, j.integer("sliding_window"));
    if (sliding && window < c.max_position_embeddings) {
      return refuse(j.path(), absl::StrCat("sliding_window ", window, " (attention over a window shorter than "
                                           "max_position_embeddings)"));
    }
  }
  // Bounded before the per-layer pattern is built (the safetensors files are checked against the
  // whole table later): no model has more.
  if (c.num_layers > (int64_t{1} << 16)) {
    return absl::DataLossError(absl::StrCat(j.path(), ": num_hidden_layers ", c.num_layers, " is beyond any model's"));
  }
  MoeConfig& m = c.moe;
  m = MoeConfig{};
  GPT_ASSIGN_OR_RETURN(m.num_experts, j.integer(mixtral ? "num_local_experts" : "num_experts", mixtral ? 8 : 128));
  GPT_ASSIGN_OR_RETURN(m.topk, j.integer("num_experts_per_tok", mixtral ? 2 : 8));
  if (m.num_experts < 1) return refuse(j.path(), "no experts (a dense model)");
  m.moe_layers.assign(static_cast<size_t>(c.num_layers), true);
  if (mixtral) {
    m.ffn_hidden_size = c.ffn_hidden_size;  // Mixtral's intermediate_size is the experts'
  } else {
    GPT_ASSIGN_OR_RETURN(m.ffn_hidden_size, j.integer("moe_intermediate_size"));
    GPT_ASSIGN_OR_RETURN(const bool norm_topk_prob, j.boolean("norm_topk_prob", false));
    m.pre_softmax = !norm_topk_prob;
    GPT_ASSIGN_OR_RETURN(const int64_t step, j.integer("decoder_sparse_step", 1));
    GPT_ASSIGN_OR_RETURN(const std::vector<int64_t> dense, j.integers("mlp_only_layers"));
    if (step < 1) return absl::DataLossError(absl::StrCat(j.path(), ": \"decoder_sparse_step\" is 0"));
    for (int64_t layer = 0; layer < c.num_layers; ++layer) {
      m.moe_layers[static_cast<size_t>(layer)] =
          (layer + 1) % step == 0 && std::find(dense.begin(), dense.end(), layer) == dense.end();
    }
    c.qk_layernorm = true;
  }
  if (m.ffn_hidden_size < 1) return absl::DataLossError(absl::StrCat(j.path(), ": the experts' width is 0"));
  GPT_ASSIGN_OR_RETURN(const double coefficient, j.number("router_aux_loss_coef", 0.001));
  const int64_t layers = c.moe.moe_layer_count();
  if (coefficient > 0 && layers > 0) {
    m.losses.push_back({.type = LoadBalancing::kAuxLoss,
                        .coefficient = coefficient * static_cast<double>(m.topk) / static_cast<double>(layers)});
  }
  return mixtral ? HfFamily::kMixtral : HfFamily::kQwen3Moe;
}

std::string hf_moe_import_arguments(const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  std::vector<std::string> pattern;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) pattern.push_back(m.is_moe_layer(layer) ? "1" : "0");
  auto b = [](bool v) { return v ? "true" : "false"; };
  std::vector<std::string> lines = {
      absl::StrCat("--qk-layernorm ", b(c.qk_layernorm)),
      absl::StrCat("--num-experts ", m.num_experts),
      absl::StrCat("--moe-ffn-hidden-size ", m.ffn_hidden_size),
      absl::StrCat("--moe-layer-freq '[", absl::StrJoin(pattern, ","), "]'"),
      absl::StrCat("--moe-router-topk ", m.topk),
      "--moe-router-score-function 'softmax'",
      absl::StrCat("--moe-router-pre-softmax ", b(m.pre_softmax)),
      "--moe-shared-expert-intermediate-size 0",
      "--moe-router-enable-expert-bias false",
      "--moe-expert-capacity-factor -1",
  };
  if (m.losses.empty()) {
    lines.push_back("--moe-router-load-balancing-type 'none'");
  } else {
    lines.push_back("--moe-router-load-balancing-type 'aux_loss'");
    lines.push_back(absl::StrCat("--moe-aux-loss-coeff '", number_text(m.losses[0].coefficient), "'"));
  }
  return absl::StrJoin(lines, "\n") + "\n";
}

std::optional<HfTableSize> hf_moe_table_size(const ModelConfig& config, HfFamily family) {
  // The tables repeat a dense and an MoE block: the sizes of a 0-layer model and of a 1-layer model
  // of each kind give the rest.
  auto size_of = [&](int64_t layers, bool moe) -> std::optional<HfTableSize> {
    ModelConfig c = config;
    c.num_layers = layers;
    c.moe.moe_layers.assign(static_cast<size_t>(layers), moe);
    CheckedBytes elements = 0;
    int64_t tensors = 0;
    for (const HfMapping& m : hf_moe_mappings(c, family)) {
      CheckedBytes volume = 1;
      for (int64_t d : m.hf_shape) volume = volume * d;
      elements = elements + volume;
      ++tensors;
    }
    if (!elements.value()) return std::nullopt;
    return HfTableSize{tensors, *elements.value()};
  };
  const std::optional<HfTableSize> base = size_of(0, false), dense = size_of(1, false), sparse = size_of(1, true);
  if (!base || !dense || !sparse) return std::nullopt;
  const int64_t moe_layers = config.moe.moe_layer_count(), dense_layers = config.num_layers - moe_layers;
  const CheckedBytes tensors = CheckedBytes(dense->tensors - base->tensors) * dense_layers +
                               CheckedBytes(sparse->tensors - base->tensors) * moe_layers + base->tensors;
  const CheckedBytes elements = CheckedBytes(dense->elements - base->elements) * dense_layers +
                                CheckedBytes(sparse->elements - base->elements) * moe_layers + base->elements;
  if (!tensors.value() || !elements.value()) return std::nullopt;
  return HfTableSize{*tensors.value(), *elements.value()};
}

}  // namespace gpt

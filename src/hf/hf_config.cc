#include "hf/hf_config.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/checked_math.h"
#include "generate/checkpoint_model.h"
#include "hf/hf_moe.h"

namespace gpt {

std::string hf_float_text(float value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

namespace {

namespace fs = std::filesystem;

absl::Status refuse(const std::string& path, const std::string& why) {
  return absl::FailedPreconditionError(absl::StrCat(path, ": ", why, " does not map to this program's models"));
}

// Llama 3.1's rope_scaling object, or null.
std::string rope_scaling_json(const RopeScaling& s) {
  if (!s.enabled) return "null";
  return absl::StrCat("{\"rope_type\": \"llama3\", \"factor\": ", hf_float_text(s.factor), ", \"low_freq_factor\": ",
                      hf_float_text(s.low_freq_factor), ", \"high_freq_factor\": ", hf_float_text(s.high_freq_factor),
                      ", \"original_max_position_embeddings\": ", s.original_max_position_embeddings, "}");
}

// rope_scaling: none, or Llama 3.1's ("rope_type" or the older "type" "llama3") with Megatron's fixed
// low_freq_factor, high_freq_factor and original_max_position_embeddings.
absl::StatusOr<RopeScaling> rope_scaling(const JsonConfig& j) {
  GPT_ASSIGN_OR_RETURN(const std::optional<JsonConfig> object, j.object("rope_scaling"));
  RopeScaling s;
  if (!object) return s;
  const std::string type = object->text("rope_type", object->text("type", ""));
  if (type != "llama3") {
    return refuse(object->path(), absl::StrCat("rope_type \"", type, "\" (only Llama 3.1's llama3 scaling)"));
  }
  GPT_ASSIGN_OR_RETURN(const double factor, object->number("factor", 0.0));
  GPT_ASSIGN_OR_RETURN(const double low, object->number("low_freq_factor", 1.0));
  GPT_ASSIGN_OR_RETURN(const double high, object->number("high_freq_factor", 4.0));
  GPT_ASSIGN_OR_RETURN(const int64_t context, object->integer("original_max_position_embeddings", 8192));
  if (!(factor > 0.0) || factor > 1e30) {
    return absl::DataLossError(absl::StrCat(object->path(), ": \"factor\" must be a positive number"));
  }
  if (low != s.low_freq_factor || high != s.high_freq_factor || context != s.original_max_position_embeddings) {
    return refuse(object->path(),
                  absl::StrCat("low_freq_factor ", low, ", high_freq_factor ", high, ", original_max_position_embeddings ",
                               context, " (Megatron's --use-rope-scaling fixes them at 1, 4 and 8192)"));
  }
  s.enabled = true;
  s.factor = static_cast<float>(factor);
  return s;
}

// The linears' biases: Llama's attention_bias (q, k, v and o) and mlp_bias, one switch here; Qwen2's
// q, k and v biases (Megatron's --add-qkv-bias with --disable-bias-linear).
absl::Status read_biases(const JsonConfig& j, HfFamily family, ModelConfig& c) {
  if (family == HfFamily::kQwen2) {
    GPT_ASSIGN_OR_RETURN(const bool sliding, j.boolean("use_sliding_window", false));
    if (sliding) return refuse(j.path(), "use_sliding_window (sliding-window attention)");
    c.add_bias_linear = false;
    c.add_qkv_bias = true;
    return absl::OkStatus();
  }
  GPT_ASSIGN_OR_RETURN(const bool attention_bias, j.boolean("attention_bias", false));
  GPT_ASSIGN_OR_RETURN(const bool mlp_bias, j.boolean("mlp_bias", false));
  if (attention_bias != mlp_bias) {
    return refuse(j.path(), "attention_bias != mlp_bias (LlamaForCausalLM's attention_bias also gives o_proj a bias, "
                            "which the models here have only together with the MLP's; biases on q, k and v alone "
                            "are Qwen2ForCausalLM's, model_type qwen2)");
  }
  c.add_bias_linear = attention_bias;
  c.add_qkv_bias = attention_bias;
  return absl::OkStatus();
}

}  // namespace

std::string hf_config_json(const ModelConfig& c, HfFamily family, const HfSpecialTokens& special) {
  std::ostringstream o;
  // The tokenizer's ids an import recorded (generation stops at eos_token_id).
  std::string ids;
  if (!special.eos.empty()) {
    const std::string eos = special.eos.size() == 1 ? absl::StrCat(special.eos[0])
                                                    : absl::StrCat("[", absl::StrJoin(special.eos, ", "), "]");
    absl::StrAppend(&ids, "  \"eos_token_id\": ", eos, ",\n");
  }
  if (special.bos) absl::StrAppend(&ids, "  \"bos_token_id\": ", *special.bos, ",\n");
  const char* tie = c.untie_embeddings_and_output_weights ? "false" : "true";
  if (family == HfFamily::kGpt2) {
    o << "{\n" << ids << "  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
      << "  \"vocab_size\": " << c.vocab_size << ",\n  \"n_positions\": " << c.max_position_embeddings
      << ",\n  \"n_ctx\": " << c.max_position_embeddings << ",\n  \"n_embd\": " << c.hidden_size
      << ",\n  \"n_layer\": " << c.num_layers << ",\n  \"n_head\": " << c.num_attention_heads
      << ",\n  \"n_inner\": " << c.ffn_hidden_size << ",\n  \"layer_norm_epsilon\": " << hf_float_text(c.layernorm_epsilon)
      << ",\n  \"activation_function\": \"" << (c.exact_gelu ? "gelu" : "gelu_new") << "\",\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n"
      << "  \"attn_pdrop\": 0.0,\n  \"scale_attn_weights\": true,\n  \"tie_word_embeddings\": " << tie
      << ",\n  \"torch_dtype\": \"float32\"\n}\n";
  } else if (is_hf_moe_family(family)) {
    return hf_moe_config_json(c, family, ids);
  } else {
    // Qwen2 has biases on q, k and v only; Llama's attention_bias covers o_proj too.
    const bool qwen2 = family == HfFamily::kQwen2;
    const char* bias = c.add_bias_linear ? "true" : "false";
    o << "{\n" << ids << "  \"architectures\": [\"" << (qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM")
      << "\"],\n  \"model_type\": \"" << (qwen2 ? "qwen2" : "llama") << "\",\n"
      << "  \"vocab_size\": " << c.vocab_size << ",\n  \"hidden_size\": " << c.hidden_size
      << ",\n  \"intermediate_size\": " << c.ffn_hidden_size << ",\n  \"num_hidden_layers\": " << c.num_layers
      << ",\n  \"num_attention_heads\": " << c.num_attention_heads << ",\n  \"num_key_value_heads\": " << c.query_groups()
      << ",\n  \"head_dim\": " << c.kv_channels << ",\n  \"max_position_embeddings\": " << c.max_position_embeddings
      << ",\n  \"rms_norm_eps\": " << hf_float_text(c.layernorm_epsilon) << ",\n  \"rope_theta\": " << hf_float_text(c.rotary_base)
      << ",\n  \"rope_scaling\": " << rope_scaling_json(c.rope_scaling) << ",\n  \"hidden_act\": \"silu\",\n";
    if (qwen2) {
      o << "  \"use_sliding_window\": false,\n";
    } else {
      o << "  \"attention_bias\": " << bias << ",\n  \"mlp_bias\": " << bias << ",\n";
    }
    o << "  \"attention_dropout\": 0.0,\n  \"tie_word_embeddings\": " << tie << ",\n  \"torch_dtype\": \"float32\"\n}\n";
  }
  return o.str();
}


absl::StatusOr<ImportedModel> hf_model_from_config(const JsonConfig& j) {
  ModelConfig c;
  HfFamily family;
  double norm_epsilon = 0, rotary_base = 10000;
  const std::string type = j.text("model_type", "");
  if (type == "gpt2") {
    family = HfFamily::kGpt2;
    GPT_ASSIGN_OR_RETURN(c.hidden_size, j.integer("n_embd"));
    GPT_ASSIGN_OR_RETURN(c.num_layers, j.integer("n_layer"));
    GPT_ASSIGN_OR_RETURN(c.num_attention_heads, j.integer("n_head"));
    GPT_ASSIGN_OR_RETURN(c.max_position_embeddings, j.integer("n_positions"));
    const std::optional<int64_t> default_inner = checked_multiply(4, c.hidden_size);
    if (!default_inner) return absl::DataLossError(absl::StrCat(j.path(), ": n_embd ", c.hidden_size, " is too large"));
    GPT_ASSIGN_OR_RETURN(c.ffn_hidden_size, j.integer("n_inner", *default_inner));
    GPT_ASSIGN_OR_RETURN(norm_epsilon, j.number("layer_norm_epsilon", 1e-5));
    c.layernorm_epsilon = static_cast<float>(norm_epsilon);
    const std::string act = j.text("activation_function", "gelu_new");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
      return refuse(j.path(), absl::StrCat("activation_function \"", act, "\" (only the tanh GeLU, gelu_new)"));
    }
    GPT_ASSIGN_OR_RETURN(const bool tie, j.boolean("tie_word_embeddings", true));
    c.untie_embeddings_and_output_weights = !tie;
    GPT_ASSIGN_OR_RETURN(const bool scale, j.boolean("scale_attn_weights", true));
    GPT_ASSIGN_OR_RETURN(const bool by_layer, j.boolean("scale_attn_by_inverse_layer_idx", false));
    GPT_ASSIGN_OR_RETURN(const bool cross, j.boolean("add_cross_attention", false));
    if (!scale || by_layer || cross) {
      return refuse(j.path(), "scale_attn_weights false, scale_attn_by_inverse_layer_idx or add_cross_attention");
    }
    if (c.num_attention_heads < 1 || c.hidden_size % c.num_attention_heads != 0) {
      return absl::DataLossError(absl::StrCat(j.path(), ": n_embd is not a multiple of n_head"));
    }
    c.kv_channels = c.hidden_size / c.num_attention_heads;
    c.position_embedding = PositionEmbedding::kLearnedAbsolute;
  } else if (type == "llama" || type == "qwen2" || is_hf_moe_model_type(type)) {
    // The MoE families read Llama's fields here, then their own (read_hf_moe_config).
    const bool moe = is_hf_moe_model_type(type);
    family = type == "qwen2" ? HfFamily::kQwen2 : HfFamily::kLlama;
    GPT_ASSIGN_OR_RETURN(c.hidden_size, j.integer("hidden_size"));
    GPT_ASSIGN_OR_RETURN(c.ffn_hidden_size, j.integer("intermediate_size"));
    GPT_ASSIGN_OR_RETURN(c.num_layers, j.integer("num_hidden_layers"));
    GPT_ASSIGN_OR_RETURN(c.num_attention_heads, j.integer("num_attention_heads"));
    if (c.num_attention_heads < 1) return absl::DataLossError(absl::StrCat(j.path(), ": num_attention_heads < 1"));
    GPT_ASSIGN_OR_RETURN(const int64_t kv_heads, j.integer("num_key_value_heads", c.num_attention_heads));
    GPT_ASSIGN_OR_RETURN(c.kv_channels, j.integer("head_dim", c.hidden_size / c.num_attention_heads));
    GPT_ASSIGN_OR_RETURN(c.max_position_embeddings, j.integer("max_position_embeddings"));
    GPT_ASSIGN_OR_RETURN(norm_epsilon, j.number("rms_norm_eps", 1e-6));
    GPT_ASSIGN_OR_RETURN(rotary_base, j.number("rope_theta", 10000.0));
    c.layernorm_epsilon = static_cast<float>(norm_epsilon);
    c.rotary_base = static_cast<float>(rotary_base);
    if (!moe) {  // (the MoE families refuse any rope_scaling: read_hf_moe_config)
      GPT_ASSIGN_OR_RETURN(c.rope_scaling, rope_scaling(j));
    }
    const std::string act = j.text("hidden_act", "silu");
    if (act != "silu") return refuse(j.path(), absl::StrCat("hidden_act \"", act, "\" (only SwiGLU's silu)"));
    GPT_RETURN_IF_ERROR(read_biases(j, family, c));
    GPT_ASSIGN_OR_RETURN(const bool tie, j.boolean("tie_word_embeddings", false));
    c.untie_embeddings_and_output_weights = !tie;
    if (kv_heads < 1 || c.num_attention_heads % kv_heads != 0) {
      return absl::DataLossError(absl::StrCat(j.path(), ": num_attention_heads is not a multiple of num_key_value_heads"));
    }
    if (kv_heads != c.num_attention_heads) c.num_query_groups = kv_heads;
    c.position_embedding = PositionEmbedding::kRope;
    c.rotary_dim = c.kv_channels;
    c.normalization = Normalization::kRMSNorm;
    c.swiglu = true;
    if (moe) {
      GPT_ASSIGN_OR_RETURN(family, read_hf_moe_config(j, c));
    }
  } else {
    return refuse(j.path(), absl::StrCat("model_type \"", type, "\" (only gpt2, llama, qwen2, mixtral and qwen3_moe)"));
  }
  GPT_ASSIGN_OR_RETURN(c.vocab_size, j.integer("vocab_size"));
  if (c.vocab_size < 1 || c.num_layers < 1 || c.hidden_size < 1 || c.kv_channels < 1 || c.ffn_hidden_size < 1 ||
      c.max_position_embeddings < 1) {
    return absl::DataLossError(absl::StrCat(j.path(), ": a size is 0"));
  }
  c.seq_length = c.max_position_embeddings;
  return ImportedModel{c, family, norm_epsilon, rotary_base};
}

absl::StatusOr<HfSpecialTokens> hf_special_tokens(const std::string& hf_dir, const JsonConfig& config, int64_t vocab) {
  HfSpecialTokens special;
  std::optional<JsonConfig> generation;
  std::error_code error;
  const fs::path generation_path = fs::path(hf_dir) / "generation_config.json";
  if (fs::exists(generation_path, error)) {
    GPT_ASSIGN_OR_RETURN(generation, JsonConfig::read(generation_path.string()));
  }
  for (const JsonConfig* j : {&config, generation ? static_cast<const JsonConfig*>(&*generation) : nullptr}) {
    if (j == nullptr) continue;
    GPT_ASSIGN_OR_RETURN(std::vector<int64_t> eos, j->integers("eos_token_id"));
    GPT_ASSIGN_OR_RETURN(std::vector<int64_t> bos, j->integers("bos_token_id"));
    for (const auto& [ids, key] : {std::pair{&eos, "eos_token_id"}, std::pair{&bos, "bos_token_id"}}) {
      for (int64_t id : *ids) {
        if (id < 0 || id >= vocab) {
          return absl::DataLossError(absl::StrCat(j->path(), ": \"", key, "\" ", id, " is not in [0, ", vocab, ")"));
        }
      }
    }
    if (bos.size() > 1) return absl::DataLossError(absl::StrCat(j->path(), ": \"bos_token_id\" is a list"));
    if (!eos.empty()) special.eos = eos;
    if (!bos.empty()) special.bos = bos[0];
  }
  return special;
}

std::string hf_import_arguments(const ImportedModel& model, int64_t vocab_multiple, const HfSpecialTokens& special,
                                const HfTokenizerRecord& tokenizer) {
  const ModelConfig& c = model.c;
  const HfFamily family = model.family;
  auto b = [](bool v) { return v ? "true" : "false"; };
  char eps[40];
  std::snprintf(eps, sizeof(eps), "%.17g", model.norm_epsilon);
  // config.json's base where FP32 would turn it into infinity or 0 (validation names the value given).
  char base[40];
  std::snprintf(base, sizeof(base), "%.17g", model.rotary_base);
  if (std::isfinite(c.rotary_base) && (c.rotary_base != 0.0f || model.rotary_base == 0.0)) {
    std::snprintf(base, sizeof(base), "%s", hf_float_text(c.rotary_base).c_str());
  }
  const bool rope = c.position_embedding == PositionEmbedding::kRope;
  std::vector<std::string> lines = {
      absl::StrCat("--num-layers ", c.num_layers),
      absl::StrCat("--hidden-size ", c.hidden_size),
      absl::StrCat("--ffn-hidden-size ", c.ffn_hidden_size),
      absl::StrCat("--num-attention-heads ", c.num_attention_heads),
      absl::StrCat("--kv-channels ", c.kv_channels),
      absl::StrCat("--seq-length ", c.seq_length),
      absl::StrCat("--max-position-embeddings ", c.max_position_embeddings),
      absl::StrCat("--make-vocab-size-divisible-by ", vocab_multiple),
      absl::StrCat("--untie-embeddings-and-output-weights ", b(c.untie_embeddings_and_output_weights)),
      absl::StrCat("--norm-epsilon ", eps),
      absl::StrCat("--position-embedding-type '", rope ? "rope" : "learned_absolute", "'"),
      absl::StrCat("--normalization '", c.normalization == Normalization::kRMSNorm ? "RMSNorm" : "LayerNorm", "'"),
      "--no-position-embedding false",
      "--rotary-percent 1",
      absl::StrCat("--rotary-base ", base),
      absl::StrCat("--swiglu ", b(c.swiglu)),
      absl::StrCat("--group-query-attention ", b(c.num_query_groups > 0)),
      absl::StrCat("--num-query-groups ", c.query_groups()),
      absl::StrCat("--disable-bias-linear ", b(!c.add_bias_linear)),
      absl::StrCat("--add-qkv-bias ", b(c.has_qkv_bias())),
      absl::StrCat("--use-rope-scaling ", b(c.rope_scaling.enabled)),
      absl::StrCat("--rope-scaling-factor ", hf_float_text(c.rope_scaling.factor)),
      "--mock-data false",
  };
  if (!tokenizer.type.empty()) {
    // The tokenizer's files, copied into the checkpoint's iteration directory: their names are
    // relative to it (kTokenizerInCheckpointArgument), so the checkpoint can move.
    lines.push_back(absl::StrCat("--tokenizer-type '", tokenizer.type, "'"));
    if (!tokenizer.vocab_file.empty()) lines.push_back(absl::StrCat("--vocab-file '", tokenizer.vocab_file, "'"));
    if (!tokenizer.merge_file.empty()) lines.push_back(absl::StrCat("--merge-file '", tokenizer.merge_file, "'"));
    if (!tokenizer.tokenizer_model.empty()) {
      lines.push_back(absl::StrCat("--tokenizer-model '", tokenizer.tokenizer_model, "'"));
    }
    lines.push_back("--vocab-size 0");
    lines.push_back(absl::StrCat(kTokenizerInCheckpointArgument, " true"));
    // The embedding's real rows: config.json's vocab_size (a tokenizer may have fewer tokens).
    lines.push_back(absl::StrCat(kHfVocabSizeArgument, " ", c.vocab_size));
  } else if (family == HfFamily::kGpt2 && c.vocab_size == kGpt2BpeVocabularySize) {
    lines.push_back("--tokenizer-type 'GPT2BPETokenizer'");
    lines.push_back("--vocab-size 0");
  } else {
    // NullTokenizer: the real vocabulary is --vocab-size + 1 (Megatron adds the end-of-document id).
    lines.push_back("--tokenizer-type 'NullTokenizer'");
    lines.push_back(absl::StrCat("--vocab-size ", c.vocab_size - 1));
  }
  // Not flags of pretrain_gpt: the Hugging Face tokenizer's ids, for generate and export.
  if (!special.eos.empty()) lines.push_back(absl::StrCat(kHfEosArgument, " '", absl::StrJoin(special.eos, ","), "'"));
  if (special.bos) lines.push_back(absl::StrCat(kHfBosArgument, " ", *special.bos));
  return absl::StrJoin(lines, "\n") + "\n";
}

std::string hf_config_key_of(absl::string_view message, HfFamily family) {
  const bool gpt2 = family == HfFamily::kGpt2;
  const std::pair<const char*, const char*> keys[] = {
      {"--norm-epsilon", gpt2 ? "layer_norm_epsilon" : "rms_norm_eps"},
      {"--rotary-base", "rope_theta"},
      {"--rope-scaling-factor", "rope_scaling.factor"},
      {"--rotary-percent", "head_dim"},
      {"--num-layers", gpt2 ? "n_layer" : "num_hidden_layers"},
      {"--hidden-size", gpt2 ? "n_embd" : "hidden_size"},
      {"--ffn-hidden-size", gpt2 ? "n_inner" : "intermediate_size"},
      {"--num-attention-heads", gpt2 ? "n_head" : "num_attention_heads"},
      {"--kv-channels", gpt2 ? "n_embd" : "head_dim"},
      {"--num-query-groups", "num_key_value_heads"},
      {"--max-position-embeddings", gpt2 ? "n_positions" : "max_position_embeddings"},
      {"--seq-length", gpt2 ? "n_positions" : "max_position_embeddings"},
      {"--vocab-size", "vocab_size"},
      {"--num-experts", family == HfFamily::kMixtral ? "num_local_experts" : "num_experts"},
      {"--moe-router-topk", "num_experts_per_tok"},
      {"--moe-ffn-hidden-size", family == HfFamily::kMixtral ? "intermediate_size" : "moe_intermediate_size"},
      {"--moe-layer-freq", "mlp_only_layers / decoder_sparse_step"},
  };
  size_t first = absl::string_view::npos;
  const char* key = nullptr;
  for (const auto& [flag, name] : keys) {
    const size_t at = message.find(flag);
    if (at < first) {
      first = at;
      key = name;
    }
  }
  return key == nullptr ? std::string() : absl::StrCat(" (its \"", key, "\")");
}


}  // namespace gpt

// config.json of a Hugging Face directory (hf_checkpoint.h): what export writes for a model of ours
// and what import reads back into a ModelConfig, and the saved arguments an import records.
//
//   GPT2LMHeadModel     learned positions, LayerNorm, tanh GeLU, biases everywhere
//   LlamaForCausalLM    RoPE, RMSNorm, SwiGLU, GQA; attention_bias (q, k, v and o) = mlp_bias
//   Qwen2ForCausalLM    the same with biases on q, k and v only (Megatron's --add-qkv-bias with
//                       --disable-bias-linear); no sliding window
// Llama 3.1's rope_scaling {"rope_type": "llama3"} maps to --use-rope-scaling with its factor when its
// other three numbers are Megatron's fixed ones (kernels/rope_frequencies.h); other scalings are refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/status.h"
#include "hf/hf_checkpoint.h"
#include "hf/json_config.h"
#include "model/config.h"

namespace gpt {

// A Hugging Face tokenizer's special ids as an import records them (generate/checkpoint_model.h).
struct HfSpecialTokens {
  std::vector<int64_t> eos;
  std::optional<int64_t> bos;
};

// The tokenizer an import records (hf_tokenizer_files.h): its type and files, as pretrain_gpt's flags
// name them, relative to the checkpoint's iteration directory; empty type: none.
struct HfTokenizerRecord {
  std::string type;  // GPT2BPETokenizer, HuggingFaceTokenizer, GPTSentencePieceTokenizer
  std::string vocab_file, merge_file, tokenizer_model;
};

// The shortest decimal text that reads back as the same float.
std::string hf_float_text(float value);

std::string hf_config_json(const ModelConfig& c, HfFamily family, const HfSpecialTokens& special);

// A config.json's model, with its floating-point fields as config.json gives them (the saved
// arguments carry these, so that validation sees 1e300 and not the FP32 infinity it would become).
// padded_vocab_size is left for the import to set.
struct ImportedModel {
  ModelConfig c;
  HfFamily family;
  double norm_epsilon = 0, rotary_base = 0;
};

// The model a config.json describes, or why it has none here.
absl::StatusOr<ImportedModel> hf_model_from_config(const JsonConfig& j);

// eos_token_id (an id or a list) and bos_token_id: config.json's, each overridden by
// generation_config.json's when that file gives it (transformers' generate reads the latter).
absl::StatusOr<HfSpecialTokens> hf_special_tokens(const std::string& hf_dir, const JsonConfig& config, int64_t vocab);

// The saved arguments an imported checkpoint carries (canonical_arguments' spelling of the flags
// --load compares, and what generate and export read).
std::string hf_import_arguments(const ImportedModel& model, int64_t vocab_multiple, const HfSpecialTokens& special,
                                const HfTokenizerRecord& tokenizer);

// The config.json key behind the first flag a validation message names: " (its \"rms_norm_eps\")",
// or "" when the flag is none of the keys'.
std::string hf_config_key_of(absl::string_view message, HfFamily family);

}  // namespace gpt

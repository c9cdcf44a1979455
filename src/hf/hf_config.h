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

// The model a config.json describes, or why it has none here.
absl::StatusOr<std::pair<ModelConfig, HfFamily>> hf_model_from_config(const JsonConfig& j, const HfImportOptions& options);

// eos_token_id (an id or a list) and bos_token_id: config.json's, each overridden by
// generation_config.json's when that file gives it (transformers' generate reads the latter).
absl::StatusOr<HfSpecialTokens> hf_special_tokens(const std::string& hf_dir, const JsonConfig& config, int64_t vocab);

// The saved arguments an imported checkpoint carries (canonical_arguments' spelling of the flags
// --load compares, and what generate and export read).
std::string hf_import_arguments(const ModelConfig& c, HfFamily family, const HfImportOptions& options,
                                const HfSpecialTokens& special, const HfTokenizerRecord& tokenizer);

}  // namespace gpt

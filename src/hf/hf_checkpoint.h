// Hugging Face interop for ckpt_tool (docs/CHECKPOINTS.md, "Hugging Face directories"):
//
//   export: a checkpoint (any saving layout) to a Hugging Face model directory: config.json and
//     model.safetensors, or model-0000k-of-0000N.safetensors with model.safetensors.index.json when
//     the tensors exceed the shard size. GPT-2 checkpoints in GPT2LMHeadModel's names and Conv1D
//     orientation; Llama-style ones (RoPE, RMSNorm, SwiGLU, GQA) in LlamaForCausalLM's, or
//     Qwen2ForCausalLM's with biases on q, k and v only; MoE ones as MixtralForCausalLM or
//     Qwen3MoeForCausalLM (hf_moe.h); the tokenizer beside them (hf_tokenizer_files.h); config.json
//     in hf_config.h, the tensor tables in hf_mappings.cc.
//   import: such a directory (GPT-2, Llama, Qwen2, Mixtral or Qwen3-MoE, safetensors F32 / BF16 / F16,
//     its tokenizer) into a checkpoint of
//     this program (iteration 0, FP32, TP = PP = DP = 1), loadable with --load DIR --finetune under
//     any layout. Architectures or options that do not map are refused with the reason.
//
// Both directions use one table per family: for every Hugging Face tensor, the parameter of ours
// it comes from and, per element, the element of ours it is, so import is export's inverse.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "generate/checkpoint_model.h"
#include "model/config.h"

namespace gpt {

// kQwen2: Llama's layout with biases on q, k and v only (--add-qkv-bias --disable-bias-linear).
// Mixtral and Qwen3-MoE: src/hf/hf_moe.h.
enum class HfFamily { kGpt2, kLlama, kQwen2, kMixtral, kQwen3Moe };

struct HfMapping {
  std::string hf_name;
  std::vector<int64_t> hf_shape;
  std::string ours;  // global parameter name
  // Element i (row-major) of the Hugging Face tensor is element source(i) of ours.
  std::function<int64_t(int64_t)> source;
};

// The family a configuration exports as, or why it has none.
absl::StatusOr<HfFamily> hf_family(const ModelConfig& config);
std::vector<HfMapping> hf_mappings(const ModelConfig& config, HfFamily family);
// How many tensors and elements hf_mappings would list, counted without building the table (a
// config.json of a billion layers is refused by its size before anything is allocated); nullopt
// when a count overflows int64.
struct HfTableSize {
  int64_t tensors = 0, elements = 0;
};
std::optional<HfTableSize> hf_table_size(const ModelConfig& config, HfFamily family);

struct HfExportOptions {
  std::optional<int64_t> iteration, vocab_size;
  int64_t max_shard_bytes = int64_t{5} << 30;  // as transformers' save_pretrained, "5GB"
  SavedArgumentsCheck check_arguments;          // load_checkpoint_model's
};
absl::Status hf_export(const std::string& checkpoint, const std::string& output_dir, const HfExportOptions& options);

struct HfImportOptions {
  int64_t make_vocab_size_divisible_by = 128;  // the embedding padded as pretrain_gpt pads it
  int64_t tensor_parallel = 1;                 // ... for this TP size
  // The checks the saved arguments must pass before anything is read or written: pretrain_gpt's
  // own (train/args/saved_arguments.h, which ckpt_tool passes; this library cannot link the trainer's).
  std::function<absl::Status(const std::string& saved_arguments)> check_arguments;
};
absl::Status hf_import(const std::string& hf_dir, const std::string& save_dir, const HfImportOptions& options);

}  // namespace gpt

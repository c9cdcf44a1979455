// A model read from a checkpoint for inference: its configuration (from the saved arguments and
// the stored shapes) and every parameter as one FP32 host tensor under its global Megatron-Core
// name. Any saving layout (TP x PP x DP, BF16 or FP32): the reader reassembles global tensors.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_files.h"
#include "generate/tensor_slice.h"
#include "core/status.h"
#include "model/config.h"

namespace gpt {

// GPT-2's BPE vocabulary (encoder.json): 50,000 merges + 256 byte tokens + <|endoftext|>.
inline constexpr int64_t kGpt2BpeVocabularySize = 50257;

struct CheckpointModel {
  ModelConfig config;                                 // global shapes; vocab_size the real vocabulary
  // Global name (no "model/") -> FP32 values: the whole tensor, or this rank's slice under tensor
  // parallelism (generate/tensor_slice.h).
  std::map<std::string, std::vector<float>> params;
  std::map<std::string, std::string> arguments;       // the saving job's flags (strings unquoted)
  std::string tokenizer_type;                         // "GPT2BPETokenizer", "NullTokenizer", "" (mock)
  // Generation stops at any of these (Megatron's end-of-document id, or an imported Hugging Face
  // tokenizer's eos_token_id list); an empty prompt starts from start_id (the end-of-document id,
  // or an imported tokenizer's bos_token_id).
  std::vector<int32_t> eod_ids;
  int32_t start_id = -1;
  // What ckpt_tool import recorded of the Hugging Face tokenizer (empty / none otherwise).
  std::vector<int32_t> hf_eos_ids;
  std::optional<int32_t> hf_bos_id;
  int64_t iteration = 0;
  std::string directory;                              // the checkpoint directory read (iter_<7 digits>)
};


// Saved-argument lines ckpt_tool import adds (no flags of pretrain_gpt): the Hugging Face
// tokenizer's eos_token_id list ('2' or '128001,128009') and bos_token_id.
inline constexpr const char* kHfEosArgument = "--hf-eos-token-ids";
inline constexpr const char* kHfBosArgument = "--hf-bos-token-id";
// ... 'true' when the saved --vocab-file, --merge-file and --tokenizer-model name files inside the
// checkpoint's iteration directory (copied there by the import, so that the checkpoint can move;
// saved_arguments returns them as paths), and config.json's vocab_size (the embedding's real rows,
// which may exceed the tokenizer's).
inline constexpr const char* kTokenizerInCheckpointArgument = "--tokenizer-files-in-checkpoint";
inline constexpr const char* kHfVocabSizeArgument = "--hf-vocab-size";

// The saved arguments as flag -> value, strings unquoted; tokenizer files kept inside the checkpoint
// (kTokenizerInCheckpointArgument) as paths under its iteration directory.
std::map<std::string, std::string> saved_arguments(const CheckpointReader& reader);
// A saved number; an error naming the flag when it is absent or not a number.
absl::StatusOr<int64_t> saved_argument_int(const std::map<std::string, std::string>& args, const std::string& flag);

// The real (unpadded) vocabulary: --vocab-size with --mock-data; --vocab-size + 1 with NullTokenizer
// (Megatron's end-of-document id); GPT-2's 50257 with GPT2BPETokenizer; checked to pad to `padded`.
absl::StatusOr<int64_t> real_vocabulary_size(const std::map<std::string, std::string>& args, int64_t padded,
                                             int64_t tensor_parallel);

// The model configuration of a checkpoint (no parameters read).
absl::StatusOr<ModelConfig> checkpoint_model_config(const CheckpointReader& reader,
                                                    std::optional<int64_t> vocab_override);

// Configuration and FP32 parameters (`slice`: this tensor-parallel rank's part; refused with the
// reason when the TP size does not divide the model).
// `check_arguments` (when set) judges the saved arguments before anything else is read: generate
// and export pass pretrain_gpt's own checks (train/args/saved_arguments.h), so that a checkpoint
// whose saved arguments the trainer would refuse (a norm epsilon of -1, a RoPE base of 0) is
// refused, naming the flag, instead of computing NaN logits.
using SavedArgumentsCheck = std::function<absl::Status(const std::string& saved_arguments)>;
absl::StatusOr<CheckpointModel> load_checkpoint_model(const std::string& given, std::optional<int64_t> iteration,
                                                      std::optional<int64_t> vocab_override = std::nullopt,
                                                      TensorSlice slice = {},
                                                      const SavedArgumentsCheck& check_arguments = {});

// The parameters a model of this configuration has, with global shapes (TP = 1).
std::vector<std::pair<std::string, std::vector<int64_t>>> model_parameter_shapes(const ModelConfig& config);

}  // namespace gpt

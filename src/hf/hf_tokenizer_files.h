// The tokenizer beside a Hugging Face model directory's weights (docs/CHECKPOINTS.md, "Tokenizer").
//
//   export: the files the checkpoint's saved arguments name, under Hugging Face's names:
//     GPT2BPETokenizer             --vocab-file -> vocab.json, --merge-file -> merges.txt
//     HuggingFaceTokenizer         --tokenizer-model (tokenizer.json or its directory) -> tokenizer.json,
//                                  and tokenizer_config.json when it is beside it
//     (GPT)SentencePieceTokenizer  --tokenizer-model -> tokenizer.model
//   import: the first of these the directory holds that this program's tokenizers load —
//     vocab.json + merges.txt (GPT-2 models), tokenizer.json (+ tokenizer_config.json), tokenizer.model
//     (as GPTSentencePieceTokenizer) — copied into the checkpoint's iteration directory, and recorded
//     in its saved arguments by name relative to it, so the checkpoint stays whole when moved.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "generate/checkpoint_model.h"
#include "hf/hf_checkpoint.h"
#include "hf/hf_config.h"

namespace gpt {

// Copies the checkpoint's tokenizer files into `directory`; says what it wrote, or why nothing (a
// checkpoint without a text tokenizer, files no longer readable: the weights export anyway).
absl::StatusOr<std::string> hf_export_tokenizer(const CheckpointModel& model, const std::string& directory);

struct HfFoundTokenizer {
  HfTokenizerRecord record;                                  // empty type: none recorded
  std::vector<std::pair<std::string, std::string>> copies;  // source path -> name in the checkpoint
  std::string note;                                          // what was recorded, or why not
};

// The tokenizer of a Hugging Face directory whose model has `vocab_size` embedding rows.
HfFoundTokenizer hf_find_tokenizer(const std::string& hf_dir, HfFamily family, int64_t vocab_size);

// Copies the found files into `directory` (the import's iteration directory, before its rename).
absl::Status hf_copy_tokenizer(const HfFoundTokenizer& found, const std::string& directory);

}  // namespace gpt

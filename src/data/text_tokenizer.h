// A text tokenizer as pretrain_gpt, preprocess_data and generate use it (Megatron's
// build_tokenizer(): --tokenizer-type with its files). Implementations: GPT2BPETokenizer
// (gpt2_tokenizer.h), SentencePieceTokenizer and GPTSentencePieceTokenizer
// (sentencepiece_tokenizer.h), HuggingFaceTokenizer (hf_tokenizer.h). NullTokenizer has no text.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gpt {

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  // An independent copy for another thread (encode keeps per-object caches).
  virtual std::unique_ptr<TextTokenizer> clone() const = 0;
  // Appends the ids of `text` as Megatron's tokenizer.tokenize(text) gives them.
  virtual void encode(std::string_view text, std::vector<int32_t>& out) = 0;
  // Megatron's tokenizer.detokenize(ids).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // Megatron's tokenizer.eod: the id --append-eod appends and documents are separated by.
  virtual int32_t eod_id() const = 0;
  // Megatron's tokenizer.vocab_size (before padding).
  virtual int64_t vocab_size() const = 0;
};

// The files a tokenizer type reads: --vocab-file and --merge-file (GPT2BPETokenizer), or
// --tokenizer-model (the SentencePiece and Hugging Face types).
struct TokenizerFiles {
  std::string type;
  std::string vocab_file, merge_file, tokenizer_model;
};

// True where --tokenizer-type names a tokenizer with text (not NullTokenizer).
bool is_text_tokenizer_type(std::string_view type);
// Loads --tokenizer-type's tokenizer; an error naming the file or field that is missing,
// unreadable or not supported (a SentencePiece type in a build without libsentencepiece).
absl::StatusOr<std::unique_ptr<TextTokenizer>> load_text_tokenizer(const TokenizerFiles& files);

}  // namespace gpt

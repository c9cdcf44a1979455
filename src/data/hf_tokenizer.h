// Megatron's HuggingFaceTokenizer (transformers' AutoTokenizer over a tokenizer.json) for the
// byte-level BPE models of GPT-2 and Llama 3 style, written here from the file format (no Hugging
// Face library exists on Debian). --tokenizer-model names a directory holding tokenizer.json and
// tokenizer_config.json, or the tokenizer.json itself (its directory's tokenizer_config.json is read).
//
// encode(text), as transformers' tokenizer(text).input_ids (Megatron's tokenize()):
//   1. "added_tokens" are cut out of the text first (leftmost, longest match) and are their ids;
//   2. each other stretch goes through "pre_tokenizer": ByteLevel (GPT-2's regex when use_regex,
//      a space before each piece with add_prefix_space), Split with a regex (Isolated or Removed),
//      or a Sequence of these;
//   3. each piece's bytes are BPE-merged ("model": BPE over the byte alphabet; ignore_merges takes
//      a piece that is itself a token whole);
//   4. "post_processor" TemplateProcessing's single-sequence template adds its special tokens
//      (Llama 3's <|begin_of_text|>); ByteLevel adds none.
// The end-of-document id is tokenizer_config.json's eos_token (Megatron: eos_token_id); the
// vocabulary is the model's plus the added tokens (len(tokenizer)).
// Anything else — another model type, a normalizer, byte_fallback, added tokens with lstrip,
// rstrip or single_word, truncation or padding — is refused with the field named.
#pragma once

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "data/byte_level_bpe.h"
#include "data/regex_split.h"
#include "data/text_tokenizer.h"

namespace gpt {

class HfTokenizer final : public TextTokenizer {
 public:
  static absl::StatusOr<HfTokenizer> load(const std::string& tokenizer_model);

  std::unique_ptr<TextTokenizer> clone() const override { return std::make_unique<HfTokenizer>(*this); }
  void encode(std::string_view text, std::vector<int32_t>& out) override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eod_id() const override { return eod_id_; }
  int64_t vocab_size() const override { return bpe_.size(); }

  // One pre-tokenizer step.
  struct ByteLevelStep {
    bool add_prefix_space = false;
    bool use_regex = true;
  };
  using PreTokenizerStep = std::variant<ByteLevelStep, RegexSplit>;

 private:
  HfTokenizer() = default;
  struct AddedToken {
    std::string content;
    int32_t id;
  };
  // The longest added token starting at text[i], or null.
  const AddedToken* added_token_at(std::string_view text, size_t i) const;
  void encode_stretch(std::string_view text, std::vector<int32_t>& out);

  ByteLevelBpe bpe_;
  bool ignore_merges_ = false;
  std::vector<AddedToken> added_tokens_;                       // longest first
  bool added_first_byte_[256] = {};                            // bytes an added token starts with
  std::vector<PreTokenizerStep> pre_tokenizer_;                // applied in order
  std::vector<int32_t> prefix_ids_, suffix_ids_;               // the post-processor's special tokens
  int32_t eod_id_ = -1;
  absl::flat_hash_map<std::string, std::vector<int32_t>> cache_;  // piece -> ids
  std::vector<std::string> pieces_, next_pieces_;                 // reused across calls
};

}  // namespace gpt

// GPT-2's byte-level BPE tokenizer (Radford et al. 2019; the same as gpt-3-encoder and tiktoken's
// "gpt2" encoding), loaded from vocab.json and merges.txt. Text is pre-tokenized
// (gpt2_pretokenizer.h), each piece's UTF-8 bytes become the byte tokens of GPT-2's
// byte-to-unicode alphabet, and merges are applied lowest rank first. The literal text
// "<|endoftext|>" inside a document is ordinary text, as in Megatron's GPT-2 tokenizer; the
// end-of-document id is only ever appended explicitly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/status.h"
#include "data/byte_level_bpe.h"
#include "data/gpt2_vocabulary.h"
#include "data/text_tokenizer.h"

namespace gpt {

class Gpt2Tokenizer final : public TextTokenizer {
 public:
  static absl::StatusOr<Gpt2Tokenizer> load(const std::string& vocab_json, const std::string& merges_txt);

  std::unique_ptr<TextTokenizer> clone() const override { return std::make_unique<Gpt2Tokenizer>(*this); }
  // Appends the ids of `text` (valid UTF-8 expected; invalid bytes are encoded as bytes).
  void encode(std::string_view text, std::vector<int32_t>& out) override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eod_id() const override { return eod_id_; }
  int64_t vocab_size() const override { return bpe_.size(); }

 private:
  explicit Gpt2Tokenizer(ByteLevelBpe bpe, int32_t eod_id) : bpe_(std::move(bpe)), eod_id_(eod_id) {}

  ByteLevelBpe bpe_;
  int32_t eod_id_;
  absl::flat_hash_map<std::string, std::vector<int32_t>> cache_;  // piece -> ids
  std::vector<std::string_view> pieces_;                          // reused across calls
};

}  // namespace gpt

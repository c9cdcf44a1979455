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
#include "data/gpt2_vocabulary.h"

namespace gpt {

class Gpt2Tokenizer {
 public:
  static absl::StatusOr<Gpt2Tokenizer> load(const std::string& vocab_json, const std::string& merges_txt);

  // Appends the ids of `text` (valid UTF-8 expected; invalid bytes are encoded as bytes).
  void encode(std::string_view text, std::vector<int32_t>& out);
  std::string decode(std::span<const int32_t> ids) const;
  int32_t eod_id() const { return vocabulary_.eod_id; }
  int64_t vocab_size() const { return vocabulary_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  void encode_piece(std::string_view piece, std::vector<int32_t>& out);

  Gpt2Vocabulary vocabulary_;
  int32_t byte_token_[256] = {};                     // id of each byte's single-character token
  uint8_t unicode_to_byte_[512] = {};                // inverse of GPT-2's byte-to-unicode map
  absl::flat_hash_map<uint64_t, Merge> merges_;      // (left, right) -> rank, merged id
  absl::flat_hash_map<std::string, std::vector<int32_t>> cache_;  // piece -> ids
  std::vector<std::string_view> pieces_;             // reused across calls
  std::vector<int32_t> symbols_;
};

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the rest to 256, 257, ...
uint32_t gpt2_byte_to_unicode(uint8_t byte);

}  // namespace gpt

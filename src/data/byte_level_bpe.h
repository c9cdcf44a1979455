// The byte-level BPE shared by GPT-2's tokenizer (gpt2_tokenizer.h) and Hugging Face tokenizer.json
// files (hf_tokenizer.h): a piece's UTF-8 bytes become the tokens of GPT-2's byte-to-unicode
// alphabet (bytes_to_unicode(): printable bytes stand for themselves, the rest for U+0100...), and
// merges are applied lowest rank first, every occurrence left to right, until none applies.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/status.h"

namespace gpt {

class ByteLevelBpe {
 public:
  // `tokens[id]` is the token's text in the byte-to-unicode alphabet ("" for an unused id);
  // `merges` are (left, right) token texts, highest priority first. `source` names the files in
  // errors. Every byte's single-character token must be in the vocabulary, and every merge's
  // parts and result.
  static absl::StatusOr<ByteLevelBpe> build(std::vector<std::string> tokens,
                                            const std::vector<std::pair<std::string, std::string>>& merges,
                                            const std::string& source);

  // Appends the ids of one pre-tokenized piece (any bytes). With `whole_piece_first` (tokenizer.json's
  // "ignore_merges"), a piece whose byte-level text is itself a token is that token, unmerged.
  void encode_piece(std::string_view piece, bool whole_piece_first, std::vector<int32_t>& out);
  // The bytes of `ids`; a token text's characters outside the byte alphabet stand for their own
  // UTF-8 (Hugging Face added tokens such as "<|begin_of_text|>" are stored as plain text).
  void append_bytes(int32_t id, std::string& bytes) const;

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const std::string& token(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
  // The id of a token text, or -1.
  int32_t find(std::string_view text) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  std::vector<std::string> tokens_;                      // by id
  absl::flat_hash_map<std::string, int32_t> ids_;        // token text -> id
  int32_t byte_token_[256] = {};                         // id of each byte's single-character token
  uint8_t unicode_to_byte_[512] = {};                    // inverse of the byte-to-unicode map
  bool in_alphabet_[512] = {};                           // code points of the byte-to-unicode map
  absl::flat_hash_map<uint64_t, Merge> merges_;          // (left, right) -> rank, merged id
  std::vector<int32_t> symbols_;                         // reused across calls
  std::string byte_text_;                                // reused: a piece in the byte alphabet
};

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the rest to 256, 257, ...
uint32_t gpt2_byte_to_unicode(uint8_t byte);

}  // namespace gpt

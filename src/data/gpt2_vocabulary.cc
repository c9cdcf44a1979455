#include "data/gpt2_vocabulary.h"

#include <simdjson.h>

#include "absl/strings/str_cat.h"
#include "data/file_access.h"

namespace gpt {

absl::StatusOr<Gpt2Vocabulary> Gpt2Vocabulary::load(const std::string& vocab_json) {
  GPT_RETURN_IF_ERROR(check_readable_file("--vocab-file", vocab_json));
  simdjson::padded_string text;
  if (simdjson::padded_string::load(vocab_json).get(text) != simdjson::SUCCESS) {
    return absl::NotFoundError(absl::StrCat("cannot read --vocab-file ", vocab_json));
  }
  simdjson::dom::parser parser;
  simdjson::dom::object object;
  if (parser.parse(text).get_object().get(object) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(vocab_json, " is not a JSON object of token -> id (GPT-2 vocab.json)"));
  }
  Gpt2Vocabulary vocabulary;
  for (auto [key, value] : object) {
    int64_t id = -1;
    if (value.get_int64().get(id) != simdjson::SUCCESS || id < 0 || id > 10'000'000) {
      return absl::InvalidArgumentError(absl::StrCat(vocab_json, ": token '", std::string(key), "' has no valid id"));
    }
    if (static_cast<size_t>(id) >= vocabulary.tokens.size()) vocabulary.tokens.resize(static_cast<size_t>(id) + 1);
    vocabulary.tokens[static_cast<size_t>(id)] = std::string(key);
    if (key == "<|endoftext|>") vocabulary.eod_id = static_cast<int32_t>(id);
  }
  if (vocabulary.tokens.empty()) return absl::InvalidArgumentError(absl::StrCat(vocab_json, " holds no tokens"));
  if (vocabulary.eod_id < 0) return absl::InvalidArgumentError(absl::StrCat(vocab_json, " has no <|endoftext|> token"));
  return vocabulary;
}

}  // namespace gpt

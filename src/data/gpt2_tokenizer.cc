#include "data/gpt2_tokenizer.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "data/file_access.h"
#include "data/gpt2_pretokenizer.h"

namespace gpt {
namespace {

// Pieces cached per tokenizer, cleared when this many are held (bounds memory on huge corpora).
constexpr size_t kCacheLimit = 1 << 20;

}  // namespace

absl::StatusOr<Gpt2Tokenizer> Gpt2Tokenizer::load(const std::string& vocab_json, const std::string& merges_txt) {
  GPT_ASSIGN_OR_RETURN(Gpt2Vocabulary vocabulary, Gpt2Vocabulary::load(vocab_json));
  GPT_RETURN_IF_ERROR(check_readable_file("--merge-file", merges_txt));
  std::ifstream in(merges_txt);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read --merge-file ", merges_txt));
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(merges_txt, ":", line_number, ": not a merge ('left right')"));
    }
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  if (merges.empty()) return absl::InvalidArgumentError(absl::StrCat(merges_txt, " holds no merges"));
  const int32_t eod_id = vocabulary.eod_id;
  GPT_ASSIGN_OR_RETURN(ByteLevelBpe bpe, ByteLevelBpe::build(std::move(vocabulary.tokens), merges,
                                                             absl::StrCat(vocab_json, " and ", merges_txt)));
  return Gpt2Tokenizer(std::move(bpe), eod_id);
}

void Gpt2Tokenizer::encode(std::string_view text, std::vector<int32_t>& out) {
  pieces_.clear();
  gpt2_pretokenize(text, pieces_);
  for (std::string_view piece : pieces_) {
    auto it = cache_.find(absl::string_view(piece.data(), piece.size()));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      continue;
    }
    const size_t before = out.size();
    bpe_.encode_piece(piece, /*whole_piece_first=*/false, out);
    if (cache_.size() >= kCacheLimit) cache_.clear();
    cache_.emplace(std::string(piece), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
  }
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (int32_t id : ids) bpe_.append_bytes(id, bytes);
  return bytes;
}

}  // namespace gpt

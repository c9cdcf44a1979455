#include "data/gpt2_tokenizer.h"

#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "data/file_access.h"
#include "data/gpt2_pretokenizer.h"

namespace gpt {
namespace {

// Pieces cached per tokenizer, cleared when this many are held (bounds memory on huge corpora).
constexpr size_t kCacheLimit = 1 << 20;

std::string utf8(uint32_t c) {
  std::string out;
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
  return out;
}

bool printable_byte(uint32_t b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

}  // namespace

uint32_t gpt2_byte_to_unicode(uint8_t byte) {
  if (printable_byte(byte)) return byte;
  uint32_t n = 0;
  for (uint32_t b = 0; b < byte; ++b) n += printable_byte(b) ? 0 : 1;
  return 256 + n;
}

absl::StatusOr<Gpt2Tokenizer> Gpt2Tokenizer::load(const std::string& vocab_json, const std::string& merges_txt) {
  Gpt2Tokenizer tokenizer;
  GPT_ASSIGN_OR_RETURN(tokenizer.vocabulary_, Gpt2Vocabulary::load(vocab_json));
  absl::flat_hash_map<std::string_view, int32_t> ids;
  for (size_t id = 0; id < tokenizer.vocabulary_.tokens.size(); ++id) ids[tokenizer.vocabulary_.tokens[id]] = static_cast<int32_t>(id);
  for (int b = 0; b < 256; ++b) {
    const uint32_t code = gpt2_byte_to_unicode(static_cast<uint8_t>(b));
    auto it = ids.find(utf8(code));
    if (it == ids.end()) return absl::InvalidArgumentError(absl::StrCat(vocab_json, " lacks the token of byte ", b));
    tokenizer.byte_token_[b] = it->second;
    tokenizer.unicode_to_byte_[code] = static_cast<uint8_t>(b);
  }
  GPT_RETURN_IF_ERROR(check_readable_file("--merge-file", merges_txt));
  std::ifstream in(merges_txt);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read --merge-file ", merges_txt));
  std::string line;
  int32_t rank = 0;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(merges_txt, ":", line_number, ": not a merge ('left right')"));
    }
    const std::string left = line.substr(0, space), right = line.substr(space + 1);
    auto l = ids.find(left), r = ids.find(right), m = ids.find(left + right);
    if (l == ids.end() || r == ids.end() || m == ids.end()) {
      return absl::InvalidArgumentError(absl::StrCat(merges_txt, ":", line_number, ": merge '", line,
                                                     "' uses tokens missing from ", vocab_json));
    }
    tokenizer.merges_.try_emplace(pair_key(l->second, r->second), Merge{rank++, m->second});
  }
  if (rank == 0) return absl::InvalidArgumentError(absl::StrCat(merges_txt, " holds no merges"));
  return tokenizer;
}

void Gpt2Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) {
  symbols_.clear();
  for (char c : piece) symbols_.push_back(byte_token_[static_cast<uint8_t>(c)]);
  // GPT-2's bpe(): merge the lowest-ranked adjacent pair, every occurrence left to right, repeat.
  while (symbols_.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max();
    Merge best{};
    for (size_t i = 0; i + 1 < symbols_.size(); ++i) {
      auto it = merges_.find(pair_key(symbols_[i], symbols_[i + 1]));
      if (it != merges_.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best = it->second;
      }
    }
    if (best_rank == std::numeric_limits<int32_t>::max()) break;
    size_t write = 0;
    for (size_t read = 0; read < symbols_.size();) {
      if (read + 1 < symbols_.size()) {
        auto it = merges_.find(pair_key(symbols_[read], symbols_[read + 1]));
        if (it != merges_.end() && it->second.rank == best_rank) {
          symbols_[write++] = best.merged;
          read += 2;
          continue;
        }
      }
      symbols_[write++] = symbols_[read++];
    }
    symbols_.resize(write);
  }
  out.insert(out.end(), symbols_.begin(), symbols_.end());
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
    encode_piece(piece, out);
    if (cache_.size() >= kCacheLimit) cache_.clear();
    cache_.emplace(std::string(piece), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
  }
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    const std::string& token = vocabulary_.tokens.at(static_cast<size_t>(id));
    // The token is UTF-8 text over code points 0..511; each code point stands for one byte.
    for (size_t i = 0; i < token.size();) {
      const auto b0 = static_cast<uint8_t>(token[i]);
      uint32_t code = b0;
      size_t length = 1;
      if (b0 >= 0xC0) {
        code = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3Fu);
        length = 2;
      }
      bytes.push_back(static_cast<char>(unicode_to_byte_[code < 512 ? code : 0]));
      i += length;
    }
  }
  return bytes;
}

}  // namespace gpt

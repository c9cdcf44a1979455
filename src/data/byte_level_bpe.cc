#include "data/byte_level_bpe.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace gpt {
namespace {

void append_utf8(uint32_t c, std::string& out) {
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
}

bool printable_byte(uint32_t b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

// Each byte's character in the byte-to-unicode alphabet, as UTF-8 (computed once).
const std::vector<std::string>& byte_characters() {
  static const std::vector<std::string> characters = [] {
    std::vector<std::string> out(256);
    for (int b = 0; b < 256; ++b) append_utf8(gpt2_byte_to_unicode(static_cast<uint8_t>(b)), out[static_cast<size_t>(b)]);
    return out;
  }();
  return characters;
}

}  // namespace

uint32_t gpt2_byte_to_unicode(uint8_t byte) {
  if (printable_byte(byte)) return byte;
  uint32_t n = 0;
  for (uint32_t b = 0; b < byte; ++b) n += printable_byte(b) ? 0 : 1;
  return 256 + n;
}

absl::StatusOr<ByteLevelBpe> ByteLevelBpe::build(std::vector<std::string> tokens,
                                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                                 const std::string& source) {
  ByteLevelBpe bpe;
  bpe.tokens_ = std::move(tokens);
  for (size_t id = 0; id < bpe.tokens_.size(); ++id) {
    if (!bpe.tokens_[id].empty()) bpe.ids_.try_emplace(bpe.tokens_[id], static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    const int32_t id = bpe.find(byte_characters()[static_cast<size_t>(b)]);
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat(source, " lacks the token of byte ", b));
    bpe.byte_token_[b] = id;
    const uint32_t code = gpt2_byte_to_unicode(static_cast<uint8_t>(b));
    bpe.unicode_to_byte_[code] = static_cast<uint8_t>(b);
    bpe.in_alphabet_[code] = true;
  }
  int32_t rank = 0;
  for (const auto& [left, right] : merges) {
    const int32_t l = bpe.find(left), r = bpe.find(right), m = bpe.find(left + right);
    if (l < 0 || r < 0 || m < 0) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": merge '", left, " ", right, "' (rank ", rank,
                                                     ") uses tokens missing from the vocabulary"));
    }
    // A merge listed twice keeps its first (highest-priority) rank, as the references do.
    bpe.merges_.try_emplace(pair_key(l, r), Merge{rank++, m});
  }
  return bpe;
}

int32_t ByteLevelBpe::find(std::string_view text) const {
  auto it = ids_.find(absl::string_view(text.data(), text.size()));
  return it == ids_.end() ? -1 : it->second;
}

void ByteLevelBpe::encode_piece(std::string_view piece, bool whole_piece_first, std::vector<int32_t>& out) {
  if (whole_piece_first) {
    byte_text_.clear();
    for (char c : piece) byte_text_ += byte_characters()[static_cast<uint8_t>(c)];
    if (const int32_t id = find(byte_text_); id >= 0) {
      out.push_back(id);
      return;
    }
  }
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

void ByteLevelBpe::append_bytes(int32_t id, std::string& bytes) const {
  const std::string& token = tokens_.at(static_cast<size_t>(id));
  // UTF-8 text; each code point of the byte alphabet (below 512) stands for one byte.
  for (size_t i = 0; i < token.size();) {
    const auto b0 = static_cast<uint8_t>(token[i]);
    const size_t length = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    uint32_t code = b0;
    if (length == 2 && i + 1 < token.size()) code = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3Fu);
    if (length <= 2 && code < 512 && in_alphabet_[code]) {
      bytes.push_back(static_cast<char>(unicode_to_byte_[code]));
    } else {
      bytes.append(token, i, length);
    }
    i += length;
  }
}

}  // namespace gpt

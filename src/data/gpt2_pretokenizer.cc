#include "data/gpt2_pretokenizer.h"

#include <unicode/uchar.h>

#include <array>
#include <cstdint>

namespace gpt {
namespace {

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

CharClass unicode_class(uint32_t c) {
  if (u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE)) return CharClass::kSpace;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return CharClass::kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return CharClass::kNumber;
    default:
      return CharClass::kOther;
  }
}

// Classes of the ASCII characters, looked up without ICU (most text is ASCII).
const std::array<CharClass, 128> kAsciiClass = [] {
  std::array<CharClass, 128> table{};
  for (uint32_t c = 0; c < 128; ++c) table[c] = unicode_class(c);
  return table;
}();

struct CodePoint {
  uint32_t value;
  uint32_t bytes;
};

// Decodes one UTF-8 sequence; an invalid byte decodes as itself (class "other", one byte), so the
// scanner always advances and every byte ends up in some piece.
CodePoint decode(std::string_view text, size_t i) {
  const auto b0 = static_cast<uint8_t>(text[i]);
  if (b0 < 0x80) return {b0, 1};
  const size_t remaining = text.size() - i;
  auto continuation = [&](size_t k) { return k < remaining && (static_cast<uint8_t>(text[i + k]) & 0xC0) == 0x80; };
  if ((b0 & 0xE0) == 0xC0 && continuation(1)) {
    const uint32_t c = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu);
    if (c >= 0x80) return {c, 2};
  } else if ((b0 & 0xF0) == 0xE0 && continuation(1) && continuation(2)) {
    const uint32_t c = ((b0 & 0x0Fu) << 12) | ((static_cast<uint8_t>(text[i + 1]) & 0x3Fu) << 6) |
                       (static_cast<uint8_t>(text[i + 2]) & 0x3Fu);
    if (c >= 0x800 && (c < 0xD800 || c > 0xDFFF)) return {c, 3};
  } else if ((b0 & 0xF8) == 0xF0 && continuation(1) && continuation(2) && continuation(3)) {
    const uint32_t c = ((b0 & 0x07u) << 18) | ((static_cast<uint8_t>(text[i + 1]) & 0x3Fu) << 12) |
                       ((static_cast<uint8_t>(text[i + 2]) & 0x3Fu) << 6) | (static_cast<uint8_t>(text[i + 3]) & 0x3Fu);
    if (c >= 0x10000 && c <= 0x10FFFF) return {c, 4};
  }
  return {0xFFFFFFFFu, 1};
}

CharClass class_of(uint32_t c) {
  if (c < 128) return kAsciiClass[c];
  if (c == 0xFFFFFFFFu) return CharClass::kOther;
  return unicode_class(c);
}

// Length of the run of `wanted` class starting at byte i.
size_t run_of(std::string_view text, size_t i, CharClass wanted) {
  size_t j = i;
  while (j < text.size()) {
    const CodePoint cp = decode(text, j);
    if (class_of(cp.value) != wanted) break;
    j += cp.bytes;
  }
  return j - i;
}

// The contraction at i ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d"; lowercase only), or 0.
size_t contraction_at(std::string_view text, size_t i) {
  if (text[i] != '\'' || i + 1 >= text.size()) return 0;
  const char a = text[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 < text.size()) {
    const char b = text[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

}  // namespace

void gpt2_pretokenize(std::string_view text, std::vector<std::string_view>& pieces) {
  size_t i = 0;
  while (i < text.size()) {
    size_t length = contraction_at(text, i);
    if (length == 0) {
      const CodePoint first = decode(text, i);
      const CharClass first_class = class_of(first.value);
      // " ?X+" for X in letters, numbers, other: an optional single space (U+0020) and a run.
      size_t start = i;
      CharClass run_class = first_class;
      if (first.value == ' ' && i + 1 < text.size()) {
        const CharClass next = class_of(decode(text, i + 1).value);
        if (next != CharClass::kSpace) {
          start = i + 1;
          run_class = next;
        }
      }
      if (run_class != CharClass::kSpace) {
        length = (start - i) + run_of(text, start, run_class);
      } else {
        // "\s+(?!\S)" then "\s+": a whitespace run, leaving its last character to the next piece
        // when a non-space follows (so that " word" keeps its space), unless it is the only one.
        const size_t run = run_of(text, i, CharClass::kSpace);
        length = run;
        if (i + run < text.size()) {
          size_t last = i;  // start of the run's last character
          for (size_t j = i; j < i + run; j += decode(text, j).bytes) last = j;
          if (last > i) length = last - i;
        }
      }
    }
    pieces.push_back(text.substr(i, length));
    i += length;
  }
}

}  // namespace gpt

// A Hugging Face "Split" pre-tokenizer's regex (tokenizer.json: {"type": "Split", "pattern":
// {"Regex": ...}}), run by ICU's regex engine over the UTF-8 text. The Rust tokenizers library
// compiles these patterns with Oniguruma, whose \s is Unicode's White_Space property; ICU's \s
// lacks U+000B and U+0085, so \s and \S are rewritten to \p{White_Space} and \P{White_Space}.
// Like Oniguruma (and unlike a DFA), ICU takes alternatives in order at each position.
#pragma once

#include <unicode/uversion.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

U_NAMESPACE_BEGIN
class RegexPattern;
class RegexMatcher;
U_NAMESPACE_END

namespace gpt {

class RegexSplit {
 public:
  enum class Behavior { kIsolated, kRemoved };

  // `pattern` is a regex (or, with `literal`, a plain string); `field` names it in errors.
  static absl::StatusOr<RegexSplit> compile(const std::string& pattern, bool literal, Behavior behavior,
                                            const std::string& field);
  RegexSplit(const RegexSplit& other);
  RegexSplit& operator=(const RegexSplit&) = delete;
  RegexSplit(RegexSplit&&) noexcept;
  ~RegexSplit();

  // Appends `text`'s pieces: each stretch between matches, and each match too with kIsolated
  // (kRemoved drops the matches, as delimiters).
  void split(std::string_view text, std::vector<std::string>& pieces);

 private:
  RegexSplit(std::shared_ptr<const icu::RegexPattern> pattern, Behavior behavior);

  std::shared_ptr<const icu::RegexPattern> pattern_;  // shared by copies (ICU patterns are thread-safe)
  std::unique_ptr<icu::RegexMatcher> matcher_;       // one per copy (matchers are not)
  Behavior behavior_;
};

// Oniguruma's \s and \S as ICU's \p{White_Space} and \P{White_Space}; other escapes unchanged.
std::string oniguruma_to_icu_pattern(std::string_view pattern);

}  // namespace gpt

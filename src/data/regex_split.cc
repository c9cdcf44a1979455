#include "data/regex_split.h"

#include <unicode/regex.h>
#include <unicode/utext.h>

#include "absl/strings/str_cat.h"

namespace gpt {

std::string oniguruma_to_icu_pattern(std::string_view pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 >= pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char next = pattern[++i];
    if (next == 's') {
      out += "\\p{White_Space}";
    } else if (next == 'S') {
      out += "\\P{White_Space}";
    } else {
      out += '\\';
      out += next;
    }
  }
  return out;
}

RegexSplit::RegexSplit(std::shared_ptr<const icu::RegexPattern> pattern, Behavior behavior)
    : pattern_(std::move(pattern)), behavior_(behavior) {}
RegexSplit::RegexSplit(const RegexSplit& other) : pattern_(other.pattern_), behavior_(other.behavior_) {}
RegexSplit::RegexSplit(RegexSplit&&) noexcept = default;
RegexSplit::~RegexSplit() = default;

absl::StatusOr<RegexSplit> RegexSplit::compile(const std::string& pattern, bool literal, Behavior behavior,
                                               const std::string& field) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError where{};
  const std::string icu_pattern = literal ? pattern : oniguruma_to_icu_pattern(pattern);
  std::unique_ptr<icu::RegexPattern> compiled(icu::RegexPattern::compile(
      icu::UnicodeString::fromUTF8(icu_pattern), literal ? UREGEX_LITERAL : 0, where, status));
  if (U_FAILURE(status) || !compiled) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": the regex '", pattern, "' does not compile (",
                                                   u_errorName(status), " at offset ", where.offset, ")"));
  }
  return RegexSplit(std::shared_ptr<const icu::RegexPattern>(std::move(compiled)), behavior);
}

void RegexSplit::split(std::string_view text, std::vector<std::string>& pieces) {
  UErrorCode status = U_ZERO_ERROR;
  // Over the UTF-8 bytes directly: the match offsets are byte offsets (invalid bytes match as U+FFFD).
  UText* utext = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  GPT_CHECK(U_SUCCESS(status)) << u_errorName(status);
  if (!matcher_) {
    matcher_.reset(pattern_->matcher(status));
    GPT_CHECK(U_SUCCESS(status) && matcher_) << u_errorName(status);
  }
  matcher_->reset(utext);
  int64_t previous = 0;
  while (matcher_->find(status) && U_SUCCESS(status)) {
    const int64_t start = matcher_->start64(status), end = matcher_->end64(status);
    if (end == start) continue;  // an empty match splits nothing (as the Rust library skips them)
    if (start > previous) pieces.emplace_back(text.substr(static_cast<size_t>(previous), static_cast<size_t>(start - previous)));
    if (behavior_ == Behavior::kIsolated) {
      pieces.emplace_back(text.substr(static_cast<size_t>(start), static_cast<size_t>(end - start)));
    }
    previous = end;
  }
  GPT_CHECK(U_SUCCESS(status)) << "regex split: " << u_errorName(status);
  if (previous < static_cast<int64_t>(text.size())) pieces.emplace_back(text.substr(static_cast<size_t>(previous)));
  static const icu::UnicodeString kNothing;
  matcher_->reset(kNothing);  // let go of the text before it is closed
  utext_close(utext);
}

}  // namespace gpt

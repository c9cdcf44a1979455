#include "train/args/saved_arguments.h"

#include <cmath>
#include <map>
#include <variant>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "train/args/flag_table.h"
#include "train/args/moe_arguments.h"

namespace gpt {
namespace {

absl::Status malformed(std::string_view flag, const std::string& text, std::string_view what) {
  // The value is echoed at most 60 characters long: a saved text is a file's content.
  const std::string shown = text.size() > 60 ? text.substr(0, 60) + "..." : text;
  return absl::InvalidArgumentError(absl::StrCat(std::string(flag), " '", shown, "' is not ", std::string(what)));
}

// The inverse of flag_table.cc's canonical_text, one function per field type.
absl::Status read_value(std::string_view flag, const std::string& text, int64_t& out) {
  if (!absl::SimpleAtoi(text, &out)) return malformed(flag, text, "a 64-bit integer");
  return absl::OkStatus();
}
absl::Status read_value(std::string_view flag, const std::string& text, double& out) {
  if (!absl::SimpleAtod(text, &out) || !std::isfinite(out)) return malformed(flag, text, "a finite number");
  return absl::OkStatus();
}
absl::Status read_value(std::string_view flag, const std::string& text, bool& out) {
  if (text != "true" && text != "false") return malformed(flag, text, "true or false");
  out = text == "true";
  return absl::OkStatus();
}
absl::Status read_value(std::string_view flag, const std::string& text, std::string& out) {
  if (text.size() < 2 || text.front() != '\'' || text.back() != '\'') return malformed(flag, text, "a quoted text");
  out = text.substr(1, text.size() - 2);
  return absl::OkStatus();
}
absl::Status read_value(std::string_view flag, const std::string& text, std::vector<std::string>& out) {
  out.clear();
  if (text.empty()) return absl::OkStatus();
  if (text.size() < 2 || text.front() != '\'' || text.back() != '\'') return malformed(flag, text, "quoted texts");
  for (absl::string_view item : absl::StrSplit(absl::string_view(text).substr(1, text.size() - 2), "' '")) {
    out.emplace_back(item);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Arguments> arguments_from_saved(const std::string& saved, std::vector<const FlagRow*>* stated) {
  Arguments a;
  for (absl::string_view line : absl::StrSplit(saved, '\n', absl::SkipEmpty())) {
    const std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    const FlagRow* row = find_flag_row(kv.first);
    if (row == nullptr) continue;
    if (stated != nullptr) stated->push_back(row);
    GPT_RETURN_IF_ERROR(
        std::visit([&](auto member) { return read_value(row->flag, kv.second, a.*member); }, row->field));
  }
  return a;
}

absl::Status validate_saved_arguments(const std::string& saved) {
  std::vector<const FlagRow*> stated;
  GPT_ASSIGN_OR_RETURN(Arguments a, arguments_from_saved(saved, &stated));
  resolve_defaults(a);
  // The constraints of the values the text states (an import states no --micro-batch-size, whose
  // default 0 only a command line must replace).
  for (const FlagRow* row : stated) GPT_RETURN_IF_ERROR(check_flag_constraint(*row, a));
  GPT_RETURN_IF_ERROR(validate_model_arguments(a));
  // The mixture-of-experts rules on what the text states (an import's Mixtral / Qwen3-MoE flags).
  return validate_moe_arguments(a);
}

}  // namespace gpt

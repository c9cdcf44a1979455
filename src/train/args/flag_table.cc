#include "train/args/flag_table.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <type_traits>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "train/args/flag_enums.h"
#include "train/args/flag_rows.h"
#include "train/report/metrics_file.h"
#include "train/args/numeric_flags.h"

namespace gpt {
namespace {

using enum FlagStatus;
using enum PyRule;

// The agreement text of a raw field (train/args/flag_table.h): kept as it was when checkpoints started
// saving it, so that older checkpoints compare equal.
std::string canonical_text(int64_t value) { return absl::StrCat(value); }
std::string canonical_text(double value) { return absl::StrFormat("%.17g", value); }
std::string canonical_text(bool value) { return value ? "true" : "false"; }
std::string canonical_text(const std::string& value) { return absl::StrCat("'", value, "'"); }
std::string canonical_text(const std::vector<std::string>& values) {
  std::vector<std::string> quoted;
  for (const std::string& v : values) quoted.push_back(canonical_text(v));
  return absl::StrJoin(quoted, " ");
}

// The rule's value of a raw field (a rule that does not apply to the field's type is refused at
// compile time, below).
PyValue python_value(PyRule rule, int64_t value) {
  if (rule == kNoneIfZero) return none_if_zero(value);
  if (rule == kNoneIfNegative && value < 0) return PyValue();
  return value;
}
PyValue python_value(PyRule rule, double value) {
  if (rule == kNoneIfNegative && value < 0) return PyValue();
  if (rule == kIntIfIntegral && value == std::floor(value) && std::abs(value) < 1e15) {
    return static_cast<int64_t>(value);
  }
  return value;
}
PyValue python_value(PyRule rule, bool value) {
  if (rule == kNegated) return !value;
  if (rule == kTrueOrNone && !value) return PyValue();
  return value;
}
PyValue python_value(PyRule rule, const std::string& value) {
  if (rule == kNoneIfEmpty && value.empty()) return PyValue();
  return value;
}
PyValue python_value(PyRule rule, const std::vector<std::string>& value) {
  if (rule == kNoneIfEmpty && value.empty()) return PyValue();
  return value;
}

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// The rows of every group (train/args/flag_rows.h), joined in --help's order; no flag or field in two
// groups (each group's own rows are checked at compile time).
std::vector<FlagRow> joined_rows() {
  std::vector<FlagRow> rows;
  for (std::span<const FlagRow> group : {model_flag_rows(), moe_flag_rows(), training_flag_rows(), data_flag_rows()}) {
    rows.insert(rows.end(), group.begin(), group.end());
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      GPT_CHECK(rows[j].flag != rows[i].flag && rows[j].field != rows[i].field)
          << rows[i].flag << ": a flag or field in two rows of the flag table";
    }
  }
  return rows;
}

// A number's constraint (kPositive, kNonNegative, kRange), as validate_arguments has always
// worded it.
template <typename T>
absl::Status check_number(const FlagRow& r, T value) {
  const FlagConstraint& c = r.constraint;
  switch (c.check) {
    case FlagCheck::kPositive:
      if (value > 0) return absl::OkStatus();
      return invalid(absl::StrCat(std::string(r.flag),
                                  std::is_integral_v<T> ? " must be a positive integer" : " must be positive", " (got ",
                                  value, ")"));
    case FlagCheck::kNonNegative:
      if (value >= 0) return absl::OkStatus();
      return invalid(absl::StrCat(std::string(r.flag), " must be >= 0 (got ", value, ")"));
    case FlagCheck::kRange: {
      if (value >= c.low && value <= c.high) return absl::OkStatus();
      std::vector<std::string> values;
      for (int64_t v = c.low; v <= c.high; ++v) values.push_back(absl::StrCat(v));
      const std::string last = values.back();
      values.pop_back();
      return invalid(absl::StrCat(std::string(r.flag), " must be ", absl::StrJoin(values, ", "), " or ", last, " (got ",
                                  value, ")"));
    }
    default: return absl::OkStatus();
  }
}

absl::Status check_row(const FlagRow& r, const Arguments& a) {
  if (r.constraint.only_if_given && !a.was_given(std::string(r.flag))) return absl::OkStatus();
  if (r.constraint.check == FlagCheck::kOneOf) {
    const std::string& value = a.*std::get<std::string Arguments::*>(r.field);
    for (std::string_view name : r.constraint.names) {
      if (name == value) return absl::OkStatus();
    }
    return invalid(
        absl::StrCat(std::string(r.flag), " must be ", names_for_message(r.constraint.names), " (got ", value, ")"));
  }
  if (const auto* i = std::get_if<int64_t Arguments::*>(&r.field)) return check_number(r, a.**i);
  if (const auto* d = std::get_if<double Arguments::*>(&r.field)) return check_number(r, a.**d);
  return absl::OkStatus();
}

}  // namespace

std::span<const FlagRow> flag_rows() {
  static const std::vector<FlagRow> rows = joined_rows();
  return rows;
}

const FlagRow* find_flag_row(std::string_view flag) {
  for (const FlagRow& r : flag_rows()) {
    if (r.flag == flag) return &r;
  }
  return nullptr;
}

const FlagRow& flag_row(ArgumentField field) {
  for (const FlagRow& r : flag_rows()) {
    if (r.field == field) return r;
  }
  GPT_CHECK(false) << "an Arguments field without a row in the flag table";
  std::abort();
}

absl::string_view flag_name(ArgumentField field) {
  const std::string_view flag = flag_row(field).flag;
  return absl::string_view(flag.data(), flag.size());
}

bool flag_given(const Arguments& a, ArgumentField field) { return a.was_given(std::string(flag_name(field))); }

absl::Status check_required_flags(const Arguments& a) {
  for (const FlagRow& r : flag_rows()) {
    if (!r.constraint.required) continue;
    if (!a.was_given(std::string(r.flag))) return invalid(absl::StrCat("missing required flag ", std::string(r.flag)));
    GPT_RETURN_IF_ERROR(check_row(r, a));
  }
  return absl::OkStatus();
}

absl::Status check_flag_constraints(const Arguments& a) {
  for (const FlagRow& r : flag_rows()) {
    if (!r.constraint.required) GPT_RETURN_IF_ERROR(check_row(r, a));
  }
  return absl::OkStatus();
}

std::string flag_dest(const FlagRow& r) {
  if (!r.dest_name.empty()) return std::string(r.dest_name);
  std::string name(r.flag.substr(2));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

PyValue flag_python_value(const FlagRow& r, const Arguments& a) {
  if (r.python == kCustom) return r.custom(a);
  return std::visit([&](auto member) { return python_value(r.python, a.*member); }, r.field);
}

std::string flag_canonical_text(const FlagRow& r, const Arguments& a) {
  return std::visit([&](auto member) { return canonical_text(a.*member); }, r.field);
}

void declare_flags(CLI::App& app, Arguments& a) {
  // A repeated flag takes its last value, as argparse's store action does (a launch script that
  // appends an override to a base command line), instead of CLI11's "given twice" error.
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (const FlagRow& r : flag_rows()) {
    std::visit(
        [&](auto member) {
          auto& field = a.*member;
          if constexpr (std::is_same_v<std::remove_reference_t<decltype(field)>, bool>) {
            app.add_flag(std::string(r.flag), field, std::string(r.help));
          } else {
            CLI::Option* option = app.add_option(std::string(r.flag), field, std::string(r.help));
            if (r.nargs == Nargs::kThree) option->expected(3);
            // Each occurrence replaces the list (argparse's nargs='*' keeps the last occurrence's values).
            if (r.nargs == Nargs::kOneOrMore) option->expected(1, -1)->trigger_on_parse();
          }
        },
        r.field);
  }
  // Decimal only, no silent clamp, no inf or nan (train/args/numeric_flags.h); ranges are checked in
  // validate_arguments, where the message can say what the flag means.
  make_numeric_options_strict(app);
}

std::string megatron_flag_table() {
  std::string out;
  auto line = [&](std::string_view flag, FlagStatus status, std::string_view note, bool declared) {
    out += JsonObject()
               .add("flag", flag)
               .add("status", flag_status_name(status))
               .add("declared", declared)
               .add("note", note)
               .str() +
           "\n";
  };
  for (const FlagRow& r : flag_rows())
    line(r.flag, r.megatron_status, r.megatron_note.empty() ? r.help : r.megatron_note, true);
  for (const RefusedMegatronFlag& refused : undeclared_refused_megatron_flags()) {
    line(refused.flag, kRefused, refused.reason, false);
  }
  return out;
}

}  // namespace gpt

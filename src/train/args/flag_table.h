// pretrain_gpt's flags, each declared once: one row per flag with its name, the Arguments field it
// sets, its help text, its name and value in Megatron's args namespace, and how it stands to
// Megatron-LM. Generated from the rows: the CLI11 declarations (declare_flags), the argument dump
// and the ranks' agreement text (train/args/argument_table.h), and the flag table behind
// docs/MEGATRON_FLAGS.md (megatron_flag_table), and the flag's simple constraints (required,
// positive, a range, one of a set), which check_flag_constraints checks for every row. Adding a
// flag: a field in Arguments (train/args/arguments.h) and a row in one of train/args/flag_rows_*.cc (its
// argument group; train/args/flag_rows.h); checks that involve other flags in validate_arguments. A unit
// test fails when an Arguments field is in no row. Messages name a flag by its row:
// flag_name(&Arguments::save_interval) is the flag of the save_interval row, --save-interval.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/status.h"
#include "train/args/arguments.h"
#include "train/args/megatron_flags.h"

namespace CLI {
class App;
}

namespace gpt {

// A value as Python holds it: None, a bool, an int, a float, a str or a list of str.
using PyValue = std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<std::string>>;

// The Arguments field a flag sets, by its type (bool: a switch; the others take values).
using ArgumentField = std::variant<int64_t Arguments::*, double Arguments::*, bool Arguments::*,
                                   std::string Arguments::*, std::vector<std::string> Arguments::*>;

// How the argument dump shows a field: Megatron's value in its args namespace.
enum class PyRule {
  kValue,           // the field as it is
  kNoneIfZero,      // int: None when 0 (Megatron's default None; 0 here means "not given")
  kNoneIfEmpty,     // str or list: None when empty
  kNoneIfNegative,  // int or float: None when negative (the "not given" default)
  kNegated,         // bool: the opposite (--no-X and --disable-X store False into X)
  kTrueOrNone,      // bool: True, or None when absent (store_true with default None)
  kIntIfIntegral,   // float: an int when integral (an int in Megatron; fractions allowed here)
  kCustom,          // FlagRow::custom
};

// Values a flag takes (bool fields take none).
enum class Nargs {
  kOne,
  kThree,      // exactly three
  kOneOrMore,  // one or more; each occurrence replaces the list (argparse's nargs='*')
};

// A simple constraint on one flag's value, declared on its row and checked for every row by
// check_flag_constraints ("--flag must be ... (got V)").
enum class FlagCheck {
  kNone,
  kPositive,     // int: > 0 ("a positive integer"); float: > 0
  kNonNegative,  // >= 0
  kRange,        // int in [low, high], a handful of values ("0, 1 or 2")
  kOneOf,        // str: one of `names` (train/args/flag_enums.h)
};

struct FlagConstraint {
  FlagCheck check = FlagCheck::kNone;
  bool required = false;       // "missing required flag" when not given; checked before the others
  bool only_if_given = false;  // the default means "not given" and is not checked
  int64_t low = 0, high = 0;   // kRange
  std::span<const std::string_view> names = {};  // kOneOf ("" among them: none is accepted)
};

struct FlagRow {
  std::string_view flag;            // "--disable-bias-linear"
  ArgumentField field;              // &Arguments::disable_bias_linear
  std::string_view help;            // --help's text
  std::string_view dest_name = {};  // Megatron's dest; empty: the flag without "--", '-' as '_'
  PyRule python = PyRule::kValue;
  FlagStatus megatron_status = FlagStatus::kSame;
  // docs/MEGATRON_FLAGS.md's note; empty: the help text (required for refusals).
  std::string_view megatron_note = {};
  Nargs nargs = Nargs::kOne;
  PyValue (*custom)(const Arguments&) = nullptr;  // with PyRule::kCustom
  FlagConstraint constraint = {};

  // Modifiers for the table's rows.
  constexpr FlagRow dest(std::string_view name) const {
    FlagRow row = *this;
    row.dest_name = name;
    return row;
  }
  constexpr FlagRow shown(PyRule rule) const {
    FlagRow row = *this;
    row.python = rule;
    return row;
  }
  constexpr FlagRow shown(PyValue (*function)(const Arguments&)) const {
    FlagRow row = *this;
    row.python = PyRule::kCustom;
    row.custom = function;
    return row;
  }
  // --no-X / --disable-X: Megatron's dest X holds the opposite.
  constexpr FlagRow negated(std::string_view name) const { return dest(name).shown(PyRule::kNegated); }
  constexpr FlagRow megatron(FlagStatus status, std::string_view note = {}) const {
    FlagRow row = *this;
    row.megatron_status = status;
    row.megatron_note = note;
    return row;
  }
  constexpr FlagRow takes(Nargs n) const {
    FlagRow row = *this;
    row.nargs = n;
    return row;
  }
  // Constraints (check_flag_constraints).
  constexpr FlagRow required() const {
    FlagRow row = *this;
    row.constraint.required = true;
    return row;
  }
  constexpr FlagRow positive() const { return with_check(FlagCheck::kPositive); }
  constexpr FlagRow positive_if_given() const {
    FlagRow row = with_check(FlagCheck::kPositive);
    row.constraint.only_if_given = true;
    return row;
  }
  constexpr FlagRow non_negative() const { return with_check(FlagCheck::kNonNegative); }
  constexpr FlagRow in_range(int64_t low, int64_t high) const {
    FlagRow row = with_check(FlagCheck::kRange);
    row.constraint.low = low;
    row.constraint.high = high;
    return row;
  }
  constexpr FlagRow one_of(std::span<const std::string_view> names) const {
    FlagRow row = with_check(FlagCheck::kOneOf);
    row.constraint.names = names;
    return row;
  }

 private:
  constexpr FlagRow with_check(FlagCheck check) const {
    FlagRow row = *this;
    row.constraint.check = check;
    return row;
  }
};

// Whether a row's constraint applies to its field's type (rows are checked at compile time).
constexpr bool constraint_fits(const FlagRow& r) {
  const size_t type = r.field.index();  // int64, double, bool, string, list (ArgumentField's order)
  switch (r.constraint.check) {
    case FlagCheck::kNone: return !r.constraint.required || type != 2;
    case FlagCheck::kPositive:
    case FlagCheck::kNonNegative: return type == 0 || type == 1;
    case FlagCheck::kRange: return type == 0 && r.constraint.low < r.constraint.high;
    case FlagCheck::kOneOf: return type == 3 && !r.constraint.names.empty();
  }
  return false;
}

// Every flag pretrain_gpt declares, in --help's order.
std::span<const FlagRow> flag_rows();
const FlagRow* find_flag_row(std::string_view flag);
// The row of an Arguments field (every field but `given` and `notes` has one), and its flag:
// flag_name(&Arguments::save_interval) is the flag of the save_interval row, --save-interval.
const FlagRow& flag_row(ArgumentField field);
absl::string_view flag_name(ArgumentField field);  // absl's, for absl::StrCat
// Whether the field's flag appeared on the command line.
bool flag_given(const Arguments& args, ArgumentField field);

// The rows' declared constraints (FlagConstraint): the required flags (given, and within their
// constraint), in table order; then every other row's constraint.
absl::Status check_required_flags(const Arguments& args);
absl::Status check_flag_constraints(const Arguments& args);
// One row's declared constraint (a required row's too, given or not).
absl::Status check_flag_constraint(const FlagRow& row, const Arguments& args);

// Megatron's dest of a row: "add_bias_linear" for --disable-bias-linear, "num_layers" for --num-layers.
std::string flag_dest(const FlagRow& row);
// The row's field as Megatron's args namespace holds it (the argument dump).
PyValue flag_python_value(const FlagRow& row, const Arguments& args);
// The row's raw field as the ranks' agreement check and the checkpoints' saved arguments compare
// it: every digit that matters (1e-3 and 0.001 agree, 1e-3 and 1.0000001e-3 do not), strings quoted.
std::string flag_canonical_text(const FlagRow& row, const Arguments& args);

// Declares every row's flag on `app`, bound to `args`. A repeated flag takes its last value
// (argparse's rule); numbers are strict (train/args/numeric_flags.h).
void declare_flags(CLI::App& app, Arguments& args);

// pretrain_gpt --megatron-flag-table: one JSON object per line, {"flag", "status", "declared",
// "note"}, for each row (its note, or its help when the note is empty) and each refused Megatron
// flag that is not declared (train/args/megatron_flags.h).
std::string megatron_flag_table();

}  // namespace gpt

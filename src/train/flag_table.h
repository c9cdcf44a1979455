// pretrain_gpt's flags, each declared once: one row per flag with its name, the Arguments field it
// sets, its help text, its name and value in Megatron's args namespace, and how it stands to
// Megatron-LM. Generated from the rows: the CLI11 declarations (declare_flags), the argument dump
// and the ranks' agreement text (train/argument_table.h), and the flag table behind
// docs/MEGATRON_FLAGS.md (megatron_flag_table). Adding a flag: a field in Arguments
// (train/arguments.h) and a row in train/flag_table.cc; its checks, if any, in validate_arguments.
// A unit test fails when an Arguments field is in no row.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "train/arguments.h"
#include "train/megatron_flags.h"

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
};

// Every flag pretrain_gpt declares, in --help's order.
std::span<const FlagRow> flag_rows();
const FlagRow* find_flag_row(std::string_view flag);

// Megatron's dest of a row: "add_bias_linear" for --disable-bias-linear, "num_layers" for --num-layers.
std::string flag_dest(const FlagRow& row);
// The row's field as Megatron's args namespace holds it (the argument dump).
PyValue flag_python_value(const FlagRow& row, const Arguments& args);
// The row's raw field as the ranks' agreement check and the checkpoints' saved arguments compare
// it: every digit that matters (1e-3 and 0.001 agree, 1e-3 and 1.0000001e-3 do not), strings quoted.
std::string flag_canonical_text(const FlagRow& row, const Arguments& args);

// The rows in the order of the agreement text: the order checkpoints have stored it in since they
// started saving it, then any row added since, in table order.
std::vector<const FlagRow*> flag_rows_in_agreement_order();

// Declares every row's flag on `app`, bound to `args`. A repeated flag takes its last value
// (argparse's rule); numbers are strict (train/numeric_flags.h).
void declare_flags(CLI::App& app, Arguments& args);

// pretrain_gpt --megatron-flag-table: one JSON object per line, {"flag", "status", "declared",
// "note"}, for each row (its note, or its help when the note is empty) and each refused Megatron
// flag that is not declared (train/megatron_flags.h).
std::string megatron_flag_table();

}  // namespace gpt

// The flag table's rows (train/args/flag_table.h), one file per group of Megatron's argument parser:
// flag_rows_model.cc (model, parallelism), flag_rows_training.cc (training, precision, Megatron's
// implementation choices), flag_rows_data.cc (data, logging, checkpoints). flag_rows() joins them
// in this order, which is --help's. Internal to train/args/flag_table*.cc.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "train/args/flag_table.h"

namespace gpt {

std::span<const FlagRow> model_flag_rows();
std::span<const FlagRow> training_flag_rows();
std::span<const FlagRow> data_flag_rows();
std::span<const FlagRow> moe_flag_rows();

constexpr FlagRow row(std::string_view flag, ArgumentField field, std::string_view help) {
  return FlagRow{.flag = flag, .field = field, .help = help};
}

inline PyValue none_if_zero(int64_t value) { return value == 0 ? PyValue() : PyValue(value); }

// Whether a row's rule applies to its field's type.
constexpr bool rule_fits(const FlagRow& r) {
  const size_t type = r.field.index();  // int64, double, bool, string, list (ArgumentField's order)
  switch (r.python) {
    case PyRule::kValue: return true;
    case PyRule::kNoneIfZero: return type == 0;
    case PyRule::kNoneIfEmpty: return type == 3 || type == 4;
    case PyRule::kNoneIfNegative: return type == 0 || type == 1;
    case PyRule::kNegated:
    case PyRule::kTrueOrNone: return type == 2;
    case PyRule::kIntIfIntegral: return type == 1;
    case PyRule::kCustom: return r.custom != nullptr;
  }
  return false;
}

// Compile-time checks of a group's rows: each flag and each field once, each rule on a field of
// its type, a reason for every refusal, each constraint on a field of its type. (That no flag or
// field is in two groups is checked when flag_rows() joins them; that every Arguments field has a
// row is a unit test: tests/unit/train/flag_table_test.cc.)
template <size_t N>
constexpr bool rows_are_consistent(const FlagRow (&rows)[N]) {
  for (size_t i = 0; i < N; ++i) {
    const FlagRow& r = rows[i];
    if (!r.flag.starts_with("--") || !rule_fits(r) || !constraint_fits(r)) return false;
    if ((r.nargs != Nargs::kOne) != (r.field.index() == 4)) return false;
    if ((r.megatron_status == FlagStatus::kRefused || r.megatron_status == FlagStatus::kRefusedAtValues) &&
        r.megatron_note.empty()) {
      return false;
    }
    for (size_t j = 0; j < i; ++j) {
      if (rows[j].flag == r.flag || rows[j].field == r.field) return false;
    }
  }
  return true;
}

}  // namespace gpt

// pretrain_gpt's flags: every one it accepts, under Megatron's name, bound to an Arguments field
// with its help text (CLI11); and the flag table scripts/megatron_flags.py reads.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "train/arguments.h"

namespace gpt {

// Declares every flag on `app`, bound to `args`. A repeated flag takes its last value (argparse's
// rule); numbers are strict (train/numeric_flags.h).
void declare_flags(CLI::App& app, Arguments& args);

// pretrain_gpt --megatron-flag-table: one JSON object per line, {"flag", "status", "declared",
// "note"}, for each flag `app` declares (its status from train/megatron_flags.h, "same" when not
// listed; the note, or the flag's help when the note is empty) and each refused Megatron flag it
// does not declare.
std::string megatron_flag_table(const CLI::App& app);

}  // namespace gpt

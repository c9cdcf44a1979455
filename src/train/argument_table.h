// Every argument of a run, once: its flag, its name in Megatron's args namespace (the argparse
// dest, e.g. --disable-bias-linear is add_bias_linear = False) and its value as Python holds it
// (None where Megatron's default is None and the flag was not given), from the flag table's rows
// (train/flag_table.h). Two users:
//   - the argument dump, printed as Megatron's _print_args prints it, so that a diff between a
//     Megatron log and ours shows only real differences;
//   - the ranks' agreement check (train/rank_agreement.h), which compares the canonical text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/arguments.h"
#include "train/flag_table.h"

namespace gpt {

// As print() shows it: None, True, 8, 0.0001, 1e-05, text, ['a', 'b'] (Python's float repr: the
// shortest text that reads back the same double).
std::string python_str(const PyValue& value);

struct ArgumentEntry {
  std::string flag;  // "--disable-bias-linear"; empty for a value Megatron derives (world_size)
  std::string dest;  // "add_bias_linear"
  PyValue value;
  std::string canonical;  // the raw value as the ranks' agreement check and checkpoints compare it
};

// The arguments in the flag table's order (train/flag_table.h; the agreement text and the saved
// arguments of checkpoints are read by flag, so no order is kept for them); `world_size` > 0 adds the
// values Megatron derives from it (world_size, data_parallel_size,
// virtual_pipeline_model_parallel_size).
std::vector<ArgumentEntry> argument_table(const Arguments& args, int64_t world_size = 0);

// Megatron's dump: "------------------------ arguments ------------------------", one
// "  dest ..... value" line per argument (dots to column 48), sorted case-insensitively, then
// "-------------------- end of arguments ---------------------".
std::string describe_arguments(const Arguments& args, int64_t world_size);

}  // namespace gpt

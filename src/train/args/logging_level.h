// Megatron's --logging-level and MEGATRON_LOGGING_LEVEL (megatron/training/initialize.py
// setup_logging): the flag, else the environment variable, sets the threshold of the diagnostic
// lines (core/logging.h: start-up notes are Python's INFO, warnings its WARNING; errors always
// shown). The training log lines and the argument dump are Megatron's print()s: never filtered.
#pragma once

#include <cstdint>
#include <optional>

#include "core/status.h"
#include "train/args/arguments.h"

namespace gpt {

// The level in force: the flag, else MEGATRON_LOGGING_LEVEL (an integer, as Python's int() reads
// it), else none (every line shown). A variable that is not an integer is an error naming it.
absl::StatusOr<std::optional<int64_t>> logging_level(const Arguments& a);

// logging_level, applied to this process's diagnostics (set_log_threshold).
absl::Status apply_logging_level(const Arguments& a);

}  // namespace gpt

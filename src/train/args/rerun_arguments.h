// The rerun state machine's flags (train/resilience/rerun_check.h, train/resilience/rerun_error_injector.h): --rerun-mode,
// --error-injection-rate, --error-injection-type. Megatron ignores an injection no validation call
// would draw; here such a combination is refused with the flag to change.
#pragma once

#include "core/status.h"
#include "train/args/arguments.h"

namespace gpt {

// validate_arguments' part.
absl::Status validate_rerun_arguments(const Arguments& args);

}  // namespace gpt

// Validation of the checkpoint flags (--save, --load, --ckpt-format, --dist-ckpt-strictness, the
// exit conditions, the scheduler's resume rule): Megatron's names and meanings; what this program
// cannot do is refused.
#pragma once

#include "core/status.h"
#include "train/arguments.h"

namespace gpt {

// (The start-up note of a Megatron --ckpt-format is resolve_defaults'.)
absl::Status validate_checkpoint_arguments(const Arguments& args);

}  // namespace gpt

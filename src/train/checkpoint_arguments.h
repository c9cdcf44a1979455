// Validation of the checkpoint flags (--save, --load, --ckpt-format, --dist-ckpt-strictness, the
// exit conditions): Megatron's names and meanings; what this program cannot do is refused.
#pragma once

#include "core/status.h"
#include "train/arguments.h"

namespace gpt {

absl::Status validate_checkpoint_arguments(const Arguments& args);

}  // namespace gpt

// Validation of the precision flags: --fp16, --bf16 and the loss scaler's (--loss-scale,
// --initial-loss-scale, --min-loss-scale, --loss-scale-window, --hysteresis), with Megatron's
// checks (arguments.py and the asserts of its grad scalers) and their values in FP32. A scaler flag
// the run would not use is refused rather than ignored (docs/MIXED_PRECISION.md).
#pragma once

#include "core/status.h"
#include "train/args/arguments.h"

namespace gpt {

absl::Status validate_loss_scaling(const Arguments& args);

}  // namespace gpt

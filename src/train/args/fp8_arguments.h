// Megatron's FP8 flags (--fp8-format, --fp8-recipe, --fp8-margin, --fp8-amax-history-len,
// --fp8-amax-compute-algo, --no-fp8-wgrad, --fp8-interval): validation with Megatron's choices (the
// model's FP8 configuration they give: fp8_config_from, train/configs.h). The recipes this program does not build
// (mxfp8 and blockwise, Blackwell's block-scaled formats) are refused with the reason.
#pragma once

#include "core/status.h"
#include "model/fp8_scaling.h"
#include "train/args/arguments.h"

namespace gpt {

absl::Status validate_fp8(const Arguments& args);

}  // namespace gpt

// The CPU reference backend: the signatures of kernels/ops.h, in namespace gpt::cpu.
#pragma once

#include "kernels/ops.h"

namespace gpt::cpu {
#include "kernels/backend_ops.inc"
}  // namespace gpt::cpu

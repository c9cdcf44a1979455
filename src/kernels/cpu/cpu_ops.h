// The CPU reference backend: every op of kernels/op_list.inc, in namespace gpt::cpu.
#pragma once

#include "kernels/ops.h"

namespace gpt::cpu {
#define GPT_OP(name, parameters, arguments, tensors) void name parameters;
#define GPT_OP_CUSTOM GPT_OP
#include "kernels/op_list.inc"
#undef GPT_OP
#undef GPT_OP_CUSTOM
}  // namespace gpt::cpu

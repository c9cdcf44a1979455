// The CUDA backend: every op of kernels/op_list.inc, in namespace gpt::cuda_ops. No CUDA headers
// here, so ops.cc can dispatch to it from plain C++.
#pragma once

#include "kernels/ops.h"

namespace gpt::cuda_ops {
#define GPT_OP(name, parameters, arguments, tensors) void name parameters;
#define GPT_OP_CUSTOM GPT_OP
#include "kernels/op_list.inc"
#undef GPT_OP
#undef GPT_OP_CUSTOM
}  // namespace gpt::cuda_ops

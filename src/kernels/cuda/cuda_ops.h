// The CUDA backend: the signatures of kernels/ops.h, in namespace gpt::cuda_ops. No CUDA headers
// here, so ops.cc can dispatch to it from plain C++.
#pragma once

#include "kernels/ops.h"

namespace gpt::cuda_ops {
#include "kernels/backend_ops.inc"
}  // namespace gpt::cuda_ops

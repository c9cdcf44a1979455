// The dimensions of a GEMM out[m, n] = op(a)[m, k] op(b)[k, n] and the checks every backend needs.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace gpt {

struct GemmShape {
  int64_t m, n, k;
};

// Fatal (naming the tensors) when the operands, output, bias or GeLU tensors do not fit together.
GemmShape checked_gemm_shape(const Tensor& out, const Tensor& a, const Tensor& b, const ops::MatmulOptions& options);

}  // namespace gpt

// matmul's epilogue on a block of output rows, shared by matmul's grouped form
// (kernels/cpu/grouped_matmul.cc) so that a group's rows get exactly matmul's numbers.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace gpt::cpu {

// c32 [rows, n]: the FP32 product of rows [first_row, first_row + rows) of out [*, n] (out's own
// data when out is float32). Adds bias [n] (optional) in FP32, then writes out's rows: gelu(c) with
// pre_gelu's rows = c when pre_gelu is defined, else c rounded to out's dtype.
void gemm_rows_epilogue(const Tensor& out, const Tensor& pre_gelu, const Tensor& bias, float* c32, int64_t first_row,
                        int64_t rows);

}  // namespace gpt::cpu

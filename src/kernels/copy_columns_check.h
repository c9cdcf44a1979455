// The check both backends' copy_columns make (op_list.inc): out and in seen as matrices with the
// same rows and dtype, and each column range inside its matrix.
#pragma once

#include <cstdint>

#include "core/check.h"
#include "core/tensor.h"

namespace gpt {

// Fatal, naming the ranges and the tensors, when they do not fit.
inline void check_copy_columns(const Tensor& out, int64_t out_column, const Tensor& in, int64_t in_column,
                               int64_t columns) {
  const Tensor a = out.as_matrix(), b = in.as_matrix();
  GPT_CHECK(a.rows() == b.rows() && a.dtype() == b.dtype() && out_column >= 0 && in_column >= 0 && columns >= 0 &&
            out_column + columns <= a.cols() && in_column + columns <= b.cols())
      << "copy_columns: " << columns << " columns from " << in_column << " of " << in.to_string() << " to "
      << out_column << " of " << out.to_string();
}

}  // namespace gpt

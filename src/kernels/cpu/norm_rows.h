// The row loop LayerNorm and RMSNorm share on the CPU (layernorm.cc, rmsnorm.cc): each row of the
// norm's input [rows, h] as FP32. That is x itself, or, fused with the residual add before a
// pre-norm block, residual = x + delta + delta_bias (delta_bias [h], optional) rounded to T and read
// back, so that the norm sees what is stored, as backward will.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/element.h"

namespace gpt::cpu {

// Calls normalize(row, r) with row [h] FP32 for each row r of x, or of x + delta + delta_bias
// (written to residual first) when delta is defined.
template <typename T, typename Normalize>
void for_each_norm_input_row(const Tensor& x, const Tensor& residual, const Tensor& delta, const Tensor& delta_bias,
                             Normalize&& normalize) {
  const int64_t rows = x.rows(), h = x.cols();
  const T* in = x.data_as<T>();
  const T* d = optional_data<T>(delta);
  const T* db = optional_data<T>(delta_bias);
  T* res = optional_data<T>(residual);
  std::vector<float> row(static_cast<size_t>(h));
  for (int64_t r = 0; r < rows; ++r) {
    if (d == nullptr) {
      for (int64_t j = 0; j < h; ++j) row[j] = load(in, r * h + j);
    } else {
      for (int64_t j = 0; j < h; ++j) {
        const float sum = load(in, r * h + j) + load(d, r * h + j) + (db ? load(db, j) : 0.0f);
        store(res, r * h + j, sum);
        row[j] = load(res, r * h + j);
      }
    }
    normalize(row.data(), r);
  }
}

}  // namespace gpt::cpu

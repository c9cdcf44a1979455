// RMSNorm over the last dim (Megatron's RMSNorm: no mean subtraction, no bias) with FP32
// statistics (the mean square summed in double for the reference), optionally fused with the
// residual add that precedes it in a pre-norm block.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/element.h"
#include "kernels/cpu/norm_rows.h"

namespace gpt::cpu {
namespace {

template <typename T>
void normalize_row(const float* row, int64_t h, const T* weight, float epsilon, float weight_offset, T* y,
                   float* rstd_out) {
  double squares = 0.0;
  for (int64_t j = 0; j < h; ++j) squares += static_cast<double>(row[j]) * row[j];
  const float rstd = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(h) + epsilon));
  for (int64_t j = 0; j < h; ++j) store(y, j, row[j] * rstd * (load(weight, j) + weight_offset));
  *rstd_out = rstd;
}

void check_rmsnorm_shapes(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight) {
  GPT_CHECK(y.numel() == x.numel() && y.dtype() == x.dtype()) << y.to_string() << " vs " << x.to_string();
  GPT_CHECK(weight.numel() == x.cols() && weight.dtype() == x.dtype()) << "RMSNorm weight " << weight.to_string();
  GPT_CHECK(rstd.numel() == x.rows() && rstd.dtype() == DType::kFloat32) << "RMSNorm statistics " << rstd.to_string();
}

// y = RMSNorm(x), or of x + delta + delta_bias (stored to residual) when delta is defined.
void forward(const Tensor& y, const Tensor& rstd, const Tensor& residual, const Tensor& x, const Tensor& delta,
             const Tensor& delta_bias, const Tensor& weight, float epsilon, float weight_offset) {
  const int64_t h = x.cols();
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for_each_norm_input_row<T>(x, residual, delta, delta_bias, [&](const float* row, int64_t r) {
      normalize_row(row, h, weight.data_as<T>(), epsilon, weight_offset, y.data_as<T>() + r * h, rstd.data_as<float>() + r);
    });
  });
}

}  // namespace

void rmsnorm_forward(Context& ctx, const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                     float epsilon, float weight_offset) {
  check_rmsnorm_shapes(y, rstd, x, weight);
  forward(y, rstd, Tensor(), x, Tensor(), Tensor(), weight, epsilon, weight_offset);
}

void residual_rmsnorm_forward(Context& ctx, const Tensor& residual, const Tensor& y, const Tensor& rstd,
                              const Tensor& x, const Tensor& delta, const Tensor& delta_bias, const Tensor& weight,
                              float epsilon, float weight_offset) {
  check_rmsnorm_shapes(y, rstd, x, weight);
  GPT_CHECK(residual.numel() == x.numel() && delta.numel() == x.numel() && residual.dtype() == x.dtype() &&
            delta.dtype() == x.dtype())
      << "residual shapes";
  GPT_CHECK(!delta_bias.defined() || delta_bias.numel() == x.cols()) << "RMSNorm residual bias " << delta_bias.to_string();
  forward(y, rstd, residual, x, delta, delta_bias, weight, epsilon, weight_offset);
}

void rmsnorm_backward(Context& ctx, const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x,
                      const Tensor& rstd, const Tensor& weight, bool accumulate_dx, float weight_offset) {
  const int64_t rows = x.rows(), h = x.cols();
  GPT_CHECK(dx.numel() == x.numel() && dy.numel() == x.numel() && dx.dtype() == x.dtype() && dy.dtype() == x.dtype())
      << "RMSNorm backward shapes";
  GPT_CHECK(dweight.numel() == h && weight.numel() == h && rstd.numel() == rows) << "RMSNorm backward shapes";
  float* dw = dweight.data_as<float>();
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    const T* grad_out = dy.data_as<T>();
    const T* w = weight.data_as<T>();
    T* grad_in = dx.data_as<T>();
    std::vector<double> dw_total(static_cast<size_t>(h), 0.0);
    std::vector<float> xhat(static_cast<size_t>(h)), dxhat(static_cast<size_t>(h));
    for (int64_t r = 0; r < rows; ++r) {
      const float rs = rstd.data_as<float>()[r];
      // xhat = x * rstd, dxhat = dy * w; dx = rstd * (dxhat - xhat * mean(dxhat * xhat)). Read
      // the whole row first: dx may alias dy.
      double sum_dxhat_xhat = 0.0;
      for (int64_t j = 0; j < h; ++j) {
        xhat[j] = load(in, r * h + j) * rs;
        const float g = load(grad_out, r * h + j);
        dxhat[j] = g * (load(w, j) + weight_offset);
        sum_dxhat_xhat += static_cast<double>(dxhat[j]) * xhat[j];
        dw_total[j] += static_cast<double>(g) * xhat[j];
      }
      const float mean_dxhat_xhat = static_cast<float>(sum_dxhat_xhat / static_cast<double>(h));
      for (int64_t j = 0; j < h; ++j) {
        float value = rs * (dxhat[j] - xhat[j] * mean_dxhat_xhat);
        if (accumulate_dx) value += load(grad_in, r * h + j);
        store(grad_in, r * h + j, value);
      }
    }
    for (int64_t j = 0; j < h; ++j) dw[j] += static_cast<float>(dw_total[j]);
  });
}

}  // namespace gpt::cpu

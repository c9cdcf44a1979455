// LayerNorm over the last dim with FP32 statistics (two-pass mean and variance in double for the
// reference), optionally fused with the residual add that precedes it in a pre-LN block.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/element.h"
#include "kernels/cpu/norm_rows.h"

namespace gpt::cpu {
namespace {

template <typename T>
void normalize_row(const float* row, int64_t h, const T* weight, const T* bias, float epsilon, float weight_offset,
                   T* y, float* mean_out, float* rstd_out) {
  double total = 0.0;
  for (int64_t j = 0; j < h; ++j) total += row[j];
  const double mean = total / static_cast<double>(h);
  double squares = 0.0;
  for (int64_t j = 0; j < h; ++j) squares += (row[j] - mean) * (row[j] - mean);
  const float rstd = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(h) + epsilon));
  const float mean_f = static_cast<float>(mean);
  for (int64_t j = 0; j < h; ++j) {
    store(y, j, (row[j] - mean_f) * rstd * (load(weight, j) + weight_offset) + load(bias, j));
  }
  *mean_out = mean_f;
  *rstd_out = rstd;
}

void check_layernorm_shapes(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                            const Tensor& weight, const Tensor& bias) {
  GPT_CHECK(y.numel() == x.numel() && y.dtype() == x.dtype()) << y.to_string() << " vs " << x.to_string();
  GPT_CHECK(weight.numel() == x.cols() && bias.numel() == x.cols()) << "LayerNorm weight/bias length";
  GPT_CHECK(mean.numel() == x.rows() && rstd.numel() == x.rows()) << "LayerNorm statistics length";
}

// y = LayerNorm(x), or of x + delta + delta_bias (stored to residual) when delta is defined.
void forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& residual, const Tensor& x,
             const Tensor& delta, const Tensor& delta_bias, const Tensor& weight, const Tensor& bias, float epsilon,
             float weight_offset) {
  const int64_t h = x.cols();
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for_each_norm_input_row<T>(x, residual, delta, delta_bias, [&](const float* row, int64_t r) {
      normalize_row(row, h, weight.data_as<T>(), bias.data_as<T>(), epsilon, weight_offset, y.data_as<T>() + r * h,
                    mean.data_as<float>() + r, rstd.data_as<float>() + r);
    });
  });
}

}  // namespace

void layernorm_forward(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, float epsilon, float weight_offset) {
  check_layernorm_shapes(y, mean, rstd, x, weight, bias);
  forward(y, mean, rstd, Tensor(), x, Tensor(), Tensor(), weight, bias, epsilon, weight_offset);
}

void residual_layernorm_forward(Context& ctx, const Tensor& residual, const Tensor& y, const Tensor& mean,
                                const Tensor& rstd, const Tensor& x, const Tensor& delta,
                                const Tensor& delta_bias, const Tensor& weight, const Tensor& bias,
                                float epsilon, float weight_offset) {
  check_layernorm_shapes(y, mean, rstd, x, weight, bias);
  GPT_CHECK(residual.numel() == x.numel() && delta.numel() == x.numel()) << "residual shapes";
  forward(y, mean, rstd, residual, x, delta, delta_bias, weight, bias, epsilon, weight_offset);
}

void layernorm_backward(Context& ctx, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& weight, bool accumulate_dx, float weight_offset) {
  GPT_CHECK(dx.numel() == x.numel() && dy.numel() == x.numel()) << "LayerNorm backward shapes";
  const int64_t rows = x.rows(), h = x.cols();
  float* dw = dweight.data_as<float>();
  float* db = dbias.data_as<float>();
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    const T* grad_out = dy.data_as<T>();
    const T* w = weight.data_as<T>();
    T* grad_in = dx.data_as<T>();
    std::vector<double> dw_total(static_cast<size_t>(h), 0.0), db_total(static_cast<size_t>(h), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const float mu = mean.data_as<float>()[r];
      const float rs = rstd.data_as<float>()[r];
      // dxhat = dy * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
      double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
      for (int64_t j = 0; j < h; ++j) {
        const float xhat = (load(in, r * h + j) - mu) * rs;
        const float g = load(grad_out, r * h + j);
        const float dxhat = g * (load(w, j) + weight_offset);
        sum_dxhat += dxhat;
        sum_dxhat_xhat += static_cast<double>(dxhat) * xhat;
        dw_total[j] += static_cast<double>(g) * xhat;
        db_total[j] += g;
      }
      const float mean_dxhat = static_cast<float>(sum_dxhat / static_cast<double>(h));
      const float mean_dxhat_xhat = static_cast<float>(sum_dxhat_xhat / static_cast<double>(h));
      for (int64_t j = 0; j < h; ++j) {
        const float xhat = (load(in, r * h + j) - mu) * rs;
        const float dxhat = load(grad_out, r * h + j) * (load(w, j) + weight_offset);
        float value = rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
        if (accumulate_dx) value += load(grad_in, r * h + j);
        store(grad_in, r * h + j, value);
      }
    }
    for (int64_t j = 0; j < h; ++j) {
      dw[j] += static_cast<float>(dw_total[j]);
      db[j] += static_cast<float>(db_total[j]);
    }
  });
}

}  // namespace gpt::cpu

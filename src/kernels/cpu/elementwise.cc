// Residual add, GeLU, casts and small reductions.
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/element.h"

namespace gpt::cpu {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
}  // namespace

void residual_add(Context& ctx, const Tensor& out, const Tensor& x, const Tensor& delta, const Tensor& delta_bias) {
  GPT_CHECK(out.numel() == x.numel() && delta.numel() == x.numel()) << "residual_add shapes";
  const int64_t rows = x.rows(), h = x.cols();
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* a = x.data_as<T>();
    const T* d = delta.data_as<T>();
    const T* db = optional_data<T>(delta_bias);
    T* o = out.data_as<T>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < h; ++j) {
        const int64_t i = r * h + j;
        store(o, i, load(a, i) + load(d, i) + (db ? load(db, j) : 0.0f));
      }
    }
  });
}

void gelu_forward(Context& ctx, const Tensor& y, const Tensor& x) {
  GPT_CHECK(y.numel() == x.numel() && y.dtype() == x.dtype()) << "gelu shapes";
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    T* out = y.data_as<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float v = load(in, i);
      store(out, i, 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v))));
    }
  });
}

void gelu_backward(Context& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x) {
  GPT_CHECK(dx.numel() == x.numel() && dy.numel() == x.numel()) << "gelu backward shapes";
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    const T* grad_out = dy.data_as<T>();
    T* grad_in = dx.data_as<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float v = load(in, i);
      const float inner = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
      const float t = std::tanh(inner);
      const float d_inner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
      const float derivative = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * d_inner;
      store(grad_in, i, load(grad_out, i) * derivative);
    }
  });
}

void sum_of_squares(Context& ctx, const Tensor& out, const Tensor& x) {
  const float* in = x.data_as<float>();
  double total = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) total += static_cast<double>(in[i]) * in[i];
  out.data_as<float>()[0] += static_cast<float>(total);
}

void sum(Context& ctx, const Tensor& out, const Tensor& x) {
  const float* in = x.data_as<float>();
  double total = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) total += in[i];
  out.data_as<float>()[0] += static_cast<float>(total);
}

void count_zeros(Context& ctx, const Tensor& out, const Tensor& x) {
  GPT_CHECK(out.numel() == 1 && out.dtype() == DType::kInt64 && x.dtype() == DType::kFloat32) << "count_zeros";
  const float* in = x.data_as<float>();
  int64_t zeros = 0;
  for (int64_t i = 0; i < x.numel(); ++i) zeros += in[i] == 0.0f ? 1 : 0;
  out.data_as<int64_t>()[0] += zeros;
}

void zero(Context& ctx, const Tensor& x) {
  if (x.numel() > 0) std::memset(x.data(), 0, x.bytes());
}

void poison(Context& ctx, const Tensor& x) {
  if (x.numel() > 0) std::memset(x.data(), 0xFF, x.bytes());
}

void copy(Context& ctx, const Tensor& out, const Tensor& in) {
  GPT_CHECK(out.dtype() == in.dtype() && out.numel() == in.numel()) << "copy " << in.to_string() << " to " << out.to_string();
  if (in.numel() > 0) std::memmove(out.data(), in.data(), in.bytes());
}

void scale(Context& ctx, const Tensor& x, float factor) {
  float* data = x.data_as<float>();
  for (int64_t i = 0; i < x.numel(); ++i) data[i] *= factor;
}

void cast(Context& ctx, const Tensor& out, const Tensor& in) {
  GPT_CHECK_EQ(out.numel(), in.numel()) << "cast " << in.to_string() << " to " << out.to_string();
  dispatch_float_type(in.dtype(), [&](auto in_tag) {
    using In = decltype(in_tag);
    dispatch_float_type(out.dtype(), [&](auto out_tag) {
      using Out = decltype(out_tag);
      const In* source = in.data_as<In>();
      Out* target = out.data_as<Out>();
      for (int64_t i = 0; i < in.numel(); ++i) store(target, i, load(source, i));
    });
  });
}

namespace {

// Step-wide AdamW constants, computed as torch.optim.AdamW does (bias corrections in double).
struct AdamWConstants {
  float step_size;
  float bias_correction2_sqrt;
};
AdamWConstants adamw_constants(const ops::AdamWStep& step) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(step.beta1), static_cast<double>(step.step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(step.beta2), static_cast<double>(step.step));
  return {static_cast<float>(step.learning_rate / bias_correction1), static_cast<float>(std::sqrt(bias_correction2))};
}

// The update of elements [offset, offset + n) with decoupled weight decay `weight_decay`. The float
// operations (and their order) are those of the CUDA kernel (cuda/adamw.cu), which avoids FMA
// contraction, so both backends agree bit for bit.
void adamw_range(const ops::AdamWStep& step, const AdamWConstants& c, float weight_decay, const Tensor& master,
                 const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq, int64_t offset, int64_t n) {
  float* p = master.data_as<float>() + offset;
  const float* g = grad.data_as<float>() + offset;
  float* m = exp_avg.data_as<float>() + offset;
  float* v = exp_avg_sq.data_as<float>() + offset;
  const float decay = 1.0f - step.learning_rate * weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * step.grad_scale;
    m[i] = step.beta1 * m[i] + (1.0f - step.beta1) * gi;
    v[i] = step.beta2 * v[i] + (1.0f - step.beta2) * gi * gi;
    const float denominator = std::sqrt(v[i]) / c.bias_correction2_sqrt + step.epsilon;
    p[i] = p[i] * decay - c.step_size * m[i] / denominator;
  }
}

}  // namespace

void adamw_update(Context& ctx, const ops::AdamWStep& step, const Tensor& master, const Tensor& grad,
                  const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& param_out) {
  const int64_t n = master.numel();
  GPT_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n) << "adamw sizes";
  if (param_out.defined()) GPT_CHECK_EQ(param_out.numel(), n) << "adamw param copy size";
  adamw_range(step, adamw_constants(step), step.weight_decay, master, grad, exp_avg, exp_avg_sq, 0, n);
  if (param_out.defined()) cast(ctx, param_out, master);
}

void adamw_update_segments(Context& ctx, const ops::AdamWStep& step, const Tensor& master, const Tensor& grad,
                           const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& param_out,
                           std::span<const ops::AdamWSegment> segments) {
  const AdamWConstants c = adamw_constants(step);
  for (const ops::AdamWSegment& s : segments) {
    adamw_range(step, c, s.weight_decay ? step.weight_decay : 0.0f, master, grad, exp_avg, exp_avg_sq, s.offset,
                s.length);
    if (param_out.defined()) cast(ctx, param_out.flat_range(s.offset, s.length), master.flat_range(s.offset, s.length));
  }
}

}  // namespace gpt::cpu

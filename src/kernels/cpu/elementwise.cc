// Residual add, GeLU (tanh and exact), casts and small reductions. GeLU vectorized (simd::tanh) and the large ones
// split over the context's threads; the reductions sum fixed chunks in FP64 and the chunk totals
// in order, so their result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/element.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/scalar_activations.h"

namespace gpt::cpu {
namespace {
using simd::f32x8;
using simd::kLanes;

constexpr int64_t kElementGrain = 16384;  // elements worth a thread
constexpr float kInvSqrt2 = 0.70710678118654752440f;    // the exact GeLU's erf(x / sqrt 2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // the standard normal density's 1 / sqrt(2 pi)

template <typename T>
GPT_SIMD_INLINE void gelu_range(T* y, const T* x, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) simd::store8(y + i, simd::gelu(simd::load8(x + i)));
  if (i < end) simd::store_partial(y + i, end - i, simd::gelu(simd::load_partial(x + i, end - i)));
}
template <typename T>
GPT_SIMD_INLINE void gelu_backward_range(T* dx, const T* dy, const T* x, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    simd::store8(dx + i, simd::load8(dy + i) * simd::gelu_derivative(simd::load8(x + i)));
  }
  if (i < end) {
    const int64_t n = end - i;
    simd::store_partial(dx + i, n, simd::load_partial(dy + i, n) * simd::gelu_derivative(simd::load_partial(x + i, n)));
  }
}
GPT_CPU_CLONES void gelu_range_f32(float* y, const float* x, int64_t begin, int64_t end) { gelu_range(y, x, begin, end); }
GPT_CPU_CLONES void gelu_range_bf16(bf16* y, const bf16* x, int64_t begin, int64_t end) { gelu_range(y, x, begin, end); }
GPT_CPU_CLONES void gelu_backward_range_f32(float* dx, const float* dy, const float* x, int64_t begin, int64_t end) {
  gelu_backward_range(dx, dy, x, begin, end);
}
GPT_CPU_CLONES void gelu_backward_range_bf16(bf16* dx, const bf16* dy, const bf16* x, int64_t begin, int64_t end) {
  gelu_backward_range(dx, dy, x, begin, end);
}
GPT_CPU_CLONES void gelu_range_fp16(fp16* y, const fp16* x, int64_t begin, int64_t end) { gelu_range(y, x, begin, end); }
GPT_CPU_CLONES void gelu_backward_range_fp16(fp16* dx, const fp16* dy, const fp16* x, int64_t begin, int64_t end) {
  gelu_backward_range(dx, dy, x, begin, end);
}

// FP64 sums of x^2 and of x over [begin, end), four interleaved accumulators.
double sum_of_squares_range(const float* x, int64_t begin, int64_t end) {
  double lanes[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t i = begin;
  for (; i + 4 <= end; i += 4) {
    for (int l = 0; l < 4; ++l) lanes[l] += static_cast<double>(x[i + l]) * x[i + l];
  }
  for (; i < end; ++i) lanes[0] += static_cast<double>(x[i]) * x[i];
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}
double sum_range(const float* x, int64_t begin, int64_t end) {
  double lanes[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t i = begin;
  for (; i + 4 <= end; i += 4) {
    for (int l = 0; l < 4; ++l) lanes[l] += x[i + l];
  }
  for (; i < end; ++i) lanes[0] += x[i];
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// The sum over [0, n) of range_sum(begin, end) over fixed chunks, the chunks' totals added in
// order (the chunks, not the threads, fix the order: the same result on any thread count).
template <typename RangeSum>
double chunked_sum(Context& ctx, int64_t n, RangeSum range_sum) {
  constexpr int64_t kChunk = 1 << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  thread_local std::vector<double> totals;
  totals.assign(static_cast<size_t>(chunks), 0.0);
  double* chunk_total = totals.data();
  parallel_for(ctx, chunks, 4, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) chunk_total[c] = range_sum(c * kChunk, std::min(n, (c + 1) * kChunk));
  });
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += chunk_total[c];
  return total;
}

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
  parallel_for(ctx, x.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
    if (x.dtype() == DType::kFloat32) {
      gelu_range_f32(y.data_as<float>(), x.data_as<float>(), begin, end);
    } else if (x.dtype() == DType::kBFloat16) {
      gelu_range_bf16(y.data_as<bf16>(), x.data_as<bf16>(), begin, end);
    } else {
      GPT_CHECK(x.dtype() == DType::kFloat16) << "gelu_forward: " << dtype_name(x.dtype());
      gelu_range_fp16(y.data_as<fp16>(), x.data_as<fp16>(), begin, end);
    }
  });
}

void gelu_backward(Context& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x) {
  GPT_CHECK(dx.numel() == x.numel() && dy.numel() == x.numel()) << "gelu backward shapes";
  GPT_CHECK(dx.dtype() == x.dtype() && dy.dtype() == x.dtype()) << "gelu backward dtypes";
  parallel_for(ctx, x.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
    if (x.dtype() == DType::kFloat32) {
      gelu_backward_range_f32(dx.data_as<float>(), dy.data_as<float>(), x.data_as<float>(), begin, end);
    } else if (x.dtype() == DType::kBFloat16) {
      gelu_backward_range_bf16(dx.data_as<bf16>(), dy.data_as<bf16>(), x.data_as<bf16>(), begin, end);
    } else {
      GPT_CHECK(x.dtype() == DType::kFloat16) << "gelu_backward: " << dtype_name(x.dtype());
      gelu_backward_range_fp16(dx.data_as<fp16>(), dy.data_as<fp16>(), x.data_as<fp16>(), begin, end);
    }
  });
}

namespace {

// Scalar activations of the MLP with their backward, element by element in FP32: y = f(x) and
// dx = dy f'(x). (The tanh GeLU above has vectorized paths of its own.)
struct ExactGelu {  // x Phi(x), PyTorch's F.gelu
  static float forward(float v) { return 0.5f * v * (1.0f + std::erf(v * kInvSqrt2)); }
  static float backward(float g, float v) {
    const float cdf = 0.5f * (1.0f + std::erf(v * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
    return g * (cdf + v * pdf);
  }
};

struct SquaredRelu {  // relu(x)^2
  static float forward(float v) {
    const float r = std::max(v, 0.0f);
    return r * r;
  }
  static float backward(float g, float v) { return g * (2.0f * std::max(v, 0.0f)); }
};

template <typename Activation>
void activation_forward(Context& ctx, const Tensor& y, const Tensor& x, const char* name) {
  GPT_CHECK(y.numel() == x.numel() && y.dtype() == x.dtype()) << name << " shapes";
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    T* out = y.data_as<T>();
    parallel_for(ctx, x.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) store(out, i, Activation::forward(load(in, i)));
    });
  });
}

template <typename Activation>
void activation_backward(Context& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x, const char* name) {
  GPT_CHECK(dx.numel() == x.numel() && dy.numel() == x.numel()) << name << " backward shapes";
  GPT_CHECK(dx.dtype() == x.dtype() && dy.dtype() == x.dtype()) << name << " backward dtypes";
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    const T* grad = dy.data_as<T>();
    T* out = dx.data_as<T>();
    parallel_for(ctx, x.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) store(out, i, Activation::backward(load(grad, i), load(in, i)));
    });
  });
}

}  // namespace

GPT_SCALAR_ACTIVATIONS(GPT_DEFINE_SCALAR_ACTIVATION)

void sum_of_squares(Context& ctx, const Tensor& out, const Tensor& x) {
  const float* in = x.data_as<float>();
  out.data_as<float>()[0] += static_cast<float>(chunked_sum(ctx, x.numel(), [&](int64_t begin, int64_t end) {
    return sum_of_squares_range(in, begin, end);
  }));
}

void sum(Context& ctx, const Tensor& out, const Tensor& x) {
  const float* in = x.data_as<float>();
  out.data_as<float>()[0] += static_cast<float>(chunked_sum(ctx, x.numel(), [&](int64_t begin, int64_t end) {
    return sum_range(in, begin, end);
  }));
}

void amax(Context& ctx, const Tensor& out, const Tensor& x) {
  GPT_CHECK(out.numel() == 1 && out.dtype() == DType::kFloat32) << "amax";
  float result = out.data_as<float>()[0];
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float magnitude = std::fabs(load(in, i));
      if (!(magnitude <= result)) result = magnitude;  // a NaN, once in, stays
      if (std::isnan(result)) break;
    }
  });
  out.data_as<float>()[0] = result;
}

void count_zeros(Context& ctx, const Tensor& out, const Tensor& x) {
  GPT_CHECK(out.numel() == 1 && out.dtype() == DType::kInt64 && x.dtype() == DType::kFloat32) << "count_zeros";
  const float* in = x.data_as<float>();
  int64_t zeros = 0;
  for (int64_t i = 0; i < x.numel(); ++i) zeros += in[i] == 0.0f ? 1 : 0;
  out.data_as<int64_t>()[0] += zeros;
}

void count_non_finite(Context& ctx, const Tensor& out, const Tensor& x) {
  GPT_CHECK(out.numel() == 1 && out.dtype() == DType::kInt64 && x.dtype() == DType::kFloat32) << "count_non_finite";
  const float* in = x.data_as<float>();
  int64_t count = 0;
  for (int64_t i = 0; i < x.numel(); ++i) count += std::isfinite(in[i]) ? 0 : 1;
  out.data_as<int64_t>()[0] += count;
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

// adamw_range over [offset, offset + n) split over the context's threads (elementwise: the same bits).
void adamw_parallel(Context& ctx, const ops::AdamWStep& step, const AdamWConstants& c, float weight_decay,
                    const Tensor& master, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                    int64_t offset, int64_t n) {
  parallel_for(ctx, n, 1 << 15, [&](int64_t begin, int64_t end) {
    adamw_range(step, c, weight_decay, master, grad, exp_avg, exp_avg_sq, offset + begin, end - begin);
  });
}

}  // namespace

void adamw_update(Context& ctx, const ops::AdamWStep& step, const Tensor& master, const Tensor& grad,
                  const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& param_out) {
  const int64_t n = master.numel();
  GPT_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n) << "adamw sizes";
  if (param_out.defined()) GPT_CHECK_EQ(param_out.numel(), n) << "adamw param copy size";
  adamw_parallel(ctx, step, adamw_constants(step), step.weight_decay, master, grad, exp_avg, exp_avg_sq, 0, n);
  if (param_out.defined()) cast(ctx, param_out, master);
}

void adamw_update_segments(Context& ctx, const ops::AdamWStep& step, const Tensor& master, const Tensor& grad,
                           const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& param_out,
                           std::span<const ops::AdamWSegment> segments) {
  const AdamWConstants c = adamw_constants(step);
  // One split over the segments' elements laid end to end (one wake-up of the pool per step, not
  // one per segment): start[i] is segment i's first element in that sequence.
  std::vector<int64_t> start(segments.size() + 1, 0);
  for (size_t i = 0; i < segments.size(); ++i) start[i + 1] = start[i] + segments[i].length;
  parallel_for(ctx, start.back(), 1 << 15, [&](int64_t begin, int64_t end) {
    size_t i = static_cast<size_t>(std::upper_bound(start.begin(), start.end(), begin) - start.begin()) - 1;
    for (; begin < end; ++i) {
      const ops::AdamWSegment& s = segments[i];
      const int64_t offset = s.offset + (begin - start[i]), n = std::min(end, start[i + 1]) - begin;
      if (n <= 0) continue;  // an empty segment
      adamw_range(step, c, s.weight_decay ? step.weight_decay : 0.0f, master, grad, exp_avg, exp_avg_sq, offset, n);
      if (param_out.defined()) cast(ctx, param_out.flat_range(offset, n), master.flat_range(offset, n));
      begin += n;
    }
  });
}

}  // namespace gpt::cpu

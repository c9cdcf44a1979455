// Elementwise ops, AdamW and the scalar reductions. Reductions are deterministic: fixed-shape
// block partials written to scratch, then one block adds them in a fixed order.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

template <typename T>
__global__ void residual_add_kernel(T* out, const T* x, const T* delta, const T* bias, int64_t n, int64_t h) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float b = bias ? to_float(bias[i % h]) : 0.0f;
    out[i] = from_float<T>(to_float(x[i]) + to_float(delta[i]) + b);
  }
}

template <typename T>
__global__ void gelu_forward_kernel(T* y, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = to_float(x[i]);
    y[i] = from_float<T>(0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v))));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(T* dx, const T* dy, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = to_float(x[i]);
    const float t = tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const float d_inner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    dx[i] = from_float<T>(to_float(dy[i]) * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * d_inner));
  }
}

template <typename In, typename Out>
__global__ void cast_kernel(Out* out, const In* in, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = from_float<Out>(to_float(in[i]));
  }
}

__global__ void scale_kernel(float* x, float factor, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] *= factor;
  }
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, __nv_bfloat16* copy, int64_t n, float lr,
                             float beta1, float beta2, float eps, float decay, float step_size,
                             float bias_correction2_sqrt, float grad_scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * decay - step_size * mi / (sqrtf(vi) / bias_correction2_sqrt + eps);
    p[i] = pi;
    if (copy) copy[i] = __float2bfloat16_rn(pi);
  }
}

// Stage 1: each block sums (optionally squared) a fixed slice into partial[blockIdx.x].
template <bool kSquare>
__global__ void partial_sum_kernel(const float* x, int64_t n, float* partial) {
  float total = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    total += kSquare ? x[i] * x[i] : x[i];
  }
  total = block_sum(total);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// Stage 2: one block adds the partials in order and accumulates into out[0].
__global__ void finish_sum_kernel(const float* partial, int count, float* out) {
  float total = 0.0f;
  for (int i = threadIdx.x; i < count; i += blockDim.x) total += partial[i];
  total = block_sum(total);
  if (threadIdx.x == 0) out[0] += total;
}

constexpr int kReductionBlocks = 512;

template <bool kSquare>
void reduce_into(Context& ctx, const Tensor& out, const Tensor& x, const char* op) {
  GPT_CHECK(out.numel() == 1 && out.dtype() == DType::kFloat32 && x.dtype() == DType::kFloat32) << op;
  auto* partial = static_cast<float*>(ctx.cuda().scratch(kReductionBlocks * sizeof(float), op));
  partial_sum_kernel<kSquare><<<kReductionBlocks, kThreads, 0, stream_of(ctx)>>>(x.data_as<float>(), x.numel(), partial);
  GPT_CUDA_CHECK_LAUNCH();
  finish_sum_kernel<<<1, 1024, 0, stream_of(ctx)>>>(partial, kReductionBlocks, out.data_as<float>());
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void residual_add(Context& ctx, const Tensor& out, const Tensor& x, const Tensor& delta, const Tensor& delta_bias) {
  GPT_CHECK(out.numel() == x.numel() && delta.numel() == x.numel()) << "residual_add shapes";
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    residual_add_kernel<T><<<grid_for(x.numel(), kThreads), kThreads, 0, stream_of(ctx)>>>(
        device_data<T>(out), device_data<T>(x), device_data<T>(delta), optional_device_data<T>(delta_bias), x.numel(),
        x.cols());
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void gelu_forward(Context& ctx, const Tensor& y, const Tensor& x) {
  GPT_CHECK(y.numel() == x.numel()) << "gelu shapes";
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_kernel<T><<<grid_for(x.numel(), kThreads), kThreads, 0, stream_of(ctx)>>>(device_data<T>(y),
                                                                                           device_data<T>(x), x.numel());
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void gelu_backward(Context& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x) {
  GPT_CHECK(dx.numel() == x.numel() && dy.numel() == x.numel()) << "gelu backward shapes";
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<T><<<grid_for(x.numel(), kThreads), kThreads, 0, stream_of(ctx)>>>(
        device_data<T>(dx), device_data<T>(dy), device_data<T>(x), x.numel());
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void cast(Context& ctx, const Tensor& out, const Tensor& in) {
  GPT_CHECK_EQ(out.numel(), in.numel()) << "cast sizes";
  dispatch_float_type(in.dtype(), [&](auto in_tag) {
    using In = decltype(in_tag);
    dispatch_float_type(out.dtype(), [&](auto out_tag) {
      using Out = decltype(out_tag);
      cast_kernel<In, Out><<<grid_for(in.numel(), kThreads), kThreads, 0, stream_of(ctx)>>>(
          device_data<Out>(out), device_data<In>(in), in.numel());
    });
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void zero(Context& ctx, const Tensor& x) {
  if (x.numel() > 0) GPT_CUDA_CHECK(cudaMemsetAsync(x.data(), 0, x.bytes(), stream_of(ctx)));
}

void copy(Context& ctx, const Tensor& out, const Tensor& in) {
  GPT_CHECK(out.dtype() == in.dtype() && out.numel() == in.numel()) << "copy " << in.to_string() << " to " << out.to_string();
  if (in.numel() > 0) {
    GPT_CUDA_CHECK(cudaMemcpyAsync(out.data(), in.data(), in.bytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
  }
}

void scale(Context& ctx, const Tensor& x, float factor) {
  scale_kernel<<<grid_for(x.numel(), kThreads), kThreads, 0, stream_of(ctx)>>>(x.data_as<float>(), factor, x.numel());
  GPT_CUDA_CHECK_LAUNCH();
}

void adamw_update(Context& ctx, const ops::AdamWStep& step, const Tensor& master, const Tensor& grad,
                  const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& param_out) {
  const int64_t n = master.numel();
  GPT_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n) << "adamw sizes";
  __nv_bfloat16* copy = nullptr;
  if (param_out.defined()) {
    GPT_CHECK(param_out.numel() == n && param_out.dtype() == DType::kBFloat16) << "adamw copy";
    copy = static_cast<__nv_bfloat16*>(param_out.data());
  }
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(step.beta1), static_cast<double>(step.step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(step.beta2), static_cast<double>(step.step));
  adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(
      master.data_as<float>(), grad.data_as<float>(), exp_avg.data_as<float>(), exp_avg_sq.data_as<float>(), copy, n,
      step.learning_rate, step.beta1, step.beta2, step.epsilon, 1.0f - step.learning_rate * step.weight_decay,
      static_cast<float>(step.learning_rate / bias_correction1), static_cast<float>(std::sqrt(bias_correction2)),
      step.grad_scale);
  GPT_CUDA_CHECK_LAUNCH();
}

void sum_of_squares(Context& ctx, const Tensor& out, const Tensor& x) { reduce_into<true>(ctx, out, x, "sum_of_squares"); }
void sum(Context& ctx, const Tensor& out, const Tensor& x) { reduce_into<false>(ctx, out, x, "sum"); }

}  // namespace gpt::cuda_ops

// SwiGLU (Megatron's --swiglu): x [rows, 2f] = [gate | up], y = silu(gate) * up.
#include <cmath>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/element.h"

namespace gpt::cpu {
namespace {

// silu(g) = g / (1 + exp(-g)), as the contract writes it (the CUDA kernel uses the same formula).
float silu(float g) { return g / (1.0f + std::exp(-g)); }
// silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
float silu_derivative(float g) {
  const float sigmoid = 1.0f / (1.0f + std::exp(-g));
  return sigmoid * (1.0f + g * (1.0f - sigmoid));
}

void check_swiglu_shapes(const Tensor& half, const Tensor& x, const char* what) {
  GPT_CHECK(x.cols() % 2 == 0) << "SwiGLU input " << x.to_string() << ": the last dim is [gate | up]";
  GPT_CHECK(half.numel() * 2 == x.numel() && half.cols() * 2 == x.cols() && half.dtype() == x.dtype())
      << "SwiGLU " << what << " " << half.to_string() << " for input " << x.to_string();
}

}  // namespace

void swiglu_forward(Context& ctx, const Tensor& y, const Tensor& x) {
  check_swiglu_shapes(y, x, "output");
  const int64_t rows = x.rows(), f = x.cols() / 2;
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    T* out = y.data_as<T>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < f; ++j) {
        const float g = load(in, r * 2 * f + j), u = load(in, r * 2 * f + f + j);
        store(out, r * f + j, silu(g) * u);
      }
    }
  });
}

void swiglu_backward(Context& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x) {
  check_swiglu_shapes(dy, x, "output gradient");
  GPT_CHECK(dx.numel() == x.numel() && dx.dtype() == x.dtype()) << "SwiGLU input gradient " << dx.to_string();
  const int64_t rows = x.rows(), f = x.cols() / 2;
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    const T* grad_out = dy.data_as<T>();
    T* grad_in = dx.data_as<T>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < f; ++j) {
        // Both inputs of the pair are read before either gradient is written (dx may alias x).
        const float g = load(in, r * 2 * f + j), u = load(in, r * 2 * f + f + j);
        const float d = load(grad_out, r * f + j);
        store(grad_in, r * 2 * f + j, d * u * silu_derivative(g));
        store(grad_in, r * 2 * f + f + j, d * silu(g));
      }
    }
  });
}

}  // namespace gpt::cpu

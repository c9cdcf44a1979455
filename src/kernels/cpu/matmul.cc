// GEMM through OpenBLAS's cblas_sgemm. BF16 and FP16 operands are widened exactly to FP32 first
// (every BF16 or FP16 value is an FP32 value), so the only rounding is FP32 accumulation and the
// final store (an FP16 result beyond 65504 becomes infinite, as cuBLASLt's does). FP8 GEMMs are
// emulated the same way: each operand cast to FP8 (core/fp8.h) and widened, exactly, into scratch;
// the product of two FP8 values is exact in FP32, so again only the accumulation and the inverse
// scales (in sgemm's alpha) round.
#include <cblas.h>

#include <atomic>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/gemm_epilogue.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/gemm_shape.h"
#include "kernels/cpu/element.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace gpt::cpu {

void use_blas_threads(int threads) {
  static std::atomic<int> current{-1};
  if (current.exchange(threads) != threads) openblas_set_num_threads(threads);
}

namespace {

// FP32 view of a float32, bfloat16 or float16 tensor: the data itself, or a widened copy in scratch.
const float* as_float32(Context& ctx, int slot, const Tensor& t) {
  if (t.dtype() == DType::kFloat32) return t.data_as<float>();
  float* widened = ctx.cpu_scratch(slot, static_cast<size_t>(t.numel()));
  dispatch_float_type(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* source = t.data_as<T>();
    for (int64_t i = 0; i < t.numel(); ++i) widened[i] = load(source, i);
  });
  return widened;
}

// round_to_fp8(t * scale) of a float32 or bfloat16 tensor, widened to FP32 in scratch.
const float* as_fp8_in_float32(Context& ctx, int slot, const Tensor& t, Fp8Format format, float scale) {
  float* cast = ctx.cpu_scratch(slot, static_cast<size_t>(t.numel()));
  dispatch_float_type(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* source = t.data_as<T>();
    parallel_for(ctx, t.numel(), 16384, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) cast[i] = round_to_fp8(load(source, i) * scale, format);
    });
  });
  return cast;
}

// The GeLU epilogue over [begin, end): pre = c, out = gelu(c) (simd::gelu; tails through the same
// vector code).
template <typename T>
GPT_SIMD_INLINE void gelu_epilogue(T* out, T* pre, const float* c, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + simd::kLanes <= end; i += simd::kLanes) {
    const simd::f32x8 v = simd::load8(c + i);
    simd::store8(pre + i, v);
    simd::store8(out + i, simd::gelu(v));
  }
  if (i < end) {
    const simd::f32x8 v = simd::load_partial(c + i, end - i);
    simd::store_partial(pre + i, end - i, v);
    simd::store_partial(out + i, end - i, simd::gelu(v));
  }
}
GPT_CPU_CLONES void gelu_epilogue_f32(float* out, float* pre, const float* c, int64_t begin, int64_t end) {
  gelu_epilogue(out, pre, c, begin, end);
}
GPT_CPU_CLONES void gelu_epilogue_bf16(bf16* out, bf16* pre, const float* c, int64_t begin, int64_t end) {
  gelu_epilogue(out, pre, c, begin, end);
}
GPT_CPU_CLONES void gelu_epilogue_fp16(fp16* out, fp16* pre, const float* c, int64_t begin, int64_t end) {
  gelu_epilogue(out, pre, c, begin, end);
}

}  // namespace

void matmul(Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b, const ops::MatmulOptions& options) {
  const auto [m, n, k] = checked_gemm_shape(out, a, b, options);

  use_blas_threads(ctx.cpu_threads());
  const ops::MatmulOptions::Fp8Operands& fp8 = options.fp8;
  const float* a32 = fp8.enabled ? as_fp8_in_float32(ctx, 0, a, fp8.a_format, fp8.a_scale) : as_float32(ctx, 0, a);
  const float* b32 = fp8.enabled ? as_fp8_in_float32(ctx, 1, b, fp8.b_format, fp8.b_scale) : as_float32(ctx, 1, b);
  const float alpha = fp8.enabled ? options.alpha / (fp8.a_scale * fp8.b_scale) : options.alpha;
  float* c32;
  if (out.dtype() == DType::kFloat32) {
    c32 = out.data_as<float>();
  } else {
    c32 = ctx.cpu_scratch(2, static_cast<size_t>(out.numel()));
    if (options.beta != 0.0f) {
      dispatch_float_type(out.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T* existing = out.data_as<T>();
        for (int64_t i = 0; i < out.numel(); ++i) c32[i] = load(existing, i);
      });
    }
  }
  if (m > 0 && n > 0) {
    if (k == 0) {
      for (int64_t i = 0; i < m * n; ++i) c32[i] = options.beta == 0.0f ? 0.0f : options.beta * c32[i];
    } else {
      cblas_sgemm(CblasRowMajor, options.transpose_a ? CblasTrans : CblasNoTrans,
                  options.transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(k), alpha, a32, static_cast<int>(a.cols()), b32,
                  static_cast<int>(b.cols()), options.beta, c32, static_cast<int>(n));
    }
  }
  if (options.bias.defined()) {
    dispatch_float_type(options.bias.dtype(), [&](auto tag) {
      using B = decltype(tag);
      const B* bias = options.bias.data_as<B>();
      for (int64_t row = 0; row < m; ++row) {
        for (int64_t col = 0; col < n; ++col) c32[row * n + col] += load(bias, col);
      }
    });
  }
  dispatch_float_type(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* result = out.data_as<T>();
    if (options.pre_gelu.defined()) {
      // As cuBLASLt's GELU_AUX epilogue: GeLU of the FP32 pre-activation, which is stored too.
      T* pre = options.pre_gelu.data_as<T>();
      parallel_for(ctx, m * n, 16384, [&](int64_t begin, int64_t end) {
        if constexpr (std::is_same_v<T, float>) {
          gelu_epilogue_f32(result, pre, c32, begin, end);
        } else if constexpr (std::is_same_v<T, bf16>) {
          gelu_epilogue_bf16(result, pre, c32, begin, end);
        } else {
          gelu_epilogue_fp16(result, pre, c32, begin, end);
        }
      });
    } else if constexpr (!std::is_same_v<T, float>) {
      for (int64_t i = 0; i < m * n; ++i) store(result, i, c32[i]);
    }
  });
}

void gemm_rows_epilogue(const Tensor& out, const Tensor& pre_gelu, const Tensor& bias, float* c32, int64_t first_row,
                        int64_t rows) {
  const int64_t n = out.cols();
  if (bias.defined()) {
    dispatch_float_type(bias.dtype(), [&](auto tag) {
      using B = decltype(tag);
      const B* b = bias.data_as<B>();
      for (int64_t row = 0; row < rows; ++row) {
        for (int64_t col = 0; col < n; ++col) c32[row * n + col] += load(b, col);
      }
    });
  }
  dispatch_float_type(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* result = out.data_as<T>() + first_row * n;
    if (pre_gelu.defined()) {
      T* pre = pre_gelu.data_as<T>() + first_row * n;
      if constexpr (std::is_same_v<T, float>) {
        gelu_epilogue_f32(result, pre, c32, 0, rows * n);
      } else if constexpr (std::is_same_v<T, bf16>) {
        gelu_epilogue_bf16(result, pre, c32, 0, rows * n);
      } else {
        gelu_epilogue_fp16(result, pre, c32, 0, rows * n);
      }
    } else if constexpr (!std::is_same_v<T, float>) {
      for (int64_t i = 0; i < rows * n; ++i) store(result, i, c32[i]);
    }
  });
}

void bias_grad(Context& ctx, const Tensor& dbias, const Tensor& dy) {
  const int64_t rows = dy.rows(), cols = dy.cols();
  GPT_CHECK_EQ(dbias.numel(), cols);
  float* grad = dbias.data_as<float>();
  dispatch_float_type(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* d = dy.data_as<T>();
    thread_local std::vector<double> totals;
    totals.assign(static_cast<size_t>(cols), 0.0);
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t col = 0; col < cols; ++col) totals[col] += load(d, row * cols + col);
    }
    for (int64_t col = 0; col < cols; ++col) grad[col] += static_cast<float>(totals[col]);
  });
}

}  // namespace gpt::cpu

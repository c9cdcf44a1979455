// Grouped GEMMs (the experts of a mixture-of-experts layer) on the CPU: every group's GEMM as matmul
// (kernels/cpu/matmul.cc) computes it (operands widened exactly to FP32, cblas_sgemm, matmul's
// epilogue), threaded over groups and over a large group's rows (run_groups says how and why).
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/element.h"
#include "kernels/cpu/gemm_epilogue.h"
#include "kernels/cpu/parallel.h"
#include "kernels/grouped_gemm.h"

namespace gpt::cpu {
namespace {

// FP32 copy of t into widened (exact: every BF16 or FP16 value is an FP32 value).
void widen_into(Context& ctx, float* widened, const Tensor& t) {
  dispatch_float_type(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* source = t.data_as<T>();
    parallel_for(ctx, t.numel(), 16384, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) widened[i] = load(source, i);
    });
  });
}

// An FP32 view of t: its data, or a widened copy in scratch `slot`.
const float* as_float32(Context& ctx, int slot, const Tensor& t) {
  if (t.dtype() == DType::kFloat32) return t.data_as<float>();
  float* widened = ctx.cpu_scratch(slot, static_cast<size_t>(t.numel()));
  widen_into(ctx, widened, t);
  return widened;
}

// One group's FP32 operands and output rows.
struct GroupOperands {
  const GemmGroup* group;
  const float* a;
  const float* b;
  float* c;  // the group's output rows, [m, n]
};

// Group g's GEMM into its FP32 output rows (cblas_sgemm on whatever BLAS threads are set).
void group_gemm(const GroupOperands& operands) {
  const GemmGroup& g = *operands.group;
  const auto [m, n, k] = g.shape;
  const ops::MatmulOptions& o = g.options;
  if (k == 0) {
    for (int64_t i = 0; i < m * n; ++i) operands.c[i] = o.beta == 0.0f ? 0.0f : o.beta * operands.c[i];
    return;
  }
  cblas_sgemm(CblasRowMajor, o.transpose_a ? CblasTrans : CblasNoTrans, o.transpose_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), o.alpha, operands.a,
              static_cast<int>(g.a.cols()), operands.b, static_cast<int>(g.b.cols()), o.beta, operands.c,
              static_cast<int>(n));
}

// OpenBLAS 0.3's interface/gemm.c runs a GEMM of m n k <= 65536 * GEMM_MULTITHREAD_THRESHOLD on one
// thread whatever the thread count; above, on all of them, and its threaded GEMM rounds differently
// from its one-thread GEMM (as cutting a GEMM into row blocks does: it picks its kernels from the
// whole shape). So only these small GEMMs may run concurrently, one BLAS thread each, and still
// give exactly the numbers of one matmul per group (tests/unit/kernels/grouped_matmul_test.cc).
bool single_threaded_in_openblas(const GemmShape& s) {
  return static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) <=
         65536.0 * OPENBLAS_GEMM_MULTITHREAD_THRESHOLD;
}

void epilogue_rows(const GroupOperands& g, int64_t begin, int64_t end) {
  const ops::MatmulOptions& o = g.group->options;
  gemm_rows_epilogue(g.group->out, o.pre_gelu, o.bias, g.c + begin * g.group->shape.n, begin, end - begin);
}

// Every group's GEMM, then (with `epilogue`) matmul's epilogue on its rows: the small groups
// concurrently on the pool (threaded over groups, one BLAS thread each), the large ones one after
// another with the context's BLAS threads (OpenBLAS splits their rows; the epilogue is threaded over
// rows).
void run_groups(Context& ctx, const std::vector<GroupOperands>& groups, bool epilogue) {
  std::vector<const GroupOperands*> small, large;
  for (const GroupOperands& g : groups) (single_threaded_in_openblas(g.group->shape) ? small : large).push_back(&g);
  if (!small.empty()) {
    use_blas_threads(1);
    parallel_for(ctx, static_cast<int64_t>(small.size()), 1, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        const GroupOperands& g = *small[static_cast<size_t>(i)];
        group_gemm(g);
        if (epilogue) epilogue_rows(g, 0, g.group->shape.m);
      }
    });
  }
  if (large.empty()) return;
  use_blas_threads(ctx.cpu_threads());
  for (const GroupOperands* g : large) {
    group_gemm(*g);
    if (!epilogue) continue;
    parallel_for(ctx, g->group->shape.m, std::max<int64_t>(1, 16384 / std::max<int64_t>(g->group->shape.n, 1)),
                 [&](int64_t begin, int64_t end) { epilogue_rows(*g, begin, end); });
  }
}

}  // namespace

void grouped_matmul(Context& ctx, const Tensor& out, const Tensor& a, std::span<const Tensor> b,
                    std::span<const int64_t> group_rows, const ops::GroupedMatmulOptions& options) {
  const std::vector<GemmGroup> groups = grouped_matmul_groups(out, a, b, group_rows, options);
  if (groups.empty()) return;
  const float* a32 = as_float32(ctx, 0, a);
  // The weights, widened one after another into one scratch (when not float32).
  int64_t weights = 0;
  for (const GemmGroup& g : groups) weights += g.b.numel();
  float* b32 = groups.front().b.dtype() == DType::kFloat32 ? nullptr : ctx.cpu_scratch(1, static_cast<size_t>(weights));
  float* c32 = out.dtype() == DType::kFloat32 ? out.data_as<float>()
                                              : ctx.cpu_scratch(2, static_cast<size_t>(out.numel()));
  std::vector<GroupOperands> operands;
  int64_t offset = 0;
  for (const GemmGroup& g : groups) {
    const float* weight = b32 == nullptr ? g.b.data_as<float>() : b32 + offset;
    if (b32 != nullptr) {
      widen_into(ctx, b32 + offset, g.b);
      offset += g.b.numel();
    }
    operands.push_back(GroupOperands{&g, a32 + g.first_row * a.cols(), weight, c32 + g.first_row * out.cols()});
  }
  run_groups(ctx, operands, /*epilogue=*/true);
}

void grouped_matmul_weight_grad(Context& ctx, std::span<const Tensor> out, const Tensor& dy, const Tensor& x,
                                std::span<const int64_t> group_rows) {
  const std::vector<GemmGroup> groups = grouped_weight_grad_groups(out, dy, x, group_rows);
  if (groups.empty()) return;
  const float* dy32 = as_float32(ctx, 0, dy);
  const float* x32 = as_float32(ctx, 1, x);
  std::vector<GroupOperands> operands;
  for (const GemmGroup& g : groups) {
    operands.push_back(GroupOperands{&g, dy32 + g.first_row * dy.cols(), x32 + g.first_row * x.cols(),
                                     g.out.data_as<float>()});
  }
  run_groups(ctx, operands, /*epilogue=*/false);
}

}  // namespace gpt::cpu

// Device dispatch for the op set (kernels/op_list.inc). Each op checks that its tensors live on the
// context's device, records itself in the per-op profile (kernels/op_profile.h) and forwards to the
// backend; the CUDA backend joins here when it is built (kernels/cuda).
#include "kernels/ops.h"

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/op_profile.h"
#ifdef GPT_WITH_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace gpt::ops {
namespace {

void check_devices(const Context& ctx, const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined()) {
      GPT_CHECK(t->device() == ctx.device())
          << op << ": " << t->to_string() << " on a " << device_name(ctx.device()) << " context";
    }
  }
}

// The role of a GEMM in a linear layer, by its transposes (the model computes x W^T forward,
// dY W for the input gradient and dY^T x for the weight gradient).
const char* matmul_label(const MatmulOptions& options) {
  if (options.transpose_a) return "matmul (weight gradient)";
  return options.transpose_b ? "matmul (forward)" : "matmul (input gradient)";
}

void check_segments(const Tensor& master, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                    const Tensor& param_out, std::span<const AdamWSegment> segments) {
  const int64_t n = master.numel();
  GPT_CHECK(master.dtype() == DType::kFloat32 && grad.dtype() == DType::kFloat32 &&
            exp_avg.dtype() == DType::kFloat32 && exp_avg_sq.dtype() == DType::kFloat32)
      << "adamw_update_segments: the optimizer state is float32";
  GPT_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n) << "adamw_update_segments sizes";
  GPT_CHECK(!param_out.defined() || (param_out.numel() == n && is_float16_dtype(param_out.dtype())))
      << "adamw_update_segments parameter copy " << param_out.to_string();
  // In bounds and disjoint: an overlap would update some elements twice, in an undefined order.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  ranges.reserve(segments.size());
  for (const AdamWSegment& s : segments) {
    GPT_CHECK(s.offset >= 0 && s.length >= 0 && s.offset + s.length <= n)
        << "adamw segment [" << s.offset << ", " << s.offset + s.length << ") outside [0, " << n << ")";
    ranges.emplace_back(s.offset, s.offset + s.length);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    GPT_CHECK(ranges[i].first >= ranges[i - 1].second)
        << "adamw segments overlap at [" << ranges[i].first << ", " << ranges[i - 1].second << ")";
  }
}

}  // namespace

#define GPT_EXPAND(...) __VA_ARGS__
#ifdef GPT_WITH_CUDA
#define GPT_BACKEND_CALL(name, arguments)                              \
  if (ctx.device() == Device::kCuda) return cuda_ops::name arguments; \
  cpu::name arguments
#else
#define GPT_BACKEND_CALL(name, arguments)                                                    \
  GPT_CHECK(ctx.device() == Device::kCpu) << #name << ": this build has no CUDA backend"; \
  cpu::name arguments
#endif
// The dispatch of one op; `label` names it in the per-op profile.
#define GPT_DISPATCH_AS(label, name, arguments, tensors)    \
  check_devices(ctx, #name, {GPT_EXPAND tensors});         \
  op_profile::Scope gpt_profile_scope_(ctx, label);         \
  GPT_BACKEND_CALL(name, arguments)

#define GPT_OP(name, parameters, arguments, tensors) \
  void name parameters { GPT_DISPATCH_AS(#name, name, arguments, tensors); }
#define GPT_OP_CUSTOM(name, parameters, arguments, tensors)
#include "kernels/op_list.inc"
#undef GPT_OP
#undef GPT_OP_CUSTOM

void matmul(Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b, const MatmulOptions& options) {
  GPT_DISPATCH_AS(matmul_label(options), matmul, (ctx, out, a, b, options),
                  (&out, &a, &b, &options.bias, &options.pre_gelu));
}

void grouped_matmul(Context& ctx, const Tensor& out, const Tensor& a, std::span<const Tensor> b,
                    std::span<const int64_t> group_rows, const GroupedMatmulOptions& options) {
  for (const Tensor& t : b) check_devices(ctx, "grouped_matmul", {&t});
  for (const Tensor& t : options.bias) check_devices(ctx, "grouped_matmul", {&t});
  GPT_DISPATCH_AS("grouped matmul (forward or input gradient)", grouped_matmul, (ctx, out, a, b, group_rows, options),
                  (&out, &a, &options.pre_gelu));
}

void grouped_matmul_weight_grad(Context& ctx, std::span<const Tensor> out, const Tensor& dy, const Tensor& x,
                                std::span<const int64_t> group_rows) {
  for (const Tensor& t : out) check_devices(ctx, "grouped_matmul_weight_grad", {&t});
  GPT_DISPATCH_AS("grouped matmul (weight gradient)", grouped_matmul_weight_grad, (ctx, out, dy, x, group_rows),
                  (&dy, &x));
}

void adamw_update_segments(Context& ctx, const AdamWStep& step, const Tensor& master, const Tensor& grad,
                           const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& param_out,
                           std::span<const AdamWSegment> segments) {
  check_segments(master, grad, exp_avg, exp_avg_sq, param_out, segments);
  GPT_DISPATCH_AS("adamw_update_segments", adamw_update_segments,
                  (ctx, step, master, grad, exp_avg, exp_avg_sq, param_out, segments),
                  (&master, &grad, &exp_avg, &exp_avg_sq, &param_out));
}

#undef GPT_DISPATCH_AS
#undef GPT_BACKEND_CALL
#undef GPT_EXPAND

}  // namespace gpt::ops

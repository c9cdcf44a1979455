// Causal attention through cuDNN's fused flash attention, forward and backward, built with the
// backend graph API (cudnn_graph.h) in the operation pattern cuDNN's SDPA engines recognize (the
// pattern of the cuDNN frontend's sdpa and sdpa_backward nodes). One execution plan per shape,
// dtype, scale and determinism, cached in the device context.
//
// Layouts are ours, not cuDNN's: cuDNN sees [b, heads, s, d] tensors through strides. Only one
// query head per key/value group and no attention dropout (cudnn_attention_applies), where ops'
// qkv [s, b, groups, (q + 2) d] is [s, b, heads, 3d]:
//   qkv  [s, b, heads, 3d]: Q, K, V of a head side by side -> Q/K/V strides (heads*3d, 3d, b*heads*3d, 1)
//   out  [s, b, heads, d]                                     -> O/dO strides (heads*d, d, b*heads*d, 1)
//   lse  [b, heads, s] float32: the softmax statistics (max + log sum exp of the scaled, masked
//        scores), cuDNN's "Stats", read back by the backward pass.
// Determinism: cuDNN's default backward accumulates dQ with atomics in an FP32 buffer; with
// KernelOptions::deterministic the graph writes dQ directly (cuDNN's "dP workspace" variant) and
// engines carrying the NONDETERMINISTIC numerical note are refused.
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

#include "core/cuda_check.h"
#include "core/cuda_device_context.cuh"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/cudnn_graph.h"

namespace gpt::cuda_ops {
namespace {

using cudnn_graph::ExecutionPlan;
using cudnn_graph::Graph;
using cudnn_graph::TensorId;

// Uids of the tensors bound at execution.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSoftmaxSum, kDQAccumulator };

// The sizes and the 16-bit storage type of Q, K, V, O and their gradients (BF16 or FP16; the
// statistics and accumulations are FP32 either way).
struct Shape {
  int64_t s, b, heads, d;
  cudnnDataType_t type;
};

Shape shape_of(const Tensor& qkv) {
  GPT_CHECK(qkv.rank() == 4 && qkv.size(3) % 3 == 0) << "qkv must be [s, b, heads, 3d], got " << qkv.to_string();
  GPT_CHECK(is_float16_dtype(qkv.dtype())) << "cuDNN attention takes bfloat16 or float16, got " << qkv.to_string();
  return {qkv.size(0), qkv.size(1), qkv.size(2), qkv.size(3) / 3,
          qkv.dtype() == DType::kFloat16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16};
}

// Q, K or V as [b, heads, s, d] inside qkv; `transposed` gives K^T / V^T as [b, heads, d, s].
TensorId qkv_part(Graph& g, Uid uid, const Shape& sh, bool transposed) {
  const int64_t head = 3 * sh.d, batch = sh.heads * head, row = sh.b * batch;
  if (transposed) return g.tensor(uid, sh.type, {sh.b, sh.heads, sh.d, sh.s}, {batch, head, 1, row});
  return g.tensor(uid, sh.type, {sh.b, sh.heads, sh.s, sh.d}, {batch, head, row, 1});
}

// O, dO (or dQ, dK, dV when `in_qkv`) as [b, heads, s, d].
TensorId output_part(Graph& g, Uid uid, const Shape& sh, bool in_qkv) {
  const int64_t head = (in_qkv ? 3 : 1) * sh.d, batch = sh.heads * head, row = sh.b * batch;
  return g.tensor(uid, sh.type, {sh.b, sh.heads, sh.s, sh.d}, {batch, head, row, 1});
}

TensorId row_statistic(Graph& g, Uid uid, const Shape& sh) {
  return g.tensor(uid, CUDNN_DATA_FLOAT, {sh.b, sh.heads, sh.s, 1}, {sh.heads * sh.s, sh.s, 1, 1});
}

// scores [b, heads, s, s] with the entries above the diagonal (key after query) set to -inf.
TensorId causal_mask(Graph& g, TensorId scores, const Shape& sh) {
  const Graph::Dims square{sh.b, sh.heads, sh.s, sh.s};
  const TensorId row = g.virtual_tensor(CUDNN_DATA_INT32, square);
  const TensorId column = g.virtual_tensor(CUDNN_DATA_INT32, square);
  g.gen_index(scores, 2, row);
  g.gen_index(scores, 3, column);
  const TensorId keep = g.virtual_tensor(CUDNN_DATA_BOOLEAN, square);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, column, keep, CUDNN_DATA_BOOLEAN);
  const TensorId masked = g.virtual_tensor(CUDNN_DATA_FLOAT, square);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, g.scalar(-INFINITY), keep, masked);
  return masked;
}

// S = scale * Q K^T, causally masked: [b, heads, s, s] float.
TensorId masked_scores(Graph& g, TensorId query, TensorId key_t, const Shape& sh, float scale) {
  const Graph::Dims square{sh.b, sh.heads, sh.s, sh.s};
  const TensorId products = g.virtual_tensor(CUDNN_DATA_FLOAT, square);
  g.matmul(query, key_t, products);
  const TensorId scaled = g.virtual_tensor(CUDNN_DATA_FLOAT, square);
  g.pointwise(CUDNN_POINTWISE_MUL, products, g.scalar(scale), scaled);
  return causal_mask(g, scaled, sh);
}

// Forward: Stats = max + log(sum exp(S - max)); O = softmax(S) V.
ExecutionPlan build_forward(cudnnHandle_t handle, const Shape& sh, float scale, bool deterministic) {
  Graph g;
  const Graph::Dims square{sh.b, sh.heads, sh.s, sh.s}, rows{sh.b, sh.heads, sh.s, 1};
  const TensorId scores = masked_scores(g, qkv_part(g, kQ, sh, false), qkv_part(g, kK, sh, true), sh, scale);
  const TensorId row_max = g.virtual_tensor(CUDNN_DATA_FLOAT, rows);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, scores, row_max);
  const TensorId shifted = g.virtual_tensor(CUDNN_DATA_FLOAT, square);
  g.pointwise(CUDNN_POINTWISE_SUB, scores, row_max, shifted);
  const TensorId exponentials = g.virtual_tensor(CUDNN_DATA_FLOAT, square);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, exponentials);
  const TensorId row_sum = g.virtual_tensor(CUDNN_DATA_FLOAT, rows);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, exponentials, row_sum);
  const TensorId log_sum = g.virtual_tensor(CUDNN_DATA_FLOAT, rows);
  g.pointwise(CUDNN_POINTWISE_LOG, row_sum, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, row_max, log_sum, row_statistic(g, kStats, sh));
  // The probabilities enter the second matmul in the I/O dtype, as cuDNN's engines require.
  const TensorId probabilities = g.virtual_tensor(sh.type, square);
  g.pointwise(CUDNN_POINTWISE_DIV, exponentials, row_sum, probabilities);
  g.matmul(probabilities, qkv_part(g, kV, sh, false), output_part(g, kO, sh, false));
  return g.build(handle, deterministic, "attention forward");
}

// Backward, with P = exp(S - Stats) recomputed and D = rowsum(dO * O):
//   dV = P^T dO;  dS = P * (dO V^T - D) * scale;  dK = dS^T Q;  dQ = dS K.
// D is kept in a real FP32 tensor (kSoftmaxSum); without determinism dQ is accumulated by cuDNN in
// an FP32 tensor (kDQAccumulator) and converted at the end.
ExecutionPlan build_backward(cudnnHandle_t handle, const Shape& sh, float scale, bool deterministic) {
  Graph g;
  const Graph::Dims square{sh.b, sh.heads, sh.s, sh.s}, rows{sh.b, sh.heads, sh.s, 1};
  const Graph::Dims transposed_strides{sh.heads * sh.s * sh.s, sh.s * sh.s, 1, sh.s};
  const TensorId grad_out = output_part(g, kDO, sh, false);

  const TensorId products = g.virtual_tensor(CUDNN_DATA_FLOAT, {sh.b, sh.heads, sh.s, sh.d});
  g.pointwise(CUDNN_POINTWISE_MUL, grad_out, output_part(g, kO, sh, false), products);
  const TensorId row_dot = g.virtual_tensor(CUDNN_DATA_FLOAT, rows);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, products, row_dot);
  const TensorId softmax_sum = row_statistic(g, kSoftmaxSum, sh);
  g.pointwise(CUDNN_POINTWISE_MUL, row_dot, g.scalar(1.0f), softmax_sum);

  const TensorId query = qkv_part(g, kQ, sh, false), key_t = qkv_part(g, kK, sh, true);
  const TensorId scores = masked_scores(g, query, key_t, sh, scale);
  const TensorId shifted = g.virtual_tensor(CUDNN_DATA_FLOAT, square);
  g.pointwise(CUDNN_POINTWISE_SUB, scores, row_statistic(g, kStats, sh), shifted);
  const TensorId probabilities = g.virtual_tensor(CUDNN_DATA_FLOAT, square);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, probabilities);
  const TensorId probabilities_t =
      g.virtual_tensor(sh.type, {sh.b, sh.heads, sh.s, sh.s}, transposed_strides);
  g.reshape(probabilities, probabilities_t);
  g.matmul(probabilities_t, grad_out, output_part(g, kDV, sh, true));

  const TensorId grad_probabilities = g.virtual_tensor(CUDNN_DATA_FLOAT, square);
  g.matmul(grad_out, qkv_part(g, kV, sh, true), grad_probabilities);
  const TensorId centered = g.virtual_tensor(CUDNN_DATA_FLOAT, square);
  g.pointwise(CUDNN_POINTWISE_SUB, grad_probabilities, softmax_sum, centered);
  const TensorId grad_scores_unscaled = g.virtual_tensor(CUDNN_DATA_FLOAT, square);
  g.pointwise(CUDNN_POINTWISE_MUL, centered, probabilities, grad_scores_unscaled);
  const TensorId grad_scores = g.virtual_tensor(CUDNN_DATA_FLOAT, square);
  g.pointwise(CUDNN_POINTWISE_MUL, grad_scores_unscaled, g.scalar(scale), grad_scores);

  const TensorId grad_scores_t = g.virtual_tensor(sh.type, {sh.b, sh.heads, sh.s, sh.s}, transposed_strides);
  g.reshape(grad_scores, grad_scores_t);
  g.matmul(grad_scores_t, query, output_part(g, kDK, sh, true));

  // K as [b, heads, s, d] again: a reshape of the K^T tensor (a uid binds one descriptor).
  const int64_t head = 3 * sh.d, batch = sh.heads * head, row = sh.b * batch;
  const TensorId key = g.virtual_tensor(CUDNN_DATA_FLOAT, {sh.b, sh.heads, sh.s, sh.d}, {batch, head, row, 1});
  g.reshape(key_t, key);
  const TensorId grad_query = output_part(g, kDQ, sh, true);
  if (deterministic) {
    g.matmul(grad_scores, key, grad_query);
  } else {
    const Graph::Dims dims{sh.b, sh.heads, sh.s, sh.d};
    const TensorId accumulator = g.tensor(kDQAccumulator, CUDNN_DATA_FLOAT, dims, cudnn_graph::packed_strides(dims));
    g.matmul(grad_scores, key, accumulator);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, accumulator, grad_query);
  }
  return g.build(handle, deterministic, "attention backward");
}

// Per-context state: the cuDNN handle on the context's stream, the plans, and a grow-once
// workspace (plan workspace plus the backward's FP32 tensors).
struct CudnnAttention {
  cudnnHandle_t handle = nullptr;
  std::map<std::tuple<bool, int64_t, int64_t, int64_t, int64_t, uint32_t, bool, int>, ExecutionPlan> plans;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  explicit CudnnAttention(cudaStream_t stream) {
    GPT_CUDNN_CHECK(cudnnCreate(&handle));
    GPT_CUDNN_CHECK(cudnnSetStream(handle, stream));
  }
  ~CudnnAttention() {
    plans.clear();
    if (workspace != nullptr) cudaFree(workspace);
    if (handle != nullptr) cudnnDestroy(handle);
  }
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  const ExecutionPlan& plan(bool backward, const Shape& sh, float scale, bool deterministic) {
    uint32_t scale_bits;
    std::memcpy(&scale_bits, &scale, sizeof(scale_bits));
    const auto key =
        std::make_tuple(backward, sh.s, sh.b, sh.heads, sh.d, scale_bits, deterministic, static_cast<int>(sh.type));
    auto found = plans.find(key);
    if (found == plans.end()) {
      ExecutionPlan plan = backward ? build_backward(handle, sh, scale, deterministic)
                                    : build_forward(handle, sh, scale, deterministic);
      found = plans.emplace(key, std::move(plan)).first;
    }
    return found->second;
  }

  // At least `bytes` of device workspace, ordered after earlier work on `stream`.
  void* reserve(size_t bytes, cudaStream_t stream) {
    if (bytes > workspace_bytes) {
      if (workspace != nullptr) {
        GPT_CUDA_CHECK(cudaStreamSynchronize(stream));  // earlier calls may still use it
        GPT_CUDA_CHECK(cudaFree(workspace));
      }
      GPT_CUDA_CHECK(cudaMalloc(&workspace, bytes));
      workspace_bytes = bytes;
    }
    return workspace;
  }
};

CudnnAttention& state_of(Context& ctx) {
  std::shared_ptr<void>& slot = ctx.cuda().op_state("cudnn_attention");
  if (!slot) slot = std::make_shared<CudnnAttention>(ctx.cuda().stream());
  return *static_cast<CudnnAttention*>(slot.get());
}

size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

void* at(const Tensor& t, int64_t element_offset) {
  return static_cast<char*>(t.data()) + element_offset * static_cast<int64_t>(dtype_size(t.dtype()));
}

}  // namespace

int cudnn_version() { return static_cast<int>(cudnnGetVersion()); }

bool cudnn_attention_applies(const Tensor& qkv, const Tensor& out, const ops::DropoutMask& dropout) {
  // Grouped-query attention (q > 1 query heads per group) and attention dropout run on the
  // reference kernels: the graphs below have neither.
  if (dropout.enabled() || qkv.rank() != 4 || out.rank() != 4 || !is_float16_dtype(qkv.dtype())) return false;
  const int64_t d = out.size(3);
  if (out.size(2) != qkv.size(2) || qkv.size(3) != 3 * d) return false;  // q == 1
  return d % 8 == 0 && d <= 128;
}

void cudnn_attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale) {
  const Shape sh = shape_of(qkv);
  GPT_CHECK(out.rank() == 4 && out.size(2) == sh.heads && out.size(3) == sh.d)
      << "cuDNN attention takes one query head per group: qkv " << qkv.to_string() << ", out " << out.to_string();
  GPT_CHECK(out.numel() == sh.s * sh.b * sh.heads * sh.d && out.dtype() == qkv.dtype() &&
            lse.numel() == sh.b * sh.heads * sh.s && lse.dtype() == DType::kFloat32)
      << "attention shapes";
  CudnnAttention& state = state_of(ctx);
  const ExecutionPlan& plan = state.plan(false, sh, scale, ctx.options().deterministic);
  void* workspace = state.reserve(round_up(static_cast<size_t>(plan.workspace_bytes())), ctx.cuda().stream());
  plan.execute(state.handle,
               {{kQ, at(qkv, 0)}, {kK, at(qkv, sh.d)}, {kV, at(qkv, 2 * sh.d)}, {kO, out.data()}, {kStats, lse.data()}},
               workspace);
}

void cudnn_attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, float scale) {
  const Shape sh = shape_of(qkv);
  GPT_CHECK(out.rank() == 4 && out.size(2) == sh.heads && out.size(3) == sh.d)
      << "cuDNN attention takes one query head per group: qkv " << qkv.to_string() << ", out " << out.to_string();
  GPT_CHECK(dqkv.numel() == qkv.numel() && dqkv.dtype() == qkv.dtype() && dout.numel() == out.numel() &&
            out.numel() == sh.s * sh.b * sh.heads * sh.d)
      << "attention backward shapes";
  const bool deterministic = ctx.options().deterministic;
  CudnnAttention& state = state_of(ctx);
  const ExecutionPlan& plan = state.plan(true, sh, scale, deterministic);
  const size_t plan_bytes = round_up(static_cast<size_t>(plan.workspace_bytes()));
  const size_t sum_bytes = round_up(static_cast<size_t>(sh.b * sh.heads * sh.s) * sizeof(float));
  const size_t accumulator_bytes =
      deterministic ? 0 : round_up(static_cast<size_t>(sh.b * sh.heads * sh.s * sh.d) * sizeof(float));
  char* workspace =
      static_cast<char*>(state.reserve(plan_bytes + sum_bytes + accumulator_bytes, ctx.cuda().stream()));
  std::vector<std::pair<int64_t, void*>> bindings = {
      {kQ, at(qkv, 0)},       {kK, at(qkv, sh.d)},       {kV, at(qkv, 2 * sh.d)},  {kO, out.data()},
      {kStats, lse.data()},   {kDO, dout.data()},        {kDQ, at(dqkv, 0)},       {kDK, at(dqkv, sh.d)},
      {kDV, at(dqkv, 2 * sh.d)}, {kSoftmaxSum, workspace + plan_bytes}};
  // cuDNN >= 9.6 zeroes the dQ accumulator itself.
  if (!deterministic) bindings.emplace_back(kDQAccumulator, workspace + plan_bytes + sum_bytes);
  plan.execute(state.handle, bindings, workspace);
}

}  // namespace gpt::cuda_ops

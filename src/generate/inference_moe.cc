#include "generate/inference_moe.h"

#include "core/stream_copy.h"
#include "generate/checkpoint_moe.h"
#include "kernels/ops.h"
#include "model/expert_dispatch.h"

namespace gpt {
namespace {

// Rows [first, first + count) of a matrix view of t.
Tensor rows_of(const Tensor& t, int64_t first, int64_t count) { return t.as_matrix().slice(first, first + count); }

}  // namespace

InferenceMoe::InferenceMoe(const ModelConfig& config, TensorSlice slice,
                           const std::map<std::string, std::vector<float>>& params, Context& ctx)
    : config_(config),
      dropless_(config.moe),
      slice_(slice),
      ctx_(ctx),
      activation_(mlp_activation(config)) {
  dropless_.capacity_factor = -1.0;
  dropless_.pad_to_capacity = false;
  const int64_t tp = slice.size, gate = config.swiglu ? 2 : 1;
  expert_ffn_ = config.moe.ffn_hidden_size / tp;
  expert_fc1_ = gate * expert_ffn_;
  shared_ffn_ = config.moe.shared_expert_size / tp;
  shared_fc1_ = gate * shared_ffn_;
  if (!config.moe.expert_bias) return;
  // The expert biases on the device, zeros where the parameters hold none.
  const int64_t experts = config.moe.num_experts;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    if (!config.moe.is_moe_layer(layer)) continue;
    std::vector<float> bias(static_cast<size_t>(experts), 0.0f);
    if (auto it = params.find(expert_bias_name(layer)); it != params.end()) {
      GPT_CHECK_EQ(static_cast<int64_t>(it->second.size()), experts) << expert_bias_name(layer);
      bias = it->second;
    }
    Buffer& buffer = expert_bias_.emplace(layer, Buffer(ctx.device(), bias.size() * sizeof(float))).first->second;
    copy_bytes(ctx.device(), buffer.data(), Device::kCpu, bias.data(), bias.size() * sizeof(float));
  }
}

Tensor InferenceMoe::scratch(Buffer& buffer, DType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * 4;  // float32 and int32
  if (buffer.bytes() < bytes) buffer = Buffer(ctx_.device(), bytes);
  return buffer.as_tensor(dtype, shape);
}

void InferenceMoe::forward(int64_t layer, const Tensor& b, const Tensor& out, const WeightFn& weight) {
  GPT_CHECK(config_.moe.is_moe_layer(layer)) << "layer " << layer << " is not an MoE layer";
  const std::string prefix = "decoder.layers." + std::to_string(layer) + ".mlp.";
  const int64_t n = b.rows(), experts = config_.moe.num_experts, k = config_.moe.topk, h = config_.hidden_size;
  // The router, FP32 (the checkpoint's tensors are FP32 here), on every rank alike.
  const Tensor logits = scratch(logits_, DType::kFloat32, {n, experts});
  ops::MatmulOptions router{.transpose_b = true};
  if (config_.add_bias_linear) router.bias = weight(prefix + "router.bias", {experts});
  ops::matmul(ctx_, logits, b.as_matrix(), weight(prefix + "router.weight", {experts, h}), router);
  const Tensor indices = scratch(indices_, DType::kInt32, {n, k}), weights = scratch(weights_, DType::kFloat32, {n, k});
  Tensor bias;
  const MoeConfig& m = config_.moe;
  if (auto it = expert_bias_.find(layer); it != expert_bias_.end() && !m.sinkhorn) {
    bias = it->second.as_tensor(DType::kFloat32, {experts});
  }
  // Sinkhorn's evaluation routing (MoeBlock::router_options): the top-k of sigmoid (k = 1) or of the
  // full softmax (k > 1) of the logits, those values the weights.
  const ops::RouterOptions options =
      m.sinkhorn ? ops::RouterOptions{.topk = k, .sigmoid = k == 1, .pre_softmax = k > 1}
                 : ops::RouterOptions{.topk = k,
                                      .sigmoid = m.score == RouterScore::kSigmoid,
                                      .pre_softmax = m.pre_softmax,
                                      .num_groups = m.num_groups,
                                      .group_topk = m.group_topk,
                                      .scaling = static_cast<float>(m.topk_scaling_factor)};
  ops::moe_route(ctx_, indices, weights, logits, bias, options);
  routed_experts(prefix, b, out, weight);
  if (m.shared_expert_size > 0) shared_expert(prefix, b, out, weight);
}

void InferenceMoe::routed_experts(const std::string& prefix, const Tensor& b, const Tensor& out, const WeightFn& weight) {
  const int64_t n = b.rows(), k = config_.moe.topk, h = config_.hidden_size;
  const Tensor indices = indices_.as_tensor(DType::kInt32, {n, k}), weights = weights_.as_tensor(DType::kFloat32, {n, k});
  // The dispatch on the host (each expert's row count is needed there for its GEMM).
  host_indices_.resize(static_cast<size_t>(n * k));
  host_weights_.resize(host_indices_.size());
  copy_to_host(ctx_, host_indices_.data(), indices);
  copy_to_host(ctx_, host_weights_.data(), weights);
  ctx_.synchronize();
  const ExpertDispatch d = plan_expert_dispatch(host_indices_, host_weights_, n, dropless_, 1);
  const int64_t rows = d.rows();
  GPT_CHECK_EQ(rows, n * k) << "a dropless dispatch keeps every pair";
  const Tensor source = scratch(source_, DType::kInt32, {rows});
  const Tensor destination = scratch(destination_, DType::kInt32, {n, k});
  copy_to_device(ctx_, source, std::span<const int32_t>(d.source));
  copy_to_device(ctx_, destination, std::span<const int32_t>(d.destination));
  copy_to_device(ctx_, weights, std::span<const float>(d.weights));
  const Tensor permuted = scratch(rows_, DType::kFloat32, {rows, h});
  ops::moe_permute(ctx_, permuted, b.as_matrix(), source, Tensor());
  const Tensor pre = scratch(pre_, DType::kFloat32, {rows, expert_fc1_});
  const Tensor act = scratch(act_, DType::kFloat32, {rows, expert_ffn_});
  const Tensor expert_out = scratch(expert_out_, DType::kFloat32, {rows, h});
  auto for_each_expert = [&](auto&& fn) {
    int64_t first = 0;
    for (int64_t e = 0; e < config_.moe.num_experts; ++e) {
      const int64_t count = d.expert_rows[static_cast<size_t>(e)];
      if (count > 0) fn(std::to_string(e), first, count);
      first += count;
    }
  };
  const std::string fc1 = prefix + "experts.linear_fc1.", fc2 = prefix + "experts.linear_fc2.";
  const bool bias = config_.add_bias_linear;
  mlp_up_forward(ctx_, activation_, pre, act, [&](const Tensor& into, const Tensor& pre_gelu) {
    for_each_expert([&](const std::string& e, int64_t first, int64_t count) {
      ops::MatmulOptions o{.transpose_b = true};
      if (bias) o.bias = weight(fc1 + "bias" + e, {expert_fc1_});
      if (pre_gelu.defined()) o.pre_gelu = rows_of(pre_gelu, first, count);
      ops::matmul(ctx_, rows_of(into, first, count), rows_of(permuted, first, count),
                  weight(fc1 + "weight" + e, {expert_fc1_, h}), o);
    });
  });
  for_each_expert([&](const std::string& e, int64_t first, int64_t count) {
    ops::MatmulOptions o{.transpose_b = true};
    if (bias && slice_.rank == 0) o.bias = weight(fc2 + "bias" + e, {h});  // replicated: added once
    ops::matmul(ctx_, rows_of(expert_out, first, count), rows_of(act, first, count),
                weight(fc2 + "weight" + e, {h, expert_ffn_}), o);
  });
  ops::moe_combine(ctx_, out.as_matrix(), expert_out, destination, weights);
}

void InferenceMoe::shared_expert(const std::string& prefix, const Tensor& b, const Tensor& out, const WeightFn& weight) {
  const int64_t n = b.rows(), h = config_.hidden_size;
  const Tensor pre = scratch(shared_pre_, DType::kFloat32, {n, shared_fc1_});
  const Tensor act = scratch(shared_act_, DType::kFloat32, {n, shared_ffn_});
  const Tensor shared = scratch(shared_out_, DType::kFloat32, {n, h});
  mlp_up_forward(ctx_, activation_, pre, act, [&](const Tensor& into, const Tensor& pre_gelu) {
    ops::matmul(ctx_, into, b.as_matrix(), weight(prefix + "shared_experts.linear_fc1.weight", {shared_fc1_, h}),
                {.transpose_b = true, .pre_gelu = pre_gelu});
  });
  ops::matmul(ctx_, shared, act, weight(prefix + "shared_experts.linear_fc2.weight", {h, shared_ffn_}),
              {.transpose_b = true});
  // The block's output: the routed experts' combination + the shared expert's (Megatron's order).
  ops::residual_add(ctx_, out.as_matrix(), out.as_matrix(), shared, Tensor());
}

}  // namespace gpt

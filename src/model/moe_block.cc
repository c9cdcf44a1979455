#include "model/moe_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/stream_copy.h"
#include "model/checked_layer_shapes.h"
#include "model/expert_dispatch.h"
#include "model/param_registry.h"
#include "model/workspace_borrow.h"

namespace gpt {
namespace {

Param* optional_param(ParamStore& params, const std::string& name, bool present) {
  return present ? &params.get(name) : nullptr;
}

// Rows [first, first + count) of a matrix view of t.
Tensor rows_of(const Tensor& t, int64_t first, int64_t count) { return t.as_matrix().slice(first, first + count); }

// One tensor per local expert, in expert order (the groups of ops::grouped_matmul): get(expert),
// undefined where the expert has none (no bias).
template <typename Experts, typename Get>
std::vector<Tensor> per_expert(const Experts& experts, Get&& get) {
  std::vector<Tensor> tensors;
  tensors.reserve(experts.size());
  for (const auto& e : experts) tensors.push_back(get(e));
  return tensors;
}

}  // namespace

std::unique_ptr<FeedForwardBlock> make_feed_forward_block(const BlockBuild& build, const MoePass& pass) {
  if (build.config.moe.is_moe_layer(build.layer)) return std::make_unique<MoeBlock>(build, pass);
  return make_feed_forward_block(build);
}

MoeBlock::MoeBlock(const BlockBuild& b, const MoePass& pass)
    : config_(b.config),
      moe_(b.config.moe),
      pass_(pass),
      activation_(mlp_activation(b.config)),
      tp_(b.tp),
      local_experts_(b.config.moe.num_experts),
      context_group_(b.context.group),
      shapes_(b.shapes),
      ws_(b.workspace),
      dropout_(b.config, b.layer, b.shapes, b.positions),
      router_weight_(b.params.get(b.prefix() + "mlp.router.weight")),
      router_bias_(optional_param(b.params, b.prefix() + "mlp.router.bias", b.config.add_bias_linear)),
      expert_leases_(b.prefix() + "mlp.experts weight-gradient inputs", lease_parts(b.shapes, b.config.dtype),
                     b.deferral_depth, b.arena) {
  GPT_CHECK(shapes_.moe_layer) << "MoE block of layer " << b.layer << " built with a dense layer's shapes";
  if (b.experts && b.experts->exchange) {
    exchange_ = b.experts->exchange;
    first_expert_ = b.experts->model_rank * moe_.local_experts();
    local_experts_ = moe_.local_experts();
    GPT_CHECK_EQ(exchange_->size() * shapes_.local_rows(), shapes_.moe_exchange_rows)
        << "MoE layer " << b.layer << ": the dispatcher group's rows";
  }
  const bool bias = b.config.add_bias_linear;
  for (int64_t e = first_expert_; e < first_expert_ + local_experts_; ++e) {
    const std::string fc1 = b.prefix() + "mlp.experts.linear_fc1.", fc2 = b.prefix() + "mlp.experts.linear_fc2.";
    const std::string index = std::to_string(e);
    experts_.push_back(Expert{.fc1_weight = &b.params.get(fc1 + "weight" + index),
                              .fc1_bias = optional_param(b.params, fc1 + "bias" + index, bias),
                              .fc2_weight = &b.params.get(fc2 + "weight" + index),
                              .fc2_bias = optional_param(b.params, fc2 + "bias" + index, bias)});
  }
  if (moe_.shared_expert_size > 0) {
    shared_fc1_.emplace(b.linear("mlp.shared_experts.linear_fc1", LinearKind::kColumnParallel, 2));
    shared_fc2_.emplace(b.linear("mlp.shared_experts.linear_fc2", LinearKind::kRowParallel, 3));
  }
  // Starts at zero (Megatron's buffer); a checkpoint's value is loaded over it.
  if (moe_.expert_bias) expert_bias_ = b.arena.allocate_zeroed(DType::kFloat32, {moe_.num_experts});
  iteration_tokens_.assign(static_cast<size_t>(moe_.num_experts), 0.0);
  global_tokens_.assign(static_cast<size_t>(moe_.num_experts), 0.0f);
  slots_.resize(b.positions.size());
  metrics_.layer = b.layer;
  layer_ = b.layer;
  metrics_.tokens_per_expert.assign(static_cast<size_t>(moe_.num_experts), 0.0);
}

int64_t MoeBlock::persistent_bytes(const ModelConfig& config) {
  return config.moe.expert_bias ? tensor_bytes<int64_t>(DType::kFloat32, config.moe.num_experts) : 0;
}

std::vector<std::pair<DType, Shape>> MoeBlock::lease_parts(const LayerShapes& s, DType dtype) {
  return {{dtype, Shape{s.moe_rows, s.hidden}},
          {dtype, Shape{s.moe_rows, s.moe_local_ffn}},
          {dtype, Shape{s.moe_rows, s.moe_local_fc1}},
          {dtype, Shape{s.moe_rows, s.hidden}}};
}

int64_t MoeBlock::deferral_bytes(const ModelConfig& config, const LayerShapes& s, bool sequence_parallel,
                                 int deferral_depth) {
  const int64_t experts = LeaseRing::bytes(lease_parts(s, config.dtype), deferral_depth);
  if (!s.shared_expert) return experts;
  auto bytes = [&](LinearKind kind, const Shape& weight) {
    return Linear::deferral_bytes(kind, weight, config.add_bias_linear, sequence_parallel, config.dtype, s.rows(),
                                  s.local_rows(), deferral_depth);
  };
  return experts + bytes(LinearKind::kColumnParallel, Shape{s.shared_local_fc1, s.hidden}) +
         bytes(LinearKind::kRowParallel, Shape{s.hidden, s.shared_local_ffn});
}

ops::RouterOptions MoeBlock::router_options() const {
  // Sinkhorn's weights: the selected sigmoid (k = 1) or softmax over all E of the logits.
  if (moe_.sinkhorn) return ops::RouterOptions{.topk = moe_.topk, .sigmoid = moe_.topk == 1, .pre_softmax = moe_.topk > 1};
  return ops::RouterOptions{.topk = moe_.topk,
                            .sigmoid = moe_.score == RouterScore::kSigmoid,
                            .pre_softmax = moe_.pre_softmax,
                            .num_groups = moe_.num_groups,
                            .group_topk = moe_.group_topk,
                            .scaling = static_cast<float>(moe_.topk_scaling_factor)};
}

template <typename Fn>
void MoeBlock::for_each_expert(const std::vector<int64_t>& expert_rows, Fn&& fn) const {
  int64_t first = 0;
  for (int64_t e = 0; e < local_experts_; ++e) {
    const int64_t rows = expert_rows[static_cast<size_t>(e)];
    if (rows > 0) fn(experts_[static_cast<size_t>(e)], first, rows);
    first += rows;
  }
}

std::optional<ShardedTensor> MoeBlock::expert_bias_piece(Context& ctx) {
  if (!moe_.expert_bias) return std::nullopt;
  ShardedTensor piece;
  piece.key = "model/" + expert_bias_name(layer_);
  piece.global_shape = {moe_.num_experts};
  piece.offsets = {0};
  piece.local_shape = {moe_.num_experts};
  piece.replica_id = tp_.rank() == 0 ? 0 : 1;
  piece.replicated_over_data_parallel = true;
  piece.data = expert_bias_;
  return piece;
}

void MoeBlock::forward_up(Context& ctx, int slot, const MlpActivations& a, const Tensor& input) {
  const Borrow gathered(ws_.full_a, "MoE block: the gathered input");
  // The shared expert first (Megatron's order without --moe-shared-expert-overlap): its fc1 gathers
  // the input under sequence parallelism, which the router and the experts then read.
  Tensor x;  // [s, b, h]
  if (shared_fc1_) {
    mlp_up_forward(ctx, activation_, a.fc1_pre, a.fc1_act, [&](const Tensor& out, const Tensor& pre_gelu) {
      x = shared_fc1_->forward_column(ctx, out, input, *gathered, pre_gelu);
    });
  } else {
    x = tp_.gather_input(ctx, input, *gathered);
  }
  route(ctx, slot, a, x);
  if (!exchange_) {
    experts_up(ctx, slots_[static_cast<size_t>(slot)], a, x);
    return;
  }
  experts_up(ctx, slots_[static_cast<size_t>(slot)], a, exchange_rows(ctx, slot, a, input));
}

void MoeBlock::route(Context& ctx, int slot, const MlpActivations& a, const Tensor& x) {
  const int64_t tokens = shapes_.rows(), k = moe_.topk;
  ops::MatmulOptions logits{.transpose_b = true};
  std::optional<Borrow> bias32;  // the router's bias in float32, as the logits (moe_dlogits is free in forward)
  if (router_bias_) {
    bias32.emplace(ws_.moe_dlogits, "MoE block: the router's bias in float32");
    logits.bias = (*bias32)->flat_range(0, moe_.num_experts);
    ops::cast(ctx, logits.bias, router_bias_->value);
  }
  ops::matmul(ctx, a.router_logits, x.as_matrix(), router_weight_.value, logits);  // [T, E] float32
  bias32.reset();
  if (moe_.sinkhorn && pass_.loss_gradient_scale) {
    // Megatron's sinkhorn in training, over each rank's rows (SP's shards); in evaluation the
    // top-k of its activation (router_options()). The expert bias, if any, is only counted.
    const Borrow balanced(ws_.moe_dlogits, "MoE block: the sinkhorn-balanced scores");
    ops::moe_sinkhorn_route(ctx, a.expert_indices, a.expert_weights, *balanced, a.router_logits,
                            tp_.sequence_parallel() ? tp_.size() : 1);
  } else {
    ops::moe_route(ctx, a.expert_indices, a.expert_weights, a.router_logits,
                   moe_.expert_bias && !moe_.sinkhorn ? expert_bias_ : Tensor(), router_options());
  }
  // The dispatch, on the host.
  std::vector<int32_t> indices(static_cast<size_t>(tokens * k));
  std::vector<float> weights(indices.size());
  copy_to_host(ctx, indices.data(), a.expert_indices);
  copy_to_host(ctx, weights.data(), a.expert_weights);
  ctx.synchronize();
  const int64_t segments = moe_.dropless() ? 1 : (tp_.sequence_parallel() ? tp_.size() : 1);
  ExpertDispatch d = plan_expert_dispatch(indices, weights, tokens, moe_, segments);
  // (Under expert parallelism only its drops are used: the experts' rows are planned over the
  // dispatcher group's rows, dispatch_exchange.)
  GPT_CHECK(exchange_ || d.rows() <= shapes_.moe_rows) << "expert-major rows of layer " << metrics_.layer;
  SlotRouting& routing = slots_[static_cast<size_t>(slot)];
  if (exchange_) {
    dispatch_exchange(ctx, routing, a, indices, d);
  } else {
    copy_to_device(ctx, a.expert_weights, std::span<const float>(d.weights));  // dropped pairs 0
    routing.expert_rows = d.expert_rows;
    routing.rows = d.rows();
    copy_to_device(ctx, a.destination, std::span<const int32_t>(d.destination));
    if (d.rows() > 0) {
      copy_to_device(ctx, a.source.flat_range(0, d.rows()), std::span<const int32_t>(d.source));
      copy_to_device(ctx, a.row_weights.flat_range(0, d.rows()), std::span<const float>(d.row_weights));
    }
  }
  routing.coefficients.clear();
  routing.z_scale = 0.0;
  if (!pass_.loss_gradient_scale) return;  // evaluation: no losses, no counts
  if (!recomputing_) {
    for (int64_t i = 0; i < tokens * k; ++i) {
      if (d.destination[static_cast<size_t>(i)] >= 0) {
        const auto e = static_cast<size_t>(indices[static_cast<size_t>(i)]);
        iteration_tokens_[e] += 1.0;
        metrics_.tokens_per_expert[e] += 1.0;
      }
    }
    ++metrics_.microbatches;
  }
  load_balancing(ctx, routing, a);
}

void MoeBlock::load_balancing(Context& ctx, SlotRouting& routing, const MlpActivations& a) {
  const int64_t tokens = shapes_.rows(), experts = moe_.num_experts, k = moe_.topk, cp = context_group_ ? context_group_->size() : 1;
  const bool sigmoid = moe_.score == RouterScore::kSigmoid;
  const double scale = *pass_.loss_gradient_scale;
  bool per_sequence = false;
  for (const MoeLoss& loss : moe_.losses) per_sequence |= loss.type == LoadBalancing::kSeqAuxLoss && loss.coefficient > 0;
  routing.groups = per_sequence ? shapes_.batch : 1;
  routing.coefficients.assign(static_cast<size_t>(routing.groups * experts), 0.0f);
  bool any_loss = false;
  for (const MoeLoss& loss : moe_.losses) {
    if (loss.coefficient <= 0) continue;
    any_loss = true;
    // Per sequence: row t of [s, b] belongs to sequence t % b, over the whole sequence S; else one
    // group of the microbatch's tokens (both over every CP rank's rows); global: every data- and
    // context-parallel rank's tokens of this microbatch.
    const bool sequence = loss.type == LoadBalancing::kSeqAuxLoss, global = loss.type == LoadBalancing::kGlobalAuxLoss;
    Communicator* group = global && pass_.data_context ? pass_.data_context : context_group_;
    const int64_t ranks = group ? group->size() : 1;
    const int64_t groups = sequence ? shapes_.batch : 1;
    const auto total = static_cast<double>(sequence ? shapes_.sequence * cp : tokens * ranks);
    const Borrow scratch(ws_.moe_dlogits, "MoE block: the load-balancing statistics");
    const Tensor sums = scratch->flat_range(0, groups * experts).view({groups, experts});
    const Tensor counts = scratch->flat_range(groups * experts, groups * experts).view({groups, experts});
    ops::moe_aux_statistics(ctx, sums, counts, a.router_logits, k, sigmoid);
    // Full recompute's second forward takes the first one's running mean (nothing counted again).
    const bool replay = global && recomputing_;
    if (ranks > 1 && !replay) group->all_reduce(ctx, counts, ReduceOp::kSum);  // the whole sequence's (batch's) counts
    std::vector<float> host_sums(static_cast<size_t>(groups * experts)), host_counts(host_sums.size());
    copy_to_host(ctx, host_sums.data(), sums);
    copy_to_host(ctx, host_counts.data(), counts);
    ctx.synchronize();
    if (replay) {
      GPT_CHECK_EQ(routing.global_mean.size(), host_counts.size()) << "MoE layer " << layer_ << ": a recompute before its forward";
      host_counts = routing.global_mean;
    } else if (global) {  // Megatron's running mean over the iteration's microbatches so far, in float32
      global_steps_ += 1.0f;
      for (size_t e = 0; e < host_counts.size(); ++e) host_counts[e] = (global_tokens_[e] += host_counts[e]) / global_steps_;
      routing.global_mean = host_counts;
    }
    // L = c E / (k total^2) sum_e (sum_t s_te) count_e, per sequence averaged over the b sequences;
    // the sum over CP ranks of this rank's L is the whole loss (its counts are the whole sequence's).
    const double factor = static_cast<double>(experts) / (static_cast<double>(k) * total * total) /
                          static_cast<double>(groups);
    double value = 0.0;
    for (size_t i = 0; i < host_sums.size(); ++i) value += double{host_sums[i]} * host_counts[i] * factor;
    if (!recomputing_) {
      (sequence ? metrics_.seq_load_balancing_loss
                : global ? metrics_.global_load_balancing_loss : metrics_.load_balancing_loss) += value;
    }
    for (int64_t g = 0; g < routing.groups; ++g) {
      for (int64_t e = 0; e < experts; ++e) {
        const size_t from = static_cast<size_t>((sequence ? g : 0) * experts + e);
        routing.coefficients[static_cast<size_t>(g * experts + e)] +=
            static_cast<float>(scale * loss.coefficient * factor * host_counts[from]);
      }
    }
  }
  if (!any_loss) routing.coefficients.clear();
  if (moe_.z_loss_coeff > 0) {
    // z = c / CP mean_t lse_t^2 over this rank's T rows (summed over CP: the sequence's mean): its
    // value from the logsumexp router_backward computes for the gradient (computed once).
    routing.z_scale = scale * moe_.z_loss_coeff / static_cast<double>(cp) * 2.0 / static_cast<double>(tokens);
  }
}

void MoeBlock::experts_up(Context& ctx, const SlotRouting& routing, const MlpActivations& a, const Tensor& x) {
  const int64_t m = routing.rows;
  if (m == 0) return;
  const Borrow permuted(ws_.moe_rows_a, "MoE block: the permuted input");
  const Tensor perm = rows_of(*permuted, 0, m);  // [M, h]
  ops::moe_permute(ctx, perm, x.as_matrix(), a.source.flat_range(0, m), Tensor());
  mlp_up_forward(ctx, activation_, rows_of(a.expert_fc1_pre, 0, m), rows_of(a.expert_fc1_act, 0, m),
                 [&](const Tensor& out, const Tensor& pre_gelu) {
                   const std::vector<Tensor> weights =
                       per_expert(experts_, [](const Expert& e) { return e.fc1_weight->value; });
                   const std::vector<Tensor> biases =
                       per_expert(experts_, [](const Expert& e) { return e.fc1_bias ? e.fc1_bias->value : Tensor(); });
                   ops::grouped_matmul(ctx, out, perm, weights, routing.expert_rows,
                                       {.transpose_b = true, .bias = biases, .pre_gelu = pre_gelu});
                 });
}

void MoeBlock::experts_down(Context& ctx, int slot, const MlpActivations& a) {
  const SlotRouting& routing = slots_[static_cast<size_t>(slot)];
  const std::vector<Tensor> weights = per_expert(experts_, [](const Expert& e) { return e.fc2_weight->value; });
  const std::vector<Tensor> biases =
      per_expert(experts_, [](const Expert& e) { return e.fc2_bias ? e.fc2_bias->value : Tensor(); });
  ops::grouped_matmul(ctx, rows_of(a.expert_out, 0, routing.rows), rows_of(a.expert_fc1_act, 0, routing.rows), weights,
                      routing.expert_rows, {.transpose_b = true, .bias = biases});
}

BlockOutput MoeBlock::forward_down(Context& ctx, int slot, const MlpActivations& a) {
  const int64_t m = slots_[static_cast<size_t>(slot)].rows;
  experts_down(ctx, slot, a);
  Tensor routed;  // [s_l, b, h]
  if (exchange_) {
    routed = exchange_outputs(ctx, slot, a);
  } else {
    const Borrow partial(ws_.full_a, "MoE block: the combined experts' partial sums");
    ops::moe_combine(ctx, partial->as_matrix(), rows_of(a.expert_out, 0, m), a.destination, a.expert_weights);
    routed = tp_.reduce_output(ctx, *partial, ws_.local_a);
  }
  if (shared_fc2_) {
    const Tensor shared = shared_fc2_->forward_row(ctx, ws_.full_b, a.fc1_act, ws_.local_b);
    ops::residual_add(ctx, routed, routed, shared, Tensor());
  }
  return dropout_.forward(ctx, slot, ops::DropoutSite::kMlpOutput, routed, Tensor());
}

void MoeBlock::fc2_weight_grads(Context& ctx, const std::vector<int64_t>& expert_rows, const Tensor& d_out,
                                const Tensor& act) const {
  for_each_expert(expert_rows, [&](const Expert& e, int64_t first, int64_t n) {
    if (e.fc2_bias) ops::bias_grad(ctx, e.fc2_bias->grad, rows_of(d_out, first, n));
  });
  ops::grouped_matmul_weight_grad(ctx, per_expert(experts_, [](const Expert& e) { return e.fc2_weight->grad; }), d_out,
                                  act, expert_rows);
}

void MoeBlock::fc1_weight_grads(Context& ctx, const std::vector<int64_t>& expert_rows, const Tensor& d_fc1,
                                const Tensor& input) const {
  for_each_expert(expert_rows, [&](const Expert& e, int64_t first, int64_t n) {
    if (e.fc1_bias) ops::bias_grad(ctx, e.fc1_bias->grad, rows_of(d_fc1, first, n));
  });
  ops::grouped_matmul_weight_grad(ctx, per_expert(experts_, [](const Expert& e) { return e.fc1_weight->grad; }), d_fc1,
                                  input, expert_rows);
}

Tensor MoeBlock::experts_backward(Context& ctx, const SlotRouting& routing, const MlpActivations& a, const Tensor& x,
                                  const Tensor& grad_y_full, WeightGradTiming timing, const Tensor& destination,
                                  const Tensor& dweights) {
  const int64_t m = routing.rows;
  // The combine weights' gradient: <dy_t, expert output> (partial sums over the experts' slices).
  ops::moe_combine_weight_grad(ctx, dweights, grad_y_full.as_matrix(), rows_of(a.expert_out, 0, m), destination);
  // Deferred: what the weight gradients read, copied into a lease (the scratch is reused).
  const std::vector<Tensor>* lease = nullptr;
  if (timing == WeightGradTiming::kDeferred) {
    lease = &expert_leases_.acquire();
    pending_.push_back(PendingWeightGrads{.expert_rows = routing.expert_rows, .rows = m});
  }
  const Tensor d_rows = rows_of(ws_.moe_rows_b, 0, m);  // [M, h]: the outputs', then the inputs' gradients
  if (m == 0) return d_rows;
  ops::moe_permute(ctx, d_rows, grad_y_full.as_matrix(), a.source.flat_range(0, m), a.row_weights.flat_range(0, m));
  const Tensor d_act = rows_of(ws_.moe_ffn, 0, m);
  ops::grouped_matmul(ctx, d_act, d_rows, per_expert(experts_, [](const Expert& e) { return e.fc2_weight->value; }),
                      routing.expert_rows, {});  // [n, h] [h, ffn_l] per expert
  const Tensor act = rows_of(a.expert_fc1_act, 0, m);
  if (lease) {
    ops::copy(ctx, rows_of((*lease)[0], 0, m), d_rows);
    ops::copy(ctx, rows_of((*lease)[1], 0, m), act);
  } else {
    fc2_weight_grads(ctx, routing.expert_rows, d_rows, act);
  }
  const Tensor d_fc1 =
      mlp_activation_backward(ctx, activation_, d_act, rows_of(ws_.moe_fc1, 0, m), rows_of(a.expert_fc1_pre, 0, m));
  // fc1's weight gradient reads the permuted input: permuted again from the gathered input.
  const Borrow permuted(ws_.moe_rows_a, "MoE block: the permuted input, again");
  const Tensor perm = rows_of(*permuted, 0, m);
  ops::moe_permute(ctx, perm, x.as_matrix(), a.source.flat_range(0, m), Tensor());
  if (lease) {
    ops::copy(ctx, rows_of((*lease)[2], 0, m), d_fc1);
    ops::copy(ctx, rows_of((*lease)[3], 0, m), perm);
  } else {
    fc1_weight_grads(ctx, routing.expert_rows, d_fc1, perm);
  }
  ops::grouped_matmul(ctx, d_rows, d_fc1, per_expert(experts_, [](const Expert& e) { return e.fc1_weight->value; }),
                      routing.expert_rows, {});  // [n, fc1_l] [fc1_l, h] per expert
  return d_rows;
}

void MoeBlock::router_backward(Context& ctx, const SlotRouting& routing, const MlpActivations& a, const Tensor& x,
                               const Tensor& grad_x, int64_t first_row) {
  const Tensor& dlogits = ws_.moe_dlogits;  // [T, E] float32
  ops::moe_route_backward(ctx, dlogits, ws_.moe_dweights, a.router_logits, a.expert_indices, router_options());
  const bool sigmoid = moe_.score == RouterScore::kSigmoid;
  if (!routing.coefficients.empty()) {
    const Tensor coefficients =
        ws_.moe_coefficients.flat_range(0, routing.groups * moe_.num_experts).view({routing.groups, moe_.num_experts});
    copy_to_device(ctx, coefficients, std::span<const float>(routing.coefficients));
    ops::moe_aux_backward(ctx, dlogits, a.router_logits, coefficients, sigmoid);
  }
  if (routing.z_scale != 0.0) {
    ops::moe_logsumexp(ctx, ws_.moe_lse, a.router_logits);
    ops::moe_z_loss_backward(ctx, dlogits, a.router_logits, ws_.moe_lse, static_cast<float>(routing.z_scale));
    // The z-loss's value for the log line (each slot's backward runs once, in microbatch order).
    const int64_t tokens = shapes_.rows(), cp = context_group_ ? context_group_->size() : 1;
    std::vector<float> lse(static_cast<size_t>(tokens));
    copy_to_host(ctx, lse.data(), ws_.moe_lse);
    ctx.synchronize();
    double squares = 0.0;
    for (float v : lse) squares += double{v} * v;
    metrics_.z_loss += squares / static_cast<double>(tokens) / static_cast<double>(cp);
  }
  // The router's GEMMs in the model's dtype (a copy in FP32 training).
  ops::cast(ctx, ws_.moe_dlogits_t, dlogits);
  if (router_bias_) ops::bias_grad(ctx, router_bias_->grad, dlogits);
  ops::matmul(ctx, router_weight_.grad, ws_.moe_dlogits_t, x.as_matrix(),
              ops::MatmulOptions{.transpose_a = true, .beta = 1.0f});  // [E, T] [T, h]
  // Every TP rank routed the same rows: the input gradient is added once, into the full rows on TP
  // rank 0 before the TP sum, or into each rank's own rows under expert parallelism.
  if (exchange_ || tp_.rank() == 0) {
    const Tensor dlogits_rows = rows_of(ws_.moe_dlogits_t, first_row, grad_x.as_matrix().rows());
    ops::matmul(ctx, grad_x.as_matrix(), dlogits_rows, router_weight_.value,
                ops::MatmulOptions{.beta = 1.0f});  // [rows, E] [E, h]
  }
}

Tensor MoeBlock::backward_input(Context& ctx, int slot, const MlpActivations& a, const Tensor& input,
                                const Tensor& grad_output, WeightGradTiming timing) {
  const SlotRouting& routing = slots_[static_cast<size_t>(slot)];
  std::optional<Borrow> dropped;  // local_b, while the output's gradient is read
  Tensor d_out = grad_output;     // [s_l, b, h]
  if (dropout_.enabled(slot, ops::DropoutSite::kMlpOutput)) {
    dropped.emplace(ws_.local_b, "MoE block: gradient through its dropout");
    dropout_.backward(ctx, slot, ops::DropoutSite::kMlpOutput, **dropped, grad_output);
    d_out = **dropped;
  }
  const Borrow shared_grad(ws_.moe_grad_input, "MoE block: the shared expert's input gradient");
  if (shared_fc2_) {
    {
      const Borrow gathered(ws_.full_a, "MoE block: the shared fc2's gathered output gradient");
      shared_fc2_->backward_input_row(ctx, d_out, a.fc1_act, *gathered, ws_.shared_ffn, timing);
    }
    const Tensor d_fc1 = mlp_activation_backward(ctx, activation_, ws_.shared_ffn, ws_.shared_fc1, a.fc1_pre);
    ops::copy(ctx, *shared_grad,
              shared_fc1_->backward_input_column(ctx, d_fc1, input, ws_.full_a, ws_.full_b, ws_.local_a, timing));
  }
  const Tensor d_input = exchange_ ? exchanged_backward(ctx, slot, a, input, d_out, timing)
                                   : gathered_backward(ctx, routing, a, input, d_out, timing);  // [s_l, b, h]
  if (shared_fc2_) ops::residual_add(ctx, d_input, d_input, *shared_grad, Tensor());
  return d_input;
}

Tensor MoeBlock::gathered_backward(Context& ctx, const SlotRouting& routing, const MlpActivations& a,
                                   const Tensor& input, const Tensor& d_out, WeightGradTiming timing) {
  const Borrow dy_full(ws_.full_b, "MoE block: the output's gradient gathered, then the input's");
  const Tensor dy = tp_.gather_output_grad(ctx, d_out, *dy_full);  // [s, b, h]
  const Borrow gathered(ws_.full_a, "MoE block: the input gathered again");
  const Tensor x = tp_.gather_input(ctx, input, *gathered);
  const Tensor d_perm = experts_backward(ctx, routing, a, x, dy, timing, a.destination, ws_.moe_dweights);  // [M, h]
  if (tp_.size() > 1) tp_.group().all_reduce(ctx, ws_.moe_dweights, ReduceOp::kSum);
  // The input's gradient, TP partial sums: the permutation's (summed over each token's pairs) and,
  // once, the router's.
  const Tensor dx_full = dy_full->as_matrix();
  ops::moe_combine(ctx, dx_full, d_perm, a.destination, Tensor());
  router_backward(ctx, routing, a, x, dx_full, 0);
  return tp_.reduce_input_grad(ctx, *dy_full, ws_.local_a);
}

void MoeBlock::backward_weight(Context& ctx) {
  GPT_CHECK(!pending_.empty()) << "MoE layer " << metrics_.layer << ": a weight-gradient pass without a deferred backward";
  const PendingWeightGrads pending = std::move(pending_.front());
  pending_.pop_front();
  const std::vector<Tensor>& lease = expert_leases_.oldest();
  const int64_t m = pending.rows;
  if (m > 0) {
    fc2_weight_grads(ctx, pending.expert_rows, rows_of(lease[0], 0, m), rows_of(lease[1], 0, m));
    fc1_weight_grads(ctx, pending.expert_rows, rows_of(lease[2], 0, m), rows_of(lease[3], 0, m));
  }
  expert_leases_.release(ctx);
  if (!shared_fc2_) return;
  shared_fc2_->backward_weight(ctx);
  shared_fc1_->backward_weight(ctx);
}

void MoeBlock::finish_iteration(Context& ctx, Communicator& data_context) {
  if (moe_.expert_bias) {
    const int64_t experts = moe_.num_experts;
    const Borrow scratch(ws_.moe_dlogits, "MoE block: the iteration's token counts");
    const Tensor counts = scratch->flat_range(0, experts);
    std::vector<float> host(iteration_tokens_.begin(), iteration_tokens_.end());
    copy_to_device(ctx, counts, std::span<const float>(host));
    data_context.all_reduce(ctx, counts, ReduceOp::kSum);
    std::vector<float> bias(static_cast<size_t>(experts));
    copy_to_host(ctx, host.data(), counts);
    copy_to_host(ctx, bias.data(), expert_bias_);
    ctx.synchronize();
    // Megatron's get_updated_expert_bias: under-loaded experts up, over-loaded down.
    double total = 0.0;
    for (float c : host) total += c;
    const double mean = total / static_cast<double>(experts);
    for (size_t e = 0; e < bias.size(); ++e) {
      const double gap = mean - host[e];
      const double sign = gap > 0 ? 1.0 : (gap < 0 ? -1.0 : 0.0);
      bias[e] += static_cast<float>(moe_.bias_update_rate) * static_cast<float>(sign);  // in FP32, as Megatron
    }
    copy_to_device(ctx, expert_bias_, std::span<const float>(bias));
  }
  reset_iteration_counts();
}

void MoeBlock::reset_iteration_counts() {
  std::fill(iteration_tokens_.begin(), iteration_tokens_.end(), 0.0);
  std::fill(global_tokens_.begin(), global_tokens_.end(), 0.0f);  // Megatron's reset_global_aux_loss_tracker
  global_steps_ = 0.0f;
}

void MoeBlock::restart_iteration() {
  reset_iteration_counts();
  take_metrics();
}

MoeLayerMetrics MoeBlock::take_metrics() {
  MoeLayerMetrics taken = metrics_;
  const int64_t layer = metrics_.layer;
  metrics_ = MoeLayerMetrics{};
  metrics_.layer = layer;
  metrics_.tokens_per_expert.assign(static_cast<size_t>(moe_.num_experts), 0.0);
  return taken;
}

}  // namespace gpt

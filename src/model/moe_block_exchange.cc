// MoeBlock under expert parallelism (model/moe_block.h, model/expert_parallel.h): the tokens of the
// dispatcher group (ETP x EP ranks) travel to the ranks of their experts and back. Each rank owns
// its residual-stream rows [R = s_l b, h]; its router (unchanged) has chosen and dropped their
// pairs. Two dispatchers, the same numbers:
//   allgather: every member gathers the group's rows [N = G R, h] and their routing, computes its
//     experts' share of them, and the partial sums [N, h] are reduce-scattered onto the owners;
//   alltoall: only the routed pairs' rows travel (model/moe_all_to_all.h), the experts' rows
//     return to their owners, who sum them with their weights.
#include <cstring>
#include <numeric>

#include "core/stream_copy.h"
#include "model/moe_all_to_all.h"
#include "model/workspace_borrow.h"
#include "model/moe_block.h"
#include "parallel/comm/all_to_all.h"

namespace gpt {
namespace {

Tensor rows_of(const Tensor& t, int64_t first, int64_t count) { return t.as_matrix().slice(first, first + count); }

}  // namespace

int64_t MoeBlock::SlotRouting::sent() const { return std::accumulate(send_rows.begin(), send_rows.end(), int64_t{0}); }

void MoeBlock::dispatch_exchange(Context& ctx, SlotRouting& routing, const MlpActivations& a,
                                 std::span<const int32_t> indices, const ExpertDispatch& d) {
  const int64_t k = moe_.topk, own = shapes_.local_rows(), first = (tp_.sequence_parallel() ? tp_.rank() : 0) * own;
  const int64_t rows = shapes_.moe_exchange_rows;
  // This rank's rows' pairs: the expert (-1 when its router dropped the pair) and the weight's bits,
  // gathered over the group ([N, 2 k]: a few bytes per row beside the rows themselves).
  std::vector<int32_t> mine(static_cast<size_t>(own * 2 * k));
  for (int64_t t = 0; t < own; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const auto pair = static_cast<size_t>((first + t) * k + j);
      const auto at = static_cast<size_t>(t * 2 * k + j);
      mine[at] = d.destination[pair] >= 0 ? indices[pair] : -1;
      std::memcpy(&mine[at + static_cast<size_t>(k)], &d.weights[pair], sizeof(float));
    }
  }
  copy_to_device(ctx, ws_.moe_route_own, std::span<const int32_t>(mine));
  exchange_->all_gather(ctx, ws_.moe_route_all, ws_.moe_route_own);
  std::vector<int32_t> all(static_cast<size_t>(rows * 2 * k));
  copy_to_host(ctx, all.data(), ws_.moe_route_all);
  ctx.synchronize();
  std::vector<int32_t> group_indices(static_cast<size_t>(rows * k));
  std::vector<float> group_weights(group_indices.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const auto at = static_cast<size_t>(r * 2 * k + j);
      group_indices[static_cast<size_t>(r * k + j)] = all[at];
      std::memcpy(&group_weights[static_cast<size_t>(r * k + j)], &all[at + static_cast<size_t>(k)], sizeof(float));
    }
  }
  const ExpertDispatch* experts = nullptr;
  ExpertDispatch gathered;
  AllToAllPlan plan;
  if (moe_.alltoall) {
    plan = plan_all_to_all(group_indices, group_weights, own, k, exchange_->rank(),
                           static_cast<int>(moe_.expert_tensor_size(tp_.size())),
                           static_cast<int>(moe_.expert_model_parallel), local_experts_);
    experts = &plan.experts;
    routing.send_rows = plan.send_rows;
    routing.receive_rows = plan.receive_rows;
    if (!plan.send_source.empty()) {
      copy_to_device(ctx, a.send_source.flat_range(0, routing.sent()), std::span<const int32_t>(plan.send_source));
    }
    if (!plan.received_row.empty()) {
      copy_to_device(ctx, a.received_row.flat_range(0, plan.experts.rows()), std::span<const int32_t>(plan.received_row));
    }
    copy_to_device(ctx, a.return_rows, std::span<const int32_t>(plan.return_rows));
    copy_to_device(ctx, a.return_weights, std::span<const float>(plan.return_weights));
    copy_to_device(ctx, a.pair_rows, std::span<const int32_t>(plan.pair_rows));
  } else {
    gathered = plan_local_expert_dispatch(group_indices, group_weights, rows, k, first_expert_, local_experts_);
    experts = &gathered;
    copy_to_device(ctx, a.exchange_destination, std::span<const int32_t>(gathered.destination));
    copy_to_device(ctx, a.exchange_weights, std::span<const float>(gathered.weights));
  }
  GPT_CHECK_LE(experts->rows(), shapes_.moe_rows) << "expert-major rows of layer " << layer_;
  routing.expert_rows = experts->expert_rows;
  routing.rows = experts->rows();
  if (experts->rows() > 0) {
    copy_to_device(ctx, a.source.flat_range(0, experts->rows()), std::span<const int32_t>(experts->source));
    copy_to_device(ctx, a.row_weights.flat_range(0, experts->rows()), std::span<const float>(experts->row_weights));
  }
}

Tensor MoeBlock::exchange_rows(Context& ctx, int slot, const MlpActivations& a, const Tensor& own) {
  if (!moe_.alltoall) {
    exchange_->all_gather(ctx, ws_.moe_exchange_a, own);  // every member's rows, in member order
    return ws_.moe_exchange_a;
  }
  const SlotRouting& routing = slots_[static_cast<size_t>(slot)];
  const int64_t sent = routing.sent();
  const Tensor send = rows_of(ws_.moe_send_a, 0, sent), received = rows_of(ws_.moe_received_a, 0, routing.rows);
  if (sent > 0) ops::moe_permute(ctx, send, own.as_matrix(), a.send_source.flat_range(0, sent), Tensor());
  all_to_all_rows(*exchange_, ctx, send, routing.send_rows, received, routing.receive_rows);
  return received;
}

Tensor MoeBlock::exchange_outputs(Context& ctx, int slot, const MlpActivations& a) {
  const SlotRouting& routing = slots_[static_cast<size_t>(slot)];
  const int64_t m = routing.rows;
  const Tensor routed = ws_.local_a;  // [s_l, b, h]
  if (!moe_.alltoall) {
    // The group's rows' sums over this rank's experts (and expert-TP slices), summed over the group
    // onto each member's own rows.
    ops::moe_combine(ctx, ws_.moe_exchange_b, rows_of(a.expert_out, 0, m), a.exchange_destination,
                     a.exchange_weights);
    exchange_->reduce_scatter(ctx, routed, ws_.moe_exchange_b, ReduceOp::kSum);
    return routed;
  }
  // Each received row's result back to its sender (in received order), then summed with the pairs'
  // weights onto the owner's rows.
  const int64_t sent = routing.sent();
  const Tensor back = rows_of(ws_.moe_received_b, 0, m), returned = rows_of(ws_.moe_send_b, 0, sent);
  if (m > 0) ops::moe_permute(ctx, back, rows_of(a.expert_out, 0, m), a.received_row.flat_range(0, m), Tensor());
  all_to_all_rows(*exchange_, ctx, back, routing.receive_rows, returned, routing.send_rows);
  ops::moe_combine(ctx, routed.as_matrix(), returned, a.return_rows, a.return_weights);
  return routed;
}

void MoeBlock::gather_weight_grads(Context& ctx, const Tensor& own_dweights) {
  if (tp_.size() > 1) tp_.group().all_gather(ctx, ws_.moe_dweights, own_dweights);
}

Tensor MoeBlock::exchanged_backward(Context& ctx, int slot, const MlpActivations& a, const Tensor& input,
                                    const Tensor& d_out, WeightGradTiming timing) {
  const SlotRouting& routing = slots_[static_cast<size_t>(slot)];
  const Tensor own_dweights = tp_.size() > 1 ? ws_.moe_own_dweights : ws_.moe_dweights;  // [s_l b, k]
  const Tensor d_input = ws_.local_a;  // [s_l, b, h]
  if (!moe_.alltoall) {
    // The group's rows' output gradients and inputs, as in forward.
    exchange_->all_gather(ctx, ws_.moe_exchange_b, d_out);
    exchange_->all_gather(ctx, ws_.moe_exchange_a, input);
    const Tensor d_perm = experts_backward(ctx, routing, a, ws_.moe_exchange_a, ws_.moe_exchange_b, timing,
                                           a.exchange_destination, ws_.moe_exchange_dweights);  // [M, h]
    // The combine weights' gradients summed over the group onto each member's rows.
    exchange_->reduce_scatter(ctx, own_dweights, ws_.moe_exchange_dweights, ReduceOp::kSum);
    // The input's gradient: this rank's experts' pairs of the group's rows, summed over the group.
    ops::moe_combine(ctx, ws_.moe_exchange_b, d_perm, a.exchange_destination, Tensor());
    exchange_->reduce_scatter(ctx, d_input, ws_.moe_exchange_b, ReduceOp::kSum);
  } else {
    // The output gradients and inputs of the routed rows travel as the rows did in forward.
    const int64_t m = routing.rows, sent = routing.sent();
    const Tensor dy = rows_of(ws_.moe_received_b, 0, m), x = rows_of(ws_.moe_received_a, 0, m);
    const Tensor send = rows_of(ws_.moe_send_a, 0, sent);
    if (sent > 0) ops::moe_permute(ctx, send, d_out.as_matrix(), a.send_source.flat_range(0, sent), Tensor());
    all_to_all_rows(*exchange_, ctx, send, routing.send_rows, dy, routing.receive_rows);
    if (sent > 0) ops::moe_permute(ctx, send, input.as_matrix(), a.send_source.flat_range(0, sent), Tensor());
    all_to_all_rows(*exchange_, ctx, send, routing.send_rows, x, routing.receive_rows);
    // Each received row's weight gradient <dy, expert output> ([M, 1], by its expert row), back to
    // the owner, who adds the expert-TP slices' partial sums per pair.
    const Tensor received_dweights = ws_.moe_received_dweights.flat_range(0, m).view({m, 1});
    const Tensor d_perm = experts_backward(ctx, routing, a, x, dy, timing,
                                           a.received_row.flat_range(0, m).view({m, 1}), received_dweights);
    const Tensor returned_dweights = ws_.moe_returned_dweights.flat_range(0, sent).view({sent, 1});
    all_to_all_rows(*exchange_, ctx, received_dweights, routing.receive_rows, returned_dweights, routing.send_rows);
    const int64_t pairs = own_dweights.numel(), slices = shapes_.moe_return_width / moe_.topk;
    ops::moe_combine(ctx, own_dweights.flat_range(0, pairs).view({pairs, 1}), returned_dweights,
                     a.pair_rows.flat_range(0, pairs * slices).view({pairs, slices}), Tensor());
    // The input's gradient: each received row's back to its sender, summed onto the owner's rows.
    if (m > 0) ops::moe_permute(ctx, dy, d_perm, a.received_row.flat_range(0, m), Tensor());
    all_to_all_rows(*exchange_, ctx, dy, routing.receive_rows, send, routing.send_rows);
    ops::moe_combine(ctx, d_input.as_matrix(), send, a.return_rows, Tensor());
  }
  gather_weight_grads(ctx, own_dweights);
  // The router's input gradient for this rank's own rows (its weight gradient over all T rows).
  const Borrow gathered(ws_.full_a, "MoE block: the input gathered again for the router");
  const Tensor x = tp_.gather_input(ctx, input, *gathered);
  router_backward(ctx, routing, a, x, d_input, (tp_.sequence_parallel() ? tp_.rank() : 0) * shapes_.local_rows());
  return d_input;
}

}  // namespace gpt

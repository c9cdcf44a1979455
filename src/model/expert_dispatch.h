// Where each routed (token, expert) pair goes in an MoE layer's expert-major buffer (Megatron-Core's
// permute with its token dropping, moe_utils.py): experts in order, each expert's rows in
// ascending token order. Dropless, every pair of the router's top-k gets a row. With a capacity
// factor the tokens are cut into `segments` equal runs (the row ranges each TP rank's router sees
// under sequence parallelism, where Megatron drops), each expert keeps at most its capacity of
// each run (model/moe_config.h moe_capacity) by the drop policy: the highest combine weights
// (ties to the earlier token) or the earliest tokens; a dropped pair's weight becomes 0 (the
// others are not renormalised). Padded to capacity, each expert gets exactly its capacity of each
// run: its kept tokens, then unrouted tokens of the run with weight 0 (the highest weights, i.e.
// the earliest such tokens).
//
// Computed on the host from the router's selection (T k indices and weights): the expert GEMMs need
// each expert's row count there anyway, as Megatron's grouped GEMM does.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/moe_config.h"

namespace gpt {

struct ExpertDispatch {
  std::vector<int64_t> expert_rows;  // [E] rows of each expert, in order
  std::vector<int32_t> source;       // [M] each row's token (M = sum of expert_rows)
  std::vector<float> row_weights;    // [M] each row's combine weight (0 for padding)
  std::vector<int32_t> destination;  // [T k] each pair's row, -1 when dropped
  std::vector<float> weights;        // [T k] the combine weights after dropping

  int64_t rows() const { return static_cast<int64_t>(source.size()); }
};

// indices / weights: [T, k] (the router's, row-major); tokens T must be a multiple of segments.
ExpertDispatch plan_expert_dispatch(std::span<const int32_t> indices, std::span<const float> weights, int64_t tokens,
                                    const MoeConfig& moe, int64_t segments);

// Under expert parallelism, one rank's share of the dispatcher group's N rows: the pairs routed to
// its experts [first_expert, first_expert + local_experts), every one kept (each router dropped
// its own rows' pairs already: their indices are -1), in local expert order, each expert's rows in
// row order. expert_rows has local_experts entries; destination and weights cover all N k pairs
// (-1 and 0 for the other ranks' experts).
ExpertDispatch plan_local_expert_dispatch(std::span<const int32_t> indices, std::span<const float> weights,
                                          int64_t rows, int64_t k, int64_t first_expert, int64_t local_experts);

}  // namespace gpt

// The alltoall token dispatcher's plan (Megatron's MoEAlltoAllTokenDispatcher) for one microbatch
// on one member of the dispatcher group (model/expert_parallel.h: G = ETP x EP members, etp
// fastest; member m holds the experts of EP rank m / ETP, its slice m % ETP of each). Computed on
// the host from the group's routing (every member's rows' experts after its router's drops, and
// their weights, gathered: [G R, k] with R rows per member), so that no counts need exchanging.
//
// Dispatch: each kept pair (t, e) of this member's rows is sent to every member holding a slice of
// e (ETP of them), blocks by destination member, each block by expert then row. A member receives
// blocks by source member, each by (its expert, row); the experts read them in expert-major
// order — expert, then source member, then row — which is the allgather dispatcher's order of the
// group's rows, so both dispatchers feed the experts the same rows. Return: the experts' rows
// travel back the same way (each received row to its sender), so the returned rows line up with
// the sent ones; the owner sums them, weighted, into its rows (ETP partial sums included).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/expert_dispatch.h"

namespace gpt {

struct AllToAllPlan {
  std::vector<int64_t> send_rows;     // [G] rows sent to each member (and returned by it)
  std::vector<int64_t> receive_rows;  // [G] rows received from each member (and returned to it)
  std::vector<int32_t> send_source;   // [S] this member's row of each sent row
  std::vector<int32_t> send_pair;     // [S] its pair, row k + j
  // The experts' rows: expert_rows [E_l]; source [M]: the received row each expert row reads;
  // row_weights [M]: its pair's weight.
  ExpertDispatch experts;
  std::vector<int32_t> received_row;  // [M] in received order: the expert row of each received row
  int64_t return_width = 0;           // k ETP: returned rows per own row at most
  std::vector<int32_t> return_rows;   // [R, k ETP] the returned rows of each own row (-1: none)
  std::vector<float> return_weights;  // [R, k ETP] their pairs' weights
  // [R k, ETP] each pair's returned rows (its expert's ETP slices; -1: none): the combine weights'
  // gradients come back per sent row and are summed per pair.
  std::vector<int32_t> pair_rows;
};

// group_indices / group_weights: [G R, k] (member-major; -1 where a router dropped the pair).
AllToAllPlan plan_all_to_all(std::span<const int32_t> group_indices, std::span<const float> group_weights,
                             int64_t rows_per_member, int64_t k, int member, int expert_tensor_size,
                             int expert_model_size, int64_t local_experts);

}  // namespace gpt

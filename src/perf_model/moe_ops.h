// The routed experts of one MoE layer on one rank, for one microbatch (Megatron-Core's MoELayer;
// the layout of EP-DESIGN.md): what layer_ops.h's list holds for an MoE layer besides its
// attention and its shared expert. With R the rank's owned rows (s_l b: its sequence-parallel
// chunk), k = --moe-router-topk, E experts, F each expert's ffn width, t bytes per element and
// f the routing imbalance (busiest rank's pairs / mean):
//
//   router          GEMM [R_r, h] x [h, E] and its FP32 softmax / top-k over [R_r, E]
//                   (R_r: the T rows gathered over TP in this trainer, R in Megatron)
//   dispatch        allgather: the owned rows of the ETP x EP exchange group gathered, [G R, h]
//                   (G = ETP EP; none where that group is the TP group whose gather the router
//                   already made); alltoall: the R k routed pairs exchanged over EP (f R k h t
//                   bytes at the busiest rank), then all-gathered over ETP
//   permute         read and write the P = ETP R k f pairs entering the local experts
//   experts         grouped GEMMs over the E / EP local experts, each of P / (E / EP) rows (the
//                   rows per expert, whose size sets the GEMM's efficiency): fc1 [m, h] x
//                   [h, fc1_e / ETP], the activation, fc2 [m, F / ETP] x [F / ETP, h]
//   combine         unpermute and the weighted sum; allgather: the partial sums [G R, h]
//                   reduce-scattered over the exchange group; alltoall: reduce-scattered over
//                   ETP, then the pairs returned over EP
// Backward runs the same in reverse: each GEMM's input and weight gradients (and bias gradients with
// --add-bias-linear), the collectives' transposes (all-gather <-> reduce-scatter, all-to-all back).
//
// Per expert-parallel rank the mean work is the same for every EP x ETP (ETP R k pairs at 1 / ETP
// of the width): EP changes the GEMMs' rows per expert and the traffic, ETP the widths.
#pragma once

#include <vector>

#include "model/config.h"
#include "model/layer_shapes.h"
#include "perf_model/layer_ops.h"

namespace gpt::perf {

// Appends the routed experts' forward ops to `forward` and their backward ops, in the order
// backward runs them, to `backward`. `shapes` are an MoE layer's (LayerShapes::for_layer).
void routed_expert_ops(const ModelConfig& config, const LayerShapes& shapes, const LayerOpOptions& options,
                       std::vector<Op>& forward, std::vector<Op>& backward);

// One MoE layer's routed-expert parameter elements on a rank: E / EP experts, each's fc1 and fc2
// weights split over ETP (and their biases with --add-bias-linear; fc2's replicated over ETP).
double expert_parameters_per_rank(const ModelConfig& config, int64_t expert_model, int64_t expert_tensor);

}  // namespace gpt::perf

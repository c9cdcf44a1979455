// Time of one microbatch through one transformer layer (and through the embedding and the LM
// head) on one rank, forward and backward, from a cluster description. A layer's cost is the sum
// over the ops the trainer runs (layer_ops.h: the list in model/transformer_layer.cc's order,
// with the trainer's LayerShapes), each priced by its kind:
//   GEMM         2 M N K / (peak x gemm_efficiency(2 M N K)), the four linear layers with TP's
//                local widths; backward runs two GEMMs of the same size per forward GEMM
//                (input gradient, weight gradient)
//   attention    the causal core executes half of the 4 b s^2 heads_l d FLOPs Megatron counts,
//                at attention_forward_efficiency; flash attention's backward runs 5 of the
//                forward's 2 matmuls (x 2.5) at attention_backward_efficiency
//   elementwise  bytes / (memory bandwidth x efficiency): the norms, residual adds, dropout,
//                rope, the MLP activation and the bias gradients, with the bytes layer_ops.h lists
//   TP comm      per layer, of the [s, b, h] activation: forward 2 all-reduces (SP: 2 all-gathers
//                + 2 reduce-scatters), backward 2 all-reduces (SP: 2 reduce-scatters + 2
//                all-gathers; with Megatron's re-gather of the sequence-parallel input for the
//                weight gradients, 4 all-gathers); exposed share 1 - tp_comm_overlap_fraction with
//                --tp-comm-overlap
//   overhead     kernel_overhead per op of the list (each forward and backward op, TP collectives
//                included), and per op of the embedding (1 forward, 1 backward) and the head (final
//                norm, LM head GEMM, cross-entropy: 3 forward; 4 backward); collective_overhead per
//                communication call among them (TP collectives, CP hops or all-to-alls)
//                Megatron's unfused core (--attention-backend unfused / local with
//                --implementation megatron or deepspeed): its batched GEMMs at the roofline of their
//                FLOPs and the s x s scores' traffic, its softmax and dropout memory-bound
// Recompute: full adds the layer's forward to its backward, selective the attention core's.
#pragma once

#include "model/config.h"
#include "perf_model/cluster.h"
#include "perf_model/collectives.h"
#include "perf_model/layer_ops.h"

namespace gpt::perf {

struct PassCost {
  double gemm = 0, attention = 0, elementwise = 0, tp_comm = 0, overhead = 0;
  double cp_comm = 0;  // exposed context-parallel traffic (ring K/V blocks, or the all-to-alls)
  double dp_comm = 0;  // exposed ZeRO-3 traffic of the unit (data_parallel_cost.h)
  double ep_comm = 0;  // the MoE dispatcher's traffic over the expert grid's groups (moe_ops.h)
  double total() const { return gemm + attention + elementwise + tp_comm + overhead + cp_comm + dp_comm + ep_comm; }
  // What `overhead` was charged for (overhead_fit.h): ops, and communication calls among them.
  double op_calls = 0, collective_calls = 0;
};

struct LayerCost {
  PassCost forward, backward;  // backward without recompute
  double recompute_full = 0;       // added to backward for a fully recomputed layer
  double recompute_selective = 0;  // added to backward under selective recompute
  double weight_gradient_gemm = 0;  // of backward.gemm: the weight-gradient GEMMs (zero-bubble's W)
};

struct RankShape {
  int64_t tensor_parallel = 1;
  bool sequence_parallel = false;
  int64_t micro_batch = 1;
  bool tp_comm_overlap = false;
  Link tensor_link;       // the TP group's link
  double compute_stretch = 1;  // ranks time-sharing a compute slot (Cluster::compute_slots_per_node)
  // Context parallelism: the config's seq_length is then this rank's S / CP rows; attention covers
  // CP times that many keys (the load-balanced causal split gives every rank the same share).
  int64_t context_parallel = 1;
  bool context_all_to_all = false;  // --cp-comm-type a2a (else the p2p ring)
  Link context_link;                // the CP group's link
  // SP backward gathers the local LayerNorm outputs again (this trainer and Megatron do).
  bool regather_sequence_parallel_input = false;
  // Megatron's unfused attention core (layer_ops.h's LayerOpOptions::unfused_attention).
  bool unfused_attention = false;
  // MoE layers: the routed experts' layout, and the links of the expert grid's groups (ranks
  // etp + ETP (ep + EP edp) of a stage: the ETP x EP exchange group is ETP EP consecutive ranks,
  // its EP group ETP apart, its ETP group consecutive).
  ExpertParallel expert;
  Link expert_exchange_link, expert_tensor_link;
  int expert_model_stride = 1;  // ETP: the EP group's rank stride (its all-to-all's placement)
};

double gemm_time(double m, double n, double k, const Cluster& cluster);

// The ops of one layer for this rank (`config.seq_length` its S / CP rows; an MoE layer's with
// `moe_layer`), and their time.
LayerOps layer_ops(const ModelConfig& config, const RankShape& shape, bool moe_layer = false);
PassCost price_ops(const std::vector<Op>& ops, const RankShape& shape, const Cluster& cluster);

// `config` with its dtype (BF16: 2 bytes per element). With MoE layers (--moe-layer-freq) the mean
// layer: the dense and the MoE layer's costs weighted by their counts in the model.
LayerCost layer_cost(const ModelConfig& config, const RankShape& shape, const Cluster& cluster);
// One dense layer's (`moe_layer` false) or one MoE layer's.
LayerCost kind_layer_cost(const ModelConfig& config, const RankShape& shape, const Cluster& cluster, bool moe_layer);
// The first virtual stage's embedding (lookup, position add, TP reduction) per microbatch.
PassCost embedding_forward(const ModelConfig& config, const RankShape& shape, const Cluster& cluster);
PassCost embedding_backward(const ModelConfig& config, const RankShape& shape, const Cluster& cluster);
// The last virtual stage's final norm, LM head GEMM and vocab-parallel cross-entropy.
PassCost head_forward(const ModelConfig& config, const RankShape& shape, const Cluster& cluster);
PassCost head_backward(const ModelConfig& config, const RankShape& shape, const Cluster& cluster);

}  // namespace gpt::perf

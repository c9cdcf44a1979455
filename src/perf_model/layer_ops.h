// The ops one transformer layer runs for one microbatch on one rank, in the order
// model/transformer_layer.cc runs them, with the trainer's own shapes (model/layer_shapes.h's
// LayerShapes for the layout): the compute-cost model prices this list, so a layer's cost is the
// sum over what the trainer executes, and an op added to the layer is one more entry here.
//
// Forward (rows r = s b, local rows r_l = s_l b, t bytes per element):
//   norm1                LayerNorm / RMSNorm: read x, write ln1            2 t r_l h
//   all-gather ln1       under SP                                           [s, b, h]
//   linear_qkv           GEMM [r, h] x [h, qkv_l]
//   rope                 with rotary embeddings: q and k rotated in place  2 t r (heads_l + groups_l) d
//   attention            the fused causal core; or Megatron's unfused core (unfused_attention,
//                        below): the s x s scores materialised
//   linear_proj          GEMM [r, heads_l d] x [heads_l d, h], then all-reduce (SP: reduce-scatter)
//   dropout              with hidden dropout: read, write, 1-byte mask      (2 t + 1) r_l h
//   norm2 (residual)     read x and the block's output, write residual, ln2 4 t r_l h
//   all-gather ln2       under SP
//   linear_fc1           GEMM [r, h] x [h, fc1_l]
//   activation           GeLU / SwiGLU: read fc1's output, write ffn_l     t r (fc1_l + ffn_l)
//   linear_fc2           GEMM [r, ffn_l] x [ffn_l, h], all-reduce (SP: reduce-scatter)
//   dropout              with hidden dropout                                (2 t + 1) r_l h
//   residual_add         read two, write one                                3 t r_l h
// Backward, in reverse: each GEMM's input gradient (same size as the forward GEMM) and weight
// gradient (same size; `weight_gradient`, what zero-bubble schedules defer), the bias gradients
// (a read of the output gradient), each row-parallel linear's output gradient all-gathered under
// SP, each column-parallel linear's input gradient all-reduced (SP: reduce-scatter), the norms'
// backward (read the gradient and the input, write the gradient: 3 t r_l h), the residual adds
// (3 t r_l h), the activation's backward (read the gradient and fc1's output, write the gradient:
// t r (ffn_l + 2 fc1_l)), dropout's backward ((2 t + 1) r_l h), rope's backward and the attention
// core's backward. With `regather_sequence_parallel_input` (this trainer and Megatron) only the local
// LayerNorm outputs are kept under SP and all-gathered again before the weight gradients: two more
// all-gathers.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/layer_shapes.h"

namespace gpt::perf {

enum class OpKind {
  kGemm,       // m x k times k x n (`count` of them: a grouped GEMM, one per local expert)
  kAttention,          // the causal attention core's forward: `flops` the executed ones
  kAttentionBackward,  // its backward (flash attention: 5 matmuls against the forward's 2)
  kMemory,     // memory-bound: `bytes` read and written
  kAllReduce,  // tensor-parallel collectives of a tensor of `bytes`
  kAllGather,
  kReduceScatter,
  kAllToAll,   // each rank sends `bytes` split over the group's ranks (the expert dispatcher's)
};

// The communicator a collective op runs over: the tensor-parallel group, or one of the expert
// grid's (EP-DESIGN / parallel/process_grid.h): the dispatcher's ETP x EP exchange group, its EP
// ranks (the all-to-all) or its ETP ranks.
enum class CommGroup { kTensor, kExpertExchange, kExpertModel, kExpertTensor };

struct Op {
  std::string name;
  OpKind kind = OpKind::kMemory;
  double m = 0, n = 0, k = 0;  // kGemm
  double count = 1;            // kGemm: GEMMs of this size (a grouped GEMM over the local experts)
  CommGroup group = CommGroup::kTensor;  // collectives
  double flops = 0;            // kAttention
  double bytes = 0;            // kMemory, collectives; a kGemm's traffic where it may bound it (roofline)
  bool weight_gradient = false;  // a backward GEMM computing a weight gradient
  // Part of the attention core (the unfused core's batched GEMMs and element-wise ops): priced into
  // PassCost::attention, which selective recompute runs again.
  bool attention_core = false;
};

struct LayerOps {
  std::vector<Op> forward;
  std::vector<Op> backward;  // without recompute
};

// How an MoE layer's routed experts are laid out (EP-DESIGN.md; model/moe_config.h's experts):
// EP ranks hold E / EP experts each, each expert's fc1 / fc2 split over ETP ranks; the dispatcher
// (allgather or alltoall) exchanges the rows over the ETP x EP group.
struct ExpertParallel {
  int64_t expert_model = 1;   // EP, --expert-model-parallel-size
  int64_t expert_tensor = 1;  // ETP, --expert-tensor-parallel-size (resolved: TP when not given)
  bool all_to_all = false;    // --moe-token-dispatcher-type alltoall (else allgather)
  // Routed pairs of the busiest rank over the mean (1: uniform routing; Megatron's benchmarks
  // force-balance, --moe-router-force-load-balancing).
  double imbalance = 1.0;
  // This trainer routes the T rows gathered over TP (EP-DESIGN.md); Megatron routes each rank's
  // sequence-parallel rows and gathers only in the dispatcher.
  bool route_gathered_rows = true;
};

struct LayerOpOptions {
  bool sequence_parallel = false;  // SP with TP > 1
  int64_t tensor_parallel = 1;
  // Megatron's SP backward: the local LayerNorm outputs gathered again for the weight gradients.
  bool regather_sequence_parallel_input = false;
  // Context parallelism: keys each query of this rank attends to, over its own rows (CP).
  int64_t context_parallel = 1;
  // Megatron's unfused core (--attention-backend unfused / local; the only one of Megatron-LM before
  // FlashAttention, i.e. of the 2021-2022 publications): per local head the s x s scores
  // materialised in the dtype (e = b heads_l s s_k elements), Korthikanti et al. 2022 section 4.1:
  //   forward   baddbmm Q K^T (writes e t), the fused scale-mask-softmax (reads and writes e t),
  //             dropout of the probabilities (e t read, e t written, a 1-byte mask), bmm P V (reads e t)
  //   backward  dP = dO V^T (writes e t), dV = P^T dO (reads e t), dropout's backward ((2 t + 1) e),
  //             softmax's backward (reads P and dP, writes dS: 3 e t), dQ = dS K and dK = dS^T Q (read e t each)
  // Each batched GEMM at the larger of its FLOPs' time and its traffic's (K = d: memory-bound on A100).
  bool unfused_attention = false;
  // MoE layers (LayerShapes::moe_layer): the routed experts' layout (moe_ops.h).
  ExpertParallel expert;
};

// The layer's ops for `shapes` (LayerShapes::make for the layout, or its for_layer of an MoE
// layer: the MLP is then the shared expert's, if any, and the routed experts' ops of moe_ops.h)
// and config's options (norm, activation, rope, dropout, biases).
LayerOps transformer_layer_ops(const ModelConfig& config, const LayerShapes& shapes, const LayerOpOptions& options);

// The layer's parameters on this rank: the forward GEMMs' weights (n x k each), their biases and
// the two norms' weights (and biases with LayerNorm); ZeRO-3 gathers this many per layer.
double layer_parameter_elements(const ModelConfig& config, const LayerOps& ops);
// The same parameters as tensors, in the order the layer's forward uses them: norm1's weight (and
// bias), the QKV weight and bias, the projection's, norm2's, fc1's, fc2's (this rank's TP shards).
std::vector<double> layer_parameter_tensors(const ModelConfig& config, const LayerOps& ops);

}  // namespace gpt::perf

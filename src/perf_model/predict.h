// The performance model: for validated pretrain_gpt arguments, a world size and a cluster, the
// time of one training iteration and where it goes, the throughput (model FLOPs, Megatron's
// formula from train/report/flops.h), and the memory of the largest rank (train/memory_plan.h).
//
// One iteration is
//   pipeline     the schedule the trainer runs (--pipeline-schedule, Megatron's by default; with auto the
//                fastest of the layout's schedules that fits), simulated by
//                parallel/pipeline/simulator.h with each (rank, chunk)'s forward and backward cost
//                per microbatch (compute_cost.h: its layers, plus the embedding on the first
//                virtual stage and the LM head on the last) and the p2p transfer of one
//                activation [s/TP if SP, b, h] over the pipeline group's link
//                Context parallelism (CP > 1): each rank computes S / CP rows and 1 / CP of the
//                causal attention, plus the ring's K/V hops not hidden behind a block's attention
//                (and backward's dK/dV hops) or the all-to-alls before and after the attention.
//   MoE layers   the routed experts and the dispatcher over the expert grid (moe_ops.h, expert_layout.h)
//   + DP         the gradient all-reduce (or reduce-scatter, and the parameter all-gather, with
//                --use-distributed-optimizer) of the largest stage's parameters over the
//                data-parallel group (data x context with CP: Megatron's dp-cp group); the share dp_comm_overlap_fraction of each is hidden with
//                --overlap-grad-reduce / --overlap-param-gather. Gradients travel in the
//                parameters' dtype (Megatron's default) unless --accumulate-allreduce-grads-in-fp32.
//                With PP > 1 and tied embeddings, the embedding gradient's all-reduce between the
//                first and last stages.
//                Each DP bucket is one collective (its latency and its host call); ZeRO-2 reduces
//                every bucket of every microbatch.
//   + scalars    the step's small all-reduces: the loss, the gradient norm, the finite check
//   + optimizer  AdamW, memory-bound over the rank's owned parameters
//   + overhead   the host's work beyond the kernels (overhead_fit.h): per op, per chunk pass, per
//                communication call (inside the passes) and per iteration.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "perf_model/cluster.h"
#include "perf_model/compute_cost.h"
#include "train/args/arguments.h"

namespace gpt::perf {

// Whose implementation choices are modelled where they differ: this trainer's (its memory plan,
// train/memory_plan.h) or Megatron-LM's (megatron_memory.h's stash), to predict published Megatron
// runs; both all-gather the sequence-parallel LayerNorm outputs again in backward for the weight
// gradients. DeepSpeed's: Megatron's model code (its stash and re-gather) under
// DeepSpeed's 2021 ZeRO-3 (data_parallel_cost.h: deepspeed_unit_sharding), to predict the ZeRO-3
// runs Narayanan et al. 2021 compared with.
enum class Implementation { kTrainer, kMegatron, kDeepSpeed };

// Megatron flags this trainer does not have but the model honours, and the model's own choices.
struct RunOptions {
  bool tp_comm_overlap = false;  // Megatron's --tp-comm-overlap
  Implementation implementation = Implementation::kTrainer;  // perf_model --implementation
  bool overlap_offload_copies = false;  // Megatron's --overlap-cpu-optimizer-d2h-h2d
  // MoE: the busiest rank's routed pairs over the mean (perf_model --moe-imbalance; 1: uniform).
  double expert_imbalance = 1.0;
};

struct MemoryEstimate {
  double parameters = 0, gradients = 0, optimizer_state = 0, activations = 0;  // bytes, largest rank
  // The parameter elements the largest stage holds (the plan's closed form; ZeRO-3: its shard), what
  // its data-parallel traffic moves.
  double stage_parameters = 0;
  // The data-parallel reduce-scatter outputs, gather staging and TP-sum staging (RankMemory's).
  double data_parallel_buffers = 0;
  // MoE: of stage_parameters, the routed experts' (expert_layout.h: E / EP experts split over ETP),
  // whose gradients are reduced over the expert data-parallel group.
  double expert_parameters = 0;
  double total() const { return parameters + gradients + optimizer_state + activations + data_parallel_buffers; }
};

struct Prediction {
  // Layout.
  int64_t world = 0, tensor = 1, pipeline = 1, data = 1, virtual_stages = 1, microbatches = 1;
  int64_t context = 1;       // --context-parallel-size
  std::string cp_comm_type;  // the --cp-comm-type name of p2p or a2a (train/args/flag_enums.h; CP > 1)
  int64_t micro_batch = 1, global_batch = 1;
  bool sequence_parallel = false, distributed_optimizer = false;
  int zero_level = 0;  // 0: none, 1: optimizer state sharded, 2: and gradients (reduced per microbatch),
                       // 3: and parameters (gathered per unit and microbatch)
  std::string recompute;  // "none", "selective", "full uniform N", "full block N"
  std::string schedule;   // "1f1b", "interleaved", "zb-h1", "zb-v"
  // MoE: the expert grid (expert_layout.h), the dispatcher and the routing imbalance assumed.
  int64_t expert_model = 1, expert_tensor = 1, expert_data = 1;
  std::string dispatcher;  // allgather or alltoall (MoE models only)
  double expert_imbalance = 1;
  // Megatron's --decoder-first/last-pipeline-num-layers where given (0: the even split).
  int64_t first_stage_layers = 0, last_stage_layers = 0;

  // Time, seconds per iteration.
  double iteration_time = 0;
  double pipeline_time = 0;      // the simulated forward-backward of every microbatch
  double pipeline_bubble = 0;    // the simulator's bubble fraction (0 without PP)
  double compute_time = 0;       // the busiest rank's forward and backward compute (incl. exposed TP comm)
  double tp_comm_time = 0;       // exposed TP communication inside compute_time
  double cp_comm_time = 0;       // exposed context-parallel communication inside compute_time
  double ep_comm_time = 0;       // the MoE dispatcher's traffic (expert grid) inside compute_time
  double expert_dp_comm_time = 0;  // of dp_comm_time: the expert parameters' over the expert DP group
  double recompute_time = 0;     // recompute inside compute_time
  double p2p_time = 0;           // one pipeline transfer
  double dp_comm_time = 0;       // data-parallel communication, all of it (ZeRO-3: every unit's, per microbatch)
  double dp_exposed_time = 0;    // its part not hidden, after the pipeline (ZeRO-3: none)
  double zero3_traffic_time = 0;  // ZeRO-3: the units' gathers and reduce-scatters, all of it
  double zero3_exposed_time = 0;  // ZeRO-3: the part of it not hidden, inside pipeline_time (a chunk's busiest rank)
  double embedding_sync_time = 0;
  double scalar_comm_time = 0;   // the step's scalar all-reduces (loss, gradient norm, finite check)
  double optimizer_time = 0;
  double offload_fraction = 0;     // of the owned optimizer state, stepped on the host
  double offload_copy_time = 0;    // device-to-host gradients and host-to-device parameters
  double host_optimizer_time = 0;  // the host's AdamW
  double overhead_time = 0;      // the cluster's per-iteration overhead and the host's per DP / scalar call
  // Per iteration on a rank, what the host-overhead terms are charged for (overhead_fit.h): ops,
  // chunk passes (a microbatch's forward or backward) and communication calls.
  double op_calls = 0, pass_calls = 0, collective_calls = 0;

  // Per layer and microbatch.
  LayerCost layer;

  // Throughput.
  double model_flops = 0;        // per iteration, Megatron's formula
  double tflops_per_gpu = 0;
  double mfu = 0;                // of the cluster's peak
  double tokens_per_s_per_gpu = 0;

  MemoryEstimate memory;
  double memory_available = 0;   // the cluster's memory less its reserve
  bool fits = true;
};

// pretrain_gpt's flags (without the program name) parsed with its own parser; the flags only a
// training run needs (--train-iters, --lr, --mock-data) are filled in when absent. Not validated.
absl::StatusOr<Arguments> parse_model_flags(std::vector<std::string> flags);
// validate_arguments and validate_for_world on a copy: every error names its flag.
absl::StatusOr<Arguments> validate_layout(Arguments args, int64_t world_size);

// The memory of the largest rank: what the memory plan says the trainer allocates there
// (train/memory_plan.h: its exact items, with the schedule's stash slots per chunk; for a layout
// too large to enumerate, its closed form's lower bounds). With Implementation::kMegatron or
// kDeepSpeed the activations are Megatron's (megatron_memory.h).
absl::StatusOr<MemoryEstimate> estimate_memory(const Arguments& validated, int64_t world_size,
                                               Implementation activations = Implementation::kTrainer);

absl::StatusOr<Prediction> predict(const Arguments& validated, int64_t world_size, const Cluster& cluster,
                                   const RunOptions& options = {});

}  // namespace gpt::perf

// Data-parallel sharding costs that are not one collective per iteration: ZeRO-3's per-unit
// traffic inside the pipeline, and the optimizer step with part of its state offloaded to the host.
//
// ZeRO-3 (--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params): a unit (each
// transformer layer; the embedding; the output layer with the final norm) holds 1 / DP of its
// parameters between uses. Per microbatch, Megatron-FSDP's policy (also under pipeline
// parallelism: a stage re-gathers for every microbatch it runs):
//   forward   all-gather of the unit's parameters (t bytes each) before its forward
//   backward  all-gather again before its backward (and its recompute), then the reduce-scatter of
//             its gradients (the gradient dtype) as soon as they are final
// over the data x context group. With --overlap-param-gather the next unit's gather is prefetched
// while the current one computes: a unit's gather is exposed beyond its compute, and at least
// 1 - dp_comm_overlap_fraction of it (the share the cluster file says cannot be hidden); the first
// unit of a chunk's pass waits for its whole gather. With --overlap-grad-reduce the reduce-scatter
// is hidden the same way behind the backward; the gather and reduce-scatter of one backward share
// that compute. Without the flags they are exposed in full. No per-iteration gradient reduction or
// parameter gather remains.
//
// Optimizer offload (--optimizer-cpu-offload, --optimizer-offload-fraction F): of the owned
// parameters, F are stepped on the host: their FP32 gradients go device-to-host (4 bytes each), the
// host's AdamW runs at the cluster's host_adamw_GBps (the same bytes per parameter as the device
// AdamW), and the updated parameters come back host-to-device (t bytes each), over
// host_link_bandwidth_GBps per direction. The rest steps on the device. One after the other, as
// the trainer runs them; with Megatron's --overlap-cpu-optimizer-d2h-h2d (perf_model's own flag:
// the trainer does not pipeline them yet) the copies and the host step are pipelined per bucket
// (the slowest of the three) next to the device's part (the larger of the two).
#pragma once

#include <vector>

#include "perf_model/cluster.h"
#include "perf_model/collectives.h"
#include "perf_model/compute_cost.h"

namespace gpt::perf {

// Exposed seconds of `communication` overlapped with `compute`: beyond the compute, and at least
// the share the cluster cannot hide.
double exposed_behind(double communication, double compute, double hidden_fraction);

struct UnitShardingInput {
  int data_ranks = 1;             // the data x context group
  Link data_link;
  double parameter_bytes = 0;     // bytes per element of the parameters
  double gradient_bytes = 0;      // of the reduced gradients
  bool overlap_param_gather = false, overlap_grad_reduce = false;
  double hidden_fraction = 0;     // the cluster's dp_comm_overlap_fraction
};

// One unit of `elements` parameters (this rank's TP shard, before ZeRO-3's DP split) around a
// forward and a backward of the given compute: the exposed seconds, and the traffic's seconds.
struct UnitSharding {
  double forward_exposed = 0, backward_exposed = 0;
  double first_unit_wait = 0;  // forward: the gather a chunk's first unit waits for beyond forward_exposed
  double traffic = 0;          // gathers and the reduce-scatter, all of it
};
UnitSharding unit_sharding(double elements, double forward_compute, double backward_compute,
                           const UnitShardingInput& input);

// DeepSpeed's ZeRO-3 as released in April 2021 (v0.3.15: deepspeed/runtime/zero/stage3.py and
// partition_parameters.py), which Narayanan et al. 2021 compared with. Where its code differs from
// a unit-wise gather (and from this trainer):
//   - one NCCL all-gather per parameter tensor of a sub-module (_allgather_param, one
//     torch.distributed.all_gather each) and one reduce-scatter per parameter's gradient
//     (_reduce_scatter_gradient): a unit pays the collective latency once per tensor;
//   - tensors under stage3_param_persistence_threshold (default 1e5 elements: norms, biases) stay
//     whole on every rank and are never gathered (their gradients are still reduce-scattered);
//   - a fetch is waited for at once (fetch_sub_module: _synchronize_communication); the next
//     sub-modules are prefetched only while no gather is in flight and fewer than
//     stage3_max_live_parameters (default 1e9) elements are gathered: modelled as the unit's
//     prefetch when the unit and the next one (2 x its gathered elements) fit under it, else none;
//   - after a use a tensor is released unless it is used again within stage3_max_reuse_distance
//     (default 1e9) elements of other parameters: with activation checkpointing a tensor is used in
//     the recomputed forward and again in backward with every later tensor of the layer used twice
//     in between (2 x the elements after it in forward order), so the layer's early, large tensors
//     are gathered a third time.
struct DeepSpeedZero3Defaults {
  double persistence_threshold = 1e5;  // stage3_param_persistence_threshold
  double max_live_parameters = 1e9;    // stage3_max_live_parameters
  double max_reuse_distance = 1e9;     // stage3_max_reuse_distance
};
// One unit given as its parameter tensors (elements each, forward order), recomputed or not.
// The counts of collective calls go to `forward_calls` / `backward_calls`.
UnitSharding deepspeed_unit_sharding(const std::vector<double>& tensors, double forward_compute,
                                     double backward_compute, bool recomputed, const UnitShardingInput& input,
                                     double& forward_calls, double& backward_calls,
                                     const DeepSpeedZero3Defaults& defaults = {});

struct OptimizerStepInput {
  double owned_parameters = 0;    // this rank's
  double bytes_per_parameter = 0; // AdamW's memory traffic per parameter
  double parameter_bytes = 0;     // updated parameters copied back (t)
  double offload_fraction = 0;
  bool overlap_offload_copies = false;  // --overlap-cpu-optimizer-d2h-h2d
  double compute_stretch = 1;
};
struct OptimizerStep {
  double time = 0;
  double device = 0, device_to_host = 0, host = 0, host_to_device = 0;  // the parts
};
// Fails when offloading on a cluster file without host_link_bandwidth_GBps / host_adamw_GBps.
absl::StatusOr<OptimizerStep> optimizer_step(const OptimizerStepInput& input, const Cluster& cluster);

}  // namespace gpt::perf

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

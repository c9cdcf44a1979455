#include "perf_model/data_parallel_cost.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gpt::perf {

double exposed_behind(double communication, double compute, double hidden_fraction) {
  return std::max(communication - compute, (1 - hidden_fraction) * communication);
}

UnitSharding unit_sharding(double elements, double forward_compute, double backward_compute,
                           const UnitShardingInput& in) {
  UnitSharding unit;
  if (in.data_ranks <= 1 || elements <= 0) return unit;
  const double gather = all_gather_time(in.data_ranks, elements * in.parameter_bytes, in.data_link);
  const double reduce = reduce_scatter_time(in.data_ranks, elements * in.gradient_bytes, in.data_link);
  unit.traffic = 2 * gather + reduce;
  unit.forward_exposed = in.overlap_param_gather ? exposed_behind(gather, forward_compute, in.hidden_fraction) : gather;
  unit.first_unit_wait = gather - unit.forward_exposed;
  // Backward: the gather (before the unit's recompute and backward) and the reduce-scatter after
  // it share the unit's backward compute when overlapped.
  const double hidden_part = (in.overlap_param_gather ? gather : 0.0) + (in.overlap_grad_reduce ? reduce : 0.0);
  const double exposed_part = (in.overlap_param_gather ? 0.0 : gather) + (in.overlap_grad_reduce ? 0.0 : reduce);
  unit.backward_exposed =
      exposed_part + (hidden_part > 0 ? exposed_behind(hidden_part, backward_compute, in.hidden_fraction) : 0.0);
  return unit;
}

UnitSharding deepspeed_unit_sharding(const std::vector<double>& tensors, double forward_compute,
                                     double backward_compute, bool recomputed, const UnitShardingInput& in,
                                     double& forward_calls, double& backward_calls,
                                     const DeepSpeedZero3Defaults& defaults) {
  UnitSharding unit;
  forward_calls = backward_calls = 0;
  if (in.data_ranks <= 1 || tensors.empty()) return unit;
  double gather = 0, regather = 0, reduce = 0, gathered_elements = 0;
  double later = 0;  // elements after the tensor in forward order
  for (size_t i = tensors.size(); i-- > 0;) {
    const double elements = tensors[i];
    reduce += reduce_scatter_time(in.data_ranks, elements * in.gradient_bytes, in.data_link);
    backward_calls += 1;
    if (elements >= defaults.persistence_threshold) {
      const double one = all_gather_time(in.data_ranks, elements * in.parameter_bytes, in.data_link);
      gather += one;
      gathered_elements += elements;
      forward_calls += 1;
      if (recomputed && 2 * later > defaults.max_reuse_distance) {
        regather += one;
        backward_calls += 1;
      }
    }
    later += elements;
  }
  // Backward: the recompute's gathers (or, without recompute, the backward's), then the re-gathers.
  backward_calls += forward_calls;
  const double backward_gather = gather + regather;
  unit.traffic = gather + backward_gather + reduce;
  const bool prefetched = in.overlap_param_gather && 2 * gathered_elements <= defaults.max_live_parameters;
  unit.forward_exposed = prefetched ? exposed_behind(gather, forward_compute, in.hidden_fraction) : gather;
  unit.first_unit_wait = gather - unit.forward_exposed;
  const double hidden_part = (prefetched ? backward_gather : 0.0) + (in.overlap_grad_reduce ? reduce : 0.0);
  const double exposed_part = (prefetched ? 0.0 : backward_gather) + (in.overlap_grad_reduce ? 0.0 : reduce);
  unit.backward_exposed =
      exposed_part + (hidden_part > 0 ? exposed_behind(hidden_part, backward_compute, in.hidden_fraction) : 0.0);
  return unit;
}

absl::StatusOr<OptimizerStep> optimizer_step(const OptimizerStepInput& in, const Cluster& cluster) {
  OptimizerStep step;
  const double offloaded = in.owned_parameters * in.offload_fraction;
  const double on_device = in.owned_parameters - offloaded;
  step.device = on_device * in.bytes_per_parameter / (cluster.memory_bandwidth * cluster.memory_bandwidth_efficiency) *
                in.compute_stretch;
  if (offloaded > 0) {
    if (cluster.host_link_bandwidth <= 0 || cluster.host_adamw_bandwidth <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--optimizer-cpu-offload: cluster '", cluster.name,
          "' has no host_link_bandwidth_GBps and host_adamw_GBps (the host link and the host's AdamW rate; "
          "perf_calibrate measures both)"));
    }
    step.device_to_host = offloaded * 4.0 / cluster.host_link_bandwidth;
    step.host = offloaded * in.bytes_per_parameter / cluster.host_adamw_bandwidth * in.compute_stretch;
    step.host_to_device = offloaded * in.parameter_bytes / cluster.host_link_bandwidth;
  }
  const double offload_path = in.overlap_offload_copies
                                  ? std::max({step.device_to_host, step.host, step.host_to_device})
                                  : step.device_to_host + step.host + step.host_to_device;
  step.time = in.overlap_offload_copies ? std::max(step.device, offload_path) : step.device + offload_path;
  return step;
}

}  // namespace gpt::perf

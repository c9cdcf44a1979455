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

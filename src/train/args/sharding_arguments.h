// Which ZeRO level a run shards its data-parallel state at, from Megatron's two spellings:
// --use-distributed-optimizer (ZeRO-1) and Megatron-FSDP's --use-megatron-fsdp with
// --data-parallel-sharding-strategy no_shard | optim | optim_grads | optim_grads_params (ZeRO-0 to
// ZeRO-3). What the levels hold per rank and what they send per iteration: docs/DATA_PARALLEL.md.
#pragma once

#include "core/status.h"
#include "train/args/arguments.h"

namespace gpt {

enum class ZeroLevel {
  kNone = 0,        // every rank holds and updates everything; gradients all-reduced
  kOptimizer = 1,   // optimizer state (master weights, moments) sharded over DP
  kGradients = 2,   // and gradients: each rank keeps the sum of its shard only
  kParameters = 3,  // and parameter values: gathered per unit before each use
};

// The level of validated arguments.
ZeroLevel zero_level(const Arguments& args);
// ZeRO-1 and above: the optimizer updates this rank's shard of every bucket, and the updated
// shards are all-gathered after the step.
bool shards_optimizer(const Arguments& args);
// The ranks of one distributed-optimizer instance (Megatron's intra_partial_data_parallel_group_with_cp):
// the data x context group of `data_context_size` ranks over --num-distributed-optimizer-instances
// (which the world check has made divide it); the whole group without a distributed optimizer.
int64_t optimizer_instance_size(const Arguments& args, int64_t data_context_size);
// Megatron's gradient bucket with --overlap-grad-reduce: --ddp-bucket-size elements, by default
// max(4e7, 1e6 x the data x context ranks).
int64_t ddp_bucket_elements(const Arguments& args, int64_t data_context_size);
// The fraction of the optimizer state in host memory: --optimizer-offload-fraction with
// --optimizer-cpu-offload, else 0.
double offload_fraction(const Arguments& args);

// The Megatron-FSDP and optimizer-offload flags and their combinations with the others; what is
// not built is refused with the reason.
absl::Status validate_sharding_arguments(const Arguments& args);

}  // namespace gpt

// Where validated arguments become the configurations of the components they drive: the model's
// (sizes, kinds, FP8), the learning-rate schedules', AdamW's, the kernels' options, this rank's
// pipeline layout and its context-parallel group. The flags' strings that name a choice
// (--position-embedding-type, --cp-comm-type, --lr-decay-style, ...) become the components' enums
// here, each in one function of configs.cc, so that nothing past this point compares flag text.
// Everything here expects arguments that passed validate_arguments (and validate_for_world where a
// grid is involved): an unknown name is a bug, not a user error.
#pragma once

#include <cstdint>

#include "core/context.h"
#include "model/config.h"
#include "model/context_parallel.h"
#include "model/expert_parallel.h"
#include "model/fp8_scaling.h"
#include "model/shard_plan.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "parallel/process_grid.h"
#include "train/args/arguments.h"
#include "train/data_parallel/config.h"
#include "train/forward_backward.h"

namespace gpt {

// Turns --device auto into cpu or cuda (the GPU when the CUDA backend is built and one is visible);
// an explicit --device cuda without a GPU is an error.
absl::Status resolve_device(Arguments& args);

// Model configuration from validated arguments (vocabulary padded for their TP size).
ModelConfig model_config_from(const Arguments& args);
// The mixture-of-experts part of the model (validated arguments; a dense model without --num-experts).
MoeConfig moe_config_from(const Arguments& args);
// The model's kinds alone (family options, normalization, positions, recompute, dtype, FP8): where
// the enum-valued flags' strings are read, once, for the trainer and the planners. No sizes, so it
// is safe on arguments whose sizes overflow.
void set_model_kinds(const Arguments& args, ModelConfig& config);

// The FP8 configuration of validated arguments (disabled without --fp8-format).
Fp8Config fp8_config_from(const Arguments& args);

// Megatron's learning-rate schedule in samples (training.py get_optimizer_param_scheduler):
// iteration-based lengths times the global batch size, sample-based ones as given, a warmup
// fraction of the decay samples kept fractional. For arguments that passed validate_for_world.
LrScheduleConfig lr_schedule_config(const Arguments& args);
// The schedule of the word embedding and output layer: lr_schedule_config with --decoupled-lr as
// its peak and --decoupled-min-lr (default --min-lr) as its minimum (Megatron's param-group
// max_lr / min_lr overrides); lr_schedule_config itself without --decoupled-lr.
LrScheduleConfig decoupled_lr_schedule_config(const Arguments& args);

// AdamW's betas, epsilon and weight decay, and the share of its state offloaded to the host
// (--optimizer-cpu-offload, --optimizer-offload-fraction, --overlap-cpu-optimizer-d2h-h2d).
AdamWConfig adamw_config_from(const Arguments& args);

// The kernels' options: --deterministic-mode, and fused attention unless --attention-backend is
// unfused or local.
KernelOptions kernel_options_from(const Arguments& args);

// This rank's pipeline layout (validate_for_world has checked the divisibility rules): its chunks'
// layers and the schedule, with `microbatches` per iteration.
PipelineLayout pipeline_layout(const Arguments& args, const GridShape& shape, const GridCoordinates& coordinates,
                               int64_t microbatches);

// The expert grid as the MoE blocks see it (no exchange group without expert parallelism).
ExpertParallel expert_parallel_from(const ModelConfig& config, ProcessGrid& grid);

// The process grid's shape (dense and expert grids) of validated arguments over `world_size` ranks.
GridShape grid_shape_from(const Arguments& args, int64_t world_size);

// The context-parallel group and each layer's --cp-comm-type (no group when CP = 1).
ContextParallel context_parallel_from(const Arguments& args, ProcessGrid& grid);

// The data-parallel configuration of this rank's shard plan (model/shard_plan.h) from the flags:
// Megatron's buckets (--ddp-bucket-size, default max(4e7, 1e6 x DP) elements, with
// --overlap-grad-reduce only and on the first pipeline stage only; otherwise one bucket), the
// distributed optimizer's sharding, the tied word embedding alone when it spans pipeline stages.
// Routed experts: sliced over the expert tensor-parallel group and, when the expert grid's groups
// are not the dense ones, laid out apart and reduced / sharded over expert data parallelism.
ShardPlanConfig shard_plan_config_from(const Arguments& args, const GridShape& shape,
                                       const GridCoordinates& coordinates);
// The routed experts the rank at `coordinates` holds: its expert-parallel rank's share.
ExpertShare expert_share_from(const GridShape& shape, const GridCoordinates& coordinates);

// What DataParallel does besides the shard plan's layout.
DataParallelConfig data_parallel_config_from(const Arguments& args);

}  // namespace gpt

#include "train/data_parallel/config_from_arguments.h"

#include "train/sharding_arguments.h"

namespace gpt {
namespace {

bool tied_across_stages(const Arguments& args) {
  // ZB-V's V puts the first and the last virtual stage on rank 0, which holds one word embedding.
  return args.pipeline_model_parallel_size > 1 && !args.untie_embeddings_and_output_weights &&
         pipeline::schedule_placement(pipeline_schedule_kind(args)) == pipeline::Placement::kLoop;
}

}  // namespace

ShardPlanConfig shard_plan_config_from(const Arguments& args, const GridShape& shape,
                                       const GridCoordinates& coordinates) {
  // Gradients are reduced, and ZeRO shards laid out, over the data x context group (Megatron's
  // dp-cp group; process_grid.h): its rank is cp + CP * dp. With several distributed-optimizer
  // instances the shards are laid out over this rank's instance: its consecutive DP x CP / N
  // members, the rank's place in it (cp + CP * dp) mod that size.
  const int data_context = shape.data * shape.context;
  const int instance = static_cast<int>(optimizer_instance_size(args, data_context));
  ShardPlanConfig config{.tensor_parallel_rank = coordinates.tensor,
                         .tensor_parallel_size = shape.tensor,
                         .data_parallel_rank = (coordinates.context + shape.context * coordinates.data) % instance,
                         .data_parallel_size = instance,
                         .distributed_optimizer = shards_optimizer(args),
                         .first_pipeline_stage = coordinates.pipeline == 0};
  if (args.use_megatron_fsdp || args.use_torch_fsdp2) {
    // Megatron-FSDP's units on every stage: a layer, the embedding, the output layer, merged up
    // to --suggested-communication-unit-size (FSDP2: each alone, as fully_shard wraps them).
    config.unit_buckets = true;
    config.bucket_size = args.use_torch_fsdp2 ? 0 : args.suggested_communication_unit_size;
    config.shard_gradients = zero_level(args) >= ZeroLevel::kGradients;
    config.shard_parameters = zero_level(args) >= ZeroLevel::kParameters;
  } else if (args.overlap_grad_reduce && coordinates.pipeline == 0) {
    config.bucket_size = ddp_bucket_elements(args, int64_t{shape.data} * shape.context);
  }
  if (tied_across_stages(args)) config.own_bucket.push_back(kWordEmbeddingName);
  return config;
}

DataParallelConfig data_parallel_config_from(const Arguments& args) {
  // FSDP2 prefetches the next unit's all-gather by default (its implicit forward prefetch).
  const bool prefetch = args.overlap_param_gather || args.use_torch_fsdp2;
  return {.overlap_grad_reduce = args.overlap_grad_reduce,
          .overlap_param_gather = prefetch,
          .tied_across_stages = tied_across_stages(args),
          .gradient_buffers = args.overlap_grad_reduce || args.fsdp_double_buffer ? 3 : 2,
          .parameter_buffers = prefetch || args.fsdp_double_buffer ? 3 : 2};
}

}  // namespace gpt

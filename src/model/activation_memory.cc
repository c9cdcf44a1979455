#include "model/activation_memory.h"

#include <numeric>

#include "model/layer_activations.h"
#include "model/recompute_plan.h"

namespace gpt {

int64_t ActivationMemory::stash_bytes() const {
  return std::accumulate(layer_stash_bytes.begin(), layer_stash_bytes.end(), int64_t{0});
}

ActivationMemory activation_memory(const ModelConfig& config, const LayerShapes& shapes, int64_t first_layer,
                                   int64_t chunk_layers) {
  const RecomputePlan plan = plan_recompute(config.recompute, chunk_layers);
  ActivationMemory memory;
  for (int64_t i = 0; i < chunk_layers; ++i) {
    const LayerShapes layer = shapes.for_layer(config, first_layer + i);
    memory.layer_stash_bytes.push_back(layer_activation_bytes(layer, config.dtype, per_slot_parts(plan, i)));
    const int64_t without = layer_activation_bytes(layer, config.dtype, ActivationParts{});
    if (i == 0) memory.layer_stash_bytes_without_recompute = without;
    memory.chunk_stash_bytes_without_recompute += without;
  }
  memory.recompute_buffer_bytes = RecomputeBuffers::bytes(plan, shapes, config.dtype);
  return memory;
}

ActivationMemory activation_memory(const ModelConfig& config, int64_t tensor_parallel_size, bool sequence_parallel,
                                   int64_t micro_batch, int64_t chunk_layers, int64_t context_parallel_size,
                                   int64_t first_layer) {
  const bool split_sequence = sequence_parallel && tensor_parallel_size > 1;
  const LayerShapes shapes = LayerShapes::make(config, tensor_parallel_size, /*tensor_parallel_rank=*/0,
                                               split_sequence, micro_batch, context_parallel_size);
  return activation_memory(config, shapes, first_layer, chunk_layers);
}

}  // namespace gpt

// The memory plan: before anything is allocated, what the largest rank of a layout needs (the
// memory report's items, in closed form and with overflow-checked int64 arithmetic), and whether
// that fits in the memory the rank will allocate from. Without it a layout too large for the
// machine aborts in the allocator (--hidden-size 2147483648), segfaults on a wrapped size
// (--make-vocab-size-divisible-by 2^62), or grows memory for minutes (--num-layers 100000000).
//
// Two levels. The closed form below gives lower bounds of what the trainer allocates (the model
// state without alignment, bucket padding or working buffers; the activations without leases or
// receive buffers; each chunk's stash slots from the trainer's schedule when it can be built, else
// as few as any schedule uses) with checked arithmetic, so that a huge layout is refused at once and
// certainly rightly. It restates no byte figure: the model state's bytes are stated once
// (memory_items.h) for it and the start-up report's theoretical column, and the activations are
// the allocation's own lists (GptModel::stash_memory over CheckedLayerShapes, one layer of each kind
// the recompute plan gives times their count, model/checked_layer_shapes.h). A layout it lets
// through that is small enough to enumerate (MemoryPlan::allocated) is then planned exactly:
// rank_memory over the stage's shard plan, chunk memory (GptModel::memory) and receive buffers,
// the same figures the trainer's arena gives (checked at start-up on every rank). Per rank, for the worst
// pipeline stage (the first holds the embeddings and the most microbatches in flight, the last the
// LM head and its logits), with L_p = num_layers / PP layers, t bytes per element (2 with --bf16):
//   parameters      t x elements (ZeRO-3: t x elements / DP, plus the gathered units' working
//                   buffers, exact plan only), where each layer has 4h + (3P + F)(h + 1)/tp + (P + F) h / tp + 2h
//                   (P = heads x kv-channels, F = ffn), plus the embeddings (padded vocab / tp + max
//                   positions) x h on the first stage, the final LayerNorm and, untied or with PP > 1,
//                   the output layer on the last
//   gradients       4 x elements (FP32 main gradients); ZeRO-2: 4 x elements / DP (the shards) plus
//                   the units' working buffers (exact plan only)
//   optimizer       4 x owned (FP32 master weights, --bf16 only) + 8 x owned (two moments), owned =
//                   elements / DP with --use-distributed-optimizer; less the offloaded fraction
//                   (--optimizer-cpu-offload: host memory)
//   activations     per chunk: its layers' stashes (model/layer_activations.h's list) times its
//                   stash slots, its shared workspace and recompute buffers, the embedding's and the
//                   output layer's stashes (the logits [s b, vocab / tp] per slot) and the gradient
//   data indices    host: 24 bytes per sample (sample and shuffle indices) of every split, for
//                   --data-path datasets; plus the pipeline schedules (every rank's steps)
// On the GPU the first four live in device memory and the rest on the host; on the CPU backend
// all of it is host memory, shared by the node's ranks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/status.h"
#include "model/shard_plan.h"
#include "train/args/arguments.h"
#include "train/data_parallel/config.h"
#include "train/forward_backward.h"
#include "train/memory_items.h"

namespace gpt {

// What one rank allocates, exactly, item by item, from the plans the allocations follow: the shard
// plan (flat values, FP32 gradients, the optimizer's owned ranges), the chunks' memory
// (GptModel::memory) and the pipeline's receive buffers. The trainer checks at start-up that its
// arena gave each item exactly this, so every run of every layout tests the plan.
struct RankMemory {
  int64_t parameters = 0;       // flat values in the compute dtype; ZeRO-3: their shards and the working buffers
  int64_t gradients = 0;        // flat FP32 gradients; ZeRO-2: their shards and the working buffers
  int64_t optimizer_state = 0;  // moments and (BF16) master weights of the owned ranges
  int64_t activations = 0;      // the chunks (stashes, workspaces, logits, leases) and receive buffers
  // DataParallel's own buffers: with the distributed optimizer (ZeRO-1) over several ranks, each
  // bucket's reduce-scattered FP32 shard and the copy of its owned values the gather reads; the FP32
  // staging of the gradients summed over TP (sequence parallelism, q/k norms).
  int64_t data_parallel_buffers = 0;
  // Host memory: the offloaded optimizer state and its staging (--optimizer-cpu-offload); not in
  // total(), which is what lives with the model (device memory on the GPU).
  int64_t host_optimizer_state = 0;
  int64_t total() const { return parameters + gradients + optimizer_state + activations + data_parallel_buffers; }
  bool operator==(const RankMemory&) const = default;
};

struct MemoryPlan {
  // Bytes for one rank of the worst pipeline stage.
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;  // master weights and moments
  int64_t activations = 0;
  int64_t data_indices = 0;     // host memory: dataset indices and pipeline schedules
  std::string layout;           // the flags that size it, for messages
  // The exact bytes (rank_memory) of the stage that needs the most, when the layout is small enough
  // to enumerate its parameters and schedules (the figures above are the closed form's lower
  // bounds, which decide for larger layouts); what the fit check then uses.
  std::optional<RankMemory> allocated;
  int64_t model_bytes() const {
    return allocated ? allocated->total() : parameters + gradients + optimizer_state + activations;
  }
  // Host memory besides the model's: data indices, schedules and the offloaded optimizer state.
  int64_t host_bytes() const { return data_indices + (allocated ? allocated->host_optimizer_state : 0); }
  int64_t total_bytes() const { return model_bytes() + host_bytes(); }
};

// `deferral_depths`: per chunk, the lease depth it is built with (ForwardBackward::deferral_depths;
// empty: none).
// `data_parallel`: ZeRO-2/3's working gradient and parameter buffers, counted when the plan shards
// gradients / values.
RankMemory rank_memory(const ShardPlan& plan, const ModelConfig& config, const LayerShapes& shapes,
                       bool sequence_parallel, const PipelineLayout& pipeline, std::span<const int> stash_slots,
                       std::span<const int> deferral_depths = {}, const DataParallelConfig& data_parallel = {},
                       double offload_fraction = 0.0);

// How a rank of validated arguments holds its model state (memory_items.h).
StateLayout state_layout(const Arguments& args);

// The plan for validated arguments (validate_arguments and validate_for_world) with the
// tokenizer's unpadded vocabulary. An error where a figure does not fit in int64, naming the flags.
absl::StatusOr<MemoryPlan> plan_memory(const Arguments& args, int64_t world_size, int64_t vocab_size);

// Where a rank allocates from and how much there is. Bytes 0: unknown (the check is skipped).
struct MemoryBudget {
  bool gpu = false;              // the model lives in device memory (else everything is host memory)
  int64_t device_bytes = 0;      // the GPU's total memory
  int ranks_per_device = 1;      // ranks sharing that GPU
  int64_t host_bytes = 0;        // the node's physical memory
  int ranks_per_host = 1;        // ranks of the job on this node
};

// The budget of this process: the GPU it will use (args.device resolved), the node's physical
// memory (sysconf), the node's ranks; `ranks_per_gpu` from the launcher's comparison of GPU UUIDs.
MemoryBudget this_rank_memory_budget(const Arguments& args, int ranks_per_gpu);

// OK when the plan fits the budget; otherwise one message with the bytes needed per rank (and
// the items), the bytes available, and the flags that size the layout.
absl::Status check_memory_plan(const MemoryPlan& plan, const Arguments& args, const MemoryBudget& budget);

// The vocabulary the plan can use before the tokenizer is read: exact with --mock-data and the
// NullTokenizer, a lower bound (1) with a GPT-2 vocabulary file.
int64_t vocabulary_before_data(const Arguments& args);

// plan_memory + check_memory_plan for this process: what the launcher and data set-up call.
absl::Status check_memory_fits(const Arguments& args, int64_t world_size, int64_t vocab_size, int ranks_per_gpu);

// "1.50 GiB" style, for messages.
std::string format_bytes(int64_t bytes);

}  // namespace gpt

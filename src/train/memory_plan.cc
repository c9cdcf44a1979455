#include "train/memory_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/checked_math.h"
#include "core/cuda_runtime.h"
#include "model/checked_layer_shapes.h"
#include "model/gpt_model.h"
#include "model/param_registry.h"
#include "optim/adamw.h"
#include "parallel/pipeline/executor.h"
#include "train/args/context_parallel_arguments.h"
#include "train/configs.h"
#include "train/memory_items.h"
#include "train/pipeline_split.h"
#include "train/args/sharding_arguments.h"
#include "parallel/data_parallel/grad_shards.h"
#include "parallel/data_parallel/grad_sync.h"
#include "parallel/data_parallel/param_gather.h"
#include "parallel/data_parallel/param_units.h"
#include "parallel/comm/mpi_runtime.h"
#include "parallel/pipeline/schedule.h"

namespace gpt {
namespace {

using Bytes = CheckedBytes;

// The flags that size a rank's memory, for messages.
std::string layout_flags(const Arguments& a, int64_t world_size, int64_t padded_vocab) {
  std::string text = absl::StrCat(
      "--num-layers ", a.num_layers, ", --hidden-size ", a.hidden_size, ", --ffn-hidden-size ", a.ffn_hidden_size,
      ", --num-attention-heads ", a.num_attention_heads, ", --kv-channels ", a.kv_channels, ", --seq-length ",
      a.seq_length, ", --max-position-embeddings ", a.max_position_embeddings, ", --micro-batch-size ",
      a.micro_batch_size, ", --global-batch-size ", a.global_batch_size, ", vocabulary padded to ", padded_vocab,
      " (--make-vocab-size-divisible-by ", a.make_vocab_size_divisible_by, "), --tensor-model-parallel-size ",
      a.tensor_model_parallel_size, ", --pipeline-model-parallel-size ", a.pipeline_model_parallel_size,
      ", data-parallel size ", data_parallel_size(a, world_size));
  if (a.context_parallel_size > 1) absl::StrAppend(&text, ", --context-parallel-size ", a.context_parallel_size);
  if (a.num_experts > 0) {
    const MoeConfig moe = moe_config_from(a);
    absl::StrAppend(&text, ", --num-experts ", moe.num_experts, " (", moe.moe_layer_count(), " MoE layers)",
                    ", --moe-ffn-hidden-size ", moe.ffn_hidden_size, ", --moe-router-topk ", moe.topk);
    if (moe.shared_expert_size > 0) {
      absl::StrAppend(&text, ", --moe-shared-expert-intermediate-size ", moe.shared_expert_size);
    }
    if (!moe.dropless()) absl::StrAppend(&text, ", --moe-expert-capacity-factor ", moe.capacity_factor);
  }
  if (a.bf16) text += ", --bf16";
  if (a.fp16) text += ", --fp16";
  if (a.use_distributed_optimizer) text += ", --use-distributed-optimizer";
  if (a.num_distributed_optimizer_instances > 1) {
    absl::StrAppend(&text, ", --num-distributed-optimizer-instances ", a.num_distributed_optimizer_instances);
  }
  if (a.use_megatron_fsdp) {
    text += ", --use-megatron-fsdp --data-parallel-sharding-strategy " + a.data_parallel_sharding_strategy;
  }
  if (a.use_torch_fsdp2) text += ", --use-torch-fsdp2";
  if (!a.recompute_granularity.empty()) text += ", --recompute-granularity " + a.recompute_granularity;
  if (!a.data_path.empty()) absl::StrAppend(&text, ", --train-iters ", a.train_iters, ", --eval-iters ", a.eval_iters);
  return text;
}

absl::Status overflow(const char* item, const Arguments& a, int64_t world_size, int64_t padded_vocab) {
  return absl::InvalidArgumentError(
      absl::StrCat("the memory a rank needs for its ", item, " overflows a 64-bit byte count; the layout is far too "
                   "large (", layout_flags(a, world_size, padded_vocab), ")"));
}

// The node's physical memory; 0 if unknown.
int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return checked_multiply(pages, page_size).value_or(std::numeric_limits<int64_t>::max());
}

// Layouts up to these sizes get the exact plan: enumerating the parameters and building the
// schedules takes milliseconds there.
constexpr int64_t kExactPlanMaxLayers = 4096;
// ... and up to this many experts over all MoE layers (each expert is its own weight tensors, one
// entry each in the enumerated list: 10^9 experts exhausted the host before any refusal; DeepSeek-V3
// has 256 x 58). Past it the closed form alone plans (and refuses what does not fit).
constexpr int64_t kExactPlanMaxExpertLayers = 1 << 20;
constexpr int64_t kExactPlanMaxScheduleSteps = 1 << 16;

}  // namespace

StateLayout state_layout(const Arguments& a) {
  return StateLayout{.parameter_bytes = a.bf16 || a.fp16 ? 2 : 4,
                     .sharded_parameters = zero_level(a) >= ZeroLevel::kParameters,
                     .sharded_gradients = zero_level(a) >= ZeroLevel::kGradients,
                     .separate_master = a.bf16 || a.fp16};
}

namespace {

bool schedule_small_enough(const Arguments& a, int64_t world_size) {
  const int64_t pp = a.pipeline_model_parallel_size, v = virtual_pipeline_size(a);
  return pp * v * std::max<int64_t>(num_microbatches(a, world_size), 1) <= kExactPlanMaxScheduleSteps;
}

// The microbatches each chunk of pipeline stage `stage` holds at once: its stash slots as the
// trainer's ForwardBackward counts them from the schedule (the interleaved schedule's warm-up
// included). For a schedule too long to build, the least any schedule holds: min(m, PP) on the
// first stage's first chunk (1F1B's warm-up + 1; ZB-H1: on every stage), one elsewhere.
std::vector<int64_t> stage_stash_slots(const Arguments& a, int64_t world_size, int stage) {
  const int64_t pp = a.pipeline_model_parallel_size, v = virtual_pipeline_size(a);
  const int64_t m = std::max<int64_t>(1, num_microbatches(a, world_size));
  if (schedule_small_enough(a, world_size)) {
    const PipelineLayout pipeline =
        pipeline_layout(a, grid_shape_from(a, world_size), GridCoordinates{.tensor = 0, .pipeline = stage, .data = 0}, m);
    const ForwardBackward schedules(pipeline);
    return std::vector<int64_t>(schedules.stash_slots().begin(), schedules.stash_slots().end());
  }
  std::vector<int64_t> slots(static_cast<size_t>(v), 1);
  if (stage == 0 || pipeline_schedule_kind(a) == pipeline::ScheduleKind::kZeroBubbleH1) slots[0] = std::min(m, pp);
  return slots;
}

// One TP rank's parameter elements of a layer, of the embeddings and of the final norm and untied
// head, summed over the list the model allocates by (build_param_specs, of the layout's model with
// one layer), and of the word embedding alone (a stage without the embedding holds it again as the
// tied head). Overflowed where a tensor's size does not fit in int64.
struct SectionElements {
  Bytes layer = 0, embedding = 0, final = 0, word_embedding = 0;
  Bytes moe_layer = 0;  // an MoE layer's (router, experts, shared expert), 0 without MoE
  // Of moe_layer, the routed experts this rank holds (its E / EP experts, each split over ETP).
  Bytes moe_layer_experts = 0;
};

// Expert parallelism's sizes of validated arguments (EP-DESIGN.md): ETP (TP unless given) and EP.
struct ExpertSizes {
  int64_t tensor = 1, model = 1;
};
ExpertSizes expert_sizes(const Arguments& a) {
  ExpertSizes e;
  e.tensor = a.num_experts > 0 && a.expert_tensor_parallel_size >= 1 ? a.expert_tensor_parallel_size
                                                                    : a.tensor_model_parallel_size;
  e.model = a.num_experts > 0 ? a.expert_model_parallel_size : 1;
  return e;
}

SectionElements section_elements(const Arguments& a, int64_t padded_vocab) {
  ModelConfig c;
  set_model_kinds(a, c);
  c.num_layers = 1;
  c.hidden_size = a.hidden_size;
  c.ffn_hidden_size = a.ffn_hidden_size;
  c.num_attention_heads = a.num_attention_heads;
  c.kv_channels = a.kv_channels;
  c.max_position_embeddings = a.max_position_embeddings;
  c.padded_vocab_size = padded_vocab;
  // Every tensor of the list is [rows, h] or smaller, its rows a product of two flags at most:
  // checked here before the list computes them in int64.
  const MoeConfig moe = moe_config_from(a);
  const Bytes largest = Bytes(c.num_attention_heads + 2 * c.query_groups()) * c.kv_channels * c.hidden_size +
                        Bytes(2) * c.ffn_hidden_size * c.hidden_size + Bytes(padded_vocab) * c.hidden_size +
                        Bytes(c.max_position_embeddings) * c.hidden_size +
                        Bytes(2) * moe.num_experts * moe.ffn_hidden_size * c.hidden_size +
                        Bytes(2) * moe.shared_expert_size * c.hidden_size;
  if (!largest.value()) {
    const Bytes overflowed(std::nullopt);
    return SectionElements{overflowed, overflowed, overflowed, overflowed};
  }
  const int64_t tp = a.tensor_model_parallel_size;
  SectionElements elements;
  for (const ParamSpec& spec : build_param_specs(c)) {
    const int64_t local = spec.split == TensorSplit::kReplicated ? spec.global_numel() : spec.global_numel() / tp;
    Bytes& section = spec.section == ParamSection::kLayer       ? elements.layer
                     : spec.section == ParamSection::kEmbedding ? elements.embedding
                                                                : elements.final;
    section = section + local;
    if (spec.name == kWordEmbeddingName) elements.word_embedding = local;
  }
  if (moe.enabled()) {
    // The same list for one MoE layer.
    c.moe = moe;
    c.moe.moe_layers = {true};
    c.moe.topk = 1;
    c.moe.num_groups = c.moe.group_topk = 0;
    c.moe.expert_model_parallel = 1;
    // The routed experts: this rank's E / EP of them, each split over ETP (not TP). The list is
    // affine in E (each expert's tensors alike; the router's [E, h] and [E]): taken for one and two
    // experts, never for E (10^9 experts' list exhausted the host before any refusal).
    const ExpertSizes expert = expert_sizes(a);
    struct Parts {
      int64_t shared = 0, expert = 0;  // one or two experts: bounded by `largest`
    };
    auto moe_layer = [&](int64_t count) {
      c.moe.num_experts = count;
      Parts parts;
      for (const ParamSpec& spec : build_param_specs(c)) {
        if (spec.section != ParamSection::kLayer) continue;
        const int64_t split = spec.expert >= 0 ? expert.tensor : tp;
        const int64_t local = spec.split == TensorSplit::kReplicated ? spec.global_numel() : spec.global_numel() / split;
        (spec.expert >= 0 ? parts.expert : parts.shared) += local;
      }
      return parts;
    };
    const Parts one = moe_layer(1), two = moe_layer(2);
    elements.moe_layer = Bytes(one.shared) + Bytes(moe.num_experts - 1) * Bytes(two.shared - one.shared);
    Bytes experts = Bytes(moe.num_experts) * Bytes(one.expert);
    if (experts.value()) experts = Bytes(*experts.value() / expert.model);
    elements.moe_layer_experts = experts;
    elements.moe_layer = elements.moe_layer + experts;
  }
  return elements;
}

// The MoE layers among a stage's layers (--moe-layer-freq's pattern over its chunks), 0 without
// MoE.
std::vector<ChunkLayout> stage_chunks(const Arguments& a, int64_t world_size, int stage) {
  return pipeline_layout(a, grid_shape_from(a, world_size), GridCoordinates{.tensor = 0, .pipeline = stage, .data = 0},
                         std::max<int64_t>(1, num_microbatches(a, world_size)))
      .chunks;
}

int64_t stage_moe_layers(const Arguments& a, int64_t world_size, const MoeConfig& moe, int stage) {
  if (!moe.enabled()) return 0;
  int64_t count = 0;
  for (const ChunkLayout& chunk : stage_chunks(a, world_size, stage)) {
    for (int64_t i = 0; i < chunk.num_layers; ++i) count += moe.is_moe_layer(chunk.first_layer + i) ? 1 : 0;
  }
  return count;
}

// The distinct values of `values` and how often each occurs (a stage's chunks by their stash slots:
// a handful of counts however many chunks).
std::vector<std::pair<int64_t, int64_t>> counts_of(std::span<const int64_t> values) {
  std::vector<std::pair<int64_t, int64_t>> counts;
  for (int64_t value : values) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == value; });
    if (it == counts.end()) {
      counts.emplace_back(value, 1);
    } else {
      ++it->second;
    }
  }
  return counts;
}

// The activation sizes of one rank of the layout (LayerShapes::make's, as the trainer makes them),
// their products checked; nullopt where a layer's or the embeddings' tensors overflow (`elements`),
// which the parameters then report.
std::optional<CheckedLayerShapes> checked_layer_shapes(const Arguments& a, int64_t padded_vocab,
                                                       const SectionElements& elements) {
  if (!elements.layer.value() || !elements.embedding.value()) return std::nullopt;
  ModelConfig c;
  set_model_kinds(a, c);
  c.seq_length = a.seq_length;
  c.hidden_size = a.hidden_size;
  c.ffn_hidden_size = a.ffn_hidden_size;  // fc1_size() = 2 ffn fits: the layer's elements did
  c.num_attention_heads = a.num_attention_heads;
  c.kv_channels = a.kv_channels;
  c.padded_vocab_size = padded_vocab;
  c.vocab_size = padded_vocab;  // only vocab_valid, which the lists do not read
  c.moe = moe_config_from(a);  // the expert-major buffers' rows and the experts' widths
  const int64_t tp = a.tensor_model_parallel_size;
  LayerShapes shapes = LayerShapes::make(c, tp, 0, a.sequence_parallel && tp > 1, a.micro_batch_size,
                                         std::max<int64_t>(1, a.context_parallel_size));
  if (uses_all_to_all_ring(a)) shapes.context_inner = context_inner_size(a);
  return CheckedLayerShapes::of(shapes);
}

// rank_memory of the first rank (TP and DP rank 0: the others hold as much) of every pipeline
// stage, the largest; nullopt when the layout is too large to enumerate.
std::optional<RankMemory> exact_worst_stage(const Arguments& a, int64_t world_size, int64_t vocab_size) {
  const int64_t tp = a.tensor_model_parallel_size, pp = a.pipeline_model_parallel_size;
  const int64_t m = num_microbatches(a, world_size);
  if (a.num_layers > kExactPlanMaxLayers || !schedule_small_enough(a, world_size)) return std::nullopt;
  if (a.num_experts > kExactPlanMaxExpertLayers / std::max<int64_t>(1, moe_config_from(a).moe_layer_count())) {
    return std::nullopt;
  }
  Arguments sized = a;
  sized.vocab_size = vocab_size;
  const ModelConfig config = model_config_from(sized);
  const std::vector<ParamSpec> specs = build_param_specs(config);
  const GridShape shape = grid_shape_from(a, world_size);
  const bool sequence_parallel = a.sequence_parallel && tp > 1;
  LayerShapes shapes =
      LayerShapes::make(config, tp, 0, sequence_parallel, a.micro_batch_size, a.context_parallel_size);
  if (uses_all_to_all_ring(a)) shapes.context_inner = context_inner_size(a);
  std::optional<RankMemory> worst;
  for (int stage = 0; stage < pp; ++stage) {
    const GridCoordinates coordinates{.tensor = 0, .pipeline = stage, .data = 0};
    const PipelineLayout pipeline = pipeline_layout(a, shape, coordinates, m);
    const ShardPlan plan(rank_param_specs(specs, pipeline, expert_share_from(shape, coordinates)),
                         shard_plan_config_from(a, shape, coordinates));
    const ForwardBackward schedules(pipeline);
    const RankMemory mine = rank_memory(plan, config, shapes, sequence_parallel, pipeline, schedules.stash_slots(),
                                        schedules.deferral_depths(), data_parallel_config_from(a), offload_fraction(a));
    if (!worst || mine.total() > worst->total()) worst = mine;
  }
  return worst;
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char text[64];
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%lld bytes", static_cast<long long>(bytes));
  } else {
    std::snprintf(text, sizeof(text), "%.2f %s", value, units[unit]);
  }
  return text;
}

int64_t vocabulary_before_data(const Arguments& a) {
  if (a.tokenizer_type == "NullTokenizer") return checked_add(a.vocab_size, 1).value_or(a.vocab_size);
  if (a.tokenizer_type.empty()) return a.vocab_size;  // --mock-data with --vocab-size alone
  return 1;  // a vocabulary file or tokenizer model: checked again once read (data_setup.cc)
}

absl::StatusOr<MemoryPlan> plan_memory(const Arguments& a, int64_t world_size, int64_t vocab_size) {
  GPT_ASSIGN_OR_RETURN(const int64_t padded_vocab, checked_padded_vocab_size(a, vocab_size));
  const int64_t pp = a.pipeline_model_parallel_size;
  const int64_t dp = std::max<int64_t>(1, data_parallel_size(a, world_size));
  const int64_t v = virtual_pipeline_size(a);
  const int64_t m = std::max<int64_t>(1, num_microbatches(a, world_size));
  const int64_t cp = std::max<int64_t>(1, a.context_parallel_size);
  // The first stage's layers and its first chunk's, the last stage's and the fewest of its chunks'.
  int64_t first_stage_layers = a.num_layers / pp, stage_layers = first_stage_layers;
  int64_t chunk_layers = first_stage_layers / v, last_chunk_layers = chunk_layers;
  if (custom_pipeline_split(a)) {
    // Megatron's uneven split, from the ranks' layers (this closed form is for layouts too large to
    // enumerate): the first stage's and its first chunk's, the last stage's, each less the embedding
    // or the loss counted there. A lower bound of those two stages, as with the even split.
    const std::vector<int64_t> layers = pipeline_rank_layers(a);
    const int64_t embedding = a.account_for_embedding_in_pipeline_split ? 1 : 0;
    const int64_t loss = a.account_for_loss_in_pipeline_split ? 1 : 0;
    first_stage_layers = layers.front() - embedding - (pp == 1 ? loss : 0);
    chunk_layers = layers.front() / v - embedding;
    stage_layers = layers.back() - loss - (pp == 1 ? embedding : 0);
    last_chunk_layers = std::max<int64_t>(0, layers.back() / v - loss);
  }

  // Parameters: a layer, the first stage's embeddings, the last stage's norm and head, from the
  // list the model allocates by (section_elements).
  ModelConfig model;  // the model's kinds as the trainer reads them (no sizes, which may overflow here)
  set_model_kinds(a, model);
  const SectionElements elements = section_elements(a, padded_vocab);
  const Bytes layer_params = elements.layer, embeddings = elements.embedding;
  // ZB-V's V puts the head (and the loss) on the first stage, beside the embedding; elsewhere a tied
  // head is a second copy of the word embedding.
  const bool head_first = pp == 1 || pipeline_schedule_kind(a) == pipeline::ScheduleKind::kZeroBubbleV;
  const bool tied_copy = !a.untie_embeddings_and_output_weights && !head_first;
  const Bytes head = elements.final + (tied_copy ? elements.word_embedding : Bytes(0));
  // MoE layers hold their router and experts instead of the dense MLP: counted per stage.
  model.moe = moe_config_from(a);
  const int64_t first_moe = std::min(first_stage_layers, stage_moe_layers(a, world_size, model.moe, 0));
  const int64_t last_moe =
      std::min(stage_layers, stage_moe_layers(a, world_size, model.moe, static_cast<int>(pp - 1)));
  const Bytes layers_params = Bytes(stage_layers - last_moe) * layer_params + Bytes(last_moe) * elements.moe_layer;
  const Bytes first_layers_params =
      Bytes(first_stage_layers - first_moe) * layer_params + Bytes(first_moe) * elements.moe_layer;
  const Bytes first_elements = head_first ? first_layers_params + embeddings + head : first_layers_params + embeddings;
  const Bytes last_elements = head_first ? layers_params : layers_params + head;

  // Activations: each chunk's memory from the lists the chunks allocate by (GptModel::stash_memory in
  // checked arithmetic: one layer of each kind the recompute plan gives times their count, the shared
  // workspace and recompute buffers, the gradient buffer), the embedding's and the output layer's
  // stashes, without the leases and receive buffers. Microbatches in flight: each chunk's stash
  // slots from the schedule (stage_stash_slots); the first stage's chunks of chunk_layers each, the
  // last stage's of its fewest layers at its fewest slots (ZB-H1 keeps min(m, PP) on every stage
  // until the deferred weight gradients run; their leases come on top and are counted by the exact
  // plan). The embedding is on the first stage's first chunk, the head on its stage's last chunk.
  // A stage's chunks are evaluated once per distinct slot count (v may be large).
  const std::optional<CheckedLayerShapes> shapes = checked_layer_shapes(a, padded_vocab, elements);
  auto chunks = [&](int64_t layers, int64_t slots, int64_t count) -> Bytes {
    const ChunkLayout layout{.num_layers = layers, .has_embedding = false, .has_output = false};
    return Bytes(count) * GptModel::stash_memory(model, *shapes, Bytes(slots), layout).total();
  };
  const std::vector<int64_t> first_slots = stage_stash_slots(a, world_size, 0);
  const std::vector<int64_t> last_slots = stage_stash_slots(a, world_size, static_cast<int>(pp - 1));
  const int64_t last_slot_count = *std::min_element(last_slots.begin(), last_slots.end());
  Bytes first_activations(std::nullopt), last_activations(std::nullopt);
  if (shapes) {
    first_activations = EmbeddingLayer::stash_bytes(*shapes, model.dtype, Bytes(first_slots.front()));
    if (head_first) {
      first_activations = first_activations + OutputLayer::stash_bytes(*shapes, model.dtype, Bytes(first_slots.back()));
    }
    if (!model.moe.enabled()) {
      for (const auto& [slots, count] : counts_of(first_slots)) {
        first_activations = first_activations + chunks(chunk_layers, slots, count);
      }
      last_activations = chunks(last_chunk_layers, last_slot_count, v);
    } else {
      // MoE and dense layers differ: each chunk from its first layer (the pattern's MoE layers
      // counted where they are), chunk by chunk.
      auto chunk_at = [&](int64_t first_layer, int64_t layers, int64_t slots) -> Bytes {
        const ChunkLayout layout{.first_layer = first_layer, .num_layers = layers, .has_embedding = false,
                                 .has_output = false};
        return GptModel::stash_memory(model, *shapes, Bytes(slots), layout).total();
      };
      const std::vector<ChunkLayout> first_chunks = stage_chunks(a, world_size, 0);
      for (size_t c = 0; c < first_chunks.size() && c < first_slots.size(); ++c) {
        first_activations = first_activations + chunk_at(first_chunks[c].first_layer, chunk_layers, first_slots[c]);
      }
      last_activations = 0;
      for (const ChunkLayout& chunk : stage_chunks(a, world_size, static_cast<int>(pp - 1))) {
        last_activations = last_activations + chunk_at(chunk.first_layer, last_chunk_layers, last_slot_count);
      }
    }
    if (!head_first) {
      last_activations = last_activations + OutputLayer::stash_bytes(*shapes, model.dtype, Bytes(last_slot_count));
    }
  }

  // Host: dataset indices (sample index [samples + 1, 2] and shuffle index, int64) and the
  // schedules (every rank's steps of the training and evaluation schedules).
  Bytes index_bytes = 0;
  if (!a.mock_data) {
    const Bytes evaluations = a.train_iters / a.eval_interval + 1;
    const Bytes samples = Bytes(a.train_iters) * a.global_batch_size +
                          evaluations * a.eval_iters * a.global_batch_size + Bytes(a.eval_iters) * a.global_batch_size;
    index_bytes = Bytes(24) * samples;
  }
  const Bytes schedule_bytes =
      Bytes(3) * pp * m * v * static_cast<int64_t>(sizeof(pipeline::Step) + sizeof(pipeline::Instruction));

  // Expert parameters apart (expert parallelism): their shards over the expert data-parallel
  // group, EDP = world / (ETP x EP x PP), the dense ones' over data x context.
  const ExpertSizes expert = expert_sizes(a);
  const int64_t expert_shards = std::max<int64_t>(1, world_size / (expert.tensor * expert.model * pp));
  // Apart as the shard plan lays them out (configs.cc: the expert groups are not the dense ones).
  const bool experts_apart = !grid_shape_from(a, world_size).expert_groups_are_dense();
  auto stage_plan = [&](const Bytes& elements, const Bytes& expert_elements,
                        const Bytes& activations) -> absl::StatusOr<MemoryPlan> {
    // ZeRO shards over the data x context group, or over one distributed-optimizer instance of it.
    const int64_t shards = optimizer_instance_size(a, dp * cp);
    auto shard_of = [](const Bytes& n, int64_t over) { return Bytes(n.value() ? (*n.value() + over - 1) / over : 0); };
    Bytes owned = elements;
    if (shards_optimizer(a) && !experts_apart) owned = shard_of(elements, shards);
    if (shards_optimizer(a) && experts_apart) {
      owned = Bytes(std::nullopt);
      if (elements.value() && expert_elements.value()) {
        owned = shard_of(Bytes(*elements.value() - *expert_elements.value()), shards) +
                shard_of(expert_elements, expert_shards);
      }
    }
    // Offloaded optimizer state lives in host memory (the exact plan counts it there).
    const Bytes device_owned =
        owned.value() ? Bytes(*owned.value() - AdamW::offloaded_elements(*owned.value(), offload_fraction(a))) : owned;
    const StateMemory<Bytes> state = state_memory<Bytes>(state_layout(a), elements, owned, device_owned, Bytes(0));
    const Bytes parameters = state.parameters, gradients = state.gradients, optimizer = state.optimizer_state();
    const Bytes host = index_bytes + schedule_bytes;
    if (!elements.value()) return overflow("parameters", a, world_size, padded_vocab);
    if (!parameters.value() || !gradients.value() || !optimizer.value()) {
      return overflow("parameters, gradients and optimizer state", a, world_size, padded_vocab);
    }
    if (!activations.value()) return overflow("activations", a, world_size, padded_vocab);
    if (!host.value()) return overflow("data indices and pipeline schedules", a, world_size, padded_vocab);
    MemoryPlan plan;
    plan.layout = layout_flags(a, world_size, padded_vocab);
    plan.parameters = *parameters.value();
    plan.gradients = *gradients.value();
    plan.optimizer_state = *optimizer.value();
    plan.activations = *activations.value();
    plan.data_indices = *host.value();
    if (!(Bytes(plan.model_bytes()) + plan.data_indices).value() ||
        !(Bytes(plan.parameters) + plan.gradients + plan.optimizer_state + plan.activations).value()) {
      return overflow("model and data", a, world_size, padded_vocab);
    }
    return plan;
  };
  GPT_ASSIGN_OR_RETURN(MemoryPlan first,
                       stage_plan(first_elements, Bytes(first_moe) * elements.moe_layer_experts, first_activations));
  MemoryPlan worst = std::move(first);
  if (pp > 1) {
    GPT_ASSIGN_OR_RETURN(MemoryPlan last,
                         stage_plan(last_elements, Bytes(last_moe) * elements.moe_layer_experts, last_activations));
    if (last.total_bytes() > worst.total_bytes()) worst = std::move(last);
  }
  // The closed form has bounded every figure: a layout it lets through and that is small enough is
  // planned exactly, from the lists the trainer allocates by.
  worst.allocated = exact_worst_stage(a, world_size, vocab_size);
  return worst;
}

namespace {

// DataParallel's buffers besides ZeRO-2/3's working ones (train/data_parallel/*.cc): GradientSync's
// reduce-scatter outputs and ParamGather's staging, one shard per bucket, when the distributed
// optimizer shards over more than one rank and the gradients or values are not sharded themselves;
// the FP32 staging of the parameters whose gradients are summed over TP.
int64_t data_parallel_buffer_bytes(const ShardPlan& plan, DType dtype, bool sequence_parallel) {
  const ShardPlanConfig& c = plan.config();
  int64_t bytes = 0;
  if (c.distributed_optimizer) {
    // The strategies build these two exactly so (train/data_parallel/make_data_parallel.cc).
    // Each bucket over its own group (expert buckets over expert data parallelism).
    const std::vector<int> groups = plan.bucket_group_sizes();
    if (!plan.sharded_gradients()) {
      bytes += GradientSync::buffer_bytes(plan.bucket_shards(), groups, GradientReduction::kReduceScatter);
    }
    if (!plan.sharded_parameters()) bytes += ParamGather::buffer_bytes(plan.bucket_shards(), groups, dtype);
  }
  int64_t summed_over_tensor_parallel = 0;
  for (const ParamPlacement& param : plan.params()) {
    if (param.spec->summed_over_tensor_parallel(c.tensor_parallel_size, sequence_parallel)) {
      summed_over_tensor_parallel += param.numel();
    }
  }
  if (summed_over_tensor_parallel > 0) {
    bytes += Arena::aligned_bytes(DType::kFloat32, Shape{summed_over_tensor_parallel});
  }
  return bytes;
}

}  // namespace

RankMemory rank_memory(const ShardPlan& plan, const ModelConfig& config, const LayerShapes& shapes,
                       bool sequence_parallel, const PipelineLayout& pipeline, std::span<const int> stash_slots,
                       std::span<const int> deferral_depths, const DataParallelConfig& data_parallel,
                       double offload_fraction) {
  RankMemory m;
  int64_t owned = 0;
  for (const Range& range : plan.owned()) owned += range.size();
  m.parameters = Arena::aligned_bytes(config.dtype, Shape{plan.sharded_parameters() ? owned : plan.flat_elements()});
  m.gradients = ParamStore::bytes(plan, config.dtype) - m.parameters;
  if (plan.sharded_gradients()) {
    m.gradients += GradientShards::bytes(plan.bucket_shards(), plan.smallest_group(), data_parallel.gradient_buffers);
  }
  if (plan.sharded_parameters()) {
    m.parameters += ParamUnits::bytes(plan.bucket_shards(), config.dtype, data_parallel.parameter_buffers);
  }
  m.data_parallel_buffers = data_parallel_buffer_bytes(plan, config.dtype, sequence_parallel);
  m.optimizer_state = AdamW::bytes(owned, config.dtype, offload_fraction);
  m.host_optimizer_state = AdamW::host_bytes(owned, config.dtype, offload_fraction);
  for (size_t c = 0; c < pipeline.chunks.size(); ++c) {
    const int depth = c < deferral_depths.size() ? deferral_depths[c] : 0;
    m.activations +=
        GptModel::memory(config, shapes, sequence_parallel, stash_slots[c], pipeline.chunks[c], depth).total();
  }
  m.activations += pipeline::Executor::buffer_bytes(pipeline.stages(), stash_slots, config.dtype,
                                                    Shape{shapes.local_sequence, shapes.batch, shapes.hidden});
  return m;
}

MemoryBudget this_rank_memory_budget(const Arguments& args, int ranks_per_gpu) {
  MemoryBudget budget;
  budget.gpu = args.device == "cuda";
  if (budget.gpu && cuda::device_count() > 0) {
    budget.device_bytes = static_cast<int64_t>(
        cuda::device_memory_total_bytes(gpu_for_local_rank(local_rank(), cuda::device_count())));
    budget.ranks_per_device = std::max(1, ranks_per_gpu);
  }
  budget.host_bytes = physical_memory_bytes();
  budget.ranks_per_host = std::max(1, local_world_size());
  return budget;
}

absl::Status check_memory_plan(const MemoryPlan& plan, const Arguments& args, const MemoryBudget& budget) {
  (void)args;
  const RankMemory items = plan.allocated.value_or(RankMemory{.parameters = plan.parameters,
                                                                .gradients = plan.gradients,
                                                                .optimizer_state = plan.optimizer_state,
                                                                .activations = plan.activations});
  const std::string model_items =
      absl::StrCat("parameters ", format_bytes(items.parameters), ", gradients ", format_bytes(items.gradients),
                   ", optimizer state ", format_bytes(items.optimizer_state), ", activations ",
                   format_bytes(items.activations),
                   items.data_parallel_buffers > 0
                       ? absl::StrCat(", data-parallel buffers ", format_bytes(items.data_parallel_buffers))
                       : std::string());
  std::string host_items = absl::StrCat("data indices and pipeline schedules ", format_bytes(plan.data_indices));
  if (items.host_optimizer_state > 0) {
    absl::StrAppend(&host_items, ", offloaded optimizer state ", format_bytes(items.host_optimizer_state));
  }
  struct Pool {
    const char* what;   // "GPU memory", "host memory"
    const char* owner;  // "the GPU", "the node"
    int64_t per_rank;
    std::string items;
    int ranks;
    int64_t available;
  };
  std::vector<Pool> pools;
  if (budget.gpu) {
    pools.push_back({"GPU memory", "the GPU", plan.model_bytes(), model_items, budget.ranks_per_device,
                     budget.device_bytes});
    pools.push_back({"host memory", "the node", plan.host_bytes(), host_items, budget.ranks_per_host,
                     budget.host_bytes});
  } else {
    pools.push_back({"host memory", "the node", plan.total_bytes(), model_items + ", " + host_items,
                     budget.ranks_per_host, budget.host_bytes});
  }
  for (const Pool& pool : pools) {
    if (pool.available <= 0) continue;  // unknown
    const std::optional<int64_t> needed = checked_multiply(pool.per_rank, pool.ranks);
    if (needed && *needed <= pool.available) continue;
    const std::string sharing = pool.ranks > 1 ? absl::StrCat(", x ", pool.ranks, " ranks sharing it") : std::string();
    return absl::ResourceExhaustedError(absl::StrCat(
        "the layout does not fit in ", pool.what, ": a rank needs at least ", pool.per_rank, " bytes (",
        format_bytes(pool.per_rank), ": ", pool.items, ")", sharing, ", but ", pool.owner, " has ", pool.available,
        " bytes (", format_bytes(pool.available), "); reduce the model or batch, or split it over more ranks (",
        plan.layout, ")"));
  }
  return absl::OkStatus();
}

absl::Status check_memory_fits(const Arguments& args, int64_t world_size, int64_t vocab_size, int ranks_per_gpu) {
  GPT_ASSIGN_OR_RETURN(const MemoryPlan plan, plan_memory(args, world_size, vocab_size));
  return check_memory_plan(plan, args, this_rank_memory_budget(args, ranks_per_gpu));
}

}  // namespace gpt

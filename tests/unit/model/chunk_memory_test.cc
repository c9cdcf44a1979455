// The chunk memory plan (GptModel::memory) against what the chunk and each of its parts really take
// from their arenas, exactly, byte for byte: GPT and Llama families, FP32 and BF16, every recompute
// mode, TP 1 and TP 2 with sequence parallelism, the first / middle / last / only chunk, one or
// three stash slots, with and without weight-gradient leases.
#include <string>
#include <vector>

#include "core/arena.h"
#include "gtest/gtest.h"
#include "support/tiny_model.h"
#include "model/gpt_model.h"
#include "model/moe_block.h"
#include "support/place_only_group.h"

namespace gpt {
namespace {

enum class Family { kGpt, kLlama, kLlamaQkNorm };  // kLlamaQkNorm: with --qk-layernorm's stash

ModelConfig config_with(Family family, DType dtype, RecomputeConfig recompute) {
  ModelConfig c = testing_support::tiny_model(4, /*sequence=*/8, /*pad_tp=*/2);
  if (family != Family::kGpt) c = testing_support::llama_style(c);
  c.qk_layernorm = family == Family::kLlamaQkNorm;
  c.dtype = dtype;
  c.recompute = recompute;
  return c;
}

int64_t used(const Arena& arena) { return static_cast<int64_t>(arena.used_bytes()); }

TEST(ChunkMemory, PlanEqualsTheAllocationItemByItem) {
  const RecomputeConfig modes[] = {
      {},
      {.granularity = RecomputeGranularity::kSelective},
      {.granularity = RecomputeGranularity::kFull, .method = RecomputeMethod::kUniform, .num_layers = 2},
      {.granularity = RecomputeGranularity::kFull, .method = RecomputeMethod::kBlock, .num_layers = 1}};
  const ChunkLayout layouts[] = {{0, 4, true, true, true}, {0, 2, true, false, true}, {1, 2, false, false, true},
                                 {2, 2, false, true, true}};
  int cases = 0;
  for (Family family : {Family::kGpt, Family::kLlama, Family::kLlamaQkNorm}) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      for (const RecomputeConfig& recompute : modes) {
        for (int tp : {1, 2}) {
          for (const ChunkLayout& layout : layouts) {
            for (int slots : {1, 3}) {
              for (int depth : {0, 2}) {
                SCOPED_TRACE(testing::Message() << "family " << static_cast<int>(family) << " dtype " << static_cast<int>(dtype)
                                                << " recompute " << static_cast<int>(recompute.granularity) << "/"
                                                << recompute.num_layers << " tp " << tp << " layers ["
                                                << layout.first_layer << ", +" << layout.num_layers << ") slots "
                                                << slots << " leases " << depth);
                const ModelConfig config = config_with(family, dtype, recompute);
                const std::vector<ParamSpec> specs = build_param_specs(config);
                Arena param_arena(Device::kCpu, "params");
                ParamStore params(chunk_param_specs(specs, layout), 1 % tp, tp, dtype, param_arena);
                PlaceOnlyGroup group(1 % tp, tp, "tensor-parallel");
                const TensorParallel tp_region(group, /*sequence_parallel=*/tp > 1);
                const bool sp = tp_region.sequence_parallel();
                const LayerShapes shapes = LayerShapes::make(config, tp_region, 2);
                const ChunkMemory plan = GptModel::memory(config, shapes, sp, slots, layout, depth);

                // The whole chunk.
                Arena chunk_arena(Device::kCpu, "chunk");
                GptModel chunk(config, params, tp_region, 2, slots, layout, chunk_arena, depth);
                EXPECT_EQ(used(chunk_arena), plan.total());

                // Item by item, each part built alone.
                Arena workspace_arena(Device::kCpu, "workspace");
                LayerWorkspace workspace(shapes, dtype, workspace_arena);
                EXPECT_EQ(used(workspace_arena), plan.workspace);
                const RecomputePlan recompute_plan = plan_recompute(config.recompute, layout.num_layers);
                Arena shared_arena(Device::kCpu, "recompute");
                RecomputeBuffers shared(recompute_plan, shapes, dtype, shared_arena);
                EXPECT_EQ(used(shared_arena), plan.recompute_buffers);
                std::vector<MicrobatchPosition> positions(static_cast<size_t>(slots));
                Arena layer_arena(Device::kCpu, "layers");
                for (int64_t i = 0; i < layout.num_layers; ++i) {
                  TransformerLayer layer(config, layout.first_layer + i, params, tp_region, shapes, workspace,
                                         recompute_plan, i, shared, layer_arena, slots, positions, depth);
                }
                EXPECT_EQ(used(layer_arena), plan.layers);
                Arena embedding_arena(Device::kCpu, "embedding");
                if (layout.has_embedding) {
                  EmbeddingLayer embedding(config, params, tp_region, shapes, workspace, embedding_arena, slots,
                                           positions, depth);
                }
                EXPECT_EQ(used(embedding_arena), plan.embedding);
                Arena output_arena(Device::kCpu, "output");
                if (layout.has_output) OutputLayer output(config, params, tp_region, shapes, workspace, output_arena, slots, depth);
                EXPECT_EQ(used(output_arena), plan.output);
                EXPECT_EQ(plan.total() - plan.workspace - plan.recompute_buffers - plan.layers - plan.embedding -
                              plan.output,
                          Arena::aligned_bytes(dtype, Shape{shapes.local_sequence, shapes.batch, shapes.hidden}));
                // The memory plan's closed form evaluates the same lists in checked arithmetic.
                if (depth == 0) {
                  const ChunkMemoryOf<CheckedBytes> checked =
                      GptModel::stash_memory(config, CheckedLayerShapes::of(shapes), CheckedBytes(slots), layout);
                  EXPECT_EQ(checked.workspace.value(), plan.workspace);
                  EXPECT_EQ(checked.recompute_buffers.value(), plan.recompute_buffers);
                  EXPECT_EQ(checked.layers.value(), plan.layers);
                  EXPECT_EQ(checked.embedding.value(), plan.embedding);
                  EXPECT_EQ(checked.output.value(), plan.output);
                  EXPECT_EQ(checked.total().value(), plan.total());
                }
                // Leases are what depth adds, and only that.
                if (depth > 0) {
                  const ChunkMemory without = GptModel::memory(config, shapes, sp, slots, layout, 0);
                  EXPECT_GT(plan.total(), without.total());
                  EXPECT_EQ(plan.workspace + plan.recompute_buffers, without.workspace + without.recompute_buffers);
                }
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 2 * 4 * 2 * 4 * 2 * 2);
}

// MoE chunks: the plan equals the allocation byte for byte -- the expert-major buffers sized by the
// dropless worst case (s b k rows) or by the padded capacity, the MoE stash of each MoE layer, the
// MoE workspace, the shared expert's leases and the expert bias (MoeBlock::persistent_bytes) --
// for the GPT and Llama families (the shared expert in Llama's: it has no biases), a layer-frequency pattern, TP 1 and TP 2 + SP, no and selective
// recompute, the first / middle / last / only chunk, with and without leases; and the activation
// report's per-layer stashes (activation_memory) are the allocated layers' own.
enum class MoeKind { kDropless, kSharedBiasPadded, kCapacityUnpadded };

ModelConfig moe_config_with(MoeKind kind, Family family, DType dtype, RecomputeConfig recompute) {
  ModelConfig c = config_with(family, dtype, recompute);
  c.moe.num_experts = 4;
  c.moe.topk = 2;
  c.moe.ffn_hidden_size = 12;
  c.moe.moe_layers = {true, true, true, true};
  if (kind == MoeKind::kSharedBiasPadded) {
    c.moe.moe_layers = {false, true, false, true};
    c.moe.shared_expert_size = c.add_bias_linear ? 0 : 8;  // a shared expert has no biases (Megatron)
    c.moe.expert_bias = true;
    c.moe.capacity_factor = 1.0;
    c.moe.pad_to_capacity = true;
  } else if (kind == MoeKind::kCapacityUnpadded) {
    c.moe.moe_layers = {true, false, true, true};
    c.moe.capacity_factor = 1.5;
  }
  return c;
}

TEST(ChunkMemory, MoePlanEqualsTheAllocation) {
  const RecomputeConfig modes[] = {{}, {.granularity = RecomputeGranularity::kSelective}};
  const ChunkLayout layouts[] = {{0, 4, true, true, true}, {0, 2, true, false, true}, {1, 2, false, false, true},
                                 {2, 2, false, true, true}};
  int cases = 0;
  for (MoeKind kind : {MoeKind::kDropless, MoeKind::kSharedBiasPadded, MoeKind::kCapacityUnpadded}) {
    for (Family family : {Family::kGpt, Family::kLlama}) {
      for (const RecomputeConfig& recompute : modes) {
        for (int tp : {1, 2}) {
          for (const ChunkLayout& layout : layouts) {
            for (int depth : {0, 2}) {
              const int slots = 2;
              SCOPED_TRACE(testing::Message() << "moe " << static_cast<int>(kind) << " family "
                                              << static_cast<int>(family) << " recompute "
                                              << static_cast<int>(recompute.granularity) << " tp " << tp
                                              << " layers [" << layout.first_layer << ", +" << layout.num_layers
                                              << ") leases " << depth);
              const DType dtype = kind == MoeKind::kDropless ? DType::kFloat32 : DType::kBFloat16;
              const ModelConfig config = moe_config_with(kind, family, dtype, recompute);
              const std::vector<ParamSpec> specs = build_param_specs(config);
              Arena param_arena(Device::kCpu, "params");
              ParamStore params(chunk_param_specs(specs, layout), 1 % tp, tp, dtype, param_arena);
              PlaceOnlyGroup group(1 % tp, tp, "tensor-parallel");
              const TensorParallel tp_region(group, /*sequence_parallel=*/tp > 1);
              const bool sp = tp_region.sequence_parallel();
              const LayerShapes shapes = LayerShapes::make(config, tp_region, 2);
              ASSERT_EQ(shapes.moe_rows, LayerShapes::expert_rows(config, shapes.rows(), sp ? tp : 1));
              if (kind == MoeKind::kSharedBiasPadded) {
                // E x capacity, the capacity per segment of s b / segments rows: ceil(rows k / E).
                const int64_t segment = shapes.rows() / (sp ? tp : 1);
                EXPECT_EQ(shapes.moe_rows, 4 * (sp ? tp : 1) * ((segment * 2 + 3) / 4));
              } else {
                EXPECT_EQ(shapes.moe_rows, shapes.rows() * 2);  // every (token, expert) pair
              }
              const ChunkMemory plan = GptModel::memory(config, shapes, sp, slots, layout, depth);
              Arena chunk_arena(Device::kCpu, "chunk");
              GptModel chunk(config, params, tp_region, 2, slots, layout, chunk_arena, depth);
              EXPECT_EQ(used(chunk_arena), plan.total());

              Arena workspace_arena(Device::kCpu, "workspace");
              LayerWorkspace workspace(shapes, dtype, workspace_arena);
              EXPECT_EQ(used(workspace_arena), plan.workspace);
              const RecomputePlan recompute_plan = plan_recompute(config.recompute, layout.num_layers);
              Arena shared_arena(Device::kCpu, "recompute");
              RecomputeBuffers shared(recompute_plan, shapes, dtype, shared_arena);
              std::vector<MicrobatchPosition> positions(static_cast<size_t>(slots));
              Arena layer_arena(Device::kCpu, "layers");
              std::vector<int64_t> layer_bytes;
              for (int64_t i = 0; i < layout.num_layers; ++i) {
                const int64_t before = used(layer_arena);
                TransformerLayer layer(config, layout.first_layer + i, params, tp_region, shapes, workspace,
                                       recompute_plan, i, shared, layer_arena, slots, positions, depth);
                layer_bytes.push_back(used(layer_arena) - before);
              }
              EXPECT_EQ(used(layer_arena), plan.layers);
              if (depth == 0) {
                // The report's activations: each layer's stash slot is its allocation per slot,
                // less the expert bias it keeps once.
                const ActivationMemory report = activation_memory(config, shapes, layout.first_layer, layout.num_layers);
                ASSERT_EQ(report.layers(), layout.num_layers);
                for (int64_t i = 0; i < layout.num_layers; ++i) {
                  const bool moe = config.moe.is_moe_layer(layout.first_layer + i);
                  EXPECT_EQ(slots * report.layer_stash_bytes[static_cast<size_t>(i)] +
                                (moe ? MoeBlock::persistent_bytes(config) : 0),
                            layer_bytes[static_cast<size_t>(i)])
                      << "layer " << layout.first_layer + i;
                }
                const ChunkMemoryOf<CheckedBytes> checked =
                    GptModel::stash_memory(config, CheckedLayerShapes::of(shapes), CheckedBytes(slots), layout);
                EXPECT_EQ(checked.workspace.value(), plan.workspace);
                EXPECT_EQ(checked.layers.value(), plan.layers);
                EXPECT_EQ(checked.total().value(), plan.total());
              }
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 2 * 2 * 2 * 4 * 2);
}

// per_slot_classes and shared_recompute count what the recompute plan lists, layer by layer.
TEST(ChunkMemory, LayerClassesCountThePlansLayers) {
  for (int64_t layers = 0; layers <= 9; ++layers) {
    std::vector<RecomputeConfig> modes = {{}, {.granularity = RecomputeGranularity::kSelective}};
    for (int64_t n = 1; n <= 4; ++n) {
      for (RecomputeMethod method : {RecomputeMethod::kUniform, RecomputeMethod::kBlock}) {
        modes.push_back({.granularity = RecomputeGranularity::kFull, .method = method, .num_layers = n});
      }
    }
    for (const RecomputeConfig& recompute : modes) {
      SCOPED_TRACE(testing::Message() << "layers " << layers << " recompute " << static_cast<int>(recompute.granularity)
                                      << "/" << static_cast<int>(recompute.method) << "/" << recompute.num_layers);
      const RecomputePlan plan = plan_recompute(recompute, layers);
      EXPECT_EQ(shared_recompute(recompute, layers), shared_recompute(plan));
      const std::vector<LayerClass> classes = per_slot_classes(recompute, layers);
      int64_t counted = 0;
      for (const LayerClass& kind : classes) {
        int64_t listed = 0;
        for (int64_t i = 0; i < layers; ++i) listed += per_slot_parts(plan, i) == kind.parts ? 1 : 0;
        EXPECT_EQ(kind.layers, listed);
        counted += kind.layers;
      }
      EXPECT_EQ(counted, layers);
    }
  }
}

// A chunk of 10^8 layers costs one layer of each kind, and a product past int64 reads as overflowed.
TEST(ChunkMemory, CheckedListsScaleAndOverflow) {
  const ModelConfig config = config_with(Family::kGpt, DType::kBFloat16, {});
  const LayerShapes shapes = LayerShapes::make(config, 1, 0, false, 2);
  const ChunkLayout one{0, 1, false, false, true}, many{0, 100000000, false, false, true};
  const CheckedLayerShapes checked = CheckedLayerShapes::of(shapes);
  const int64_t layer = *GptModel::stash_memory(config, checked, CheckedBytes(3), one).layers.value();
  EXPECT_EQ(GptModel::stash_memory(config, checked, CheckedBytes(3), many).layers.value(), 100000000 * layer);
  CheckedLayerShapes huge = checked;
  huge.hidden = int64_t{1} << 31;
  huge.batch = int64_t{1} << 31;
  EXPECT_FALSE(GptModel::stash_memory(config, huge, CheckedBytes(3), one).total().value().has_value());
}

}  // namespace
}  // namespace gpt

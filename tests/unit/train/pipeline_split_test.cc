// Megatron's uneven pipeline splits (issue 32): --decoder-first-pipeline-num-layers,
// --decoder-last-pipeline-num-layers, --account-for-embedding-in-pipeline-split and
// --account-for-loss-in-pipeline-split. Each rank's chunks (pipeline_layout) against a transcription
// of Megatron's get_num_layers_to_build (transformer_block.py) and get_transformer_layer_offset
// (transformer_layer.py); Megatron's refusals; the schedule costs and memory plan of the split.
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "train/args/arguments.h"
#include "train/configs.h"
#include "train/forward_backward.h"
#include "train/memory_plan.h"
#include "train/pipeline_split.h"
#include "train/schedule_choice.h"

namespace gpt {
namespace {

// Megatron's TransformerConfig fields of the split (None as nullopt).
struct MegatronSplit {
  int64_t num_layers = 0;
  int64_t pp = 1;
  std::optional<int64_t> vp;
  std::optional<int64_t> first, last;
  bool embedding = false, loss = false;
};

// transformer_block.py get_num_layers_to_build, line by line.
int64_t megatron_num_layers_to_build(const MegatronSplit& c, int64_t pp_rank, int64_t vp_stage) {
  const bool is_first_pp_stage = pp_rank == 0, is_last_pp_stage = pp_rank == c.pp - 1;
  int64_t num_layers_per_pipeline_rank = 0;
  if (c.first || c.last) {
    int64_t layers_to_distribute = c.num_layers, pipeline_stages_left = c.pp;
    if (c.first) layers_to_distribute -= *c.first, pipeline_stages_left -= 1;
    if (c.last) layers_to_distribute -= *c.last, pipeline_stages_left -= 1;
    num_layers_per_pipeline_rank = pipeline_stages_left > 0 ? layers_to_distribute / pipeline_stages_left : 0;
    if (is_first_pp_stage && c.first) num_layers_per_pipeline_rank = *c.first;
    if (is_last_pp_stage && c.last) num_layers_per_pipeline_rank = *c.last;
  } else {
    const int64_t num_layers = c.num_layers + (c.embedding ? 1 : 0) + (c.loss ? 1 : 0);
    num_layers_per_pipeline_rank = num_layers / c.pp;
  }
  int64_t num_layers_to_build = num_layers_per_pipeline_rank;
  if (c.vp && c.pp > 1) num_layers_to_build = num_layers_per_pipeline_rank / *c.vp;
  const bool vp_first = !c.vp || vp_stage == 0, vp_last = !c.vp || vp_stage == *c.vp - 1;
  if (c.embedding && vp_first && is_first_pp_stage) num_layers_to_build -= 1;
  if (c.loss && vp_last && is_last_pp_stage) num_layers_to_build -= 1;
  return num_layers_to_build;
}

// transformer_layer.py get_transformer_layer_offset, line by line.
int64_t megatron_offset(const MegatronSplit& c, int64_t pp_rank, int64_t vp_stage) {
  if (c.pp == 1) return 0;
  const bool is_first_pp_stage = pp_rank == 0;
  if (c.first || c.last) {
    const int64_t middle_pipeline_stages = c.pp - (c.first ? 1 : 0) - (c.last ? 1 : 0);
    const int64_t first = c.first.value_or(0), last = c.last.value_or(0);
    const int64_t middle_num_layers = c.num_layers - first - last;
    const int64_t middle_pipeline_rank = c.first ? pp_rank - 1 : pp_rank;
    if (c.vp) {
      const int64_t in_first = first / *c.vp, in_last = last / *c.vp, in_middle = middle_num_layers / *c.vp;
      const int64_t total_virtual_chunks = in_first + in_middle + in_last;
      if (pp_rank == 0) return vp_stage * total_virtual_chunks;
      return vp_stage * total_virtual_chunks + in_first + middle_pipeline_rank * (in_middle / middle_pipeline_stages);
    }
    const int64_t per_rank = middle_pipeline_stages > 0 ? middle_num_layers / middle_pipeline_stages : 0;
    return pp_rank == 0 ? 0 : middle_pipeline_rank * per_rank + first;
  }
  const int64_t num_layers = c.num_layers + (c.embedding ? 1 : 0) + (c.loss ? 1 : 0);
  const int64_t per_rank = num_layers / c.pp;
  const bool vp_first = !c.vp || vp_stage == 0;
  int64_t offset = 0;
  if (c.vp) {
    offset = vp_stage * (num_layers / *c.vp) + pp_rank * (per_rank / *c.vp);
  } else {
    offset = pp_rank * per_rank;
  }
  if (c.embedding && !(vp_first && is_first_pp_stage)) offset -= 1;
  return offset;
}

std::vector<std::string> flags_of(const MegatronSplit& c) {
  std::vector<std::string> f = {"pretrain_gpt", "--mock-data", "--vocab-size", "512", "--hidden-size", "64",
                                "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
                                "--micro-batch-size", "1", "--train-iters", "5", "--lr", "1e-3",
                                "--num-layers", std::to_string(c.num_layers),
                                "--pipeline-model-parallel-size", std::to_string(c.pp),
                                "--global-batch-size", std::to_string(2 * c.pp)};
  if (c.vp) f.insert(f.end(), {"--num-virtual-stages-per-pipeline-rank", std::to_string(*c.vp)});
  if (c.first) f.insert(f.end(), {"--decoder-first-pipeline-num-layers", std::to_string(*c.first)});
  if (c.last) f.insert(f.end(), {"--decoder-last-pipeline-num-layers", std::to_string(*c.last)});
  if (c.embedding) f.push_back("--account-for-embedding-in-pipeline-split");
  if (c.loss) f.push_back("--account-for-loss-in-pipeline-split");
  return f;
}

// `flags` with the value of `flag` replaced.
std::vector<std::string> with_value(std::vector<std::string> flags, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < flags.size(); ++i) {
    if (flags[i] == flag) flags[i + 1] = value;
  }
  return flags;
}

// The error of a command line on a world of PP ranks, or "".
std::string error_of(const std::vector<std::string>& flags, int64_t world_size) {
  absl::StatusOr<Arguments> parsed = parse_arguments(flags);
  if (!parsed.ok()) return std::string(parsed.status().message());
  absl::Status status = prepare_arguments(*parsed);
  if (status.ok()) status = prepare_for_world(*parsed, world_size);
  return std::string(status.message());
}

Arguments validated(const MegatronSplit& c) {
  absl::StatusOr<Arguments> parsed = parse_arguments(flags_of(c));
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return Arguments{};
  EXPECT_EQ(std::string(prepare_arguments(*parsed).message()), "");
  EXPECT_EQ(std::string(prepare_for_world(*parsed, c.pp).message()), "");
  return *parsed;
}

TEST(PipelineSplit, ChunksAreMegatrons) {
  const std::vector<MegatronSplit> splits = {
      {.num_layers = 12, .pp = 4, .first = 2, .last = 2},               // the uneven_pipeline configurations
      {.num_layers = 6, .pp = 4, .vp = 2, .embedding = true, .loss = true},  // account_for_embedding_loss
      {.num_layers = 12, .pp = 4, .vp = 2, .first = 2, .last = 2},
      {.num_layers = 10, .pp = 4, .first = 1},
      {.num_layers = 10, .pp = 4, .last = 4},
      {.num_layers = 5, .pp = 2, .embedding = true},
      {.num_layers = 7, .pp = 3, .embedding = true, .loss = true},
      {.num_layers = 14, .pp = 4, .vp = 2, .embedding = true, .loss = true},
      {.num_layers = 3, .pp = 2, .first = 1},
      {.num_layers = 8, .pp = 2, .first = 6},
      {.num_layers = 4, .pp = 1, .embedding = true, .loss = true},
      {.num_layers = 8, .pp = 4},
      {.num_layers = 8, .pp = 2, .vp = 2},
  };
  for (const MegatronSplit& c : splits) {
    const Arguments args = validated(c);
    const GridShape shape{.pipeline = static_cast<int>(c.pp)};
    int64_t layers = 0;
    for (int r = 0; r < c.pp; ++r) {
      const PipelineLayout layout = pipeline_layout(args, shape, GridCoordinates{.pipeline = r}, 2 * c.pp);
      ASSERT_EQ(layout.chunks.size(), static_cast<size_t>(c.vp.value_or(1)));
      for (int v = 0; v < static_cast<int>(layout.chunks.size()); ++v) {
        const ChunkLayout& chunk = layout.chunks[static_cast<size_t>(v)];
        SCOPED_TRACE(testing::Message() << "layers " << c.num_layers << " pp " << c.pp << " rank " << r << " chunk " << v);
        EXPECT_EQ(chunk.num_layers, megatron_num_layers_to_build(c, r, v));
        EXPECT_EQ(chunk.first_layer, megatron_offset(c, r, v));
        layers += chunk.num_layers;
      }
    }
    EXPECT_EQ(layers, c.num_layers);
  }
}

TEST(PipelineSplit, MegatronsRefusals) {
  const std::vector<std::pair<MegatronSplit, std::string>> refused = {
      {{.num_layers = 12, .pp = 4, .first = 2, .embedding = true},
       "--decoder-first-pipeline-num-layers cannot be given with --account-for-embedding-in-pipeline-split"},
      {{.num_layers = 12, .pp = 4, .first = 0}, "--decoder-first-pipeline-num-layers must be larger than 0 (got 0)"},
      {{.num_layers = 12, .pp = 4, .last = -1}, "--decoder-last-pipeline-num-layers must be larger than 0 (got -1)"},
      {{.num_layers = 12, .pp = 4, .first = 4}, "the 8 layers left by --decoder-first-pipeline-num-layers must be "
                                                "divisible by the 3 other pipeline stages"},
      {{.num_layers = 12, .pp = 4, .vp = 2, .first = 3}, "--decoder-first-pipeline-num-layers (3) must be divisible by "
                                                         "the model chunks per pipeline rank (2"},
      {{.num_layers = 12, .pp = 4, .vp = 2, .first = 2, .last = 4},
       "the 3 layers of each of the other pipeline stages (--decoder-first-pipeline-num-layers and "
       "--decoder-last-pipeline-num-layers) must be divisible by the model chunks per pipeline rank (2)"},
      {{.num_layers = 4, .pp = 2, .first = 2, .last = 3}, "(5 layers) exceed --num-layers (4)"},
      {{.num_layers = 4, .pp = 2, .vp = int64_t{1} << 40, .first = 2, .last = 2},
       "--num-virtual-stages-per-pipeline-rank (1099511627776) exceeds the layers to split (4)"},
      {{.num_layers = 4, .pp = 2, .vp = int64_t{1} << 32, .embedding = true},
       "--num-virtual-stages-per-pipeline-rank (4294967296) exceeds the layers to split (5)"},
      {{.num_layers = 4, .pp = 2, .first = 1, .last = int64_t{1} << 62},
       "--decoder-last-pipeline-num-layers (4611686018427387904) exceeds --num-layers (4)"},
      {{.num_layers = 4, .pp = 3, .first = 2, .last = 2}, "leaves 0 layers for the 1 other pipeline stages"},
      {{.num_layers = 4, .pp = 2, .first = 1, .last = 1}, "leaves 2 layers for the 0 other pipeline stages"},
      {{.num_layers = 4, .pp = 1, .first = 4}, "--decoder-first-pipeline-num-layers split the layers over pipeline "
                                               "stages: it needs --pipeline-model-parallel-size > 1"},
      {{.num_layers = 8, .pp = 4, .embedding = true},
       "--num-layers (8) plus the embedding or the loss counted as layers (--account-for-embedding-in-pipeline-split), "
       "9, must be divisible by --pipeline-model-parallel-size (4)"},
      {{.num_layers = 8, .pp = 2, .vp = 2, .embedding = true, .loss = true},
       "the 5 layers of each pipeline stage (--num-layers (8) plus the embedding and the loss counted as layers"},
  };
  for (const auto& [split, message] : refused) {
    std::vector<std::string> flags = flags_of(split);
    EXPECT_NE(error_of(flags, split.pp).find(message), std::string::npos) << error_of(flags, split.pp);
  }
  // Megatron's arguments.py: the uneven split takes its chunks from --num-virtual-stages-per-pipeline-rank.
  std::vector<std::string> flags = flags_of({.num_layers = 12, .pp = 4, .first = 2, .last = 2});
  flags.insert(flags.end(), {"--num-layers-per-virtual-pipeline-stage", "1"});
  EXPECT_NE(error_of(flags, 4).find("give the chunks per rank by --num-virtual-stages-per-pipeline-rank"),
            std::string::npos)
      << error_of(flags, 4);
  // --num-layers-per-virtual-pipeline-stage divides the layers with the embedding and the loss:
  // (6 + 2) / 4 = 2 per rank, one per virtual stage.
  flags = flags_of({.num_layers = 6, .pp = 4, .embedding = true, .loss = true});
  flags.insert(flags.end(), {"--num-layers-per-virtual-pipeline-stage", "1"});
  EXPECT_EQ(error_of(flags, 4), "");
  flags = with_value(with_value(flags, "--num-layers", "10"), "--num-layers-per-virtual-pipeline-stage", "2");
  EXPECT_NE(error_of(flags, 4).find("(12) must be divisible by --pipeline-model-parallel-size (4) x "
                                    "--num-layers-per-virtual-pipeline-stage (2)"),  // 3 per rank: not by 2
            std::string::npos)
      << error_of(flags, 4);
  // ZB-V's V placement has no uneven split.
  flags = flags_of({.num_layers = 12, .pp = 4, .vp = 2, .first = 2, .last = 2});
  flags.insert(flags.end(), {"--pipeline-schedule", "zb-v"});
  EXPECT_NE(error_of(flags, 4).find("--pipeline-schedule zb-v places two chunks per rank in a V"), std::string::npos)
      << error_of(flags, 4);
}

TEST(PipelineSplit, ScheduleCostsFollowTheSplit) {
  // First 2 / last 2 of 12 over PP4: the middle stages hold 4 layers, twice the first's.
  const Arguments args = validated({.num_layers = 12, .pp = 4, .first = 2, .last = 2});
  EXPECT_EQ(virtual_stage_layers(args), (std::vector<int64_t>{2, 4, 4, 2}));
  const StageCosts costs = stage_costs_from_flops(args, 512);
  ASSERT_EQ(costs.forward.size(), 4u);
  EXPECT_DOUBLE_EQ(costs.forward[1], 2.0 * costs.forward[0]);
  EXPECT_DOUBLE_EQ(costs.forward[2], costs.forward[1]);
  EXPECT_GT(costs.forward[3], costs.forward[0]);  // the head on the last stage
}

// The memory plan of a split: its exact plan enumerates each stage's chunks (pipeline_layout), and
// the closed form stays a lower bound of it, as with the even split.
TEST(PipelineSplit, MemoryPlanFollowsTheSplit) {
  for (const MegatronSplit& c : {MegatronSplit{.num_layers = 12, .pp = 4, .first = 2, .last = 2},
                                 MegatronSplit{.num_layers = 12, .pp = 4, .first = 6},
                                 MegatronSplit{.num_layers = 12, .pp = 4, .vp = 2, .first = 2, .last = 2},
                                 MegatronSplit{.num_layers = 6, .pp = 4, .vp = 2, .embedding = true, .loss = true},
                                 MegatronSplit{.num_layers = 5, .pp = 2, .embedding = true}}) {
    SCOPED_TRACE(testing::Message() << "layers " << c.num_layers << " pp " << c.pp);
    const Arguments args = validated(c);
    absl::StatusOr<MemoryPlan> plan = plan_memory(args, c.pp, 512);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->allocated.has_value());
    EXPECT_LE(plan->parameters, plan->allocated->parameters);
    EXPECT_LE(plan->activations, plan->allocated->activations);
    EXPECT_LE(plan->parameters + plan->gradients + plan->optimizer_state + plan->activations,
              plan->allocated->total());
  }
  // First 6 of 12 over PP4: rank 0 holds twice the layers of the even split, and its plan says so.
  absl::StatusOr<MemoryPlan> even = plan_memory(validated({.num_layers = 12, .pp = 4}), 4, 512);
  absl::StatusOr<MemoryPlan> heavy = plan_memory(validated({.num_layers = 12, .pp = 4, .first = 6}), 4, 512);
  ASSERT_TRUE(even.ok() && heavy.ok());
  EXPECT_GT(heavy->allocated->parameters, even->allocated->parameters);
}

}  // namespace
}  // namespace gpt

// The collective-order proof (parallel/pipeline/collective_check.h): for every schedule the
// simulator runs x every expert-parallel layout up to world 16, the ranks of each group issue the
// same calls in the same order and the world cannot wait in a cycle; the groups are the process
// grid's (dense groups against process_grid's grid_groups, expert groups against Megatron's
// RankGenerator worked by hand); the counts of calls follow from the layout; and deliberately
// mis-ordered programs are caught: a divergence inside a group, Megatron-LM #5749's all-to-all /
// reduce-scatter swap, and a cross-group cycle.
#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/pipeline/collective_check.h"
#include "parallel/pipeline/collective_program.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/process_grid.h"

namespace gpt::pipeline {
namespace {

using ::testing::HasSubstr;

struct ScheduleCase {
  ScheduleKind kind;
  int v;
  bool forward_only;
};

// Every schedule the simulator runs for p pipeline ranks (training and evaluation).
std::vector<ScheduleCase> schedules_for(int p) {
  if (p == 1)
    return {{ScheduleKind::kOneFOneB, 1, false},
            {ScheduleKind::kAllForwardAllBackward, 1, false},
            {ScheduleKind::kOneFOneB, 1, true}};
  return {{ScheduleKind::kAllForwardAllBackward, 1, false},
          {ScheduleKind::kOneFOneB, 1, false},
          {ScheduleKind::kZeroBubbleH1, 1, false},
          {ScheduleKind::kInterleaved, 2, false},
          {ScheduleKind::kZeroBubbleV, 2, false},
          {ScheduleKind::kAllForwardAllBackward, 2, false},
          {ScheduleKind::kOneFOneB, 1, true},
          {ScheduleKind::kInterleaved, 2, true},
          {ScheduleKind::kZeroBubbleV, 2, true}};
}

Schedule make(const ScheduleCase& c, int p, int m) {
  absl::StatusOr<Schedule> s = c.forward_only ? make_forward_only_schedule(p, c.v, m, schedule_placement(c.kind))
                                              : make_schedule(c.kind, p, c.v, m);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : Schedule{p, c.v, m, {}};
}

// Every (TP, CP, DP, PP) with world <= 16 and every (EP, ETP) whose ETP x EP divides world / PP.
std::vector<GridLayout> expert_layouts(bool tp_pp_dp) {
  std::vector<GridLayout> layouts;
  for (int tp = 1; tp <= 16; ++tp) {
    for (int cp = 1; tp * cp <= 16; ++cp) {
      for (int dp = 1; tp * cp * dp <= 16; ++dp) {
        for (int pp = 1; tp * cp * dp * pp <= 16; ++pp) {
          const int per_stage = tp * cp * dp;
          for (int ep = 1; ep <= per_stage; ++ep) {
            for (int etp = 1; etp * ep <= per_stage; ++etp) {
              if (per_stage % (etp * ep) != 0) continue;
              layouts.push_back({tp, cp, dp, pp, ep, etp == tp ? 0 : etp, tp_pp_dp});
            }
          }
        }
      }
    }
  }
  return layouts;
}

std::string name(const GridLayout& g) {
  return "TP" + std::to_string(g.tensor) + " CP" + std::to_string(g.context) + " DP" + std::to_string(g.data) + " PP" +
         std::to_string(g.pipeline) + " EP" + std::to_string(g.expert_model) + " ETP" + std::to_string(g.etp()) +
         (g.tp_pp_dp ? " tp-pp-dp" : "");
}

TEST(CollectiveOrder, EveryScheduleAndExpertLayoutUpToWorld16IsOrderedAlike) {
  int checked = 0, refused = 0, with_expert_groups = 0;
  int variant = 0;  // dispatcher, reduction and MoE pattern taken in turn over the layouts
  for (bool tp_pp_dp : {false, true}) {
    for (const GridLayout& grid : expert_layouts(tp_pp_dp)) {
      const int p = grid.pipeline;
      for (const ScheduleCase& c : schedules_for(p)) {
        // The interleaved order (AFAB's with v > 1 too) needs a multiple of p; the others any m.
        const bool interleaved = c.v > 1 && c.kind != ScheduleKind::kZeroBubbleV;
        for (int m : {p, 2 * p + (interleaved ? 0 : 1)}) {
          const Schedule schedule = make(c, p, m);
          const std::vector<bool> pattern = variant % 3 == 0 ? std::vector<bool>{true} : std::vector<bool>{false, true};
          ModelLayout model = even_model_layout(2 * p * c.v, p * c.v, pattern);
          model.dispatcher = variant % 2 == 0 ? Dispatcher::kAllToAll : Dispatcher::kAllGather;
          model.reduction = static_cast<GradientReduction>(variant % 3);
          model.tied_embedding = variant % 4 != 3;
          model.chunk_buckets_after_first_rank = variant % 5 < 2;
          model.gather_parameters = model.reduction == GradientReduction::kEveryMicrobatch && variant % 2 == 1;
          if (!model.gather_parameters) model.updated_shards = static_cast<UpdatedShards>(variant % 7 % 3);
          ++variant;
          absl::StatusOr<WorldProgram> program = collective_program(grid, schedule, model);
          const bool one_rank_moe = grid.expert_model == 1 && grid.etp() == grid.tensor;
          const bool misaligned =
              grid.tp_pp_dp && p > 1 && !one_rank_moe && grid.etp() * grid.expert_model != grid.tensor * grid.context;
          if (misaligned) {
            // Megatron refuses these: the expert grid's pipeline groups differ from the dense grid's.
            ASSERT_FALSE(program.ok()) << name(grid);
            EXPECT_THAT(program.status().message(), HasSubstr("ETP x EP must equal TP x CP"));
            ++refused;
            continue;
          }
          ASSERT_TRUE(program.ok()) << name(grid) << ": " << program.status();
          for (const auto& group : program->groups) {
            if (group.kind == GroupKind::kExpertExchange || group.kind == GroupKind::kExpertData) {
              ++with_expert_groups;
              break;
            }
          }
          const std::string what = name(grid) + " " + to_string(c.kind) + (c.forward_only ? " forward-only" : "") +
                                   " m=" + std::to_string(m);
          EXPECT_TRUE(check_group_orders(*program).ok()) << what << ": " << check_group_orders(*program);
          EXPECT_TRUE(check_no_wait_cycle(*program, WaitModel::kProgram).ok()) << what;
          absl::Status strict = check_no_wait_cycle(*program, WaitModel::kStrict);
          EXPECT_TRUE(strict.ok()) << what << ": " << strict;
          ++checked;
        }
      }
    }
  }
  // The grid: 8 schedules' cases per PP > 1 layout, 3 for PP = 1, two microbatch counts each.
  EXPECT_GT(checked, 5000);
  EXPECT_GT(refused, 100);
  EXPECT_GT(with_expert_groups, 3000);
  std::printf("collective order: %d program(s) proven, %d refused layouts, %d with expert groups\n", checked, refused,
              with_expert_groups);
}

// The dense groups are process_grid's (its grid_groups, an independent implementation, both orders).
TEST(CollectiveOrder, DenseGroupsAreTheProcessGrids) {
  for (bool tp_pp_dp : {false, true}) {
    for (const GridLayout& grid : expert_layouts(tp_pp_dp)) {
      if (grid.expert_model != 1 || grid.expert_tensor != 0) continue;
      const Schedule schedule = make({ScheduleKind::kOneFOneB, 1, false}, grid.pipeline, grid.pipeline);
      absl::StatusOr<WorldProgram> program =
          collective_program(grid, schedule, even_model_layout(grid.pipeline, grid.pipeline, {false}));
      ASSERT_TRUE(program.ok()) << program.status();
      GridShape shape{grid.tensor, grid.pipeline, grid.data, grid.context,
                      tp_pp_dp ? RankOrder::kTpCpPpDp : RankOrder::kTpCpDpPp};
      for (const auto& [kind, theirs] :
           {std::pair{GroupKind::kTensor, GridGroup::kTensor}, std::pair{GroupKind::kContext, GridGroup::kContext},
            std::pair{GroupKind::kDataContext, GridGroup::kDataContext}}) {
        std::vector<std::vector<int>> expected;
        for (const std::vector<int>& g : grid_groups(shape, theirs)) {
          if (g.size() > 1) expected.push_back(g);
        }
        std::vector<std::vector<int>> mine;
        for (const auto& group : program->groups) {
          if (group.kind == kind) mine.push_back(group.members);
        }
        std::sort(mine.begin(), mine.end());
        std::sort(expected.begin(), expected.end());
        EXPECT_EQ(mine, expected) << name(grid) << " " << group_name(kind, grid);
      }
    }
  }
}

std::vector<std::vector<int>> groups_of(const WorldProgram& program, GroupKind kind) {
  std::vector<std::vector<int>> found;
  for (const auto& group : program.groups) {
    if (group.kind == kind) found.push_back(group.members);
  }
  return found;
}

// Megatron's expert RankGenerator by hand for world 8 = TP2 x DP2 x PP2 with EP2, ETP1: expert
// rank = etp + ETP (ep + EP (edp + EDP pp)) = ep + 2 edp + 4 pp (EDP = 8 / (1 x 2 x 2) = 2).
TEST(CollectiveOrder, ExpertGroupsFollowMegatronsRankGenerator) {
  const GridLayout grid{2, 1, 2, 2, 2, 1, false};
  absl::StatusOr<WorldProgram> program =
      collective_program(grid, make({ScheduleKind::kOneFOneB, 1, false}, 2, 2), even_model_layout(2, 2, {true}));
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(groups_of(*program, GroupKind::kExpertExchange),
            (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(groups_of(*program, GroupKind::kExpertData),
            (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  // The tied embedding's group: the first and the last stage of each (tp, dp) column.
  EXPECT_EQ(groups_of(*program, GroupKind::kEmbedding),
            (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // With --use-tp-pp-dp-mapping and ETP x EP = TP x CP: expert rank = etp + ep * 1 ... = ep + 2 (pp + 2 edp)
  // with ETP 2, EP 1: the exchange is the tensor group; dense rank = tp + 2 (pp + 2 dp).
  const GridLayout folded{2, 1, 2, 2, 1, 0, true};
  program =
      collective_program(folded, make({ScheduleKind::kOneFOneB, 1, false}, 2, 2), even_model_layout(2, 2, {true}));
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(groups_of(*program, GroupKind::kExpertExchange), groups_of(*program, GroupKind::kTensor));
  EXPECT_EQ(groups_of(*program, GroupKind::kExpertData),
            (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

int count(const WorldProgram& program, int rank, GroupKind kind, CallOp op) {
  int n = 0;
  for (const Event& e : program.ranks[static_cast<size_t>(rank)])
    n += e.kind == Event::Kind::kCall && e.call.group == kind && e.call.op == op;
  return n;
}

// The counts of calls, worked from the layout: PP2 x DP2 with EP2 (the exchange spans the two
// data-parallel replicas), 1F1B, m = 4, 2 layers per stage, every layer MoE.
TEST(CollectiveOrder, CallCountsFollowTheLayout) {
  const GridLayout grid{1, 1, 2, 2, 2, 0, false};
  ModelLayout model = even_model_layout(4, 2, {true});
  model.dispatcher = Dispatcher::kAllToAll;
  absl::StatusOr<WorldProgram> program =
      collective_program(grid, make({ScheduleKind::kOneFOneB, 1, false}, 2, 4), model);
  ASSERT_TRUE(program.ok()) << program.status();
  for (int rank = 0; rank < 4; ++rank) {
    // 4 microbatches x 2 layers, forward and backward: dispatch and combine once each per pass.
    EXPECT_EQ(count(*program, rank, GroupKind::kExpertExchange, CallOp::kExpertDispatch), 16);
    EXPECT_EQ(count(*program, rank, GroupKind::kExpertExchange, CallOp::kExpertCombine), 16);
    EXPECT_EQ(count(*program, rank, GroupKind::kExpertExchange, CallOp::kExpertCounts), 16);
    // EDP = 4 / (1 x 2 x 2) = 1: no expert bucket reduction; dense buckets overlapped, once per
    // group of the stage (2 layers + the embedding or the output layer).
    EXPECT_EQ(count(*program, rank, GroupKind::kExpertData, CallOp::kGradientReduce), 0);
    EXPECT_EQ(count(*program, rank, GroupKind::kDataContext, CallOp::kGradientReduce), 3);
    EXPECT_EQ(count(*program, rank, GroupKind::kEmbedding, CallOp::kEmbeddingSum), 1);
  }
  // ZeRO-2: every microbatch's buckets.
  model.reduction = GradientReduction::kEveryMicrobatch;
  program = collective_program(grid, make({ScheduleKind::kOneFOneB, 1, false}, 2, 4), model);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(count(*program, 0, GroupKind::kDataContext, CallOp::kGradientReduce), 12);
  // ZeRO-3: each group gathered before its forward and its backward, 4 microbatches: stage 0 has
  // the embedding and 2 layers (24 dense gathers); EDP 1 gathers no expert parameters.
  model.gather_parameters = true;
  program = collective_program(grid, make({ScheduleKind::kOneFOneB, 1, false}, 2, 4), model);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(count(*program, 0, GroupKind::kDataContext, CallOp::kParameterGather), 24);
  EXPECT_EQ(count(*program, 0, GroupKind::kExpertData, CallOp::kParameterGather), 0);
  // EP1 x DP2: the expert data group is the data group; 8 microbatch passes x 2 MoE layers.
  program = collective_program({1, 1, 2, 2, 1, 0, false}, make({ScheduleKind::kOneFOneB, 1, false}, 2, 4), model);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(count(*program, 0, GroupKind::kExpertData, CallOp::kParameterGather), 16);
  EXPECT_EQ(count(*program, 0, GroupKind::kExpertData, CallOp::kGradientReduce), 8);
  // The distributed optimizer's updated shards: after the step once per group (stage 0: embedding
  // and 2 layers), or before each group's first forward; expert shards over expert data (EDP 2).
  model.gather_parameters = false;
  model.updated_shards = UpdatedShards::kAfterStep;
  program = collective_program({1, 1, 2, 2, 1, 0, false}, make({ScheduleKind::kOneFOneB, 1, false}, 2, 4), model);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(count(*program, 0, GroupKind::kDataContext, CallOp::kParameterGather), 3);
  EXPECT_EQ(count(*program, 0, GroupKind::kExpertData, CallOp::kParameterGather), 2);
  EXPECT_EQ(program->ranks[0].back().call.op, CallOp::kParameterGather);
  model.updated_shards = UpdatedShards::kInFirstForward;
  program = collective_program({1, 1, 2, 2, 1, 0, false}, make({ScheduleKind::kOneFOneB, 1, false}, 2, 4), model);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(count(*program, 0, GroupKind::kDataContext, CallOp::kParameterGather), 3);
  EXPECT_EQ(program->ranks[0].front().call.op, CallOp::kParameterGather);
  // Megatron's DDP: one bucket per chunk past the first pipeline rank (overlapped: once a step).
  model = even_model_layout(4, 2, {true});
  model.chunk_buckets_after_first_rank = true;
  program = collective_program({1, 1, 2, 2, 1, 0, false}, make({ScheduleKind::kOneFOneB, 1, false}, 2, 4), model);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(count(*program, 0, GroupKind::kDataContext, CallOp::kGradientReduce), 3);  // stage 0: per group
  EXPECT_EQ(count(*program, 2, GroupKind::kDataContext, CallOp::kGradientReduce), 1);  // stage 1: its chunk
  EXPECT_EQ(count(*program, 2, GroupKind::kExpertData, CallOp::kGradientReduce), 1);
}

// Index of rank r's n-th call matching `pred`.
template <typename Pred>
size_t find_call(const WorldProgram& program, int rank, int n, Pred pred) {
  const std::vector<Event>& events = program.ranks[static_cast<size_t>(rank)];
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].kind == Event::Kind::kCall && pred(events[i].call) && n-- == 0) return i;
  }
  ADD_FAILURE() << "no such call on rank " << rank;
  return 0;
}

WorldProgram ep2_dp2_pp2(const ModelLayout& model) {
  absl::StatusOr<WorldProgram> program =
      collective_program({1, 1, 2, 2, 2, 0, false}, make({ScheduleKind::kOneFOneB, 1, false}, 2, 4), model);
  EXPECT_TRUE(program.ok()) << program.status();
  return *std::move(program);
}

// A rank that runs its MoE layers' exchanges in another order (two layers' dispatches swapped) is
// named with its group, its world ranks and both orders.
TEST(CollectiveOrder, CatchesADivergenceInsideAGroup) {
  WorldProgram program = ep2_dp2_pp2(even_model_layout(4, 2, {true}));
  ASSERT_TRUE(check_group_orders(program).ok());
  auto dispatch = [](const Call& c) { return c.op == CallOp::kExpertDispatch; };
  const size_t a = find_call(program, 1, 0, dispatch), b = find_call(program, 1, 1, dispatch);
  std::swap(program.ranks[1][a], program.ranks[1][b]);
  const absl::Status status = check_group_orders(program);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(),
              HasSubstr("group 'expert-tensor-and-model-parallel' (world ranks [0,1]) diverges at its call 1"));
  EXPECT_THAT(status.message(),
              HasSubstr("world rank 0 issues expert dispatch mb0 c0 L0 on expert-tensor-and-model-parallel "
                        "where world rank 1 issues expert dispatch mb0 c0 L1"));
  EXPECT_THAT(status.message(), HasSubstr("world rank 0's order: expert counts mb0 c0 L0"));
  EXPECT_THAT(status.message(), HasSubstr("| world rank 1's order: expert counts mb0 c0 L0"));
}

// Megatron-LM #5749: one rank starts a dense bucket's reduce-scatter before the expert all-to-all
// its peer runs first. Per group the orders agree, so only the wait simulation sees it: with every
// collective blocking the two ranks wait on each other; with the reduction started asynchronously
// (this program's NCCL and MPI groups) nobody waits at the start.
TEST(CollectiveOrder, CatchesTheAllToAllReduceScatterSwap) {
  WorldProgram program = ep2_dp2_pp2(even_model_layout(4, 2, {true}));
  // Rank 0 (stage 0, its last backward): layer 1's dense bucket, then layer 0's combine gradient.
  const std::vector<Event>& events = program.ranks[0];
  const size_t reduce = find_call(program, 0, 0, [](const Call& c) { return c.op == CallOp::kGradientReduce; });
  ASSERT_LT(reduce + 1, events.size());
  ASSERT_EQ(events[reduce + 1].call.op, CallOp::kExpertCombine);
  std::swap(program.ranks[0][reduce], program.ranks[0][reduce + 1]);
  EXPECT_TRUE(check_group_orders(program).ok());
  EXPECT_TRUE(check_no_wait_cycle(program, WaitModel::kProgram).ok());
  const absl::Status status = check_no_wait_cycle(program, WaitModel::kStrict);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("collective deadlock (every collective blocking): world rank 0 waits in "
                                          "expert combine mb3 c0 L0 on 'expert-tensor-and-model-parallel' "
                                          "(world ranks [0,1]) while world rank 1 waits in gradient reduce "
                                          "(dense bucket) mb3 c0 L1 on 'data-parallel' (world ranks [0,1])"));
}

// Two blocking collectives of different groups swapped on one rank (the router's TP gather and the
// expert dispatch, TP2 x EP2 x ETP2): a cycle even as the program runs.
TEST(CollectiveOrder, CatchesACrossGroupCycle) {
  absl::StatusOr<WorldProgram> made = collective_program(
      {2, 1, 2, 1, 2, 0, false}, make({ScheduleKind::kOneFOneB, 1, false}, 1, 2), even_model_layout(2, 1, {true}));
  ASSERT_TRUE(made.ok()) << made.status();
  WorldProgram& program = *made;
  ASSERT_TRUE(check_no_wait_cycle(program, WaitModel::kProgram).ok());
  const size_t router = find_call(program, 0, 0, [](const Call& c) { return c.op == CallOp::kTensorRouter; });
  ASSERT_EQ(program.ranks[0][router + 1].call.op, CallOp::kExpertCounts);
  std::swap(program.ranks[0][router], program.ranks[0][router + 1]);
  EXPECT_TRUE(check_group_orders(program).ok());
  const absl::Status status = check_no_wait_cycle(program, WaitModel::kProgram);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(),
              HasSubstr("collective deadlock: world rank 0 waits in expert counts mb0 c0 L0 on "
                        "'expert-tensor-and-model-parallel' (world ranks [0,1,2,3]) while world rank 1 "
                        "waits in tensor router mb0 c0 L0 on 'tensor-parallel' (world ranks [0,1])"));
}

TEST(CollectiveOrder, RefusesBadLayouts) {
  const Schedule schedule = make({ScheduleKind::kOneFOneB, 1, false}, 2, 2);
  const ModelLayout model = even_model_layout(2, 2, {true});
  absl::StatusOr<WorldProgram> program = collective_program({1, 1, 3, 2, 2, 0, false}, schedule, model);
  ASSERT_FALSE(program.ok());
  EXPECT_EQ(program.status().message(), "collective order: ETP 1 x EP 2 x PP 2 does not divide the world of 6");
  program = collective_program({1, 1, 4, 2, 2, 0, true}, schedule, model);
  ASSERT_FALSE(program.ok());
  EXPECT_THAT(program.status().message(), HasSubstr("puts world rank 1 on pipeline stage 0 and the dense grid"));
  program = collective_program({1, 1, 2, 2, 1, 0, false}, schedule, even_model_layout(2, 1, {true}));
  EXPECT_EQ(program.status().message(), "collective order: 1 stage layouts for 2 x 1 virtual stages");
}

}  // namespace
}  // namespace gpt::pipeline

// --pipeline-schedule auto (train/schedule_choice.h): the choice is the simulator's fastest among
// the schedules whose memory plan fits, checked against the makespans the schedules' formulas give
// with uniform costs; the FLOP costs add up to Megatron's model FLOPs; the memory budget and the
// layout decide the candidates.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/config.h"
#include "train/args/arguments.h"
#include "train/report/flops.h"
#include "train/schedule_choice.h"
#include "train/configs.h"

namespace gpt {
namespace {

using pipeline::ScheduleKind;

std::vector<std::string> flags(int pipeline, int layers, int global_batch, const std::vector<std::string>& more = {}) {
  std::vector<std::string> f = {"pretrain_gpt", "--mock-data", "--vocab-size", "250", "--num-layers",
                                std::to_string(layers), "--hidden-size", "64", "--num-attention-heads", "4",
                                "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "2",
                                "--global-batch-size", std::to_string(global_batch), "--train-iters", "5", "--lr",
                                "1e-3", "--pipeline-model-parallel-size", std::to_string(pipeline),
                                "--pipeline-schedule", "auto"};
  f.insert(f.end(), more.begin(), more.end());
  return f;
}

Arguments validated(const std::vector<std::string>& f, int64_t world) {
  absl::StatusOr<Arguments> args = parse_arguments(f);
  EXPECT_TRUE(args.ok()) << args.status();
  EXPECT_TRUE(prepare_arguments(*args).ok());
  const absl::Status status = prepare_for_world(*args, world);
  EXPECT_TRUE(status.ok()) << status;
  return *args;
}

// F = B = W = 1 on every virtual stage.
StageCosts uniform(int stages) {
  return {std::vector<double>(static_cast<size_t>(stages), 1.0), std::vector<double>(static_cast<size_t>(stages), 1.0),
          std::vector<double>(static_cast<size_t>(stages), 1.0), "uniform"};
}

const ScheduleCandidate& candidate(const ScheduleChoice& choice, ScheduleKind kind) {
  for (const ScheduleCandidate& c : choice.candidates) {
    if (c.kind == kind) return c;
  }
  ADD_FAILURE() << "no candidate " << pipeline::to_string(kind);
  return choice.candidates.front();
}

TEST(ScheduleChoice, PicksTheFastestAsTheFormulasSay) {
  // PP4, 8 microbatches, one chunk per rank, F = B = W = 1: 1F1B takes (m + p - 1)(F + B + W) = 33,
  // ZB-H1 3m + (p - 1)(F + B - W) = 27 (Qi et al.).
  const Arguments one_chunk = validated(flags(4, 8, 16), 4);
  absl::StatusOr<ScheduleChoice> choice = choose_schedule(one_chunk, 4, 250, uniform(4), {});
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_EQ(choice->candidates.size(), 2u);
  EXPECT_EQ(choice->candidates.front().kind, ScheduleKind::kOneFOneB) << "Megatron's first";
  EXPECT_DOUBLE_EQ(candidate(*choice, ScheduleKind::kOneFOneB).makespan, 33.0);
  EXPECT_DOUBLE_EQ(candidate(*choice, ScheduleKind::kZeroBubbleH1).makespan, 27.0);
  EXPECT_EQ(choice->kind, ScheduleKind::kZeroBubbleH1);
  EXPECT_NE(choice->explanation.find("zb-h1, the fastest simulated schedule whose memory plan fits"),
            std::string::npos)
      << choice->explanation;

  // Two one-layer chunks per rank, F = B = W = 1 per chunk (6m = 48 units per rank): the
  // interleaved schedule's bubble (p - 1)/(v m) gives 48 (1 + 3/16) = 57, ZB-V's (p - 1)/(6m)
  // 48 (1 + 3/48) = 51.
  const Arguments two_chunks = validated(flags(4, 8, 16, {"--num-layers-per-virtual-pipeline-stage", "1"}), 4);
  choice = choose_schedule(two_chunks, 4, 250, uniform(8), {});
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_EQ(choice->candidates.size(), 2u);
  EXPECT_EQ(choice->candidates.front().kind, ScheduleKind::kInterleaved);
  EXPECT_DOUBLE_EQ(candidate(*choice, ScheduleKind::kInterleaved).makespan, 57.0);
  EXPECT_DOUBLE_EQ(candidate(*choice, ScheduleKind::kZeroBubbleV).makespan, 51.0);
  EXPECT_EQ(choice->kind, ScheduleKind::kZeroBubbleV);

  // Where W costs nothing there is no bubble to fill, and ZB-H1's order (its B passes held back
  // for W passes that take no time) is slower than 1F1B: the simulator says so and 1F1B is chosen.
  StageCosts no_weight = uniform(4);
  no_weight.weight.assign(4, 0.0);
  no_weight.backward_input.assign(4, 2.0);
  choice = choose_schedule(one_chunk, 4, 250, no_weight, {});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_DOUBLE_EQ(candidate(*choice, ScheduleKind::kOneFOneB).makespan, 33.0);
  EXPECT_GT(candidate(*choice, ScheduleKind::kZeroBubbleH1).makespan, 33.0);
  EXPECT_EQ(choice->kind, ScheduleKind::kOneFOneB);
}

TEST(ScheduleChoice, OnlyWhatFitsTheMemoryPlan) {
  const Arguments args = validated(flags(4, 8, 16), 4);
  absl::StatusOr<ScheduleChoice> unlimited = choose_schedule(args, 4, 250, uniform(4), {});
  ASSERT_TRUE(unlimited.ok()) << unlimited.status();
  const int64_t one_f_one_b = candidate(*unlimited, ScheduleKind::kOneFOneB).memory_bytes;
  const int64_t zero_bubble = candidate(*unlimited, ScheduleKind::kZeroBubbleH1).memory_bytes;
  ASSERT_GT(zero_bubble, one_f_one_b) << "ZB-H1 holds more on the later stages (its W leases)";
  // Host memory for 1F1B's plan and not ZB-H1's: the slower schedule that fits.
  MemoryBudget budget;
  budget.host_bytes = one_f_one_b;
  absl::StatusOr<ScheduleChoice> tight = choose_schedule(args, 4, 250, uniform(4), budget);
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_EQ(tight->kind, ScheduleKind::kOneFOneB);
  EXPECT_FALSE(candidate(*tight, ScheduleKind::kZeroBubbleH1).fits);
  EXPECT_NE(candidate(*tight, ScheduleKind::kZeroBubbleH1).refusal.find("does not fit in host memory"),
            std::string::npos);
  // Nothing fits: Megatron's schedule, which the launcher's memory check then refuses.
  budget.host_bytes = one_f_one_b - 1;
  tight = choose_schedule(args, 4, 250, uniform(4), budget);
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_EQ(tight->kind, ScheduleKind::kOneFOneB);
  EXPECT_NE(tight->explanation.find("no schedule's memory plan fits"), std::string::npos) << tight->explanation;
}

TEST(ScheduleChoice, CandidatesFollowTheLayout) {
  // 6 microbatches at PP4 with two chunks: the interleaved schedule cannot run them, ZB-V can.
  absl::StatusOr<ScheduleChoice> choice = choose_schedule(
      validated(flags(4, 8, 12, {"--num-virtual-stages-per-pipeline-rank", "2"}), 4), 4, 250, uniform(8), {});
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_EQ(choice->candidates.size(), 1u);
  EXPECT_EQ(choice->kind, ScheduleKind::kZeroBubbleV);
  // Without pipeline parallelism there is nothing to choose.
  choice = choose_schedule(validated(flags(1, 2, 8), 1), 1, 250, uniform(1), {});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->kind, ScheduleKind::kOneFOneB);
  EXPECT_NE(choice->explanation.find("the only schedule"), std::string::npos);
  // Costs of another layout are refused.
  EXPECT_FALSE(choose_schedule(validated(flags(4, 8, 64), 4), 4, 250, uniform(8), {}).ok());
}

TEST(ScheduleChoice, FlopCostsAddUpToMegatronsModelFlops) {
  // F + B + W over the stages, times the microbatches of the global batch, is Megatron's
  // 3 x forward count (no recompute), and W is the weight GEMMs' share of the backward.
  for (const std::vector<std::string>& more :
       {std::vector<std::string>{}, std::vector<std::string>{"--num-layers-per-virtual-pipeline-stage", "1"},
        std::vector<std::string>{"--swiglu", "--group-query-attention", "--num-query-groups", "2"}}) {
    const Arguments args = validated(flags(4, 8, 64, more), 4);
    const StageCosts costs = stage_costs_from_flops(args, 250);
    double total = 0;
    for (size_t k = 0; k < costs.forward.size(); ++k) {
      total += costs.forward[k] + costs.backward_input[k] + costs.weight[k];
      EXPECT_NEAR(costs.backward_input[k] + costs.weight[k], 2 * costs.forward[k], 1e-6 * costs.forward[k]);
      EXPECT_LT(costs.weight[k], costs.forward[k]) << "the attention scores have no weights";
    }
    const double microbatches = static_cast<double>(args.global_batch_size / args.micro_batch_size);
    const ModelConfig config = model_config_from(args);
    ModelConfig padded = config;
    padded.padded_vocab_size = *checked_padded_vocab_size(args, 250);
    EXPECT_NEAR(total * microbatches, model_flops_per_iteration(padded, args.global_batch_size),
                1e-9 * total * microbatches);
  }
  // Full uniform recompute (groups of one layer) runs every layer's forward again in its B.
  const Arguments plain = validated(flags(4, 8, 16), 4);
  const Arguments recompute = validated(
      flags(4, 8, 16, {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"}),
      4);
  const StageCosts a = stage_costs_from_flops(plain, 250), b = stage_costs_from_flops(recompute, 250);
  EXPECT_NEAR(b.backward_input[1] - a.backward_input[1], a.forward[1], 1e-6 * a.forward[1]);
  EXPECT_EQ(b.weight[1], a.weight[1]);
}

}  // namespace
}  // namespace gpt

// Regression tests for issue 16 in pretrain_gpt's arguments: strict numeric flags (no octal, no
// clamp, no inf / nan), derived counts in checked arithmetic, and the memory plan that refuses a
// layout too large for the machine before anything is allocated.
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "model/activation_memory.h"
#include "support/trainer_support.h"
#include "train/args/arguments.h"
#include "train/configs.h"
#include "train/memory_plan.h"
#include "train/trainer.h"

namespace gpt {
namespace {

std::vector<std::string> base_flags() {
  return {"pretrain_gpt", "--mock-data", "--vocab-size", "512", "--num-layers", "2", "--hidden-size", "64",
          "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
          "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "10", "--lr", "1e-3"};
}

// The base flags with `flag` set to `value` (replaced or appended; an empty value appends a switch).
std::vector<std::string> with(std::vector<std::string> flags, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < flags.size(); ++i) {
    if (flags[i] == flag) {
      flags[i + 1] = value;
      return flags;
    }
  }
  flags.push_back(flag);
  if (!value.empty()) flags.push_back(value);
  return flags;
}

absl::StatusOr<Arguments> validated(const std::vector<std::string>& flags, int64_t world_size = 1) {
  GPT_ASSIGN_OR_RETURN(Arguments args, parse_arguments(flags));
  GPT_RETURN_IF_ERROR(prepare_arguments(args));
  GPT_RETURN_IF_ERROR(prepare_for_world(args, world_size));
  return args;
}

std::string error_of(const std::vector<std::string>& flags, int64_t world_size = 1) {
  return std::string(validated(flags, world_size).status().message());
}

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

// The plan for a command line, with the vocabulary the launcher uses.
absl::StatusOr<MemoryPlan> plan_of(const std::vector<std::string>& flags, int64_t world_size = 1) {
  GPT_ASSIGN_OR_RETURN(Arguments args, validated(flags, world_size));
  return plan_memory(args, world_size, vocabulary_before_data(args));
}

// plan + check against a machine with 16 GiB and no GPU.
std::string fit_error(const std::vector<std::string>& flags, int64_t world_size = 1) {
  absl::StatusOr<Arguments> args = validated(flags, world_size);
  if (!args.ok()) return std::string(args.status().message());
  absl::StatusOr<MemoryPlan> plan = plan_memory(*args, world_size, vocabulary_before_data(*args));
  if (!plan.ok()) return std::string(plan.status().message());
  MemoryBudget budget;
  budget.host_bytes = int64_t{16} << 30;
  return std::string(check_memory_plan(*plan, *args, budget).message());
}

TEST(NumericFlags, LeadingZerosAreDecimalNotOctal) {
  absl::StatusOr<Arguments> args = validated(with(with(base_flags(), "--train-iters", "010"), "--seed", "0042"));
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->train_iters, 10);
  EXPECT_EQ(args->seed, 42);
}

TEST(NumericFlags, OverflowIsRefusedNotClamped) {
  EXPECT_TRUE(contains(error_of(with(base_flags(), "--train-iters", "99999999999999999999")), "--train-iters"));
  EXPECT_TRUE(contains(error_of(with(base_flags(), "--seed", "-99999999999999999999")), "--seed"));
  EXPECT_TRUE(contains(error_of(with(base_flags(), "--hidden-size", "0x40")), "--hidden-size"));
  EXPECT_TRUE(contains(error_of(with(base_flags(), "--num-layers", "")), "--num-layers"));
}

TEST(NumericFlags, InfNanAndBeyondFp32AreRefused) {
  for (const char* flag : {"--lr", "--init-method-std", "--weight-decay", "--adam-eps", "--norm-epsilon", "--min-lr",
                           "--clip-grad", "--adam-beta1", "--adam-beta2"}) {
    for (const char* value : {"inf", "-inf", "nan", "1e400", "0x1p3"}) {
      EXPECT_TRUE(contains(error_of(with(base_flags(), flag, value)), flag)) << flag << " " << value;
    }
  }
  for (const char* flag : {"--lr", "--init-method-std", "--weight-decay", "--adam-eps", "--norm-epsilon"}) {
    EXPECT_TRUE(contains(error_of(with(base_flags(), flag, "1e39")), flag)) << flag;
  }
  EXPECT_TRUE(contains(error_of(with(base_flags(), "--adam-eps", "1e-50")), "--adam-eps"));  // 0 in FP32
  EXPECT_TRUE(contains(error_of(with(base_flags(), "--distributed-timeout-minutes", "inf")),
                       "--distributed-timeout-minutes"));
}

TEST(DerivedCounts, ProductsThatOverflowNameTheirFlags) {
  EXPECT_TRUE(contains(error_of(with(base_flags(), "--train-iters", "4611686018427387904")), "--train-iters"));
  EXPECT_TRUE(contains(error_of(with(with(base_flags(), "--train-iters", "100000000000000000"), "--seq-length", "32")),
                       "overflows"));
  EXPECT_TRUE(contains(
      error_of(with(with(base_flags(), "--make-vocab-size-divisible-by", "9223372036854775807"),
                    "--tensor-model-parallel-size", "2"),
               2),
      "--make-vocab-size-divisible-by"));
  // 2^62 itself fits (a padded vocabulary of 2^62), so validation passes; the memory plan refuses it.
  EXPECT_EQ(error_of(with(base_flags(), "--make-vocab-size-divisible-by", "4611686018427387904")), "");
  EXPECT_TRUE(contains(error_of(with(base_flags(), "--hidden-size", "4611686018427387904")), "--hidden-size"));
  EXPECT_TRUE(contains(error_of(with(with(base_flags(), "--eval-iters", "4611686018427387904"), "--eval-interval", "1")),
                       "--eval-iters"));
}

TEST(MemoryPlan, ParametersMatchTheModelExactly) {
  for (const std::vector<std::string>& flags :
       {base_flags(), with(base_flags(), "--bf16", ""), with(base_flags(), "--untie-embeddings-and-output-weights", ""),
        with(with(base_flags(), "--ffn-hidden-size", "96"), "--kv-channels", "8"),
        // Llama-style: no position table, RMSNorm without bias, SwiGLU's double fc1, GQA's
        // narrower QKV, no linear biases.
        with(with(with(with(with(with(with(base_flags(), "--position-embedding-type", "rope"), "--normalization",
                                      "RMSNorm"),
                                 "--swiglu", ""),
                            "--group-query-attention", ""),
                       "--num-query-groups", "2"),
                  "--disable-bias-linear", ""),
             "--untie-embeddings-and-output-weights", "")}) {
    absl::StatusOr<MemoryPlan> plan = plan_of(flags);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::unique_ptr<ProcessGrid> grid;
    std::unique_ptr<Trainer> trainer = testing_support::make_trainer(flags, grid);
    ASSERT_NE(trainer, nullptr);
    const int64_t bytes_per_element = trainer->config().dtype == DType::kBFloat16 ? 2 : 4;
    EXPECT_EQ(plan->parameters, trainer->parameters_on_rank() * bytes_per_element);
    EXPECT_EQ(plan->gradients, trainer->parameters_on_rank() * 4);
    EXPECT_EQ(plan->optimizer_state, trainer->parameters_on_rank() * (bytes_per_element == 2 ? 12 : 8));
    EXPECT_EQ(plan->data_indices > 0, true);  // the schedules
  }
}

// The planner's exact figures are what a trainer of the same flags allocates, item by item (the
// trainer checks its own allocation against the same function at start-up; this closes the loop
// from the flags, before anything is built).
// ZB-H1 keeps every stage's slots until the deferred weight gradients run, and their leases: the
// worst stage (the last, with the LM head's lease) needs more than under 1F1B, and the closed form
// (the lower bound that decides for large layouts) counts the last stage's extra slots.
TEST(MemoryPlan, ZeroBubbleCostsTheLaterStagesMore) {
  const std::vector<std::string> pp4 =
      with(with(with(base_flags(), "--num-layers", "8"), "--pipeline-model-parallel-size", "4"), "--global-batch-size",
           "16");
  absl::StatusOr<MemoryPlan> one_f_one_b = plan_of(pp4, 4);
  absl::StatusOr<MemoryPlan> zero_bubble = plan_of(with(pp4, "--pipeline-schedule", "zb-h1"), 4);
  ASSERT_TRUE(one_f_one_b.ok()) << one_f_one_b.status();
  ASSERT_TRUE(zero_bubble.ok()) << zero_bubble.status();
  ASSERT_TRUE(one_f_one_b->allocated.has_value() && zero_bubble->allocated.has_value());
  EXPECT_GT(zero_bubble->allocated->activations, one_f_one_b->allocated->activations);
  EXPECT_GE(zero_bubble->activations, one_f_one_b->activations);
  EXPECT_LE(zero_bubble->activations, zero_bubble->allocated->activations);
}

// The closed form bounds the exact plan from below under sequence parallelism (each layer's stash
// holds its sequence-split rows) and under the interleaved schedule, whose stash slots it takes
// from the schedule (its warm-up: more than min(m, PP) + v - 1 on the first stage).
TEST(MemoryPlan, ClosedFormBoundsSequenceParallelAndInterleavedLayouts) {
  const std::vector<std::string> tp2 = with(with(base_flags(), "--tensor-model-parallel-size", "2"), "--sequence-parallel", "");
  const std::vector<std::string> interleaved =
      with(with(with(with(base_flags(), "--num-layers", "8"), "--pipeline-model-parallel-size", "2"),
                "--global-batch-size", "16"),
           "--num-virtual-stages-per-pipeline-rank", "2");
  for (const std::vector<std::string>& flags :
       {tp2, with(tp2, "--recompute-activations", ""),
        with(with(with(tp2, "--recompute-granularity", "full"), "--recompute-method", "uniform"),
             "--recompute-num-layers", "1"),
        interleaved}) {
    SCOPED_TRACE(absl::StrJoin(flags, " "));
    absl::StatusOr<MemoryPlan> plan = plan_of(flags, 2);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->allocated.has_value());
    EXPECT_LE(plan->activations, plan->allocated->activations);
    const int64_t closed = plan->parameters + plan->gradients + plan->optimizer_state + plan->activations;
    EXPECT_LE(closed, plan->allocated->total());
  }
}

// ZB-V puts the embedding, the tied head and the logits on the first stage (one word embedding, no
// copy on the last stage): the closed form bounds the exact plan from below with them there, and
// the exact plan is what the trainer allocates on each stage (it checks that at start-up).
TEST(MemoryPlan, ZeroBubbleVHoldsTheHeadOnTheFirstStage) {
  const std::vector<std::string> pp4 =
      with(with(with(with(base_flags(), "--num-layers", "8"), "--pipeline-model-parallel-size", "4"),
                "--global-batch-size", "16"),
           "--num-virtual-stages-per-pipeline-rank", "2");
  for (const std::vector<std::string>& flags :
       {with(pp4, "--pipeline-schedule", "zb-v"),
        with(with(pp4, "--pipeline-schedule", "zb-v"), "--untie-embeddings-and-output-weights", "")}) {
    SCOPED_TRACE(absl::StrJoin(flags, " "));
    absl::StatusOr<MemoryPlan> interleaved = plan_of(pp4, 4);
    absl::StatusOr<MemoryPlan> v = plan_of(flags, 4);
    ASSERT_TRUE(interleaved.ok()) << interleaved.status();
    ASSERT_TRUE(v.ok()) << v.status();
    ASSERT_TRUE(v->allocated.has_value() && interleaved->allocated.has_value());
    EXPECT_LE(v->activations, v->allocated->activations);
    EXPECT_LE(v->parameters, v->allocated->parameters);
    const int64_t closed = v->parameters + v->gradients + v->optimizer_state + v->activations;
    EXPECT_LE(closed, v->allocated->total());
  }
}

TEST(MemoryPlan, ExactPlanIsTheTrainersAllocation) {
  const std::vector<std::vector<std::string>> layouts = {
      base_flags(),
      with(base_flags(), "--bf16", ""),
      with(base_flags(), "--untie-embeddings-and-output-weights", ""),
      with(base_flags(), "--recompute-activations", ""),
      with(with(with(base_flags(), "--recompute-granularity", "full"), "--recompute-method", "uniform"),
           "--recompute-num-layers", "1"),
      with(with(base_flags(), "--use-distributed-optimizer", ""), "--overlap-grad-reduce", ""),
      with(with(with(with(with(with(base_flags(), "--position-embedding-type", "rope"), "--normalization", "RMSNorm"),
                          "--swiglu", ""),
                     "--group-query-attention", ""),
                "--num-query-groups", "2"),
           "--disable-bias-linear", "")};
  for (const std::vector<std::string>& flags : layouts) {
    SCOPED_TRACE(absl::StrJoin(flags, " "));
    absl::StatusOr<MemoryPlan> plan = plan_of(flags);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->allocated.has_value());
    std::unique_ptr<ProcessGrid> grid;
    std::unique_ptr<Trainer> trainer = testing_support::make_trainer(flags, grid);
    ASSERT_NE(trainer, nullptr);
    const RankMemory& allocated = trainer->allocated_memory();
    EXPECT_EQ(plan->allocated->parameters, allocated.parameters);
    EXPECT_EQ(plan->allocated->gradients, allocated.gradients);
    EXPECT_EQ(plan->allocated->optimizer_state, allocated.optimizer_state);
    EXPECT_EQ(plan->allocated->activations, allocated.activations);
    EXPECT_EQ(plan->allocated->data_parallel_buffers, allocated.data_parallel_buffers);
    // The closed form stays a lower bound of it.
    EXPECT_LE(plan->parameters, allocated.parameters);
    EXPECT_LE(plan->activations, allocated.activations);
  }
}

// Context parallelism: a rank holds S / CP rows, so its layers' activations are those of a CP-times
// shorter sequence (the workspace gains the ring's and all-to-all's scratch); the closed form stays
// a lower bound of the exact plan, and the distributed optimizer shards over data x context.
TEST(MemoryPlan, ContextParallelSplitsTheActivations) {
  const std::vector<std::string> long_sequence =
      with(with(with(base_flags(), "--seq-length", "1024"), "--max-position-embeddings", "1024"), "--global-batch-size",
           "2");
  absl::StatusOr<MemoryPlan> one = plan_of(long_sequence, 1);
  absl::StatusOr<MemoryPlan> four = plan_of(with(long_sequence, "--context-parallel-size", "4"), 4);
  absl::StatusOr<MemoryPlan> four_zero =
      plan_of(with(with(long_sequence, "--context-parallel-size", "4"), "--use-distributed-optimizer", ""), 4);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(four.ok()) << four.status();
  ASSERT_TRUE(four_zero.ok()) << four_zero.status();
  ASSERT_TRUE(one->allocated.has_value() && four->allocated.has_value());
  EXPECT_LT(four->activations, one->activations / 3);
  EXPECT_LT(four->allocated->activations, one->allocated->activations / 2);
  EXPECT_LE(four->activations, four->allocated->activations);
  EXPECT_EQ(four->parameters, one->parameters);  // CP splits no parameter
  EXPECT_LT(four_zero->optimizer_state, four->optimizer_state / 3);  // shards over DP 1 x CP 4
}

TEST(MemoryPlan, AllToAllRingAddsTheRingsBlocks) {
  // a2a+p2p [2, 2] at CP 4: the chunk's workspace holds, beside a2a's buffers, the level-1 ring's
  // four K/V blocks: [s b, groups_l 2d] each, s = 1024 / 4 rows, b = 2, 4 groups of d = 16 (FP32).
  const std::vector<std::string> cp4 =
      with(with(with(with(base_flags(), "--seq-length", "1024"), "--max-position-embeddings", "1024"),
                "--global-batch-size", "2"),
           "--context-parallel-size", "4");
  absl::StatusOr<MemoryPlan> a2a = plan_of(with(cp4, "--cp-comm-type", "a2a"), 4);
  absl::StatusOr<MemoryPlan> levels =
      plan_of(with(with(cp4, "--cp-comm-type", "a2a+p2p"), "--hierarchical-context-parallel-sizes", "2 2"), 4);
  ASSERT_TRUE(a2a.ok()) << a2a.status();
  ASSERT_TRUE(levels.ok()) << levels.status();
  ASSERT_TRUE(a2a->allocated.has_value() && levels->allocated.has_value());
  const int64_t block_bytes = Arena::aligned_bytes(DType::kFloat32, Shape{256 * 2, 4 * 2 * 16});
  EXPECT_EQ(block_bytes, 256 * 2 * 4 * 2 * 16 * 4);
  EXPECT_EQ(levels->allocated->activations - a2a->allocated->activations, 4 * block_bytes);
  // The closed form evaluates the same workspace list.
  EXPECT_EQ(levels->activations - a2a->activations, 4 * block_bytes);
}

TEST(MemoryPlan, ActivationsAreAtLeastTheModelsStash) {
  for (const std::vector<std::string>& flags :
       {base_flags(), with(base_flags(), "--recompute-activations", ""), with(base_flags(), "--bf16", "")}) {
    absl::StatusOr<Arguments> args = validated(flags);
    ASSERT_TRUE(args.ok()) << args.status();
    absl::StatusOr<MemoryPlan> plan = plan_memory(*args, 1, args->vocab_size);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const ModelConfig config = model_config_from(*args);
    const ActivationMemory model = activation_memory(config, 1, false, args->micro_batch_size, args->num_layers);
    EXPECT_GE(plan->activations, model.total_bytes(1));
    EXPECT_LE(plan->activations, 8 * model.total_bytes(1)) << "the plan should stay close to the model's figures";
  }
}

TEST(MemoryPlan, ShardingDividesTheOptimizerState) {
  absl::StatusOr<MemoryPlan> one = plan_of(with(base_flags(), "--global-batch-size", "8"), 1);
  absl::StatusOr<MemoryPlan> zero =
      plan_of(with(with(base_flags(), "--global-batch-size", "8"), "--use-distributed-optimizer", ""), 4);
  ASSERT_TRUE(one.ok() && zero.ok());
  EXPECT_EQ(zero->parameters, one->parameters);
  EXPECT_LE(zero->optimizer_state * 4, one->optimizer_state + 4 * 8);
  absl::StatusOr<MemoryPlan> tp = plan_of(with(base_flags(), "--tensor-model-parallel-size", "2"), 2);
  ASSERT_TRUE(tp.ok()) << tp.status();
  EXPECT_LT(tp->parameters, one->parameters);
}

// ZeRO-2 divides the gradients too, and the exact plan adds its working buffers (more than a
// quarter of the gradients for this small model); offloading moves the optimizer state to the host
// pool.
TEST(MemoryPlan, ZeroTwoAndOffloadMoveGradientsAndOptimizerState) {
  // 8 layers: two units' working buffers (2 x 1.25 layers) are below the 3/4 of the gradients saved.
  const std::vector<std::string> batch = with(with(base_flags(), "--global-batch-size", "8"), "--num-layers", "8");
  const std::vector<std::string> zero2 =
      with(with(batch, "--use-megatron-fsdp", ""), "--data-parallel-sharding-strategy", "optim_grads");
  absl::StatusOr<MemoryPlan> one = plan_of(batch, 4);
  absl::StatusOr<MemoryPlan> two = plan_of(zero2, 4);
  absl::StatusOr<MemoryPlan> offloaded = plan_of(
      with(with(with(zero2, "--optimizer-cpu-offload", ""), "--use-precision-aware-optimizer", ""),
           "--optimizer-offload-fraction", "0.5"),
      4);
  ASSERT_TRUE(one.ok() && two.ok() && offloaded.ok());
  EXPECT_EQ(two->parameters, one->parameters);
  EXPECT_LE(two->gradients * 4, one->gradients + 4 * 4 * 128);  // the closed form: 1/DP, up to padding
  ASSERT_TRUE(one->allocated && two->allocated && offloaded->allocated);
  EXPECT_LT(two->allocated->gradients, one->allocated->gradients);
  EXPECT_GT(two->allocated->gradients * 4, one->allocated->gradients) << "the working buffers are missing";
  EXPECT_EQ(one->allocated->host_optimizer_state, 0);
  // Half the moments on the device (FP32: no master copy), up to alignment; on the host the
  // moments, the staged parameters and gradients: 16 bytes per offloaded element.
  EXPECT_NEAR(static_cast<double>(offloaded->allocated->optimizer_state) * 2,
              static_cast<double>(two->allocated->optimizer_state), 4096);
  EXPECT_NEAR(static_cast<double>(offloaded->allocated->host_optimizer_state),
              static_cast<double>(two->allocated->optimizer_state), 4096);
  EXPECT_EQ(offloaded->host_bytes(), offloaded->data_indices + offloaded->allocated->host_optimizer_state);
  EXPECT_EQ(offloaded->model_bytes(), offloaded->allocated->total());
}

TEST(MemoryPlan, HugeLayoutsAreRefusedQuicklyNamingBytesAndFlags) {
  const std::vector<std::vector<std::string>> hostile = {
      with(with(base_flags(), "--hidden-size", "2147483648"), "--num-attention-heads", "1"),
      with(base_flags(), "--vocab-size", "2147483648"),
      with(with(base_flags(), "--seq-length", "1000000000"), "--max-position-embeddings", "1000000000"),
      with(with(base_flags(), "--micro-batch-size", "1000000000"), "--global-batch-size", "1000000000"),
      with(with(base_flags(), "--num-layers", "100000000"), "--train-iters", "1"),
      with(with(base_flags(), "--micro-batch-size", "1"), "--global-batch-size", "1000000000"),
      with(base_flags(), "--max-position-embeddings", "4000000000"),
      with(base_flags(), "--ffn-hidden-size", "100000000000"),
      with(base_flags(), "--make-vocab-size-divisible-by", "4611686018427387904"),
  };
  for (const std::vector<std::string>& flags : hostile) {
    const auto start = std::chrono::steady_clock::now();
    const std::string message = fit_error(flags);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string shown = absl::StrJoin(flags, " ");
    EXPECT_LT(seconds, 1.0) << shown;
    ASSERT_FALSE(message.empty()) << "accepted: " << shown;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    const bool fits = message.find("does not fit") != std::string::npos;
    const bool overflows = message.find("overflows") != std::string::npos;
    EXPECT_TRUE(fits || overflows) << message;
    if (fits) {
      EXPECT_TRUE(contains(message, "bytes")) << message;
      EXPECT_TRUE(contains(message, "--num-layers")) << message;
      EXPECT_TRUE(contains(message, "but the node has 17179869184 bytes")) << message;
    }
  }
  EXPECT_EQ(fit_error(base_flags()), "");
}

TEST(MemoryPlan, GpuBudgetChecksDeviceAndHostSeparately) {
  absl::StatusOr<Arguments> args = validated(base_flags());
  ASSERT_TRUE(args.ok());
  absl::StatusOr<MemoryPlan> plan = plan_memory(*args, 1, args->vocab_size);
  ASSERT_TRUE(plan.ok());
  MemoryBudget gpu{.gpu = true, .device_bytes = plan->model_bytes(), .ranks_per_device = 1,
                   .host_bytes = plan->data_indices, .ranks_per_host = 1};
  EXPECT_TRUE(check_memory_plan(*plan, *args, gpu).ok());
  gpu.ranks_per_device = 2;  // two ranks on one GPU need twice the memory
  EXPECT_TRUE(contains(std::string(check_memory_plan(*plan, *args, gpu).message()), "GPU memory"));
  gpu.ranks_per_device = 1;
  gpu.host_bytes = plan->data_indices - 1;
  EXPECT_TRUE(contains(std::string(check_memory_plan(*plan, *args, gpu).message()), "host memory"));
  MemoryBudget unknown;  // nothing known: nothing refused
  EXPECT_TRUE(check_memory_plan(*plan, *args, unknown).ok());
}

TEST(MemoryPlan, GptVocabularyIsPlannedAsALowerBoundBeforeTheTokenizer) {
  Arguments args;
  args.mock_data = true;
  args.vocab_size = 512;
  EXPECT_EQ(vocabulary_before_data(args), 512);
  args.mock_data = false;
  args.tokenizer_type = "NullTokenizer";
  EXPECT_EQ(vocabulary_before_data(args), 513);  // ids [0, N) plus eod
  args.tokenizer_type = "GPT2BPETokenizer";
  EXPECT_EQ(vocabulary_before_data(args), 1);
}

}  // namespace
}  // namespace gpt

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "train/arguments.h"

namespace gpt {
namespace {

std::vector<std::string> base_flags() {
  return {"pretrain_gpt", "--mock-data", "--vocab-size", "512", "--num-layers", "2", "--hidden-size", "64",
          "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
          "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "5", "--lr", "1e-3"};
}

// Replaces the value of `flag` in the base flags (or appends flag and value).
std::vector<std::string> with(std::vector<std::string> flags, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i < flags.size(); ++i) {
    if (flags[i] == flag) {
      flags[i + 1] = value;
      return flags;
    }
  }
  flags.push_back(flag);
  if (!value.empty()) flags.push_back(value);
  return flags;
}

std::vector<std::string> without(std::vector<std::string> flags, const std::string& flag) {
  for (size_t i = 0; i < flags.size(); ++i) {
    if (flags[i] == flag) {
      const bool has_value = i + 1 < flags.size() && flags[i + 1].rfind("--", 0) != 0;
      flags.erase(flags.begin() + i, flags.begin() + i + (has_value ? 2 : 1));
      return flags;
    }
  }
  return flags;
}

// The error a command line produces (parse, validate, then the world-size checks), or "" if none.
std::string error_of(const std::vector<std::string>& flags, int64_t world_size = 1) {
  absl::StatusOr<Arguments> parsed = parse_arguments(flags);
  if (!parsed.ok()) return std::string(parsed.status().message());
  absl::Status status = validate_arguments(*parsed);
  if (status.ok()) status = validate_for_world(*parsed, world_size);
  return std::string(status.message());
}

TEST(Arguments, DefaultsFollowMegatron) {
  absl::StatusOr<Arguments> parsed = parse_arguments(without(base_flags(), "--global-batch-size"));
  ASSERT_TRUE(parsed.ok());
  Arguments& a = *parsed;
  ASSERT_TRUE(validate_arguments(a).ok());
  ASSERT_TRUE(validate_for_world(a, 1).ok());
  EXPECT_EQ(a.ffn_hidden_size, 256);
  EXPECT_EQ(a.kv_channels, 16);
  EXPECT_EQ(a.global_batch_size, 2);  // mbs x dp
  EXPECT_EQ(a.lr_decay_iters, 5);     // train iters
  EXPECT_EQ(a.seed, 1234);
  EXPECT_DOUBLE_EQ(a.clip_grad, 1.0);
  EXPECT_DOUBLE_EQ(a.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(a.adam_beta2, 0.999);
  EXPECT_DOUBLE_EQ(a.adam_eps, 1e-8);
  EXPECT_DOUBLE_EQ(a.init_method_std, 0.02);
  EXPECT_EQ(a.make_vocab_size_divisible_by, 128);
  EXPECT_EQ(a.distributed_timeout_minutes, 10);
  EXPECT_EQ(a.lr_decay_style, "linear");
  EXPECT_EQ(a.log_interval, 100);
  EXPECT_FALSE(a.bf16);
  EXPECT_DOUBLE_EQ(a.hidden_dropout, 0.1);
  EXPECT_DOUBLE_EQ(a.attention_dropout, 0.1);
  EXPECT_DOUBLE_EQ(a.rotary_percent, 1.0);
  EXPECT_DOUBLE_EQ(a.rotary_base, 10000);
  EXPECT_EQ(a.num_query_groups, 4);  // one per head without --group-query-attention
  EXPECT_EQ(error_of(base_flags()), "");
  EXPECT_EQ(num_microbatches(a, 1), 1);
}

TEST(Arguments, LlamaStyleFlags) {
  std::vector<std::string> flags = base_flags();
  for (const char* flag : {"--swiglu", "--group-query-attention", "--disable-bias-linear"}) flags.push_back(flag);
  for (const char* pair : {"--position-embedding-type=rope", "--normalization=RMSNorm", "--num-query-groups=2",
                           "--rotary-percent=0.5", "--rotary-base=500000"}) {
    flags.push_back(pair);
  }
  absl::StatusOr<Arguments> parsed = parse_arguments(flags);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  Arguments& a = *parsed;
  ASSERT_TRUE(validate_arguments(a).ok());
  // Megatron's SwiGLU default: int((4h * 2 / 3) / 64) * 64 = int(170.67 / 64) * 64 = 128 for h = 64.
  EXPECT_EQ(a.ffn_hidden_size, 128);
  EXPECT_EQ(a.num_query_groups, 2);
  EXPECT_EQ(a.position_embedding_type, "rope");
  EXPECT_DOUBLE_EQ(a.rotary_base, 500000);
  // h = 4096: int(10922.67 / 64) * 64 = 10880 (Llama-2 7B uses 11008, given explicitly).
  parsed = parse_arguments(with(with(flags, "--hidden-size", "4096"), "--num-attention-heads", "32"));
  ASSERT_TRUE(parsed.ok());
  ASSERT_TRUE(validate_arguments(*parsed).ok());
  EXPECT_EQ(parsed->ffn_hidden_size, 10880);
  // --no-position-embedding turns learned absolute positions off.
  parsed = parse_arguments(with(base_flags(), "--no-position-embedding", ""));
  ASSERT_TRUE(parsed.ok());
  ASSERT_TRUE(validate_arguments(*parsed).ok());
  EXPECT_EQ(parsed->position_embedding_type, "none");
}

TEST(Arguments, AcceptsEqualsSyntaxAndHelp) {
  std::vector<std::string> flags = without(base_flags(), "--lr");
  flags.push_back("--lr=3e-4");
  absl::StatusOr<Arguments> parsed = parse_arguments(flags);
  ASSERT_TRUE(parsed.ok());
  EXPECT_DOUBLE_EQ(parsed->lr, 3e-4);
  absl::StatusOr<Arguments> help = parse_arguments(std::vector<std::string>{"pretrain_gpt", "--help"});
  ASSERT_TRUE(absl::IsCancelled(help.status()));
  EXPECT_NE(help.status().message().find("--tensor-model-parallel-size"), std::string::npos);
}

TEST(Arguments, RecomputeFlags) {
  auto parsed_valid = [](const std::vector<std::string>& flags, int64_t world_size = 1) {
    absl::StatusOr<Arguments> parsed = parse_arguments(flags);
    EXPECT_TRUE(parsed.ok());
    EXPECT_EQ(validate_arguments(*parsed).message(), "");
    EXPECT_EQ(validate_for_world(*parsed, world_size).message(), "");
    return *parsed;
  };
  const Arguments none = parsed_valid(base_flags());
  EXPECT_EQ(none.recompute_granularity, "");
  EXPECT_NE(describe_arguments(none).find("recompute_granularity ........................ None"), std::string::npos);
  // --recompute-activations is Megatron's shorthand for selective.
  EXPECT_EQ(parsed_valid(with(base_flags(), "--recompute-activations", "")).recompute_granularity, "selective");
  const Arguments block = parsed_valid(
      with(with(with(with(with(base_flags(), "--num-layers", "8"), "--pipeline-model-parallel-size", "2"),
                     "--recompute-granularity", "full"),
                "--recompute-method", "block"),
           "--recompute-num-layers", "4"),
      2);
  const std::string dump = describe_arguments(block);
  EXPECT_NE(dump.find("recompute_granularity ........................ full"), std::string::npos) << dump;
  EXPECT_NE(dump.find("recompute_method ............................. block"), std::string::npos) << dump;
  EXPECT_NE(dump.find("recompute_num_layers ......................... 4"), std::string::npos) << dump;
}

struct BadInput {
  std::vector<std::string> flags;
  std::string expected;  // a piece of the message (names the flag)
  int64_t world_size = 1;
};

TEST(Arguments, EveryBadInputNamesTheFlag) {
  const std::vector<BadInput> cases = {
      {with(base_flags(), "--no-such-flag", "3"), "--no-such-flag"},
      {with(base_flags(), "--hidden-size", "abc"), "--hidden-size"},
      {with(base_flags(), "--num-layers", "0"), "--num-layers must be a positive integer (got 0)"},
      {with(base_flags(), "--hidden-size", "-64"), "--hidden-size must be a positive integer"},
      {with(base_flags(), "--num-attention-heads", "0"), "--num-attention-heads must be a positive"},
      {with(base_flags(), "--seq-length", "0"), "--seq-length must be a positive"},
      {with(base_flags(), "--micro-batch-size", "0"), "--micro-batch-size must be a positive"},
      {with(base_flags(), "--train-iters", "-1"), "--train-iters must be a positive"},
      {with(base_flags(), "--global-batch-size", "0"), "--global-batch-size must be a positive"},
      {with(base_flags(), "--vocab-size", "0"), "--vocab-size must be a positive"},
      {with(base_flags(), "--ffn-hidden-size", "0"), "--ffn-hidden-size must be a positive"},
      {with(base_flags(), "--tensor-model-parallel-size", "0"), "--tensor-model-parallel-size must be a positive"},
      {with(base_flags(), "--log-interval", "0"), "--log-interval must be a positive"},
      {with(base_flags(), "--num-attention-heads", "5"), "--hidden-size (64) must be divisible by --num-attention-heads (5)"},
      {with(base_flags(), "--global-batch-size", "7"), "--global-batch-size (7) must be divisible by --micro-batch-size (2)"},
      {with(base_flags(), "--seq-length", "64"), "--seq-length (64) must not exceed --max-position-embeddings (32)"},
      {without(base_flags(), "--num-layers"), "missing required flag --num-layers"},
      {without(base_flags(), "--hidden-size"), "missing required flag --hidden-size"},
      {without(base_flags(), "--num-attention-heads"), "missing required flag --num-attention-heads"},
      {without(base_flags(), "--seq-length"), "missing required flag --seq-length"},
      {without(base_flags(), "--max-position-embeddings"), "missing required flag --max-position-embeddings"},
      {without(base_flags(), "--micro-batch-size"), "missing required flag --micro-batch-size"},
      {without(base_flags(), "--train-iters"), "missing required flag --train-iters"},
      {without(base_flags(), "--lr"), "missing required flag --lr"},
      {without(base_flags(), "--vocab-size"), "missing required flag --vocab-size"},
      {without(base_flags(), "--mock-data"), "--mock-data"},
      {with(base_flags(), "--fp16", ""), "--fp16 is not supported"},
      {with(base_flags(), "--lr-decay-style", "step"), "--lr-decay-style must be constant, linear or cosine"},
      {with(base_flags(), "--min-lr", "1"), "--min-lr (1) must be between 0 and --lr"},
      {with(with(base_flags(), "--lr-warmup-iters", "2"), "--lr-warmup-fraction", "0.1"),
       "--lr-warmup-fraction and --lr-warmup-iters cannot both be given"},
      {with(base_flags(), "--lr-warmup-iters", "5"), "must be shorter than --lr-decay-iters"},
      {with(base_flags(), "--clip-grad", "-1"), "--clip-grad must be >= 0"},
      {with(base_flags(), "--adam-beta1", "1"), "--adam-beta1 must be in [0, 1)"},
      // Model family (issue 14): dropout outside [0, 1), query groups, rotary percent.
      {with(base_flags(), "--hidden-dropout", "1"), "--hidden-dropout must be in [0, 1) (got 1)"},
      {with(base_flags(), "--hidden-dropout", "-0.1"), "--hidden-dropout must be in [0, 1) (got -0.1)"},
      {with(base_flags(), "--attention-dropout", "1.5"), "--attention-dropout must be in [0, 1) (got 1.5)"},
      {with(with(base_flags(), "--group-query-attention", ""), "--num-query-groups", "3"),
       "--num-attention-heads (4) must be divisible by --num-query-groups (3)"},
      {with(with(with(base_flags(), "--group-query-attention", ""), "--num-query-groups", "1"),
            "--tensor-model-parallel-size", "2"),
       "--num-query-groups (1) must be divisible by --tensor-model-parallel-size (2)", 2},
      {with(base_flags(), "--num-query-groups", "2"), "--num-query-groups needs --group-query-attention"},
      {with(with(base_flags(), "--position-embedding-type", "rope"), "--rotary-percent", "0"),
       "--rotary-percent must be in (0, 1] (got 0)"},
      {with(with(base_flags(), "--position-embedding-type", "rope"), "--rotary-percent", "1.5"),
       "--rotary-percent must be in (0, 1] (got 1.5)"},
      {with(with(base_flags(), "--position-embedding-type", "rope"), "--rotary-percent", "0.1"),
       "must give an even number of rotated dimensions"},
      {with(base_flags(), "--rotary-base", "500000"), "--rotary-base applies only with --position-embedding-type rope"},
      {with(base_flags(), "--position-embedding-type", "yarn"), "--position-embedding-type yarn is not available"},
      {with(base_flags(), "--normalization", "ScaleNorm"), "--normalization must be LayerNorm or RMSNorm"},
      {with(base_flags(), "--distributed-backend", "gloo"), "--distributed-backend must be nccl or mpi"},
      {with(base_flags(), "--tensor-model-parallel-size", "3"),
       "--num-attention-heads (4) must be divisible by --tensor-model-parallel-size (3)"},
      {with(with(base_flags(), "--tensor-model-parallel-size", "2"), "--ffn-hidden-size", "9"),
       "--ffn-hidden-size (9) must be divisible by --tensor-model-parallel-size (2)"},
      {with(with(with(base_flags(), "--tensor-model-parallel-size", "4"), "--sequence-parallel", ""), "--seq-length", "30"),
       "--seq-length (30) must be divisible by --tensor-model-parallel-size (4) with --sequence-parallel"},
      {with(base_flags(), "--tensor-model-parallel-size", "2"), "world size (1) must be divisible by --tensor-model-parallel-size (2)"},
      {with(base_flags(), "--pipeline-model-parallel-size", "2"), "world size (3) must be divisible", 3},
      // Pipeline layouts (world of 4 = PP 4, 4 microbatches unless the batch flags change).
      {with(base_flags(), "--pipeline-model-parallel-size", "4"),
       "--pipeline-model-parallel-size (4) exceeds --num-layers (2)", 4},
      {with(with(base_flags(), "--pipeline-model-parallel-size", "4"), "--num-layers", "6"),
       "--num-layers (6) must be divisible by --pipeline-model-parallel-size (4)", 4},
      {with(with(with(base_flags(), "--pipeline-model-parallel-size", "4"), "--num-layers", "8"),
            "--num-layers-per-virtual-pipeline-stage", "3"),
       "--num-layers (8) must be divisible by --pipeline-model-parallel-size (4) x "
       "--num-layers-per-virtual-pipeline-stage (3)",
       4},
      {with(with(with(with(base_flags(), "--pipeline-model-parallel-size", "4"), "--num-layers", "8"),
                 "--num-layers-per-virtual-pipeline-stage", "1"),
            "--global-batch-size", "12"),
       "to be a multiple of --pipeline-model-parallel-size (4)", 4},
      {with(base_flags(), "--num-layers-per-virtual-pipeline-stage", "1"),
       "--num-layers-per-virtual-pipeline-stage (an interleaved schedule) needs --pipeline-model-parallel-size > 1"},
      {with(base_flags(), "--num-virtual-stages-per-pipeline-rank", "2"),
       "--num-virtual-stages-per-pipeline-rank needs --pipeline-model-parallel-size > 1"},
      {with(with(with(with(base_flags(), "--pipeline-model-parallel-size", "2"), "--num-layers", "8"),
                 "--num-layers-per-virtual-pipeline-stage", "2"),
            "--num-virtual-stages-per-pipeline-rank", "2"),
       "cannot both be given", 2},
      {with(with(with(base_flags(), "--pipeline-model-parallel-size", "2"), "--num-layers", "8"),
            "--num-virtual-stages-per-pipeline-rank", "3"),
       "--num-layers (8) must be divisible by --pipeline-model-parallel-size (2) x "
       "--num-virtual-stages-per-pipeline-rank (3)",
       2},
      {with(base_flags(), "--attention-backend", "flash"), "--attention-backend flash is not available"},
      {with(base_flags(), "--overlap-param-gather", ""), "--overlap-param-gather needs --use-distributed-optimizer"},
      {with(base_flags(), "--ddp-bucket-size", "0"), "--ddp-bucket-size must be a positive integer"},
      {with(base_flags(), "--attention-backend", "fused"), "--attention-backend fused needs --bf16"},
      // Activation recompute (Megatron's rules; a method or count alone is refused, not ignored).
      {with(base_flags(), "--recompute-granularity", "partial"), "--recompute-granularity must be full or selective (got partial)"},
      {with(base_flags(), "--recompute-granularity", "full"), "--recompute-granularity full needs --recompute-method uniform or block"},
      {with(with(base_flags(), "--recompute-granularity", "full"), "--recompute-method", "uniform"),
       "--recompute-granularity full needs --recompute-num-layers"},
      {with(with(with(base_flags(), "--recompute-granularity", "full"), "--recompute-method", "uniform"),
            "--recompute-num-layers", "0"),
       "--recompute-num-layers must be at least 1 (got 0)"},
      {with(with(with(base_flags(), "--recompute-granularity", "full"), "--recompute-method", "random"),
            "--recompute-num-layers", "1"),
       "--recompute-method must be uniform or block (got random)"},
      {with(with(base_flags(), "--recompute-granularity", "selective"), "--recompute-method", "uniform"),
       "--recompute-method is not supported with --recompute-granularity selective"},
      {with(with(base_flags(), "--recompute-granularity", "selective"), "--recompute-num-layers", "1"),
       "--recompute-num-layers must not be given with --recompute-granularity selective"},
      {with(base_flags(), "--recompute-method", "block"), "need --recompute-granularity full"},
      {with(base_flags(), "--recompute-num-layers", "1"), "need --recompute-granularity full"},
      {with(with(base_flags(), "--recompute-activations", ""), "--recompute-granularity", "full"),
       "--recompute-activations (selective recompute) and --recompute-granularity full cannot both be given"},
      // The count is bounded by the layers of one model chunk (2 here; 4 per stage, 2 per virtual stage).
      {with(with(with(base_flags(), "--recompute-granularity", "full"), "--recompute-method", "block"),
            "--recompute-num-layers", "3"),
       "--recompute-num-layers (3) must be between 1 and the layers per pipeline stage (2)"},
      {with(with(with(base_flags(), "--recompute-granularity", "full"), "--recompute-method", "uniform"),
            "--recompute-num-layers", "3"),
       "--recompute-num-layers (3) must be between 1 and the layers per pipeline stage (2)"},
      {with(with(with(with(with(base_flags(), "--num-layers", "8"), "--pipeline-model-parallel-size", "2"),
                      "--recompute-granularity", "full"),
                 "--recompute-method", "block"),
            "--recompute-num-layers", "5"),
       "--recompute-num-layers (5) must be between 1 and the layers per pipeline stage (4)", 2},
      {with(with(with(with(with(with(base_flags(), "--num-layers", "8"), "--pipeline-model-parallel-size", "2"),
                           "--num-layers-per-virtual-pipeline-stage", "2"),
                      "--recompute-granularity", "full"),
                 "--recompute-method", "block"),
            "--recompute-num-layers", "3"),
       "--recompute-num-layers (3) must be between 1 and the layers per virtual pipeline stage (2)", 2},
  };
  for (const BadInput& bad : cases) {
    const std::string message = error_of(bad.flags, bad.world_size);
    EXPECT_NE(message.find(bad.expected), std::string::npos)
        << "expected '" << bad.expected << "' in '" << message << "'";
  }
}

}  // namespace
}  // namespace gpt

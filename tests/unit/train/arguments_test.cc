#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "gtest/gtest.h"
#include "train/args/argument_table.h"
#include "train/args/arguments.h"
#include "train/configs.h"
#include "train/args/context_parallel_arguments.h"
#include "train/args/schedule_arguments.h"

namespace gpt {
namespace {

// One line of Megatron's _print_args: '  {} {} {}'.format(arg, '.' * (48 - len(arg)), value).
std::string dump_line(const std::string& dest, const std::string& value) {
  return "  " + dest + " " + std::string(dest.size() < 48 ? 48 - dest.size() : 0, '.') + " " + value + "\n";
}

// Values as Python's print() shows them (expected strings written from Python 3's own output).
TEST(ArgumentDump, PythonValues) {
  EXPECT_EQ(python_str(PyValue()), "None");
  EXPECT_EQ(python_str(PyValue(true)), "True");
  EXPECT_EQ(python_str(PyValue(int64_t{-7})), "-7");
  const std::pair<double, const char*> floats[] = {
      {0.0, "0.0"},         {1.0, "1.0"},       {0.02, "0.02"},      {1e-5, "1e-05"},         {1e-8, "1e-08"},
      {6e-5, "6e-05"},      {0.0001, "0.0001"}, {0.001, "0.001"},    {0.999, "0.999"},        {10000.0, "10000.0"},
      {1e16, "1e+16"},      {1.5e16, "1.5e+16"}, {123456789012345.6, "123456789012345.6"},    {-2.5, "-2.5"},
      {0.1 + 0.2, "0.30000000000000004"},        {3e-4, "0.0003"},    {2.5e-7, "2.5e-07"},    {1e100, "1e+100"}};
  for (const auto& [value, want] : floats) EXPECT_EQ(python_str(PyValue(value)), want) << value;
  EXPECT_EQ(python_str(PyValue(std::string("969, 30, 1"))), "969, 30, 1");
  EXPECT_EQ(python_str(PyValue(std::vector<std::string>{"0.3", "a_text_document", "it's"})),
            "['0.3', 'a_text_document', \"it's\"]");
}

// The dump's frame, order (whole lines sorted lower-cased, as Megatron), padding and derived values.
TEST(ArgumentDump, MegatronLayout) {
  absl::StatusOr<Arguments> parsed = parse_arguments(std::vector<std::string>{
      "pretrain_gpt", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
      "--max-position-embeddings", "32", "--micro-batch-size", "2", "--train-iters", "5", "--lr", "1e-4",
      "--mock-data", "--vocab-size", "512", "--disable-bias-linear", "--swiglu"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(prepare_arguments(*parsed).ok());
  ASSERT_TRUE(prepare_for_world(*parsed, 2).ok());
  const std::string dump = describe_arguments(*parsed, 2);
  EXPECT_EQ(dump.rfind("------------------------ arguments ------------------------\n", 0), 0u);
  EXPECT_TRUE(dump.ends_with("\n-------------------- end of arguments ---------------------"));
  for (const auto& [dest, value] : std::vector<std::pair<std::string, std::string>>{
           {"add_bias_linear", "False"}, {"lr", "0.0001"}, {"global_batch_size", "4"}, {"data_parallel_size", "2"},
           {"world_size", "2"}, {"ffn_hidden_size", "128"}, {"kv_channels", "16"}, {"lr_decay_iters", "None"},
           {"adam_eps", "1e-08"}, {"attention_backend", "AttnBackend.auto"}, {"params_dtype", "torch.float32"},
           {"virtual_pipeline_model_parallel_size", "None"}, {"split", "969, 30, 1"}}) {
    EXPECT_NE(dump.find(dump_line(dest, value)), std::string::npos) << dest << "\n" << dump;
  }
  // Sorted case-insensitively by the whole line; every dest once.
  std::vector<std::string> lines;
  std::string line;
  for (size_t i = dump.find('\n') + 1; i < dump.rfind('\n'); i = dump.find('\n', i) + 1) {
    lines.push_back(dump.substr(i, dump.find('\n', i) - i));
  }
  ASSERT_GT(lines.size(), 100u);
  EXPECT_TRUE(std::is_sorted(lines.begin(), lines.end(), [](const std::string& a, const std::string& b) {
    return absl::AsciiStrToLower(a) < absl::AsciiStrToLower(b);
  }));
  std::set<std::string> dests;
  for (const ArgumentEntry& entry : argument_table(*parsed, 2)) EXPECT_TRUE(dests.insert(entry.dest).second) << entry.dest;
}

std::vector<std::string> base_flags() {
  return {"pretrain_gpt", "--mock-data", "--vocab-size", "512", "--num-layers", "2", "--hidden-size", "64",
          "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
          "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "5", "--lr", "1e-3"};
}

// PP 4 with two model chunks per rank (8 layers, one per virtual stage), for a world of 4.
std::vector<std::string> pp4_chunks();

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

std::vector<std::string> pp4_chunks() {
  return with(with(with(base_flags(), "--pipeline-model-parallel-size", "4"), "--num-layers", "8"),
              "--num-layers-per-virtual-pipeline-stage", "1");
}

// The error a command line produces (parse, validate, then the world-size checks), or "" if none.
std::string error_of(const std::vector<std::string>& flags, int64_t world_size = 1) {
  absl::StatusOr<Arguments> parsed = parse_arguments(flags);
  if (!parsed.ok()) return std::string(parsed.status().message());
  absl::Status status = prepare_arguments(*parsed);
  if (status.ok()) status = prepare_for_world(*parsed, world_size);
  return std::string(status.message());
}

TEST(Arguments, DefaultsFollowMegatron) {
  absl::StatusOr<Arguments> parsed = parse_arguments(without(base_flags(), "--global-batch-size"));
  ASSERT_TRUE(parsed.ok());
  Arguments& a = *parsed;
  ASSERT_TRUE(prepare_arguments(a).ok());
  ASSERT_TRUE(prepare_for_world(a, 1).ok());
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
  ASSERT_TRUE(prepare_arguments(a).ok());
  // Megatron's SwiGLU default: int((4h * 2 / 3) / 64) * 64 = int(170.67 / 64) * 64 = 128 for h = 64.
  EXPECT_EQ(a.ffn_hidden_size, 128);
  EXPECT_EQ(a.num_query_groups, 2);
  EXPECT_EQ(a.position_embedding_type, "rope");
  EXPECT_DOUBLE_EQ(a.rotary_base, 500000);
  // h = 4096: int(10922.67 / 64) * 64 = 10880 (Llama-2 7B uses 11008, given explicitly).
  parsed = parse_arguments(with(with(flags, "--hidden-size", "4096"), "--num-attention-heads", "32"));
  ASSERT_TRUE(parsed.ok());
  ASSERT_TRUE(prepare_arguments(*parsed).ok());
  EXPECT_EQ(parsed->ffn_hidden_size, 10880);
  // --no-position-embedding turns learned absolute positions off.
  parsed = parse_arguments(with(base_flags(), "--no-position-embedding", ""));
  ASSERT_TRUE(parsed.ok());
  ASSERT_TRUE(prepare_arguments(*parsed).ok());
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
    EXPECT_EQ(prepare_arguments(*parsed).message(), "");
    EXPECT_EQ(prepare_for_world(*parsed, world_size).message(), "");
    return *parsed;
  };
  const Arguments none = parsed_valid(base_flags());
  EXPECT_EQ(none.recompute_granularity, "");
  EXPECT_NE(describe_arguments(none, 1).find(dump_line("recompute_granularity", "None")), std::string::npos);
  // --recompute-activations is Megatron's shorthand for selective.
  EXPECT_EQ(parsed_valid(with(base_flags(), "--recompute-activations", "")).recompute_granularity, "selective");
  const Arguments block = parsed_valid(
      with(with(with(with(with(base_flags(), "--num-layers", "8"), "--pipeline-model-parallel-size", "2"),
                     "--recompute-granularity", "full"),
                "--recompute-method", "block"),
           "--recompute-num-layers", "4"),
      2);
  const std::string dump = describe_arguments(block, 2);
  EXPECT_NE(dump.find(dump_line("recompute_granularity", "full")), std::string::npos) << dump;
  EXPECT_NE(dump.find(dump_line("recompute_method", "block")), std::string::npos) << dump;
  EXPECT_NE(dump.find(dump_line("recompute_num_layers", "4")), std::string::npos) << dump;
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
      {with(with(base_flags(), "--tokenizer-type", "NullTokenizer"), "--tokenizer-model", "t.model"),
       "--tokenizer-model is read by --tokenizer-type SentencePieceTokenizer, GPTSentencePieceTokenizer or "
       "HuggingFaceTokenizer, not by NullTokenizer"},
      {with(base_flags(), "--tokenizer-type", "HuggingFaceTokenizer"), "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model"},
      {with(with(with(base_flags(), "--tokenizer-type", "GPTSentencePieceTokenizer"), "--tokenizer-model", "t.model"),
            "--vocab-file", "vocab.json"),
       "--tokenizer-type GPTSentencePieceTokenizer reads --tokenizer-model, not --vocab-file or --merge-file"},
      {with(base_flags(), "--tokenizer-type", "Llama2Tokenizer"), "--tokenizer-type must be GPT2BPETokenizer, NullTokenizer"},
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
      {with(with(base_flags(), "--fp16", ""), "--bf16", ""), "--fp16 and --bf16 are mutually exclusive"},
      // Issue 32's architecture options, refused where Megatron refuses or would ignore them.
      {with(with(base_flags(), "--squared-relu", ""), "--swiglu", ""), "--squared-relu and --swiglu cannot both be given"},
      {with(base_flags(), "--squared-relu", ""), "--squared-relu with linear biases needs --no-bias-gelu-fusion"},
      {with(base_flags(), "--decoupled-min-lr", "1e-5"), "--decoupled-min-lr applies only with --decoupled-lr"},
      {with(base_flags(), "--decoupled-lr", "-1"), "--decoupled-lr must be >= 0 (got -1)"},
      {with(with(base_flags(), "--decoupled-lr", "1e-4"), "--decoupled-min-lr", "2e-4"),
       "--decoupled-min-lr (0.0002) must be between 0 and --decoupled-lr (0.0001)"},
      {with(with(base_flags(), "--min-lr", "5e-5"), "--decoupled-lr", "1e-5"),
       "--min-lr (5e-05), the embedding and output layer's minimum without --decoupled-min-lr, must not exceed"},
      {with(base_flags(), "--attention-output-gate", ""), "--attention-output-gate (a Megatron-LM flag) is not supported"},
      {with(with(with(with(base_flags(), "--qk-layernorm", ""), "--test-mode", ""), "--use-megatron-fsdp", ""),
            "--data-parallel-sharding-strategy", "optim_grads_params"),
       "--test-mode compares the q/k layernorm parameters every rank holds; under --data-parallel-sharding-strategy "
       "optim_grads_params"},
      {with(base_flags(), "--loss-scale", "128"), "--loss-scale needs --fp16 or --bf16"},
      {with(with(base_flags(), "--fp16", ""), "--loss-scale", "0"), "--loss-scale must be positive and finite"},
      {with(with(base_flags(), "--fp16", ""), "--loss-scale", "-4"), "--loss-scale must be positive and finite"},
      {with(with(base_flags(), "--fp16", ""), "--loss-scale", "1e39"), "--loss-scale (1e+39) is beyond the FP32 range"},
      {with(with(base_flags(), "--fp16", ""), "--initial-loss-scale", "0"), "--initial-loss-scale must be positive"},
      {with(with(base_flags(), "--fp16", ""), "--min-loss-scale", "-1"), "--min-loss-scale must be positive"},
      {with(with(with(base_flags(), "--fp16", ""), "--min-loss-scale", "1024"), "--initial-loss-scale", "512"),
       "--min-loss-scale (1024) must not exceed --initial-loss-scale (512)"},
      {with(with(base_flags(), "--fp16", ""), "--loss-scale-window", "0"), "--loss-scale-window must be positive"},
      {with(with(base_flags(), "--fp16", ""), "--hysteresis", "-2"), "--hysteresis must be positive"},
      {with(base_flags(), "--hysteresis", "3"), "--hysteresis applies to --fp16's dynamic loss scaler"},
      {with(with(with(base_flags(), "--fp16", ""), "--loss-scale", "8"), "--initial-loss-scale", "16"),
       "--initial-loss-scale applies to --fp16's dynamic loss scaler, which this run does not use (--loss-scale"},
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
      {with(base_flags(), "--distributed-backend", "ucc"), "--distributed-backend must be nccl, mpi or gloo (got ucc)"},
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
      // --pipeline-schedule: the layouts a schedule cannot run name the flags.
      {with(base_flags(), "--pipeline-schedule", "zb-v"),
       "--pipeline-schedule zb-v runs two model chunks per pipeline rank placed in a V: it needs "
       "--pipeline-model-parallel-size > 1"},
      {with(with(with(with(base_flags(), "--pipeline-model-parallel-size", "2"), "--num-layers", "8"),
                 "--num-layers-per-virtual-pipeline-stage", "4"),
            "--pipeline-schedule", "zb-v"),
       "--num-layers-per-virtual-pipeline-stage = --num-layers / (2 x --pipeline-model-parallel-size) or "
       "--num-virtual-stages-per-pipeline-rank 2 (1 chunks per rank here)",
       2},
      {with(with(with(with(base_flags(), "--pipeline-model-parallel-size", "2"), "--num-layers", "12"),
                 "--num-virtual-stages-per-pipeline-rank", "3"),
            "--pipeline-schedule", "zb-v"),
       "(3 chunks per rank here)", 2},
      {with(base_flags(), "--pipeline-schedule", "gpipe"), "--pipeline-schedule must be 1f1b, interleaved, zb-h1, zb-v or auto"},
      {with(with(with(with(base_flags(), "--pipeline-model-parallel-size", "2"), "--num-layers", "8"),
                 "--num-layers-per-virtual-pipeline-stage", "2"),
            "--pipeline-schedule", "zb-h1"),
       "--pipeline-schedule zb-h1 runs one model chunk per pipeline rank; drop "
       "--num-layers-per-virtual-pipeline-stage / --num-virtual-stages-per-pipeline-rank (2 chunks per rank here)",
       2},
      {with(with(with(with(base_flags(), "--pipeline-model-parallel-size", "2"), "--num-layers", "8"),
                 "--num-virtual-stages-per-pipeline-rank", "2"),
            "--pipeline-schedule", "1f1b"),
       "--pipeline-schedule 1f1b runs one model chunk per pipeline rank", 2},
      {with(with(base_flags(), "--pipeline-model-parallel-size", "2"), "--pipeline-schedule", "interleaved"),
       "--pipeline-schedule interleaved needs more than one model chunk per pipeline rank", 2},
      // Megatron's microbatch groups of the interleaved schedule (PP4, two chunks per rank): between
      // PP and the number of microbatches, the last group 0 or at least PP.
      {with(with(pp4_chunks(), "--global-batch-size", "20"), "--microbatch-group-size-per-virtual-pipeline-stage", "3"),
       "--microbatch-group-size-per-virtual-pipeline-stage (3, the number of contiguous microbatches in a virtual "
       "pipeline stage) must range in [--pipeline-model-parallel-size (4), the number of microbatches (10",
       4},
      {with(with(pp4_chunks(), "--global-batch-size", "8"), "--microbatch-group-size-per-virtual-pipeline-stage", "5"),
       "must range in [--pipeline-model-parallel-size (4), the number of microbatches (4", 4},
      {with(with(pp4_chunks(), "--global-batch-size", "22"), "--microbatch-group-size-per-virtual-pipeline-stage", "5"),
       "the remainder of the number of microbatches (11) divided by --microbatch-group-size-per-virtual-pipeline-stage "
       "(5) must be 0 or at least --pipeline-model-parallel-size (4), but it is 1",
       4},
      {with(pp4_chunks(), "--microbatch-group-size-per-virtual-pipeline-stage", "0"),
       "--microbatch-group-size-per-virtual-pipeline-stage must be a positive", 4},
      {with(with(pp4_chunks(), "--microbatch-group-size-per-virtual-pipeline-stage", "4"), "--pipeline-schedule",
            "auto"),
       "--microbatch-group-size-per-virtual-pipeline-stage belongs to Megatron's interleaved schedule; "
       "--pipeline-schedule auto runs another",
       4},
      {with(with(with(base_flags(), "--pipeline-model-parallel-size", "2"), "--pipeline-schedule", "zb-v"),
            "--overlap-p2p-communication-warmup-flush", ""),
       "--overlap-p2p-communication-warmup-flush belongs to Megatron's interleaved schedule", 2},
      // Megatron turns overlap_p2p_comm off without interleaving; its config then refuses this.
      {with(with(base_flags(), "--pipeline-model-parallel-size", "2"), "--overlap-p2p-communication-warmup-flush", ""),
       "--overlap-p2p-communication-warmup-flush: pipeline parallel communication overlapping in warmup and flush is "
       "only compatible with overlap_p2p_comm",
       2},
      {with(base_flags(), "--overlap-p2p-communication-warmup-flush", ""),
       "only compatible with overlap_p2p_comm"},
      {with(base_flags(), "--attention-backend", "flashy"), "--attention-backend must be auto, flash, fused"},
      {with(base_flags(), "--ckpt-format", "zarr"), "--ckpt-format zarr is not one of torch_dist"},
      {with(base_flags(), "--num-workers", "-1"), "--num-workers must be >= 0"},
      {with(base_flags(), "--cross-entropy-fusion-impl", "apex"), "--cross-entropy-fusion-impl must be native or te"},
      {with(base_flags(), "--async-strategy", "x"), "--async-strategy must be nvrx or mcore"},
      {with(base_flags(), "--step-batch-size-schedule", "0:16 1M:32"),
       "Cannot specify both --step-batch-size-schedule and --global-batch-size"},
      {with(base_flags(), "--overlap-param-gather", ""), "--overlap-param-gather needs --use-distributed-optimizer"},
      {with(base_flags(), "--ddp-bucket-size", "0"), "--ddp-bucket-size must be a positive integer"},
      // Megatron-FSDP (ZeRO levels): its flags alone, and what cannot combine.
      {with(base_flags(), "--data-parallel-sharding-strategy", "optim_grads"),
       "--data-parallel-sharding-strategy takes effect only with --use-megatron-fsdp"},
      {with(base_flags(), "--fsdp-double-buffer", ""), "--fsdp-double-buffer takes effect only with --use-megatron-fsdp"},
      {with(base_flags(), "--suggested-communication-unit-size", "1000"),
       "--suggested-communication-unit-size takes effect only with --use-megatron-fsdp"},
      {with(with(base_flags(), "--use-megatron-fsdp", ""), "--check-weight-hash-across-dp-replicas-interval", "10"),
       "under --data-parallel-sharding-strategy optim_grads_params each data-parallel rank holds another shard"},
      {with(with(base_flags(), "--use-megatron-fsdp", ""), "--data-parallel-sharding-strategy", "zero2"),
       "--data-parallel-sharding-strategy must be no_shard, optim, optim_grads or optim_grads_params (got 'zero2')"},
      {with(with(with(base_flags(), "--use-megatron-fsdp", ""), "--data-parallel-sharding-strategy", "no_shard"),
            "--use-distributed-optimizer", ""),
       "--use-distributed-optimizer shards the optimizer state, --data-parallel-sharding-strategy no_shard does not"},
      {with(with(with(base_flags(), "--use-megatron-fsdp", ""), "--data-parallel-sharding-strategy", "optim_grads"),
            "--ddp-bucket-size", "1000"),
       "under --use-megatron-fsdp the reduction units are sized by --suggested-communication-unit-size"},
      {with(with(with(base_flags(), "--use-megatron-fsdp", ""), "--data-parallel-sharding-strategy", "optim_grads"),
            "--suggested-communication-unit-size", "0"),
       "--suggested-communication-unit-size must be positive (got 0)"},
      {with(with(with(base_flags(), "--use-megatron-fsdp", ""), "--data-parallel-sharding-strategy", "no_shard"),
            "--overlap-param-gather", ""),
       "--data-parallel-sharding-strategy no_shard has none"},
      {with(with(with(with(base_flags(), "--use-megatron-fsdp", ""), "--data-parallel-sharding-strategy", "optim_grads"),
                 "--pipeline-model-parallel-size", "2"),
            "--pipeline-schedule", "zb-h1"),
       "--data-parallel-sharding-strategy optim_grads cannot run --pipeline-schedule zb-h1", 2},
      {with(with(with(base_flags(), "--use-megatron-fsdp", ""), "--pipeline-model-parallel-size", "2"),
            "--pipeline-schedule", "zb-h1"),
       "--data-parallel-sharding-strategy optim_grads_params cannot run --pipeline-schedule zb-h1", 2},
      {with(with(with(with(base_flags(), "--use-megatron-fsdp", ""), "--data-parallel-sharding-strategy", "optim_grads"),
                 "--pipeline-model-parallel-size", "2"),
            "--pipeline-schedule", "zb-v"),
       "--data-parallel-sharding-strategy optim_grads cannot run --pipeline-schedule zb-v", 2},
      {with(base_flags(), "--megatron-fsdp-main-grads-dtype", "fp32"),
       "--megatron-fsdp-main-grads-dtype takes effect only with --use-megatron-fsdp"},
      {with(with(with(base_flags(), "--use-megatron-fsdp", ""), "--bf16", ""), "--megatron-fsdp-grad-comm-dtype", "bf16"),
       "--megatron-fsdp-grad-comm-dtype bf16: this program keeps FP32 master weights and FP32 main gradients"},
      {with(with(with(base_flags(), "--use-megatron-fsdp", ""), "--bf16", ""), "--megatron-fsdp-main-grads-dtype", "auto"),
       "--megatron-fsdp-main-grads-dtype auto: this program keeps FP32"},
      // --use-torch-fsdp2 (ZeRO-3): Megatron's rules.
      {with(base_flags(), "--use-torch-fsdp2", ""),
       "--use-torch-fsdp2 is not supported with gradient accumulation fusion: add --no-gradient-accumulation-fusion"},
      {with(with(base_flags(), "--use-torch-fsdp2", ""), "--no-gradient-accumulation-fusion", ""),
       "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights"},
      {with(with(with(base_flags(), "--use-torch-fsdp2", ""), "--use-megatron-fsdp", ""), "--no-gradient-accumulation-fusion", ""),
       "--use-torch-fsdp2 and --use-megatron-fsdp are two fully sharded data-parallel wrappers"},
      // Optimizer offload: the fraction's range, and Megatron's requirements.
      {with(base_flags(), "--optimizer-cpu-offload", ""), "--optimizer-cpu-offload needs a distributed optimizer"},
      {with(with(base_flags(), "--use-distributed-optimizer", ""), "--optimizer-cpu-offload", ""),
       "--optimizer-cpu-offload needs --use-precision-aware-optimizer"},
      {with(with(with(with(base_flags(), "--use-distributed-optimizer", ""), "--optimizer-cpu-offload", ""),
                 "--use-precision-aware-optimizer", ""),
            "--optimizer-offload-fraction", "1.5"),
       "--optimizer-offload-fraction must be in [0, 1] (got 1.5)"},
      {with(base_flags(), "--optimizer-offload-fraction", "0.5"),
       "--optimizer-offload-fraction takes effect only with --optimizer-cpu-offload"},
      {with(base_flags(), "--overlap-cpu-optimizer-d2h-h2d", ""),
       "--overlap-cpu-optimizer-d2h-h2d takes effect only with --optimizer-cpu-offload"},
      {with(base_flags(), "--outer-dp-sharding-strategy", "optim"), "this program has no hybrid sharding (HSDP)"},
      // --num-distributed-optimizer-instances: Megatron's rules, and no hybrid sharding.
      {with(base_flags(), "--num-distributed-optimizer-instances", "0"),
       "--num-distributed-optimizer-instances must be at least 1 (got 0)"},
      {with(base_flags(), "--num-distributed-optimizer-instances", "2"),
       "--num-distributed-optimizer-instances 2 needs --use-distributed-optimizer"},
      {with(with(with(base_flags(), "--use-megatron-fsdp", ""), "--data-parallel-sharding-strategy", "optim"),
            "--num-distributed-optimizer-instances", "2"),
       "--num-distributed-optimizer-instances 2 with --use-megatron-fsdp asks for hybrid sharding (HSDP)"},
      {with(with(with(with(base_flags(), "--use-torch-fsdp2", ""), "--no-gradient-accumulation-fusion", ""),
                 "--untie-embeddings-and-output-weights", ""),
            "--num-distributed-optimizer-instances", "2"),
       "--num-distributed-optimizer-instances 2 with --use-torch-fsdp2 asks for hybrid sharding (HSDP)"},
      {with(with(base_flags(), "--use-distributed-optimizer", ""), "--num-distributed-optimizer-instances", "3"),
       "data-parallel size (4) must be divisible by --num-distributed-optimizer-instances (3)", 4},
      {with(with(with(base_flags(), "--use-distributed-optimizer", ""), "--context-parallel-size", "2"),
            "--num-distributed-optimizer-instances", "3"),
       "data-parallel size (2) x --context-parallel-size (2) must be divisible by --num-distributed-optimizer-instances (3)",
       4},
      // --expert-tensor-parallel-size: Megatron's expert grid checks (no expert layers here).
      {with(base_flags(), "--expert-tensor-parallel-size", "0"), "--expert-tensor-parallel-size must be at least 1 (got 0)"},
      {with(with(base_flags(), "--expert-tensor-parallel-size", "3"), "--pipeline-model-parallel-size", "2"),
       "world size (4) must be divisible by --expert-tensor-parallel-size (3) x --pipeline-model-parallel-size (2), as "
       "Megatron's expert grid",
       4},
      {with(with(with(with(base_flags(), "--expert-tensor-parallel-size", "1"), "--pipeline-model-parallel-size", "2"),
                 "--use-tp-pp-dp-mapping", ""),
            "--tensor-model-parallel-size", "2"),
       "--expert-tensor-parallel-size 1 with --use-tp-pp-dp-mapping and --pipeline-model-parallel-size 2: the expert "
       "data-parallel size (4) must equal the data-parallel size (2), as Megatron requires without the pipeline-last "
       "rank order",
       8},
      {with(base_flags(), "--attention-backend", "fused"), "--attention-backend fused needs --bf16"},
      // --cp-comm-type a2a+p2p and --hierarchical-context-parallel-sizes: Megatron's rules (the sizes
      // multiply to CP; a2a+p2p needs them), Transformer Engine's two levels, and the heads over level 0.
      {with(with(base_flags(), "--context-parallel-size", "4"), "--cp-comm-type", "a2a+p2p"),
       "--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes (its all-to-all and ring levels)"},
      {with(with(with(base_flags(), "--context-parallel-size", "4"), "--cp-comm-type", "a2a+p2p"),
            "--hierarchical-context-parallel-sizes", "2 4"),
       "--hierarchical-context-parallel-sizes (2 x 4 = 8) must multiply to --context-parallel-size (4)"},
      {with(with(base_flags(), "--context-parallel-size", "4"), "--hierarchical-context-parallel-sizes", "[2 2]x"),
       "--hierarchical-context-parallel-sizes takes positive integers (got '[2 2]x')"},
      {with(with(with(with(base_flags(), "--context-parallel-size", "8"), "--seq-length", "64"),
                 "--max-position-embeddings", "64"),
            "--hierarchical-context-parallel-sizes", "2 2 2"),
       "--hierarchical-context-parallel-sizes takes two levels (the all-to-all's and the ring's, as --cp-comm-type "
       "a2a+p2p uses them), got 3"},
      {with(with(with(with(base_flags(), "--context-parallel-size", "4"), "--cp-comm-type", "a2a+p2p"),
                 "--hierarchical-context-parallel-sizes", "4,1"),
            "--num-attention-heads", "2"),
       "--cp-comm-type a2a+p2p needs the attention heads (2) and key/value groups (2) of each tensor-parallel rank "
       "divisible by the first of --hierarchical-context-parallel-sizes (4)"},
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

// Parses and validates (world of 1), expecting no error.
Arguments valid(const std::vector<std::string>& flags) {
  absl::StatusOr<Arguments> parsed = parse_arguments(flags);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return Arguments{};
  EXPECT_EQ(std::string(prepare_arguments(*parsed).message()), "");
  EXPECT_EQ(std::string(prepare_for_world(*parsed, 1).message()), "");
  return *parsed;
}

// Issue 15: the implementation choices a Megatron launch script passes are accepted with the
// meaning their help states.
TEST(Arguments, MegatronImplementationChoicesAreAccepted) {
  const std::vector<const char*> switches = {
      "--use-mcore-models", "--no-gradient-accumulation-fusion", "--attention-softmax-in-fp32",
      "--no-rope-fusion", "--manual-gc", "--no-create-attention-mask-in-dataloader", "--no-mmap-bin-files",
      "--use-flash-attn", "--no-masked-softmax-fusion", "--no-bias-dropout-fusion", "--no-bias-swiglu-fusion",
      "--no-persist-layer-norm", "--no-async-tensor-model-parallel-allreduce", "--use-cpu-initialization",
      "--apply-query-key-layer-scaling", "--accumulate-allreduce-grads-in-fp32", "--calculate-per-token-loss"};
  std::vector<std::string> flags = base_flags();
  for (const char* flag : switches) flags.push_back(flag);
  for (const char* pair : {"--transformer-impl=transformer_engine", "--manual-gc-interval=10",
                           "--empty-unused-memory-level=2"}) {
    flags.push_back(pair);
  }
  const Arguments a = valid(flags);
  for (const char* flag : switches) EXPECT_TRUE(a.was_given(flag)) << flag;
  EXPECT_TRUE(a.use_flash_attn && a.no_gradient_accumulation_fusion && a.calculate_per_token_loss &&
              a.accumulate_allreduce_grads_in_fp32 && a.apply_query_key_layer_scaling && a.manual_gc);
  EXPECT_EQ(a.transformer_impl, "transformer_engine");
  EXPECT_EQ(a.manual_gc_interval, 10);
  EXPECT_EQ(a.empty_unused_memory_level, 2);
  // --use-flash-attn is what --attention-backend auto does; with fused it agrees too.
  EXPECT_EQ(a.attention_backend, "auto");
  EXPECT_EQ(valid(with(with(with(with(base_flags(), "--use-flash-attn", ""), "--bf16", ""), "--attention-dropout", "0"),
                       "--attention-backend", "fused"))
                .attention_backend,
            "fused");
  // Every accepted value of the valued ones.
  for (const char* impl : {"local", "transformer_engine"}) {
    EXPECT_EQ(valid(with(base_flags(), "--transformer-impl", impl)).transformer_impl, impl);
  }
  for (const char* level : {"0", "1", "2"}) {
    EXPECT_EQ(valid(with(base_flags(), "--empty-unused-memory-level", level)).empty_unused_memory_level,
              std::stoll(level));
  }
  EXPECT_EQ(valid(with(base_flags(), "--manual-gc-interval", "0")).manual_gc_interval, 0);
  // Issue 32: flash runs what auto does, said in one note; Megatron's checkpoint formats are HDF5
  // here, said in one note when checkpoints are written or read.
  const Arguments flash = valid(with(base_flags(), "--attention-backend", "flash"));
  ASSERT_EQ(flash.notes.size(), 1u);
  EXPECT_NE(flash.notes[0].find("--attention-backend flash: runs what auto does"), std::string::npos);
  for (const char* format : {"torch_dist", "torch", "torch_dcp", "fsdp_dtensor"}) {
    const Arguments a = valid(with(with(base_flags(), "--ckpt-format", format), "--save", "/tmp/unused_save_dir"));
    EXPECT_EQ(a.ckpt_format, format);
    ASSERT_EQ(a.notes.size(), 1u) << format;
    EXPECT_NE(a.notes[0].find("this program's sharded HDF5 format"), std::string::npos) << a.notes[0];
  }
  EXPECT_TRUE(valid(with(base_flags(), "--ckpt-format", "hdf5")).notes.empty());
  EXPECT_EQ(valid(base_flags()).ckpt_format, "torch_dist");  // Megatron's default
  EXPECT_EQ(valid(with(base_flags(), "--num-workers", "6")).num_workers, 6);
  EXPECT_TRUE(valid(with(base_flags(), "--cross-entropy-loss-fusion", "")).cross_entropy_loss_fusion);
  // The exact erf GeLU (the model's choice is in trainer.cc's model_config_from; the oracle's
  // gelu_exact variants check the numbers).
  EXPECT_TRUE(valid(with(base_flags(), "--disable-bias-linear", "")).disable_bias_linear);
  EXPECT_TRUE(valid(with(base_flags(), "--no-bias-gelu-fusion", "")).no_bias_gelu_fusion);
  // Megatron's NaN check is on by default; its flag turns it off (the trainer then skips such steps).
  EXPECT_FALSE(valid(base_flags()).no_check_for_nan_in_loss_and_grad);
  EXPECT_TRUE(valid(with(base_flags(), "--no-check-for-nan-in-loss-and-grad", "")).no_check_for_nan_in_loss_and_grad);
  // --no-bias-gelu-fusion has no effect with --swiglu (Megatron consults the SwiGLU fusion there).
  EXPECT_TRUE(valid(with(with(base_flags(), "--swiglu", ""), "--no-bias-gelu-fusion", "")).no_bias_gelu_fusion);
  // Each flag's help says what it means here.
  absl::StatusOr<Arguments> help = parse_arguments(std::vector<std::string>{"pretrain_gpt", "--help"});
  ASSERT_TRUE(absl::IsCancelled(help.status()));
  const std::string text(help.status().message());
  for (const char* flag : switches) EXPECT_NE(text.find(flag), std::string::npos) << flag;
  for (const char* flag : {"--transformer-impl", "--manual-gc-interval", "--empty-unused-memory-level",
                           "--no-bias-gelu-fusion", "--no-check-for-nan-in-loss-and-grad", "--rampup-batch-size",
                           "--train-samples", "--lr-warmup-samples", "--lr-decay-samples"}) {
    EXPECT_NE(text.find(flag), std::string::npos) << flag;
  }
}

TEST(Arguments, MegatronImplementationChoicesRefusedWithTheReason) {
  const std::vector<BadInput> cases = {
      {with(base_flags(), "--transformer-impl", "inference_optimized"),
       "--transformer-impl inference_optimized is not available"},
      {with(base_flags(), "--transformer-impl", "te"),
       "--transformer-impl must be local or transformer_engine (got te)"},
      {with(base_flags(), "--manual-gc-interval", "-1"), "--manual-gc-interval must be >= 0 (got -1)"},
      {with(base_flags(), "--empty-unused-memory-level", "3"),
       "--empty-unused-memory-level must be 0, 1 or 2 (got 3)"},
      {with(base_flags(), "--empty-unused-memory-level", "-1"),
       "--empty-unused-memory-level must be 0, 1 or 2 (got -1)"},
      {with(with(base_flags(), "--use-flash-attn", ""), "--attention-backend", "local"),
       "--use-flash-attn asks for flash attention, which --attention-backend local turns off"},
      {with(with(base_flags(), "--use-flash-attn", ""), "--attention-backend", "unfused"),
       "--use-flash-attn asks for flash attention, which --attention-backend unfused turns off"},
      {with(base_flags(), "--rampup-batch-size", "16 8 300000"), "--rampup-batch-size"},
      {[] {
         std::vector<std::string> flags = base_flags();
         for (const char* word : {"--rampup-batch-size", "16", "8", "300000"}) flags.push_back(word);
         return flags;
       }(),
       "--rampup-batch-size needs --train-samples: expected no batch-size rampup for iteration-based training"},
      {[] {
         std::vector<std::string> flags = base_flags();
         for (const char* word : {"--rampup-batch-size", "16", "8"}) flags.push_back(word);
         return flags;
       }(),
       "--rampup-batch-size"},
  };
  for (const BadInput& bad : cases) {
    const std::string message = error_of(bad.flags, bad.world_size);
    EXPECT_NE(message.find(bad.expected), std::string::npos)
        << "expected '" << bad.expected << "' in '" << message << "'";
  }
}

// Megatron's error injection (train/resilience/rerun_error_injector.h): its choices, and refused where no
// validation call would draw it (Megatron ignores it there).
TEST(Arguments, ErrorInjectionNeedsAValidationToInjectInto) {
  const std::vector<std::string> validate = with(base_flags(), "--rerun-mode", "validate_results");
  for (const char* type : {"correct_result", "transient_error", "persistent_error"}) {
    EXPECT_EQ(error_of(with(with(validate, "--error-injection-rate", "100"), "--error-injection-type", type)), "")
        << type;
  }
  EXPECT_EQ(error_of(with(validate, "--error-injection-rate", "0")), "");
  EXPECT_EQ(error_of(with(base_flags(), "--error-injection-type", "persistent_error")), "");  // rate 0: inert
  const std::string add_mode = "with --rerun-mode disabled nothing is validated (this program's default is disabled, "
                               "Megatron's validate_results): add --rerun-mode validate_results";
  const std::vector<BadInput> cases = {
      {with(base_flags(), "--error-injection-rate", "100"), add_mode},
      {with(with(base_flags(), "--rerun-mode", "report_stats"), "--error-injection-rate", "100"),
       "with --rerun-mode report_stats nothing is validated"},
      {with(with(validate, "--error-injection-rate", "100"), "--no-check-for-nan-in-loss-and-grad", ""),
       "--error-injection-rate has no validation call to inject into: --no-check-for-nan-in-loss-and-grad turns off "
       "the NaN and Inf checks of the loss; drop it or add --check-for-spiky-loss"},
      {with(validate, "--error-injection-rate", "-1"), "--error-injection-rate must be >= 0 (0: no injection), got -1"},
      {with(validate, "--error-injection-type", "silent_error"),
       "--error-injection-type must be correct_result, transient_error or persistent_error, got 'silent_error'"},
  };
  for (const BadInput& bad : cases) {
    const std::string message = error_of(bad.flags, bad.world_size);
    EXPECT_NE(message.find(bad.expected), std::string::npos)
        << "expected '" << bad.expected << "' in '" << message << "'";
  }
  EXPECT_EQ(error_of(with(with(with(validate, "--error-injection-rate", "100"), "--no-check-for-nan-in-loss-and-grad",
                               ""), "--check-for-spiky-loss", "")), "");
}

// Megatron's CPU backend runs on this program's MPI communicator, with one note (printed by rank 0
// when training starts).
TEST(Arguments, GlooRunsOnMpiWithANote) {
  const Arguments a = valid(with(base_flags(), "--distributed-backend", "gloo"));
  EXPECT_EQ(a.distributed_backend, "mpi");
  ASSERT_EQ(a.notes.size(), 1u);
  EXPECT_NE(a.notes[0].find("--distributed-backend gloo"), std::string::npos) << a.notes[0];
  EXPECT_NE(a.notes[0].find("MPI"), std::string::npos) << a.notes[0];
  EXPECT_EQ(a.notes[0].find('\n'), std::string::npos);
  for (const char* backend : {"nccl", "mpi"}) {
    const Arguments other = valid(with(base_flags(), "--distributed-backend", backend));
    EXPECT_EQ(other.distributed_backend, backend);
    EXPECT_TRUE(other.notes.empty());
  }
  EXPECT_TRUE(valid(base_flags()).notes.empty());
}

// Argparse's rule: a repeated flag takes its last value; --data-path (nargs='*') the last list.
TEST(Arguments, RepeatedFlagTakesTheLastValue) {
  std::vector<std::string> flags = base_flags();
  for (const char* word : {"--lr", "3e-4", "--num-layers", "4", "--bf16", "--bf16", "--num-layers=6",
                           "--distributed-backend", "nccl", "--distributed-backend", "mpi"}) {
    flags.push_back(word);
  }
  Arguments a = valid(flags);
  EXPECT_DOUBLE_EQ(a.lr, 3e-4);
  EXPECT_EQ(a.num_layers, 6);
  EXPECT_TRUE(a.bf16);
  EXPECT_EQ(a.distributed_backend, "mpi");
  // The last --data-path's list replaces the earlier one, whatever their lengths.
  const std::vector<std::string> data = {"pretrain_gpt", "--data-path", "0.3", "/a", "0.7", "/b",
                                         "--vocab-size", "8", "--data-path", "/c", "--seed", "1",
                                         "--data-path", "2", "/d", "1", "/e"};
  absl::StatusOr<Arguments> parsed = parse_arguments(data);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->data_path, (std::vector<std::string>{"2", "/d", "1", "/e"}));
  EXPECT_TRUE(parsed->was_given("--data-path"));
  parsed = parse_arguments(std::vector<std::string>{"pretrain_gpt", "--data-path", "/a", "/b", "--data-path", "/c"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->data_path, (std::vector<std::string>{"/c"}));
  // A bad earlier value is still an error, as argparse converts every occurrence.
  EXPECT_NE(error_of(with(flags, "--hidden-size", "abc")).find("--hidden-size"), std::string::npos);
  flags.push_back("--hidden-size");
  flags.push_back("abc");
  flags.push_back("--hidden-size");
  flags.push_back("64");
  EXPECT_NE(error_of(flags).find("--hidden-size"), std::string::npos);
}

// Sample-based training (Megatron's --train-samples): iterations = floor(samples / global batch),
// the schedule in samples as given.
TEST(Arguments, SampleBasedTraining) {
  std::vector<std::string> flags = with(without(base_flags(), "--train-iters"), "--train-samples", "100");
  Arguments a = valid(flags);  // global batch 8
  EXPECT_EQ(a.train_iters, 12);  // 100 // 8, as update_train_iters
  EXPECT_EQ(a.train_samples, 100);
  EXPECT_EQ(a.lr_decay_samples, 100);  // default: --train-samples
  LrScheduleConfig c = lr_schedule_config(a);
  EXPECT_EQ(c.decay_steps, 100);
  EXPECT_DOUBLE_EQ(c.warmup_steps, 0.0);
  EXPECT_EQ(c.style, LrDecayStyle::kLinear);
  // Warmup and decay in samples, not rounded to whole batches.
  a = valid(with(with(with(flags, "--lr-warmup-samples", "12"), "--lr-decay-samples", "90"), "--min-lr", "1e-4"));
  c = lr_schedule_config(a);
  EXPECT_EQ(c.decay_steps, 90);
  EXPECT_DOUBLE_EQ(c.warmup_steps, 12.0);
  EXPECT_DOUBLE_EQ(c.max_lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.min_lr, 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 8), 1e-3 * 8.0 / 12.0);  // the log line of iteration 1
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 96), 1e-4);                // past 90 samples
  // A warmup fraction of the decay samples stays fractional (Megatron's float): 0.15 x 90 = 13.5.
  a = valid(with(with(flags, "--lr-decay-samples", "90"), "--lr-warmup-fraction", "0.15"));
  EXPECT_DOUBLE_EQ(lr_schedule_config(a).warmup_steps, 0.15 * 90);
  // Megatron allows a zero warmup in the other unit.
  EXPECT_EQ(valid(with(flags, "--lr-warmup-iters", "0")).train_iters, 12);
  EXPECT_EQ(valid(with(base_flags(), "--lr-warmup-samples", "0")).train_iters, 5);
  // Iteration-based: iterations x global batch; a fraction stays fractional here too (0.3 x 40 = 12).
  a = valid(with(with(with(base_flags(), "--lr-warmup-fraction", "0.3"), "--lr-decay-iters", "5"),
                 "--lr-decay-style", "cosine"));
  c = lr_schedule_config(a);
  EXPECT_EQ(c.decay_steps, 40);
  EXPECT_DOUBLE_EQ(c.warmup_steps, 0.3 * 40);
  EXPECT_EQ(c.style, LrDecayStyle::kCosine);
  a = valid(with(base_flags(), "--lr-warmup-iters", "2"));
  c = lr_schedule_config(a);
  EXPECT_EQ(c.decay_steps, 40);
  EXPECT_DOUBLE_EQ(c.warmup_steps, 16.0);
  // With more data-parallel ranks the batch is the same, and so is the count.
  a = *parse_arguments(with(flags, "--micro-batch-size", "1"));
  ASSERT_TRUE(prepare_arguments(a).ok());
  ASSERT_TRUE(prepare_for_world(a, 4).ok());
  EXPECT_EQ(a.train_iters, 12);
}

TEST(Arguments, SampleAndIterationFlagsFollowMegatronsRules) {
  const std::vector<std::string> samples = with(without(base_flags(), "--train-iters"), "--train-samples", "100");
  const std::vector<BadInput> cases = {
      {with(base_flags(), "--train-samples", "100"), "--train-iters and --train-samples cannot both be given"},
      {with(samples, "--train-samples", "0"), "--train-samples must be a positive integer (got 0)"},
      {with(samples, "--train-samples", "-5"), "--train-samples must be a positive integer (got -5)"},
      {with(samples, "--train-samples", "7"), "--train-samples (7) is less than one global batch (8 samples)"},
      {with(samples, "--lr-decay-iters", "10"), "--lr-decay-iters cannot be given with --train-samples"},
      {with(samples, "--lr-warmup-iters", "2"), "--lr-warmup-iters cannot be given with --train-samples"},
      {with(with(samples, "--lr-warmup-fraction", "0.1"), "--lr-warmup-samples", "8"),
       "--lr-warmup-fraction and --lr-warmup-samples cannot both be given"},
      {with(base_flags(), "--lr-decay-samples", "100"), "--lr-decay-samples needs --train-samples"},
      {with(base_flags(), "--lr-warmup-samples", "16"), "--lr-warmup-samples needs --train-samples"},
      {with(samples, "--lr-warmup-samples", "-1"), "--lr-warmup-samples must be >= 0 (got -1)"},
      {with(samples, "--lr-decay-samples", "0"), "--lr-decay-samples must be a positive integer (got 0)"},
      {with(samples, "--lr-warmup-samples", "100"),
       "learning-rate warmup (100 samples) must be shorter than --lr-decay-samples (100, the default: "
       "--train-samples)"},
      {with(with(samples, "--lr-warmup-samples", "50"), "--lr-decay-samples", "40"),
       "learning-rate warmup (50 samples) must be shorter than --lr-decay-samples (40)"},
      {with(samples, "--lr-warmup-fraction", "1.5"), "--lr-warmup-fraction must be in [0, 1] (got 1.5)"},
  };
  for (const BadInput& bad : cases) {
    const std::string message = error_of(bad.flags, bad.world_size);
    EXPECT_NE(message.find(bad.expected), std::string::npos)
        << "expected '" << bad.expected << "' in '" << message << "'";
  }
}

TEST(Arguments, MicrobatchGroupsOfTheInterleavedSchedule) {
  // Megatron's tunable-overlap configurations: PP4, one layer per virtual stage, 10 microbatches
  // (not a multiple of PP) in groups of 5, the warm-up and flush transfers overlapped.
  const std::vector<std::string> flags =
      with(with(with(pp4_chunks(), "--global-batch-size", "20"), "--microbatch-group-size-per-virtual-pipeline-stage",
                "5"),
           "--overlap-p2p-communication-warmup-flush", "");
  EXPECT_EQ(error_of(flags, 4), "");
  absl::StatusOr<Arguments> parsed = parse_arguments(flags);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->microbatch_group_size_per_vp_stage, 5);
  EXPECT_TRUE(parsed->overlap_p2p_comm_warmup_flush);
  // Without the group, 10 microbatches are refused (the default group is PP).
  EXPECT_NE(error_of(with(pp4_chunks(), "--global-batch-size", "20"), 4)
                .find("to be a multiple of --pipeline-model-parallel-size (4)"),
            std::string::npos);
  // Without model chunks the group groups nothing, as in Megatron: accepted.
  EXPECT_EQ(error_of(with(with(base_flags(), "--pipeline-model-parallel-size", "2"),
                          "--microbatch-group-size-per-virtual-pipeline-stage", "3"),
                     2),
            "");
}

TEST(Arguments, HierarchicalContextParallelSizesReadMegatronsForms) {
  // Megatron's GPT configurations write the sizes as "2 2" and "[2 2]"; argparse's nargs '+' gives 2 2.
  for (const std::vector<std::string>& sizes :
       {std::vector<std::string>{"2 2"}, {"[2 2]"}, {"2", "2"}, {"[2,", "2]"}, {"2,2"}}) {
    std::vector<std::string> flags =
        with(with(with(base_flags(), "--context-parallel-size", "4"), "--cp-comm-type", "a2a+p2p"),
             "--attention-backend", "flash");
    flags.push_back("--hierarchical-context-parallel-sizes");
    flags.insert(flags.end(), sizes.begin(), sizes.end());
    absl::StatusOr<Arguments> parsed = parse_arguments(flags);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    ASSERT_EQ(prepare_arguments(*parsed).message(), "") << sizes.front();
    const absl::StatusOr<std::vector<int64_t>> levels = hierarchical_context_parallel_sizes(*parsed);
    ASSERT_TRUE(levels.ok());
    EXPECT_EQ(*levels, (std::vector<int64_t>{2, 2})) << sizes.front();
    EXPECT_EQ(context_inner_size(*parsed), 2);
    EXPECT_TRUE(uses_all_to_all_ring(*parsed));
  }
  // The fused attention backend has no per-block form for the ring.
  absl::StatusOr<Arguments> fused = parse_arguments(
      with(with(with(with(with(base_flags(), "--context-parallel-size", "4"), "--cp-comm-type", "a2a+p2p"),
                     "--hierarchical-context-parallel-sizes", "2 2"),
                "--attention-backend", "fused"),
           "--bf16", ""));
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_NE(prepare_arguments(*fused).message().find("--cp-comm-type a2a+p2p runs each ring block with the exact"),
            std::string::npos)
      << prepare_arguments(*fused).message();
}

TEST(Arguments, ExpertTensorParallelSizeIsCheckedAsMegatronsExpertGridAndNoted) {
  // Megatron's dense test configuration: TP 2 x PP 2 x CP 2 with the other rank order and expert
  // TP 4 on 8 ranks (expert data-parallel 1 = data-parallel 1).
  const std::vector<std::string> flags =
      with(with(with(with(with(with(base_flags(), "--tensor-model-parallel-size", "2"), "--pipeline-model-parallel-size",
                               "2"),
                          "--context-parallel-size", "2"),
                     "--use-tp-pp-dp-mapping", ""),
                "--expert-tensor-parallel-size", "4"),
           "--sequence-parallel", "");
  absl::StatusOr<Arguments> parsed = parse_arguments(flags);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(prepare_arguments(*parsed).message(), "");
  ASSERT_EQ(prepare_for_world(*parsed, 8).message(), "");
  EXPECT_EQ(parsed->expert_tensor_parallel_size, 4);
  ASSERT_FALSE(parsed->notes.empty());
  EXPECT_NE(parsed->notes.back().find("--expert-tensor-parallel-size 4: this model has no expert"), std::string::npos)
      << parsed->notes.back();
  // Equal to TP (Megatron's default): nothing to note.
  absl::StatusOr<Arguments> same = parse_arguments(with(base_flags(), "--expert-tensor-parallel-size", "1"));
  ASSERT_TRUE(same.ok());
  ASSERT_TRUE(prepare_arguments(*same).ok());
  ASSERT_TRUE(prepare_for_world(*same, 2).ok());
  EXPECT_TRUE(same->notes.empty());
}

}  // namespace
}  // namespace gpt

// A checkpoint's saved arguments read back (train/args/saved_arguments.h): the text a validated run
// saves reads back to the same canonical text for every row and passes; each value the flags refuse
// is refused naming its flag; lines of flags this program does not know are skipped.
#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "train/args/arguments.h"
#include "train/args/saved_arguments.h"
#include "train/rank_agreement.h"

namespace gpt {
namespace {

Arguments prepared(std::vector<std::string> extra) {
  std::vector<std::string> argv = {"pretrain_gpt", "--num-layers", "4", "--hidden-size", "64", "--num-attention-heads",
                                   "8", "--seq-length", "32", "--max-position-embeddings", "64", "--micro-batch-size",
                                   "2", "--train-iters", "3", "--lr", "1e-3", "--vocab-size", "500"};
  if (std::find(extra.begin(), extra.end(), "--data-path") == extra.end()) argv.push_back("--mock-data");
  argv.insert(argv.end(), extra.begin(), extra.end());
  absl::StatusOr<Arguments> args = parse_arguments(argv);
  EXPECT_TRUE(args.ok()) << args.status();
  const absl::Status prepared_status = prepare_arguments(*args);
  EXPECT_TRUE(prepared_status.ok()) << prepared_status;
  return *args;
}

TEST(SavedArguments, ValidRunsReadBackExactlyAndPass) {
  const std::vector<std::vector<std::string>> runs = {
      {},
      {"--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu", "--group-query-attention",
       "--num-query-groups", "2", "--disable-bias-linear", "--rotary-base", "500000", "--norm-epsilon", "1e-6"},
      {"--bf16", "--use-distributed-optimizer", "--data-path", "a", "b", "--tokenizer-type", "NullTokenizer",
       "--split", "9,1,0", "--hidden-dropout", "0", "--apply-layernorm-1p", "--qk-layernorm"},
      {"--squared-relu", "--disable-bias-linear", "--rotary-percent", "0.5", "--position-embedding-type", "rope",
       "--untie-embeddings-and-output-weights", "--init-method-std", "0.006"},
  };
  for (const std::vector<std::string>& extra : runs) {
    const std::string saved = canonical_arguments(prepared(extra));
    absl::StatusOr<Arguments> read = arguments_from_saved(saved);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(canonical_arguments(*read), saved);  // every row's value, exactly
    EXPECT_TRUE(validate_saved_arguments(saved).ok()) << validate_saved_arguments(saved);
  }
}

TEST(SavedArguments, RefusesWhatTheFlagsRefuseNamingTheFlag) {
  const std::string saved = canonical_arguments(prepared({"--position-embedding-type", "rope"}));
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"--norm-epsilon", "-1"},       {"--norm-epsilon", "0"},       {"--norm-epsilon", "nan"},
      {"--norm-epsilon", "1e300"},    {"--rotary-base", "0"},        {"--rotary-base", "inf"},
      {"--num-layers", "0"},          {"--num-layers", "x"},         {"--hidden-dropout", "1"},
      {"--normalization", "'Batch'"}, {"--swiglu", "yes"},           {"--kv-channels", "-8"},
      {"--seq-length", "65"},         {"--rotary-percent", "0"},     {"--init-method-std", "1e39"},
  };
  for (const auto& [flag, value] : edits) {
    const absl::Status status = validate_saved_arguments(absl::StrCat(saved, flag, " ", value, "\n"));
    EXPECT_FALSE(status.ok()) << flag << " " << value;
    EXPECT_NE(status.message().find(flag), std::string::npos) << status.message();
  }
}

TEST(SavedArguments, SkipsUnknownFlagsAndKeepsDefaults) {
  // An import's subset, with its tokenizer ids (no pretrain_gpt flags).
  const std::string saved =
      "--num-layers 2\n--hidden-size 64\n--ffn-hidden-size 96\n--num-attention-heads 8\n--kv-channels 8\n"
      "--seq-length 64\n--max-position-embeddings 64\n--norm-epsilon 9.9999999999999995e-07\n"
      "--position-embedding-type 'rope'\n--rotary-base 10000.0\n--hf-eos-token-ids '2,7'\n--hf-bos-token-id 1\n";
  EXPECT_TRUE(validate_saved_arguments(saved).ok()) << validate_saved_arguments(saved);
  absl::StatusOr<Arguments> read = arguments_from_saved(saved);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->num_layers, 2);
  EXPECT_EQ(read->micro_batch_size, Arguments{}.micro_batch_size);
}

}  // namespace
}  // namespace gpt

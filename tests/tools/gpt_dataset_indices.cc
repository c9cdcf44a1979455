// Builds the train/valid/test datasets of --data-path as pretrain_gpt does (build_gpt_datasets:
// split, GPT dataset indices, blends, the index cache) without the model, and prints each split's
// size and its first samples, for the test against Megatron's index building done with numpy.
//   gpt_dataset_indices --data-path WORDS... --split S --seed N --seq-length L --samples T,V,E
//       --data-cache-path DIR [--vocab-file F --merge-file F | --null-vocab-size N] [--print K]
// Prints "split NAME SIZE" and then K lines "sample I TOKENS..." for each split it built.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "data/gpt_dataset_builder.h"
#include "data/indexed_dataset.h"

namespace {

int usage(const std::string& problem) {
  std::fprintf(stderr, "error: %s\n", problem.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  gpt::GptDatasetsConfig config;
  std::string vocab_file, merge_file;
  int64_t null_vocab_size = -1, print = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (flag == "--data-path") {
      while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) config.data_path.push_back(argv[++i]);
    } else if (flag == "--split") {
      config.split = next();
    } else if (flag == "--seed") {
      if (!absl::SimpleAtoi(next(), &config.seed)) return usage("--seed");
    } else if (flag == "--seq-length") {
      if (!absl::SimpleAtoi(next(), &config.seq_length)) return usage("--seq-length");
    } else if (flag == "--samples") {
      const std::vector<std::string> parts = absl::StrSplit(next(), ',');
      if (parts.size() != 3) return usage("--samples T,V,E");
      for (int s = 0; s < 3; ++s) {
        if (!absl::SimpleAtoi(parts[s], &config.num_samples[s])) return usage("--samples T,V,E");
      }
    } else if (flag == "--data-cache-path") {
      config.cache_dir = next();
    } else if (flag == "--vocab-file") {
      vocab_file = next();
    } else if (flag == "--merge-file") {
      merge_file = next();
    } else if (flag == "--null-vocab-size") {
      if (!absl::SimpleAtoi(next(), &null_vocab_size)) return usage("--null-vocab-size");
    } else if (flag == "--print") {
      if (!absl::SimpleAtoi(next(), &print)) return usage("--print");
    } else {
      return usage("unknown flag " + flag);
    }
  }
  // Refused here too, before anything is opened: a zero length divided by zero in the indices.
  if (config.seq_length < 1) return usage("--seq-length must be >= 1");
  if (print < 0) return usage("--print must be >= 0");
  config.tokenizer = null_vocab_size >= 0 ? gpt::TokenizerIdentity::null_tokenizer(null_vocab_size)
                                          : gpt::TokenizerIdentity::gpt2_bpe(vocab_file, merge_file);
  auto open = [](const std::string& prefix) -> absl::StatusOr<std::shared_ptr<const gpt::DocumentStore>> {
    GPT_ASSIGN_OR_RETURN(std::unique_ptr<gpt::IndexedDataset> opened, gpt::IndexedDataset::open(prefix));
    return std::shared_ptr<const gpt::DocumentStore>(std::move(opened));
  };
  auto built = gpt::build_gpt_datasets(config, open);
  if (!built.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(built.status().message()).c_str());
    return 1;
  }
  const char* names[3] = {"train", "valid", "test"};
  for (int s = 0; s < 3; ++s) {
    const auto& source = (*built)[s];
    if (!source) continue;
    std::printf("split %s %lld\n", names[s], static_cast<long long>(config.num_samples[s]));
    std::vector<int32_t> tokens(static_cast<size_t>(source->seq_length() + 1));
    for (int64_t i = 0; i < std::min(print, config.num_samples[s]); ++i) {
      source->sample(i, tokens);
      std::printf("sample %lld", static_cast<long long>(i));
      for (int32_t t : tokens) std::printf(" %d", t);
      std::printf("\n");
    }
  }
  return 0;
}

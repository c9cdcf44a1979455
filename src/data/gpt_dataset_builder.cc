#include "data/gpt_dataset_builder.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "data/blended_dataset.h"
#include "data/dataset_split.h"
#include "data/gpt_dataset.h"

namespace gpt {
namespace {

constexpr const char* kSplitNames[3] = {"train", "valid", "test"};

}  // namespace

absl::StatusOr<DataBlend> parse_data_path(const std::vector<std::string>& words) {
  if (words.empty()) return absl::InvalidArgumentError("--data-path needs at least one dataset prefix");
  DataBlend blend;
  // Prefixes are stripped of surrounding whitespace, as Megatron's (it names the cache files).
  auto stripped = [](const std::vector<std::string>& prefixes) {
    std::vector<std::string> out;
    for (const std::string& prefix : prefixes) out.emplace_back(absl::StripAsciiWhitespace(prefix));
    return out;
  };
  if (words.size() % 2 == 1) {
    blend.prefixes = stripped(words);
    return blend;
  }
  std::vector<double> weights;
  std::vector<std::string> prefixes;
  size_t numbers = 0;
  for (size_t i = 0; i < words.size(); i += 2) {
    double weight = 0.0;
    if (absl::SimpleAtod(words[i], &weight)) ++numbers;
    weights.push_back(weight);
    prefixes.push_back(words[i + 1]);
  }
  if (numbers == 0) {
    blend.prefixes = stripped(words);
    return blend;
  }
  if (numbers != weights.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--data-path ", absl::StrJoin(words, " "),
                                                   ": give weight prefix pairs, or prefixes only (weighed by size)"));
  }
  blend.prefixes = stripped(prefixes);
  blend.weights = std::move(weights);
  return blend;
}

absl::StatusOr<std::array<std::shared_ptr<const SampleSource>, 3>> build_gpt_datasets(const GptDatasetsConfig& config,
                                                                                      const CorpusOpener& open) {
  // Every index below divides by the sequence length; callers other than pretrain_gpt (whose
  // arguments are validated) reach here with whatever they were given.
  if (config.seq_length < 1) {
    return absl::InvalidArgumentError(absl::StrCat("the sequence length must be >= 1 (got ", config.seq_length, ")"));
  }
  for (int64_t samples : config.num_samples) {
    if (samples < 0) return absl::InvalidArgumentError(absl::StrCat("sample counts must be >= 0 (got ", samples, ")"));
  }
  GPT_ASSIGN_OR_RETURN(const DataBlend blend, parse_data_path(config.data_path));
  GPT_ASSIGN_OR_RETURN(const auto split_weights, parse_split(config.split));
  std::vector<double> weights;
  if (blend.weights) {
    GPT_ASSIGN_OR_RETURN(weights, normalize_blend_weights(*blend.weights, blend.prefixes));
  }
  const bool by_size = !blend.weights && blend.prefixes.size() > 1;

  std::array<std::vector<std::shared_ptr<const SampleSource>>, 3> per_split;
  std::array<std::vector<double>, 3> sizes;  // samples per dataset (one epoch each), for blends by size
  for (size_t k = 0; k < blend.prefixes.size(); ++k) {
    const std::string& prefix = blend.prefixes[k];
    GPT_ASSIGN_OR_RETURN(std::shared_ptr<const DocumentStore> corpus, open(prefix));
    const std::array<DocumentRange, 3> ranges = split_documents(split_weights, corpus->num_documents());
    for (int s = 0; s < 3; ++s) {
      if (config.num_samples[s] == 0) continue;
      if (ranges[s].size() == 0) continue;  // as Megatron: a split without documents has no dataset
      GptDatasetConfig dataset;
      dataset.seed = config.seed;
      dataset.seq_length = config.seq_length;
      if (blend.weights) {
        dataset.num_samples = samples_needed(weights[k], config.num_samples[s]);
      } else if (!by_size) {
        dataset.num_samples = config.num_samples[s];
      }  // else one epoch
      dataset.documents = ranges[s];
      dataset.split_name = kSplitNames[s];
      dataset.cache_dir = config.cache_dir;
      dataset.dataset_path = prefix;
      dataset.split = config.split;
      dataset.tokenizer = config.tokenizer;
      GPT_ASSIGN_OR_RETURN(std::unique_ptr<GptDataset> built, GptDataset::build(corpus, dataset));
      sizes[s].push_back(static_cast<double>(built->size()));
      per_split[s].push_back(std::move(built));
    }
  }
  std::array<std::shared_ptr<const SampleSource>, 3> sources;
  for (int s = 0; s < 3; ++s) {
    if (per_split[s].empty() || per_split[s].size() != blend.prefixes.size()) continue;  // some dataset has no documents for it
    if (blend.prefixes.size() == 1) {
      sources[s] = per_split[s][0];  // a blend of one is the dataset itself
      continue;
    }
    std::vector<double> split_weights_now = weights;
    if (by_size) {
      double total = 0.0;
      for (double size : sizes[s]) total += size;
      if (total < static_cast<double>(config.num_samples[s])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--data-path without weights blends one epoch of each dataset (Megatron's rule): ", total, " ",
            kSplitNames[s], " samples of --seq-length ", config.seq_length, ", but the run reads ", config.num_samples[s],
            "; give weight prefix pairs to repeat the data"));
      }
      split_weights_now.clear();
      for (double size : sizes[s]) split_weights_now.push_back(size / total);
    }
    sources[s] = std::make_shared<BlendedDataset>(per_split[s], split_weights_now, config.num_samples[s]);
  }
  if (!sources[0]) {
    return absl::InvalidArgumentError(absl::StrCat("--split ", config.split, " leaves no documents for training"));
  }
  return sources;
}

}  // namespace gpt

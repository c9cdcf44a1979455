// --data-path and --split to the train, valid and test sample sources, as Megatron's
// BlendedMegatronDatasetBuilder builds them from a blend (megatron/core/datasets/
// blended_megatron_dataset_builder.py, utils.py get_blend_from_list; the same in core_v0.8.0 and
// current Megatron):
//
//   one prefix             one GPTDataset per split, holding the samples the run reads from it
//   weight prefix pairs    a GPTDataset per prefix and split holding its weight's share of the
//                          samples plus 0.5% (samples_needed), blended by weight; a single weighted
//                          prefix is such a blend of one
//   several prefixes       (no weights) a GPTDataset per prefix and split holding one epoch
//                          (Megatron's num_samples None), blended in proportion to those epochs'
//                          sample counts; the blend holds min(samples the run reads, all of them),
//                          and a run that would read more is refused here (Megatron's data
//                          iterator would run dry mid-run)
//
// An even number of words is weight prefix pairs when every other word, from the first, is a
// number, and prefixes when none is (Megatron's rule); a mixture is refused.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/document_store.h"
#include "data/megatron_description.h"
#include "data/sample_source.h"

namespace gpt {

struct DataBlend {
  std::vector<std::string> prefixes;
  std::optional<std::vector<double>> weights;  // as given, not normalized; none: weigh by size
};
absl::StatusOr<DataBlend> parse_data_path(const std::vector<std::string>& words);

struct GptDatasetsConfig {
  std::vector<std::string> data_path;   // --data-path words
  std::string split;                    // --split as given
  uint64_t seed = 1234;
  int64_t seq_length = 0;
  std::array<int64_t, 3> num_samples{}; // samples the run reads from train, valid, test; 0: not built
  std::string cache_dir;                // empty: no index cache
  TokenizerIdentity tokenizer;
};

// Opens (and checks) the corpus of a prefix.
using CorpusOpener = std::function<absl::StatusOr<std::shared_ptr<const DocumentStore>>(const std::string& prefix)>;

// The train, valid and test sources; a split is null when the run reads nothing from it or --split
// gives it no documents (in some dataset of a blend). Training without documents is an error.
absl::StatusOr<std::array<std::shared_ptr<const SampleSource>, 3>> build_gpt_datasets(const GptDatasetsConfig& config,
                                                                                      const CorpusOpener& open);

}  // namespace gpt

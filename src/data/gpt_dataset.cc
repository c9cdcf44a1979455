#include "data/gpt_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/logging.h"
#include "data/md5.h"
#include "data/npy_file.h"
#include "data/numpy_random_state.h"

namespace gpt {
namespace {

// Samples hold seq_length + 1 tokens: inputs and the targets shifted by one
// (add_extra_token_to_sequence).
constexpr int64_t kExtraToken = 1;
// Megatron's rule: a final epoch used for less than this fraction is shuffled on its own.
constexpr double kSeparateFinalEpochThreshold = 0.80;
// _build_shuffle_index: uint32 below this many samples, int64 from it on.
constexpr int64_t kShuffleIndexInt64From = int64_t{UINT32_MAX} - 1;

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// Written to a temporary name and renamed: a reader sees the whole text or none.
absl::Status write_text(const std::string& path, const std::string& text) {
  const std::string temporary = absl::StrCat(path, ".tmp.", ::getpid());
  std::error_code error;
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (out) std::filesystem::rename(temporary, path, error);
  if (!out || error) {
    std::filesystem::remove(temporary, error);
    return absl::DataLossError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

template <typename To, typename From>
std::vector<To> converted(const std::vector<From>& values) {
  return std::vector<To>(values.begin(), values.end());
}

// An array of Megatron's dtype `Stored`, widened to `Held` in memory.
template <typename Stored, typename Held>
absl::StatusOr<NpyArray<Held>> read_widened(const std::string& path) {
  GPT_ASSIGN_OR_RETURN(NpyArray<Stored> stored, read_npy<Stored>(path));
  return NpyArray<Held>{std::move(stored.shape), converted<Held>(stored.values)};
}

}  // namespace

std::string GptDataset::megatron_description() const {
  MegatronDatasetIdentity identity;
  identity.dataset_path = config_.dataset_path;
  identity.num_samples = config_.num_samples;
  identity.index_split = config_.split_name;
  identity.random_seed = config_.seed;
  identity.sequence_length = config_.seq_length;
  identity.split = config_.split;
  if (auto weights = parse_split(config_.split); weights.ok()) identity.split_matrix = split_matrix(*weights);
  identity.tokenizer = config_.tokenizer;
  return megatron_dataset_description(identity);
}

std::string GptDataset::corpus_key() const {
  std::ostringstream out;
  out << "GPTDataset indices in numpy RandomState order\ncorpus: " << store_->identity() << "\nsplit: "
      << config_.split_name << " documents [" << config_.documents.begin << ", " << config_.documents.end
      << ")\nseq_length: " << config_.seq_length << "\nseed: " << config_.seed << "\nnum_samples: "
      << (config_.num_samples ? absl::StrCat(*config_.num_samples) : "one epoch") << "\n";
  return out.str();
}

void GptDataset::build_indices() {
  const DocumentRange range = config_.documents;
  int64_t tokens_per_epoch = 0;
  for (int64_t d = range.begin; d < range.end; ++d) tokens_per_epoch += store_->document_length(d);
  const int64_t s = config_.seq_length;
  // _get_num_epochs: enough epochs for num_samples * seq_length + 1 tokens.
  num_epochs_ = 1;
  if (config_.num_samples) {
    for (int64_t tokens = tokens_per_epoch; tokens < *config_.num_samples * s + kExtraToken; tokens += tokens_per_epoch) {
      ++num_epochs_;
    }
  }
  bool separate_final_epoch = false;
  int64_t samples_before_final_epoch = 0;
  if (num_epochs_ > 1) {
    samples_before_final_epoch = ((num_epochs_ - 1) * tokens_per_epoch - kExtraToken) / s;
    const int64_t samples_from_final_epoch = *config_.num_samples - samples_before_final_epoch;
    const int64_t samples_per_epoch = (tokens_per_epoch - kExtraToken) / s;
    GPT_CHECK(samples_from_final_epoch >= 0 && samples_from_final_epoch <= samples_per_epoch + 1);
    separate_final_epoch = samples_from_final_epoch <
                           static_cast<int64_t>(kSeparateFinalEpochThreshold * static_cast<double>(samples_per_epoch));
  }

  NumpyRandomState random_state(static_cast<uint32_t>(config_.seed));

  // Document index (_build_document_index): the range epoch after epoch, shuffled whole, or the
  // epochs before the final one shuffled, then the final one.
  const int64_t per_epoch = range.size();
  document_index_.resize(static_cast<size_t>(per_epoch * num_epochs_));
  for (int64_t e = 0; e < num_epochs_; ++e) {
    std::iota(document_index_.begin() + e * per_epoch, document_index_.begin() + (e + 1) * per_epoch,
              static_cast<int32_t>(range.begin));
  }
  std::span<int32_t> documents(document_index_);
  if (separate_final_epoch) {
    const size_t boundary = static_cast<size_t>(per_epoch * (num_epochs_ - 1));
    random_state.shuffle(documents.first(boundary));
    random_state.shuffle(documents.subspan(boundary));
  } else {
    random_state.shuffle(documents);
  }

  // Sample index (helpers.cpp build_sample_idx, dropping a last partial sample): walk the
  // document index in steps of seq_length tokens, each sample re-reading the previous one's last
  // token.
  const int64_t total_samples = (num_epochs_ * tokens_per_epoch - kExtraToken) / s;
  const int64_t last_position = static_cast<int64_t>(document_index_.size()) - 1;
  sample_index_.assign(static_cast<size_t>(2 * (total_samples + 1)), 0);
  int64_t position = 0, offset = 0;
  for (int64_t i = 1; i <= total_samples; ++i) {
    int64_t remaining = s + kExtraToken;
    while (remaining != 0) {
      const int64_t length = store_->document_length(document_index_[static_cast<size_t>(position)]) - offset;
      remaining -= length;
      if (remaining <= 0) {
        offset += remaining + length - kExtraToken;
        remaining = 0;
      } else if (position == last_position) {
        // Out of documents (only a partial last sample can get here).
        offset = store_->document_length(document_index_[static_cast<size_t>(position)]) - kExtraToken;
        break;
      } else {
        ++position;
        offset = 0;
      }
    }
    sample_index_[2 * i] = position;
    sample_index_[2 * i + 1] = offset;
  }

  // Shuffle index (_build_shuffle_index): the samples before the final epoch, then its own.
  shuffle_index_.resize(static_cast<size_t>(total_samples));
  std::iota(shuffle_index_.begin(), shuffle_index_.end(), int64_t{0});
  std::span<int64_t> samples(shuffle_index_);
  const size_t boundary = separate_final_epoch ? static_cast<size_t>(samples_before_final_epoch) : samples.size();
  random_state.shuffle(samples.first(boundary));
  if (boundary < samples.size()) random_state.shuffle(samples.subspan(boundary));
}

absl::Status GptDataset::check_loaded_indices() const {
  const DocumentRange range = config_.documents;
  const int64_t per_epoch = range.size();
  const int64_t documents = static_cast<int64_t>(document_index_.size());
  if (documents == 0 || documents % per_epoch != 0) {
    return absl::DataLossError(absl::StrCat("document index of ", documents, " entries is not whole epochs of ", per_epoch));
  }
  for (int64_t p = 0; p < documents; ++p) {
    const int32_t d = document_index_[static_cast<size_t>(p)];
    if (d < range.begin || d >= range.end) {
      return absl::DataLossError(absl::StrCat("document index entry ", p, " is ", d, ", outside the split [",
                                              range.begin, ", ", range.end, ")"));
    }
  }
  if (sample_index_.size() % 2 != 0 || sample_index_.size() / 2 != shuffle_index_.size() + 1 ||
      (config_.num_samples && size() < *config_.num_samples)) {
    return absl::DataLossError(absl::StrCat("sample index of ", sample_index_.size() / 2, " rows and shuffle index of ",
                                            size(), " entries do not describe ",
                                            config_.num_samples ? absl::StrCat(*config_.num_samples) : "an epoch of",
                                            " samples"));
  }
  // Each sample must be exactly seq_length + 1 tokens of the document stream: what sample()
  // relies on. Positions only grow, so this walks the document index once.
  auto length_at = [&](int64_t position) {
    return store_->document_length(document_index_[static_cast<size_t>(position)]);
  };
  for (int64_t i = 0; i + 1 < static_cast<int64_t>(sample_index_.size() / 2); ++i) {
    const int64_t position = sample_index_[2 * i], offset = sample_index_[2 * i + 1];
    const int64_t next_position = sample_index_[2 * i + 2], next_offset = sample_index_[2 * i + 3];
    if (position < 0 || next_position < position || next_position >= documents || offset < 0 ||
        offset >= std::max<int64_t>(length_at(position), 1) || next_offset < 0 || next_offset >= length_at(next_position)) {
      return absl::DataLossError(absl::StrCat("sample index row ", i, " or ", i + 1, " lies outside the document index"));
    }
    int64_t tokens = next_offset + 1 - offset;
    for (int64_t p = position; p < next_position; ++p) tokens += length_at(p);
    if (tokens != config_.seq_length + kExtraToken) {
      return absl::DataLossError(absl::StrCat("sample ", i, " spans ", tokens, " tokens, not --seq-length + 1 = ",
                                              config_.seq_length + kExtraToken));
    }
  }
  std::vector<bool> seen(shuffle_index_.size(), false);
  for (size_t k = 0; k < shuffle_index_.size(); ++k) {
    const int64_t i = shuffle_index_[k];
    if (i < 0 || i >= size() || seen[static_cast<size_t>(i)]) {
      return absl::DataLossError(absl::StrCat("shuffle index entry ", k, " (", i, ") is not part of a permutation of ", size()));
    }
    seen[static_cast<size_t>(i)] = true;
  }
  return absl::OkStatus();
}

bool GptDataset::sample_index_fits_int32(int64_t document_index_size) const {
  return std::max(longest_document_, document_index_size) <= INT32_MAX;
}

absl::Status GptDataset::load_cached(const std::string& description) {
  const std::optional<std::string> cached_description = read_text(cache_base_ + "-description.txt");
  if (cached_description != description) return absl::NotFoundError("no cached indices");
  if (read_text(cache_base_ + "-corpus_key.txt") != corpus_key()) {
    return absl::FailedPreconditionError(
        "their corpus key does not match (the data at this path changed, or they were written by another "
        "program, such as Megatron, which does not record the data's content)");
  }
  auto documents = read_npy<int32_t>(cache_base_ + "-document_index.npy");
  GPT_RETURN_IF_ERROR(documents.status());
  // The dtypes are Megatron's choices for these sizes; another one is damage.
  sample_index_int32_ = sample_index_fits_int32(static_cast<int64_t>(documents->values.size()));
  auto samples = sample_index_int32_ ? read_widened<int32_t, int64_t>(cache_base_ + "-sample_index.npy")
                                     : read_npy<int64_t>(cache_base_ + "-sample_index.npy");
  GPT_RETURN_IF_ERROR(samples.status());
  if (documents->shape.size() != 1 || samples->shape.size() != 2 || samples->shape[1] != 2 || samples->shape[0] < 1) {
    return absl::DataLossError("unexpected array shapes");
  }
  shuffle_index_uint32_ = samples->shape[0] - 1 < kShuffleIndexInt64From;
  auto shuffled = shuffle_index_uint32_ ? read_widened<uint32_t, int64_t>(cache_base_ + "-shuffle_index.npy")
                                        : read_npy<int64_t>(cache_base_ + "-shuffle_index.npy");
  GPT_RETURN_IF_ERROR(shuffled.status());
  if (shuffled->shape.size() != 1) return absl::DataLossError("unexpected array shapes");
  document_index_ = std::move(documents->values);
  sample_index_ = std::move(samples->values);
  shuffle_index_ = std::move(shuffled->values);
  return check_loaded_indices();
}

absl::Status GptDataset::write_cache(const std::string& description) {
  std::error_code error;
  std::filesystem::create_directories(config_.cache_dir, error);
  if (error) return absl::PermissionDeniedError(absl::StrCat("--data-cache-path ", config_.cache_dir, ": ", error.message()));
  const std::string key_path = cache_base_ + "-corpus_key.txt", description_path = cache_base_ + "-description.txt";
  const std::string paths[3] = {cache_base_ + "-document_index.npy", cache_base_ + "-sample_index.npy",
                                cache_base_ + "-shuffle_index.npy"};
  // The key goes first and comes back last: an interrupted rewrite leaves a set without it, which
  // is rebuilt. A failed write removes what it wrote, so no incomplete set is left behind.
  std::filesystem::remove(key_path, error);
  auto fail = [&](const absl::Status& status) {
    for (const std::string& path : paths) std::filesystem::remove(path, error);
    std::filesystem::remove(description_path, error);
    return absl::Status(status.code(), absl::StrCat("--data-cache-path ", config_.cache_dir, ": ", status.message()));
  };
  const int64_t rows = static_cast<int64_t>(sample_index_.size() / 2);
  absl::Status written = write_npy<int32_t>(paths[0], {static_cast<int64_t>(document_index_.size())}, document_index_);
  if (written.ok()) {
    written = sample_index_int32_ ? write_npy<int32_t>(paths[1], {rows, 2}, converted<int32_t>(sample_index_))
                                  : write_npy<int64_t>(paths[1], {rows, 2}, sample_index_);
  }
  if (written.ok()) {
    const std::vector<int64_t> shape = {size()};
    written = shuffle_index_uint32_ ? write_npy<uint32_t>(paths[2], shape, converted<uint32_t>(shuffle_index_))
                                    : write_npy<int64_t>(paths[2], shape, shuffle_index_);
  }
  if (written.ok()) written = write_text(description_path, description);
  if (written.ok()) written = write_text(key_path, corpus_key());
  return written.ok() ? written : fail(written);
}

absl::Status GptDataset::load_or_build() {
  if (config_.cache_dir.empty()) {
    build_indices();
    return absl::OkStatus();
  }
  const std::string description = megatron_description();
  cache_base_ = absl::StrCat(config_.cache_dir, "/", md5_hex(description), "-GPTDataset-", config_.split_name);
  const absl::Status loaded = load_cached(description);
  if (loaded.ok()) {
    num_epochs_ = static_cast<int64_t>(document_index_.size()) / config_.documents.size();
    loaded_from_cache_ = true;
    return absl::OkStatus();
  }
  if (!absl::IsNotFound(loaded)) {
    // A damaged or foreign set is rebuilt, not trusted.
    GPT_LOG_WARNING() << "cached " << config_.split_name << " indices under " << cache_base_
                      << "-* are not used, rebuilding them: " << loaded.message();
  }
  build_indices();
  sample_index_int32_ = sample_index_fits_int32(static_cast<int64_t>(document_index_.size()));
  shuffle_index_uint32_ = size() < kShuffleIndexInt64From;
  return write_cache(description);
}

absl::StatusOr<std::unique_ptr<GptDataset>> GptDataset::build(std::shared_ptr<const DocumentStore> store,
                                                              const GptDatasetConfig& config) {
  std::unique_ptr<GptDataset> dataset(new GptDataset(std::move(store), config));
  if (config.num_samples == 0) return dataset;  // nothing will be read from this split
  if (config.seed > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("--seed ", config.seed, ": the dataset indices are shuffled with ",
                                                   "numpy's RandomState, as Megatron's are, which takes seeds 0 to 2^32 - 1"));
  }
  // The document index holds int32 document numbers, as Megatron's does.
  if (config.documents.begin < 0 || config.documents.size() <= 0 || config.documents.end > dataset->store_->num_documents() ||
      config.documents.end > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("the ", config.split_name, " split of ", dataset->store_->identity(),
                                                   ": documents [", config.documents.begin, ", ", config.documents.end,
                                                   ") are not a range of at most 2^31 - 1 documents of the corpus"));
  }
  int64_t tokens = 0;
  for (int64_t d = config.documents.begin; d < config.documents.end; ++d) tokens += dataset->store_->document_length(d);
  if (tokens <= config.seq_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", config.split_name, " split of ", dataset->store_->identity(), " holds ", tokens,
        " tokens in documents [", config.documents.begin, ", ", config.documents.end,
        "), too few for one sample of --seq-length ", config.seq_length, " + 1 (check --split)"));
  }
  for (int64_t d = 0; d < dataset->store_->num_documents(); ++d) {
    dataset->longest_document_ = std::max(dataset->longest_document_, dataset->store_->document_length(d));
  }
  GPT_RETURN_IF_ERROR(dataset->load_or_build());
  return dataset;
}

void GptDataset::sample(int64_t index, std::span<int32_t> tokens) const {
  GPT_CHECK(index >= 0 && index < size()) << config_.split_name << " sample " << index << " of " << size();
  GPT_CHECK_EQ(static_cast<int64_t>(tokens.size()), config_.seq_length + 1);
  const int64_t i = shuffle_index_[static_cast<size_t>(index)];
  int64_t position = sample_index_[2 * i], offset = sample_index_[2 * i + 1];
  const int64_t last_position = sample_index_[2 * i + 2], last_offset = sample_index_[2 * i + 3];
  size_t written = 0;
  while (true) {
    const int64_t document = document_index_[static_cast<size_t>(position)];
    const int64_t end = position == last_position ? last_offset + 1 : store_->document_length(document);
    const int64_t count = end - offset;
    store_->read(document, offset, count, tokens.data() + written);
    written += static_cast<size_t>(count);
    if (position == last_position) break;
    ++position;
    offset = 0;
  }
  GPT_CHECK_EQ(written, tokens.size()) << "sample " << index << " assembled from the indices";
}

}  // namespace gpt

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
#include "core/philox.h"
#include "data/npy_file.h"

namespace gpt {
namespace {

// Samples hold seq_length + 1 tokens: inputs and the targets shifted by one.
constexpr int64_t kExtraToken = 1;
// Megatron's rule: a final epoch used for less than this fraction is shuffled on its own.
constexpr double kSeparateFinalEpochThreshold = 0.80;

// Fisher-Yates over [begin, end) with draws from the counter-based RNG stream `key`.
template <typename T>
void shuffle(std::vector<T>& values, size_t begin, size_t end, uint64_t key) {
  for (size_t i = end - begin; i > 1; --i) {
    const uint64_t j = philox_uint64(key, i) % i;
    std::swap(values[begin + i - 1], values[begin + j]);
  }
}

}  // namespace

std::string GptDataset::description() const {
  std::ostringstream out;
  out << "GPTDataset v1\ncorpus: " << store_->identity() << "\nsplit: " << config_.split_name << " documents ["
      << config_.documents.begin << ", " << config_.documents.end << ")\nseq_length: " << config_.seq_length
      << "\nseed: " << config_.seed << "\nnum_samples: " << config_.num_samples << "\n";
  return out.str();
}

void GptDataset::build_indices() {
  const DocumentRange range = config_.documents;
  int64_t tokens_per_epoch = 0;
  for (int64_t d = range.begin; d < range.end; ++d) tokens_per_epoch += store_->document_length(d);
  const int64_t s = config_.seq_length;
  num_epochs_ = 0;
  for (int64_t tokens = 0; (tokens - kExtraToken) / s < config_.num_samples || num_epochs_ == 0;) {
    ++num_epochs_;
    tokens += tokens_per_epoch;
  }
  bool separate_final_epoch = false;
  int64_t samples_before_final_epoch = 0;
  if (num_epochs_ > 1) {
    samples_before_final_epoch = ((num_epochs_ - 1) * tokens_per_epoch - kExtraToken) / s;
    const int64_t samples_from_final_epoch = config_.num_samples - samples_before_final_epoch;
    const int64_t samples_per_epoch = (tokens_per_epoch - kExtraToken) / s;
    GPT_CHECK(samples_from_final_epoch >= 0 && samples_from_final_epoch <= samples_per_epoch + 1);
    separate_final_epoch =
        samples_from_final_epoch < static_cast<int64_t>(kSeparateFinalEpochThreshold * static_cast<double>(samples_per_epoch));
  }

  // Document index: the range repeated num_epochs times, shuffled.
  const int64_t per_epoch = range.size();
  document_index_.resize(static_cast<size_t>(per_epoch * num_epochs_));
  for (int64_t e = 0; e < num_epochs_; ++e) {
    std::iota(document_index_.begin() + e * per_epoch, document_index_.begin() + (e + 1) * per_epoch,
              static_cast<int32_t>(range.begin));
  }
  const uint64_t document_key = philox_key(config_.seed, "gpt-dataset/document-index/" + config_.split_name);
  if (separate_final_epoch) {
    const size_t boundary = static_cast<size_t>(per_epoch * (num_epochs_ - 1));
    shuffle(document_index_, 0, boundary, document_key);
    shuffle(document_index_, boundary, document_index_.size(), document_key ^ 1);
  } else {
    shuffle(document_index_, 0, document_index_.size(), document_key);
  }

  // Sample index: walk the document index in steps of seq_length tokens (plus the shared one).
  const int64_t total_samples = (num_epochs_ * tokens_per_epoch - kExtraToken) / s;
  sample_index_.assign(static_cast<size_t>(2 * (total_samples + 1)), 0);
  int64_t position = 0, offset = 0;
  for (int64_t i = 1; i <= total_samples; ++i) {
    int64_t remaining = s + kExtraToken;
    while (remaining != 0) {
      const int64_t length = store_->document_length(document_index_[static_cast<size_t>(position)]) - offset;
      remaining -= length;
      if (remaining <= 0) {
        offset += remaining + length - kExtraToken;  // the next sample re-reads the last token
        remaining = 0;
      } else {
        ++position;
        offset = 0;
      }
    }
    sample_index_[2 * i] = position;
    sample_index_[2 * i + 1] = offset;
  }

  // Shuffle index.
  shuffle_index_.resize(static_cast<size_t>(total_samples));
  std::iota(shuffle_index_.begin(), shuffle_index_.end(), int64_t{0});
  const uint64_t shuffle_key = philox_key(config_.seed, "gpt-dataset/shuffle-index/" + config_.split_name);
  const size_t boundary = separate_final_epoch ? static_cast<size_t>(samples_before_final_epoch) : shuffle_index_.size();
  shuffle(shuffle_index_, 0, boundary, shuffle_key);
  shuffle(shuffle_index_, boundary, shuffle_index_.size(), shuffle_key ^ 1);
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
      size() < config_.num_samples) {
    return absl::DataLossError(absl::StrCat("sample index of ", sample_index_.size() / 2, " rows and shuffle index of ",
                                            size(), " entries do not describe ", config_.num_samples, " samples"));
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

absl::Status GptDataset::load_or_build() {
  if (config_.cache_dir.empty()) {
    build_indices();
    return absl::OkStatus();
  }
  const std::string text = description();
  const std::string base = absl::StrCat(config_.cache_dir, "/", absl::Hex(fnv1a_64(text), absl::kZeroPad16),
                                        "-GPTDataset-", config_.split_name);
  const std::string description_path = base + "-description.txt";
  const std::string paths[3] = {base + "-document_index.npy", base + "-sample_index.npy", base + "-shuffle_index.npy"};
  std::ifstream existing(description_path);
  if (existing) {
    std::stringstream contents;
    contents << existing.rdbuf();
    if (contents.str() == text) {
      auto documents = read_npy<int32_t>(paths[0]);
      auto samples = read_npy<int64_t>(paths[1]);
      auto shuffled = read_npy<int64_t>(paths[2]);
      absl::Status loaded = documents.ok() ? (samples.ok() ? shuffled.status() : samples.status()) : documents.status();
      if (loaded.ok() && (documents->shape.size() != 1 || samples->shape.size() != 2 || samples->shape[1] != 2 ||
                          shuffled->shape.size() != 1)) {
        loaded = absl::DataLossError("unexpected array shapes");
      }
      if (loaded.ok()) {
        document_index_ = std::move(documents->values);
        sample_index_ = std::move(samples->values);
        shuffle_index_ = std::move(shuffled->values);
        loaded = check_loaded_indices();
      }
      if (loaded.ok()) {
        num_epochs_ = static_cast<int64_t>(document_index_.size()) / config_.documents.size();
        loaded_from_cache_ = true;
        return absl::OkStatus();
      }
      // A damaged cache is rebuilt, not trusted.
      GPT_LOG_WARNING() << "cached " << config_.split_name << " indices under " << base
                        << "-* are damaged, rebuilding them: " << loaded.message();
    }
  }
  build_indices();
  std::error_code error;
  std::filesystem::create_directories(config_.cache_dir, error);
  if (error) return absl::PermissionDeniedError(absl::StrCat("--data-cache-path ", config_.cache_dir, ": ", error.message()));
  // A failed write removes the arrays already written, so no incomplete set is left behind (the
  // description, written last, is what marks a set complete).
  auto fail = [&](const absl::Status& status) {
    for (const std::string& path : paths) std::filesystem::remove(path, error);
    return absl::Status(status.code(), absl::StrCat("--data-cache-path ", config_.cache_dir, ": ", status.message()));
  };
  absl::Status written =
      write_npy<int32_t>(paths[0], {static_cast<int64_t>(document_index_.size())}, document_index_);
  if (written.ok()) {
    written = write_npy<int64_t>(paths[1], {static_cast<int64_t>(sample_index_.size() / 2), 2}, sample_index_);
  }
  if (written.ok()) written = write_npy<int64_t>(paths[2], {static_cast<int64_t>(shuffle_index_.size())}, shuffle_index_);
  if (!written.ok()) return fail(written);
  const std::string temporary = absl::StrCat(description_path, ".tmp.", ::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
    out.close();
    if (out) std::filesystem::rename(temporary, description_path, error);
    if (!out || error) {
      std::filesystem::remove(temporary, error);
      return fail(absl::DataLossError(absl::StrCat("cannot write ", description_path)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GptDataset>> GptDataset::build(std::shared_ptr<const DocumentStore> store,
                                                              const GptDatasetConfig& config) {
  std::unique_ptr<GptDataset> dataset(new GptDataset(std::move(store), config));
  if (config.num_samples == 0) return dataset;  // nothing will be read from this split
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

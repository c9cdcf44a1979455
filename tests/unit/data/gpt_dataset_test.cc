#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/blended_dataset.h"
#include "data/dataset_split.h"
#include "data/gpt_dataset.h"
#include "data/npy_file.h"
#include "gtest/gtest.h"

namespace gpt {
namespace {

// Document d holds tokens d * 1000 + k, so every token says where it came from.
class FakeCorpus final : public DocumentStore {
 public:
  explicit FakeCorpus(std::vector<int64_t> lengths) : lengths_(std::move(lengths)) {}
  int64_t num_documents() const override { return static_cast<int64_t>(lengths_.size()); }
  int64_t document_length(int64_t d) const override { return lengths_[static_cast<size_t>(d)]; }
  void read(int64_t d, int64_t offset, int64_t length, int32_t* out) const override {
    EXPECT_LE(offset + length, lengths_[static_cast<size_t>(d)]);
    for (int64_t k = 0; k < length; ++k) out[k] = static_cast<int32_t>(d * 1000 + offset + k);
  }
  std::string identity() const override { return "fake corpus of " + std::to_string(lengths_.size()) + " documents"; }

 private:
  std::vector<int64_t> lengths_;
};

std::shared_ptr<FakeCorpus> corpus() {
  std::vector<int64_t> lengths;
  for (int d = 0; d < 40; ++d) lengths.push_back(1 + (d * 37) % 23);  // 1..23 tokens, some shorter than a sample
  return std::make_shared<FakeCorpus>(lengths);
}

GptDatasetConfig config(int64_t samples, uint64_t seed = 5) {
  return {.seed = seed, .seq_length = 8, .num_samples = samples, .documents = {3, 37}, .split_name = "train"};
}

std::vector<int32_t> read_sample(const SampleSource& source, int64_t i) {
  std::vector<int32_t> tokens(static_cast<size_t>(source.seq_length() + 1));
  source.sample(i, tokens);
  return tokens;
}

TEST(GptDataset, SamplesTileTheShuffledDocumentStream) {
  auto store = corpus();
  auto built = GptDataset::build(store, config(100));
  ASSERT_TRUE(built.ok()) << built.status();
  const GptDataset& dataset = **built;
  EXPECT_GE(dataset.size(), 100);
  // The token stream the document index describes.
  std::vector<int32_t> stream;
  for (int32_t d : dataset.document_index()) {
    ASSERT_TRUE(d >= 3 && d < 37) << "document outside the split";
    for (int64_t k = 0; k < store->document_length(d); ++k) stream.push_back(d * 1000 + static_cast<int32_t>(k));
  }
  // Each document appears once per epoch.
  std::map<int32_t, int> occurrences;
  for (int32_t d : dataset.document_index()) ++occurrences[d];
  for (const auto& [d, count] : occurrences) EXPECT_EQ(count, dataset.num_epochs()) << "document " << d;
  EXPECT_EQ(static_cast<int64_t>(occurrences.size()), 34);
  // Sample j of the unshuffled order is stream[8 j, 8 j + 9); the shuffled samples are exactly
  // these windows (as a multiset: a document repeated in several epochs repeats its windows).
  std::multiset<std::vector<int32_t>> windows, samples;
  for (int64_t j = 0; j < dataset.size(); ++j) windows.emplace(stream.begin() + 8 * j, stream.begin() + 8 * j + 9);
  for (int64_t i = 0; i < dataset.size(); ++i) samples.insert(read_sample(dataset, i));
  EXPECT_TRUE(samples == windows);
  EXPECT_NE(read_sample(dataset, 0), std::vector<int32_t>(stream.begin(), stream.begin() + 9)) << "not shuffled?";
}

TEST(GptDataset, EpochsDeterminismAndSeed) {
  auto store = corpus();
  auto one = *GptDataset::build(store, config(10));
  auto many = *GptDataset::build(store, config(200));
  EXPECT_EQ(one->num_epochs(), 1);
  EXPECT_GT(many->num_epochs(), 2);
  auto again = *GptDataset::build(store, config(200));
  auto other_seed = *GptDataset::build(store, config(200, 6));
  int differing = 0;
  for (int64_t i = 0; i < 50; ++i) {
    EXPECT_EQ(read_sample(*many, i), read_sample(*again, i));
    differing += read_sample(*many, i) != read_sample(*other_seed, i);
  }
  EXPECT_GT(differing, 40);
}

TEST(GptDataset, TooSmallSplitIsAClearError) {
  auto store = corpus();
  GptDatasetConfig c = config(10);
  c.documents = {0, 1};
  auto built = GptDataset::build(store, c);
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.status().message().find("the train split of fake corpus of 40 documents holds 1 tokens"),
            std::string::npos) << built.status();
}

TEST(GptDataset, CachedIndicesAreReusedOnlyWhenTheDescriptionMatches) {
  const std::string dir = ::testing::TempDir() + "/gpt_dataset_cache";
  std::filesystem::remove_all(dir);
  auto store = corpus();
  GptDatasetConfig c = config(60);
  c.cache_dir = dir;
  auto first = *GptDataset::build(store, c);
  EXPECT_FALSE(first->loaded_from_cache());
  auto second = *GptDataset::build(store, c);
  EXPECT_TRUE(second->loaded_from_cache());
  for (int64_t i = 0; i < second->size(); ++i) ASSERT_EQ(read_sample(*first, i), read_sample(*second, i));
  c.seed = 99;
  EXPECT_FALSE((*GptDataset::build(store, c))->loaded_from_cache());
  // The cache files are numpy arrays.
  int found = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().string().find("sample_index.npy") != std::string::npos) {
      auto array = read_npy<int64_t>(entry.path().string());
      ASSERT_TRUE(array.ok());
      EXPECT_EQ(array->shape.size(), 2u);
      EXPECT_EQ(array->shape[1], 2);
      ++found;
    }
  }
  EXPECT_EQ(found, 2);
}

TEST(DatasetSplit, MegatronBoundaries) {
  auto weights = parse_split("949,50,1");
  ASSERT_TRUE(weights.ok());
  auto ranges = split_documents(*weights, 1000);
  EXPECT_EQ(ranges[0].end, 949);
  EXPECT_EQ(ranges[1].end, 999);
  EXPECT_EQ(ranges[2].end, 1000);
  // Python's round() halves to even: bounds 0, round(2.5) = 2, 4, 4; the drift of -1 is taken
  // off every later bound: [0, 3), [3, 5), [5, 5). (Rounding half away would give [0, 2).)
  ranges = split_documents(*parse_split("1,1"), 5);
  EXPECT_EQ(ranges[0].end, 3);
  EXPECT_EQ(ranges[1].end, 5);
  EXPECT_EQ(ranges[2].size(), 0);
  EXPECT_FALSE(parse_split("1,x").ok());
  EXPECT_FALSE(parse_split("0,0,0").ok());
  EXPECT_FALSE(parse_split("1,2,3,4").ok());
}

class ConstantSource final : public SampleSource {
 public:
  explicit ConstantSource(int32_t value) : value_(value) {}
  int64_t seq_length() const override { return 4; }
  void sample(int64_t, std::span<int32_t> tokens) const override { std::fill(tokens.begin(), tokens.end(), value_); }

 private:
  int32_t value_;
};

TEST(BlendedDataset, ProportionsFollowWeightsThroughoutTheRun) {
  const std::vector<double> weights = {0.5, 0.3, 0.2};
  BlendedDataset blend({std::make_shared<ConstantSource>(0), std::make_shared<ConstantSource>(1),
                        std::make_shared<ConstantSource>(2)},
                       weights, 10000);
  std::vector<int64_t> counts(3, 0);
  std::vector<int64_t> budget;
  for (double w : weights) budget.push_back(samples_needed(w, 10000));
  for (int64_t i = 0; i < 10000; ++i) {
    const int d = blend.dataset_of(i);
    ++counts[d];
    EXPECT_EQ(read_sample(blend, i)[0], d);
    if (i >= 99) {
      for (int k = 0; k < 3; ++k) {
        ASSERT_LE(std::abs(static_cast<double>(counts[k]) / (i + 1) - weights[k]), 0.01) << "after " << i + 1;
      }
    }
  }
  for (int k = 0; k < 3; ++k) EXPECT_LE(counts[k], budget[k]);
}

}  // namespace
}  // namespace gpt

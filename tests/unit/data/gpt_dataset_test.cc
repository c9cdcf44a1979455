#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/blended_dataset.h"
#include "data/dataset_split.h"
#include "data/gpt_dataset.h"
#include "data/gpt_dataset_builder.h"
#include "data/md5.h"
#include "data/megatron_description.h"
#include "data/npy_file.h"
#include "gtest/gtest.h"

namespace gpt {
namespace {

// Document d holds tokens d * 1000 + k, so every token says where it came from.
class FakeCorpus final : public DocumentStore {
 public:
  explicit FakeCorpus(std::vector<int64_t> lengths, std::string name = "fake corpus")
      : lengths_(std::move(lengths)), name_(std::move(name)) {}
  int64_t num_documents() const override { return static_cast<int64_t>(lengths_.size()); }
  int64_t document_length(int64_t d) const override { return lengths_[static_cast<size_t>(d)]; }
  void read(int64_t d, int64_t offset, int64_t length, int32_t* out) const override {
    EXPECT_LE(offset + length, lengths_[static_cast<size_t>(d)]);
    for (int64_t k = 0; k < length; ++k) out[k] = static_cast<int32_t>(d * 1000 + offset + k);
  }
  std::string identity() const override { return name_ + " of " + std::to_string(lengths_.size()) + " documents"; }

 private:
  std::vector<int64_t> lengths_;
  std::string name_;
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

TEST(GptDataset, DocumentIndexIsNumpyRandomStateOrder) {
  // numpy: r = RandomState(5); d = arange(3, 37, dtype=int32); r.shuffle(d) (one epoch: 10 samples
  // of 8 tokens fit in the first).
  auto dataset = *GptDataset::build(corpus(), config(10));
  EXPECT_EQ(dataset->num_epochs(), 1);
  EXPECT_EQ(dataset->document_index(),
            (std::vector<int32_t>{33, 24, 6, 21, 23, 8, 3, 22, 25, 13, 34, 5, 9, 32, 36, 4, 14,
                                  16, 26, 28, 27, 20, 18, 15, 31, 29, 35, 30, 10, 7, 11, 12, 19, 17}));
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
  // The cache files are numpy arrays of Megatron's dtypes: an int32 sample index here.
  int found = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().string().find("sample_index.npy") != std::string::npos) {
      EXPECT_FALSE(read_npy<int64_t>(entry.path().string()).ok());
      auto array = read_npy<int32_t>(entry.path().string());
      ASSERT_TRUE(array.ok());
      EXPECT_EQ(array->shape.size(), 2u);
      EXPECT_EQ(array->shape[1], 2);
      ++found;
    }
  }
  EXPECT_EQ(found, 2);
}

TEST(GptDataset, CacheIsNamedByMegatronsDescriptionAndKeyedByContent) {
  const std::string dir = ::testing::TempDir() + "/gpt_dataset_cache_names";
  std::filesystem::remove_all(dir);
  GptDatasetConfig c = config(60);
  c.cache_dir = dir;
  c.dataset_path = "data/corpus_text_document";
  c.split = "969, 30, 1";
  c.tokenizer = TokenizerIdentity::gpt2_bpe("vocab.json", "merges.txt");
  auto first = *GptDataset::build(corpus(), c);
  const std::string description = first->megatron_description();
  EXPECT_EQ(first->cache_base(), dir + "/" + md5_hex(description) + "-GPTDataset-train");
  for (const char* suffix : {"-description.txt", "-document_index.npy", "-sample_index.npy", "-shuffle_index.npy",
                             "-corpus_key.txt"}) {
    EXPECT_TRUE(std::filesystem::exists(first->cache_base() + suffix)) << suffix;
  }
  // The same path, rewritten with other documents: same Megatron name, rebuilt, not reused.
  std::vector<int64_t> lengths;
  for (int d = 0; d < 40; ++d) lengths.push_back(2 + (d * 11) % 19);
  auto rewritten = *GptDataset::build(std::make_shared<FakeCorpus>(lengths, "rewritten corpus"), c);
  EXPECT_EQ(rewritten->cache_base(), first->cache_base());
  EXPECT_FALSE(rewritten->loaded_from_cache());
  EXPECT_TRUE((*GptDataset::build(std::make_shared<FakeCorpus>(lengths, "rewritten corpus"), c))->loaded_from_cache());
  // A set without this program's key (as Megatron writes it) is rebuilt to the same arrays.
  std::filesystem::remove(first->cache_base() + "-corpus_key.txt");
  auto again = *GptDataset::build(std::make_shared<FakeCorpus>(lengths, "rewritten corpus"), c);
  EXPECT_FALSE(again->loaded_from_cache());
  EXPECT_EQ(again->shuffle_index(), rewritten->shuffle_index());
  // A damaged array is rebuilt.
  std::filesystem::resize_file(first->cache_base() + "-shuffle_index.npy", 140);
  auto repaired = *GptDataset::build(std::make_shared<FakeCorpus>(lengths, "rewritten corpus"), c);
  EXPECT_FALSE(repaired->loaded_from_cache());
  EXPECT_EQ(repaired->shuffle_index(), rewritten->shuffle_index());
}

TEST(GptDataset, SeedsBeyondNumpysRangeAreRefused) {
  auto built = GptDataset::build(corpus(), config(10, uint64_t{1} << 32));
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.status().message().find("0 to 2^32 - 1"), std::string::npos) << built.status();
}

TEST(MegatronDescription, MatchesPythonJsonDumps) {
  // json.dumps(unique_identifiers, indent=4, default=lambda o: o.unique_identifiers) and its md5,
  // from Python 3.11, for core_v0.8.0's GPTDataset with its _GPT2BPETokenizer.
  MegatronDatasetIdentity identity;
  identity.dataset_path = "data/corpus_text_document";
  identity.num_samples = 800;
  identity.index_split = "train";
  identity.random_seed = 1234;
  identity.sequence_length = 128;
  identity.split = "969, 30, 1";
  identity.split_matrix = split_matrix(*parse_split(identity.split));
  identity.tokenizer = TokenizerIdentity::gpt2_bpe("vocab.json", "merges.txt");
  const std::string expected =
      "{\n    \"class\": \"GPTDataset\",\n    \"dataset_path\": \"data/corpus_text_document\",\n"
      "    \"num_samples\": 800,\n    \"index_split\": \"train\",\n    \"random_seed\": 1234,\n"
      "    \"sequence_length\": 128,\n    \"split\": \"969, 30, 1\",\n    \"split_matrix\": [\n"
      "        [\n            0,\n            0.969\n        ],\n        [\n            0.969,\n"
      "            0.999\n        ],\n        [\n            0.999,\n            1.0\n        ]\n    ],\n"
      "    \"tokenizer\": {\n        \"class\": \"_GPT2BPETokenizer\",\n        \"tokenizer_path\": [\n"
      "            \"vocab.json\",\n            \"merges.txt\"\n        ]\n    }\n}";
  EXPECT_EQ(megatron_dataset_description(identity), expected);
  EXPECT_EQ(md5_hex(expected), "d7120ce95aa2941365a6747f0e0f962f");
  // None, weight-zero splits, the NullTokenizer and non-ASCII paths.
  identity.dataset_path = "caf\xc3\xa9/\xf0\x9f\x98\x80\"x";
  identity.num_samples.reset();
  identity.index_split = "valid";
  identity.split = "1,0";
  identity.split_matrix = split_matrix(*parse_split(identity.split));
  identity.tokenizer = TokenizerIdentity::null_tokenizer(50000);
  EXPECT_EQ(md5_hex(megatron_dataset_description(identity)), "435fe1ad9b0a678581369a48e3959812")
      << megatron_dataset_description(identity);
}

TEST(MegatronDescription, PythonFloatRepr) {
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(0.969), "0.969");
  EXPECT_EQ(python_float_repr(0.969 + 0.03), "0.999");
  EXPECT_EQ(python_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(0.00001), "1e-05");
  EXPECT_EQ(python_float_repr(1.5e-7), "1.5e-07");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(123.456), "123.456");
  EXPECT_EQ(json_string("a\tb\x01\x7f\xff"), "\"a\\tb\\u0001\\u007f\\udcff\"");
}

TEST(Md5, KnownDigests) {
  EXPECT_EQ(md5_hex(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(md5_hex("The quick brown fox jumps over the lazy dog"), "9e107d9d372bb6826bd81d3542a419d6");
  EXPECT_EQ(md5_hex(std::string(55, 'a')), "ef1772b6dff9a122358552954ad0df65");
  EXPECT_EQ(md5_hex(std::string(56, 'a')), "3b0c8ac703f828b04c6c197006d17218");
  EXPECT_EQ(md5_hex(std::string(64, 'a')), "014842d480b571495a4a0363793f7367");
}

TEST(DatasetSplit, MegatronBoundaries) {
  auto weights = parse_split("949,50,1");
  ASSERT_TRUE(weights.ok());
  auto ranges = split_documents(*weights, 1000);
  EXPECT_EQ(ranges[0].end, 949);
  EXPECT_EQ(ranges[1].end, 999);
  EXPECT_EQ(ranges[2].end, 1000);
  // Issue 15: 49 documents with 969,30,1. The book-ends 0.969, 0.999, 1.0 times 49 round to 47,
  // 49, 49: Megatron trains on documents 0-46, validates on 47-48 and tests on none (the legacy
  // rule, rounding widths and moving the drift, gave 0-47).
  ranges = split_documents(*parse_split("969, 30, 1"), 49);
  EXPECT_EQ(ranges[0].begin, 0);
  EXPECT_EQ(ranges[0].end, 47);
  EXPECT_EQ(ranges[1].begin, 47);
  EXPECT_EQ(ranges[1].end, 49);
  EXPECT_EQ(ranges[2].size(), 0);
  // Python's round() halves to even: 0.5 * 5 = 2.5 rounds to 2; the test split has weight zero.
  ranges = split_documents(*parse_split("1,1"), 5);
  EXPECT_EQ(ranges[0].end, 2);
  EXPECT_EQ(ranges[1].begin, 2);
  EXPECT_EQ(ranges[1].end, 5);
  EXPECT_EQ(ranges[2].size(), 0);
  EXPECT_FALSE(split_matrix(*parse_split("1,1"))[2].has_value());
  ranges = split_documents(*parse_split("1,1"), 7);  // 3.5 rounds to 4
  EXPECT_EQ(ranges[0].end, 4);
  // Against Python for every corpus size up to 300 and a few splits:
  //   w = numpy.array(split) / sum; ends = [0, w0, w0 + w1, w0 + w1 + w2]; round(end * n)
  const std::map<std::string, std::vector<std::array<int64_t, 2>>> python = {
      {"969,30,1", {{10, 10}, {49, 47}, {99, 96}, {100, 97}, {167, 162}, {300, 291}}},
      {"98,2,0", {{10, 10}, {25, 24}, {49, 48}, {75, 74}, {300, 294}}},
      {"949,50,1", {{10, 9}, {49, 47}, {150, 142}, {299, 284}}},
  };
  for (const auto& [split, cases] : python) {
    for (const auto& [n, train_end] : cases) {
      EXPECT_EQ(split_documents(*parse_split(split), n)[0].end, train_end) << split << " on " << n;
    }
  }
  EXPECT_FALSE(parse_split("1,x").ok());
  EXPECT_FALSE(parse_split("0,0,0").ok());
  EXPECT_FALSE(parse_split("1,2,3,4").ok());
}

TEST(DataPath, MegatronsBlendRules) {
  auto one = parse_data_path({"a"});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->prefixes, std::vector<std::string>{"a"});
  EXPECT_FALSE(one->weights.has_value());
  auto weighted = parse_data_path({"0.3", "a", "7", "b"});
  ASSERT_TRUE(weighted.ok());
  EXPECT_EQ(weighted->prefixes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(*weighted->weights, (std::vector<double>{0.3, 7.0}));
  auto prefixes = parse_data_path({"a", "b"});
  ASSERT_TRUE(prefixes.ok());
  EXPECT_EQ(prefixes->prefixes, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(prefixes->weights.has_value());
  EXPECT_EQ(parse_data_path({"a", "b", "c"})->prefixes.size(), 3u);
  EXPECT_FALSE(parse_data_path({"1", "a", "b", "c"}).ok());
  EXPECT_FALSE(parse_data_path({}).ok());
}

TEST(DataPath, PrefixesWithoutWeightsBlendOneEpochEachBySize) {
  auto small = std::make_shared<FakeCorpus>(std::vector<int64_t>(30, 9), "small");  // 30 x 9 tokens
  auto large = std::make_shared<FakeCorpus>(std::vector<int64_t>(60, 9), "large");
  GptDatasetsConfig c;
  c.data_path = {"small", "large"};
  c.split = "1,0,0";
  c.seq_length = 8;
  c.num_samples = {60, 0, 0};
  auto open = [&](const std::string& prefix) -> absl::StatusOr<std::shared_ptr<const DocumentStore>> {
    return prefix == "small" ? std::shared_ptr<const DocumentStore>(small) : std::shared_ptr<const DocumentStore>(large);
  };
  auto built = build_gpt_datasets(c, open);
  ASSERT_TRUE(built.ok()) << built.status();
  // One epoch each: (270 - 1) / 8 = 33 and (540 - 1) / 8 = 67 samples; weights 33/100 and 67/100.
  const auto* blend = dynamic_cast<const BlendedDataset*>((*built)[0].get());
  ASSERT_NE(blend, nullptr);
  EXPECT_EQ(blend->size(), 60);
  int from_small = 0;
  for (int64_t i = 0; i < 60; ++i) from_small += blend->dataset_of(i) == 0;
  EXPECT_NEAR(from_small, 0.33 * 60, 1.0);
  EXPECT_FALSE((*built)[1] || (*built)[2]);
  // More samples than one epoch of each holds: refused, as Megatron's iterator would run dry.
  c.num_samples = {101, 0, 0};
  auto refused = build_gpt_datasets(c, open);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("one epoch of each dataset"), std::string::npos) << refused.status();
}

// Callers other than pretrain_gpt (test tools) reach the builder with unvalidated sizes: a zero
// sequence length divided by zero in the indices.
TEST(DataPath, ZeroSequenceLengthOrNegativeSamplesAreRefused) {
  auto corpus = std::make_shared<FakeCorpus>(std::vector<int64_t>(30, 9), "c");
  auto open = [&](const std::string&) -> absl::StatusOr<std::shared_ptr<const DocumentStore>> { return corpus; };
  GptDatasetsConfig c;
  c.data_path = {"c"};
  c.split = "1,0,0";
  c.num_samples = {10, 0, 0};
  for (const int64_t length : {int64_t{0}, int64_t{-3}}) {
    c.seq_length = length;
    auto refused = build_gpt_datasets(c, open);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("sequence length must be >= 1"), std::string::npos) << refused.status();
  }
  c.seq_length = 8;
  c.num_samples = {-1, 0, 0};
  EXPECT_FALSE(build_gpt_datasets(c, open).ok());
  c.num_samples = {10, 0, 0};
  EXPECT_TRUE(build_gpt_datasets(c, open).ok());
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

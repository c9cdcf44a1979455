// Regression tests for issue 16's "data validated up front": token ids against the vocabulary,
// .idx headers against the file sizes (overflow-safe), document indices, messages that say what
// is wrong (truncated, permission denied, is a directory), the index cache keyed on content and
// range-checked on load, and blend weights.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/blended_dataset.h"
#include "data/file_access.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/npy_file.h"
#include "data/token_check.h"
#include "gtest/gtest.h"

namespace gpt {
namespace {

namespace fs = std::filesystem;

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

class DataValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / absl::StrCat("data_validation_", ::getpid(), "_",
                                                    ::testing::UnitTest::GetInstance()->current_test_info()->line());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code error;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, error);
    fs::remove_all(dir_, error);
  }
  std::string prefix(const std::string& name) const { return (dir_ / name).string(); }

  // A dataset written by the project's writer (uint16 or int32 tokens), one sequence per document.
  std::string write_dataset(const std::string& name, const std::vector<std::vector<int32_t>>& documents,
                            TokenDtype dtype = TokenDtype::kUint16) {
    const std::string p = prefix(name);
    auto writer = IndexedDatasetWriter::create(p, dtype);
    EXPECT_TRUE(writer.ok()) << writer.status();
    for (const auto& document : documents) EXPECT_TRUE((*writer)->add_document(document).ok());
    EXPECT_TRUE((*writer)->finish().ok());
    return p;
  }

  fs::path dir_;
};

// A raw .idx: Megatron's header, then the arrays; the counts in the header can lie.
void write_raw_index(const std::string& path, uint8_t dtype_code, const std::vector<int32_t>& lengths,
                     const std::vector<int64_t>& pointers, const std::vector<int64_t>& documents,
                     uint64_t header_sequences, uint64_t header_documents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write("MMIDIDX\x00\x00", 9);
  const uint64_t version = 1;
  out.write(reinterpret_cast<const char*>(&version), 8);
  out.write(reinterpret_cast<const char*>(&dtype_code), 1);
  out.write(reinterpret_cast<const char*>(&header_sequences), 8);
  out.write(reinterpret_cast<const char*>(&header_documents), 8);
  out.write(reinterpret_cast<const char*>(lengths.data()), static_cast<std::streamsize>(lengths.size() * 4));
  out.write(reinterpret_cast<const char*>(pointers.data()), static_cast<std::streamsize>(pointers.size() * 8));
  out.write(reinterpret_cast<const char*>(documents.data()), static_cast<std::streamsize>(documents.size() * 8));
}

template <typename T>
void write_raw_bin(const std::string& path, const std::vector<T>& tokens) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * sizeof(T)));
}

std::string open_error(const std::string& prefix) {
  auto opened = IndexedDataset::open(prefix);
  return opened.ok() ? std::string() : std::string(opened.status().message());
}

std::string token_error(const std::string& prefix, int64_t vocab_size, int threads = 2) {
  auto opened = IndexedDataset::open(prefix);
  EXPECT_TRUE(opened.ok()) << opened.status();
  if (!opened.ok()) return "open failed";
  TokenCheckOptions options;
  options.vocab_size = vocab_size;
  options.threads = threads;
  const absl::Status status = check_token_ids(**opened, options);
  return std::string(status.message());
}

TEST_F(DataValidation, OneOutOfVocabularyTokenIsFoundAndNamed) {
  std::vector<std::vector<int32_t>> documents(50, std::vector<int32_t>(100, 7));
  documents[31][42] = 600;  // one bad id among 5000
  const std::string p = write_dataset("oov", documents);
  EXPECT_EQ(token_error(p, 601), "");
  const std::string message = token_error(p, 512);
  EXPECT_TRUE(contains(message, "token id 600"));
  EXPECT_TRUE(contains(message, "document 31"));
  EXPECT_TRUE(contains(message, "position 42"));
  EXPECT_TRUE(contains(message, "vocabulary of 512"));
}

TEST_F(DataValidation, Int64IdsBeyondTheVocabularyAreRefusedNotTruncated) {
  const std::string p = prefix("wide");
  // 2^32 + 5 would be 5 if truncated to 32 bits, inside any vocabulary.
  const std::vector<int64_t> tokens = {1, 2, (int64_t{1} << 32) + 5, 3};
  write_raw_bin(p + ".bin", tokens);
  write_raw_index(p + ".idx", /*int64*/ 5, {4}, {0}, {0, 1}, 1, 2);
  const std::string message = token_error(p, 50257);
  EXPECT_TRUE(contains(message, "4294967301"));
  EXPECT_TRUE(contains(message, "outside the vocabulary"));
  // A negative id in a signed dtype too.
  write_raw_bin(p + ".bin", std::vector<int64_t>{1, -1, 2, 3});
  EXPECT_TRUE(contains(token_error(p, 50257), "token id -1"));
  // And within the vocabulary it passes.
  write_raw_bin(p + ".bin", std::vector<int64_t>{1, 2, 50256, 3});
  EXPECT_EQ(token_error(p, 50257), "");
}

TEST_F(DataValidation, TruncatedIndexSaysTruncated) {
  const std::string p = write_dataset("short", {{1, 2, 3}, {4, 5}});
  const auto full = fs::file_size(p + ".idx");
  // Shrinking step by step (resize_file would pad a longer size with zeros): inside the arrays,
  // inside the header, inside the magic itself.
  for (const uintmax_t size : {full - 3, uintmax_t{20}, uintmax_t{5}}) {
    fs::resize_file(p + ".idx", size);
    const std::string message = open_error(p);
    EXPECT_TRUE(contains(message, "truncated")) << "at " << size << " bytes";
    EXPECT_EQ(message.find("bad magic"), std::string::npos) << message;
  }
  // Not the magic at all: that is "bad magic".
  std::ofstream(p + ".idx", std::ios::trunc) << "hello, world, this is not an index at all";
  EXPECT_TRUE(contains(open_error(p), "bad magic"));
}

TEST_F(DataValidation, HugeHeaderCountsAreRefusedWithoutOverflow) {
  const std::string p = prefix("huge");
  write_raw_bin(p + ".bin", std::vector<uint16_t>{1, 2, 3});
  // Counts whose byte sizes wrap 64 bits (2^62 x 12 bytes) or are merely far beyond the file.
  for (const uint64_t count : {uint64_t{1} << 62, (uint64_t{1} << 62) + 1, uint64_t{0xFFFFFFFFFFFFFFFF},
                               uint64_t{1} << 40, uint64_t{6148914691236517206}}) {
    write_raw_index(p + ".idx", 8, {3}, {0}, {0, 1}, count, 2);
    EXPECT_TRUE(contains(open_error(p), "truncated")) << "sequences " << count;
    write_raw_index(p + ".idx", 8, {3}, {0}, {0, 1}, 1, count);
    EXPECT_TRUE(contains(open_error(p), "truncated")) << "documents " << count;
  }
  write_raw_index(p + ".idx", 8, {3}, {0}, {0, 1}, 1, 2);
  EXPECT_EQ(open_error(p), "");
}

TEST_F(DataValidation, DocumentIndicesMustBeNonDecreasing) {
  const std::string p = prefix("documents");
  write_raw_bin(p + ".bin", std::vector<uint16_t>{1, 2, 3, 4, 5, 6});
  write_raw_index(p + ".idx", 8, {2, 2, 2}, {0, 4, 8}, {0, 2, 1, 3}, 3, 4);
  EXPECT_TRUE(contains(open_error(p), "non-decreasing"));
  write_raw_index(p + ".idx", 8, {2, 2, 2}, {0, 4, 8}, {0, 1, 2, 3}, 3, 4);
  EXPECT_EQ(open_error(p), "");
}

TEST_F(DataValidation, FileMessagesSayWhatIsWrong) {
  // A directory where the index should be.
  const std::string p = prefix("dir");
  fs::create_directories(p + ".idx");
  EXPECT_TRUE(contains(open_error(p), "is a directory"));
  EXPECT_TRUE(contains(std::string(check_readable_file("--input", dir_.string()).message()), "is a directory"));
  // Missing.
  EXPECT_TRUE(contains(open_error(prefix("missing")), "not found"));
  // Unreadable: root reads anything, so the errno mapping is checked directly as well.
  EXPECT_TRUE(contains(std::string(file_error("dataset index", "x.idx", EACCES).message()), "permission denied"));
  const std::string q = write_dataset("private", {{1, 2, 3}});
  fs::permissions(q + ".idx", fs::perms::none);
  if (::geteuid() != 0) {
    const std::string message = open_error(q);
    EXPECT_TRUE(contains(message, "permission denied"));
    EXPECT_EQ(message.find("not found"), std::string::npos);
  }
}

TEST_F(DataValidation, RewrittenIndexOfTheSameSizeDoesNotReuseStaleCachedIndices) {
  const std::string cache = (dir_ / "cache").string();
  std::vector<std::vector<int32_t>> documents;
  for (int d = 0; d < 20; ++d) documents.push_back(std::vector<int32_t>(static_cast<size_t>(5 + d), d));
  const std::string p = write_dataset("corpus", documents);
  GptDatasetConfig config{.seed = 3, .seq_length = 8, .num_samples = 30, .documents = {0, 20}, .split_name = "train",
                          .cache_dir = cache};
  auto build = [&]() {
    auto store = IndexedDataset::open(p);
    EXPECT_TRUE(store.ok()) << store.status();
    auto dataset = GptDataset::build(std::shared_ptr<const IndexedDataset>(std::move(*store)), config);
    EXPECT_TRUE(dataset.ok()) << dataset.status();
    return std::move(*dataset);
  };
  EXPECT_FALSE(build()->loaded_from_cache());
  EXPECT_TRUE(build()->loaded_from_cache()) << "the cache is not used at all";
  // The same documents in reverse order: the same .bin and .idx sizes, other content.
  const auto idx_size = fs::file_size(p + ".idx"), bin_size = fs::file_size(p + ".bin");
  std::reverse(documents.begin(), documents.end());
  write_dataset("corpus", documents);
  ASSERT_EQ(fs::file_size(p + ".idx"), idx_size);
  ASSERT_EQ(fs::file_size(p + ".bin"), bin_size);
  auto rebuilt = build();
  EXPECT_FALSE(rebuilt->loaded_from_cache()) << "stale indices reused for a rewritten dataset";
  // Every sample of the rebuilt dataset reads the new corpus correctly (each document holds its
  // own number, so a sample's tokens change only where a document ends).
  std::vector<int32_t> tokens(9);
  for (int64_t i = 0; i < rebuilt->size(); ++i) rebuilt->sample(i, tokens);
}

TEST_F(DataValidation, DamagedCachedIndicesAreRebuiltNotTrusted) {
  const std::string cache = (dir_ / "cache").string();
  std::vector<std::vector<int32_t>> documents;
  for (int d = 0; d < 10; ++d) documents.push_back(std::vector<int32_t>(12, d));
  const std::string p = write_dataset("corpus", documents);
  GptDatasetConfig config{.seed = 3, .seq_length = 8, .num_samples = 10, .documents = {0, 10}, .split_name = "train",
                          .cache_dir = cache};
  auto build = [&]() {
    auto store = IndexedDataset::open(p);
    auto dataset = GptDataset::build(std::shared_ptr<const IndexedDataset>(std::move(*store)), config);
    EXPECT_TRUE(dataset.ok()) << dataset.status();
    return std::move(*dataset);
  };
  EXPECT_FALSE(build()->loaded_from_cache());
  int damaged = 0;
  for (const auto& entry : fs::directory_iterator(cache)) {
    const std::string name = entry.path().string();
    if (name.size() > 17 && name.substr(name.size() - 17) == "shuffle_index.npy") {
      auto shuffle = read_npy<uint32_t>(name);  // Megatron's dtype below 2^32 - 2 samples
      ASSERT_TRUE(shuffle.ok());
      shuffle->values[0] = uint32_t{1} << 30;  // a sample that does not exist
      ASSERT_TRUE(write_npy<uint32_t>(name, shuffle->shape, shuffle->values).ok());
      ++damaged;
    }
  }
  ASSERT_EQ(damaged, 1);
  auto rebuilt = build();
  EXPECT_FALSE(rebuilt->loaded_from_cache());
  std::vector<int32_t> tokens(9);
  for (int64_t i = 0; i < rebuilt->size(); ++i) rebuilt->sample(i, tokens);
  EXPECT_TRUE(build()->loaded_from_cache()) << "the rebuilt indices were not cached again";
}

TEST(BlendWeights, MustBeFinitePositiveAndNormalizeWithoutOverflow) {
  const std::vector<std::string> names = {"a", "b"};
  const double inf = std::numeric_limits<double>::infinity();
  for (const double bad : {inf, -inf, std::nan(""), 0.0, -1.0}) {
    auto normalized = normalize_blend_weights({bad, 1.0}, names);
    ASSERT_FALSE(normalized.ok()) << bad;
    EXPECT_TRUE(contains(std::string(normalized.status().message()), "weight of a")) << bad;
  }
  auto even = normalize_blend_weights({1e308, 1e308}, names);
  ASSERT_TRUE(even.ok()) << even.status();
  EXPECT_DOUBLE_EQ((*even)[0], 0.5);
  EXPECT_DOUBLE_EQ((*even)[1], 0.5);
  auto tiny = normalize_blend_weights({1e-300, 3e-300}, names);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_DOUBLE_EQ((*tiny)[0], 0.25);
}

}  // namespace
}  // namespace gpt

// The checkpoint files without a trainer: HDF5 slices, BF16 and checksums; a global tensor written
// as the pieces of one layout and read back as the slices of another (resharding); the coverage
// check, damaged files and the tracker.
#include <map>
#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/fletcher32.h"
#include "checkpoint/hdf5_file.h"
#include "checkpoint/sharded_tensor.h"
#include "core/float16.h"
#include "gtest/gtest.h"

namespace gpt {
namespace {

std::string fresh_directory(const std::string& name) {
  const std::string path = (std::filesystem::temp_directory_path() / ("gpt_ckpt_test_" + name)).string();
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path;
}

// Element (r, c) of a global test tensor: distinct and exactly representable in BF16.
float global_value(int64_t r, int64_t c) { return static_cast<float>((r * 37 + c * 11) % 251) - 125.0f; }

TEST(FlatRectangles, CoverTheRangeInOrderAndStayContiguous) {
  const std::vector<int64_t> shape = {7, 5};
  for (int64_t begin = 0; begin <= 35; ++begin) {
    for (int64_t end = begin; end <= 35; ++end) {
      int64_t next = begin;
      for (const FlatRectangle& r : rectangles_of_flat_range(shape, begin, end)) {
        ASSERT_EQ(r.flat_begin, next);
        ASSERT_EQ(r.flat_begin, r.offsets[0] * 5 + r.offsets[1]);
        // Contiguous: one row, or whole rows.
        ASSERT_TRUE(r.counts[0] == 1 || (r.offsets[1] == 0 && r.counts[1] == 5));
        next += r.counts[0] * r.counts[1];
      }
      ASSERT_EQ(next, end) << begin << ".." << end;
    }
  }
  const std::vector<FlatRectangle> vector = rectangles_of_flat_range({10}, 3, 8);
  ASSERT_EQ(vector.size(), 1u);
  EXPECT_EQ(vector[0].offsets, std::vector<int64_t>{3});
  EXPECT_EQ(vector[0].counts, std::vector<int64_t>{5});
}

TEST(Hdf5File, SlicesBf16AndChecksums) {
  const std::string directory = fresh_directory("slices");
  const std::string path = directory + "/a.h5";
  std::vector<uint16_t> bf16_values(6 * 4);
  for (size_t i = 0; i < bf16_values.size(); ++i) bf16_values[i] = float_to_bf16_bits(0.5f * static_cast<float>(i) - 3.0f);
  {
    absl::StatusOr<Hdf5File> file = Hdf5File::create(path);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE(file->create_dataset("x/bf", DType::kBFloat16, {6, 4}, /*checksum=*/true).ok());
    // Two slabs of rows.
    ASSERT_TRUE(file->write_slab("x/bf", {0, 0}, {2, 4}, DType::kBFloat16, bf16_values.data()).ok());
    ASSERT_TRUE(file->write_slab("x/bf", {2, 0}, {4, 4}, DType::kBFloat16, bf16_values.data() + 8).ok());
    EXPECT_FALSE(file->write_slab("x/bf", {5, 0}, {2, 4}, DType::kBFloat16, bf16_values.data()).ok());
    EXPECT_FALSE(file->write_slab("x/bf", {0, 0}, {1, 4}, DType::kFloat32, bf16_values.data()).ok());
    ASSERT_TRUE(file->close_and_sync().ok());
  }
  absl::StatusOr<Hdf5File> file = Hdf5File::open_read_only(path);
  ASSERT_TRUE(file.ok());
  absl::StatusOr<Hdf5File::DatasetInfo> info = file->dataset_info("x/bf");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->dtype, DType::kBFloat16);
  EXPECT_EQ(info->shape, (std::vector<int64_t>{6, 4}));
  EXPECT_TRUE(info->checksummed);
  std::vector<uint16_t> middle(3 * 2);
  ASSERT_TRUE(file->read_slab("x/bf", {1, 1}, {3, 2}, DType::kBFloat16, middle.data()).ok());
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 2; ++c) EXPECT_EQ(middle[r * 2 + c], bf16_values[(r + 1) * 4 + c + 1]);
  }
  EXPECT_EQ(file->dataset_names(), std::vector<std::string>{"x/bf"});
}

// Our chunk writer (own Fletcher-32, several threads) stores exactly the bytes HDF5's filter stores,
// a padded last chunk included, so HDF5 readers (h5py, h5dump) verify our checksums.
TEST(Hdf5File, OwnChecksummedChunksAreTheLibrarysBytes) {
  const std::string directory = fresh_directory("own_chunks");
  const std::string path = directory + "/c.h5";
  const int64_t rows = 2 * 4096 + 7, columns = 300;  // chunks of 3496 rows: the third one partial
  std::vector<float> values(static_cast<size_t>(rows * columns));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 9973) * 0.25f - 7.0f;
  {
    absl::StatusOr<Hdf5File> file = Hdf5File::create(path);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE(file->create_dataset("library", DType::kFloat32, {rows, columns}, /*checksum=*/true).ok());
    ASSERT_TRUE(file->write_slab("library", {0, 0}, {rows, columns}, DType::kFloat32, values.data()).ok());
    ASSERT_TRUE(file->write_checksummed("ours", DType::kFloat32, {rows, columns}, values.data(), /*threads=*/3).ok());
    ASSERT_TRUE(file->close_and_sync().ok());
  }
  absl::StatusOr<Hdf5File> file = Hdf5File::open_read_only(path);
  ASSERT_TRUE(file.ok());
  absl::StatusOr<Hdf5File::ChunkIndex> library = file->chunk_index("library"), ours = file->chunk_index("ours");
  ASSERT_TRUE(library.ok() && ours.ok());
  ASSERT_EQ(library->sizes, ours->sizes);
  ASSERT_GE(library->sizes.size(), 3u);
  std::ifstream in(path, std::ios::binary);
  for (size_t c = 0; c < library->sizes.size(); ++c) {
    std::vector<char> a(library->sizes[c]), b(ours->sizes[c]);
    in.seekg(static_cast<std::streamoff>(library->addresses[c]));
    in.read(a.data(), static_cast<std::streamsize>(a.size()));
    in.seekg(static_cast<std::streamoff>(ours->addresses[c]));
    in.read(b.data(), static_cast<std::streamsize>(b.size()));
    ASSERT_EQ(a, b) << "chunk " << c;
    EXPECT_TRUE(fletcher32_matches(b.data(), b.size() - 4));
  }
  // And the library reads ours back (verifying the checksums).
  std::vector<float> back(values.size());
  ASSERT_TRUE(file->read_slab("ours", {0, 0}, {rows, columns}, DType::kFloat32, back.data()).ok());
  EXPECT_EQ(back, values);
}

// A [rows, columns] global tensor written by "ranks" of one layout: row blocks, each cut further
// into flat ranges (as ZeRO does), then read back in column blocks, a ragged row range and
// whole, as FP32 and as BF16.
TEST(CheckpointFiles, WrittenInOneLayoutReadInAnother) {
  const std::string directory = fresh_directory("reshard");
  const int64_t rows = 12, columns = 10;
  const std::vector<int64_t> global = {rows, columns};
  std::vector<std::string> shard_files;
  const int writers = 3;
  for (int w = 0; w < writers; ++w) {
    // Writer w holds rows [4w, 4w + 4) and writes the flat range of them it owns: here the whole
    // block, but as the rectangles of two ZeRO-like ranges split at an odd element.
    const int64_t row0 = 4 * w;
    std::vector<HostPiece> pieces;
    for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{0, 17}, {17, 40}}) {
      for (const FlatRectangle& r : rectangles_of_flat_range({4, columns}, begin, end)) {
        HostPiece piece;
        piece.record.key = "model/w";
        piece.record.global_shape = global;
        piece.record.offsets = {row0 + r.offsets[0], r.offsets[1]};
        piece.record.local_shape = r.counts;
        piece.dtype = DType::kFloat32;
        for (int64_t i = 0; i < r.counts[0]; ++i) {
          for (int64_t j = 0; j < r.counts[1]; ++j) {
            const float v = global_value(row0 + r.offsets[0] + i, r.offsets[1] + j);
            const auto* bytes = reinterpret_cast<const unsigned char*>(&v);
            piece.bytes.insert(piece.bytes.end(), bytes, bytes + 4);
          }
        }
        pieces.push_back(std::move(piece));
      }
    }
    // A vector tensor from writer 0 only.
    if (w == 0) {
      HostPiece bias;
      bias.record.key = "model/b";
      bias.record.global_shape = {5};
      bias.record.offsets = {0};
      bias.record.local_shape = {5};
      bias.dtype = DType::kFloat32;
      for (int i = 0; i < 5; ++i) {
        const float v = static_cast<float>(i) * 1.5f;
        const auto* bytes = reinterpret_cast<const unsigned char*>(&v);
        bias.bytes.insert(bias.bytes.end(), bytes, bytes + 4);
      }
      pieces.push_back(std::move(bias));
    }
    shard_files.push_back(shard_file_name(w));
    ASSERT_TRUE(write_shard(directory + "/" + shard_files.back(), pieces, "feed", 7).ok());
  }
  CheckpointMetadata metadata;
  metadata.iteration = 7;
  metadata.consumed_train_samples = 56;
  metadata.params_dtype = "float32";
  metadata.arguments = "--num-layers 2\n";
  metadata.save_id = "feed";
  ASSERT_TRUE(write_index(directory, shard_files, metadata).ok());

  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::open(directory);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->metadata().iteration, 7);
  EXPECT_EQ((*reader)->metadata().consumed_train_samples, 56);
  EXPECT_EQ((*reader)->metadata().arguments, "--num-layers 2\n");
  EXPECT_EQ((*reader)->keys(), (std::vector<std::string>{"model/b", "model/w"}));

  // Column blocks of 3 (a TP split along the other dimension), and rows 3..9 of columns 2..8.
  for (const auto& [offsets, shape] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{0, 0}, {12, 3}}, {{0, 3}, {12, 3}}, {{3, 2}, {7, 7}}, {{0, 0}, {12, 10}}, {{11, 9}, {1, 1}}}) {
    std::vector<float> out(static_cast<size_t>(shape[0] * shape[1]), -1.0f);
    ASSERT_TRUE((*reader)->read("model/w", global, offsets, shape, DType::kFloat32, out.data()).ok());
    std::vector<uint16_t> out16(out.size());
    ASSERT_TRUE((*reader)->read("model/w", global, offsets, shape, DType::kBFloat16, out16.data()).ok());
    for (int64_t i = 0; i < shape[0]; ++i) {
      for (int64_t j = 0; j < shape[1]; ++j) {
        const float expected = global_value(offsets[0] + i, offsets[1] + j);
        ASSERT_EQ(out[static_cast<size_t>(i * shape[1] + j)], expected);
        ASSERT_EQ(bf16_bits_to_float(out16[static_cast<size_t>(i * shape[1] + j)]), expected);
      }
    }
  }
  std::vector<float> bias(3);
  ASSERT_TRUE((*reader)->read("model/b", {5}, {2}, {3}, DType::kFloat32, bias.data()).ok());
  EXPECT_EQ(bias, (std::vector<float>{3.0f, 4.5f, 6.0f}));
  EXPECT_TRUE((*reader)->verify_all().ok());
  // Shape mismatch and unknown key.
  std::vector<float> scratch(100);
  EXPECT_FALSE((*reader)->read("model/w", {12, 11}, {0, 0}, {1, 1}, DType::kFloat32, scratch.data()).ok());
  EXPECT_EQ((*reader)->read("model/x", global, {0, 0}, {1, 1}, DType::kFloat32, scratch.data()).code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckpointFiles, IndexRefusesGapsAndOverlaps) {
  for (const bool overlap : {false, true}) {
    const std::string directory = fresh_directory(overlap ? "overlap" : "gap");
    std::vector<HostPiece> pieces(2);
    for (int p = 0; p < 2; ++p) {
      pieces[p].record.key = "model/v";
      pieces[p].record.global_shape = {8};
      // [0, 4) and [4, 7): one element missing; or [0, 4) and [3, 8): 9 elements, one twice.
      pieces[p].record.offsets = {p == 0 ? 0 : (overlap ? 3 : 4)};
      pieces[p].record.local_shape = {p == 0 ? 4 : (overlap ? 5 : 3)};
      pieces[p].dtype = DType::kFloat32;
      pieces[p].bytes.assign(static_cast<size_t>(pieces[p].record.local_shape[0]) * 4, 0);
    }
    ASSERT_TRUE(write_shard(directory + "/shard_00000.h5", pieces, "", 0).ok());
    const absl::Status status = write_index(directory, {"shard_00000.h5"}, CheckpointMetadata{});
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.message().find("model/v"), std::string::npos) << status;
  }
}

TEST(CheckpointFiles, ADamagedShardIsNamedWithItsTensor) {
  const std::string directory = fresh_directory("damaged");
  HostPiece piece;
  piece.record.key = "model/big";
  piece.record.global_shape = {256, 64};
  piece.record.offsets = {0, 0};
  piece.record.local_shape = {256, 64};
  piece.dtype = DType::kFloat32;
  piece.bytes.assign(256 * 64 * 4, 0x3f);
  ASSERT_TRUE(write_shard(directory + "/shard_00000.h5", {piece}, "", 0).ok());
  ASSERT_TRUE(write_index(directory, {"shard_00000.h5"}, CheckpointMetadata{}).ok());
  // Flip one byte in the middle of the data (the 64 KiB chunk dominates the file).
  const std::string shard = directory + "/shard_00000.h5";
  const auto size = std::filesystem::file_size(shard);
  {
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(size / 2));
    char byte = 0;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    file.seekp(static_cast<std::streamoff>(size / 2));
    file.write(&byte, 1);
  }
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::open(directory);
  ASSERT_TRUE(reader.ok());
  const absl::Status status = (*reader)->verify_all();
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("model/big"), std::string::npos) << status;
  EXPECT_NE(status.message().find("shard_00000.h5"), std::string::npos) << status;
  // No index: an incomplete save.
  std::filesystem::remove(directory + "/index.h5");
  EXPECT_EQ(CheckpointReader::open(directory).status().code(), absl::StatusCode::kDataLoss);
}

TEST(CheckpointFiles, TrackerAndCommittedList) {
  const std::string directory = fresh_directory("tracker");
  absl::StatusOr<std::optional<int64_t>> none = read_tracker(directory);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(write_tracker(directory, 1200).ok());
  EXPECT_EQ(**read_tracker(directory), 1200);
  EXPECT_FALSE(std::filesystem::exists(directory + "/latest_checkpointed_iteration.txt.tmp"));
  std::ofstream(directory + "/latest_checkpointed_iteration.txt") << "release\n";
  EXPECT_FALSE(read_tracker(directory).ok());
  EXPECT_EQ(iteration_directory_name(100), "iter_0000100");
  for (const char* name : {"iter_0000005", "iter_0000010", "iter_0000020.tmp", "iter_0000030"}) {
    std::filesystem::create_directories(directory + "/" + name);
  }
  for (const char* name : {"iter_0000005", "iter_0000010"}) std::ofstream(directory + "/" + name + "/index.h5") << "x";
  EXPECT_EQ(list_checkpoints(directory), (std::vector<int64_t>{5, 10}));
  // A tracker that exists but cannot be read is an error naming it, never "no tracker".
  const std::string tracker = directory + "/latest_checkpointed_iteration.txt";
  std::filesystem::remove(tracker);
  std::filesystem::create_directory(tracker);
  absl::StatusOr<std::optional<int64_t>> as_directory = read_tracker(directory);
  ASSERT_FALSE(as_directory.ok());
  EXPECT_NE(as_directory.status().message().find("latest_checkpointed_iteration.txt is not a regular file"),
            std::string::npos) << as_directory.status();
  std::filesystem::remove(tracker);
  std::filesystem::create_symlink(directory + "/nowhere", tracker);
  EXPECT_FALSE(read_tracker(directory).ok());
}

// One save's checkpoint (two shards of a [6, 4] tensor) in `directory`, named iter_0000003.
std::string two_shard_checkpoint(const std::string& name, const std::string& save_id, int64_t iteration = 3,
                                 const std::map<std::string, std::string>& records = {}) {
  const std::string directory = fresh_directory(name) + "/iter_000000" + std::to_string(iteration);
  std::filesystem::create_directories(directory);
  std::vector<std::string> shard_files;
  for (int w = 0; w < 2; ++w) {
    HostPiece piece;
    piece.record.key = "model/w";
    piece.record.global_shape = {6, 4};
    piece.record.offsets = {3 * w, 0};
    piece.record.local_shape = {3, 4};
    piece.dtype = DType::kFloat32;
    piece.bytes.assign(3 * 4 * 4, static_cast<unsigned char>(w + 1));
    shard_files.push_back(shard_file_name(w));
    EXPECT_TRUE(write_shard(directory + "/" + shard_files.back(), {piece}, save_id, iteration).ok());
  }
  CheckpointMetadata metadata;
  metadata.iteration = iteration;
  metadata.consumed_train_samples = 24;
  metadata.optimizer_steps = iteration;
  metadata.params_dtype = "float32";
  metadata.arguments = "--num-layers 2\n";
  metadata.save_id = save_id;
  metadata.records = records;
  EXPECT_TRUE(write_index(directory, shard_files, metadata).ok());
  return directory;
}

absl::Status open_and_read_all(const std::string& directory) {
  GPT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::open(directory));
  GPT_RETURN_IF_ERROR(reader->verify_shards());
  return reader->verify_all();
}

TEST(CheckpointFiles, AShardOfAnotherSaveIsRefusedNamingIt) {
  const std::string ours = two_shard_checkpoint("ours", save_id_text(1));
  const std::string theirs = two_shard_checkpoint("theirs", save_id_text(2));
  ASSERT_TRUE(open_and_read_all(ours).ok());
  // Bit-for-bit a valid shard (every chunk checksum holds), but of another save.
  std::filesystem::copy_file(theirs + "/shard_00001.h5", ours + "/shard_00001.h5",
                             std::filesystem::copy_options::overwrite_existing);
  const absl::Status status = open_and_read_all(ours);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("shard_00001.h5 belongs to another save"), std::string::npos) << status;
}

TEST(CheckpointFiles, AnIndexOfAnotherIterationIsRefused) {
  const std::string three = two_shard_checkpoint("three", save_id_text(3), 3);
  const std::string five = two_shard_checkpoint("five", save_id_text(5), 5);
  std::filesystem::copy_file(five + "/index.h5", three + "/index.h5",
                             std::filesystem::copy_options::overwrite_existing);
  const absl::Status status = open_and_read_all(three);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("records iteration 5 but lies in iter_0000003"), std::string::npos) << status;
}

TEST(CheckpointFiles, EditedMetadataIsRefusedNamingWhat) {
  const std::string directory = two_shard_checkpoint("edited", save_id_text(9));
  {
    absl::StatusOr<Hdf5File> index = Hdf5File::open_read_write(directory + "/index.h5");
    ASSERT_TRUE(index.ok());
    ASSERT_TRUE(index->set_attribute("consumed_train_samples", int64_t{25}).ok());
  }
  absl::Status status = open_and_read_all(directory);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("index.h5: its run state"), std::string::npos) << status;
  EXPECT_NE(status.message().find("does not match its checksum"), std::string::npos) << status;
  // Written before whole-checkpoint checksums (format version 1): read, marked legacy, unchecked.
  {
    absl::StatusOr<Hdf5File> index = Hdf5File::open_read_write(directory + "/index.h5");
    ASSERT_TRUE(index.ok());
    ASSERT_TRUE(index->set_attribute("format_version", int64_t{1}).ok());
  }
  absl::StatusOr<std::unique_ptr<CheckpointReader>> legacy = CheckpointReader::open(directory);
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_TRUE((*legacy)->metadata().legacy);
  EXPECT_EQ((*legacy)->metadata().consumed_train_samples, 25);
  EXPECT_TRUE((*legacy)->verify_all().ok());
}

// Keyed records (non-tensor state modules add): written with the index, read back as written,
// covered by a checksum, keys and values that would not read back refused at write.
TEST(CheckpointFiles, RecordsRoundTripAndAreChecksummed) {
  const std::map<std::string, std::string> records = {{"loss_scaler/scale", "65536"},
                                                      {"loss_scaler/growth_tracker", "17"},
                                                      {"fp8/amax_history", "1.5 2.25 0"}};
  const std::string directory = two_shard_checkpoint("records", save_id_text(11), 3, records);
  {
    absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::open(directory);
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_EQ((*reader)->metadata().records, records);
  }
  {
    absl::StatusOr<std::unique_ptr<CheckpointReader>> none =
        CheckpointReader::open(two_shard_checkpoint("no_records", save_id_text(12)));
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_TRUE((*none)->metadata().records.empty());
  }
  {
    absl::StatusOr<Hdf5File> index = Hdf5File::open_read_write(directory + "/index.h5");
    ASSERT_TRUE(index.ok());
    ASSERT_TRUE(index->set_attribute("records_checksum", int64_t{12345}).ok());
  }
  const absl::Status edited = CheckpointReader::open(directory).status();
  EXPECT_NE(edited.message().find("its records ('_records') do not match their checksum"), std::string::npos)
      << edited;
  for (const auto& bad : std::vector<std::map<std::string, std::string>>{
           {{"a=b", "1"}}, {{"", "1"}}, {{"line\nbreak", "1"}}, {{"key", "two\nlines"}}}) {
    const std::string bad_directory = fresh_directory("bad_records");
    HostPiece piece;
    piece.record.key = "model/w";
    piece.record.global_shape = {4};
    piece.record.offsets = {0};
    piece.record.local_shape = {4};
    piece.bytes.assign(16, 0);
    ASSERT_TRUE(write_shard(bad_directory + "/shard_00000.h5", {piece}, "", 0).ok());
    CheckpointMetadata metadata;
    metadata.records = bad;
    const absl::Status status = write_index(bad_directory, {"shard_00000.h5"}, metadata);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  }
}

}  // namespace
}  // namespace gpt

// The on-disk format of a checkpoint (docs/CHECKPOINTS.md), without any collective: what one rank
// writes, what rank 0 adds to commit it, and how any rank reads the slices it needs.
//
//   DIR/latest_checkpointed_iteration.txt   the newest committed iteration (Megatron's tracker)
//   DIR/iter_0000100/                       one committed checkpoint (seven digits, as Megatron)
//     shard_00003.h5                        the pieces world rank 3 wrote: one Fletcher-32
//                                           checksummed dataset per piece, "<key>/<n>", the
//                                           table "_pieces", and the save's id (attribute)
//     index.h5                              written last: the run state (attributes), the
//                                           saving job's arguments ("_arguments"), every piece
//                                           with its shard ("_pieces"), every shard's size,
//                                           piece-table checksum and the save id it must carry,
//                                           CRC-32Cs of all of that, and every global tensor
//                                           as one virtual dataset "<key>" over the shards
//   DIR/iter_0000100.tmp/                   a checkpoint being written; never read
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/hdf5_file.h"
#include "checkpoint/save_directory.h"
#include "checkpoint/sharded_tensor.h"
#include "core/status.h"

namespace gpt {

inline constexpr char kTrackerFileName[] = "latest_checkpointed_iteration.txt";
inline constexpr char kIndexFileName[] = "index.h5";

std::string iteration_directory_name(int64_t iteration);  // "iter_0000100"
std::string shard_file_name(int world_rank);              // "shard_00003.h5"

// A piece copied to host memory for writing: the record (its `data` unset) and its bytes in the
// record's dtype.
struct HostPiece {
  ShardedTensor record;
  DType dtype = DType::kFloat32;
  std::vector<unsigned char> bytes;
};

// Writes one rank's shard file: every piece as a checksummed dataset, the piece table and the
// save's id and iteration (attributes: what binds the shard to the index of the same save), then
// fsyncs it.
absl::Status write_shard(const std::string& path, const std::vector<HostPiece>& pieces, const std::string& save_id,
                         int64_t iteration);

// A new save's id: 63 bits from the system's random source, different for every save of every run
// (rank 0 draws it, every rank writes it into its shard), and its text: 16 hex digits.
int64_t new_save_id();
std::string save_id_text(int64_t id);

// What a checkpoint records besides tensors.
struct CheckpointMetadata {
  int64_t iteration = 0;
  int64_t consumed_train_samples = 0;
  int64_t consumed_valid_samples = 0;
  int64_t optimizer_steps = 0;       // AdamW's step count (bias correction)
  int64_t seed = 0;                  // the run's seed: all of its random state (counter-based RNG)
  int64_t tensor_parallel = 1, pipeline_parallel = 1, data_parallel = 1, virtual_stages = 1;
  std::string params_dtype;          // "float32" or "bfloat16"
  bool distributed_optimizer = false;
  std::string arguments;             // the saving job's validated arguments, one flag per line
  std::string save_id;               // written into every shard and the index of the same save
  // Non-tensor state by key, "<owner>/<name>" -> value as text (a loss scaler's scale and counters,
  // ...): what modules add without a format change; checksummed with the index. Keys are free of
  // '=' and line breaks, values of line breaks (write_index refuses others).
  std::map<std::string, std::string> records;
  // Format version 1 (before whole-checkpoint checksums): nothing binds its shards to its index,
  // and its metadata carries no checksum; only the tensor chunks' checksums are verified.
  bool legacy = false;
};

// CheckpointMetadata::arguments ("--flag value" lines, strings quoted '...') as flag -> value,
// values as written.
std::map<std::string, std::string> arguments_by_flag(const std::string& arguments);

// Rank 0, once every shard is on disk: reads the shards' piece tables, checks that every global
// tensor is covered exactly (its pieces add up to its size, none overlapping), and writes and
// fsyncs the index.
absl::Status write_index(const std::string& directory, const std::vector<std::string>& shard_files,
                         const CheckpointMetadata& metadata);

// Reads a committed checkpoint: any slice of any global tensor, whatever layout wrote it.
//
// open() checks the index against itself (its run state, arguments and piece table against their
// CRC-32Cs) and its iteration against the directory's name (iter_<7 digits>); each shard is checked
// against the index when it is first opened (its size, the save id it carries, its piece table's
// checksum), so a shard copied in from another run or another save is refused naming the file.
class CheckpointReader {
 public:
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> open(const std::string& directory);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& directory() const { return directory_; }
  const CheckpointMetadata& metadata() const { return metadata_; }
  bool contains(const std::string& key) const { return tensors_.count(key) > 0; }
  std::vector<std::string> keys() const;
  // The global shape and stored dtype of a tensor (it must exist).
  const std::vector<int64_t>& global_shape(const std::string& key) const { return tensors_.at(key).global_shape; }
  DType stored_dtype(const std::string& key) const { return tensors_.at(key).dtype; }

  // The slice [offsets, offsets + shape) of `key` into host memory `out`, row-major, in `dtype`
  // (converted from the stored dtype: BF16 to FP32 exactly, FP32 to BF16 rounded to nearest even).
  // The slice's global shape must match the stored one.
  absl::Status read(const std::string& key, const std::vector<int64_t>& global_shape,
                    const std::vector<int64_t>& offsets, const std::vector<int64_t>& shape, DType dtype, void* out);
  // Many slices at once: the metadata is looked up here, then the checksummed chunks are fetched
  // (pread), verified (Fletcher-32) and copied on one thread per core, outside the HDF5 library.
  struct ReadRequest {
    std::string key;
    std::vector<int64_t> global_shape, offsets, shape;
    DType dtype = DType::kFloat32;
    void* out = nullptr;
  };
  absl::Status read_many(const std::vector<ReadRequest>& requests);
  // Every tensor's pieces tile it exactly (disjoint, adding up to it): what write_index checked
  // before the commit, checked again on what is on disk now.
  absl::Status check_coverage() const;
  // Reads every piece of every tensor, so that every checksum is verified.
  absl::Status verify_all();
  // Opens every shard the index lists, so that each is checked against the index.
  absl::Status verify_shards();

  struct StoredPiece {
    int shard = 0;  // index into shard_files()
    std::string dataset;
    std::vector<int64_t> offsets, counts;
  };
  struct StoredTensor {
    DType dtype = DType::kFloat32;
    std::vector<int64_t> global_shape;
    std::vector<StoredPiece> pieces;
  };
  const std::map<std::string, StoredTensor>& tensors() const { return tensors_; }
  const std::vector<std::string>& shard_files() const { return shard_files_; }

 private:
  CheckpointReader() = default;
  absl::StatusOr<Hdf5File*> shard(int index);
  // A version-2 shard against what the index recorded of it: save id, size, piece-table checksum.
  absl::Status check_shard(const Hdf5File& file, size_t index) const;
  // The chunk index of a piece's dataset, nullptr when it is not chunked with checksums.
  absl::StatusOr<const Hdf5File::ChunkIndex*> chunks_of(int shard, const std::string& dataset);
  absl::StatusOr<int> descriptor(int shard);  // a plain read-only descriptor of the shard file

  std::string directory_;
  CheckpointMetadata metadata_;
  std::map<std::string, StoredTensor> tensors_;
  std::vector<std::string> shard_files_;
  // What the index recorded of each shard (format version 2): its size and its piece table's CRC-32C.
  std::vector<int64_t> shard_bytes_;
  std::vector<int64_t> shard_table_checksums_;
  std::vector<std::unique_ptr<Hdf5File>> open_shards_;
  std::map<std::pair<int, std::string>, std::optional<Hdf5File::ChunkIndex>> chunk_indices_;
  std::map<int, int> descriptors_;
};

}  // namespace gpt

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/index_metadata.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <tuple>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/float16.h"
#include "checkpoint/fletcher32.h"
#include "core/checked_math.h"
#include "core/crc32c.h"

namespace gpt {
namespace {

using checkpoint_index::checksum;
using checkpoint_index::kPieceTable;
using checkpoint_index::read_metadata;
using checkpoint_index::write_metadata;


std::optional<DType> parse_dtype(std::string_view name) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt32, DType::kInt64}) {
    if (dtype_name(dtype) == name) return dtype;
  }
  return std::nullopt;
}

std::string join_numbers(const std::vector<int64_t>& values) { return absl::StrJoin(values, ","); }

std::optional<std::vector<int64_t>> parse_numbers(std::string_view text) {
  std::vector<int64_t> values;
  if (text.empty()) return values;
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(part, &value)) return std::nullopt;
    values.push_back(value);
  }
  return values;
}

std::optional<int64_t> volume(const std::vector<int64_t>& counts) {
  std::optional<int64_t> product = 1;
  for (int64_t c : counts) {
    if (c < 0) return std::nullopt;
    product = product ? checked_multiply(*product, c) : std::nullopt;
  }
  return product;
}

// Boxes (offsets, counts) that must tile a tensor exactly: pairwise disjoint and adding up to its
// size (each lies inside it: parse_table checks that). Empty when they do; otherwise what is wrong.
std::string tiling_problem(const std::vector<int64_t>& global_shape,
                           const std::vector<std::pair<const std::vector<int64_t>*, const std::vector<int64_t>*>>& boxes) {
  int64_t covered = 0;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const auto& [a_offsets, a_counts] = boxes[i];
    covered += *volume(*a_counts);
    for (size_t j = 0; j < i; ++j) {
      const auto& [b_offsets, b_counts] = boxes[j];
      bool overlap = *volume(*a_counts) > 0 && *volume(*b_counts) > 0;
      for (size_t d = 0; overlap && d < global_shape.size(); ++d) {
        overlap = std::max((*a_offsets)[d], (*b_offsets)[d]) <
                  std::min((*a_offsets)[d] + (*a_counts)[d], (*b_offsets)[d] + (*b_counts)[d]);
      }
      if (overlap) return absl::StrCat("pieces ", j, " and ", i, " overlap");
    }
  }
  if (covered != *volume(global_shape)) {
    return absl::StrCat("its pieces cover ", covered, " of its ", *volume(global_shape), " elements");
  }
  return "";
}

// One line of a piece table: key, dataset, dtype, global shape, offsets, counts[, shard].
struct PieceLine {
  std::string key, dataset;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> global_shape, offsets, counts;
  int shard = -1;
};

std::string format_line(const PieceLine& line) {
  std::string text = absl::StrCat(line.key, "\t", line.dataset, "\t", std::string(dtype_name(line.dtype)), "\t",
                                  join_numbers(line.global_shape), "\t", join_numbers(line.offsets), "\t",
                                  join_numbers(line.counts));
  if (line.shard >= 0) absl::StrAppend(&text, "\t", line.shard);
  return text + "\n";
}

// Checks what a damaged table could get wrong: fields, numbers, ranks, and that the piece lies
// inside its global tensor.
absl::StatusOr<std::vector<PieceLine>> parse_table(const std::string& text, const std::string& file, bool with_shard) {
  std::vector<PieceLine> lines;
  int number = 0;
  for (absl::string_view row : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    ++number;
    const std::vector<std::string> fields = absl::StrSplit(row, '\t');
    auto bad = [&](const std::string& why) {
      return absl::DataLossError(absl::StrCat(file, ": piece table line ", number, " is damaged (", why, ")"));
    };
    if (fields.size() != (with_shard ? 7u : 6u)) return bad("wrong number of fields");
    PieceLine line;
    line.key = fields[0];
    line.dataset = fields[1];
    const std::optional<DType> dtype = parse_dtype(fields[2]);
    auto global = parse_numbers(fields[3]), offsets = parse_numbers(fields[4]), counts = parse_numbers(fields[5]);
    if (!dtype || !global || !offsets || !counts) return bad("not numbers");
    line.dtype = *dtype;
    line.global_shape = *global;
    line.offsets = *offsets;
    line.counts = *counts;
    const size_t rank = line.global_shape.size();
    if (rank < 1 || rank > 2 || line.offsets.size() != rank || line.counts.size() != rank) return bad("ranks differ");
    for (size_t d = 0; d < rank; ++d) {
      const std::optional<int64_t> end = checked_add(line.offsets[d], line.counts[d]);
      if (line.offsets[d] < 0 || line.counts[d] < 0 || !end || *end > line.global_shape[d]) {
        return bad("piece outside its tensor");
      }
    }
    if (with_shard && (!absl::SimpleAtoi(fields[6], &line.shard) || line.shard < 0)) return bad("shard number");
    lines.push_back(std::move(line));
  }
  return lines;
}

// Rows [0, rows) of `columns` elements each, from `source` (row stride source_stride elements) to
// `destination` (row stride destination_stride), converting the element type.
void copy_rows(const unsigned char* source, DType source_dtype, int64_t source_stride, unsigned char* destination,
               DType destination_dtype, int64_t destination_stride, int64_t rows, int64_t columns) {
  const size_t source_size = dtype_size(source_dtype), destination_size = dtype_size(destination_dtype);
  for (int64_t r = 0; r < rows; ++r) {
    const unsigned char* from = source + static_cast<size_t>(r * source_stride) * source_size;
    unsigned char* to = destination + static_cast<size_t>(r * destination_stride) * destination_size;
    if (source_dtype == destination_dtype) {
      std::memcpy(to, from, static_cast<size_t>(columns) * source_size);
    } else {
      // Between float32, bfloat16 and float16 through FP32: widening is exact, so the only
      // rounding is the destination's (to nearest even).
      for (int64_t c = 0; c < columns; ++c) {
        float value;
        if (source_dtype == DType::kFloat32) {
          std::memcpy(&value, from + 4 * c, 4);
        } else {
          uint16_t bits;
          std::memcpy(&bits, from + 2 * c, 2);
          value = source_dtype == DType::kFloat16 ? fp16_bits_to_float(bits) : bf16_bits_to_float(bits);
        }
        if (destination_dtype == DType::kFloat32) {
          std::memcpy(to + 4 * c, &value, 4);
        } else {
          const uint16_t bits =
              destination_dtype == DType::kFloat16 ? float_to_fp16_bits(value) : float_to_bf16_bits(value);
          std::memcpy(to + 2 * c, &bits, 2);
        }
      }
    }
  }
}

bool is_float(DType dtype) { return is_float_dtype(dtype); }

}  // namespace

std::map<std::string, std::string> arguments_by_flag(const std::string& arguments) {
  std::map<std::string, std::string> values;
  for (absl::string_view line : absl::StrSplit(arguments, '\n', absl::SkipEmpty())) {
    const std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    values[kv.first] = kv.second;
  }
  return values;
}

std::string iteration_directory_name(int64_t iteration) { return absl::StrFormat("iter_%07d", iteration); }
std::string shard_file_name(int world_rank) { return absl::StrFormat("shard_%05d.h5", world_rank); }

absl::Status write_shard(const std::string& path, const std::vector<HostPiece>& pieces, const std::string& save_id,
                         int64_t iteration) {
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  GPT_ASSIGN_OR_RETURN(Hdf5File file, Hdf5File::create(path));
  std::string table;
  std::map<std::string, int> per_key;
  for (const HostPiece& piece : pieces) {
    const ShardedTensor& r = piece.record;
    const std::string dataset = absl::StrCat(r.key, "/", per_key[r.key]++);
    GPT_RETURN_IF_ERROR(file.write_checksummed(dataset, piece.dtype, r.local_shape, piece.bytes.data(), threads));
    table += format_line({r.key, dataset, piece.dtype, r.global_shape, r.offsets, r.local_shape, -1});
  }
  GPT_RETURN_IF_ERROR(file.write_text(kPieceTable, table));
  GPT_RETURN_IF_ERROR(file.set_attribute("save_id", save_id));
  GPT_RETURN_IF_ERROR(file.set_attribute("iteration", iteration));
  return file.close_and_sync();
}

int64_t new_save_id() {
  std::random_device device;
  const uint64_t high = device(), low = device();
  return static_cast<int64_t>(((high << 32) ^ low) >> 1);
}

std::string save_id_text(int64_t id) { return absl::StrFormat("%016x", id); }

absl::Status write_index(const std::string& directory, const std::vector<std::string>& shard_files,
                         const CheckpointMetadata& metadata) {
  struct GlobalTensor {
    DType dtype;
    std::vector<int64_t> global_shape;
    std::vector<PieceLine> pieces;
  };
  std::map<std::string, GlobalTensor> tensors;
  std::string table;
  std::vector<int64_t> shard_bytes, shard_checksums;
  for (size_t s = 0; s < shard_files.size(); ++s) {
    const std::string path = absl::StrCat(directory, "/", shard_files[s]);
    {
      GPT_ASSIGN_OR_RETURN(const Hdf5File shard, Hdf5File::open_read_only(path));
      GPT_ASSIGN_OR_RETURN(const std::string text, shard.read_text(kPieceTable));
      // Every shard of this save carries its id: one left over from another save is caught here.
      const absl::StatusOr<std::string> id = shard.attribute_string("save_id");
      if (!id.ok() || *id != metadata.save_id) {
        return absl::DataLossError(absl::StrCat(path, " is not a shard of this save (save id ",
                                                id.ok() ? *id : "missing", ", this save's ", metadata.save_id, ")"));
      }
      GPT_ASSIGN_OR_RETURN(std::vector<PieceLine> lines, parse_table(text, path, /*with_shard=*/false));
      shard_checksums.push_back(checksum(text));
      for (PieceLine& line : lines) {
        line.shard = static_cast<int>(s);
        table += format_line(line);
        auto [it, inserted] = tensors.try_emplace(line.key, GlobalTensor{line.dtype, line.global_shape, {}});
        if (it->second.dtype != line.dtype || it->second.global_shape != line.global_shape) {
          return absl::InternalError(absl::StrCat("checkpoint ", directory, ": pieces of '", line.key,
                                                  "' disagree on dtype or global shape"));
        }
        it->second.pieces.push_back(std::move(line));
      }
    }
    std::error_code error;
    const uintmax_t bytes = std::filesystem::file_size(path, error);
    if (error) return absl::DataLossError(absl::StrCat("cannot stat ", path, ": ", error.message()));
    shard_bytes.push_back(static_cast<int64_t>(bytes));
  }
  // Every element written exactly once.
  for (const auto& [key, tensor] : tensors) {
    std::vector<std::pair<const std::vector<int64_t>*, const std::vector<int64_t>*>> boxes;
    for (const PieceLine& line : tensor.pieces) boxes.emplace_back(&line.offsets, &line.counts);
    const std::string problem = tiling_problem(tensor.global_shape, boxes);
    if (!problem.empty()) {
      return absl::InternalError(absl::StrCat("checkpoint ", directory, ": tensor '", key, "': ", problem));
    }
  }
  GPT_ASSIGN_OR_RETURN(Hdf5File index, Hdf5File::create(absl::StrCat(directory, "/", kIndexFileName)));
  GPT_RETURN_IF_ERROR(write_metadata(index, metadata, absl::StrJoin(shard_files, ","), join_numbers(shard_bytes),
                                     join_numbers(shard_checksums), table));
  for (const auto& [key, tensor] : tensors) {
    std::vector<Hdf5File::VirtualPiece> pieces;
    for (const PieceLine& line : tensor.pieces) {
      if (*volume(line.counts) == 0) continue;
      // Relative to the index: HDF5 looks for a relative source beside the virtual file.
      pieces.push_back({shard_files[static_cast<size_t>(line.shard)], line.dataset, line.offsets, line.counts});
    }
    GPT_RETURN_IF_ERROR(index.create_virtual(key, tensor.dtype, tensor.global_shape, pieces));
  }
  return index.close_and_sync();
}

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::open(const std::string& directory) {
  const std::string path = absl::StrCat(directory, "/", kIndexFileName);
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", directory, " does not exist"));
  }
  // "Missing" only when it is: a permission problem is said as one.
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (error && error != std::errc::no_such_file_or_directory) {
    return absl::PermissionDeniedError(absl::StrCat("cannot access ", path, ": ", error.message()));
  }
  if (!std::filesystem::exists(status)) {
    return absl::DataLossError(absl::StrCat("checkpoint ", directory, " has no ", kIndexFileName,
                                            " (an incomplete save?)"));
  }
  if (::access(path.c_str(), R_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<CheckpointReader> reader(new CheckpointReader());
  reader->directory_ = directory;
  GPT_ASSIGN_OR_RETURN(const Hdf5File index, Hdf5File::open_read_only(path));
  GPT_RETURN_IF_ERROR(read_metadata(index, reader->metadata_));
  const CheckpointMetadata& m = reader->metadata_;
  // An index copied in from another checkpoint: its iteration is not its directory's (nor then the
  // tracker's, which named the directory).
  std::string trimmed = directory;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const std::string name = std::filesystem::path(trimmed).filename().string();
  int64_t named_iteration = 0;
  if (name.size() == 12 && name.rfind("iter_", 0) == 0 && absl::SimpleAtoi(name.substr(5), &named_iteration) &&
      named_iteration != m.iteration) {
    return absl::DataLossError(absl::StrCat(path, " records iteration ", m.iteration, " but lies in ", name,
                                            " (iteration ", named_iteration, "): an index of another checkpoint"));
  }
  GPT_ASSIGN_OR_RETURN(const std::string text, index.read_text(kPieceTable));
  if (!m.legacy) {
    GPT_ASSIGN_OR_RETURN(const int64_t pieces_checksum, index.attribute_int("pieces_checksum"));
    if (checksum(text) != pieces_checksum) {
      return absl::DataLossError(absl::StrCat(path, ": its piece table ('", kPieceTable,
                                              "') does not match its checksum: the index is damaged or was edited"));
    }
  }
  GPT_ASSIGN_OR_RETURN(std::vector<PieceLine> lines, parse_table(text, path, /*with_shard=*/true));
  int shards = 0;
  for (PieceLine& line : lines) {
    shards = std::max(shards, line.shard + 1);
    StoredTensor& tensor = reader->tensors_[line.key];
    if (tensor.pieces.empty()) {
      tensor.dtype = line.dtype;
      tensor.global_shape = line.global_shape;
    } else if (tensor.dtype != line.dtype || tensor.global_shape != line.global_shape) {
      return absl::DataLossError(absl::StrCat(path, ": pieces of '", line.key, "' disagree on dtype or shape"));
    }
    tensor.pieces.push_back({line.shard, line.dataset, line.offsets, line.counts});
  }
  // The piece table numbers the shards in the order of the index's "shard_files" list.
  GPT_ASSIGN_OR_RETURN(const std::string listed, index.attribute_string("shard_files"));
  std::vector<std::string> names = absl::StrSplit(listed, ',', absl::SkipEmpty());
  if (static_cast<int>(names.size()) < shards) {
    return absl::DataLossError(absl::StrCat(path, ": the piece table names more shards than the index lists"));
  }
  reader->shard_files_ = names;
  reader->open_shards_.resize(names.size());
  if (!m.legacy) {
    // Covered by the run-state checksum already: only their number can still be off.
    GPT_ASSIGN_OR_RETURN(const std::string bytes, index.attribute_string("shard_bytes"));
    GPT_ASSIGN_OR_RETURN(const std::string checksums, index.attribute_string("shard_table_checksums"));
    const std::optional<std::vector<int64_t>> parsed_bytes = parse_numbers(bytes);
    const std::optional<std::vector<int64_t>> parsed_checksums = parse_numbers(checksums);
    if (!parsed_bytes || !parsed_checksums || parsed_bytes->size() != names.size() ||
        parsed_checksums->size() != names.size()) {
      return absl::DataLossError(absl::StrCat(path, ": the shard sizes and checksums do not match its shard list"));
    }
    reader->shard_bytes_ = *parsed_bytes;
    reader->shard_table_checksums_ = *parsed_checksums;
  }
  return reader;
}

absl::Status CheckpointReader::check_coverage() const {
  for (const auto& [key, tensor] : tensors_) {
    std::vector<std::pair<const std::vector<int64_t>*, const std::vector<int64_t>*>> boxes;
    for (const StoredPiece& piece : tensor.pieces) boxes.emplace_back(&piece.offsets, &piece.counts);
    const std::string problem = tiling_problem(tensor.global_shape, boxes);
    if (!problem.empty()) {
      return absl::DataLossError(absl::StrCat("checkpoint ", directory_, ": tensor '", key, "': ", problem));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> CheckpointReader::keys() const {
  std::vector<std::string> result;
  for (const auto& [key, tensor] : tensors_) result.push_back(key);
  return result;
}

absl::StatusOr<Hdf5File*> CheckpointReader::shard(int index) {
  std::unique_ptr<Hdf5File>& slot = open_shards_[static_cast<size_t>(index)];
  if (!slot) {
    const std::string path = absl::StrCat(directory_, "/", shard_files_[static_cast<size_t>(index)]);
    std::error_code error;
    if (!std::filesystem::exists(path, error)) {
      return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " is missing"));
    }
    if (::access(path.c_str(), R_OK) != 0) {
      return absl::PermissionDeniedError(absl::StrCat("checkpoint shard ", path, " cannot be read: ",
                                                      std::strerror(errno)));
    }
    absl::StatusOr<Hdf5File> file = Hdf5File::open_read_only(path);
    if (!file.ok()) {
      return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " is not HDF5 (truncated?)"));
    }
    if (!metadata_.legacy) GPT_RETURN_IF_ERROR(check_shard(*file, static_cast<size_t>(index)));
    slot = std::make_unique<Hdf5File>(std::move(*file));
  }
  return slot.get();
}

absl::Status CheckpointReader::check_shard(const Hdf5File& file, size_t index) const {
  const std::string& path = file.path();
  const absl::StatusOr<std::string> id = file.attribute_string("save_id");
  if (!id.ok() || *id != metadata_.save_id) {
    const absl::StatusOr<int64_t> iteration = file.attribute_int("iteration");
    return absl::DataLossError(absl::StrCat(
        "checkpoint shard ", path, " belongs to another save (save id ", id.ok() ? *id : "missing",
        iteration.ok() ? absl::StrCat(", iteration ", *iteration) : "", "; the index's: ", metadata_.save_id,
        ", iteration ", metadata_.iteration, "): a shard copied in from another run or checkpoint"));
  }
  std::error_code error;
  const uintmax_t bytes = std::filesystem::file_size(path, error);
  if (error || static_cast<int64_t>(bytes) != shard_bytes_[index]) {
    return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " is ", error ? 0 : bytes,
                                            " bytes, the index recorded ", shard_bytes_[index],
                                            " (truncated or rewritten after the save)"));
  }
  const absl::StatusOr<std::string> table = file.read_text(kPieceTable);
  if (!table.ok() || checksum(*table) != shard_table_checksums_[index]) {
    return absl::DataLossError(absl::StrCat("checkpoint shard ", path,
                                            ": its piece table does not match the checksum the index recorded"));
  }
  return absl::OkStatus();
}

absl::Status CheckpointReader::verify_shards() {
  for (size_t s = 0; s < shard_files_.size(); ++s) GPT_RETURN_IF_ERROR(shard(static_cast<int>(s)).status());
  return absl::OkStatus();
}

absl::Status CheckpointReader::read(const std::string& key, const std::vector<int64_t>& global_shape,
                                    const std::vector<int64_t>& offsets, const std::vector<int64_t>& shape, DType dtype,
                                    void* out) {
  return read_many({{key, global_shape, offsets, shape, dtype, out}});
}

absl::StatusOr<const Hdf5File::ChunkIndex*> CheckpointReader::chunks_of(int shard_number, const std::string& dataset) {
  const std::pair<int, std::string> id(shard_number, dataset);
  auto it = chunk_indices_.find(id);
  if (it == chunk_indices_.end()) {
    GPT_ASSIGN_OR_RETURN(Hdf5File* file, shard(shard_number));
    absl::StatusOr<Hdf5File::ChunkIndex> index = file->chunk_index(dataset);
    if (!index.ok() && index.status().code() != absl::StatusCode::kNotFound) return index.status();
    // Not chunked in checksummed rows (an empty piece): read through the library instead.
    std::optional<Hdf5File::ChunkIndex> usable;
    if (index.ok() && index->fletcher32) usable = std::move(*index);
    it = chunk_indices_.emplace(id, std::move(usable)).first;
  }
  return it->second ? &*it->second : nullptr;
}

absl::StatusOr<int> CheckpointReader::descriptor(int shard_number) {
  auto it = descriptors_.find(shard_number);
  if (it != descriptors_.end()) return it->second;
  const std::string path = absl::StrCat(directory_, "/", shard_files_[static_cast<size_t>(shard_number)]);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::DataLossError(absl::StrCat("checkpoint shard ", path, " cannot be opened"));
  descriptors_[shard_number] = fd;
  return fd;
}

CheckpointReader::~CheckpointReader() {
  for (const auto& [shard_number, fd] : descriptors_) ::close(fd);
}

namespace {

// One checksummed chunk to fetch, verify and copy part of into a request's output.
struct ChunkTask {
  int fd = -1;
  uint64_t address = 0, stored_bytes = 0;  // in the shard file; the checksum is the last 4 bytes
  DType stored_dtype = DType::kFloat32;
  int64_t columns = 0;                     // of the stored piece
  int64_t row_begin = 0, rows = 0;         // within the chunk
  int64_t column_begin = 0, column_count = 0;
  unsigned char* destination = nullptr;
  DType dtype = DType::kFloat32;
  int64_t destination_stride = 0;          // elements per row of the output
  const std::string* key = nullptr;
  std::string file;
};

absl::Status run_chunk_task(const ChunkTask& task, std::vector<unsigned char>& buffer) {
  buffer.resize(static_cast<size_t>(task.stored_bytes));
  size_t done = 0;
  while (done < buffer.size()) {
    const ssize_t got = ::pread(task.fd, buffer.data() + done, buffer.size() - done,
                                static_cast<off_t>(task.address + done));
    if (got <= 0) {
      return absl::DataLossError(absl::StrCat("tensor '", *task.key, "': ", task.file,
                                              ": the file ends inside a chunk (truncated file)"));
    }
    done += static_cast<size_t>(got);
  }
  if (task.stored_bytes < 4 || !fletcher32_matches(buffer.data(), buffer.size() - 4)) {
    return absl::DataLossError(absl::StrCat("tensor '", *task.key, "': ", task.file,
                                            ": checksum mismatch (the file is damaged)"));
  }
  const size_t element = dtype_size(task.stored_dtype);
  const int64_t needed = (task.row_begin + task.rows) * task.columns;
  if (static_cast<uint64_t>(needed) * element > task.stored_bytes - 4) {
    return absl::DataLossError(absl::StrCat("tensor '", *task.key, "': ", task.file, ": a chunk is too short"));
  }
  copy_rows(buffer.data() + static_cast<size_t>(task.row_begin * task.columns + task.column_begin) * element,
            task.stored_dtype, task.columns, task.destination, task.dtype, task.destination_stride, task.rows,
            task.column_count);
  return absl::OkStatus();
}

// Runs the tasks on up to `threads` threads, in file order (the disk reads ahead); the first error
// in that order wins.
absl::Status run_chunk_tasks(std::vector<ChunkTask> tasks, int threads) {
  std::sort(tasks.begin(), tasks.end(), [](const ChunkTask& a, const ChunkTask& b) {
    return std::tie(a.fd, a.address) < std::tie(b.fd, b.address);
  });
  // Every chunk requested from the kernel up front: it reads ahead at the disk's speed while the
  // threads verify and copy what has arrived.
  for (const ChunkTask& task : tasks) {
    ::posix_fadvise(task.fd, static_cast<off_t>(task.address), static_cast<off_t>(task.stored_bytes),
                    POSIX_FADV_WILLNEED);
  }
  threads = std::max(1, std::min<int>(threads, static_cast<int>(tasks.size())));
  std::atomic<size_t> next{0};
  std::vector<absl::Status> errors(tasks.size());
  auto work = [&] {
    std::vector<unsigned char> buffer;
    for (size_t t = next++; t < tasks.size(); t = next++) errors[t] = run_chunk_task(tasks[t], buffer);
  };
  std::vector<std::thread> workers;
  for (int w = 1; w < threads; ++w) workers.emplace_back(work);
  work();
  for (std::thread& worker : workers) worker.join();
  for (const absl::Status& error : errors) GPT_RETURN_IF_ERROR(error);
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckpointReader::read_many(const std::vector<ReadRequest>& requests) {
  std::vector<ChunkTask> tasks;
  std::vector<unsigned char> staging;
  for (const ReadRequest& request : requests) {
    const std::string& key = request.key;
    auto it = tensors_.find(key);
    if (it == tensors_.end()) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", directory_, " has no tensor '", key, "'"));
    }
    const StoredTensor& tensor = it->second;
    if (tensor.global_shape != request.global_shape) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", directory_, ": tensor '", key, "' has global shape [", join_numbers(tensor.global_shape),
          "], this model's is [", join_numbers(request.global_shape),
          "] (a different model size or vocabulary padding?)"));
    }
    const DType dtype = request.dtype;
    if (is_float(tensor.dtype) != is_float(dtype) || (!is_float(dtype) && tensor.dtype != dtype)) {
      return absl::FailedPreconditionError(absl::StrCat("checkpoint ", directory_, ": tensor '", key,
                                                        "' is stored as ", std::string(dtype_name(tensor.dtype))));
    }
    const size_t rank = request.global_shape.size();
    // As [rows, columns] boxes: a vector is a column of rows, as the chunk index sees it.
    auto column_of = [&](const std::vector<int64_t>& v, int64_t fill) { return rank == 2 ? v[1] : fill; };
    const int64_t want_row = request.offsets[0], want_column = column_of(request.offsets, 0);
    const int64_t want_rows = request.shape[0], want_columns = column_of(request.shape, 1);
    int64_t covered = 0;
    for (const StoredPiece& piece : tensor.pieces) {
      const int64_t piece_row = piece.offsets[0], piece_column = column_of(piece.offsets, 0);
      const int64_t piece_columns = column_of(piece.counts, 1);
      const int64_t row_begin = std::max(want_row, piece_row);
      const int64_t row_end = std::min(want_row + want_rows, piece_row + piece.counts[0]);
      const int64_t column_begin = std::max(want_column, piece_column);
      const int64_t column_end = std::min(want_column + want_columns, piece_column + piece_columns);
      if (row_begin >= row_end || column_begin >= column_end) continue;
      const int64_t rows = row_end - row_begin, columns = column_end - column_begin;
      covered += rows * columns;
      unsigned char* destination =
          static_cast<unsigned char*>(request.out) +
          static_cast<size_t>((row_begin - want_row) * want_columns + (column_begin - want_column)) * dtype_size(dtype);
      auto named = [&](const absl::Status& status) {
        return absl::Status(status.code(), absl::StrCat("tensor '", key, "': ", status.message()));
      };
      absl::StatusOr<const Hdf5File::ChunkIndex*> chunks = chunks_of(piece.shard, piece.dataset);
      if (!chunks.ok()) return named(chunks.status());
      if (*chunks != nullptr) {
        // Fetched, verified and copied on several threads below, chunk by chunk.
        const Hdf5File::ChunkIndex& index = **chunks;
        if (index.dtype != tensor.dtype || index.columns != piece_columns || index.rows != piece.counts[0]) {
          return named(absl::DataLossError(absl::StrCat(shard_files_[static_cast<size_t>(piece.shard)],
                                                        ": dataset '", piece.dataset, "' disagrees with the index")));
        }
        absl::StatusOr<int> fd = descriptor(piece.shard);
        if (!fd.ok()) return named(fd.status());
        const int64_t first = row_begin - piece_row, last = row_end - piece_row;  // rows of the piece
        for (int64_t c = first / index.chunk_rows; c * index.chunk_rows < last; ++c) {
          const int64_t chunk_first = std::max(first, c * index.chunk_rows);
          const int64_t chunk_last = std::min(last, (c + 1) * index.chunk_rows);
          ChunkTask task;
          task.fd = *fd;
          task.address = index.addresses[static_cast<size_t>(c)];
          task.stored_bytes = index.sizes[static_cast<size_t>(c)];
          task.stored_dtype = tensor.dtype;
          task.columns = piece_columns;
          task.row_begin = chunk_first - c * index.chunk_rows;
          task.rows = chunk_last - chunk_first;
          task.column_begin = column_begin - piece_column;
          task.column_count = columns;
          task.destination =
              destination + static_cast<size_t>((chunk_first - first) * want_columns) * dtype_size(dtype);
          task.dtype = dtype;
          task.destination_stride = want_columns;
          task.key = &key;
          task.file = absl::StrCat(directory_, "/", shard_files_[static_cast<size_t>(piece.shard)]);
          tasks.push_back(std::move(task));
        }
        continue;
      }
      // Through the library, here.
      std::vector<int64_t> slab_offsets = {row_begin - piece_row}, slab_counts = {rows};
      if (rank == 2) {
        slab_offsets.push_back(column_begin - piece_column);
        slab_counts.push_back(columns);
      }
      staging.resize(static_cast<size_t>(rows * columns) * dtype_size(tensor.dtype));
      absl::StatusOr<Hdf5File*> file = shard(piece.shard);
      if (!file.ok()) return named(file.status());
      const absl::Status status =
          (*file)->read_slab(piece.dataset, slab_offsets, slab_counts, tensor.dtype, staging.data());
      if (!status.ok()) return named(status);
      copy_rows(staging.data(), tensor.dtype, columns, destination, dtype, want_columns, rows, columns);
    }
    if (covered != want_rows * want_columns) {
      return absl::DataLossError(absl::StrCat("checkpoint ", directory_, ": tensor '", key, "' lacks ",
                                              want_rows * want_columns - covered, " elements of the slice at [",
                                              join_numbers(request.offsets), "]"));
    }
  }
  return run_chunk_tasks(std::move(tasks), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

absl::Status CheckpointReader::verify_all() {
  // Every piece read whole, in its stored dtype: every chunk's checksum is verified.
  std::vector<std::vector<unsigned char>> buffers;
  std::vector<ReadRequest> requests;
  for (const auto& [key, tensor] : tensors_) {
    for (const StoredPiece& piece : tensor.pieces) {
      buffers.emplace_back(static_cast<size_t>(*volume(piece.counts)) * dtype_size(tensor.dtype));
      requests.push_back({key, tensor.global_shape, piece.offsets, piece.counts, tensor.dtype, buffers.back().data()});
    }
  }
  return read_many(requests);
}

}  // namespace gpt

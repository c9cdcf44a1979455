#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "data/file_access.h"

namespace gpt {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;

size_t element_size_of(uint8_t code) {
  switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: case 7: return 4;
    case 5: case 6: return 8;
    default: return 0;
  }
}

template <typename T>
void append(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

}  // namespace

TokenDtype token_dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDtype::kUint16 : TokenDtype::kInt32;
}

absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::create(const std::string& prefix,
                                                                                  TokenDtype dtype) {
  std::unique_ptr<IndexedDatasetWriter> writer(new IndexedDatasetWriter(prefix, dtype));
  const std::string temporary = prefix + ".bin.tmp";
  writer->bin_ = std::fopen(temporary.c_str(), "wb");
  if (writer->bin_ == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", temporary, ": ", std::strerror(errno)));
  }
  return writer;
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (bin_ != nullptr) std::fclose(bin_);
  if (!finished_) std::remove((prefix_ + ".bin.tmp").c_str());
}

absl::Status IndexedDatasetWriter::add_document(std::span<const int32_t> tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {  // the .idx stores lengths as int32
    return absl::InvalidArgumentError(absl::StrCat(prefix_, ": a document of ", tokens.size(),
                                                   " tokens is longer than the format's 2^31 - 1"));
  }
  const size_t size = dtype_ == TokenDtype::kUint16 ? 2 : 4;
  buffer_.resize(tokens.size() * size);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (dtype_ == TokenDtype::kUint16) {
      GPT_CHECK(tokens[i] >= 0 && tokens[i] < 65536) << "token " << tokens[i] << " does not fit uint16";
      const uint16_t value = static_cast<uint16_t>(tokens[i]);
      std::memcpy(buffer_.data() + 2 * i, &value, 2);
    } else {
      std::memcpy(buffer_.data() + 4 * i, &tokens[i], 4);
    }
  }
  if (!buffer_.empty() && std::fwrite(buffer_.data(), 1, buffer_.size(), bin_) != buffer_.size()) {
    return absl::DataLossError(absl::StrCat("writing ", prefix_, ".bin.tmp failed: ", std::strerror(errno)));
  }
  pointers_.push_back(bytes_written_);
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  bytes_written_ += static_cast<int64_t>(buffer_.size());
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::finish() {
  if (std::fflush(bin_) != 0 || ::fsync(::fileno(bin_)) != 0 || std::fclose(bin_) != 0) {
    bin_ = nullptr;
    return absl::DataLossError(absl::StrCat("closing ", prefix_, ".bin.tmp failed: ", std::strerror(errno)));
  }
  bin_ = nullptr;
  std::string index(kMagic, sizeof(kMagic));
  append(index, kVersion);
  append(index, static_cast<uint8_t>(dtype_));
  const uint64_t sequences = lengths_.size();
  append(index, sequences);
  append(index, static_cast<uint64_t>(sequences + 1));  // document indices: one sequence per document
  index.append(reinterpret_cast<const char*>(lengths_.data()), lengths_.size() * sizeof(int32_t));
  index.append(reinterpret_cast<const char*>(pointers_.data()), pointers_.size() * sizeof(int64_t));
  for (uint64_t d = 0; d <= sequences; ++d) append(index, static_cast<int64_t>(d));
  const std::string index_temporary = prefix_ + ".idx.tmp";
  {
    std::ofstream out(index_temporary, std::ios::binary | std::ios::trunc);
    out.write(index.data(), static_cast<std::streamsize>(index.size()));
    if (!out.flush()) return absl::DataLossError(absl::StrCat("writing ", index_temporary, " failed"));
  }
  std::error_code error;
  std::filesystem::rename(prefix_ + ".bin.tmp", prefix_ + ".bin", error);
  if (!error) std::filesystem::rename(index_temporary, prefix_ + ".idx", error);
  if (error) return absl::DataLossError(absl::StrCat("renaming the output of ", prefix_, ": ", error.message()));
  finished_ = true;
  return absl::OkStatus();
}

namespace {

constexpr int64_t kHeaderBytes = 34;  // magic 9, version 8, dtype 1, sequence count 8, document count 8

// The .idx bytes a header's counts call for, or nullopt when they overflow 64 bits: a damaged count
// near 2^62 must fail the size check, not wrap around and pass it.
std::optional<uint64_t> index_bytes_for(uint64_t sequences, uint64_t documents) {
  uint64_t per_sequence = 0, sequence_bytes = 0, document_bytes = 0, total = 0;
  if (__builtin_mul_overflow(sequences, uint64_t{4 + 8}, &sequence_bytes) ||
      __builtin_mul_overflow(documents, uint64_t{8}, &document_bytes) ||
      __builtin_add_overflow(sequence_bytes, document_bytes, &per_sequence) ||
      __builtin_add_overflow(per_sequence, static_cast<uint64_t>(kHeaderBytes), &total)) {
    return std::nullopt;
  }
  return total;
}

// 64-bit FNV-1a continued over `bytes`: the .idx checksum that keys the index cache.
uint64_t fnv1a_continue(uint64_t hash, const void* bytes, size_t count) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  for (size_t i = 0; i < count; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace

absl::StatusOr<std::unique_ptr<IndexedDataset>> IndexedDataset::open(const std::string& prefix) {
  const std::string index_path = prefix + ".idx", bin_path = prefix + ".bin";
  absl::StatusOr<ReadOnlyFile> index_file = ReadOnlyFile::open("dataset index", index_path);
  if (!index_file.ok()) {
    if (!absl::IsNotFound(index_file.status())) return index_file.status();
    return absl::NotFoundError(
        absl::StrCat(index_file.status().message(), " (--data-path takes the prefix, without .bin/.idx)"));
  }
  const int64_t index_bytes = index_file->size();
  // The header: a file too short to hold one is truncated if what it has matches the magic.
  char header[kHeaderBytes] = {};
  const int64_t header_read = std::min(index_bytes, kHeaderBytes);
  if (!index_file->read_at(0, header, header_read)) {
    return absl::DataLossError(absl::StrCat("cannot read dataset index ", index_path, ": ", std::strerror(errno)));
  }
  if (std::memcmp(header, kMagic, static_cast<size_t>(std::min<int64_t>(header_read, sizeof(kMagic)))) != 0) {
    return absl::DataLossError(absl::StrCat(index_path, " is not a Megatron indexed-dataset index (bad magic)"));
  }
  if (index_bytes < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(index_path, " is truncated: ", index_bytes, " bytes, shorter than the ",
                                            kHeaderBytes, "-byte header"));
  }
  uint64_t version = 0, sequences = 0, documents = 0;
  uint8_t code = 0;
  std::memcpy(&version, header + 9, 8);
  std::memcpy(&code, header + 17, 1);
  std::memcpy(&sequences, header + 18, 8);
  std::memcpy(&documents, header + 26, 8);
  if (version != kVersion) return absl::DataLossError(absl::StrCat(index_path, ": unsupported version ", version));
  const size_t size = element_size_of(code);
  if (size == 0) return absl::DataLossError(absl::StrCat(index_path, ": unknown dtype code ", static_cast<int>(code)));
  if (code != 8 && code != 4 && code != 5 && code != 1 && code != 3) {
    return absl::DataLossError(absl::StrCat(index_path, ": token dtype code ", static_cast<int>(code), " is not an integer type"));
  }
  const std::string counts = absl::StrCat(sequences, " sequences, ", documents, " document indices");
  if (documents == 0) {
    return absl::DataLossError(absl::StrCat(index_path, ": its header (", counts,
                                            ") has no document indices (at least one, 0, is needed): damaged"));
  }
  const std::optional<uint64_t> expected_index = index_bytes_for(sequences, documents);
  if (!expected_index || *expected_index > static_cast<uint64_t>(index_bytes)) {
    return absl::DataLossError(absl::StrCat(
        index_path, " is truncated: ", index_bytes, " bytes, but its header (", counts, ") needs ",
        expected_index ? absl::StrCat(*expected_index) : std::string("more than 2^64")));
  }
  if (*expected_index < static_cast<uint64_t>(index_bytes)) {
    return absl::DataLossError(absl::StrCat(index_path, " is ", index_bytes, " bytes, but its header (", counts,
                                            ") describes ", *expected_index, ": damaged (trailing bytes)"));
  }
  // From here the counts are bounded by the file's size, so the arrays fit in memory.
  std::unique_ptr<IndexedDataset> dataset(new IndexedDataset());
  dataset->prefix_ = prefix;
  dataset->dtype_code_ = code;
  dataset->element_size_ = size;
  dataset->index_bytes_ = index_bytes;
  dataset->lengths_.resize(sequences);
  dataset->pointers_.resize(sequences);
  dataset->document_indices_.resize(documents);
  const int64_t lengths_at = kHeaderBytes, pointers_at = lengths_at + static_cast<int64_t>(sequences) * 4,
                documents_at = pointers_at + static_cast<int64_t>(sequences) * 8;
  if (!index_file->read_at(lengths_at, dataset->lengths_.data(), static_cast<int64_t>(sequences) * 4) ||
      !index_file->read_at(pointers_at, dataset->pointers_.data(), static_cast<int64_t>(sequences) * 8) ||
      !index_file->read_at(documents_at, dataset->document_indices_.data(), static_cast<int64_t>(documents) * 8)) {
    return absl::DataLossError(absl::StrCat("cannot read dataset index ", index_path, " (", std::strerror(errno),
                                            "): truncated while reading?"));
  }
  uint64_t checksum = fnv1a_continue(0xcbf29ce484222325ull, header, sizeof(header));
  checksum = fnv1a_continue(checksum, dataset->lengths_.data(), sequences * 4);
  checksum = fnv1a_continue(checksum, dataset->pointers_.data(), sequences * 8);
  dataset->index_checksum_ = fnv1a_continue(checksum, dataset->document_indices_.data(), documents * 8);

  // Every sequence must lie inside .bin, back to back.
  GPT_ASSIGN_OR_RETURN(ReadOnlyFile bin_file, ReadOnlyFile::open("dataset tokens", bin_path));
  const int64_t bin_bytes = bin_file.size();
  int64_t expected_pointer = 0;
  for (uint64_t i = 0; i < sequences; ++i) {
    const int32_t length = dataset->lengths_[i];
    if (length < 0) {
      return absl::DataLossError(absl::StrCat(index_path, ": sequence ", i, " has a negative length (", length, ")"));
    }
    if (dataset->pointers_[i] != expected_pointer) {
      return absl::DataLossError(absl::StrCat(index_path, ": sequence ", i, " starts at byte ", dataset->pointers_[i],
                                              " of ", bin_path, ", but the sequences before it end at byte ",
                                              expected_pointer, " (pointers must match the sizes)"));
    }
    // Bounded by the .bin size before every step, so the sum cannot overflow.
    expected_pointer += static_cast<int64_t>(length) * static_cast<int64_t>(size);
    if (expected_pointer > bin_bytes) break;
  }
  if (expected_pointer != bin_bytes) {
    return absl::DataLossError(absl::StrCat(bin_path, " is ", bin_bytes, " bytes, but ", index_path, " describes ",
                                            expected_pointer < bin_bytes ? "" : "at least ", expected_pointer,
                                            ": truncated or not the matching file"));
  }
  const auto& docs = dataset->document_indices_;
  if (docs.front() != 0 || docs.back() != static_cast<int64_t>(sequences)) {
    return absl::DataLossError(absl::StrCat(index_path, ": document indices run from ", docs.front(), " to ",
                                            docs.back(), ", but must run from 0 to the sequence count ", sequences));
  }
  for (size_t d = 1; d < docs.size(); ++d) {
    if (docs[d] < docs[d - 1]) {
      return absl::DataLossError(absl::StrCat(index_path, ": document index ", d, " (", docs[d],
                                              ") is smaller than document index ", d - 1, " (", docs[d - 1],
                                              "): document indices must be non-decreasing"));
    }
  }
  if (bin_bytes > 0) {
    void* map = ::mmap(nullptr, static_cast<size_t>(bin_bytes), PROT_READ, MAP_SHARED, bin_file.fd(), 0);
    if (map == MAP_FAILED) return absl::InternalError(absl::StrCat("cannot map ", bin_path, ": ", std::strerror(errno)));
    dataset->map_ = map;
    dataset->map_bytes_ = static_cast<size_t>(bin_bytes);
  }
  return dataset;
}

IndexedDataset::~IndexedDataset() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

void IndexedDataset::read(int64_t sequence, int64_t offset, int64_t length, int32_t* out) const {
  GPT_CHECK(sequence >= 0 && sequence < num_sequences() && offset >= 0 && length >= 0 &&
            offset + length <= lengths_[static_cast<size_t>(sequence)])
      << prefix_ << ": read of sequence " << sequence << " [" << offset << ", " << offset + length << ")";
  const auto* base = static_cast<const uint8_t*>(map_) + pointers_[static_cast<size_t>(sequence)] +
                     offset * static_cast<int64_t>(element_size_);
  for (int64_t i = 0; i < length; ++i) {
    const uint8_t* p = base + i * static_cast<int64_t>(element_size_);
    switch (dtype_code_) {
      case 8: { uint16_t v; std::memcpy(&v, p, 2); out[i] = v; break; }
      case 4: { int32_t v; std::memcpy(&v, p, 4); out[i] = v; break; }
      case 5: {
        int64_t v;
        std::memcpy(&v, p, 8);
        // check_token_ids refuses such data when it is opened for training; never truncate.
        GPT_CHECK(v >= INT32_MIN && v <= INT32_MAX) << prefix_ << ".bin: token id " << v << " in sequence "
                                                    << sequence << " does not fit a 32-bit id";
        out[i] = static_cast<int32_t>(v);
        break;
      }
      case 3: { int16_t v; std::memcpy(&v, p, 2); out[i] = v; break; }
      default: out[i] = *p; break;
    }
  }
}

std::string IndexedDataset::identity() const {
  // The cached GPT indices depend only on the sequence lengths, which the .idx holds: its size and
  // checksum tell a rewritten index from the one the cache was built for, whatever its path.
  return absl::StrCat(std::filesystem::absolute(prefix_).string(), " (", num_sequences(), " sequences, ", map_bytes_,
                      " token bytes, .idx ", index_bytes_, " bytes with FNV-1a-64 ",
                      absl::Hex(index_checksum_, absl::kZeroPad16), ")");
}

int64_t IndexedDataset::total_tokens() const {
  int64_t total = 0;
  for (int32_t length : lengths_) total += length;
  return total;
}

}  // namespace gpt

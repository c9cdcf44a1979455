#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace gpt {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;

size_t element_size(uint8_t code) {
  switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: case 7: return 4;
    case 5: case 6: return 8;
    default: return 0;
  }
}

int64_t file_size(const std::string& path) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  return error ? -1 : static_cast<int64_t>(size);
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

absl::StatusOr<std::unique_ptr<IndexedDataset>> IndexedDataset::open(const std::string& prefix) {
  const std::string index_path = prefix + ".idx", bin_path = prefix + ".bin";
  std::ifstream in(index_path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("dataset index ", index_path, " not found (--data-path takes the prefix, without .bin/.idx)"));
  char magic[9];
  uint64_t version = 0, sequences = 0, documents = 0;
  uint8_t code = 0;
  in.read(magic, 9).read(reinterpret_cast<char*>(&version), 8).read(reinterpret_cast<char*>(&code), 1);
  in.read(reinterpret_cast<char*>(&sequences), 8).read(reinterpret_cast<char*>(&documents), 8);
  if (!in || std::memcmp(magic, kMagic, 9) != 0) {
    return absl::DataLossError(absl::StrCat(index_path, " is not a Megatron indexed-dataset index (bad magic)"));
  }
  if (version != kVersion) return absl::DataLossError(absl::StrCat(index_path, ": unsupported version ", version));
  const size_t size = element_size(code);
  if (size == 0) return absl::DataLossError(absl::StrCat(index_path, ": unknown dtype code ", static_cast<int>(code)));
  if (code != 8 && code != 4 && code != 5 && code != 1 && code != 3) {
    return absl::DataLossError(absl::StrCat(index_path, ": token dtype code ", static_cast<int>(code), " is not an integer type"));
  }
  const int64_t expected_index = 34 + static_cast<int64_t>(sequences) * 12 + static_cast<int64_t>(documents) * 8;
  if (documents == 0 || file_size(index_path) != expected_index) {
    return absl::DataLossError(absl::StrCat(index_path, " is ", file_size(index_path), " bytes, but its header (",
                                            sequences, " sequences, ", documents, " document indices) needs ",
                                            expected_index, ": truncated or damaged"));
  }
  std::unique_ptr<IndexedDataset> dataset(new IndexedDataset());
  dataset->prefix_ = prefix;
  dataset->dtype_code_ = code;
  dataset->element_size_ = size;
  dataset->lengths_.resize(sequences);
  dataset->pointers_.resize(sequences);
  dataset->document_indices_.resize(documents);
  in.read(reinterpret_cast<char*>(dataset->lengths_.data()), static_cast<std::streamsize>(sequences * 4));
  in.read(reinterpret_cast<char*>(dataset->pointers_.data()), static_cast<std::streamsize>(sequences * 8));
  in.read(reinterpret_cast<char*>(dataset->document_indices_.data()), static_cast<std::streamsize>(documents * 8));
  if (!in) return absl::DataLossError(absl::StrCat(index_path, ": truncated"));
  // Every sequence must lie inside .bin, back to back.
  const int64_t bin_bytes = file_size(bin_path);
  if (bin_bytes < 0) return absl::NotFoundError(absl::StrCat("dataset tokens ", bin_path, " not found"));
  int64_t expected_pointer = 0;
  for (uint64_t i = 0; i < sequences; ++i) {
    if (dataset->lengths_[i] < 0 || dataset->pointers_[i] != expected_pointer) {
      return absl::DataLossError(absl::StrCat(index_path, ": sequence ", i, " has an inconsistent length or pointer"));
    }
    expected_pointer += static_cast<int64_t>(dataset->lengths_[i]) * static_cast<int64_t>(size);
  }
  if (expected_pointer != bin_bytes) {
    return absl::DataLossError(absl::StrCat(bin_path, " is ", bin_bytes, " bytes, but ", index_path, " describes ",
                                            expected_pointer, ": truncated or not the matching file"));
  }
  const auto& docs = dataset->document_indices_;
  if (docs.front() != 0 || docs.back() != static_cast<int64_t>(sequences)) {
    return absl::DataLossError(absl::StrCat(index_path, ": document indices do not cover the sequences"));
  }
  if (bin_bytes > 0) {
    const int fd = ::open(bin_path.c_str(), O_RDONLY);
    if (fd < 0) return absl::PermissionDeniedError(absl::StrCat("cannot open ", bin_path, ": ", std::strerror(errno)));
    void* map = ::mmap(nullptr, static_cast<size_t>(bin_bytes), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
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
      case 5: { int64_t v; std::memcpy(&v, p, 8); out[i] = static_cast<int32_t>(v); break; }
      case 3: { int16_t v; std::memcpy(&v, p, 2); out[i] = v; break; }
      default: out[i] = *p; break;
    }
  }
}

std::string IndexedDataset::identity() const {
  return absl::StrCat(std::filesystem::absolute(prefix_).string(), " (", num_sequences(), " sequences, ", map_bytes_,
                      " bytes)");
}

int64_t IndexedDataset::total_tokens() const {
  int64_t total = 0;
  for (int32_t length : lengths_) total += length;
  return total;
}

}  // namespace gpt

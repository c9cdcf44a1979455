#include "data/npy_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "data/file_access.h"

namespace gpt {
namespace {

template <typename T>
constexpr const char* descr();
template <>
constexpr const char* descr<int32_t>() { return "<i4"; }
template <>
constexpr const char* descr<int64_t>() { return "<i8"; }
template <>
constexpr const char* descr<uint32_t>() { return "<u4"; }

constexpr char kMagic[] = "\x93NUMPY";

}  // namespace

template <typename T>
absl::Status write_npy(const std::string& path, const std::vector<int64_t>& shape, const std::vector<T>& values) {
  // The header numpy.save writes, byte for byte: the shape as Python prints a tuple ("(5,)",
  // "(5, 2)").
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&dims, i ? ", " : "", shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = absl::StrCat("{'descr': '", descr<T>(), "', 'fortran_order': False, 'shape': (", dims, "), }");
  // Magic (6) + version (2) + header length (2) + header + '\n', padded with spaces to a multiple
  // of 64 bytes (numpy pads a full 64 when already aligned).
  const size_t unpadded = 10 + header.size() + 1;
  header.append(64 - unpadded % 64, ' ');
  header.push_back('\n');
  // A name per process: ranks that build the same index concurrently never share a partial file.
  const std::string temporary = absl::StrCat(path, ".tmp.", ::getpid());
  // A failed write (a full disk, a read-only directory) leaves nothing behind.
  auto fail = [&](absl::Status status) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    return status;
  };
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return fail(absl::PermissionDeniedError(absl::StrCat("cannot create ", temporary, ": ", std::strerror(errno))));
    out.write(kMagic, 6);
    const char version[2] = {1, 0};
    out.write(version, 2);
    const uint16_t length = static_cast<uint16_t>(header.size());
    out.write(reinterpret_cast<const char*>(&length), 2);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T)));
    out.close();
    if (!out) return fail(absl::DataLossError(absl::StrCat("cannot write ", temporary, " (disk full?)")));
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) return fail(absl::DataLossError(absl::StrCat("cannot rename ", temporary, " to ", path, ": ", error.message())));
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<NpyArray<T>> read_npy(const std::string& path) {
  GPT_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::open("array", path));
  char prefix[10];
  uint16_t length = 0;
  if (file.size() < 10 || !file.read_at(0, prefix, 10) || std::memcmp(prefix, kMagic, 6) != 0 || prefix[6] != 1) {
    return absl::DataLossError(absl::StrCat(path, " is not a version-1 .npy file"));
  }
  std::memcpy(&length, prefix + 8, 2);
  std::string header(length, '\0');
  if (!file.read_at(10, header.data(), length)) return absl::DataLossError(absl::StrCat(path, " is truncated (header)"));
  if (header.find(absl::StrCat("'descr': '", descr<T>(), "'")) == std::string::npos ||
      header.find("'fortran_order': False") == std::string::npos) {
    return absl::DataLossError(absl::StrCat(path, ": unexpected array type (", header, ")"));
  }
  const size_t open = header.find("'shape': ("), close = header.find(')', open);
  if (open == std::string::npos || close == std::string::npos) return absl::DataLossError(absl::StrCat(path, ": no shape"));
  NpyArray<T> array;
  // The element count is checked against the file before anything is allocated: a damaged shape
  // is an error, not a bad_alloc.
  uint64_t count = 1;
  for (absl::string_view part : absl::StrSplit(header.substr(open + 10, close - open - 10), ',', absl::SkipWhitespace())) {
    int64_t dim = 0;
    if (!absl::SimpleAtoi(part, &dim) || dim < 0 || __builtin_mul_overflow(count, static_cast<uint64_t>(dim), &count)) {
      return absl::DataLossError(absl::StrCat(path, ": bad shape (", header, ")"));
    }
    array.shape.push_back(dim);
  }
  const uint64_t data_at = 10 + static_cast<uint64_t>(length);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<uint64_t>(sizeof(T)), &bytes) ||
      data_at + bytes != static_cast<uint64_t>(file.size())) {
    return absl::DataLossError(absl::StrCat(path, " is ", file.size(), " bytes, but its shape (", header.substr(open + 10, close - open - 10),
                                            ") needs ", data_at, " + ", count, " x ", sizeof(T), ": truncated or damaged"));
  }
  array.values.resize(static_cast<size_t>(count));
  if (!file.read_at(static_cast<int64_t>(data_at), array.values.data(), static_cast<int64_t>(bytes))) {
    return absl::DataLossError(absl::StrCat(path, " is truncated"));
  }
  return array;
}

template absl::Status write_npy<int32_t>(const std::string&, const std::vector<int64_t>&, const std::vector<int32_t>&);
template absl::Status write_npy<int64_t>(const std::string&, const std::vector<int64_t>&, const std::vector<int64_t>&);
template absl::StatusOr<NpyArray<int32_t>> read_npy<int32_t>(const std::string&);
template absl::StatusOr<NpyArray<int64_t>> read_npy<int64_t>(const std::string&);
template absl::Status write_npy<uint32_t>(const std::string&, const std::vector<int64_t>&, const std::vector<uint32_t>&);
template absl::StatusOr<NpyArray<uint32_t>> read_npy<uint32_t>(const std::string&);

}  // namespace gpt

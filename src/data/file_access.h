// Opening input files with messages that say what is wrong. A generic "cannot open" or "not found"
// for every failure sends users looking in the wrong place: a file that exists but cannot be read
// is "permission denied", a directory given for a file "is a directory".
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "core/status.h"

namespace gpt {

// The status for a failed open or stat of `path` with errno `error`; `what` names the file's role
// in the message ("dataset index", "--input").
absl::Status file_error(absl::string_view what, const std::string& path, int error);

// A regular file opened read-only, closed on destruction.
class ReadOnlyFile {
 public:
  // Refuses directories and anything that is not a regular file (a FIFO would block the reader)
  // before opening.
  static absl::StatusOr<ReadOnlyFile> open(absl::string_view what, const std::string& path);
  ReadOnlyFile(ReadOnlyFile&& other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }
  ReadOnlyFile& operator=(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile();

  int fd() const { return fd_; }
  int64_t size() const { return size_; }
  // Reads exactly `bytes` at `offset`; false on an error or a short file.
  bool read_at(int64_t offset, void* out, int64_t bytes) const;

 private:
  ReadOnlyFile(int fd, int64_t size) : fd_(fd), size_(size) {}
  int fd_ = -1;
  int64_t size_ = 0;
};

// Checks that `path` can be opened for reading as a regular file (for readers that open it
// themselves, such as JSON loaders and std::ifstream, which cannot tell these cases apart).
absl::Status check_readable_file(absl::string_view what, const std::string& path);

}  // namespace gpt

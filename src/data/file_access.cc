#include "data/file_access.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gpt {

absl::Status file_error(absl::string_view what, const std::string& path, int error) {
  switch (error) {
    case ENOENT:
    case ENOTDIR:  // a path component is a file
      return absl::NotFoundError(absl::StrCat(what, " ", path, " not found"));
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(absl::StrCat(what, " ", path, ": permission denied"));
    case EISDIR:
      return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " is a directory"));
    default:
      return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(error)));
  }
}

absl::StatusOr<ReadOnlyFile> ReadOnlyFile::open(absl::string_view what, const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return file_error(what, path, errno);
  if (S_ISDIR(info.st_mode)) return file_error(what, path, EISDIR);
  if (!S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " is not a regular file"));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return file_error(what, path, errno);
  // The size of what was opened, not of what the name pointed at a moment earlier.
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return file_error(what, path, error);
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " is not a regular file"));
  }
  return ReadOnlyFile(fd, static_cast<int64_t>(info.st_size));
}

ReadOnlyFile& ReadOnlyFile::operator=(ReadOnlyFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    size_ = other.size_;
    other.fd_ = -1;
  }
  return *this;
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool ReadOnlyFile::read_at(int64_t offset, void* out, int64_t bytes) const {
  auto* cursor = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd_, cursor, static_cast<size_t>(bytes), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    cursor += got;
    offset += got;
    bytes -= got;
  }
  return true;
}

absl::Status check_readable_file(absl::string_view what, const std::string& path) {
  return ReadOnlyFile::open(what, path).status();
}

}  // namespace gpt

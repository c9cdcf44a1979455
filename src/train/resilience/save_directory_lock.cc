#include "train/resilience/save_directory_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace gpt {
namespace {

std::string read_all(int fd) {
  std::string text;
  char buffer[512];
  ssize_t got = 0;
  off_t offset = 0;
  while ((got = ::pread(fd, buffer, sizeof(buffer), offset)) > 0 && text.size() < 4096) {
    text.append(buffer, static_cast<size_t>(got));
    offset += got;
  }
  return std::string(absl::StripAsciiWhitespace(text));
}

// "host H, PID P, started T" on one line, for messages.
std::string owner_text(const std::string& text) {
  return text.empty() ? "an unknown owner" : absl::StrReplaceAll(text, {{"\n", ", "}});
}

std::string this_owner() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::time_t now = std::time(nullptr);
  std::tm utc = {};
  gmtime_r(&now, &utc);
  char started[32] = {};
  std::strftime(started, sizeof(started), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return absl::StrCat("host ", host, "\nPID ", ::getpid(), "\nstarted ", started, "\n");
}

bool same_file(int fd, const std::string& path) {
  struct stat opened = {}, named = {};
  return ::fstat(fd, &opened) == 0 && ::stat(path.c_str(), &named) == 0 && opened.st_dev == named.st_dev &&
         opened.st_ino == named.st_ino;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SaveDirectoryLock>> SaveDirectoryLock::acquire(const std::string& directory,
                                                                              std::string* stale_owner) {
  stale_owner->clear();
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("--save ", directory, ": cannot create it: ", error.message()));
  }
  const std::string path = absl::StrCat(directory, "/", kSaveLockFileName);
  // A job that exits removes the file while holding the lock: if the file we locked is no longer the
  // one at `path`, another job may own a new one there; try again on that.
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::PermissionDeniedError(absl::StrCat("--save ", directory, ": cannot create the lock file ", path,
                                                      ": ", std::strerror(errno)));
    }
    struct flock lock = {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    if (::fcntl(fd, F_SETLK, &lock) != 0) {
      const int why = errno;
      const std::string owner = read_all(fd);
      ::close(fd);
      if (why == EACCES || why == EAGAIN) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--save ", directory, " is in use by another job: ", path, " is held by ", owner_text(owner),
            " (one job per save directory; wait for it to end, or use another --save)"));
      }
      return absl::FailedPreconditionError(absl::StrCat("--save ", directory, ": cannot lock ", path, ": ",
                                                        std::strerror(why)));
    }
    if (!same_file(fd, path)) {
      ::close(fd);
      continue;
    }
    *stale_owner = read_all(fd);
    const std::string owner = this_owner();
    const bool written = ::ftruncate(fd, 0) == 0 &&
                         ::pwrite(fd, owner.data(), owner.size(), 0) == static_cast<ssize_t>(owner.size());
    if (!written) {
      const int why = errno;
      ::close(fd);
      return absl::DataLossError(absl::StrCat("--save ", directory, ": cannot write the lock file ", path, ": ",
                                              std::strerror(why)));
    }
    if (!stale_owner->empty()) *stale_owner = owner_text(*stale_owner);
    return std::unique_ptr<SaveDirectoryLock>(new SaveDirectoryLock(path, fd));
  }
  return absl::FailedPreconditionError(absl::StrCat("--save ", directory, ": the lock file ", path,
                                                    " keeps being replaced (another job starting?)"));
}

SaveDirectoryLock::~SaveDirectoryLock() {
  // Removed while still locked, so that no other job can see a file that is about to go.
  ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace gpt

// A --save directory belongs to one job at a time. Two jobs writing into the same directory replace
// each other's checkpoints and tracker (or one fails with an unrelated message); rank 0 of each job
// takes DIR/pretrain_gpt.lock before its first save and holds it until the process ends.
//
// The lock is a POSIX record lock (fcntl F_SETLK) on that file, which the kernel drops when the
// process dies however it dies; the file's text names the owner (host, PID, start time) for the
// message another job gets. A lock file left by a job that is gone (SIGKILL, a crashed node) is
// stale: the next job reports it, with its owner, and takes it over; a lock whose owner is alive
// is an error naming the owner.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

namespace gpt {

inline constexpr char kSaveLockFileName[] = "pretrain_gpt.lock";

class SaveDirectoryLock {
 public:
  // Creates `directory` if needed and locks it. `stale_owner` gets the text of a stale lock taken
  // over (empty when there was none), for the caller to report.
  static absl::StatusOr<std::unique_ptr<SaveDirectoryLock>> acquire(const std::string& directory,
                                                                    std::string* stale_owner);
  // Removes the lock file and releases the lock.
  ~SaveDirectoryLock();
  SaveDirectoryLock(const SaveDirectoryLock&) = delete;
  SaveDirectoryLock& operator=(const SaveDirectoryLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  SaveDirectoryLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

}  // namespace gpt

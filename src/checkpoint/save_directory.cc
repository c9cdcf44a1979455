#include "checkpoint/save_directory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "checkpoint/checkpoint_files.h"

namespace gpt {

absl::StatusOr<std::optional<int64_t>> read_tracker(const std::string& directory) {
  const std::string path = absl::StrCat(directory, "/", kTrackerFileName);
  // Only a path that does not exist is "no tracker": a run told to --load must never start from
  // scratch because its tracker could not be read.
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (status.type() == std::filesystem::file_type::not_found) {
    if (std::filesystem::is_symlink(std::filesystem::symlink_status(path, error))) {
      return absl::FailedPreconditionError(absl::StrCat(path, " is a symbolic link to nothing"));
    }
    return std::optional<int64_t>();
  }
  if (error) return absl::PermissionDeniedError(absl::StrCat("cannot stat ", path, ": ", error.message()));
  if (status.type() != std::filesystem::file_type::regular) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  std::ifstream in(path);
  if (!in) return absl::PermissionDeniedError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  int64_t iteration = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &iteration) || iteration < 0) {
    return absl::DataLossError(absl::StrCat(path, " does not hold an iteration number"));
  }
  return std::optional<int64_t>(iteration);
}

absl::Status fsync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return absl::DataLossError(absl::StrCat("cannot open directory ", directory, " to sync it"));
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) return absl::DataLossError(absl::StrCat("cannot sync directory ", directory));
  return absl::OkStatus();
}

absl::Status write_tracker(const std::string& directory, int64_t iteration) {
  const std::string path = absl::StrCat(directory, "/", kTrackerFileName);
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat("cannot write ", temporary));
  const std::string text = absl::StrCat(iteration, "\n");
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!written || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return absl::DataLossError(absl::StrCat("cannot write ", path, " (disk full?)"));
  }
  return fsync_directory(directory);
}

std::vector<int64_t> list_checkpoints(const std::string& directory) {
  std::vector<int64_t> iterations;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    int64_t iteration = 0;
    if (name.size() == 12 && name.rfind("iter_", 0) == 0 && absl::SimpleAtoi(name.substr(5), &iteration) &&
        std::filesystem::exists(entry.path() / kIndexFileName, error)) {
      iterations.push_back(iteration);
    }
  }
  std::sort(iterations.begin(), iterations.end());
  return iterations;
}

absl::StatusOr<std::string> resolve_checkpoint_directory(const std::string& given, std::optional<int64_t> iteration) {
  std::error_code error;
  if (!std::filesystem::is_directory(given, error)) {
    if (std::filesystem::exists(given, error)) {
      return absl::FailedPreconditionError(absl::StrCat(
          given, " is a file, not a checkpoint (a save directory or one iter_<7 digits> directory in it)"));
    }
    return absl::NotFoundError(absl::StrCat(given, ": no such directory"));
  }
  // A checkpoint directory: it has an index, or is named like one (then CheckpointReader::open
  // says that its index is missing: an interrupted or damaged save).
  std::string trimmed = given;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const std::string name = std::filesystem::path(trimmed).filename().string();
  if (std::filesystem::exists(std::filesystem::path(given) / kIndexFileName, error) || name.rfind("iter_", 0) == 0) {
    if (iteration) {
      return absl::InvalidArgumentError(absl::StrCat("--iteration needs the save directory; ", given,
                                                     " is one checkpoint already"));
    }
    return given;
  }
  if (!iteration) {
    GPT_ASSIGN_OR_RETURN(const std::optional<int64_t> tracked, read_tracker(given));
    if (!tracked) {
      const std::vector<int64_t> found = list_checkpoints(given);
      return absl::NotFoundError(absl::StrCat(
          given, ": not a checkpoint (no ", kIndexFileName, ") and no ", kTrackerFileName,
          found.empty() ? std::string(" (no committed checkpoint either)")
                        : absl::StrCat(" (committed iterations: ", absl::StrJoin(found, ", "), "; pick one with --iteration)")));
    }
    iteration = *tracked;
  }
  return (std::filesystem::path(given) / iteration_directory_name(*iteration)).string();
}

}  // namespace gpt

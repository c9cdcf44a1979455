#include "train/load_directory.h"

#include <filesystem>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_files.h"
#include "train/resilience/save_directory_lock.h"

namespace gpt {
namespace {

namespace fs = std::filesystem;

// iter_<7 digits> (the name a save gives a checkpoint); its number in `iteration`.
bool is_iteration_name(const std::string& name, int64_t& iteration) {
  return name.size() == 12 && name.rfind("iter_", 0) == 0 && absl::SimpleAtoi(name.substr(5), &iteration) &&
         iteration >= 0;
}

// What a save directory may hold besides its checkpoints and tracker: the save lock, a save's or
// the tracker's temporary left by an interrupted run.
bool belongs_to_save_directory(const std::string& name) {
  int64_t iteration = 0;
  return name == kTrackerFileName || name == kSaveLockFileName || name.ends_with(".tmp") ||
         is_iteration_name(name, iteration);
}

}  // namespace

absl::Status check_load_directory(const std::string& load) {
  std::error_code error;
  // "FILE/" is not a missing directory: the path is judged without its trailing slashes.
  std::string trimmed = load;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const fs::file_status status = fs::status(trimmed, error);
  if (status.type() == fs::file_type::not_found) return absl::OkStatus();
  if (status.type() != fs::file_type::directory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--load ", load, " is ", status.type() == fs::file_type::regular ? "a file" : "not a directory",
        ", not a save directory (--load names the directory --save wrote: its ", kTrackerFileName,
        " and iter_<7 digits> checkpoints)"));
  }
  if (fs::exists(fs::path(load) / kTrackerFileName, error) || fs::is_symlink(fs::path(load) / kTrackerFileName, error)) {
    return absl::OkStatus();  // read_tracker reads or refuses it
  }
  const fs::path path(trimmed);
  int64_t iteration = 0;
  if (is_iteration_name(path.filename().string(), iteration) || fs::exists(path / kIndexFileName, error)) {
    const std::string parent = path.has_parent_path() ? path.parent_path().string() : std::string(".");
    return absl::FailedPreconditionError(absl::StrCat(
        "--load ", load, " is one checkpoint, not a save directory: give its save directory and the iteration, --load ",
        parent, " --ckpt-step ", is_iteration_name(path.filename().string(), iteration) ? absl::StrCat(iteration) : "N"));
  }
  const std::vector<int64_t> committed = list_checkpoints(load);
  if (!committed.empty()) {
    std::vector<int64_t> shown(committed.end() - std::min<size_t>(committed.size(), 5), committed.end());
    return absl::FailedPreconditionError(absl::StrCat(
        "--load ", load, " holds checkpoints this run did not load (iterations ",
        committed.size() > shown.size() ? "..., " : "", absl::StrJoin(shown, ", "), ") and no ", kTrackerFileName,
        " to say which to resume: name one with --ckpt-step ", committed.back(), " (the newest), or restore the tracker"));
  }
  std::vector<std::string> foreign;
  for (const auto& entry : fs::directory_iterator(load, error)) {
    const std::string name = entry.path().filename().string();
    if (!belongs_to_save_directory(name)) foreign.push_back(name);
  }
  if (error) return absl::PermissionDeniedError(absl::StrCat("--load ", load, ": cannot list it: ", error.message()));
  if (foreign.empty()) return absl::OkStatus();
  std::sort(foreign.begin(), foreign.end());
  std::vector<std::string> shown;
  for (size_t i = 0; i < std::min<size_t>(foreign.size(), 3); ++i) {
    // Names are echoed escaped and short: a directory of anything may hold anything.
    std::string name;
    for (char c : foreign[i].substr(0, 40)) name += (c >= 0x20 && c < 0x7f) ? std::string(1, c) : "?";
    shown.push_back(absl::StrCat("'", name, foreign[i].size() > 40 ? "...'" : "'"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--load ", load, " is not a save directory: no ", kTrackerFileName, " and no iter_<7 digits> checkpoint, but ",
      foreign.size(), " other entr", foreign.size() == 1 ? "y" : "ies", " (", absl::StrJoin(shown, ", "),
      foreign.size() > shown.size() ? ", ..." : "", "); a fresh start needs a missing or empty directory"));
}

}  // namespace gpt

// A save directory as users and the trainer name it: the tracker (Megatron's
// latest_checkpointed_iteration.txt), its committed iter_<7 digits> checkpoints, and which one a
// given path means. Included by checkpoint_files.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace gpt {

// The tracker: the newest committed iteration, nullopt when there is none (no file). A tracker that
// is not a number, not a regular file or unreadable is an error naming the file.
absl::StatusOr<std::optional<int64_t>> read_tracker(const std::string& directory);
// Replaces the tracker atomically (write a temporary file, fsync, rename, fsync the directory).
absl::Status write_tracker(const std::string& directory, int64_t iteration);
// Committed checkpoints under `directory` (iter_<7 digits> with an index), oldest first.
std::vector<int64_t> list_checkpoints(const std::string& directory);
absl::Status fsync_directory(const std::string& directory);
// The checkpoint a user names: `given` itself when it is one checkpoint directory (it has an index,
// or is named iter_<7 digits>: then opening it says what is missing), else the save directory's
// checkpoint of `iteration`, or of its tracker. An error names the directory and, without a
// tracker, the committed iterations there are.
absl::StatusOr<std::string> resolve_checkpoint_directory(const std::string& given, std::optional<int64_t> iteration);

}  // namespace gpt

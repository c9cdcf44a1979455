// What --load may name (docs/CHECKPOINTS.md, "What --load accepts"): a save directory (its tracker
// and iter_<7 digits> checkpoints), or a missing or empty directory, which is a fresh start
// (Megatron's first run of `--save X --load X`). Everything else is refused before any weights are
// initialized, so that a mistyped --load never trains from random weights with exit 0:
//   - a file (or anything not a directory);
//   - one checkpoint (an iter_<7 digits> directory, or any directory with an index): refused with
//     the remedy, --load SAVE_DIR --ckpt-step N, since --load names the directory --save wrote and
//     a run given an iteration directory would also save into it if --save is the same path;
//   - a directory with committed checkpoints but no tracker: refused with --ckpt-step N (the newest);
//   - a directory that holds other things (a data directory, a parent of runs).
#pragma once

#include <string>

#include "core/status.h"

namespace gpt {

// OK when `load` has a tracker or is a fresh start (the caller then loads or warns as Megatron
// does); otherwise one line naming the path, what it is, and what to give instead.
absl::Status check_load_directory(const std::string& load);

}  // namespace gpt

// Non-tensor state a part of the run keeps in its checkpoints as keyed records
// (CheckpointMetadata::records, "<owner>/<name>" -> text), without a change of the checkpoint
// format: a loss scaler's scale and counters, a schedule's position. The values are the run's
// global state, the same on every rank (rank 0's are written to the index).
#pragma once

#include <map>
#include <string>

#include "core/status.h"

namespace gpt {

class CheckpointRecords {
 public:
  virtual ~CheckpointRecords() = default;
  // Adds this owner's records (keys under its own prefix).
  virtual void save_records(std::map<std::string, std::string>& records) const = 0;
  // Restores from a checkpoint's records (all of them; an owner reads its own keys). A missing or
  // malformed record of a checkpoint that should have it is an error naming the key; a checkpoint
  // from before the owner existed may have none, which the owner decides how to treat.
  virtual absl::Status load_records(const std::map<std::string, std::string>& records) = 0;
};

}  // namespace gpt

// Saving and loading a run's state (train/training_state.h: parameters, optimizer state, progress,
// records): the collective protocol around the files of checkpoint/checkpoint_files.h
// (docs/CHECKPOINTS.md).
//
// Save: every rank copies the pieces it writes to host memory (parameters spread over the
// data-parallel replicas, each ZeRO owner its optimizer shard, tensor-parallel duplicates and the
// tied embedding's second copy by nobody), writes its shard into DIR/iter_<7 digits>.tmp and fsyncs
// it; once every rank reports success, rank 0 writes the index, renames the directory to
// iter_<7 digits> and replaces the tracker. A crash at any point leaves the previous checkpoint and
// the tracker as they were. With --async-save the shard is written by a background thread from
// the host copy while training goes on, and committed when every rank has finished (checked after
// each iteration, waited for at the next save and at the end).
//
// Load: every rank reads exactly the global slices its layout needs, whatever layout saved them
// (resharding), and checks each piece's Fletcher-32 checksum on the way.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "checkpoint/checkpoint_files.h"
#include "core/timer.h"
#include "parallel/process_grid.h"
#include "train/args/arguments.h"
#include "train/resilience/save_directory_lock.h"
#include "train/training_state.h"

namespace gpt {

class Checkpointer {
 public:
  // Installs the SIGTERM handler with --exit-signal-handler.
  Checkpointer(const Arguments& args, ProcessGrid& grid);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Before training (collective): with --save, rank 0 takes the save directory's lock
  // (train/resilience/save_directory_lock.h); then load(); then, with --save, a run that loaded nothing from
  // the save directory refuses to save into one that holds checkpoints (another run's: its saves
  // would replace or interleave with them) unless --allow-other-run-checkpoints.
  absl::Status start(const CheckpointedState& state);
  // --load (collective): restores the run's parameters, optimizer state, iteration and data
  // position from the tracker's checkpoint (or --ckpt-step's). Without a tracker it warns and the
  // run starts from scratch, as Megatron does.
  absl::Status load(const CheckpointedState& state);
  // After every iteration (collective): saves at --save-interval, commits a finished asynchronous
  // save, and checks --exit-signal-handler, --exit-duration-in-mins and --exit-interval (saving
  // before an exit). Returns true when training must stop.
  absl::StatusOr<bool> after_iteration(const CheckpointedState& state);
  // The end of training (collective): saves unless this iteration is saved already, and waits for
  // an asynchronous save to be committed.
  absl::Status finish(const CheckpointedState& state);
  // Saves the run's state at its current iteration (collective).
  absl::Status save(const CheckpointedState& state);

 private:
  struct PendingSave {
    int64_t iteration = 0;
    std::string temporary;  // DIR/iter_<7 digits>.tmp
    CheckpointMetadata metadata;
    double bytes = 0;         // this rank's shard
    double blocked_seconds = 0;
    Stopwatch since_start;
  };
  // Commits the pending save once every rank's shard is written: waits for it with `wait`,
  // otherwise only if every rank has finished already. Collective.
  absl::Status finalize_pending(bool wait);
  // Rank 0: index, rename, tracker, pruning.
  absl::Status commit(const PendingSave& pending);
  absl::Status load_from(const CheckpointedState& state, const std::string& directory);

  // Rank 0: whether the save directory may take this run's checkpoints (see start()).
  absl::Status check_save_directory() const;
  // Rank 0, with --finetune into the directory it loaded from: the iteration whose checkpoint this
  // run finetunes from, which its saves must not replace or prune; -1 otherwise.
  int64_t protected_iteration() const;

  Arguments args_;
  ProcessGrid& grid_;
  Stopwatch since_start_;  // for --exit-duration-in-mins
  std::optional<PendingSave> pending_;
  std::thread writer_;
  std::atomic<bool> writer_done_{false};
  absl::Status writer_status_;
  int64_t last_saved_iteration_ = -1;
  int64_t loaded_bytes_ = 0;  // by this rank, in the last load
  int64_t loaded_iteration_ = -1;  // the checkpoint's directory loaded (iter_N), -1: none
  std::unique_ptr<SaveDirectoryLock> lock_;  // rank 0, with --save
};

}  // namespace gpt

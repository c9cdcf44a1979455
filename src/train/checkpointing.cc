#include "train/checkpointing.h"

#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "core/logging.h"
#include "core/memory.h"
#include "checkpoint/save_directory.h"
#include "core/philox.h"
#include "model/param_registry.h"
#include "parallel/comm/world_agreement.h"
#include "train/resilience/exit_signal.h"
#include "train/resilience/fault_injection.h"
#include "train/load_directory.h"
#include "train/rank_agreement.h"
#include "train/args/saved_arguments.h"
#include "train/args/sharding_arguments.h"
#include "train/scheduler_resume.h"

namespace gpt {
namespace {

// `value` combined over the world (bounded: parallel/comm/world_agreement.h); `what` names it in a
// timeout message.
int64_t world_extreme(int64_t value, world::Combine combine, std::string_view what) {
  return world::all_reduce(value, combine, what);
}
int64_t world_max(int64_t value, std::string_view what) { return world_extreme(value, world::Combine::kMax, what); }
int64_t world_min(int64_t value, std::string_view what) { return world_extreme(value, world::Combine::kMin, what); }

// Whether two paths name the same directory (false when either does not exist).
bool same_directory(const std::string& a, const std::string& b) {
  std::error_code error;
  return !a.empty() && !b.empty() && std::filesystem::equivalent(a, b, error) && !error;
}

// Rank 0 prints (Megatron's print_rank_0).
void print_rank0(const ProcessGrid& grid, const std::string& text) {
  if (grid.world_rank() != 0) return;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

// Of the pieces every data-parallel replica holds, each DP rank writes a share: the piece goes to
// the replica chosen by a hash of its key and offsets, which every replica computes alike
// (Megatron's fully parallel save); with --no-ckpt-fully-parallel-save data-parallel rank 0 writes
// them all. The context-parallel ranks of a replica hold the same parameters too (CP does not
// split them), so the choice is over the data x context group.
// A piece of this rank's own shard (the distributed optimizer's state) is held alike by the rank at
// the same place of every distributed-optimizer instance: the same choice over those ranks.
// An expert's pieces laid out apart (expert parallelism) are replicated over the expert
// data-parallel group instead: one of its ranks writes each (instances are refused with them).
bool writes_piece(const ShardedTensor& piece, const ProcessGrid& grid, bool fully_parallel) {
  if (piece.replica_id != 0) return false;
  const Communicator& data_replicas = piece.expert_data_parallel ? grid.expert_data() : grid.data_context();
  const Communicator& replicas =
      piece.replicated_over_data_parallel ? data_replicas : grid.across_optimizer_instances();
  if (replicas.size() == 1) return true;
  if (!fully_parallel) return replicas.rank() == 0;
  const uint64_t hash = fnv1a_64(absl::StrCat(piece.key, "@", absl::StrJoin(piece.offsets, ",")));
  return static_cast<int>(hash % static_cast<uint64_t>(replicas.size())) == replicas.rank();
}

std::vector<ShardedTensor> state_pieces(const CheckpointedState& state, const Arguments& args, bool with_optimizer) {
  std::vector<ShardedTensor> pieces = state.parameters.params.sharded_tensors();
  if (state.parameters.buffers) {
    for (ShardedTensor& piece : state.parameters.buffers()) pieces.push_back(std::move(piece));
  }
  if (with_optimizer) {
    std::vector<ShardedTensor> optimizer = state.optimizer.sharded_tensors(shards_optimizer(args));
    pieces.insert(pieces.end(), std::make_move_iterator(optimizer.begin()), std::make_move_iterator(optimizer.end()));
  }
  return pieces;
}

// The flags whose values decide the shapes of the model's tensors beyond what the tensors' own
// global shapes show (a different layer count changes only which keys exist).
absl::Status check_model_arguments(const std::string& saved, const Arguments& args, const std::string& directory) {
  const std::map<std::string, std::string> theirs = arguments_by_flag(saved);
  std::map<std::string, std::string> ours = arguments_by_flag(canonical_arguments(args));
  std::vector<std::string> differences;
  for (const char* flag : {"--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads",
                           "--kv-channels", "--max-position-embeddings", "--untie-embeddings-and-output-weights",
                           "--position-embedding-type", "--normalization", "--swiglu", "--num-query-groups",
                           "--disable-bias-linear", "--add-qkv-bias", "--apply-layernorm-1p", "--squared-relu",
                           "--qk-layernorm"}) {
    auto it = theirs.find(flag);
    if (it != theirs.end() && it->second != ours[flag]) {
      differences.push_back(absl::StrCat(flag, " ", ours[flag], " (checkpoint: ", it->second, ")"));
    }
  }
  if (differences.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("checkpoint ", directory, " is of a different model: ",
                                                    absl::StrJoin(differences, ", ")));
}

// A resume (not --finetune) whose seed or vocabulary differs from the saved run's: allowed (a user
// may mean it), but said, since the run then no longer continues the saved one (another sample
// order and other dropout masks; token ids that mean other words). Empty when nothing differs.
std::string resume_differences(const std::string& saved, const Arguments& args) {
  const std::map<std::string, std::string> theirs = arguments_by_flag(saved);
  std::map<std::string, std::string> ours = arguments_by_flag(canonical_arguments(args));
  std::vector<std::string> differences;
  for (const char* flag : {"--seed", "--vocab-size", "--tokenizer-type", "--vocab-file", "--merge-file", "--tokenizer-model"}) {
    auto it = theirs.find(flag);
    if (it != theirs.end() && it->second != ours[flag]) {
      differences.push_back(absl::StrCat(flag, " ", ours[flag], " (checkpoint: ", it->second, ")"));
    }
  }
  return absl::StrJoin(differences, ", ");
}

// Reads every wanted piece from the checkpoint into the rank's buffers (through a host copy).
// `fallback_key` maps a key the checkpoint may lack to one to read instead (master weights of a
// checkpoint saved in FP32 are its parameters).
absl::Status read_pieces(CheckpointReader& reader, const std::vector<ShardedTensor>& pieces,
                         const std::set<std::string>& skipped) {
  // One batch, so that the reader verifies and copies on every core at once. Host tensors are
  // read in place; device tensors through host copies.
  std::vector<CheckpointReader::ReadRequest> requests;
  std::vector<std::vector<unsigned char>> host;
  std::vector<const ShardedTensor*> staged;
  for (const ShardedTensor& piece : pieces) {
    if (skipped.count(piece.key)) continue;
    std::string key = piece.key;
    if (!reader.contains(key) && key.rfind("optimizer/master/", 0) == 0) {
      key = "model/" + key.substr(std::string("optimizer/master/").size());
    }
    void* target = piece.data.data();
    if (piece.data.device() != Device::kCpu) {
      host.emplace_back(piece.data.bytes());
      staged.push_back(&piece);
      target = host.back().data();
    }
    requests.push_back({key, piece.global_shape, piece.offsets, piece.local_shape, piece.data.dtype(), target});
  }
  GPT_RETURN_IF_ERROR(reader.read_many(requests));
  for (size_t i = 0; i < staged.size(); ++i) {
    copy_bytes(staged[i]->data.device(), staged[i]->data.data(), Device::kCpu, host[i].data(), host[i].size());
  }
  return absl::OkStatus();
}

}  // namespace

Checkpointer::Checkpointer(const Arguments& args, ProcessGrid& grid) : args_(args), grid_(grid) {
  if (args_.exit_signal_handler) install_exit_signal_handler();
}

Checkpointer::~Checkpointer() {
  // An error path may leave a writer running: its shard is never committed, but the thread must
  // not outlive the host copy it reads.
  if (writer_.joinable()) writer_.join();
}

absl::Status Checkpointer::save(const CheckpointedState& state) {
  GPT_RETURN_IF_ERROR(finalize_pending(/*wait=*/true));
  Stopwatch blocked;
  const int64_t iteration = state.progress.iteration();
  // What start() could not foresee (an exit by signal or duration at that iteration).
  absl::Status refused;
  if (grid_.world_rank() == 0 && iteration == protected_iteration()) {
    refused = absl::FailedPreconditionError(absl::StrCat(
        "--finetune: saving iteration ", iteration, " into --save ", args_.save, " would replace ",
        iteration_directory_name(iteration), ", the checkpoint this run finetunes from; nothing was saved"));
  }
  GPT_RETURN_IF_ERROR(agree_on_setup(refused, "checkpoint save"));
  print_rank0(grid_, absl::StrFormat("saving checkpoint at iteration %7d to %s in hdf5 format", iteration, args_.save));
  state.parameters.settle();
  state.parameters.ctx.synchronize();

  // The host copy of what this rank writes.
  auto pieces = std::make_shared<std::vector<HostPiece>>();
  double bytes = 0;
  for (ShardedTensor& piece : state_pieces(state, args_, !args_.no_save_optim)) {
    if (!writes_piece(piece, grid_, !args_.no_ckpt_fully_parallel_save)) continue;
    HostPiece host;
    host.dtype = piece.data.dtype();
    host.bytes.resize(piece.data.bytes());
    copy_bytes(Device::kCpu, host.bytes.data(), piece.data.device(), piece.data.data(), piece.data.bytes());
    bytes += static_cast<double>(piece.data.bytes());
    host.record = std::move(piece);
    host.record.data = Tensor();
    pieces->push_back(std::move(host));
  }

  PendingSave pending;
  pending.since_start = blocked;  // the save's seconds count from its start, host copy included
  pending.iteration = iteration;
  pending.temporary = absl::StrCat(args_.save, "/", iteration_directory_name(iteration), ".tmp");
  pending.bytes = bytes;
  CheckpointMetadata& m = pending.metadata;
  m.iteration = iteration;
  m.consumed_train_samples = state.progress.data_position().consumed_train_samples;
  m.consumed_valid_samples = state.progress.data_position().consumed_valid_samples;
  m.optimizer_steps = args_.no_save_optim ? 0 : state.optimizer.steps_taken();
  m.seed = args_.seed;
  m.tensor_parallel = grid_.shape().tensor;
  m.pipeline_parallel = grid_.shape().pipeline;
  m.data_parallel = grid_.shape().data;
  m.virtual_stages = state.parameters.num_chunks;
  m.params_dtype = std::string(dtype_name(state.parameters.params.dtype()));
  for (const CheckpointRecords* owner : state.records) owner->save_records(m.records);
  m.distributed_optimizer = shards_optimizer(args_);
  m.arguments = canonical_arguments(args_);

  // Rank 0 clears what crashed saves left (any iter_*.tmp: no other save of this job is in
  // progress); nobody writes before that.
  absl::Status status;
  if (grid_.world_rank() == 0) {
    std::error_code error;
    std::filesystem::create_directories(args_.save, error);
    for (const auto& entry : std::filesystem::directory_iterator(args_.save, error)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("iter_", 0) == 0 && name.size() > 4 && name.substr(name.size() - 4) == ".tmp") {
        std::filesystem::remove_all(entry.path(), error);
      }
    }
    if (!error) std::filesystem::remove_all(pending.temporary, error);
    if (!error) std::filesystem::create_directory(pending.temporary, error);
    if (error) status = absl::PermissionDeniedError(absl::StrCat("--save ", args_.save, ": cannot create ",
                                                                 pending.temporary, ": ", error.message()));
  }
  maybe_inject_fault("save-handshake", grid_.world_rank());
  GPT_RETURN_IF_ERROR(agree_on_setup(status, "checkpoint save"));
  // Rank 0's id for this save (the others contribute 0 to the maximum): every shard and the index
  // carry it, so that a shard of another save is refused at load.
  m.save_id = save_id_text(world_max(grid_.world_rank() == 0 ? new_save_id() : 0, "checkpoint save id"));

  const std::string shard = absl::StrCat(pending.temporary, "/", shard_file_name(grid_.world_rank()));
  writer_done_.store(false);
  writer_status_ = absl::OkStatus();
  auto write = [this, pieces, shard, save_id = m.save_id, iteration] {
    writer_status_ = pieces->empty() ? absl::OkStatus() : write_shard(shard, *pieces, save_id, iteration);
    maybe_inject_fault("after-shard", grid_.world_rank());
    writer_done_.store(true);
  };
  if (args_.async_save) {
    writer_ = std::thread(write);
  } else {
    write();
  }
  pending.blocked_seconds = blocked.elapsed_seconds();
  pending_ = std::move(pending);
  last_saved_iteration_ = iteration;
  if (!args_.async_save) return finalize_pending(/*wait=*/true);
  return absl::OkStatus();
}

absl::Status Checkpointer::finalize_pending(bool wait) {
  if (!pending_) return absl::OkStatus();
  if (!wait && world_min(writer_done_.load() ? 1 : 0, "asynchronous save completion") == 0) return absl::OkStatus();
  Stopwatch blocked;
  if (writer_.joinable()) writer_.join();
  PendingSave pending = std::move(*pending_);
  pending_.reset();
  absl::Status status = agree_on_setup(writer_status_, "checkpoint save");
  if (status.ok() && grid_.world_rank() == 0) status = commit(pending);
  status = agree_on_setup(status, "checkpoint save");
  if (!status.ok()) {
    if (grid_.world_rank() == 0) {
      std::error_code error;
      std::filesystem::remove_all(pending.temporary, error);
    }
    return status;
  }
  pending.blocked_seconds += blocked.elapsed_seconds();
  const int64_t world_bytes =
      world_extreme(static_cast<int64_t>(pending.bytes), world::Combine::kSum, "checkpoint save size");
  const int64_t blocked_ms = world_max(static_cast<int64_t>(pending.blocked_seconds * 1e3), "checkpoint save time");
  print_rank0(grid_, absl::StrFormat("  successfully saved checkpoint from iteration %7d to %s [ %.1f MB in %.2f s, "
                                     "training blocked %.3f s ]",
                                     pending.iteration, args_.save, static_cast<double>(world_bytes) / 1048576.0,
                                     pending.since_start.elapsed_seconds(), static_cast<double>(blocked_ms) / 1e3));
  return absl::OkStatus();
}

absl::Status Checkpointer::commit(const PendingSave& pending) {
  std::vector<std::string> shards;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(pending.temporary, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard_", 0) == 0) shards.push_back(name);
  }
  if (error) return absl::DataLossError(absl::StrCat("cannot list ", pending.temporary, ": ", error.message()));
  std::sort(shards.begin(), shards.end());
  GPT_RETURN_IF_ERROR(write_index(pending.temporary, shards, pending.metadata));
  GPT_RETURN_IF_ERROR(fsync_directory(pending.temporary));
  maybe_inject_fault("before-rename", 0);
  const std::string final_name = absl::StrCat(args_.save, "/", iteration_directory_name(pending.iteration));
  // Saving an iteration again (a resumed run that reaches a saved iteration): the old directory is
  // moved aside first, so that a crash in between leaves one of the two complete.
  const std::string old_name = final_name + ".old";
  std::filesystem::remove_all(old_name, error);
  if (std::filesystem::exists(final_name, error)) std::filesystem::rename(final_name, old_name, error);
  if (!error) std::filesystem::rename(pending.temporary, final_name, error);
  if (error) return absl::DataLossError(absl::StrCat("cannot commit checkpoint ", final_name, ": ", error.message()));
  GPT_RETURN_IF_ERROR(fsync_directory(args_.save));
  maybe_inject_fault("before-tracker", 0);
  // --save-retain-interval (Megatron's rule): the checkpoint the tracker named before this one is
  // deleted once this one is committed, unless its iteration is a multiple of the interval.
  std::optional<int64_t> previous;
  if (args_.save_retain_interval > 0) {
    absl::StatusOr<std::optional<int64_t>> tracker = read_tracker(args_.save);
    if (tracker.ok()) previous = *tracker;
  }
  GPT_RETURN_IF_ERROR(write_tracker(args_.save, pending.iteration));
  std::filesystem::remove_all(old_name, error);
  if (previous && *previous > 0 && *previous != pending.iteration && *previous % args_.save_retain_interval != 0 &&
      *previous != protected_iteration()) {
    std::filesystem::remove_all(absl::StrCat(args_.save, "/", iteration_directory_name(*previous)), error);
  }
  if (args_.keep_latest_checkpoints > 0) {
    const std::vector<int64_t> committed = list_checkpoints(args_.save);
    const size_t keep = static_cast<size_t>(args_.keep_latest_checkpoints);
    for (size_t i = 0; i + keep < committed.size(); ++i) {
      if (committed[i] == pending.iteration || committed[i] == protected_iteration()) continue;
      std::filesystem::remove_all(absl::StrCat(args_.save, "/", iteration_directory_name(committed[i])), error);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Checkpointer::after_iteration(const CheckpointedState& state) {
  const int64_t iteration = state.progress.iteration();
  bool saved = false;
  // Megatron's train loop saves a checkpoint (with --save) before an iteration whose number of
  // microbatches differs from the previous one's (a ramp-up or step schedule's change).
  const bool batch_changes = iteration < args_.train_iters && state.progress.batch_size_changes_next();
  if (!args_.save.empty() && ((args_.save_interval > 0 && iteration % args_.save_interval == 0) || batch_changes)) {
    GPT_RETURN_IF_ERROR(save(state));
    saved = true;
  } else {
    GPT_RETURN_IF_ERROR(finalize_pending(/*wait=*/false));
  }
  std::string reason;
  if (args_.exit_signal_handler && world_max(exit_signal_received() ? 1 : 0, "--exit-signal-handler") != 0) {
    reason = "exiting program after receiving SIGTERM.";
  } else if (args_.exit_duration_in_mins > 0 &&
             world_max(static_cast<int64_t>(since_start_.elapsed_seconds() / 60.0), "--exit-duration-in-mins") >=
                 args_.exit_duration_in_mins) {
    reason = absl::StrCat("exiting program after ", args_.exit_duration_in_mins, " minutes");
  } else if (args_.exit_interval > 0 && iteration % args_.exit_interval == 0) {
    reason = absl::StrCat("exiting program at iteration ", iteration);
  }
  if (reason.empty()) return false;
  if (!args_.save.empty() && !saved) GPT_RETURN_IF_ERROR(save(state));
  GPT_RETURN_IF_ERROR(finalize_pending(/*wait=*/true));
  print_rank0(grid_, reason);
  return true;
}

absl::Status Checkpointer::finish(const CheckpointedState& state) {
  if (!args_.save.empty() && state.progress.iteration() != last_saved_iteration_ && state.progress.iteration() > 0) {
    GPT_RETURN_IF_ERROR(save(state));
  }
  return finalize_pending(/*wait=*/true);
}

absl::Status Checkpointer::start(const CheckpointedState& state) {
  if (!args_.save.empty()) {
    absl::Status status;
    if (grid_.world_rank() == 0) {
      std::string stale;
      absl::StatusOr<std::unique_ptr<SaveDirectoryLock>> lock = SaveDirectoryLock::acquire(args_.save, &stale);
      if (lock.ok()) {
        lock_ = std::move(*lock);
        if (!stale.empty()) {
          GPT_LOG_WARNING() << "--save " << args_.save << ": taking over the stale lock " << lock_->path() << " of "
                            << stale << " (that process is gone: it held no lock)";
        }
      } else {
        status = lock.status();
      }
    }
    GPT_RETURN_IF_ERROR(agree_on_setup(status, "save directory lock"));
  }
  GPT_RETURN_IF_ERROR(load(state));
  if (args_.save.empty()) return absl::OkStatus();
  return agree_on_setup(grid_.world_rank() == 0 ? check_save_directory() : absl::OkStatus(), "save directory check");
}

int64_t Checkpointer::protected_iteration() const {
  return args_.finetune && loaded_iteration_ >= 0 && same_directory(args_.load, args_.save) ? loaded_iteration_ : -1;
}

absl::Status Checkpointer::check_save_directory() const {
  const int64_t kept = protected_iteration();
  if (kept >= 0) {
    // A finetuning run counts from 0 again: its save at the loaded iteration would replace the base.
    const bool saves_there =
        kept <= args_.train_iters &&
        (kept == args_.train_iters || (args_.save_interval > 0 && kept % args_.save_interval == 0) ||
         (args_.exit_interval > 0 && kept % args_.exit_interval == 0));
    if (saves_there && kept > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--finetune with --save equal to --load (", args_.save, "): this run would save iteration ", kept,
          " over ", iteration_directory_name(kept),
          ", the checkpoint it finetunes from; use another --save directory"));
    }
  }
  if ((loaded_iteration_ >= 0 && same_directory(args_.load, args_.save)) || args_.allow_other_run_checkpoints) {
    return absl::OkStatus();
  }
  const std::vector<int64_t> found = list_checkpoints(args_.save);
  std::error_code error;
  const bool tracked = std::filesystem::exists(
      std::filesystem::symlink_status(absl::StrCat(args_.save, "/", kTrackerFileName), error));
  if (found.empty() && !tracked) return absl::OkStatus();
  std::vector<int64_t> shown(found.begin(), found.begin() + std::min<size_t>(found.size(), 5));
  return absl::FailedPreconditionError(absl::StrCat(
      "--save ", args_.save, " holds checkpoints this run did not load (",
      found.empty() ? std::string("a tracker") : absl::StrCat("iterations ", absl::StrJoin(shown, ", "),
                                                               found.size() > shown.size() ? ", ..." : ""),
      "): its saves would replace or mix with them; resume with --load ", args_.save,
      ", save elsewhere, or pass --allow-other-run-checkpoints"));
}

absl::Status Checkpointer::load(const CheckpointedState& state) {
  if (args_.load.empty()) return absl::OkStatus();
  int64_t iteration = args_.ckpt_step;
  std::error_code error;
  if (iteration < 0 || !std::filesystem::is_directory(args_.load, error)) {
    // A file, one checkpoint, or a directory of something else is refused (train/load_directory.h).
    GPT_RETURN_IF_ERROR(agree_on_setup(check_load_directory(args_.load), "checkpoint load"));
  }
  if (iteration < 0) {
    absl::StatusOr<std::optional<int64_t>> tracked = read_tracker(args_.load);
    GPT_RETURN_IF_ERROR(agree_on_setup(tracked.status(), "checkpoint load"));
    if (!tracked->has_value()) {
      print_rank0(grid_, absl::StrCat("WARNING: could not find the metadata file ", args_.load, "/", kTrackerFileName,
                                      "\n    will not load any checkpoints and will start from random"));
      return absl::OkStatus();
    }
    iteration = **tracked;
  }
  std::vector<int64_t> candidates = {iteration};
  if (args_.load_fallback_to_previous) {
    const std::vector<int64_t> committed = list_checkpoints(args_.load);
    for (auto it = committed.rbegin(); it != committed.rend(); ++it) {
      if (*it < iteration) candidates.push_back(*it);
    }
  }
  for (size_t c = 0; c < candidates.size(); ++c) {
    const std::string directory = absl::StrCat(args_.load, "/", iteration_directory_name(candidates[c]));
    print_rank0(grid_, absl::StrCat(" loading checkpoint from ", args_.load, " at iteration ", candidates[c]));
    Stopwatch load_time;
    absl::Status status = load_from(state, directory);
    // Every rank reads its own slices: one rank's damaged shard is everyone's failure.
    const bool mine = !status.ok();
    maybe_inject_fault("load", grid_.world_rank());
    status = agree_on_setup(status, "checkpoint load");
    if (status.ok()) {
      const int64_t bytes = world_extreme(loaded_bytes_, world::Combine::kSum, "checkpoint load size");
      const int64_t load_ms =
          world_max(static_cast<int64_t>(load_time.elapsed_seconds() * 1e3), "checkpoint load time");
      print_rank0(grid_, absl::StrFormat("  successfully loaded checkpoint from %s [ t %d, p %d, dp %d ] at iteration %d "
                                         "[ %.1f MB in %.2f s ]",
                                         args_.load, grid_.shape().tensor, grid_.shape().pipeline, grid_.shape().data,
                                         state.progress.iteration(), static_cast<double>(bytes) / 1048576.0,
                                         static_cast<double>(load_ms) / 1e3));
      last_saved_iteration_ = state.progress.iteration();
      loaded_iteration_ = candidates[c];
      return absl::OkStatus();
    }
    if (c + 1 == candidates.size()) return status;
    if (mine) {
      GPT_LOG_WARNING() << "rank " << grid_.world_rank() << ": " << status.message() << "; falling back to iteration "
                        << candidates[c + 1] << " (--load-fallback-to-previous)";
    }
  }
  return absl::OkStatus();
}

absl::Status Checkpointer::load_from(const CheckpointedState& state, const std::string& directory) {
  GPT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::open(directory));
  const CheckpointMetadata& m = reader->metadata();
  if (m.legacy) {
    print_rank0(grid_, absl::StrCat("note: checkpoint ", directory,
                                    " has format version 1 (saved before whole-checkpoint checksums): its shards and "
                                    "metadata are not verified, only its tensor chunks"));
  }
  // The saved arguments pass the flags' own checks (train/args/saved_arguments.h), as generate's.
  if (const absl::Status saved = validate_saved_arguments(m.arguments); !saved.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", directory,
                                                      ": its saved arguments would not pass pretrain_gpt's checks: ",
                                                      saved.message()));
  }
  GPT_RETURN_IF_ERROR(check_model_arguments(m.arguments, args_, directory));
  if (const std::string differences = resume_differences(m.arguments, args_);
      !differences.empty() && !args_.finetune && grid_.world_rank() == 0) {
    GPT_LOG_WARNING() << "resuming " << directory << " with " << differences
                      << ": the samples, dropout masks or token ids after this point differ from the saved run's";
  }
  const bool load_optimizer = !args_.no_load_optim && !args_.finetune;
  if (load_optimizer) {
    // Megatron restores its OptimizerParamScheduler with the optimizer: the schedule to continue.
    GPT_ASSIGN_OR_RETURN(const SchedulerSettings scheduler,
                         resumed_scheduler_settings(m.arguments, args_, directory));
    state.progress.set_scheduler(scheduler.schedule, scheduler.decoupled_schedule, scheduler.weight_decay);
  }
  std::vector<ShardedTensor> pieces = state_pieces(state, args_, load_optimizer);

  // Keys this rank wants that the checkpoint lacks (master weights may come from the parameters).
  std::set<std::string> missing;
  for (const ShardedTensor& piece : pieces) {
    const bool master = piece.key.rfind("optimizer/master/", 0) == 0;
    if (!reader->contains(piece.key) && !master) missing.insert(piece.key);
  }
  // Keys of the checkpoint that belong to no parameter of this model (any rank's).
  std::set<std::string> names;
  for (const ParamSpec& spec : build_param_specs(state.parameters.config)) names.insert(spec.name);
  for (const std::string& name : model_buffer_names(state.parameters.config)) names.insert(name);
  std::vector<std::string> unexpected;
  for (const std::string& key : reader->keys()) {
    const std::string name = key.substr(key.find_last_of('/') + 1);
    if (!names.count(name)) unexpected.push_back(key);
  }
  const std::string& strictness = args_.dist_ckpt_strictness;
  const bool raise_missing = strictness != "log_all" && strictness != "ignore_all";
  const bool raise_unexpected = strictness == "raise_unexpected" || strictness == "raise_all";
  const bool log_unexpected = strictness == "log_unexpected" || strictness == "log_all";
  auto listed = [](const auto& keys) {
    std::vector<std::string> some(keys.begin(), keys.end());
    if (some.size() > 5) some.resize(5), some.push_back("...");
    return absl::StrJoin(some, ", ");
  };
  if (!missing.empty()) {
    const bool optimizer_only = std::all_of(missing.begin(), missing.end(),
                                            [](const std::string& k) { return k.rfind("optimizer/", 0) == 0; });
    const std::string text = absl::StrCat("checkpoint ", directory, " lacks ", missing.size(), " tensors this model needs: ",
                                          listed(missing),
                                          optimizer_only ? " (saved with --no-save-optim? load with --no-load-optim)" : "");
    if (raise_missing) return absl::NotFoundError(text);
    if (strictness == "log_all") GPT_LOG_WARNING() << text << "; they keep their initial values (--dist-ckpt-strictness log_all)";
  }
  if (!unexpected.empty()) {
    const std::string text = absl::StrCat("checkpoint ", directory, " holds ", unexpected.size(),
                                          " tensors this model does not have: ", listed(unexpected));
    if (raise_unexpected) return absl::FailedPreconditionError(text);
    if (log_unexpected && grid_.world_rank() == 0) GPT_LOG_WARNING() << text;
  }

  // In FP32 the parameters are the master weights: take them from the optimizer's copy when the
  // checkpoint has one (a BF16 run's), which holds every bit.
  if (load_optimizer && !state.optimizer.has_separate_master()) {
    for (ShardedTensor& piece : pieces) {
      if (piece.key.rfind("model/", 0) != 0) continue;
      const std::string master = "optimizer/master/" + piece.key.substr(6);
      if (reader->contains(master)) piece.key = master;
    }
  }
  GPT_RETURN_IF_ERROR(read_pieces(*reader, pieces, missing));
  loaded_bytes_ = 0;
  for (const ShardedTensor& piece : pieces) {
    if (!missing.count(piece.key)) loaded_bytes_ += static_cast<int64_t>(piece.data.bytes());
  }
  state.parameters.ctx.synchronize();
  if (!load_optimizer) state.optimizer.reset_from_params(state.parameters.ctx);
  if (args_.finetune) {
    state.progress.set_data_position({}, 0);
  } else {
    state.progress.set_data_position({m.consumed_train_samples, m.consumed_valid_samples}, m.iteration);
    if (load_optimizer) state.optimizer.set_steps_taken(m.optimizer_steps);
    for (CheckpointRecords* owner : state.records) {
      const absl::Status restored = owner->load_records(m.records);
      if (!restored.ok()) {
        return absl::Status(restored.code(), absl::StrCat(directory, ": ", restored.message()));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace gpt

#include "train/launcher.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "core/cuda_runtime.h"
#include "core/memory.h"
#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "parallel/comm/mpi_runtime.h"
#include "parallel/mpi_grid.h"
#include "train/trainer.h"

namespace gpt {
namespace {

// Every rank reaches here with its own status; the lowest failing rank prints, all fail.
int agree_and_report(const MpiRuntime& mpi, const absl::Status& status) {
  int failing_rank = status.ok() ? mpi.world_size() : mpi.world_rank();
  if (mpi.active()) MPI_Allreduce(MPI_IN_PLACE, &failing_rank, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (failing_rank == mpi.world_size()) return 0;
  if (failing_rank == mpi.world_rank()) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
    std::fflush(stderr);
  }
  return 1;
}

// The device first, then the communication backend: NCCL by default on GPUs (one rank per GPU),
// MPI on the CPU or when several ranks share a GPU.
absl::Status check_backend(Arguments& args, int world_size) {
  GPT_RETURN_IF_ERROR(resolve_device(args));
  const int local_ranks = local_world_size();
  const int gpus = args.device == "cuda" ? cuda::device_count() : 0;
  if (args.distributed_backend.empty()) {
    args.distributed_backend = args.device == "cuda" && nccl_available() && world_size > 1 && local_ranks <= gpus ? "nccl" : "mpi";
  }
  if (args.distributed_backend != "nccl") return absl::OkStatus();
  if (args.device != "cuda") {
    return absl::InvalidArgumentError(
        "--distributed-backend nccl needs a GPU, and none is available (use --distributed-backend mpi on the CPU)");
  }
  if (!nccl_available()) return absl::InvalidArgumentError("--distributed-backend nccl: this build has no NCCL");
  if (local_ranks > gpus) {
    return absl::InvalidArgumentError(absl::StrCat("--distributed-backend nccl needs one rank per GPU (", local_ranks,
                                                   " ranks on ", gpus, " GPUs here): use --distributed-backend mpi"));
  }
  return absl::OkStatus();
}

}  // namespace

int launch(int argc, char** argv, const LaunchOptions& options, const LaunchBody& body) {
  MpiRuntime mpi(&argc, &argv);
  std::map<std::string, std::string> own_flags;
  std::vector<std::string> megatron_args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    bool own = false;
    for (const std::string& flag : options.own_flags_with_value) {
      if (arg == flag && i + 1 < argc) {
        own_flags[flag] = argv[++i];
        own = true;
      }
    }
    if (!own) megatron_args.push_back(arg);
  }

  absl::StatusOr<Arguments> parsed = parse_arguments(megatron_args);
  if (!parsed.ok() && absl::IsCancelled(parsed.status())) {  // --help
    if (mpi.world_rank() == 0) std::printf("%s", std::string(parsed.status().message()).c_str());
    return 0;
  }
  absl::Status status = parsed.status();
  Arguments args;
  if (status.ok()) {
    args = *std::move(parsed);
    status = validate_arguments(args);
  }
  if (status.ok()) status = validate_for_world(args, mpi.world_size());
  if (status.ok()) status = check_backend(args, mpi.world_size());
  if (const int code = agree_and_report(mpi, status); code != 0) return code;

  const GridShape shape{static_cast<int>(args.tensor_model_parallel_size),
                        static_cast<int>(args.pipeline_model_parallel_size),
                        static_cast<int>(data_parallel_size(args, mpi.world_size()))};
  std::unique_ptr<ProcessGrid> grid =
      mpi.active() ? build_mpi_grid(shape, args.distributed_timeout_minutes * 60.0) : ProcessGrid::single();
  if (options.print_layout && grid->world_rank() == 0) {
    std::printf("%s\n", grid->describe().c_str());
    std::fflush(stdout);
  }
  status = body(args, *grid, own_flags);
  return agree_and_report(mpi, status);
}

}  // namespace gpt

#include "train/launcher.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string_view>

#include "core/cuda_runtime.h"
#include "core/memory.h"
#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/strict_number.h"
#include "parallel/comm/mpi_runtime.h"
#include "parallel/comm/torchrun_runtime.h"
#include "parallel/comm/world_agreement.h"
#include "parallel/mpi_grid.h"
#include "train/args/context_parallel_arguments.h"
#include "train/resilience/exit_signal.h"
#include "train/resilience/fault_injection.h"
#include "train/memory_plan.h"
#include "train/report/pipeline_timeline.h"
#include "train/schedule_choice.h"
#include "train/rank_agreement.h"
#include "train/resilience/rerun_check.h"
#include "train/configs.h"

namespace gpt {
namespace {

// The job's world as the launcher sees it, whichever launcher started it: MPI's (mpirun, srun) or
// torchrun's; inactive in a world of one started without a launcher.
struct LaunchWorld {
  bool active = false;
  bool torchrun = false;
  int rank = 0;
  int size = 1;
};

// Every rank reaches here with its own status; all fail if any did, and one message is printed:
// that of the lowest rank that failed itself (not of a rank that stopped because a peer failed,
// see agree_on_setup), prefixed with its rank unless every rank failed the same way.
int agree_and_report(const LaunchWorld& job, const absl::Status& status) {
  const int size = job.size, rank = job.rank;
  // An exit the run asked for (train/resilience/rerun_check.h), decided by all ranks together: no error line.
  if (const std::optional<int> code = requested_exit_code(status)) {
    if (rank == 0) {
      std::printf("%s\n", std::string(status.message()).c_str());
      std::fflush(stdout);
    }
    return *code;
  }
  const bool own = !status.ok() && !is_peer_failure(status);
  int64_t failures[2] = {own ? rank : size, status.ok() ? size : rank};  // lowest own failure, lowest any
  int64_t own_count = own ? 1 : 0;
  if (job.active) {
    world::all_reduce(failures, world::Combine::kMin, "the outcome");
    own_count = world::all_reduce(own_count, world::Combine::kSum, "the outcome");
  }
  if (failures[1] == size) return 0;
  const int reporter = failures[0] != size ? failures[0] : failures[1];
  if (reporter == rank) {
    const std::string where = size > 1 && own_count < size ? absl::StrCat("rank ", rank, ": ") : "";
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s%s\n", where.c_str(), std::string(status.message()).c_str());
    std::fflush(stderr);
  }
  return 1;
}

// The most ranks of the job that use one GPU (1: every rank has its own). Compares the UUIDs of
// the GPUs the node's ranks will take (trainer_setup.cc's make_context takes the same one), so it is
// right whether the launcher shows every rank all of the node's GPUs or, through
// CUDA_VISIBLE_DEVICES, only its own. Collective over the world: every rank calls it.
int most_ranks_per_gpu(const LaunchWorld& job, const Arguments& args) {
  const std::string key = args.device == "cuda"
                              ? cuda::device_uuid(gpu_for_local_rank(local_rank(), cuda::device_count()))
                              : absl::StrCat("host rank ", job.rank);  // never equal to another's
  int most = node_ranks_with_same_key(key);
  if (job.active) most = static_cast<int>(world::all_reduce(most, world::Combine::kMax, "ranks per GPU"));
  return most;
}

// The communication backend: NCCL by default on GPUs when every rank has a GPU of its own; on the
// CPU, or when ranks share a GPU (said once, not silently), MPI under mpirun/srun and Gloo under
// torchrun. NCCL asked for explicitly on shared GPUs is refused: NCCL needs one rank per GPU. Each
// host communicator needs its launcher: MPI's ranks have no store, torchrun's workers no MPI world.
absl::Status choose_backend(Arguments& args, const LaunchWorld& job, int ranks_per_gpu) {
  const bool gpus_shared = args.device == "cuda" && ranks_per_gpu > 1;
  const char* host_backend = job.torchrun ? "gloo" : "mpi";
  if (args.distributed_backend.empty()) {
    args.distributed_backend =
        args.device == "cuda" && nccl_available() && job.size > 1 && !gpus_shared ? "nccl" : host_backend;
    if (gpus_shared && job.rank == 0) {
      GPT_LOG_WARNING() << "up to " << ranks_per_gpu << " ranks share one GPU: using the " << host_backend
                        << " communicator (device data staged through the host)";
    }
  }
  if (args.distributed_backend == "mpi" && job.torchrun) {
    return absl::InvalidArgumentError(
        "--distributed-backend mpi needs an MPI launcher (mpirun or srun), but torchrun started this job: use "
        "--distributed-backend gloo (the CPU) or nccl (GPUs)");
  }
  if (args.distributed_backend != "nccl") return absl::OkStatus();
  if (args.device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("--distributed-backend nccl needs a GPU, and none is available (use "
                                                   "--distributed-backend ", host_backend, " on the CPU)"));
  }
  if (!nccl_available()) return absl::InvalidArgumentError("--distributed-backend nccl: this build has no NCCL");
  if (gpus_shared) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--distributed-backend nccl needs one GPU per rank, but up to ", ranks_per_gpu,
        " ranks share one (this node: ", local_world_size(), " ranks, ", cuda::device_count(),
        " visible GPUs; check CUDA_VISIBLE_DEVICES and the ranks per node, or use --distributed-backend ",
        host_backend, ")"));
  }
  return absl::OkStatus();
}

// The launch environment, before anything is parsed: a process with both torchrun's and an MPI
// launcher's variables is refused (one line, from the process torchrun calls rank 0, else from
// every process), and a torchrun world that cannot be formed says why (torchrun_runtime.h).
int refuse_launch(const std::string& message, bool print) {
  if (print) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", message.c_str());
    std::fflush(stderr);
  }
  return 1;
}

// --distributed-timeout-minutes as typed (the last one wins, as the parser takes it; "--flag V" or
// "--flag=V"), read before MPI_Init so that start-up is bounded by the same timeout
// (parallel/comm/mpi_runtime.h). Read from the command line rather than an environment variable so
// that the one flag a user already sets bounds every wait. Checked as the parser checks it
// (core/strict_number.h; validate_arguments' range); a value it refuses leaves the default
// (10 minutes), and the parser then refuses it with its message once MPI is up.
void arm_startup_timeout(int argc, char** argv) {
  constexpr std::string_view kFlag = "--distributed-timeout-minutes";
  std::optional<std::string_view> text;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == kFlag && i + 1 < argc) text = argv[++i];
    if (arg.size() > kFlag.size() && arg.substr(0, kFlag.size()) == kFlag && arg[kFlag.size()] == '=') {
      text = arg.substr(kFlag.size() + 1);
    }
  }
  if (!text) return;
  const absl::StatusOr<double> minutes = parse_number_in(*text, NumberRange::above(0, 1e6));
  if (minutes.ok()) world::set_timeout_seconds(*minutes * 60.0);
}

}  // namespace

int launch(int argc, char** argv, const LaunchOptions& options, const LaunchBody& body) {
  // Before MPI starts (exit_signal.h): the flag's value is read from the command line as parsed below.
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--exit-signal-handler") install_exit_signal_handler();
  }
  arm_startup_timeout(argc, argv);
  if (const std::optional<std::string> mixed = mixed_launch_environment()) {
    const char* rank = std::getenv("RANK");
    return refuse_launch(*mixed, rank == nullptr || std::string_view(rank) == "0");
  }
  TorchrunRuntime torchrun(world::timeout_seconds());
  if (!torchrun.status().ok()) {
    const bool named = torchrun.world_size() > 1 && !absl::IsFailedPrecondition(torchrun.status());
    return refuse_launch(absl::StrCat(named ? absl::StrCat("rank ", torchrun.world_rank(), ": ") : "",
                                      torchrun.status().message()),
                         !torchrun.failed_quietly());
  }
  MpiRuntime mpi_runtime(&argc, &argv);
  const LaunchWorld job = torchrun.active()
                              ? LaunchWorld{true, true, torchrun.world_rank(), torchrun.world_size()}
                              : LaunchWorld{mpi_runtime.active(), false, mpi_runtime.world_rank(),
                                            mpi_runtime.world_size()};
  if (torchrun.active() && torchrun.env().restart_count > 0 && job.rank == 0) {
    // torchrun's agent restarted the workers (a worker or a node was lost): said once, so that a log
    // shows where an attempt began.
    std::printf("torchrun: attempt %d of run '%s' (TORCHELASTIC_RESTART_COUNT=%d), %d ranks\n",
                torchrun.env().restart_count + 1, torchrun.env().run_id.c_str(), torchrun.env().restart_count,
                job.size);
    std::fflush(stdout);
  }
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
    if (job.rank == 0) std::printf("%s", std::string(parsed.status().message()).c_str());
    return 0;
  }
  absl::Status status = parsed.status();
  Arguments args;
  if (status.ok()) {
    args = *std::move(parsed);
    status = prepare_arguments(args);
  }
  // Every agreement from here on waits at most --distributed-timeout-minutes (10 until parsed).
  if (status.ok() && args.distributed_timeout_minutes > 0) {
    world::set_timeout_seconds(args.distributed_timeout_minutes * 60.0);
  }
  if (status.ok()) status = prepare_for_world(args, job.size);
  if (status.ok()) status = resolve_device(args);
  if (const int code = agree_and_report(job, status); code != 0) return code;
  // Ranks launched with different arguments (a wrapper script that sets --seed per rank, a stale
  // host file) would train diverging replicas or fail in some collective naming nothing.
  maybe_inject_fault("startup", job.rank);
  status = check_same_arguments(args);
  if (const int code = agree_and_report(job, status); code != 0) return code;
  // Collective: only after every rank has agreed that it got this far.
  maybe_inject_fault("ranks-per-gpu", job.rank);
  const int ranks_per_gpu = most_ranks_per_gpu(job, args);
  status = choose_backend(args, job, ranks_per_gpu);
  if (const int code = agree_and_report(job, status); code != 0) return code;
  // --pipeline-schedule auto: every rank makes the same choice; rank 0 says which and why.
  if (args.pipeline_schedule == "auto") {
    const int64_t vocabulary = vocabulary_before_data(args);
    absl::StatusOr<StageCosts> costs = args.pipeline_schedule_costs.empty()
                                           ? absl::StatusOr<StageCosts>(stage_costs_from_flops(args, vocabulary))
                                           : measured_stage_costs(args);
    absl::StatusOr<ScheduleChoice> choice =
        costs.ok() ? choose_schedule(args, job.size, vocabulary, *costs,
                                     this_rank_memory_budget(args, ranks_per_gpu))
                   : absl::StatusOr<ScheduleChoice>(costs.status());
    status = choice.status();
    if (choice.ok()) {
      args.pipeline_schedule = pipeline::to_string(choice->kind);
      if (job.rank == 0) {
        std::printf("%s", choice->explanation.c_str());
        std::fflush(stdout);
      }
    }
    if (const int code = agree_and_report(job, status); code != 0) return code;
  }
  // Sizes before allocation (train/memory_plan.h): a layout that cannot fit is refused now, with
  // the bytes needed and available, not in the allocator or after minutes of growing memory.
  status = check_memory_fits(args, job.size, vocabulary_before_data(args), ranks_per_gpu);
  if (const int code = agree_and_report(job, status); code != 0) return code;

  const GridShape shape = grid_shape_from(args, job.size);
  const double timeout_seconds = args.distributed_timeout_minutes * 60.0;
  std::unique_ptr<ProcessGrid> grid = torchrun.active()      ? torchrun.build_grid(shape, timeout_seconds)
                                      : mpi_runtime.active() ? build_mpi_grid(shape, timeout_seconds)
                                                             : ProcessGrid::single();
  if (options.print_layout && grid->world_rank() == 0) {
    std::printf("%s\n", grid->describe().c_str());
    std::fflush(stdout);
  }
  status = body(args, *grid, own_flags);
  return agree_and_report(job, status);
}

}  // namespace gpt

#include "parallel/comm/torchrun_env.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpt {
namespace {

bool present(const char* name) { return std::getenv(name) != nullptr; }

absl::Status read_int(const char* name, int low, int high, int& out) {
  const char* text = std::getenv(name);
  if (text == nullptr) return absl::InvalidArgumentError(absl::StrCat("torchrun launch: ", name, " is not set"));
  if (!absl::SimpleAtoi(text, &out) || out < low || out > high) {
    return absl::InvalidArgumentError(
        absl::StrCat("torchrun launch: ", name, "=", text, " is not a whole number in ", low, "..", high));
  }
  return absl::OkStatus();
}

}  // namespace

bool launched_by_torchrun() {
  return present("TORCHELASTIC_RUN_ID") || (present("RANK") && present("WORLD_SIZE") && present("MASTER_ADDR"));
}

bool mpi_world_variables_present() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (present(variable)) return true;
  }
  return false;
}

absl::StatusOr<TorchrunEnv> read_torchrun_env() {
  constexpr int kMany = 1 << 24;
  TorchrunEnv env;
  GPT_RETURN_IF_ERROR(read_int("WORLD_SIZE", 1, kMany, env.world_size));
  GPT_RETURN_IF_ERROR(read_int("RANK", 0, env.world_size - 1, env.rank));
  GPT_RETURN_IF_ERROR(read_int("LOCAL_WORLD_SIZE", 1, env.world_size, env.local_world_size));
  GPT_RETURN_IF_ERROR(read_int("LOCAL_RANK", 0, env.local_world_size - 1, env.local_rank));
  GPT_RETURN_IF_ERROR(read_int("MASTER_PORT", 1, 65535, env.master_port));
  if (present("GROUP_RANK")) GPT_RETURN_IF_ERROR(read_int("GROUP_RANK", 0, kMany, env.group_rank));
  if (present("TORCHELASTIC_RESTART_COUNT")) {
    GPT_RETURN_IF_ERROR(read_int("TORCHELASTIC_RESTART_COUNT", 0, kMany, env.restart_count));
  }
  const char* addr = std::getenv("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0') return absl::InvalidArgumentError("torchrun launch: MASTER_ADDR is not set");
  env.master_addr = addr;
  if (const char* id = std::getenv("TORCHELASTIC_RUN_ID")) env.run_id = id;
  if (const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE")) env.agent_store = std::string(agent) == "True";
  return env;
}

std::optional<std::string> mixed_launch_environment() {
  if (!launched_by_torchrun() || !mpi_world_variables_present()) return std::nullopt;
  return std::string(
      "this process has both torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR) and an MPI launcher's "
      "(OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK): start the job with one launcher, mpirun/srun or torchrun, "
      "not one inside the other");
}

}  // namespace gpt

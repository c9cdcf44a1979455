// Builds without libgloo-dev: a torchrun launch is refused when the world is formed (the message
// says how to get Gloo), so no grid is ever built here.
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "parallel/comm/gloo_grid.h"

namespace gpt {

struct GlooWorld {};

void GlooWorldDeleter::operator()(GlooWorld* world) const { delete world; }

bool gloo_available() { return false; }

absl::StatusOr<std::unique_ptr<GlooWorld, GlooWorldDeleter>> connect_gloo_world(TcpStoreClient&, const TorchrunEnv&) {
  return absl::FailedPreconditionError(
      "this build has no Gloo, which a torchrun launch needs: install libgloo-dev (scripts/setup.sh) and configure "
      "again, or start the job with mpirun or srun");
}

std::unique_ptr<ProcessGrid> build_gloo_grid(GlooWorld&, TcpStoreClient&, const std::string&, const GridShape&, int,
                                             double) {
  GPT_FATAL() << "a Gloo grid in a build without Gloo";
}

}  // namespace gpt

// pretrain_gpt: Megatron-style GPT pretraining. Runs as a world of one without mpirun.
#include <cstdio>

#include "core/logging.h"
#include "parallel/process_grid.h"
#include "train/arguments.h"
#include "train/trainer.h"

namespace {

int fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<gpt::Arguments> parsed = gpt::parse_arguments(argc, argv);
  if (!parsed.ok()) {
    if (absl::IsCancelled(parsed.status())) {  // --help
      std::printf("%s", std::string(parsed.status().message()).c_str());
      return 0;
    }
    return fail(parsed.status());
  }
  gpt::Arguments args = *std::move(parsed);
  if (absl::Status status = gpt::validate_arguments(args); !status.ok()) return fail(status);
  std::unique_ptr<gpt::ProcessGrid> grid = gpt::ProcessGrid::single();
  if (absl::Status status = gpt::validate_for_world(args, grid->world_size()); !status.ok()) return fail(status);
  absl::StatusOr<std::unique_ptr<gpt::Trainer>> trainer = gpt::Trainer::create(args, *grid);
  if (!trainer.ok()) return fail(trainer.status());
  if (absl::Status status = (*trainer)->run(); !status.ok()) return fail(status);
  return 0;
}

// pretrain_gpt: Megatron-style GPT pretraining. Under mpirun the world is split into TP x PP x DP;
// started directly it runs as a world of one. --load resumes from a checkpoint, --save writes them
// (train/checkpointing.h).
#include "train/checkpointing.h"
#include "train/launcher.h"
#include "train/resilience/qk_layernorm_check.h"
#include "train/resilience/replica_check.h"
#include "train/resilience/rerun_check.h"
#include "train/trainer.h"
#include "train/report/training_sample.h"

int main(int argc, char** argv) {
  return gpt::launch(argc, argv, {}, [](const gpt::Arguments& args, gpt::ProcessGrid& grid, const auto&) -> absl::Status {
    GPT_ASSIGN_OR_RETURN(std::unique_ptr<gpt::Trainer> trainer, gpt::Trainer::create(args, grid));
    // The parts of the run that the checkpointer, the checks and the samples read (train/training_state.h).
    const gpt::CheckpointedState state = trainer->checkpointed_state();
    const gpt::RankParameters& parameters = state.parameters;
    gpt::Checkpointer checkpointer(args, grid);
    GPT_RETURN_IF_ERROR(checkpointer.start(state));
    gpt::TrainingSampler sampler(args, grid);
    // --test-mode: the state the first forward reads, then after each iteration the next one's.
    GPT_RETURN_IF_ERROR(gpt::check_qk_layernorm_replicas(parameters, trainer->iteration(), grid, args));
    const absl::Status trained = trainer->run([&]() -> absl::StatusOr<bool> {
      const int64_t iteration = trainer->iteration();
      GPT_RETURN_IF_ERROR(sampler.after_iteration(parameters, iteration));
      GPT_RETURN_IF_ERROR(
          gpt::check_replica_weights(parameters, iteration, grid, args.check_weight_hash_across_dp_replicas_interval));
      GPT_RETURN_IF_ERROR(gpt::check_qk_layernorm_replicas(parameters, iteration, grid, args));
      return checkpointer.after_iteration(state);
    });
    // The rerun check's exit (train/resilience/rerun_check.h): save the state before the iteration, then exit
    // with Megatron's code.
    if (gpt::requested_exit_saves(trained)) GPT_RETURN_IF_ERROR(checkpointer.finish(state));
    GPT_RETURN_IF_ERROR(trained);
    return checkpointer.finish(state);
  });
}

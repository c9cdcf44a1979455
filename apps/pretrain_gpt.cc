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
    gpt::Checkpointer checkpointer(args, grid);
    GPT_RETURN_IF_ERROR(checkpointer.start(*trainer));
    gpt::TrainingSampler sampler(args, grid);
    // --test-mode: the state the first forward reads, then after each iteration the next one's.
    GPT_RETURN_IF_ERROR(gpt::check_qk_layernorm_replicas(*trainer, grid, args));
    const absl::Status trained = trainer->run([&]() -> absl::StatusOr<bool> {
      GPT_RETURN_IF_ERROR(sampler.after_iteration(*trainer));
      GPT_RETURN_IF_ERROR(gpt::check_replica_weights(*trainer, grid, args.check_weight_hash_across_dp_replicas_interval));
      GPT_RETURN_IF_ERROR(gpt::check_qk_layernorm_replicas(*trainer, grid, args));
      return checkpointer.after_iteration(*trainer);
    });
    // The rerun check's exit (train/resilience/rerun_check.h): save the state before the iteration, then exit
    // with Megatron's code.
    if (gpt::requested_exit_saves(trained)) GPT_RETURN_IF_ERROR(checkpointer.finish(*trainer));
    GPT_RETURN_IF_ERROR(trained);
    return checkpointer.finish(*trainer);
  });
}

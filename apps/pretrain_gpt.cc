// pretrain_gpt: Megatron-style GPT pretraining. Under mpirun the world is split into TP x PP x DP;
// started directly it runs as a world of one.
#include "train/launcher.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  return gpt::launch(argc, argv, {}, [](const gpt::Arguments& args, gpt::ProcessGrid& grid, const auto&) {
    GPT_ASSIGN_OR_RETURN(std::unique_ptr<gpt::Trainer> trainer, gpt::Trainer::create(args, grid));
    return trainer->run();
  });
}

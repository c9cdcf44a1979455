// A 4-rank job (TP 4) in which one rank stops taking part, for the test of
// --distributed-timeout-minutes: after one all-reduce that everyone joins, the victim either
// sleeps far past the timeout (--mode stall) or dies without a word (--mode exit), while the other
// ranks enter a second all-reduce that can never complete.
//
//   mpirun -np 4 stall_probe --mode stall|exit --victim R --timeout-seconds T
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/check.h"
#include "parallel/comm/mpi_runtime.h"
#include "parallel/mpi_grid.h"

int main(int argc, char** argv) {
  gpt::MpiRuntime mpi(&argc, &argv);
  std::string mode = "stall";
  int victim = 1;
  double timeout_seconds = 3.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mode") mode = argv[i + 1];
    if (flag == "--victim") victim = std::atoi(argv[i + 1]);
    if (flag == "--timeout-seconds") timeout_seconds = std::atof(argv[i + 1]);
  }
  GPT_CHECK_EQ(mpi.world_size(), 4) << "run with mpirun -np 4";
  auto grid = gpt::build_mpi_grid({4, 1, 1}, timeout_seconds);
  gpt::Context ctx = gpt::Context::cpu(1);
  float value = 1.0f;
  gpt::Tensor scalar(&value, gpt::DType::kFloat32, gpt::Shape({1}), gpt::Device::kCpu);
  grid->tensor().all_reduce(ctx, scalar, gpt::ReduceOp::kSum);
  GPT_CHECK_EQ(value, 4.0f) << "first all-reduce";
  if (grid->world_rank() == victim) {
    if (mode == "exit") _exit(9);
    std::this_thread::sleep_for(std::chrono::duration<double>(timeout_seconds * 20));
  }
  grid->tensor().all_reduce(ctx, scalar, gpt::ReduceOp::kSum);
  return 0;
}

#include "perf_calibrate_trainer.h"

#include <mpi.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/timer.h"
#include "parallel/mpi_grid.h"
#include "perf_model/predict.h"
#include "train/configs.h"
#include "train/trainer.h"

namespace gpt {
namespace {

struct Probe {
  std::string name;
  int64_t layers = 1, microbatches = 1, tensor = 1;
  bool zero2 = false;
};

// Layouts that move the counts apart: depth (ops per pass), microbatches (passes), ZeRO-2's
// per-microbatch, per-unit reductions and TP's per-layer collectives (communication calls). None
// is a layout of the CPU sweep (scripts/perf_cpu_validation.py: 4 layers, global batch 16).
std::vector<Probe> probes(const ProbeModel& m, int world) {
  const std::string dp = absl::StrCat("dp", world);
  std::vector<Probe> list = {{dp + ", 1 layer, 1 microbatch", 1, 1},
                             {dp + ", 3 layers, 1 microbatch", 3, 1},
                             {dp + ", 1 layer, 4 microbatches", 1, 4},
                             {dp + " zero2, 1 layer, 4 microbatches", 1, 4, 1, true},
                             {dp + " zero2, 3 layers, 4 microbatches", 3, 4, 1, true}};
  if (m.heads % world == 0 && m.hidden % world == 0 && m.vocab % world == 0) {
    list.push_back({absl::StrCat("tp", world, ", 1 layer, 4 microbatches"), 1, 4, world});
  }
  return list;
}

std::vector<std::string> probe_flags(const ProbeModel& m, const Probe& p, int world) {
  const int64_t data = world / p.tensor;
  std::vector<std::string> flags = {
      "--device", m.gpu ? "cuda" : "cpu", "--num-layers", absl::StrCat(p.layers), "--hidden-size",
      absl::StrCat(m.hidden), "--num-attention-heads", absl::StrCat(m.heads), "--seq-length", absl::StrCat(m.seq),
      "--max-position-embeddings", absl::StrCat(m.seq), "--micro-batch-size", absl::StrCat(m.micro_batch),
      "--global-batch-size", absl::StrCat(m.micro_batch * p.microbatches * data), "--vocab-size",
      absl::StrCat(m.vocab), "--tensor-model-parallel-size", absl::StrCat(p.tensor), "--train-iters",
      absl::StrCat(m.warmup_steps + m.timed_steps),
      "--lr", "1e-4", "--mock-data"};
  if (m.bf16) flags.push_back("--bf16");
  if (p.zero2) {
    flags.insert(flags.end(), {"--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads"});
  }
  return flags;
}

double slowest_rank(double value) {
  double result = value;
  MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return result;
}

// The steps of one run of `probe` after its warm-up, each timed as pretrain_gpt's log line times an
// iteration (train/trainer.cc: the step, then a wait for the device).
absl::Status time_steps(const ProbeModel& model, const Arguments& args, const Probe& probe, int world_size,
                        std::vector<double>& steps) {
  const GridShape shape{.tensor = static_cast<int>(probe.tensor), .data = world_size / static_cast<int>(probe.tensor)};
  std::unique_ptr<ProcessGrid> grid = build_mpi_grid(shape, 300.0);
  GPT_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::create(args, *grid));
  for (int s = 0; s < model.warmup_steps + model.timed_steps; ++s) {
    Stopwatch step;
    trainer->train_step();
    trainer->context().synchronize();
    if (s >= model.warmup_steps) steps.push_back(step.elapsed_seconds());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<perf::OverheadSample>> time_trainer_probes(const ProbeModel& model, int world_size,
                                                                       const perf::Cluster& priced) {
  const std::vector<Probe> list = probes(model, world_size);
  std::vector<Arguments> arguments;
  std::vector<perf::OverheadSample> samples;
  for (const Probe& probe : list) {
    GPT_ASSIGN_OR_RETURN(Arguments parsed, perf::parse_model_flags(probe_flags(model, probe, world_size)));
    GPT_ASSIGN_OR_RETURN(Arguments args, perf::validate_layout(parsed, world_size));
    GPT_RETURN_IF_ERROR(resolve_device(args));
    GPT_ASSIGN_OR_RETURN(const perf::Prediction predicted, perf::predict(args, world_size, priced));
    arguments.push_back(args);
    samples.push_back({.name = probe.name,
                       .predicted_s = predicted.iteration_time,
                       .ops = predicted.op_calls,
                       .passes = predicted.pass_calls,
                       .collectives = predicted.collective_calls});
  }
  std::vector<std::vector<double>> steps(list.size());
  for (int pass = 0; pass < std::max(1, model.passes); ++pass) {
    for (size_t k = 0; k < list.size(); ++k) {
      const size_t i = pass % 2 == 0 ? k : list.size() - 1 - k;
      GPT_RETURN_IF_ERROR(time_steps(model, arguments[i], list[i], world_size, steps[i]));
    }
  }
  for (size_t i = 0; i < list.size(); ++i) {
    std::sort(steps[i].begin(), steps[i].end());
    samples[i].measured_s = slowest_rank(steps[i][steps[i].size() / 2]);
  }
  return samples;
}

}  // namespace gpt

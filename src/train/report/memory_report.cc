#include "train/report/memory_report.h"

#include <cstdio>

#include "core/stream_copy.h"

namespace gpt {

std::string memory_report(Context& ctx, const ProcessGrid& grid, const MemoryFigures& mine, const Tensor& scratch,
                          const Tensor& gathered) {
  std::vector<float> record;
  for (int i = 0; i < MemoryFigures::kItems; ++i) {
    record.push_back(static_cast<float>(mine.theoretical[i]));
    record.push_back(static_cast<float>(mine.allocated[i]));
  }
  record.push_back(static_cast<float>(mine.total_allocated));
  copy_to_device(ctx, scratch, std::span<const float>(record));
  grid.world().all_gather(ctx, gathered, scratch);
  std::vector<float> all(static_cast<size_t>(gathered.numel()));
  copy_to_host(ctx, all.data(), gathered);
  ctx.synchronize();
  if (grid.world_rank() != 0) return "";

  const GridShape& shape = grid.shape();
  std::vector<std::pair<std::string, int>> kinds;  // (label, pipeline stage)
  if (shape.pipeline == 1) {
    kinds = {{"every rank", 0}};
  } else {
    kinds.push_back({"first stage", 0});
    if (shape.pipeline > 2) kinds.push_back({"middle stage", 1});
    kinds.push_back({"last stage", shape.pipeline - 1});
  }
  const char* items[] = {"parameters", "gradients (FP32)", "master weights (FP32)", "optimizer moments (FP32)",
                         "host optimizer (FP32)", "activation stash"};
  std::string out = "memory report (MB per rank; theoretical / allocated):\n";
  char line[256];
  for (const auto& [label, stage] : kinds) {
    const int rank = grid_rank(shape, {0, stage, 0});
    const float* r = all.data() + static_cast<size_t>(rank) * kMemoryFigureFloats;
    std::snprintf(line, sizeof(line), "  %s (world rank %d):\n", label.c_str(), rank);
    out += line;
    for (int i = 0; i < MemoryFigures::kItems; ++i) {
      // The host row only where the optimizer state is offloaded.
      if (i == MemoryFigures::kHostOptimizer && r[2 * i] == 0 && r[2 * i + 1] == 0) continue;
      std::snprintf(line, sizeof(line), "    %-26s %10.2f / %10.2f\n", items[i], r[2 * i] / 1048576.0,
                    r[2 * i + 1] / 1048576.0);
      out += line;
    }
    std::snprintf(line, sizeof(line), "    %-26s %10s   %10.2f (workspaces and logits included)\n",
                  "all allocations", "", r[2 * MemoryFigures::kItems] / 1048576.0);
    out += line;
  }
  return out;
}

}  // namespace gpt

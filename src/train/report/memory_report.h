// The start-up memory report: for one rank of each kind (first, middle and last pipeline stage),
// the bytes its parameters, FP32 gradients, master weights, optimizer moments and activation stash
// need in theory (from the model's sizes, the layout, the schedule's stash slots and recompute)
// next to what its arena actually allocated (alignment, bucket padding, workspaces and the LM
// head's logits included). With the distributed optimizer, master weights and moments fall as 1/DP.
#pragma once

#include <string>
#include <vector>

#include "core/context.h"
#include "parallel/process_grid.h"

namespace gpt {

// One rank's figures, in bytes.
struct MemoryFigures {
  // kHostOptimizer: the offloaded optimizer state in host memory (with its staging, allocated).
  enum Item { kParameters, kGradients, kMasterWeights, kMoments, kHostOptimizer, kActivations, kItems };
  double theoretical[kItems] = {};
  double allocated[kItems] = {};
  double total_allocated = 0;  // everything the rank's arena holds
};

// Gathers every rank's figures (a collective over the world; `scratch` must hold
// 2 * kItems + 1 floats on the context's device, `gathered` world size times that) and formats the
// report of the first, middle and last stage's first rank; empty on ranks other than the world's 0.
std::string memory_report(Context& ctx, const ProcessGrid& grid, const MemoryFigures& mine, const Tensor& scratch,
                          const Tensor& gathered);
constexpr int64_t kMemoryFigureFloats = 2 * MemoryFigures::kItems + 1;

}  // namespace gpt

// The process grid's groups as splits of the world, for any communicator kind: every rank calls
// `split` once per group kind, in the same order, passing its group's color (the coordinates
// outside the group) and its key (its place in the group, by the group's own coordinate), or
// kNotMember for a kind it belongs to none of (the embedding group off the first and last stage).
// MPI_Comm_split does exactly this (parallel/mpi_grid.cc); Gloo's groups are formed the same way
// (parallel/gloo_grid.cc).
#pragma once

#include <functional>
#include <memory>

#include "parallel/process_grid.h"

namespace gpt {

constexpr int kNotMember = -1;
using GroupSplit = std::function<std::unique_ptr<Communicator>(int color, int key, const char* name)>;

std::unique_ptr<ProcessGrid> build_split_grid(const GridShape& shape, int world_rank,
                                              std::unique_ptr<Communicator> world, const GroupSplit& split);

}  // namespace gpt

// What every MPI program of the project does around its work: start MPI when launched by mpirun
// (a world of one otherwise), parse and validate the arguments before anything is allocated,
// check that every rank was given the same arguments (rank_agreement.h), build the process grid
// (rank 0 prints the layout), run the body, and turn any error into one message from the lowest
// failing rank and a non-zero exit on every rank. The body's own set-up steps that may fail on one
// rank only (data loading, model building) agree with agree_on_setup, so that the other ranks do
// not wait for the collective timeout.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "parallel/process_grid.h"
#include "train/args/arguments.h"

namespace gpt {

struct LaunchOptions {
  // Arguments the program handles itself, removed before Megatron-flag parsing (e.g. "--output").
  std::vector<std::string> own_flags_with_value;
  bool print_layout = true;
};

using LaunchBody = std::function<absl::Status(const Arguments& args, ProcessGrid& grid,
                                              const std::map<std::string, std::string>& own_flags)>;

// Returns the process exit code.
int launch(int argc, char** argv, const LaunchOptions& options, const LaunchBody& body);

}  // namespace gpt

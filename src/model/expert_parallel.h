// Expert parallelism as an MoE block sees it (parallel/process_grid.h's expert grid; the sizes are
// the model's, model/moe_config.h): the token dispatcher's group — the ETP x EP ranks of one expert
// data-parallel index, etp fastest — and this rank's place in the expert grid, which says its
// experts [ep E / EP, (ep + 1) E / EP) and its slice of each (etp of ETP).
#pragma once

#include "parallel/comm/communicator.h"

namespace gpt {

struct ExpertParallel {
  Communicator* exchange = nullptr;  // null: no exchange (EP 1 and ETP = TP, or a dense model)
  int tensor_rank = 0;               // etp
  int model_rank = 0;                // ep
};

}  // namespace gpt

// Builds without NCCL: the launcher refuses --distributed-backend nccl before a grid exists, so
// reaching this is a broken invariant.
#include "parallel/process_grid.h"

#include "core/check.h"

namespace gpt {

bool nccl_available() { return false; }

void ProcessGrid::adopt_nccl(Context&, double) { GPT_FATAL() << "NCCL requested in a build without NCCL"; }

}  // namespace gpt

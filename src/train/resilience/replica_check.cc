#include "train/resilience/replica_check.h"

#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/philox.h"
#include "core/stream_copy.h"
#include "parallel/comm/world_agreement.h"
#include "train/resilience/fault_injection.h"

namespace gpt {

std::vector<std::string> ranks_differing_from_reference(const ProcessGrid& grid, std::vector<char> bytes,
                                                        const char* corruption, const char* what,
                                                        const std::function<void(GridCoordinates&)>& to_reference) {
  if (corruption_requested(corruption, grid.world_rank()) && !bytes.empty()) bytes[0] ^= 1;  // the tests' drift
  const uint64_t digest = fnv1a_64(std::string_view(bytes.data(), bytes.size()));
  const std::vector<uint64_t> digests = world::all_gather(digest, what);
  std::vector<std::string> differing;
  for (int rank = 0; rank < static_cast<int>(digests.size()); ++rank) {
    GridCoordinates reference = grid_coordinates(grid.shape(), rank);
    to_reference(reference);
    const int reference_rank = grid_rank(grid.shape(), reference);
    if (digests[static_cast<size_t>(rank)] != digests[static_cast<size_t>(reference_rank)]) {
      differing.push_back(absl::StrCat(rank, " (against ", reference_rank, ")"));
    }
  }
  return differing;
}

absl::Status check_replica_weights(const RankParameters& parameters, int64_t iteration, const ProcessGrid& grid,
                                   int64_t interval) {
  if (interval <= 0 || iteration % interval != 0) return absl::OkStatus();
  parameters.settle();
  const Tensor& values = parameters.params.flat_values();
  std::vector<char> host(values.bytes());
  copy_to_host(parameters.ctx, host.data(), values);
  // Each rank against the data-parallel rank 0 of its (tensor, pipeline) coordinates.
  const std::vector<std::string> differing =
      ranks_differing_from_reference(grid, std::move(host), "replica-weights",
                                     "weight hashes across data-parallel replicas",
                                     [](GridCoordinates& c) { c.data = 0; });
  if (differing.empty()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "iteration ", iteration,
      ": the parameters of data-parallel replicas differ (--check-weight-hash-across-dp-replicas-interval): world "
      "ranks ", absl::StrJoin(differing, ", "), " hold other values than their data-parallel rank 0"));
}

}  // namespace gpt

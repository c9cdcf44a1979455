#include "train/resilience/replica_check.h"

#include <map>
#include <string_view>
#include <tuple>
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

namespace {

// The first flat element of the expert buckets laid out apart (model/shard_plan.h), or the end.
int64_t dense_end(const ShardPlan& plan) {
  for (const BucketPlan& bucket : plan.buckets()) {
    if (bucket.domain == ParamDomain::kExpert) return bucket.range.begin;
  }
  return plan.flat_elements();
}

// Expert parameters laid out apart: each rank's expert part against the expert data-parallel rank 0
// of its (expert tensor, expert model, pipeline) coordinates, whose experts it holds.
std::vector<std::string> experts_differing(const ProcessGrid& grid, std::vector<char> bytes) {
  const uint64_t digest = fnv1a_64(std::string_view(bytes.data(), bytes.size()));
  const std::vector<uint64_t> digests =
      world::all_gather(digest, "expert weight hashes across expert data-parallel replicas");
  const GridShape& shape = grid.shape();
  // [(etp, ep, pp)] the world rank at expert data-parallel rank 0.
  std::map<std::tuple<int, int, int>, int> references;
  for (int rank = 0; rank < shape.world(); ++rank) {
    const ExpertCoordinates e = expert_coordinates(shape, rank);
    if (e.data == 0) references[{e.tensor, e.model, e.pipeline}] = rank;
  }
  std::vector<std::string> differing;
  for (int rank = 0; rank < shape.world(); ++rank) {
    const ExpertCoordinates e = expert_coordinates(shape, rank);
    const int reference = references.at({e.tensor, e.model, e.pipeline});
    if (digests[static_cast<size_t>(rank)] != digests[static_cast<size_t>(reference)]) {
      differing.push_back(absl::StrCat(rank, " (against ", reference, ", its experts)"));
    }
  }
  return differing;
}

}  // namespace

absl::Status check_replica_weights(const RankParameters& parameters, int64_t iteration, const ProcessGrid& grid,
                                   int64_t interval) {
  if (interval <= 0 || iteration % interval != 0) return absl::OkStatus();
  parameters.settle();
  const Tensor& values = parameters.params.flat_values();
  std::vector<char> host(values.bytes());
  copy_to_host(parameters.ctx, host.data(), values);
  // Expert parameters apart (expert parallelism): the dense part and the experts' part are each
  // compared with the rank holding the same ones.
  const ShardPlan& plan = parameters.params.plan();
  std::vector<char> experts;
  if (plan.experts_apart() && values.numel() == plan.flat_elements()) {
    const size_t split = static_cast<size_t>(dense_end(plan)) * dtype_size(values.dtype());
    experts.assign(host.begin() + static_cast<std::ptrdiff_t>(split), host.end());
    host.resize(split);
  }
  // Each rank against the data-parallel rank 0 of its (tensor, pipeline) coordinates.
  std::vector<std::string> differing =
      ranks_differing_from_reference(grid, std::move(host), "replica-weights",
                                     "weight hashes across data-parallel replicas",
                                     [](GridCoordinates& c) { c.data = 0; });
  if (plan.experts_apart()) {
    for (std::string& rank : experts_differing(grid, std::move(experts))) differing.push_back(std::move(rank));
  }
  if (differing.empty()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "iteration ", iteration,
      ": the parameters of data-parallel replicas differ (--check-weight-hash-across-dp-replicas-interval): world "
      "ranks ", absl::StrJoin(differing, ", "), " hold other values than their data-parallel rank 0"));
}

}  // namespace gpt

#include "train/resilience/qk_layernorm_check.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/stream_copy.h"
#include "train/resilience/replica_check.h"

namespace gpt {
namespace {

bool is_qk_norm(const std::string& name) {
  return name.find(".q_layernorm.") != std::string::npos || name.find(".k_layernorm.") != std::string::npos;
}

}  // namespace

absl::Status check_qk_layernorm_replicas(const RankParameters& parameters, int64_t iteration, const ProcessGrid& grid,
                                         const Arguments& args) {
  if (!args.test_mode || !args.qk_layernorm) return absl::OkStatus();
  parameters.settle();
  // The values of this rank's q/k norms in the store's order (the same layers, so the same order,
  // on every rank of a pipeline stage). ZeRO-3 is refused with --test-mode (validate_arguments):
  // every rank holds every value it uses.
  std::vector<char> host;
  for (const Param& param : parameters.params.params()) {
    if (!is_qk_norm(param.name())) continue;
    const size_t offset = host.size();
    host.resize(offset + param.value.bytes());
    copy_to_host(parameters.ctx, host.data() + offset, param.value);
  }
  // Each rank against the tensor-, data- and context-parallel rank 0 of its pipeline stage.
  const std::vector<std::string> differing = ranks_differing_from_reference(
      grid, std::move(host), "qk-layernorm", "q/k layernorm parameters across ranks (--test-mode)",
      [](GridCoordinates& c) { c.tensor = c.data = c.context = 0; });
  if (differing.empty()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "iteration ", iteration,
      ": --test-mode: the q_layernorm / k_layernorm parameters differ between the tensor- and data-parallel ranks "
      "of a pipeline stage: world ranks ", absl::StrJoin(differing, ", ")));
}

}  // namespace gpt

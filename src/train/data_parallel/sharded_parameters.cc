#include "train/data_parallel/sharded_parameters.h"

#include "absl/strings/str_format.h"
#include "core/check.h"
#include "train/data_parallel/bucket_groups.h"

namespace gpt {
namespace {

std::unique_ptr<ParamUnits> make_units(const DataParallelConfig& config, ProcessGrid& grid, ParamStore& params,
                                       Arena& arena, int64_t& bytes) {
  GPT_CHECK(params.plan().sharded_parameters()) << "ShardedParameters over a plan without sharded parameters";
  const size_t before = arena.used_bytes();
  auto point_values = [&params](int bucket, const Tensor& buffer) { params.set_bucket_values(bucket, buffer); };
  auto units = std::make_unique<ParamUnits>(bucket_groups(params.plan(), grid.data_context(), grid),
                                            params.value_storage(), params.plan().bucket_shards(),
                                            config.parameter_buffers, point_values, arena);
  bytes = static_cast<int64_t>(arena.used_bytes() - before);
  return units;
}

}  // namespace

ShardedParameters::ShardedParameters(const DataParallelConfig& config, ProcessGrid& grid, ParamStore& params,
                                     const TensorParallel& tp, Arena& arena)
    : DataParallel(params.plan()),
      grid_(grid),
      params_(params),
      prefetch_(config.overlap_param_gather),
      gradients_(config, grid, params, tp, arena),
      units_(make_units(config, grid, params, arena, parameter_buffer_bytes_)) {}

void ShardedParameters::attach(std::span<GptModel* const> chunks) {
  gradients_.build_table(chunks);
  observe(chunks);
}

void ShardedParameters::start_iteration(Context& ctx) {
  units_->invalidate(ctx);  // parameters may have been loaded since the last use
  gradients_.start_iteration(ctx);
}

void ShardedParameters::after_step(Context& ctx) {
  units_->invalidate(ctx);  // the next use gathers the updated shards
  gradients_.after_step(ctx);
}

void ShardedParameters::before_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) {
  const GroupTable& table = gradients_.table();
  const GroupTable::Row& row = table.row(group);
  for (int bucket : row.buckets) units_->acquire(ctx, bucket);
  const int next = row.neighbours[use == ParamUse::kBackward ? 0 : 1];
  if (prefetch_ && next >= 0) {
    for (int bucket : table.row(next).buckets) units_->prefetch(ctx, bucket);
  }
  gradients_.before_use(ctx, group, use, slot);
}

void ShardedParameters::after_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) {
  for (int bucket : gradients_.table().row(group).buckets) units_->release(bucket);
  gradients_.after_use(ctx, group, use, slot);
}

std::string ShardedParameters::gather_summary(int64_t iterations) const {
  if (iterations <= 0) return std::string();
  const ParamUnits::Counters& c = units_->counters();
  const double per = 1.0 / static_cast<double>(iterations);
  // MB as the memory report's: 2^20 bytes.
  const double gathered_mb = static_cast<double>(c.gathered_elements) * dtype_size(params_.dtype()) * per / 1048576.0;
  const int dp = grid_.data_context().size();
  return absl::StrFormat(
      "ZeRO-3 parameter gathers per iteration (rank %d, %lld iterations): %.1f unit gathers (%.1f prefetched), "
      "%.3f MB gathered (%.3f MB of it received from the other %d data-parallel ranks), host waited %.2f ms for them",
      grid_.world_rank(), static_cast<long long>(iterations), static_cast<double>(c.gathers) * per,
      static_cast<double>(c.prefetches) * per, gathered_mb, gathered_mb * (dp - 1) / dp, dp - 1,
      c.wait_seconds * per * 1e3);
}

}  // namespace gpt

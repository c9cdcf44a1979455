#include "model/shard_plan.h"

#include <algorithm>
#include <numeric>

#include "checkpoint/sharded_tensor.h"
#include "core/check.h"

namespace gpt {
namespace {

constexpr int64_t kParamAlignment = 64;
// Buckets stay below 2^30 elements whatever the flags say: MPI counts are ints, and a bucket's
// reduce-scatter and all-gather send it in one call.
constexpr int64_t kMaxBucket = int64_t{1} << 30;

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

SliceLayout slice_layout(const ParamSpec& spec, int tp_rank, int tp_size) {
  const auto& g = spec.global_shape;
  GPT_CHECK(g.size() == 1 || g.size() == 2) << spec.name;
  SliceLayout layout;
  int64_t rows = g[0], cols = g.size() == 2 ? g[1] : 1;
  if (spec.split == TensorSplit::kRows) {
    GPT_CHECK_EQ(rows % tp_size, 0) << spec.name << " rows not divisible by TP";
    rows /= tp_size;
    layout.row_offset = tp_rank * rows;
  } else if (spec.split == TensorSplit::kGatedRows) {
    GPT_CHECK_EQ(rows % (2 * tp_size), 0) << spec.name << " halves not divisible by TP";
    layout.gated_half_rows = rows / (2 * tp_size);
    layout.row_offset = tp_rank * layout.gated_half_rows;
    rows /= tp_size;
  } else if (spec.split == TensorSplit::kColumns) {
    GPT_CHECK_EQ(g.size(), 2u) << spec.name;
    GPT_CHECK_EQ(cols % tp_size, 0) << spec.name << " columns not divisible by TP";
    cols /= tp_size;
    layout.column_offset = tp_rank * cols;
  }
  layout.local_shape = g.size() == 1 ? Shape({rows}) : Shape({rows, cols});
  return layout;
}

std::string param_unit(const std::string& name) {
  const std::string layers = "decoder.layers.";
  if (name.rfind(layers, 0) == 0) {
    return "layer " + name.substr(layers.size(), name.find('.', layers.size()) - layers.size());
  }
  if (name.rfind("decoder.final_layernorm.", 0) == 0 || name.rfind("output_layer.", 0) == 0) return "output";
  return "embedding";
}

int64_t GlobalRectangle::numel() const {
  int64_t n = 1;
  for (int64_t c : counts) n *= c;
  return n;
}

int64_t ParamPlacement::global_row(int64_t local_row) const {
  if (slice.gated_half_rows == 0 || local_row < slice.gated_half_rows) return slice.row_offset + local_row;
  return spec->global_shape[0] / 2 + slice.row_offset + (local_row - slice.gated_half_rows);
}

std::vector<RowBlock> ParamPlacement::row_blocks() const {
  const int64_t half = slice.gated_half_rows;
  if (half == 0) return {RowBlock{0, slice.row_offset, slice.local_shape[0]}};
  return {RowBlock{0, global_row(0), half}, RowBlock{half, global_row(half), half}};
}

ShardPlan::ShardPlan(std::vector<ParamSpec> specs, ShardPlanConfig config)
    : specs_(std::move(specs)), config_(std::move(config)) {
  GPT_CHECK(config_.data_parallel_size >= 1 && config_.data_parallel_rank >= 0 &&
            config_.data_parallel_rank < config_.data_parallel_size)
      << "data-parallel rank " << config_.data_parallel_rank << " of " << config_.data_parallel_size;
  GPT_CHECK(config_.expert_data_parallel_size >= 1 && config_.expert_data_parallel_rank >= 0 &&
            config_.expert_data_parallel_rank < config_.expert_data_parallel_size)
      << "expert data-parallel rank " << config_.expert_data_parallel_rank << " of "
      << config_.expert_data_parallel_size;
  GPT_CHECK(config_.expert_tensor_parallel_size == 0 ||
            (config_.expert_tensor_parallel_rank >= 0 &&
             config_.expert_tensor_parallel_rank < config_.expert_tensor_parallel_size))
      << "expert tensor-parallel rank " << config_.expert_tensor_parallel_rank << " of "
      << config_.expert_tensor_parallel_size;
  params_.reserve(specs_.size());
  // The dense parameters first (all of them when experts are not apart), then the experts: each
  // domain's gradients become final front to back within its own buckets.
  int64_t total = lay_out(ParamDomain::kDense, 0);
  if (config_.separate_experts) total = lay_out(ParamDomain::kExpert, total);
  flat_elements_ = total;
}

int ShardPlan::tensor_rank(const ParamSpec& spec) const {
  return spec.expert >= 0 && config_.expert_tensor_parallel_size > 0 ? config_.expert_tensor_parallel_rank
                                                                     : config_.tensor_parallel_rank;
}

SliceLayout ShardPlan::slice_of(const ParamSpec& spec) const {
  if (spec.expert >= 0 && config_.expert_tensor_parallel_size > 0) {
    return slice_layout(spec, config_.expert_tensor_parallel_rank, config_.expert_tensor_parallel_size);
  }
  return slice_layout(spec, config_.tensor_parallel_rank, config_.tensor_parallel_size);
}

int64_t ShardPlan::lay_out(ParamDomain domain, int64_t total) {
  const auto in_domain = [&](const ParamSpec& spec) {
    return !config_.separate_experts || (spec.expert >= 0) == (domain == ParamDomain::kExpert);
  };
  const DomainGroup grouped = group(domain);
  const bool sharded = config_.distributed_optimizer && grouped.size > 1;
  const int64_t bucket_multiple = sharded ? std::lcm(int64_t{grouped.size}, int64_t{128}) : 1;
  const size_t first_bucket = buckets_.size();
  auto close_bucket = [&] {
    if (buckets_.size() == first_bucket || buckets_.back().params.empty()) return;
    total = round_up(total, bucket_multiple);
    buckets_.back().range.end = total;
  };
  auto open_bucket = [&] {
    if (buckets_.size() > first_bucket && buckets_.back().params.empty()) return;
    buckets_.push_back({Range{total, total}, {}, domain});
  };
  open_bucket();
  for (auto it = specs_.rbegin(); it != specs_.rend(); ++it) {
    if (!in_domain(*it)) continue;
    const bool alone = std::find(config_.own_bucket.begin(), config_.own_bucket.end(), it->name) !=
                       config_.own_bucket.end();
    if (alone) {
      close_bucket();
      open_bucket();
    }
    ParamPlacement param;
    param.spec = &*it;
    param.domain = domain;
    param.slice = slice_of(*it);
    param.flat_offset = total;
    param.bucket = static_cast<int>(buckets_.size()) - 1;
    param.counts_in_grad_norm = (it->split != TensorSplit::kReplicated || tensor_rank(*it) == 0) &&
                                (it->name != kWordEmbeddingName || config_.first_pipeline_stage);
    total += round_up(param.numel(), kParamAlignment);
    buckets_.back().params.push_back(params_.size());
    buckets_.back().range.end = total;
    params_.push_back(param);
    const int64_t bucket_elements = total - buckets_.back().range.begin;
    auto next = std::next(it);
    while (next != specs_.rend() && !in_domain(*next)) ++next;
    // Without units a bucket may end after any parameter; with them (bucket_size 0: every unit
    // alone) only after a unit's last.
    const bool unit_ends =
        !config_.unit_buckets || next == specs_.rend() || param_unit(next->name) != param_unit(it->name);
    const bool sized = config_.bucket_size > 0 || config_.unit_buckets;
    const bool full = (unit_ends && sized && bucket_elements >= config_.bucket_size) || bucket_elements >= kMaxBucket;
    if (alone || full) {
      close_bucket();
      open_bucket();
    }
  }
  close_bucket();
  // An empty last bucket goes, unless it is the plan's only one (a plan of no parameters).
  if (buckets_.size() > std::max<size_t>(first_bucket, 1) && buckets_.back().params.empty()) buckets_.pop_back();
  return total;
}

DomainGroup ShardPlan::group(ParamDomain domain) const {
  if (domain == ParamDomain::kExpert && config_.separate_experts) {
    return {config_.expert_data_parallel_rank, config_.expert_data_parallel_size};
  }
  return {config_.data_parallel_rank, config_.data_parallel_size};
}

std::vector<int> ShardPlan::bucket_group_sizes() const {
  std::vector<int> sizes;
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) sizes.push_back(bucket_group(b).size);
  return sizes;
}

int ShardPlan::smallest_group() const {
  const std::vector<int> sizes = bucket_group_sizes();
  return sizes.empty() ? config_.data_parallel_size : *std::min_element(sizes.begin(), sizes.end());
}

bool ShardPlan::has_expert_domain() const {
  return std::any_of(buckets_.begin(), buckets_.end(),
                     [](const BucketPlan& b) { return b.domain == ParamDomain::kExpert; });
}

int64_t ShardPlan::padding_elements() const {
  int64_t used = 0;
  for (const ParamPlacement& param : params_) used += param.numel();
  return flat_elements_ - used;
}

Range ShardPlan::shard(int bucket, int data_parallel_rank) const {
  const Range& b = buckets_.at(static_cast<size_t>(bucket)).range;
  const int size = bucket_group(bucket).size;
  if (!config_.distributed_optimizer || size == 1) return b;
  const int64_t n = b.size() / size;
  GPT_CHECK_EQ(n * size, b.size()) << "bucket " << bucket << " does not split over its data-parallel group";
  return {b.begin + data_parallel_rank * n, b.begin + (data_parallel_rank + 1) * n};
}

std::vector<BucketShard> ShardPlan::bucket_shards() const {
  std::vector<BucketShard> result;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const int bucket = static_cast<int>(b);
    result.push_back({buckets_[b].range, shard(bucket, bucket_group(bucket).rank)});
  }
  return result;
}

std::vector<Range> ShardPlan::owned() const {
  if (!config_.distributed_optimizer) return {Range{0, flat_elements_}};
  std::vector<Range> result;
  for (const BucketShard& b : bucket_shards()) result.push_back(b.shard);
  return result;
}

bool ShardPlan::sharded_gradients() const {
  const bool several = config_.data_parallel_size > 1 || (has_expert_domain() && config_.expert_data_parallel_size > 1);
  return config_.shard_gradients && config_.distributed_optimizer && several;
}

bool ShardPlan::sharded_parameters() const { return config_.shard_parameters && sharded_gradients(); }

int64_t ShardPlan::largest_bucket() const {
  int64_t largest = 0;
  for (const BucketPlan& bucket : buckets_) largest = std::max(largest, bucket.range.size());
  return largest;
}

const ParamPlacement* ShardPlan::param_at(int64_t flat_index) const {
  // Flat order: the last parameter starting at or before the index.
  auto it = std::upper_bound(params_.begin(), params_.end(), flat_index,
                             [](int64_t i, const ParamPlacement& p) { return i < p.flat_offset; });
  if (it == params_.begin()) return nullptr;
  --it;
  return flat_index < it->flat_offset + it->numel() ? &*it : nullptr;
}

std::vector<GlobalRectangle> ShardPlan::global_rectangles(const ParamPlacement& param, Range flat) const {
  const Range inside = flat.intersect(param.range());
  GPT_CHECK_EQ(inside.size(), flat.size()) << "flat range outside " << param.spec->name;
  const std::vector<int64_t>& global = param.spec->global_shape;
  const int64_t cols = param.slice.local_shape.rank() == 2 ? param.slice.local_shape[1] : 1;
  const int64_t begin = flat.begin - param.flat_offset, end = flat.end - param.flat_offset;  // within the slice
  std::vector<GlobalRectangle> result;
  // Each run of rows that is contiguous in the global tensor too (two for SwiGLU's fc1).
  for (const RowBlock& block : param.row_blocks()) {
    const int64_t block_begin = block.local_row * cols, block_end = block_begin + block.rows * cols;
    const int64_t first = std::max(begin, block_begin), last = std::min(end, block_end);
    if (first >= last) continue;
    std::vector<int64_t> block_shape = {block.rows}, block_offsets = {block.global_row};
    if (global.size() == 2) {
      block_shape.push_back(cols);
      block_offsets.push_back(param.slice.column_offset);
    }
    for (const FlatRectangle& r : rectangles_of_flat_range(block_shape, first - block_begin, last - block_begin)) {
      GlobalRectangle rectangle;
      for (size_t d = 0; d < global.size(); ++d) rectangle.offsets.push_back(block_offsets[d] + r.offsets[d]);
      rectangle.counts = r.counts;
      rectangle.flat_begin = param.flat_offset + block_begin + r.flat_begin;
      result.push_back(std::move(rectangle));
    }
  }
  return result;
}

}  // namespace gpt

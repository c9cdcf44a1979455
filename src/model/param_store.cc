#include "model/param_store.h"

#include <algorithm>
#include <numeric>
#include <thread>
#include <vector>

#include "core/memory.h"
#include "kernels/ops.h"

namespace gpt {
namespace {
// fill(first_row, end_row) over [0, rows) on the machine's cores when the tensor is large.
template <typename Fill>
void parallel_for_rows(int64_t rows, int64_t cols, Fill fill) {
  const int64_t threads = std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), rows);
  if (rows * cols < (int64_t{1} << 20) || threads <= 1) {
    fill(0, rows);
    return;
  }
  std::vector<std::thread> workers;
  const int64_t per_thread = (rows + threads - 1) / threads;
  for (int64_t first = 0; first < rows; first += per_thread) {
    workers.emplace_back(fill, first, std::min(rows, first + per_thread));
  }
  for (std::thread& worker : workers) worker.join();
}
}  // namespace

ParamStore::ParamStore(ShardPlan plan, DType dtype, Arena& arena) : plan_(std::move(plan)), dtype_(dtype) {
  params_.reserve(plan_.params().size());
  int64_t shard_elements = 0;
  bucket_shards_ = plan_.bucket_shards();
  for (const BucketShard& b : bucket_shards_) {
    shard_offsets_.push_back(shard_elements);
    shard_elements += b.shard.size();
  }
  value_storage_ = arena.allocate_zeroed(dtype, {plan_.sharded_parameters() ? shard_elements : plan_.flat_elements()});
  grad_storage_ = arena.allocate_zeroed(DType::kFloat32,
                                        {plan_.sharded_gradients() ? shard_elements : plan_.flat_elements()});
  for (const ParamPlacement& placement : plan_.params()) {
    Param param;
    param.spec = placement.spec;
    param.placement = &placement;
    param.local_shape = placement.slice.local_shape;
    param.row_offset = placement.slice.row_offset;
    param.column_offset = placement.slice.column_offset;
    param.flat_offset = placement.flat_offset;
    param.dtype = dtype;
    param.counts_in_grad_norm = placement.counts_in_grad_norm;
    if (!plan_.sharded_parameters()) {
      param.value = value_storage_.flat_range(param.flat_offset, param.numel()).view(param.local_shape);
    }
    if (!plan_.sharded_gradients()) {
      param.grad = grad_storage_.flat_range(param.flat_offset, param.numel()).view(param.local_shape);
    }
    index_[param.name()] = params_.size();
    params_.push_back(param);
  }
}

int64_t ParamStore::bytes(const ShardPlan& plan, DType dtype) {
  int64_t shards = 0;
  for (const BucketShard& b : plan.bucket_shards()) shards += b.shard.size();
  const int64_t values = plan.sharded_parameters() ? shards : plan.flat_elements();
  const int64_t gradients = plan.sharded_gradients() ? shards : plan.flat_elements();
  return Arena::aligned_bytes(dtype, Shape{values}) + Arena::aligned_bytes(DType::kFloat32, Shape{gradients});
}

const Tensor& ParamStore::flat_values() const {
  GPT_CHECK(!sharded_parameters()) << "the flat values of a store that holds value shards only";
  return value_storage_;
}

const Tensor& ParamStore::flat_grads() const {
  GPT_CHECK(!sharded_gradients()) << "the flat gradients of a store that holds gradient shards only";
  return grad_storage_;
}

Tensor ParamStore::shard_view(const Tensor& storage, Range flat, const char* what) const {
  for (size_t b = 0; b < bucket_shards_.size(); ++b) {
    const Range& shard = bucket_shards_[b].shard;
    if (flat.begin >= shard.begin && flat.end <= shard.end) {
      return storage.flat_range(shard_offsets_[b] + (flat.begin - shard.begin), flat.size());
    }
  }
  GPT_CHECK(false) << what << " of flat elements [" << flat.begin << ", " << flat.end
                   << ") asked for, outside this rank's shards";
  return Tensor();
}

Tensor ParamStore::values_in(Range flat) const {
  if (!sharded_parameters()) return value_storage_.flat_range(flat.begin, flat.size());
  return shard_view(value_storage_, flat, "values");
}

Tensor ParamStore::grads_in(Range flat) const {
  if (!sharded_gradients()) return grad_storage_.flat_range(flat.begin, flat.size());
  return shard_view(grad_storage_, flat, "gradients");
}

void ParamStore::point_bucket(int bucket, const Tensor& buffer, Tensor Param::*field) {
  const BucketPlan& plan = plan_.buckets().at(static_cast<size_t>(bucket));
  GPT_CHECK(!buffer.defined() || buffer.numel() == plan.range.size()) << "working buffer of bucket " << bucket;
  for (size_t index : plan.params) {
    Param& param = params_[index];
    param.*field = buffer.defined() ? buffer.flat_range(param.flat_offset - plan.range.begin, param.numel())
                                          .view(param.local_shape)
                                    : Tensor();
  }
}

void ParamStore::set_bucket_grads(int bucket, const Tensor& buffer) {
  GPT_CHECK(sharded_gradients()) << "bucket gradient views of a store with flat gradients";
  point_bucket(bucket, buffer, &Param::grad);
}

void ParamStore::set_bucket_values(int bucket, const Tensor& buffer) {
  GPT_CHECK(sharded_parameters()) << "bucket value views of a store with flat values";
  point_bucket(bucket, buffer, &Param::value);
}

ParamStore::ParamStore(std::vector<ParamSpec> specs, int tp_rank, int tp_size, DType dtype, Arena& arena)
    : ParamStore(ShardPlan(std::move(specs), {.tensor_parallel_rank = tp_rank, .tensor_parallel_size = tp_size}),
                 dtype, arena) {}

Param& ParamStore::get(const std::string& name) {
  auto it = index_.find(name);
  GPT_CHECK(it != index_.end()) << "parameter " << name << " is not held by this rank";
  return params_[it->second];
}

void ParamStore::initialize(uint64_t seed) {
  for (Param& param : params_) {
    const ParamSpec& spec = *param.spec;
    const int64_t global_cols = spec.global_shape.size() == 2 ? spec.global_shape[1] : 1;
    const int64_t rows = param.local_shape[0];
    const int64_t cols = param.local_shape.rank() == 2 ? param.local_shape[1] : 1;
    std::vector<float> staging(static_cast<size_t>(param.numel()));
    // The stored dtype's bits: FP32 as is, BF16 or FP16 rounded to nearest even.
    std::vector<uint16_t> rounded(dtype_ == DType::kFloat32 ? 0 : staging.size());
    // Each value depends on (seed, name, global index) alone, so rows fill in parallel: a 1.3B
    // model takes seconds instead of a minute.
    parallel_for_rows(rows, cols, [&](int64_t first_row, int64_t end_row) {
      for (int64_t r = first_row; r < end_row; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t global_index = param.global_row(r) * global_cols + param.column_offset + c;
          const float value = initial_value(spec, seed, global_index);
          staging[r * cols + c] = value;
          if (!rounded.empty()) {
            rounded[r * cols + c] = dtype_ == DType::kFloat16 ? float_to_fp16_bits(value) : float_to_bf16_bits(value);
          }
        }
      }
    });
    const void* source = rounded.empty() ? static_cast<const void*>(staging.data()) : rounded.data();
    if (sharded_parameters()) {
      write_owned_parts(param, source);
    } else {
      copy_bytes(param.value.device(), param.value.data(), Device::kCpu, source, param.value.bytes());
    }
  }
}

void ParamStore::write_owned_parts(const Param& param, const void* host_values) {
  const size_t element_bytes = dtype_size(dtype_);
  for (const BucketShard& b : plan_.bucket_shards()) {
    const Range mine = range_of(param).intersect(b.shard);
    if (mine.empty()) continue;
    const Tensor target = values_in(mine);
    const auto* source = static_cast<const char*>(host_values) + (mine.begin - param.flat_offset) * element_bytes;
    copy_bytes(target.device(), target.data(), Device::kCpu, source, target.bytes());
  }
}

void ParamStore::zero_grads(Context& ctx) const { ops::zero(ctx, grad_storage_); }

std::vector<ShardedTensor> ParamStore::sharded_tensors() const {
  std::vector<ShardedTensor> result;
  if (sharded_parameters()) {
    // ZeRO-3: this rank's parts only, each data-parallel rank's its own.
    for (const Param& param : params_) {
      for (const BucketShard& b : plan_.bucket_shards()) {
        const Range mine = range_of(param).intersect(b.shard);
        if (mine.empty()) continue;
        for (const GlobalRectangle& rectangle : plan_.global_rectangles(*param.placement, mine)) {
          ShardedTensor piece;
          piece.key = "model/" + param.name();
          piece.global_shape = param.spec->global_shape;
          piece.offsets = rectangle.offsets;
          piece.local_shape = rectangle.counts;
          piece.replica_id = param.counts_in_grad_norm ? 0 : 1;
          piece.replicated_over_data_parallel = false;
          piece.expert_data_parallel = param.placement->domain == ParamDomain::kExpert;
          piece.data = values_in({rectangle.flat_begin, rectangle.flat_begin + rectangle.numel()});
          result.push_back(std::move(piece));
        }
      }
    }
    return result;
  }
  for (const Param& param : params_) {
    const std::vector<int64_t>& global = param.spec->global_shape;
    const int64_t cols = param.local_shape.rank() == 2 ? param.local_shape[1] : 1;
    for (const RowBlock& block : param.row_blocks()) {
      ShardedTensor piece;
      piece.key = "model/" + param.name();
      piece.global_shape = global;
      piece.offsets = global.size() == 2 ? std::vector<int64_t>{block.global_row, param.column_offset}
                                         : std::vector<int64_t>{block.global_row};
      piece.local_shape = {block.rows};
      if (param.local_shape.rank() == 2) piece.local_shape.push_back(cols);
      piece.replica_id = param.counts_in_grad_norm ? 0 : 1;
      piece.replicated_over_data_parallel = true;
      piece.expert_data_parallel = param.placement->domain == ParamDomain::kExpert;
      piece.data = param.value.flat_range(block.local_row * cols, block.rows * cols);
      result.push_back(std::move(piece));
    }
  }
  return result;
}

const Param* ParamStore::param_at(int64_t flat_index) const {
  const ParamPlacement* placement = plan_.param_at(flat_index);
  return placement ? &params_[static_cast<size_t>(placement - plan_.params().data())] : nullptr;
}

}  // namespace gpt

#include "model/param_store.h"

#include <vector>

#include "core/memory.h"
#include "kernels/ops.h"

namespace gpt {
namespace {
// Every parameter starts on a multiple of 64 elements: aligned for 16-byte vector access in either
// dtype, and a clean cut point for buckets and shards.
constexpr int64_t kParamAlignment = 64;
int64_t align_up(int64_t n) { return (n + kParamAlignment - 1) / kParamAlignment * kParamAlignment; }
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
  } else if (spec.split == TensorSplit::kColumns) {
    GPT_CHECK_EQ(g.size(), 2u) << spec.name;
    GPT_CHECK_EQ(cols % tp_size, 0) << spec.name << " columns not divisible by TP";
    cols /= tp_size;
    layout.column_offset = tp_rank * cols;
  }
  layout.local_shape = g.size() == 1 ? Shape({rows}) : Shape({rows, cols});
  return layout;
}

ParamStore::ParamStore(std::vector<ParamSpec> specs, int tp_rank, int tp_size, DType dtype, Arena& arena)
    : specs_(std::move(specs)), dtype_(dtype) {
  params_.reserve(specs_.size());
  int64_t total = 0;
  for (auto it = specs_.rbegin(); it != specs_.rend(); ++it) {
    const SliceLayout layout = slice_layout(*it, tp_rank, tp_size);
    Param param;
    param.spec = &*it;
    param.local_shape = layout.local_shape;
    param.row_offset = layout.row_offset;
    param.column_offset = layout.column_offset;
    param.flat_offset = total;
    param.counts_in_grad_norm = it->split != TensorSplit::kReplicated || tp_rank == 0;
    total += align_up(layout.local_shape.numel());
    index_[it->name] = params_.size();
    params_.push_back(param);
  }
  flat_values_ = arena.allocate_zeroed(dtype, {total});
  flat_grads_ = arena.allocate_zeroed(DType::kFloat32, {total});
  for (Param& param : params_) {
    param.value = flat_values_.flat_range(param.flat_offset, param.numel()).view(param.local_shape);
    param.grad = flat_grads_.flat_range(param.flat_offset, param.numel()).view(param.local_shape);
  }
}

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
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t global_index = (param.row_offset + r) * global_cols + param.column_offset + c;
        staging[r * cols + c] = initial_value(spec, seed, global_index);
      }
    }
    if (dtype_ == DType::kFloat32) {
      copy_bytes(param.value.device(), param.value.data(), Device::kCpu, staging.data(), param.value.bytes());
    } else {
      std::vector<bf16> rounded(staging.size());
      for (size_t i = 0; i < staging.size(); ++i) rounded[i] = bf16(staging[i]);
      copy_bytes(param.value.device(), param.value.data(), Device::kCpu, rounded.data(), param.value.bytes());
    }
  }
}

void ParamStore::zero_grads(Context& ctx) const { ops::zero(ctx, flat_grads_); }

}  // namespace gpt

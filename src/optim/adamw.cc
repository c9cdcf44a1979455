#include "optim/adamw.h"

#include <algorithm>

#include "core/check.h"

namespace gpt {

AdamW::AdamW(Context& ctx, ParamStore& params, const AdamWConfig& config, Arena& arena, std::vector<Range> owned)
    : params_(params), config_(config), separate_master_(params.dtype() != DType::kFloat32), owned_(std::move(owned)) {
  const int64_t total = params.flat_values().numel();
  if (owned_.empty()) owned_.push_back({0, total});
  int64_t elements = 0;
  for (const Range& range : owned_) {
    GPT_CHECK(range.begin >= 0 && range.end <= total) << "optimizer range outside the parameters";
    Part part{range, elements, {}};
    for (const Param& param : params.params()) {
      const Range mine = params.range_of(param).intersect(range);
      if (mine.empty()) continue;
      part.segments.push_back({.offset = mine.begin - range.begin,
                               .length = mine.size(),
                               .weight_decay = param.spec->weight_decay});
    }
    elements += range.size();
    parts_.push_back(std::move(part));
  }
  if (separate_master_) {
    master_ = arena.allocate(DType::kFloat32, {elements});
    for (const Part& part : parts_) {
      ops::cast(ctx, master_.flat_range(part.state_offset, part.range.size()),
                params.flat_values().flat_range(part.range.begin, part.range.size()));
    }
  }
  exp_avg_ = arena.allocate_zeroed(DType::kFloat32, {elements});
  exp_avg_sq_ = arena.allocate_zeroed(DType::kFloat32, {elements});
}

int64_t AdamW::bytes(int64_t owned_elements, DType dtype) {
  const int64_t arrays = dtype == DType::kFloat32 ? 2 : 3;
  return arrays * Arena::aligned_bytes(DType::kFloat32, Shape{owned_elements});
}

void AdamW::step(Context& ctx, float learning_rate, float grad_scale) {
  ++steps_;
  const ops::AdamWStep step{.learning_rate = learning_rate,
                            .beta1 = config_.beta1,
                            .beta2 = config_.beta2,
                            .epsilon = config_.epsilon,
                            .weight_decay = config_.weight_decay,  // on the segments that take it
                            .step = steps_,
                            .grad_scale = grad_scale};
  for (const Part& part : parts_) {
    const int64_t n = part.range.size();
    const Tensor values = params_.flat_values().flat_range(part.range.begin, n);
    ops::adamw_update_segments(ctx, step, separate_master_ ? master_.flat_range(part.state_offset, n) : values,
                               params_.grads_in(part.range),
                               exp_avg_.flat_range(part.state_offset, n), exp_avg_sq_.flat_range(part.state_offset, n),
                               separate_master_ ? values : Tensor(), part.segments);
  }
}

std::vector<ShardedTensor> AdamW::sharded_tensors(bool sharded) const {
  std::vector<ShardedTensor> result;
  struct State {
    const char* name;
    const Tensor* tensor;
  };
  std::vector<State> states = {{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}};
  if (separate_master_) states.insert(states.begin(), State{"master", &master_});
  const ShardPlan& plan = params_.plan();
  for (const Part& part : parts_) {
    for (const ops::AdamWSegment& segment : part.segments) {
      const int64_t flat_begin = part.range.begin + segment.offset;
      const Param* param = params_.param_at(flat_begin);
      GPT_CHECK(param != nullptr) << "optimizer segment at " << flat_begin << " holds no parameter";
      for (const GlobalRectangle& rectangle :
           plan.global_rectangles(*param->placement, {flat_begin, flat_begin + segment.length})) {
        // State element of flat element i: part.state_offset + (i - part.range.begin).
        const int64_t state_offset = part.state_offset + (rectangle.flat_begin - part.range.begin);
        for (const State& state : states) {
          ShardedTensor piece;
          piece.key = std::string("optimizer/") + state.name + "/" + param->name();
          piece.global_shape = param->spec->global_shape;
          piece.offsets = rectangle.offsets;
          piece.local_shape = rectangle.counts;
          piece.replica_id = param->counts_in_grad_norm ? 0 : 1;
          piece.replicated_over_data_parallel = !sharded;
          piece.data = state.tensor->flat_range(state_offset, rectangle.numel());
          result.push_back(std::move(piece));
        }
      }
    }
  }
  return result;
}

void AdamW::reset_from_params(Context& ctx) {
  if (separate_master_) {
    for (const Part& part : parts_) {
      ops::cast(ctx, master_.flat_range(part.state_offset, part.range.size()),
                params_.flat_values().flat_range(part.range.begin, part.range.size()));
    }
  }
  ops::zero(ctx, exp_avg_);
  ops::zero(ctx, exp_avg_sq_);
  steps_ = 0;
}

}  // namespace gpt

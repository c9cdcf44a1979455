#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/memory.h"
#include "core/stream_copy.h"

namespace gpt {

int64_t AdamW::offloaded_elements(int64_t owned_elements, double offload_fraction) {
  if (offload_fraction <= 0.0) return 0;
  return std::clamp<int64_t>(static_cast<int64_t>(std::llround(offload_fraction * static_cast<double>(owned_elements))),
                             0, owned_elements);
}

AdamW::Part AdamW::make_part(Range range, int64_t state_offset, bool host) const {
  Part part{.range = range, .state_offset = state_offset, .host = host};
  for (const Param& param : params_.params()) {
    const Range mine = params_.range_of(param).intersect(range);
    if (mine.empty()) continue;
    const ops::AdamWSegment segment{
        .offset = mine.begin - range.begin, .length = mine.size(), .weight_decay = param.spec->weight_decay};
    part.segments.push_back(segment);
    (param.spec->embedding_or_output ? part.decoupled_segments : part.base_segments).push_back(segment);
  }
  return part;
}

AdamW::AdamW(Context& ctx, ParamStore& params, const AdamWConfig& config, Arena& arena, std::vector<Range> owned)
    : params_(params), config_(config), separate_master_(params.dtype() != DType::kFloat32), owned_(std::move(owned)) {
  const int64_t total = params.plan().flat_elements();
  if (owned_.empty()) owned_.push_back({0, total});
  int64_t elements = 0;
  for (const Range& range : owned_) {
    GPT_CHECK(range.begin >= 0 && range.end <= total) << "optimizer range outside the parameters";
    elements += range.size();
  }
  // The first host_elements_ state elements are offloaded: an owned range across the boundary is
  // cut in two parts.
  host_elements_ = offloaded_elements(elements, config_.offload_fraction);
  int64_t state = 0;
  for (const Range& range : owned_) {
    const int64_t host = std::clamp<int64_t>(host_elements_ - state, 0, range.size());
    if (host > 0) parts_.push_back(make_part({range.begin, range.begin + host}, state, true));
    if (host < range.size()) {
      parts_.push_back(make_part({range.begin + host, range.end}, state + host - host_elements_, false));
    }
    state += range.size();
  }
  const int64_t device_elements = elements - host_elements_;
  if (separate_master_) {
    master_ = arena.allocate(DType::kFloat32, {device_elements});
    for (const Part& part : parts_) {
      if (part.host) continue;
      ops::cast(ctx, master_.flat_range(part.state_offset, part.range.size()),
                params.values_in(part.range));
    }
  }
  exp_avg_ = arena.allocate_zeroed(DType::kFloat32, {device_elements});
  exp_avg_sq_ = arena.allocate_zeroed(DType::kFloat32, {device_elements});
  if (host_elements_ > 0) {
    host_ctx_ = Context::cpu(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    if (config_.overlap_host_copies) {
      host_worker_ = std::make_unique<HostWorker>();
      if (ctx.device() == Device::kCuda) copy_ctx_ = Context::gpu(cuda::current_device());
    }
    const int64_t n = host_elements_;
    const size_t floats = static_cast<size_t>(4 * n) * sizeof(float);
    const size_t staged_values = separate_master_ ? static_cast<size_t>(n) * dtype_size(params.dtype()) : 0;
    auto* base = static_cast<char*>(host_memory_.reserve(floats + staged_values));
    auto host_tensor = [&](size_t index, DType dtype) {
      return Tensor(base + index * static_cast<size_t>(n) * sizeof(float), dtype, Shape({n}), Device::kCpu);
    };
    host_master_ = host_tensor(0, DType::kFloat32);
    host_exp_avg_ = host_tensor(1, DType::kFloat32);
    host_exp_avg_sq_ = host_tensor(2, DType::kFloat32);
    host_grads_ = host_tensor(3, DType::kFloat32);
    if (separate_master_) host_values_ = host_tensor(4, params.dtype());
    ops::zero(host_ctx_, host_exp_avg_);
    ops::zero(host_ctx_, host_exp_avg_sq_);
    host_master_from_params(ctx);
  }
}

int64_t AdamW::bytes(int64_t owned_elements, DType dtype, double offload_fraction) {
  const int64_t arrays = dtype == DType::kFloat32 ? 2 : 3;
  return arrays * Arena::aligned_bytes(DType::kFloat32,
                                       Shape{owned_elements - offloaded_elements(owned_elements, offload_fraction)});
}

int64_t AdamW::host_bytes(int64_t owned_elements, DType dtype, double offload_fraction) {
  const int64_t n = offloaded_elements(owned_elements, offload_fraction);
  // Master weights (FP32 training: the parameters staged), two moments, staged gradients; with
  // BF16 the updated parameters staged in BF16.
  return n * (4 * 4 + (dtype == DType::kFloat32 ? 0 : static_cast<int64_t>(dtype_size(dtype))));
}

Tensor AdamW::state(const Part& part, const Tensor& device, const Tensor& host) const {
  return (part.host ? host : device).flat_range(part.state_offset, part.range.size());
}

void AdamW::host_master_from_params(Context& ctx) {
  if (!separate_master_) return;  // FP32: the parameters are staged at every step
  ctx.synchronize();
  for (const Part& part : parts_) {
    if (!part.host) continue;
    const Tensor values = params_.values_in(part.range);
    const Tensor staged = host_values_.flat_range(part.state_offset, part.range.size());
    copy_bytes(Device::kCpu, staged.data(), values.device(), values.data(), values.bytes());
    ops::cast(host_ctx_, state(part, master_, host_master_), staged);
  }
}

void AdamW::download(Context& copies, const Part& part) {
  // Gradients (and, FP32, the parameters: they are the master weights) device-to-host.
  copy_to_host(copies, host_grads_.flat_range(part.state_offset, part.range.size()).data(),
               params_.grads_in(part.range));
  if (!separate_master_) copy_to_host(copies, state(part, master_, host_master_).data(), params_.values_in(part.range));
}

void AdamW::update_on_host(const ops::AdamWStep& step, const ops::AdamWStep& decoupled, const Part& part) {
  const int64_t n = part.range.size();
  const Tensor master = state(part, master_, host_master_);
  for (const auto& [rate, segments] : {std::pair{&step, &part.base_segments}, {&decoupled, &part.decoupled_segments}}) {
    if (segments->empty()) continue;
    ops::adamw_update_segments(host_ctx_, *rate, master, host_grads_.flat_range(part.state_offset, n),
                               state(part, exp_avg_, host_exp_avg_), state(part, exp_avg_sq_, host_exp_avg_sq_),
                               separate_master_ ? host_values_.flat_range(part.state_offset, n) : Tensor(), *segments);
  }
}

void AdamW::upload(Context& copies, const Part& part) {
  // The updated parameters host-to-device: the BF16 copies, or (FP32) the master weights themselves.
  const Tensor updated =
      separate_master_ ? host_values_.flat_range(part.state_offset, part.range.size()) : state(part, master_, host_master_);
  copy_to_device(copies, params_.values_in(part.range), updated.data());
}

void AdamW::host_step(Context& ctx, const ops::AdamWStep& step, const ops::AdamWStep& decoupled, const Part& part) {
  ctx.synchronize();
  download(ctx, part);
  ctx.synchronize();
  update_on_host(step, decoupled, part);
  upload(ctx, part);
  ctx.synchronize();
}

void AdamW::pipelined_host_steps(Context& ctx, const ops::AdamWStep& step, const ops::AdamWStep& decoupled) {
  // The host parts are the first parts (the offloaded state elements come first).
  const size_t host_parts = static_cast<size_t>(
      std::find_if(parts_.begin(), parts_.end(), [](const Part& part) { return !part.host; }) - parts_.begin());
  if (host_parts == 0) return;
  ctx.synchronize();  // the gradients are final
  download(copy_ctx_, parts_[0]);
  copy_ctx_.synchronize();
  for (size_t i = 0; i < host_parts; ++i) {
    host_worker_->start([&, part = &parts_[i]] { update_on_host(step, decoupled, *part); });
    if (i + 1 < host_parts) download(copy_ctx_, parts_[i + 1]);
    copy_ctx_.synchronize();  // part i+1 downloaded, part i-1 uploaded
    host_worker_->wait();
    upload(copy_ctx_, parts_[i]);
  }
  copy_ctx_.synchronize();  // the parameters are on the device before the next forward reads them
}

void AdamW::device_step(Context& ctx, const ops::AdamWStep& step, const std::vector<ops::AdamWSegment>& segments,
                        const Part& part) {
  if (segments.empty()) return;
  const int64_t n = part.range.size();
  const Tensor values = params_.values_in(part.range);
  ops::adamw_update_segments(ctx, step, separate_master_ ? master_.flat_range(part.state_offset, n) : values,
                             params_.grads_in(part.range), exp_avg_.flat_range(part.state_offset, n),
                             exp_avg_sq_.flat_range(part.state_offset, n), separate_master_ ? values : Tensor(),
                             segments);
}

void AdamW::step(Context& ctx, float learning_rate, float decoupled_learning_rate, float grad_scale) {
  ++steps_;
  const ops::AdamWStep step{.learning_rate = learning_rate,
                            .beta1 = config_.beta1,
                            .beta2 = config_.beta2,
                            .epsilon = config_.epsilon,
                            .weight_decay = config_.weight_decay,  // on the segments that take it
                            .step = steps_,
                            .grad_scale = grad_scale};
  ops::AdamWStep decoupled = step;
  decoupled.learning_rate = decoupled_learning_rate;
  // Pipelined host parts run after the device parts are queued (on the GPU the device steps them
  // meanwhile); one after another otherwise, as the parts come.
  const bool pipelined = config_.overlap_host_copies && host_elements_ > 0;
  for (const Part& part : parts_) {
    if (part.host) {
      if (!pipelined) host_step(ctx, step, decoupled, part);
    } else if (decoupled_learning_rate == learning_rate) {
      device_step(ctx, step, part.segments, part);  // one launch when the rates agree
    } else {
      device_step(ctx, step, part.base_segments, part);
      device_step(ctx, decoupled, part.decoupled_segments, part);
    }
  }
  if (pipelined) pipelined_host_steps(ctx, step, decoupled);
}

void AdamW::add_master_squares(Context& ctx, const Tensor& scratch, Range flat) const {
  for (const Part& part : parts_) {
    const Range mine = part.range.intersect(flat);
    if (mine.empty()) continue;
    const int64_t offset = part.state_offset + (mine.begin - part.range.begin);
    if (!part.host) {
      ops::sum_of_squares(ctx, scratch,
                          separate_master_ ? master_.flat_range(offset, mine.size()) : params_.values_in(mine));
      continue;
    }
    // Offloaded: the host's master weights (BF16), or the parameters (FP32) staged to the host.
    const Tensor values = params_.values_in(mine);
    Tensor master = host_master_.flat_range(offset, mine.size());
    ctx.synchronize();
    if (!separate_master_) copy_bytes(Device::kCpu, master.data(), values.device(), values.data(), values.bytes());
    float sum = 0.0f;
    copy_bytes(Device::kCpu, &sum, scratch.device(), scratch.data(), sizeof(float));
    const Tensor host_sum(&sum, DType::kFloat32, Shape({1}), Device::kCpu);
    ops::sum_of_squares(host_ctx_, host_sum, master);
    copy_bytes(scratch.device(), scratch.data(), Device::kCpu, &sum, sizeof(float));
  }
}

std::vector<ShardedTensor> AdamW::sharded_tensors(bool sharded) const {
  std::vector<ShardedTensor> result;
  struct State {
    const char* name;
    const Tensor* tensor;
  };
  struct StatePair {
    const char* name;
    const Tensor* device;
    const Tensor* host;
  };
  std::vector<StatePair> pairs = {{"exp_avg", &exp_avg_, &host_exp_avg_}, {"exp_avg_sq", &exp_avg_sq_, &host_exp_avg_sq_}};
  if (separate_master_) pairs.insert(pairs.begin(), StatePair{"master", &master_, &host_master_});
  const ShardPlan& plan = params_.plan();
  for (const Part& part : parts_) {
    std::vector<State> states;
    for (const StatePair& pair : pairs) states.push_back({pair.name, part.host ? pair.host : pair.device});
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
          piece.expert_data_parallel = param->placement->domain == ParamDomain::kExpert;
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
      if (part.host) continue;
      ops::cast(ctx, master_.flat_range(part.state_offset, part.range.size()),
                params_.values_in(part.range));
    }
  }
  ops::zero(ctx, exp_avg_);
  ops::zero(ctx, exp_avg_sq_);
  if (host_elements_ > 0) {
    ops::zero(host_ctx_, host_exp_avg_);
    ops::zero(host_ctx_, host_exp_avg_sq_);
    host_master_from_params(ctx);
  }
  steps_ = 0;
}

}  // namespace gpt

// AdamW over a ParamStore. With BF16 parameters the optimizer keeps FP32 master weights (copied
// from the BF16 parameters at start, as Megatron does) and writes rounded copies back after each
// step; with FP32 parameters the parameters are themselves the master weights. Moments are FP32.
// The state is laid out like the store's flat buffers; `segments` say which parts each update
// covers and whether weight decay applies (the distributed optimizer will own a sub-range). A step
// is one multi-tensor update (ops::adamw_update_segments): one launch on the GPU for all parameters.
#pragma once

#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/context.h"
#include "kernels/ops.h"
#include "model/param_store.h"

namespace gpt {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.01f;
};

class AdamW {
 public:
  AdamW(Context& ctx, ParamStore& params, const AdamWConfig& config, Arena& arena);

  // One update with the given learning rate; gradients are multiplied by grad_scale first
  // (the clipping coefficient). Increments the step counter.
  void step(Context& ctx, float learning_rate, float grad_scale);

  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  // FP32 state, same layout as the store's flat buffers.
  const Tensor& master() const { return master_; }
  const Tensor& exp_avg() const { return exp_avg_; }
  const Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  bool has_separate_master() const { return separate_master_; }

 private:
  ParamStore& params_;
  AdamWConfig config_;
  bool separate_master_;
  Tensor master_, exp_avg_, exp_avg_sq_;
  std::vector<ops::AdamWSegment> segments_;  // one per parameter
  int64_t steps_ = 0;
};

}  // namespace gpt

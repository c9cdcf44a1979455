// What the pipeline executor drives: one model chunk of this rank. The model implements it (the
// pipeline code never sees layers); the executor owns the tensors that cross stage boundaries.
#pragma once

#include <cstdint>
#include <optional>

#include "core/context.h"
#include "core/tensor.h"

namespace gpt::pipeline {

class Stage {
 public:
  virtual ~Stage() = default;

  // The activation a chunk receives from the previous virtual stage and sends to the next, and its
  // gradient: [s_l, b, h] in the compute dtype.
  virtual DType boundary_dtype() const = 0;
  virtual Shape boundary_shape() const = 0;

  // Forward of `microbatch` in stash slot `slot`. `input` is the previous virtual stage's
  // activation, absent on the first virtual stage (which reads its tokens itself). Returns the
  // activation for the next virtual stage, absent on the last (which adds its loss). The returned
  // tensor stays valid until the slot is used again.
  virtual std::optional<Tensor> forward(Context& ctx, int slot, int64_t microbatch,
                                        const std::optional<Tensor>& input) = 0;
  // Backward of the slot's microbatch: `grad_output` is the next virtual stage's input gradient,
  // absent on the last virtual stage (the loss starts it). Returns this chunk's input gradient,
  // absent on the first virtual stage, valid until this chunk's next backward. `last_of_step`:
  // the schedule runs no later backward of this chunk in this step (its gradients are then final).
  virtual std::optional<Tensor> backward(Context& ctx, int slot, int64_t microbatch,
                                         const std::optional<Tensor>& grad_output, bool last_of_step) = 0;
  // A split backward (zero-bubble schedules): backward_input computes the input gradient (as
  // backward returns it) and leaves the weight gradients to the slot's backward_weight, which the
  // schedule runs later, in the same order per chunk; the slot is held until then. `last_of_step`
  // marks the pass whose W is the chunk's last of the step. A stage that cannot split runs its
  // fused backward in backward_input and nothing in backward_weight (the same gradients).
  virtual std::optional<Tensor> backward_input(Context& ctx, int slot, int64_t microbatch,
                                               const std::optional<Tensor>& grad_output, bool last_of_step) {
    return backward(ctx, slot, microbatch, grad_output, last_of_step);
  }
  virtual void backward_weight(Context& /*ctx*/, int /*slot*/, int64_t /*microbatch*/) {}
};

}  // namespace gpt::pipeline

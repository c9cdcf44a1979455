// A model chunk as the pipeline executor's Stage: before its forward, the chunk with the embedding
// reads the microbatch's tokens and the chunk with the output layer its targets, from the feed of
// the current forward_backward call; the loss goes where the feed says.
#pragma once

#include "model/gpt_model.h"
#include "parallel/pipeline/stage.h"
#include "train/microbatch_feed.h"

namespace gpt {

class ModelStage final : public pipeline::Stage {
 public:
  ModelStage(GptModel& model, DType dtype, MicrobatchFeed& feed) : model_(model), feed_(feed), dtype_(dtype) {}

  DType boundary_dtype() const override { return dtype_; }
  Shape boundary_shape() const override;
  std::optional<Tensor> forward(Context& ctx, int slot, int64_t microbatch,
                                const std::optional<Tensor>& input) override;
  std::optional<Tensor> backward(Context& ctx, int slot, int64_t microbatch,
                                 const std::optional<Tensor>& grad_output, bool last_of_step) override;
  std::optional<Tensor> backward_input(Context& ctx, int slot, int64_t microbatch,
                                       const std::optional<Tensor>& grad_output, bool last_of_step) override;
  void backward_weight(Context& ctx, int slot, int64_t microbatch) override;

  GptModel& model() { return model_; }

 private:
  GptModel& model_;
  MicrobatchFeed& feed_;
  DType dtype_;
};

}  // namespace gpt

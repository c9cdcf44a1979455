// A model chunk: a contiguous range of transformer layers, with the embedding in front when the
// chunk is the first of the pipeline and the output layer (final norm, LM head, loss) behind when
// it is the last. A single-stage model is one chunk with both. Microbatches in flight occupy stash
// slots; forward and backward of a slot must alternate.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/activation_memory.h"
#include "model/context_parallel.h"
#include "model/expert_parallel.h"
#include "model/embedding_layer.h"
#include "model/output_layer.h"
#include "model/param_observer.h"
#include "model/transformer_layer.h"

namespace gpt {

struct ChunkLayout {
  int64_t first_layer = 0;
  int64_t num_layers = 0;
  bool has_embedding = true;
  bool has_output = true;
  bool tied_head = true;  // the LM head is the word embedding (no --untie-embeddings-and-output-weights)
};

// What a chunk takes from its arena, item by item: computed from the same lists the chunk
// allocates from, so that the memory plan is the memory allocated (a unit test and a start-up
// check compare them exactly). In T: int64_t, or CheckedBytes for the memory plan's closed form.
template <typename T>
struct ChunkMemoryOf {
  T workspace = 0;          // scratch shared by the layers
  T recompute_buffers = 0;  // the shared buffers recompute rebuilds into
  T layers = 0;             // the layers' per-slot stashes and weight-gradient leases
  T embedding = 0;          // tokens and outputs per slot (first chunk)
  T output = 0;             // norm, logits, targets per slot and loss statistics (last chunk)
  T gradient = 0;           // the gradient flowing backward through the chunk
  T total() const { return workspace + recompute_buffers + layers + embedding + output + gradient; }
};
using ChunkMemory = ChunkMemoryOf<int64_t>;

class GptModel {
 public:
  // `deferral_depth`: how many microbatches' weight-gradient passes may wait at once
  // (backward_input with kDeferred); 0 allocates no lease and allows only the fused backward.
  // `context`: the context-parallel group (the chunk holds S / CP rows of each sequence).
  // `fp8`: the FP8 scaling state the transformer layers' linears cast with (null: no FP8).
  GptModel(const ModelConfig& config, ParamStore& params, const TensorParallel& tp, int64_t micro_batch,
           int stash_slots, ChunkLayout layout, Arena& arena, int deferral_depth = 0,
           const ContextParallel& context = ContextParallel{}, Fp8Scaling* fp8 = nullptr,
           const ExpertParallel& experts = ExpertParallel{});

  // What a chunk built with these arguments takes from its arena.
  static ChunkMemory memory(const ModelConfig& config, const LayerShapes& shapes, bool sequence_parallel,
                            int stash_slots, const ChunkLayout& layout, int deferral_depth = 0);
  // The same without the weight-gradient leases (deferral depth 0), in the arithmetic of `shapes`
  // (LayerShapes, or CheckedLayerShapes for the memory plan's closed form): one layer of each kind
  // the recompute plan gives (per_slot_classes) times their count, so a chunk of 10^8 layers costs
  // no more than one of two. Reads config.dtype and config.recompute only.
  template <typename Sizes>
  static ChunkMemoryOf<BytesOf<Sizes>> stash_memory(const ModelConfig& config, const Sizes& shapes,
                                                    BytesOf<Sizes> stash_slots, const ChunkLayout& layout);

  const LayerShapes& shapes() const { return shapes_; }
  const ChunkLayout& layout() const { return layout_; }
  // Which layers recompute what (config.recompute over this chunk's layers), and the activation
  // memory of the layers with and without it.
  const RecomputePlan& recompute_plan() const { return recompute_plan_; }
  const ActivationMemory& activation_memory() const { return activation_memory_; }

  // Copies a microbatch's token ids and targets ([b, S] row-major, int32, host) into the slot,
  // transposed to the model's [s, b] order (this context-parallel rank's chunks only), on the context's stream (the host does not wait).
  // Tokens only on the first chunk, targets on the last.
  void load_tokens(Context& ctx, int slot, std::span<const int32_t> tokens_bs);
  void load_targets(Context& ctx, int slot, std::span<const int32_t> targets_bs);
  // Where the slot's microbatch sits in training (its dropout masks); set before its forward, kept
  // until its backward. Slots start outside training (no dropout).
  void set_position(int slot, const MicrobatchPosition& position);

  // input [s_l, b, h] from the previous stage: present exactly when the chunk has no embedding
  // (which reads the slot's tokens instead). Returns the output activation [s_l, b, h], or, on the
  // chunk with the output layer, nothing after adding the summed token losses to loss.sum (and, in
  // training, preparing the loss gradient).
  std::optional<Tensor> forward(Context& ctx, int slot, const std::optional<Tensor>& input, const LossAccumulator& loss);
  // grad_output [s_l, b, h] from the next stage: present exactly when the chunk has no output
  // layer. Accumulates parameter gradients and returns the input gradient [s_l, b, h] (nothing on
  // the chunk with the embedding), overwritten by the chunk's next backward. The same as
  // backward_input with kWithInputGrad. `last_of_step`: the schedule runs no later backward of
  // this chunk in the step, so its gradients are final afterwards (the observer is told).
  std::optional<Tensor> backward(Context& ctx, int slot, const std::optional<Tensor>& grad_output,
                                 bool last_of_step = false) {
    return backward_input(ctx, slot, grad_output, WeightGradTiming::kWithInputGrad, last_of_step);
  }
  // The input-gradient passes of every module, last to first; with kDeferred the weight gradients
  // wait (in leases) for backward_weight, and the slot must be held until then (`last_of_step`
  // goes with them to their gradients_ready).
  std::optional<Tensor> backward_input(Context& ctx, int slot, const std::optional<Tensor>& grad_output,
                                       WeightGradTiming timing, bool last_of_step = false);
  // The weight-gradient passes of the oldest deferred backward_input (which must be `slot`'s), in
  // the fused order: output layer, layers last to first, embedding. Bitwise the fused gradients.
  void backward_weight(Context& ctx, int slot);

  // The observer of this chunk's parameters (model/param_observer.h; none by default).
  void set_observer(ParamObserver* observer) { observer_ = observer; }
  // The parameters of each part of the chunk in forward order (embedding, layers, output), the
  // word embedding listed wherever it is used.
  const std::vector<ParamGroup>& parameter_groups() const { return groups_; }

  OutputLayer* output_layer() { return output_.get(); }

  // Mixture of experts: the iteration's end for every MoE layer of the chunk (the expert bias
  // update, model/moe_block.h; a collective over `data_context`), and the layers' figures since the
  // last take, in layer order.
  void finish_moe_iteration(Context& ctx, Communicator& data_context);
  // The data x context-parallel group the MoE layers' global_aux_loss sums its counts over (every
  // rank of the group runs the same microbatches through the same layers in the same order).
  void set_moe_data_context(Communicator* group) { moe_pass_.data_context = group; }
  // Forgets what the MoE layers counted since the last finish (a forward-backward run again).
  void restart_moe_iteration();
  std::vector<MoeLayerMetrics> take_moe_metrics();
  // The chunk's persistent non-parameter tensors as checkpoint pieces (the MoE layers' expert
  // bias, MoeBlock::expert_bias_piece), in layer order.
  std::vector<ShardedTensor> buffer_pieces(Context& ctx);

 private:
  void load_transposed(Context& ctx, const Tensor& destination, std::span<const int32_t> values_bs);
  // Full recompute: before the backward of a group's last layer, re-runs the group's forward from
  // its stashed input into the shared buffers (nothing for other layers).
  void recompute_group_ending_at(Context& ctx, int slot, int64_t layer);
  // Hooks (no-ops without an observer).
  void before_use(Context& ctx, size_t group, ParamUse use, int slot);
  void after_use(Context& ctx, size_t group, ParamUse use, int slot);
  void gradients_ready(Context& ctx, size_t group, int slot, bool last_of_step);

  ExpertParallel experts_;                     // the MoE layers keep a pointer
  LayerShapes shapes_;
  ChunkLayout layout_;
  RecomputePlan recompute_plan_;
  ActivationMemory activation_memory_;
  std::unique_ptr<RecomputeBuffers> recompute_buffers_;  // shared by the chunk's layers
  std::unique_ptr<LayerWorkspace> workspace_;
  std::vector<MicrobatchPosition> positions_;  // per stash slot; the layers keep a reference
  MoePass moe_pass_;                           // the MoE layers keep a reference
  std::unique_ptr<EmbeddingLayer> embedding_;
  std::vector<std::unique_ptr<TransformerLayer>> layers_;
  std::unique_ptr<OutputLayer> output_;
  Tensor grad_;  // [s_l, b, h]: the gradient flowing backward through the chunk
  std::vector<ParamGroup> groups_;  // [embedding?, layers..., output?]
  ParamObserver* observer_ = nullptr;
  struct DeferredBackward {
    int slot;
    bool last_of_step;
  };
  std::deque<DeferredBackward> deferred_;  // backward_input passes whose weight gradients wait
  std::vector<int32_t> transposed_;  // host staging for token ids in [s, b] order
};

// Parameter specs a chunk holds (for building its ParamStore).
std::vector<ParamSpec> chunk_param_specs(const std::vector<ParamSpec>& all, const ChunkLayout& layout);

}  // namespace gpt

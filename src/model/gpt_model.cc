#include "model/gpt_model.h"

#include "core/stream_copy.h"

namespace gpt {
namespace {

// This rank's shapes, with a2a+p2p's level-0 size when a layer uses it (its workspace then holds
// the ring's blocks).
LayerShapes model_shapes(const ModelConfig& config, const TensorParallel& tp, int64_t micro_batch,
                         const ContextParallel& context) {
  LayerShapes shapes = LayerShapes::make(config, tp, micro_batch, context.size(), context.rank());
  shapes.context_inner = context.inner_size();
  return shapes;
}


// The MoE layers among a chunk's layers (those of --moe-layer-freq's pattern).
int64_t chunk_moe_layers(const ModelConfig& config, const ChunkLayout& layout) {
  if (!config.moe.enabled()) return 0;  // a dense chunk may have 10^8 layers (the closed form)
  int64_t count = 0;
  for (int64_t i = 0; i < layout.num_layers; ++i) count += config.moe.is_moe_layer(layout.first_layer + i) ? 1 : 0;
  return count;
}

// An MoE layer's shapes from the chunk's (LayerShapes::for_layer, in the arithmetic of `s`).
template <typename Sizes>
Sizes moe_layer_shapes(Sizes s) {
  s.moe_layer = true;
  s.local_ffn = s.shared_local_ffn;
  s.local_fc1 = s.shared_local_fc1;
  return s;
}

}  // namespace

GptModel::GptModel(const ModelConfig& config, ParamStore& params, const TensorParallel& tp, int64_t micro_batch,
                   int stash_slots, ChunkLayout layout, Arena& arena, int deferral_depth,
                   const ContextParallel& context, Fp8Scaling* fp8, const ExpertParallel& experts)
    : experts_(experts),
      shapes_(model_shapes(config, tp, micro_batch, context)),
      layout_(layout),
      recompute_plan_(plan_recompute(config.recompute, layout.num_layers)),
      activation_memory_(gpt::activation_memory(config, shapes_, layout.first_layer, layout.num_layers)) {
  workspace_ = std::make_unique<LayerWorkspace>(shapes_, config.dtype, arena);
  positions_.resize(static_cast<size_t>(stash_slots));
  recompute_buffers_ = std::make_unique<RecomputeBuffers>(
      recompute_plan_, chunk_moe_layers(config, layout) > 0 ? either_layer_shapes(shapes_) : shapes_, config.dtype,
      arena);
  if (layout.has_embedding) {
    embedding_ = std::make_unique<EmbeddingLayer>(config, params, tp, shapes_, *workspace_, arena, stash_slots,
                                                  positions_, deferral_depth);
  }
  for (int64_t i = 0; i < layout.num_layers; ++i) {
    layers_.push_back(std::make_unique<TransformerLayer>(config, layout.first_layer + i, params, tp, shapes_,
                                                         *workspace_, recompute_plan_, i, *recompute_buffers_,
                                                         arena, stash_slots, positions_, deferral_depth, context, fp8,
                                                         &moe_pass_, &experts_));
  }
  if (layout.has_output) {
    output_ = std::make_unique<OutputLayer>(config, params, tp, shapes_, *workspace_, arena, stash_slots,
                                            deferral_depth);
  }
  grad_ = arena.allocate(config.dtype, {shapes_.local_sequence, shapes_.batch, shapes_.hidden});
  // Parameter groups by name, in forward order.
  auto group = [&](std::string name, auto&& wanted) {
    ParamGroup members{.index = static_cast<int>(groups_.size()), .name = std::move(name), .params = {}};
    for (Param& param : params.params()) {
      if (wanted(param.name())) members.params.push_back(&param);
    }
    groups_.push_back(std::move(members));
  };
  if (layout.has_embedding) group("embedding", [](const std::string& n) { return n.rfind("embedding.", 0) == 0; });
  for (int64_t i = 0; i < layout.num_layers; ++i) {
    const std::string prefix = "decoder.layers." + std::to_string(layout.first_layer + i) + ".";
    group("layer " + std::to_string(layout.first_layer + i),
          [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
  }
  if (layout.has_output) {
    const std::string head = config.untie_embeddings_and_output_weights ? "output_layer.weight" : kWordEmbeddingName;
    group("output", [&](const std::string& n) { return n.rfind("decoder.final_layernorm.", 0) == 0 || n == head; });
  }
}

void GptModel::finish_moe_iteration(Context& ctx, Communicator& data_context) {
  for (auto& layer : layers_) {
    if (MoeBlock* moe = layer->moe_block()) moe->finish_iteration(ctx, data_context);
  }
}

void GptModel::restart_moe_iteration() {
  for (auto& layer : layers_) {
    if (MoeBlock* moe = layer->moe_block()) moe->restart_iteration();
  }
}

std::vector<ShardedTensor> GptModel::buffer_pieces(Context& ctx) {
  std::vector<ShardedTensor> pieces;
  for (auto& layer : layers_) {
    MoeBlock* moe = layer->moe_block();
    if (!moe) continue;
    if (std::optional<ShardedTensor> piece = moe->expert_bias_piece(ctx)) pieces.push_back(std::move(*piece));
  }
  return pieces;
}

std::vector<MoeLayerMetrics> GptModel::take_moe_metrics() {
  std::vector<MoeLayerMetrics> metrics;
  for (auto& layer : layers_) {
    if (MoeBlock* moe = layer->moe_block()) metrics.push_back(moe->take_metrics());
  }
  return metrics;
}


ChunkMemory GptModel::memory(const ModelConfig& config, const LayerShapes& s, bool sequence_parallel,
                             int stash_slots, const ChunkLayout& layout, int deferral_depth) {
  ChunkMemory m = stash_memory(config, s, int64_t{stash_slots}, layout);
  const int64_t moe_layers = chunk_moe_layers(config, layout);
  m.layers += (layout.num_layers - moe_layers) *
                  TransformerLayer::deferral_bytes(config, s, sequence_parallel, deferral_depth) +
              moe_layers * TransformerLayer::deferral_bytes(config, moe_layer_shapes(s), sequence_parallel,
                                                            deferral_depth);
  if (layout.has_embedding) m.embedding += EmbeddingLayer::deferral_bytes(config, s, deferral_depth);
  if (layout.has_output) m.output += OutputLayer::deferral_bytes(config, s, sequence_parallel, deferral_depth);
  return m;
}

template <typename Sizes>
ChunkMemoryOf<BytesOf<Sizes>> GptModel::stash_memory(const ModelConfig& config, const Sizes& s,
                                                     BytesOf<Sizes> stash_slots, const ChunkLayout& layout) {
  using T = BytesOf<Sizes>;
  ChunkMemoryOf<T> m;
  m.workspace = LayerWorkspace::bytes(s, config.dtype);
  const int64_t moe_layers = chunk_moe_layers(config, layout);
  m.recompute_buffers = RecomputeBuffers::bytes(shared_recompute(config.recompute, layout.num_layers),
                                                moe_layers > 0 ? either_layer_shapes(s) : s, config.dtype);
  // MoE layers keep their own list where a class keeps the MLP's tensors (everything or all but the
  // attention core: every layer, or under full recompute's block method the layers after the
  // first num_layers); a class that keeps only the output keeps the same for both kinds.
  for (const LayerClass& kind : per_slot_classes(config.recompute, layout.num_layers)) {
    int64_t moe_in_class = 0;
    if (kind.parts.main && moe_layers > 0) {
      const int64_t first = kind.layers == layout.num_layers ? 0 : layout.num_layers - kind.layers;
      for (int64_t i = first; i < layout.num_layers; ++i) moe_in_class += config.moe.is_moe_layer(layout.first_layer + i);
    }
    m.layers = m.layers + T(kind.layers - moe_in_class) * stash_slots * layer_activation_bytes(s, config.dtype, kind.parts);
    if (moe_in_class > 0) {
      m.layers = m.layers +
                 T(moe_in_class) * stash_slots * layer_activation_bytes(moe_layer_shapes(s), config.dtype, kind.parts);
    }
  }
  // Each MoE layer's expert bias (kept once, not per slot).
  m.layers = m.layers + T(moe_layers) * T(MoeBlock::persistent_bytes(config));
  if (layout.has_embedding) m.embedding = EmbeddingLayer::stash_bytes(s, config.dtype, stash_slots);
  if (layout.has_output) m.output = OutputLayer::stash_bytes(s, config.dtype, stash_slots);
  m.gradient = tensor_bytes<T>(config.dtype, s.local_sequence, s.batch, s.hidden);
  return m;
}
template ChunkMemoryOf<int64_t> GptModel::stash_memory(const ModelConfig&, const LayerShapes&, int64_t,
                                                       const ChunkLayout&);
template ChunkMemoryOf<CheckedBytes> GptModel::stash_memory(const ModelConfig&, const CheckedLayerShapes&,
                                                            CheckedBytes, const ChunkLayout&);

void GptModel::load_transposed(Context& ctx, const Tensor& destination, std::span<const int32_t> values_bs) {
  const int64_t s = shapes_.sequence, b = shapes_.batch, global = shapes_.global_sequence;
  GPT_CHECK_EQ(static_cast<int64_t>(values_bs.size()), global * b) << "microbatch token count";
  // Sized once and reused for every microbatch: the stream-ordered copy below takes pageable
  // memory, which CUDA has staged by the time it returns. Under context parallelism only this
  // rank's chunks of each sequence are kept.
  std::vector<int32_t>& values_sb = transposed_;
  values_sb.resize(static_cast<size_t>(s * b));
  for (const SequenceSegment& segment : shapes_.segments(0, s)) {
    for (int64_t bi = 0; bi < b; ++bi) {
      for (int64_t k = 0; k < segment.rows; ++k) {
        values_sb[(segment.local_row + k) * b + bi] = values_bs[bi * global + segment.position + k];
      }
    }
  }
  copy_to_device(ctx, destination, std::span<const int32_t>(values_sb));
}

void GptModel::set_position(int slot, const MicrobatchPosition& position) {
  GPT_CHECK(slot >= 0 && static_cast<size_t>(slot) < positions_.size()) << "stash slot " << slot;
  positions_[static_cast<size_t>(slot)] = position;
}

void GptModel::load_tokens(Context& ctx, int slot, std::span<const int32_t> tokens_bs) {
  GPT_CHECK(embedding_ != nullptr) << "tokens loaded into a chunk without the embedding";
  load_transposed(ctx, embedding_->tokens(slot), tokens_bs);
}

void GptModel::load_targets(Context& ctx, int slot, std::span<const int32_t> targets_bs) {
  GPT_CHECK(output_ != nullptr) << "targets loaded into a chunk without the output layer";
  load_transposed(ctx, output_->targets(slot), targets_bs);
}

void GptModel::before_use(Context& ctx, size_t group, ParamUse use, int slot) {
  if (observer_) observer_->before_use(ctx, groups_[group], use, slot);
}

void GptModel::after_use(Context& ctx, size_t group, ParamUse use, int slot) {
  if (observer_) observer_->after_use(ctx, groups_[group], use, slot);
}

void GptModel::gradients_ready(Context& ctx, size_t group, int slot, bool last_of_step) {
  if (observer_) observer_->gradients_ready(ctx, groups_[group], slot, last_of_step);
}

std::optional<Tensor> GptModel::forward(Context& ctx, int slot, const std::optional<Tensor>& input,
                                        const LossAccumulator& loss) {
  GPT_CHECK(input.has_value() != (embedding_ != nullptr))
      << (embedding_ ? "an input activation given to the chunk with the embedding"
                     : "forward of a chunk without the embedding needs an input activation");
  // The load-balancing losses' gradients scale as the LM loss of one microbatch: its per-token
  // scale times its tokens (absent in evaluation).
  moe_pass_.loss_gradient_scale.reset();
  if (loss.gradient_scale) {
    moe_pass_.loss_gradient_scale =
        *loss.gradient_scale * static_cast<float>(shapes_.global_sequence * shapes_.batch);
  }
  size_t group = 0;
  Tensor hidden;
  if (embedding_) {
    before_use(ctx, group, ParamUse::kForward, slot);
    hidden = embedding_->forward(ctx, slot);
    after_use(ctx, group++, ParamUse::kForward, slot);
  } else {
    hidden = *input;
  }
  for (auto& layer : layers_) {
    before_use(ctx, group, ParamUse::kForward, slot);
    hidden = layer->forward(ctx, slot, hidden);
    after_use(ctx, group++, ParamUse::kForward, slot);
  }
  if (!output_) return hidden;
  before_use(ctx, group, ParamUse::kForward, slot);
  output_->forward(ctx, slot, hidden, loss);
  after_use(ctx, group, ParamUse::kForward, slot);
  return std::nullopt;
}

std::optional<Tensor> GptModel::backward_input(Context& ctx, int slot, const std::optional<Tensor>& grad_output,
                                               WeightGradTiming timing, bool last_of_step) {
  GPT_CHECK(grad_output.has_value() != (output_ != nullptr))
      << (output_ ? "an output gradient given to the chunk with the loss"
                  : "backward of a chunk without the output layer needs an output gradient");
  const bool fused = timing == WeightGradTiming::kWithInputGrad;
  GPT_CHECK(fused || deferred_.empty() || deferred_.back().slot != slot)
      << "slot " << slot << " deferred twice without its weight-gradient pass";
  // One group's input-gradient pass (with its weight gradient when fused) between its hooks.
  size_t group = groups_.size();
  auto run = [&](auto&& pass) {
    --group;
    before_use(ctx, group, ParamUse::kBackward, slot);
    Tensor result = pass();
    after_use(ctx, group, ParamUse::kBackward, slot);
    if (fused) gradients_ready(ctx, group, slot, last_of_step);
    return result;
  };
  Tensor grad = output_ ? run([&] { return output_->backward(ctx, slot, grad_, timing); }) : *grad_output;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    const int64_t index = layers_.rend() - it - 1;
    recompute_group_ending_at(ctx, slot, index);
    grad = run([&] { return (*it)->backward(ctx, slot, grad, grad_, timing); });
  }
  if (!fused) deferred_.push_back({slot, last_of_step});
  if (!embedding_) return grad;
  run([&] {
    embedding_->backward(ctx, slot, grad, timing);
    return Tensor();
  });
  return std::nullopt;
}

void GptModel::backward_weight(Context& ctx, int slot) {
  GPT_CHECK(!deferred_.empty()) << "weight-gradient pass of slot " << slot << " without a deferred backward";
  const DeferredBackward pending = deferred_.front();
  GPT_CHECK_EQ(pending.slot, slot) << "weight-gradient passes run in the order of their input-gradient passes";
  deferred_.pop_front();
  size_t group = groups_.size();
  auto done = [&] { gradients_ready(ctx, --group, slot, pending.last_of_step); };
  if (output_) {
    output_->backward_weight(ctx);
    done();
  }
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    (*it)->backward_weight(ctx);
    done();
  }
  if (embedding_) {
    embedding_->backward_weight(ctx);
    done();
  }
}

void GptModel::recompute_group_ending_at(Context& ctx, int slot, int64_t layer) {
  const LayerRecompute& recompute = recompute_plan_.layers[static_cast<size_t>(layer)];
  if (!recompute.ends_group(layer)) return;
  Tensor hidden = layers_[static_cast<size_t>(recompute.group_begin)]->stashed_input(slot);  // [s_l, b, h]
  const size_t first_group = embedding_ ? 1 : 0;
  for (int64_t i = recompute.group_begin; i < recompute.group_end; ++i) {
    const size_t group = first_group + static_cast<size_t>(i);
    before_use(ctx, group, ParamUse::kRecompute, slot);
    hidden = layers_[static_cast<size_t>(i)]->recompute(ctx, slot, hidden);
    after_use(ctx, group, ParamUse::kRecompute, slot);
  }
}

std::vector<ParamSpec> chunk_param_specs(const std::vector<ParamSpec>& all, const ChunkLayout& layout) {
  std::vector<ParamSpec> selected;
  for (const ParamSpec& spec : all) {
    const bool wanted =
        (spec.section == ParamSection::kEmbedding && layout.has_embedding) ||
        (spec.section == ParamSection::kFinal && layout.has_output) ||
        // The tied LM head on a last stage without the embedding: its own copy of the word
        // embedding (same name, so the same initial values), kept equal to the first stage's by
        // all-reducing the two gradients over the embedding group.
        (spec.name == kWordEmbeddingName && layout.has_output && !layout.has_embedding && layout.tied_head) ||
        (spec.section == ParamSection::kLayer && spec.layer >= layout.first_layer &&
         spec.layer < layout.first_layer + layout.num_layers);
    if (wanted) selected.push_back(spec);
  }
  return selected;
}

}  // namespace gpt

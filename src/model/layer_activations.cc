#include "model/layer_activations.h"

#include <algorithm>

#include "core/check.h"

namespace gpt {
namespace {

// Calls visit(member, dtype, dims...) for every tensor of the set that `parts` selects: the one
// list behind both the allocation and the byte count (dims in the arithmetic of `s`).
template <typename Sizes, typename Visit>
void for_each_tensor(LayerActivations& a, const Sizes& s, DType t, ActivationParts parts, Visit&& visit) {
  if (parts.main) {
    visit(a.ln1, t, s.local_sequence, s.batch, s.hidden);
    visit(a.ln1_mean, DType::kFloat32, s.local_rows());
    visit(a.ln1_rstd, DType::kFloat32, s.local_rows());
    AttentionActivations::for_each_stashed(a.attention, s, t, visit);
    visit(a.residual, t, s.local_sequence, s.batch, s.hidden);
    visit(a.ln2, t, s.local_sequence, s.batch, s.hidden);
    visit(a.ln2_mean, DType::kFloat32, s.local_rows());
    visit(a.ln2_rstd, DType::kFloat32, s.local_rows());
    MlpActivations::for_each_stashed(a.mlp, s, t, visit);
  }
  if (parts.attention_core) AttentionActivations::for_each_core_output(a.attention, s, t, visit);
  if (parts.output) visit(a.output, t, s.local_sequence, s.batch, s.hidden);
}

ActivationParts shared_parts(int64_t position, int64_t sets) {
  return {.main = true, .attention_core = true, .output = position + 1 < sets};
}

}  // namespace

LayerActivations allocate_layer_activations(const LayerShapes& shapes, DType dtype, ActivationParts parts,
                                            Arena& arena) {
  LayerActivations a;
  for_each_tensor(a, shapes, dtype, parts,
                  [&](Tensor& member, DType t, auto... dims) { member = arena.allocate(t, Shape{dims...}); });
  return a;
}

template <typename Sizes>
BytesOf<Sizes> layer_activation_bytes(const Sizes& shapes, DType dtype, ActivationParts parts) {
  using T = BytesOf<Sizes>;
  LayerActivations unused;
  T total = 0;
  for_each_tensor(unused, shapes, dtype, parts,
                  [&](Tensor&, DType t, const auto&... dims) { total = total + tensor_bytes<T>(t, dims...); });
  return total;
}
template int64_t layer_activation_bytes(const LayerShapes&, DType, ActivationParts);
template CheckedBytes layer_activation_bytes(const CheckedLayerShapes&, DType, ActivationParts);

ActivationParts per_slot_parts(const RecomputePlan& plan, int64_t layer) {
  const LayerRecompute& r = plan.layers[static_cast<size_t>(layer)];
  switch (r.stashing) {
    case LayerStashing::kEverything:
      return {};
    case LayerStashing::kAllButAttentionCore:
      return {.main = true, .attention_core = false, .output = true};
    case LayerStashing::kGroupInput:
      return {.main = false, .attention_core = false, .output = r.ends_group(layer)};
  }
  return {};
}

std::vector<LayerClass> per_slot_classes(const RecomputeConfig& recompute, int64_t chunk_layers) {
  const int64_t n = recompute.num_layers;
  const ActivationParts group_end{.main = false, .attention_core = false, .output = true};
  switch (recompute.granularity) {
    case RecomputeGranularity::kNone:
      return {{ActivationParts{}, chunk_layers}};
    case RecomputeGranularity::kSelective:
      return {{{.main = true, .attention_core = false, .output = true}, chunk_layers}};
    case RecomputeGranularity::kFull: {
      GPT_CHECK_GE(n, 1) << "full recompute needs --recompute-num-layers >= 1";
      GPT_CHECK(recompute.method != RecomputeMethod::kNone) << "full recompute needs --recompute-method";
      if (recompute.method == RecomputeMethod::kUniform) {
        const int64_t groups = chunk_layers / n + (chunk_layers % n != 0 ? 1 : 0);
        return {{group_end, groups}, {ActivationParts::none(), chunk_layers - groups}};
      }
      const int64_t recomputed = std::min(n, chunk_layers);
      return {{group_end, recomputed}, {ActivationParts{}, chunk_layers - recomputed}};
    }
  }
  return {};
}

SharedRecompute shared_recompute(const RecomputePlan& plan) {
  return {.layer_sets = plan.shared_layer_sets(), .attention_core = plan.shared_attention_core()};
}

SharedRecompute shared_recompute(const RecomputeConfig& recompute, int64_t chunk_layers) {
  if (chunk_layers <= 0) return {};
  switch (recompute.granularity) {
    case RecomputeGranularity::kNone:
      return {};
    case RecomputeGranularity::kSelective:
      return {.layer_sets = 0, .attention_core = true};
    case RecomputeGranularity::kFull:
      return {.layer_sets = recompute.method == RecomputeMethod::kUniform ? std::min(recompute.num_layers, chunk_layers)
                                                                          : 1,
              .attention_core = false};
  }
  return {};
}

RecomputeBuffers::RecomputeBuffers(const RecomputePlan& plan, const LayerShapes& shapes, DType dtype, Arena& arena) {
  const SharedRecompute shared = shared_recompute(plan);
  const int64_t sets = shared.layer_sets;
  for (int64_t p = 0; p < sets; ++p) {
    group.push_back(allocate_layer_activations(shapes, dtype, shared_parts(p, sets), arena));
  }
  if (shared.attention_core) {
    const LayerActivations core =
        allocate_layer_activations(shapes, dtype, {.main = false, .attention_core = true, .output = false}, arena);
    attention = core.attention.attention;
    lse = core.attention.lse;
  }
}

template <typename Sizes>
BytesOf<Sizes> RecomputeBuffers::bytes(SharedRecompute shared, const Sizes& shapes, DType dtype) {
  using T = BytesOf<Sizes>;
  const int64_t sets = shared.layer_sets;
  T total = 0;
  // shared_parts: every set but the last has an output.
  if (sets > 0) {
    total = T(sets - 1) * layer_activation_bytes(shapes, dtype, shared_parts(0, 2)) +
            layer_activation_bytes(shapes, dtype, shared_parts(sets - 1, sets));
  }
  if (shared.attention_core) {
    total = total + layer_activation_bytes(shapes, dtype, {.main = false, .attention_core = true, .output = false});
  }
  return total;
}
template int64_t RecomputeBuffers::bytes(SharedRecompute, const LayerShapes&, DType);
template CheckedBytes RecomputeBuffers::bytes(SharedRecompute, const CheckedLayerShapes&, DType);

}  // namespace gpt

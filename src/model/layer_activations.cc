#include "model/layer_activations.h"

namespace gpt {
namespace {

// Calls visit(member, dtype, shape) for every tensor of the set that `parts` selects: the one
// list behind both the allocation and the byte count.
template <typename Visit>
void for_each_tensor(LayerActivations& a, const LayerShapes& s, DType t, ActivationParts parts, Visit&& visit) {
  const int64_t local_rows = s.local_rows();
  if (parts.main) {
    visit(a.ln1, t, Shape{s.local_sequence, s.batch, s.hidden});
    visit(a.ln1_mean, DType::kFloat32, Shape{local_rows});
    visit(a.ln1_rstd, DType::kFloat32, Shape{local_rows});
    AttentionActivations::for_each_stashed(a.attention, s, t, visit);
    visit(a.residual, t, Shape{s.local_sequence, s.batch, s.hidden});
    visit(a.ln2, t, Shape{s.local_sequence, s.batch, s.hidden});
    visit(a.ln2_mean, DType::kFloat32, Shape{local_rows});
    visit(a.ln2_rstd, DType::kFloat32, Shape{local_rows});
    MlpActivations::for_each_stashed(a.mlp, s, t, visit);
  }
  if (parts.attention_core) AttentionActivations::for_each_core_output(a.attention, s, t, visit);
  if (parts.output) visit(a.output, t, Shape{s.local_sequence, s.batch, s.hidden});
}

int64_t allocated_bytes(DType dtype, const Shape& shape) {
  const auto bytes = static_cast<int64_t>(shape.numel()) * static_cast<int64_t>(dtype_size(dtype));
  const auto alignment = static_cast<int64_t>(kAllocationAlignment);
  return (bytes + alignment - 1) / alignment * alignment;
}

ActivationParts shared_parts(int64_t position, int64_t sets) {
  return {.main = true, .attention_core = true, .output = position + 1 < sets};
}

}  // namespace

LayerActivations allocate_layer_activations(const LayerShapes& shapes, DType dtype, ActivationParts parts,
                                            Arena& arena) {
  LayerActivations a;
  for_each_tensor(a, shapes, dtype, parts,
                  [&](Tensor& member, DType t, const Shape& shape) { member = arena.allocate(t, shape); });
  return a;
}

int64_t layer_activation_bytes(const LayerShapes& shapes, DType dtype, ActivationParts parts) {
  LayerActivations unused;
  int64_t total = 0;
  for_each_tensor(unused, shapes, dtype, parts,
                  [&](Tensor&, DType t, const Shape& shape) { total += allocated_bytes(t, shape); });
  return total;
}

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

RecomputeBuffers::RecomputeBuffers(const RecomputePlan& plan, const LayerShapes& shapes, DType dtype, Arena& arena) {
  const int64_t sets = plan.shared_layer_sets();
  for (int64_t p = 0; p < sets; ++p) {
    group.push_back(allocate_layer_activations(shapes, dtype, shared_parts(p, sets), arena));
  }
  if (plan.shared_attention_core()) {
    const LayerActivations core =
        allocate_layer_activations(shapes, dtype, {.main = false, .attention_core = true, .output = false}, arena);
    attention = core.attention.attention;
    lse = core.attention.lse;
  }
}

int64_t RecomputeBuffers::bytes(const RecomputePlan& plan, const LayerShapes& shapes, DType dtype) {
  const int64_t sets = plan.shared_layer_sets();
  int64_t total = 0;
  for (int64_t p = 0; p < sets; ++p) total += layer_activation_bytes(shapes, dtype, shared_parts(p, sets));
  if (plan.shared_attention_core()) {
    total += layer_activation_bytes(shapes, dtype, {.main = false, .attention_core = true, .output = false});
  }
  return total;
}

}  // namespace gpt

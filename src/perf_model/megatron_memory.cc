#include "perf_model/megatron_memory.h"

#include <algorithm>

#include "core/dtype.h"
#include "model/recompute_plan.h"
#include "parallel/pipeline/schedule.h"
#include "train/configs.h"

namespace gpt::perf {
namespace {

struct LayerBytes {
  double full = 0;        // everything the layer's backward reads
  double core_stats = 0;  // the part selective recompute rebuilds (the fused core's lse)
  double group_input = 0; // what full recompute keeps per group
};

LayerBytes layer_bytes(const Arguments& a) {
  const ModelConfig c = model_config_from(a);
  const double e = static_cast<double>(dtype_size(c.dtype));
  const double tp = static_cast<double>(a.tensor_model_parallel_size);
  const double split = a.sequence_parallel && a.tensor_model_parallel_size > 1 ? tp : 1.0;
  const double s = static_cast<double>(c.seq_length / a.context_parallel_size);
  const double b = static_cast<double>(a.micro_batch_size);
  const double r = s * b, h = static_cast<double>(c.hidden_size);
  LayerBytes bytes;
  const double hidden_stream = 4 * r * h * e / split;  // 2 LayerNorm inputs, LN1 and LN2 outputs
  const double attention = r * static_cast<double>(c.qkv_size() + c.attention_projection_size()) * e / tp;
  const double mlp = r * static_cast<double>(c.fc1_size() + c.ffn_hidden_size) * e / tp;
  const double masks = c.hidden_dropout > 0.0f ? 2 * r * h / split : 0.0;
  bytes.core_stats = 4 * b * static_cast<double>(c.num_attention_heads) * s / tp;
  bytes.full = hidden_stream + attention + mlp + masks + bytes.core_stats;
  bytes.group_input = r * h * e / split;
  return bytes;
}

}  // namespace

double megatron_layer_stash_bytes(const Arguments& a) { return layer_bytes(a).full; }

double megatron_activation_bytes(const Arguments& a, int64_t world_size) {
  const ModelConfig c = model_config_from(a);
  const LayerBytes layer = layer_bytes(a);
  const int p = static_cast<int>(a.pipeline_model_parallel_size), v = virtual_pipeline_size(a);
  const int m = static_cast<int>(num_microbatches(a, world_size));
  const int64_t chunk_layers = a.num_layers / (a.pipeline_model_parallel_size * v);
  const RecomputePlan plan = plan_recompute(c.recompute, chunk_layers);
  double chunk = 0;
  for (int64_t i = 0; i < chunk_layers; ++i) {
    const LayerRecompute& r = plan.layers[static_cast<size_t>(i)];
    switch (r.stashing) {
      case LayerStashing::kEverything: chunk += layer.full; break;
      case LayerStashing::kAllButAttentionCore: chunk += layer.full - layer.core_stats; break;
      case LayerStashing::kGroupInput: chunk += r.ends_group(i) ? layer.group_input : 0.0; break;
    }
  }
  // One group rebuilt at a time during backward (full recompute).
  const double rebuilt = static_cast<double>(plan.shared_layer_sets()) * layer.full;
  const double e = static_cast<double>(dtype_size(c.dtype));
  const double rows = static_cast<double>(c.seq_length / a.context_parallel_size * a.micro_batch_size);
  const double logits = (e + 4) * rows * static_cast<double>(c.padded_vocab_size) /
                        static_cast<double>(a.tensor_model_parallel_size);
  const auto kind = pipeline_schedule_kind(a);
  const bool head_on_first = p == 1 || pipeline::schedule_placement(kind) == pipeline::Placement::kV;
  auto stage = [&](int rank, bool head) {
    return static_cast<double>(pipeline::expected_peak_live(kind, p, v, m, rank)) * chunk + rebuilt +
           (head ? logits : 0.0);
  };
  const double first = stage(0, head_on_first);
  return p == 1 ? first : std::max(first, stage(p - 1, !head_on_first));
}

}  // namespace gpt::perf

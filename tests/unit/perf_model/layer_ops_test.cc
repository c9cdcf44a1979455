// The layer's op list (perf_model/layer_ops.h) against the model's own FLOP count and options: its
// GEMMs are the layer's share of Megatron's model FLOPs (train/report/flops.h), and each option the trainer
// runs (rope, SwiGLU, dropout, SP) appears as its ops.
#include "perf_model/layer_ops.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "perf_model/compute_cost.h"
#include "train/report/flops.h"

namespace gpt::perf {
namespace {

ModelConfig gpt_layer() {
  ModelConfig c;
  c.num_layers = 1;
  c.hidden_size = 768;
  c.ffn_hidden_size = 3072;
  c.num_attention_heads = 12;
  c.kv_channels = 64;
  c.seq_length = 1024;
  c.max_position_embeddings = 1024;
  c.vocab_size = 1;
  c.padded_vocab_size = 1;
  c.dtype = DType::kBFloat16;
  return c;
}

double flops(const std::vector<Op>& ops, OpKind kind) {
  double total = 0;
  for (const Op& op : ops) {
    if (op.kind == kind) total += kind == OpKind::kGemm ? 2 * op.m * op.n * op.k : op.flops;
  }
  return total;
}

int count(const std::vector<Op>& ops, OpKind kind) {
  return static_cast<int>(std::count_if(ops.begin(), ops.end(), [&](const Op& op) { return op.kind == kind; }));
}

LayerOps ops_of(const ModelConfig& c, int64_t tp, bool sp, bool regather = false, int64_t batch = 2) {
  const LayerShapes shapes = LayerShapes::make(c, tp, 0, sp && tp > 1, batch);
  return transformer_layer_ops(c, shapes, {.sequence_parallel = sp && tp > 1, .tensor_parallel = tp,
                                           .regather_sequence_parallel_input = regather});
}

TEST(LayerOps, GemmsAndAttentionAreTheModelFlopsOfOneLayer) {
  // Megatron's model FLOPs (forward + backward, 3x the forward) of one layer, vocabulary ~0:
  // GEMMs 3 x 2 r (qkv + proj + fc1 + fc2) h, attention 3 x 4 b s^2 heads d (uncausal).
  for (bool swiglu : {false, true}) {
    ModelConfig c = gpt_layer();
    c.swiglu = swiglu;
    c.num_query_groups = swiglu ? 4 : 0;  // GQA with SwiGLU
    const LayerOps ops = ops_of(c, 2, false);
    const double batch = 2, tp = 2;
    const double gemm = flops(ops.forward, OpKind::kGemm) + flops(ops.backward, OpKind::kGemm);
    // The causal core executes half of the counted scores: forward 1/2, backward 2.5 / 2.
    const double attention = flops(ops.forward, OpKind::kAttention) * 2 * 3;
    const double model = model_flops_per_iteration(c, static_cast<int64_t>(batch)) / tp;
    EXPECT_NEAR((gemm + attention) / model, 1.0, 1e-3) << "swiglu " << swiglu;
    EXPECT_DOUBLE_EQ(flops(ops.backward, OpKind::kAttentionBackward), 2.5 * flops(ops.forward, OpKind::kAttention));
    // Backward: an input and a weight gradient per forward GEMM, the weight ones marked.
    EXPECT_DOUBLE_EQ(flops(ops.backward, OpKind::kGemm), 2 * flops(ops.forward, OpKind::kGemm));
    int weight = 0;
    for (const Op& op : ops.backward) weight += op.weight_gradient ? 1 : 0;
    EXPECT_EQ(weight, 4);
  }
}

TEST(LayerOps, TensorParallelCollectivesFollowTheTrainersSequenceParallelism) {
  const ModelConfig c = gpt_layer();
  const LayerOps plain = ops_of(c, 4, false), sp = ops_of(c, 4, true), megatron = ops_of(c, 4, true, true);
  EXPECT_EQ(count(plain.forward, OpKind::kAllReduce), 2);
  EXPECT_EQ(count(plain.backward, OpKind::kAllReduce), 2);
  EXPECT_EQ(count(sp.forward, OpKind::kAllGather), 2);
  EXPECT_EQ(count(sp.forward, OpKind::kReduceScatter), 2);
  // The trainer keeps the gathered LayerNorm outputs; Megatron gathers them again.
  EXPECT_EQ(count(sp.backward, OpKind::kAllGather), 2);
  EXPECT_EQ(count(megatron.backward, OpKind::kAllGather), 4);
  EXPECT_EQ(count(sp.backward, OpKind::kReduceScatter), 2);
  const LayerOps single = ops_of(c, 1, false);
  EXPECT_EQ(count(single.forward, OpKind::kAllReduce) + count(single.backward, OpKind::kAllReduce), 0);
}

TEST(LayerOps, OptionsTheLayerRunsAddTheirOps) {
  ModelConfig c = gpt_layer();
  const int base = count(ops_of(c, 1, false).forward, OpKind::kMemory);
  c.position_embedding = PositionEmbedding::kRope;
  c.rotary_dim = 64;
  EXPECT_EQ(count(ops_of(c, 1, false).forward, OpKind::kMemory), base + 1);  // rope
  c.hidden_dropout = 0.1f;
  EXPECT_EQ(count(ops_of(c, 1, false).forward, OpKind::kMemory), base + 3);  // and two dropouts
  // Elementwise bytes scale with the micro batch.
  auto bytes = [](const std::vector<Op>& ops) {
    double total = 0;
    for (const Op& op : ops) total += op.kind == OpKind::kMemory ? op.bytes : 0.0;
    return total;
  };
  EXPECT_DOUBLE_EQ(bytes(ops_of(c, 1, false, false, 4).forward), 2 * bytes(ops_of(c, 1, false, false, 2).forward));
}

TEST(LayerOps, KernelOverheadIsChargedPerOpOfTheList) {
  ModelConfig c = gpt_layer();
  Cluster cluster;
  cluster.peak_flops = 1e12;
  cluster.memory_bandwidth = 1e11;
  cluster.intra_node_bandwidth = cluster.inter_node_bandwidth = 1e10;
  cluster.gemm_efficiency = {{1e6, 0.5}};
  cluster.attention_forward_efficiency = cluster.attention_backward_efficiency = 0.5;
  RankShape shape;
  shape.micro_batch = 2;
  const LayerCost without = layer_cost(c, shape, cluster);
  cluster.kernel_overhead = 10e-6;
  const LayerCost with = layer_cost(c, shape, cluster);
  const LayerOps ops = layer_ops(c, shape);
  EXPECT_NEAR(with.forward.total() - without.forward.total(), 10e-6 * static_cast<double>(ops.forward.size()), 1e-12);
  EXPECT_NEAR(with.backward.total() - without.backward.total(), 10e-6 * static_cast<double>(ops.backward.size()), 1e-12);
}

}  // namespace
}  // namespace gpt::perf

// Megatron's unfused attention core (layer_ops.h's unfused_attention): the s x s scores
// materialised, counted as Korthikanti et al. 2022 (section 4.1) count them, and priced as the
// larger of FLOPs and traffic; only for Megatron's code (this trainer runs its fused core).
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_split.h"
#include "perf_model/compute_cost.h"
#include "perf_model/layer_ops.h"
#include "perf_model/predict.h"

namespace gpt::perf {
namespace {

// One layer of Korthikanti's 22B model on a rank of TP 8: 8 local heads of 96, s 2048, b 4.
ModelConfig layer_22b() {
  ModelConfig c;
  c.num_layers = 1;
  c.hidden_size = 6144;
  c.ffn_hidden_size = 4 * 6144;
  c.num_attention_heads = 64;
  c.kv_channels = 96;
  c.seq_length = 2048;
  c.max_position_embeddings = 2048;
  c.vocab_size = c.padded_vocab_size = 1;
  c.attention_dropout = 0.1f;
  c.dtype = DType::kBFloat16;
  return c;
}

struct Core {
  double flops = 0, bytes = 0;
  int ops = 0;
};

Core core_of(const std::vector<Op>& ops) {
  Core core;
  for (const Op& op : ops) {
    if (!op.attention_core) continue;
    ++core.ops;
    core.bytes += op.bytes;
    if (op.kind == OpKind::kGemm) core.flops += 2 * op.m * op.n * op.k;
  }
  return core;
}

TEST(UnfusedAttention, CountsTheMaterialisedScores) {
  ModelConfig c = layer_22b();
  const LayerShapes shapes = LayerShapes::make(c, 8, 0, false, 4);
  const LayerOps ops = transformer_layer_ops(c, shapes, {.tensor_parallel = 8, .unfused_attention = true});
  const double b = 4, n = 8, s = 2048, d = 96, t = 2, e = b * n * s * s;  // e: the scores' elements on the rank
  const Core forward = core_of(ops.forward), backward = core_of(ops.backward);
  // Forward: Q K^T and P V, the full (not causal) 4 b s^2 h / TP that Megatron counts; backward twice that.
  EXPECT_DOUBLE_EQ(forward.flops, 4 * b * n * s * s * d);
  EXPECT_DOUBLE_EQ(backward.flops, 8 * b * n * s * s * d);
  // Korthikanti's section 4.1 per layer: the softmax output 2 a s^2 b bytes, the dropout mask a s^2 b and
  // output 2 a s^2 b, with Q K^T's output: in traffic, Q K^T writes e t, the softmax reads and writes it,
  // dropout reads it and writes e t and its 1-byte mask, P V reads e t; Q, K, V and the output [b n s d].
  const double qkv = b * n * s * d * t;
  EXPECT_DOUBLE_EQ(forward.bytes, e * t + 2 * e * t + (2 * t + 1) * e + e * t + 4 * qkv);
  EXPECT_DOUBLE_EQ(backward.bytes, 4 * e * t + (2 * t + 1) * e + 3 * e * t + 8 * qkv);
  EXPECT_EQ(forward.ops, 4);
  EXPECT_EQ(backward.ops, 6);
  // Without attention dropout, no dropout ops.
  c.attention_dropout = 0.0f;
  const LayerOps no_dropout = transformer_layer_ops(c, shapes, {.tensor_parallel = 8, .unfused_attention = true});
  EXPECT_EQ(core_of(no_dropout.forward).ops, 3);
  EXPECT_EQ(core_of(no_dropout.backward).ops, 5);
}

TEST(UnfusedAttention, SelectiveRecomputeRunsItAgain) {
  absl::StatusOr<Cluster> cluster = load_cluster("dgx-a100", "");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const ModelConfig c = layer_22b();
  RankShape shape{.tensor_parallel = 8, .micro_batch = 4};
  const LayerCost fused = layer_cost(c, shape, *cluster);
  shape.unfused_attention = true;
  const LayerCost unfused = layer_cost(c, shape, *cluster);
  // The core is memory-bound on an A100: its forward at least its traffic over the HBM's rate.
  const double e = 4.0 * 8 * 2048 * 2048, t = 2;
  const double rate = cluster->memory_bandwidth * cluster->memory_bandwidth_efficiency;
  EXPECT_GE(unfused.forward.attention, (6 * t + 1) * e / rate);
  EXPECT_GT(unfused.forward.attention, 3 * fused.forward.attention);
  EXPECT_EQ(unfused.recompute_selective, unfused.forward.attention);
  EXPECT_EQ(unfused.forward.gemm, fused.forward.gemm);  // the linear layers are unchanged
  // Korthikanti's Table 4 (22B, TP 8, micro batch 4): selective recompute cost 13.2 - 11.9 = 1.3 ms of
  // backward; the fused core's recompute is far below it, the unfused one within 25%.
  EXPECT_LT(fused.recompute_selective, 0.3e-3);
  EXPECT_NEAR(unfused.recompute_selective, 1.3e-3, 0.25 * 1.3e-3);
}

// Only Megatron's code runs the unfused core: this trainer's prediction ignores the backend.
TEST(UnfusedAttention, OnlyForMegatronsImplementation) {
  absl::StatusOr<Cluster> cluster = load_cluster("dgx-a100", "");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string flags =
      "--num-layers 4 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
      "--vocab-size 51200 --micro-batch-size 4 --global-batch-size 32 --bf16";
  const auto time = [&](const std::string& extra, Implementation implementation) {
    absl::StatusOr<Arguments> parsed = parse_model_flags(absl::StrSplit(flags + extra, ' '));
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    absl::StatusOr<Arguments> a = validate_layout(*parsed, 8);
    EXPECT_TRUE(a.ok()) << a.status();
    absl::StatusOr<Prediction> p = predict(*a, 8, *cluster, {.implementation = implementation});
    EXPECT_TRUE(p.ok()) << p.status();
    return p->iteration_time;
  };
  EXPECT_EQ(time(" --attention-backend unfused", Implementation::kTrainer), time("", Implementation::kTrainer));
  EXPECT_GT(time(" --attention-backend unfused", Implementation::kMegatron), 1.1 * time("", Implementation::kMegatron));
  EXPECT_GT(time(" --attention-backend local", Implementation::kMegatron), 1.1 * time("", Implementation::kMegatron));
}

}  // namespace
}  // namespace gpt::perf

// The performance model end to end: memory against hand-computed figures, recompute, the pipeline
// bubble, and that layouts rank differently.
#include "perf_model/predict.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "unit/perf_model/perf_model_fixtures.h"

namespace gpt::perf {
namespace {

// An idealised cluster: one GEMM rate, no latency.
Cluster ideal_cluster() { return ideal_cluster_base(); }

Arguments layout(const std::string& flags, int64_t world) { return checked_layout(flags, world); }

Prediction predicted(const std::string& flags, int64_t world, const Cluster& cluster = ideal_cluster(),
                     RunOptions options = {}) {
  return predict_layout(flags, world, cluster, options);
}

// Two layers, h 64, 4 heads, s 32, ffn 256, vocabulary 128, BF16.
const std::string kTiny =
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 "
    "--vocab-size 128 --micro-batch-size 1 --bf16 ";

TEST(PerfModelMemory, HandComputedTinyModel) {
  // Per layer: two LayerNorms 4h + QKV (3h)(h + 1) + projection h h + h + fc1 4h (h + 1) + fc2 4h h + h
  // = 256 + 12480 + 4160 + 16640 + 16448 = 49984; embeddings (128 + 32) 64 = 10240; final norm 128.
  const double elements = 2 * 49984 + 10240 + 128;
  const Arguments a = layout(kTiny + "--global-batch-size 1", 1);
  const MemoryEstimate m = closed_form_memory(a, 1);
  // perf_model's memory is the allocation: these with the arena's alignment, and the pipeline's
  // buffers and weight-gradient leases where there are any.
  EXPECT_GE(estimate_memory(a, 1)->total(), m.total());
  EXPECT_EQ(m.parameters, 2 * elements);
  EXPECT_EQ(m.gradients, 4 * elements);
  EXPECT_EQ(m.optimizer_state, 12 * elements);
  // 18 bytes per parameter without the distributed optimizer.
  EXPECT_EQ(m.parameters + m.gradients + m.optimizer_state, 18 * elements);
  // Activations, rows r = 32, from the lists the allocation uses (each tensor rounded up to 256
  // bytes): per layer and microbatch 2 (4 r h + r 3h + r h + 2 r 4h) = 65536, four norm statistics of
  // r float32 (128 bytes, 256 allocated) and the lse [4 heads, s] float32 = 512: 67072 (the
  // allocation's list; unaligned, as Korthikanti's formula counts them, 66560); the chunk's
  // workspace 2 (2 r h + 2 r h + r (3h + h) + r 4h) = 49152; the embedding's stash, tokens (r int32:
  // 256) and output 2 r h = 4352; the output layer's five loss statistics 5 x 256, targets 256, norm
  // 2 r h, its statistics 2 x 256 and logits 2 r V = 14336; the backward's gradient 2 r h = 4096.
  EXPECT_EQ(m.activations, 2 * 67072 + 49152 + 4352 + 14336 + 4096);
}

TEST(PerfModelMemory, DistributedOptimizerShardsTwelveBytes) {
  // DP 4 over a model whose parameter count divides by 4: 6 + 12 / 4 bytes per parameter.
  const MemoryEstimate m =
      *estimate_memory(layout(kTiny + "--global-batch-size 4 --use-distributed-optimizer", 4), 4);
  const double elements = m.parameters / 2;
  EXPECT_EQ(static_cast<int64_t>(elements) % 4, 0);
  EXPECT_EQ(m.parameters + m.gradients + m.optimizer_state, (6 + 12.0 / 4) * elements);
}

TEST(PerfModelMemory, ZeroTwoShardsGradientsAndReducesEveryMicrobatch) {
  // DP 4, BF16: ZeRO-2 holds 2 + (4 + 12) / 4 bytes per parameter (ZeRO-1: 2 + 4 + 12 / 4), and
  // reduce-scatters the gradients once per microbatch (ZeRO-1: once per iteration).
  const std::string flags = kTiny + "--global-batch-size 8 ";
  // The state in theory (the plan's closed form; the allocation adds ZeRO-2's working buffers).
  const MemoryEstimate zero1 = closed_form_memory(layout(flags + "--use-distributed-optimizer", 4), 4);
  const MemoryEstimate zero2 =
      closed_form_memory(layout(flags + "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", 4), 4);
  const double elements = zero1.parameters / 2;
  EXPECT_EQ(zero2.parameters + zero2.gradients + zero2.optimizer_state, (2 + 16.0 / 4) * elements);
  EXPECT_EQ(zero1.parameters + zero1.gradients + zero1.optimizer_state, (6 + 12.0 / 4) * elements);
  // One reduce-scatter R per microbatch: ZeRO-2 at m = 2 sends R more than ZeRO-1, at m = 4 another 2 R.
  const std::string fsdp = "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads";
  const Prediction one = predicted(flags + "--use-distributed-optimizer", 4);
  const Prediction two = predicted(flags + fsdp, 4);
  const Prediction four = predicted(kTiny + "--global-batch-size 16 " + fsdp, 4);
  EXPECT_EQ(two.zero_level, 2);
  EXPECT_EQ(two.microbatches, 2);
  EXPECT_EQ(four.microbatches, 4);
  const double reduce_scatter = two.dp_comm_time - one.dp_comm_time;
  EXPECT_GT(reduce_scatter, 0);
  EXPECT_NEAR(four.dp_comm_time - two.dp_comm_time, 2 * reduce_scatter, 1e-12);
}

TEST(PerfModelMemory, OptimizerInstancesShardOverTheInstanceAndAllReduceAcross) {
  // DP 4, BF16 (2-byte gradients and parameters, B bytes of each): N instances of 4 / N ranks hold
  // 6 + 12 / (4 / N) bytes per parameter. On one node without latency a ring sends the same: one
  // instance reduce-scatters and gathers over 4 (3/4 B + 3/4 B); 2 instances over 2 (1/2 B + 1/2 B)
  // plus the all-reduce of the half-size shard across 2 (2 x 1/2 x B / 2); 4 instances of one rank
  // only all-reduce across 4 (2 x 3/4 B).
  const std::string flags = kTiny + "--global-batch-size 4 --use-distributed-optimizer ";
  const Prediction one = predicted(flags, 4);
  const double elements = one.memory.parameters / 2;
  for (int n : {2, 4}) {
    SCOPED_TRACE(testing::Message() << n << " instances");
    const std::string instances = flags + "--num-distributed-optimizer-instances " + std::to_string(n);
    const MemoryEstimate m = *estimate_memory(layout(instances, 4), 4);
    EXPECT_EQ(m.parameters + m.gradients + m.optimizer_state, (6 + 12.0 / (4 / n)) * elements);
    const Prediction p = predicted(instances, 4);
    EXPECT_GT(p.dp_comm_time, 0);
    EXPECT_NEAR(p.dp_comm_time, one.dp_comm_time, 1e-9 * one.dp_comm_time);
  }
}

const std::string kMedium =
    "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 "
    "--vocab-size 512 --micro-batch-size 1 --bf16 ";

TEST(PerfModelRecompute, FullAddsOneForwardSelectiveTheAttentionCore) {
  const Prediction none = predicted(kMedium + "--global-batch-size 4", 1);
  const Prediction full = predicted(
      kMedium + "--global-batch-size 4 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2",
      1);
  const Prediction block = predicted(
      kMedium + "--global-batch-size 4 --recompute-granularity full --recompute-method block --recompute-num-layers 3", 1);
  const Prediction selective = predicted(kMedium + "--global-batch-size 4 --recompute-granularity selective", 1);
  const double m = 4, layers = 8;
  EXPECT_NEAR(full.compute_time - none.compute_time, m * layers * none.layer.forward.total(), 1e-12);
  EXPECT_NEAR(block.compute_time - none.compute_time, m * 3 * none.layer.forward.total(), 1e-12);
  EXPECT_NEAR(selective.compute_time - none.compute_time, m * layers * none.layer.forward.attention, 1e-12);
  EXPECT_NEAR(full.recompute_time, m * layers * none.layer.forward.total(), 1e-12);
  // Model FLOPs do not count recompute, so throughput drops.
  EXPECT_EQ(full.model_flops, none.model_flops);
  EXPECT_LT(full.tflops_per_gpu, selective.tflops_per_gpu);
  EXPECT_LT(selective.tflops_per_gpu, none.tflops_per_gpu);
  EXPECT_LT(full.memory.activations, none.memory.activations);
}

TEST(PerfModelPipeline, BubbleIsPMinusOneOverM) {
  // A vocabulary of 128 makes the embedding and head negligible next to 8 layers of h 1024; with
  // free transfers the stages cost the same.
  Cluster cluster = ideal_cluster();
  cluster.intra_node_bandwidth = 1e18;
  const std::string model =
      "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 "
      "--vocab-size 128 --micro-batch-size 1 --pipeline-model-parallel-size 4 ";
  for (int m : {4, 8, 16}) {
    const Prediction p = predicted(model + absl::StrCat("--global-batch-size ", m), 4, cluster);
    EXPECT_NEAR(p.pipeline_bubble, 3.0 / m, 0.02 * 3.0 / m) << "m = " << m;
  }
  const Prediction interleaved =
      predicted(model + "--global-batch-size 8 --num-layers-per-virtual-pipeline-stage 1", 4, cluster);
  EXPECT_NEAR(interleaved.pipeline_bubble, 3.0 / (2 * 8), 0.03 * 3.0 / 16);
}

TEST(PerfModelRanking, LayoutsDiffer) {
  const absl::StatusOr<Cluster> h100 = load_cluster("dgx-h100", "");
  ASSERT_TRUE(h100.ok()) << h100.status();
  const std::string model =
      "--num-layers 32 --hidden-size 6144 --num-attention-heads 48 --seq-length 4096 --max-position-embeddings 4096 "
      "--vocab-size 131072 --micro-batch-size 1 --bf16 --use-distributed-optimizer --sequence-parallel ";
  // 16 GPUs on two nodes: TP 16 crosses the node boundary, TP 8 x DP 2 does not.
  const Prediction tp8 = predicted(model + "--global-batch-size 64 --tensor-model-parallel-size 8", 16, *h100);
  const Prediction tp16 = predicted(model + "--global-batch-size 64 --tensor-model-parallel-size 16", 16, *h100);
  EXPECT_LT(tp16.tflops_per_gpu, 0.9 * tp8.tflops_per_gpu);
  // PP 4 with 4 microbatches idles 3/7 of the time; with 64 it amortises the bubble.
  const std::string pp4 = model + "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 4 ";
  const Prediction few = predicted(pp4 + "--global-batch-size 4", 16, *h100);
  const Prediction many = predicted(pp4 + "--global-batch-size 64", 16, *h100);
  EXPECT_GT(few.pipeline_bubble, 0.4);
  EXPECT_LT(few.tflops_per_gpu, 0.75 * many.tflops_per_gpu);
  // Larger GEMMs are more efficient: TP 1 beats TP 4 on one node's worth of work.
  EXPECT_NE(tp8.mfu, few.mfu);
}

TEST(PerfModelContext, SplitsTheSequenceAndAddsItsTraffic) {
  // A 32K-token sequence on 2 GPUs: DP 2 against CP 2 (p2p and a2a). A CP rank computes half the
  // rows and half the causal attention of a DP rank's microbatch, holds half the activations, and
  // pays the ring's or the all-to-all's traffic; the model's FLOPs do not change.
  const std::string model =
      "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 32768 "
      "--max-position-embeddings 32768 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 2 --bf16 ";
  const Prediction dp = predicted(model, 2);
  const Prediction ring = predicted(model + "--context-parallel-size 2", 2);
  const Prediction all_to_all = predicted(model + "--context-parallel-size 2 --cp-comm-type a2a", 2);
  EXPECT_EQ(ring.context, 2);
  EXPECT_EQ(ring.data, 1);
  EXPECT_EQ(ring.cp_comm_type, "p2p");
  EXPECT_EQ(all_to_all.cp_comm_type, "a2a");
  EXPECT_NEAR(ring.layer.forward.attention, dp.layer.forward.attention / 2, 1e-12);
  EXPECT_NEAR(ring.layer.backward.attention, dp.layer.backward.attention / 2, 1e-12);
  EXPECT_LT(ring.layer.forward.gemm, dp.layer.forward.gemm);
  EXPECT_EQ(dp.layer.forward.cp_comm, 0.0);
  EXPECT_GT(ring.layer.backward.cp_comm, 0.0);  // dK/dV hops are not hidden
  EXPECT_GT(all_to_all.layer.forward.cp_comm, 0.0);
  EXPECT_GT(ring.cp_comm_time, 0.0);
  EXPECT_LT(ring.memory.activations, 0.6 * dp.memory.activations);
  EXPECT_DOUBLE_EQ(ring.model_flops, dp.model_flops);
}

TEST(PerfModelContext, RefusesTheTwoLevelAllToAllRing) {
  // --cp-comm-type a2a+p2p trains (the arguments accept it) but is not modelled: refused with the reason.
  const std::string model =
      "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 32768 "
      "--max-position-embeddings 32768 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 1 --bf16 "
      "--context-parallel-size 4 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2";
  const absl::StatusOr<Prediction> p = predict(layout(model, 4), 4, ideal_cluster(), {});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("perf_model does not model --cp-comm-type a2a+p2p"), std::string::npos)
      << p.status();
}

}  // namespace
}  // namespace gpt::perf

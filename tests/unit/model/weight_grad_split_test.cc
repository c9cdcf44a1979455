// The backward split into input-gradient and weight-gradient passes (model/linear.h): running the
// input-gradient passes of whole chunks first and every weight-gradient pass afterwards gives
// bitwise the gradients of the fused backward, in FP32 and BF16, for both model families, with
// dropout, under every recompute mode, with one or two microbatches' weight gradients waiting at
// once. Released leases are poisoned (GPT_POISON_LEASES=1 below), so a weight-gradient pass that
// read a lease after its lifetime would turn gradients into NaN. The leases' bytes are exactly what
// the model takes from its arena beyond the fused model.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/memory.h"
#include "gtest/gtest.h"
#include "support/tiny_model.h"
#include "model/gpt_model.h"
#include "parallel/comm/self_communicator.h"

namespace gpt {
namespace {

// Set before the first lease is released (the setting is read once).
const bool kPoison = [] { return setenv("GPT_POISON_LEASES", "1", 1) == 0; }();

constexpr int64_t kLayers = 4;
constexpr int64_t kBatch = 2;
constexpr int kMicrobatches = 2;

// kLlamaQkNorm: Llama-style with --qk-layernorm (its norms' backward rewrites qkv's gradient in place
// before linear_qkv's deferred weight gradient copies it).
enum class Family { kGpt, kLlama, kLlamaQkNorm };

ModelConfig config_with(Family family, RecomputeConfig recompute, DType dtype) {
  ModelConfig c = testing_support::tiny_model(kLayers);
  if (family != Family::kGpt) c = testing_support::llama_style(c);
  c.qk_layernorm = family == Family::kLlamaQkNorm;
  c.dtype = dtype;
  c.recompute = recompute;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.seed = 11;
  return c;
}

struct Mode {
  std::string name;
  RecomputeConfig recompute;
};

std::vector<Mode> recompute_modes() {
  return {{"none", {}},
          {"selective", {.granularity = RecomputeGranularity::kSelective}},
          {"full_uniform_2", {.granularity = RecomputeGranularity::kFull, .method = RecomputeMethod::kUniform,
                              .num_layers = 2}},
          {"full_block_1", {.granularity = RecomputeGranularity::kFull, .method = RecomputeMethod::kBlock,
                            .num_layers = 1}}};
}

// How backward runs: fused, or every chunk's input-gradient pass of a microbatch and then their
// weight-gradient passes (depth 1), or both microbatches' input-gradient passes before any
// weight-gradient pass (depth 2).
enum class Order { kFused, kSplitEach, kSplitAll };

struct Result {
  std::vector<std::vector<unsigned char>> grads;
  std::vector<std::string> names;
  std::vector<float> losses;
  int64_t model_bytes = 0;
};

Result run(const ModelConfig& config, Order order) {
  const DType dtype = config.dtype;
  const std::vector<ParamSpec> specs = build_param_specs(config);
  Context ctx = Context::cpu(1);
  Arena param_arena(Device::kCpu, "params");
  Arena model_arena(Device::kCpu, "model");
  ParamStore store(specs, 0, 1, dtype, param_arena);
  store.initialize(5);
  SelfCommunicator tp_group("tensor-parallel");
  TensorParallel tp(tp_group, false);
  const int depth = order == Order::kFused ? 0 : order == Order::kSplitEach ? 1 : kMicrobatches;
  // Two chunks, so that a chunk's weight gradients also wait across the other chunk's passes.
  std::vector<std::unique_ptr<GptModel>> chunks;
  chunks.push_back(std::make_unique<GptModel>(config, store, tp, kBatch, kMicrobatches,
                                              ChunkLayout{0, 2, true, false, false}, model_arena, depth));
  chunks.push_back(std::make_unique<GptModel>(config, store, tp, kBatch, kMicrobatches,
                                              ChunkLayout{2, 2, false, true, false}, model_arena, depth));
  Result result;
  result.model_bytes = static_cast<int64_t>(model_arena.used_bytes());
  Tensor loss_sum = param_arena.allocate_zeroed(DType::kFloat32, {1});
  store.zero_grads(ctx);
  for (int slot = 0; slot < kMicrobatches; ++slot) {
    testing_support::load_pattern(ctx, *chunks.front(), *chunks.back(), slot, config, kBatch);
    for (auto& chunk : chunks) chunk->set_position(slot, {.training = true, .iteration = 3, .first_sample = 2 * slot});
    zero_tensor(loss_sum);
    std::optional<Tensor> hidden;
    for (auto& chunk : chunks) hidden = chunk->forward(ctx, slot, hidden, {loss_sum, 0.5f});
    result.losses.push_back(loss_sum.data_as<float>()[0]);
  }
  auto input_pass = [&](int slot) {
    std::optional<Tensor> grad;
    for (auto it = chunks.rbegin(); it != chunks.rend(); ++it) {
      grad = order == Order::kFused ? (*it)->backward(ctx, slot, grad)
                                    : (*it)->backward_input(ctx, slot, grad, WeightGradTiming::kDeferred);
    }
  };
  auto weight_pass = [&](int slot) {
    for (auto it = chunks.rbegin(); it != chunks.rend(); ++it) (*it)->backward_weight(ctx, slot);
  };
  if (order == Order::kSplitAll) {
    for (int slot = 0; slot < kMicrobatches; ++slot) input_pass(slot);
    for (int slot = 0; slot < kMicrobatches; ++slot) weight_pass(slot);
  } else {
    for (int slot = 0; slot < kMicrobatches; ++slot) {
      input_pass(slot);
      if (order == Order::kSplitEach) weight_pass(slot);
    }
  }
  for (const Param& p : store.params()) {
    const auto* bytes = static_cast<const unsigned char*>(p.grad.data());
    result.grads.emplace_back(bytes, bytes + p.grad.bytes());
    result.names.push_back(p.name());
  }
  return result;
}

// The lease bytes of the two chunks at this depth, from the modules' own accounting.
int64_t lease_bytes(const ModelConfig& config, int depth) {
  SelfCommunicator tp_group("tensor-parallel");
  TensorParallel tp(tp_group, false);
  const LayerShapes shapes = LayerShapes::make(config, tp, kBatch);
  return kLayers * TransformerLayer::deferral_bytes(config, shapes, false, depth) +
         EmbeddingLayer::deferral_bytes(config, shapes, depth) + OutputLayer::deferral_bytes(config, shapes, false, depth);
}

class WeightGradSplit : public ::testing::TestWithParam<std::tuple<DType, Family>> {};

TEST_P(WeightGradSplit, IsBitwiseTheFusedBackward) {
  ASSERT_TRUE(kPoison && poison_released_leases());
  const auto [dtype, family] = GetParam();
  for (const Mode& mode : recompute_modes()) {
    SCOPED_TRACE(mode.name);
    const ModelConfig config = config_with(family, mode.recompute, dtype);
    const Result fused = run(config, Order::kFused);
    // The comparison has teeth: every parameter has a non-zero, finite gradient.
    for (size_t i = 0; i < fused.grads.size(); ++i) {
      bool nonzero = false;
      for (unsigned char byte : fused.grads[i]) nonzero = nonzero || byte != 0;
      EXPECT_TRUE(nonzero) << fused.names[i];
    }
    for (Order order : {Order::kSplitEach, Order::kSplitAll}) {
      const Result split = run(config, order);
      const int depth = order == Order::kSplitEach ? 1 : kMicrobatches;
      EXPECT_EQ(split.losses, fused.losses);
      ASSERT_EQ(split.grads.size(), fused.grads.size());
      for (size_t i = 0; i < split.grads.size(); ++i) {
        ASSERT_EQ(split.grads[i].size(), fused.grads[i].size());
        EXPECT_EQ(std::memcmp(split.grads[i].data(), fused.grads[i].data(), split.grads[i].size()), 0)
            << "depth " << depth << ": gradient of " << split.names[i] << " differs";
      }
      EXPECT_EQ(split.model_bytes - fused.model_bytes, lease_bytes(config, depth)) << "depth " << depth;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, WeightGradSplit,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16), ::testing::Values(Family::kGpt, Family::kLlama, Family::kLlamaQkNorm)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == DType::kFloat32 ? "fp32" : "bf16") +
             (std::get<1>(info.param) == Family::kGpt     ? "_gpt"
              : std::get<1>(info.param) == Family::kLlama ? "_llama"
                                                          : "_llama_qk_layernorm");
    });

// Out of order is a broken invariant, not a wrong number: a second deferred backward with the
// lease ring full, or a weight-gradient pass with none pending, stops the process.
TEST(WeightGradSplitDeathTest, PassesOutOfOrderStop) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the BLAS may have started threads
  const ModelConfig config = config_with(Family::kGpt, {}, DType::kFloat32);
  const std::vector<ParamSpec> specs = build_param_specs(config);
  Context ctx = Context::cpu(1);
  Arena arena(Device::kCpu, "model");
  ParamStore store(specs, 0, 1, DType::kFloat32, arena);
  store.initialize(5);
  SelfCommunicator tp_group("tensor-parallel");
  TensorParallel tp(tp_group, false);
  GptModel model(config, store, tp, kBatch, kMicrobatches, ChunkLayout{0, kLayers, true, true, false}, arena, 1);
  EXPECT_DEATH(model.backward_weight(ctx, 0), "without a deferred backward");
}

}  // namespace
}  // namespace gpt

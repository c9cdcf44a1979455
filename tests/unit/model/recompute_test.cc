// Activation recompute: the plan follows Megatron's methods, gradients are bitwise those without
// recompute, and the memory report is what the model takes from its arena.
#include <cstring>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/memory.h"
#include "gtest/gtest.h"
#include "support/tiny_model.h"
#include "model/activation_memory.h"
#include "model/gpt_model.h"
#include "parallel/comm/self_communicator.h"

namespace gpt {
namespace {

constexpr int64_t kLayers = 4;
constexpr int64_t kBatch = 2;
constexpr int kMicrobatches = 2;

ModelConfig config_with(RecomputeConfig recompute, DType dtype) {
  ModelConfig c = testing_support::tiny_model(kLayers);
  c.dtype = dtype;
  c.recompute = recompute;
  return c;
}

RecomputeConfig full(RecomputeMethod method, int64_t layers) {
  return {.granularity = RecomputeGranularity::kFull, .method = method, .num_layers = layers};
}

struct Mode {
  std::string name;
  RecomputeConfig recompute;
};

const std::vector<Mode>& recompute_modes() {
  static const std::vector<Mode> modes = {
      {"selective", {.granularity = RecomputeGranularity::kSelective}},
      {"full_uniform_1", full(RecomputeMethod::kUniform, 1)},
      {"full_uniform_2", full(RecomputeMethod::kUniform, 2)},
      {"full_uniform_3", full(RecomputeMethod::kUniform, 3)},  // groups [0, 3) and [3, 4)
      {"full_block_1", full(RecomputeMethod::kBlock, 1)},
      {"full_block_2", full(RecomputeMethod::kBlock, 2)},
  };
  return modes;
}

std::string describe(const LayerRecompute& r) {
  switch (r.stashing) {
    case LayerStashing::kEverything: return "all";
    case LayerStashing::kAllButAttentionCore: return "selective";
    case LayerStashing::kGroupInput: return "[" + std::to_string(r.group_begin) + "," + std::to_string(r.group_end) + ")";
  }
  return "?";
}

std::vector<std::string> describe(const RecomputePlan& plan) {
  std::vector<std::string> layers;
  for (const LayerRecompute& r : plan.layers) layers.push_back(describe(r));
  return layers;
}

using Strings = std::vector<std::string>;

TEST(RecomputePlan, FollowsMegatronsMethods) {
  EXPECT_EQ(describe(plan_recompute({}, 3)), (Strings{"all", "all", "all"}));
  EXPECT_EQ(describe(plan_recompute({.granularity = RecomputeGranularity::kSelective}, 2)),
            (Strings{"selective", "selective"}));
  // uniform: consecutive groups of N, the last one shorter (megatron/core/recompute.py).
  EXPECT_EQ(describe(plan_recompute(full(RecomputeMethod::kUniform, 1), 3)), (Strings{"[0,1)", "[1,2)", "[2,3)"}));
  EXPECT_EQ(describe(plan_recompute(full(RecomputeMethod::kUniform, 2), 5)),
            (Strings{"[0,2)", "[0,2)", "[2,4)", "[2,4)", "[4,5)"}));
  EXPECT_EQ(describe(plan_recompute(full(RecomputeMethod::kUniform, 4), 3)), (Strings{"[0,3)", "[0,3)", "[0,3)"}));
  // block: the first N layers of the chunk, each alone.
  EXPECT_EQ(describe(plan_recompute(full(RecomputeMethod::kBlock, 2), 4)), (Strings{"[0,1)", "[1,2)", "all", "all"}));
  EXPECT_EQ(describe(plan_recompute(full(RecomputeMethod::kBlock, 5), 2)), (Strings{"[0,1)", "[1,2)"}));

  const RecomputePlan uniform = plan_recompute(full(RecomputeMethod::kUniform, 2), 5);
  EXPECT_EQ(uniform.shared_layer_sets(), 2);
  EXPECT_FALSE(uniform.shared_attention_core());
  EXPECT_TRUE(uniform.layers[1].ends_group(1));
  EXPECT_FALSE(uniform.layers[2].ends_group(2));
  EXPECT_TRUE(uniform.layers[4].ends_group(4));
  EXPECT_EQ(plan_recompute(full(RecomputeMethod::kBlock, 3), 8).shared_layer_sets(), 1);
  EXPECT_TRUE(plan_recompute({.granularity = RecomputeGranularity::kSelective}, 1).shared_attention_core());
  EXPECT_EQ(plan_recompute({}, 4).shared_layer_sets(), 0);
}

// One training step of two microbatches in flight at once (both forwards, then both backwards,
// as a pipeline keeps them), over the whole model or over two chunks run back to back.
struct Step {
  std::vector<std::vector<unsigned char>> grads;  // every parameter's gradient, as bytes
  std::vector<float> losses;
  int64_t model_bytes = 0;  // taken from the model's arena
};

Step train_step(const RecomputeConfig& recompute, DType dtype, bool two_chunks) {
  const ModelConfig config = config_with(recompute, dtype);
  const std::vector<ParamSpec> specs = build_param_specs(config);
  Context ctx = Context::cpu(1);
  Arena param_arena(Device::kCpu, "params");
  Arena model_arena(Device::kCpu, "model");
  ParamStore store(specs, 0, 1, dtype, param_arena);
  store.initialize(5);
  SelfCommunicator tp_group("tensor-parallel");
  TensorParallel tp(tp_group, false);
  std::vector<std::unique_ptr<GptModel>> chunks;
  if (two_chunks) {
    chunks.push_back(std::make_unique<GptModel>(config, store, tp, kBatch, kMicrobatches,
                                                ChunkLayout{0, 2, true, false, true}, model_arena));
    chunks.push_back(std::make_unique<GptModel>(config, store, tp, kBatch, kMicrobatches,
                                                ChunkLayout{2, 2, false, true, true}, model_arena));
  } else {
    chunks.push_back(std::make_unique<GptModel>(config, store, tp, kBatch, kMicrobatches,
                                                ChunkLayout{0, kLayers, true, true, true}, model_arena));
  }
  Step step;
  step.model_bytes = static_cast<int64_t>(model_arena.used_bytes());
  Tensor loss_sum = param_arena.allocate_zeroed(DType::kFloat32, {1});
  store.zero_grads(ctx);
  for (int slot = 0; slot < kMicrobatches; ++slot) {
    testing_support::load_pattern(ctx, *chunks.front(), *chunks.back(), slot, config, kBatch);
    zero_tensor(loss_sum);
    std::optional<Tensor> hidden;
    for (auto& chunk : chunks) hidden = chunk->forward(ctx, slot, hidden, {loss_sum, 0.5f});
    step.losses.push_back(loss_sum.data_as<float>()[0]);
  }
  for (int slot = 0; slot < kMicrobatches; ++slot) {
    std::optional<Tensor> grad;
    for (auto it = chunks.rbegin(); it != chunks.rend(); ++it) grad = (*it)->backward(ctx, slot, grad);
  }
  for (const Param& p : store.params()) {
    const auto* bytes = static_cast<const unsigned char*>(p.grad.data());
    step.grads.emplace_back(bytes, bytes + p.grad.bytes());
  }
  return step;
}

class RecomputeGradients : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(RecomputeGradients, AreBitwiseThoseWithoutRecompute) {
  const auto [dtype, two_chunks] = GetParam();
  const Step reference = train_step({}, dtype, two_chunks);
  const std::vector<ParamSpec> specs = build_param_specs(config_with({}, dtype));
  // The check has teeth: every parameter receives a gradient.
  Arena arena(Device::kCpu, "names");
  const ParamStore names(specs, 0, 1, dtype, arena);
  for (size_t i = 0; i < reference.grads.size(); ++i) {
    bool nonzero = false;
    for (unsigned char byte : reference.grads[i]) nonzero = nonzero || byte != 0;
    EXPECT_TRUE(nonzero) << names.params()[i].name();
  }
  for (const Mode& mode : recompute_modes()) {
    const Step step = train_step(mode.recompute, dtype, two_chunks);
    EXPECT_EQ(step.losses, reference.losses) << mode.name;
    ASSERT_EQ(step.grads.size(), reference.grads.size());
    for (size_t i = 0; i < step.grads.size(); ++i) {
      ASSERT_EQ(step.grads[i].size(), reference.grads[i].size());
      EXPECT_EQ(std::memcmp(step.grads[i].data(), reference.grads[i].data(), step.grads[i].size()), 0)
          << mode.name << ": gradient of " << names.params()[i].name() << " differs";
    }
    // Recompute saves memory: the model's arena shrinks by exactly what the report says.
    const ModelConfig config = config_with(mode.recompute, dtype);
    int64_t saved = 0;
    for (int64_t layers : two_chunks ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{kLayers}) {
      const ActivationMemory memory = activation_memory(config, 1, false, kBatch, layers);
      EXPECT_LT(memory.total_bytes(kMicrobatches), memory.total_bytes_without_recompute(kMicrobatches)) << mode.name;
      saved += memory.total_bytes_without_recompute(kMicrobatches) - memory.total_bytes(kMicrobatches);
    }
    EXPECT_EQ(reference.model_bytes - step.model_bytes, saved) << mode.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, RecomputeGradients,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == DType::kFloat32 ? "fp32" : "bf16") +
                                  (std::get<1>(info.param) ? "_two_chunks" : "_one_chunk");
                         });

// The report against the formula of activation_memory.h on GPT-2 124M's layer (h 768, 12 heads,
// ffn 3072, s 1024, b 8, BF16), whose tensors are all multiples of the arena's alignment.
TEST(ActivationMemory, MatchesTheFormula) {
  ModelConfig c;
  c.num_layers = 12;
  c.hidden_size = 768;
  c.ffn_hidden_size = 3072;
  c.num_attention_heads = 12;
  c.kv_channels = 64;
  c.seq_length = 1024;
  c.max_position_embeddings = 1024;
  c.vocab_size = 50257;
  c.padded_vocab_size = 50304;
  c.dtype = DType::kBFloat16;
  const int64_t s = 1024, b = 8, h = 768, heads = 12, p = 768, f = 3072, t = 2, r = s * b;
  const int64_t everything = t * (4 * r * h + 4 * r * p + 2 * r * f) + 16 * r + 4 * b * heads * s;
  const int64_t attention_core = t * r * p + 4 * b * heads * s;
  EXPECT_EQ(everything, 201'850'880);  // 192.5 MiB per layer and microbatch

  const ActivationMemory none = activation_memory(c, 1, false, b, 12);
  EXPECT_EQ(none.layer_stash_bytes_without_recompute, everything);
  EXPECT_EQ(none.stash_bytes(), 12 * everything);
  EXPECT_EQ(none.recompute_buffer_bytes, 0);

  c.recompute = {.granularity = RecomputeGranularity::kSelective};
  const ActivationMemory selective = activation_memory(c, 1, false, b, 12);
  EXPECT_EQ(selective.layer_stash_bytes[5], everything - attention_core);
  EXPECT_EQ(selective.recompute_buffer_bytes, attention_core);

  c.recompute = full(RecomputeMethod::kUniform, 1);
  const ActivationMemory per_layer = activation_memory(c, 1, false, b, 12);
  EXPECT_EQ(per_layer.layer_stash_bytes[0], t * r * h);  // 12 MiB: the layer's output only
  EXPECT_EQ(per_layer.recompute_buffer_bytes, everything - t * r * h);  // one set, no output

  c.recompute = full(RecomputeMethod::kUniform, 4);
  const ActivationMemory grouped = activation_memory(c, 1, false, b, 12);
  EXPECT_EQ(grouped.layer_stash_bytes, (std::vector<int64_t>{0, 0, 0, t * r * h, 0, 0, 0, t * r * h, 0, 0, 0, t * r * h}));
  EXPECT_EQ(grouped.recompute_buffer_bytes, 4 * everything - t * r * h);

  c.recompute = full(RecomputeMethod::kBlock, 2);
  const ActivationMemory block = activation_memory(c, 1, false, b, 6);  // a stage of 6 layers
  EXPECT_EQ(block.layer_stash_bytes, (std::vector<int64_t>{t * r * h, t * r * h, everything, everything, everything,
                                                           everything}));

  // TP 2 with sequence parallelism: the residual stream is split, and the norms' outputs are kept
  // split (backward gathers them again, as Megatron): every term is halved (Korthikanti et al.'s
  // 34 s b h / t with the attention core).
  c.recompute = {};
  const int64_t rl = r / 2;
  const ActivationMemory split = activation_memory(c, 2, true, b, 1);
  EXPECT_EQ(split.layer_stash_bytes[0], t * (4 * rl * h + 4 * r * p / 2 + 2 * r * f / 2) + 16 * rl + 4 * b * heads / 2 * s);
  EXPECT_EQ(split.layer_stash_bytes[0], everything / 2);
}

}  // namespace
}  // namespace gpt

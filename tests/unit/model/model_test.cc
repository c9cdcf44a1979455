#include <cmath>
#include <vector>

#include "core/arena.h"
#include "core/memory.h"
#include "gtest/gtest.h"
#include "support/tiny_model.h"
#include "model/gpt_model.h"
#include "parallel/comm/self_communicator.h"

namespace gpt {
namespace {

ModelConfig tiny_config(int64_t tp = 1) { return testing_support::tiny_model(2, 6, tp); }

TEST(ParamRegistry, MegatronNamesShapesAndPadding) {
  EXPECT_EQ(padded_vocab_size(50257, 128, 1), 50304);
  EXPECT_EQ(padded_vocab_size(50257, 128, 2), 50432);
  EXPECT_EQ(padded_vocab_size(512, 128, 4), 512);
  const std::vector<ParamSpec> specs = build_param_specs(tiny_config());
  EXPECT_EQ(specs.size(), 2u + 2 * 12 + 2);
  EXPECT_EQ(specs.front().name, "embedding.word_embeddings.weight");
  EXPECT_EQ(specs.front().global_shape, (std::vector<int64_t>{40, 16}));
  EXPECT_EQ(specs[4].name, "decoder.layers.0.self_attention.linear_qkv.weight");
  EXPECT_EQ(specs[4].global_shape, (std::vector<int64_t>{48, 16}));
  EXPECT_EQ(specs[4].split, TensorSplit::kRows);
  EXPECT_EQ(specs[6].name, "decoder.layers.0.self_attention.linear_proj.weight");
  EXPECT_EQ(specs[6].split, TensorSplit::kColumns);
  EXPECT_FALSE(specs[7].weight_decay);  // bias
  EXPECT_TRUE(specs[6].weight_decay);
  EXPECT_EQ(specs.back().name, "decoder.final_layernorm.bias");
  // Residual-writing layers use the scaled std (Megatron's output_layer_init_method).
  EXPECT_FLOAT_EQ(specs[6].init_std, 0.02f / std::sqrt(4.0f));
}

TEST(ParamStore, InitializationIsLayoutIndependent) {
  const ModelConfig config = tiny_config(2);
  const std::vector<ParamSpec> specs = build_param_specs(config);
  Arena arena(Device::kCpu, "test");
  ParamStore whole(specs, 0, 1, DType::kFloat32, arena);
  whole.initialize(42);
  for (int rank = 0; rank < 2; ++rank) {
    ParamStore part(specs, rank, 2, DType::kFloat32, arena);
    part.initialize(42);
    for (const Param& p : part.params()) {
      const Param& g = whole.get(p.name());
      const int64_t rows = p.local_shape[0], cols = p.local_shape.rank() == 2 ? p.local_shape[1] : 1;
      const int64_t global_cols = g.local_shape.rank() == 2 ? g.local_shape[1] : 1;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(p.value.data_as<float>()[r * cols + c],
                    g.value.data_as<float>()[(p.row_offset + r) * global_cols + p.column_offset + c])
              << p.name() << " rank " << rank;
        }
      }
    }
  }
  // A different seed gives different weights; norms start at one and biases at zero.
  ParamStore other(specs, 0, 1, DType::kFloat32, arena);
  other.initialize(43);
  EXPECT_NE(other.get("embedding.word_embeddings.weight").value.data_as<float>()[0],
            whole.get("embedding.word_embeddings.weight").value.data_as<float>()[0]);
  EXPECT_EQ(whole.get("decoder.final_layernorm.weight").value.data_as<float>()[3], 1.0f);
  EXPECT_EQ(whole.get("decoder.layers.1.mlp.linear_fc1.bias").value.data_as<float>()[3], 0.0f);
}

TEST(ParamStore, ReverseOrderAndAlignedSlices) {
  const std::vector<ParamSpec> specs = build_param_specs(tiny_config());
  Arena arena(Device::kCpu, "test");
  ParamStore store(specs, 0, 1, DType::kBFloat16, arena);
  EXPECT_EQ(store.params().front().name(), "decoder.final_layernorm.bias");
  EXPECT_EQ(store.params().back().name(), "embedding.word_embeddings.weight");
  for (const Param& p : store.params()) EXPECT_EQ(p.flat_offset % 64, 0) << p.name();
}

// The whole model's loss gradient against central finite differences of its own forward pass:
// a check of forward/backward consistency that needs no external reference.
TEST(GptModel, GradientsMatchFiniteDifferences) {
  const ModelConfig config = tiny_config();
  const std::vector<ParamSpec> specs = build_param_specs(config);
  Context ctx = Context::cpu(1);
  Arena arena(Device::kCpu, "test");
  ParamStore store(specs, 0, 1, DType::kFloat32, arena);
  store.initialize(3);
  // Larger weights than the 0.02 init make every path matter to the loss.
  for (Param& p : store.params()) {
    if (p.spec->init == ParamInit::kNormal) {
      for (int64_t i = 0; i < p.numel(); ++i) p.value.data_as<float>()[i] *= 10.0f;
    }
  }
  SelfCommunicator tp_group("tensor-parallel");
  TensorParallel tp(tp_group, false);
  const int64_t batch = 2;
  GptModel model(config, store, tp, batch, 1, {0, config.num_layers, true, true}, arena);
  std::vector<int32_t> tokens(batch * config.seq_length), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7 + 3) % config.vocab_size);
    targets[i] = static_cast<int32_t>((i * 5 + 1) % config.vocab_size);
  }
  model.load_tokens(ctx, 0, tokens);
  model.load_targets(ctx, 0, targets);
  Tensor loss_sum = arena.allocate_zeroed(DType::kFloat32, {1});
  auto loss = [&]() {
    zero_tensor(loss_sum);
    model.forward(ctx, 0, std::nullopt, {loss_sum, std::nullopt});
    return static_cast<double>(loss_sum.data_as<float>()[0]);
  };
  store.zero_grads(ctx);
  zero_tensor(loss_sum);
  model.forward(ctx, 0, std::nullopt, {loss_sum, 1.0f});  // gradient of the summed loss
  model.backward(ctx, 0, std::nullopt);
  for (const Param& p : store.params()) {
    for (int64_t i : {int64_t{0}, p.numel() / 2, p.numel() - 1}) {
      float& weight = p.value.data_as<float>()[i];
      const float saved = weight;
      const float step = 1e-2f * std::max(1.0f, std::fabs(saved));
      weight = saved + step;
      const double up = loss();
      weight = saved - step;
      const double down = loss();
      weight = saved;
      const double numeric = (up - down) / (2.0 * step);
      const double analytic = p.grad.data_as<float>()[i];
      EXPECT_NEAR(analytic, numeric, 2e-2 * std::max(1.0, std::fabs(numeric))) << p.name() << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace gpt

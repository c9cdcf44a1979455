#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/arena.h"
#include "gtest/gtest.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/log_norms.h"
#include "optim/lr_schedule.h"
#include "parallel/comm/self_communicator.h"

namespace gpt {
namespace {

TEST(LrSchedule, MegatronWarmupAndDecayInSamples) {
  // warmup 2 iterations, decay 10 iterations, gbs 8: steps counted in samples.
  LrScheduleConfig c{.max_lr = 1.0, .min_lr = 0.1, .warmup_steps = 16, .decay_steps = 80, .style = LrDecayStyle::kLinear};
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 0), 0.0);    // first update of a warmed-up run uses lr 0
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 8), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 16), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 48), 0.1 + 0.5 * 0.9);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 80), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 800), 0.1);
  c.style = LrDecayStyle::kCosine;
  EXPECT_NEAR(learning_rate_at(c, 48), 0.1 + 0.5 * (std::cos(M_PI * 0.5) + 1.0) * 0.9, 1e-15);
  EXPECT_NEAR(learning_rate_at(c, 80), 0.1, 1e-15);
  c.style = LrDecayStyle::kConstant;
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 50), 1.0);
  c.warmup_steps = 0;
  c.style = LrDecayStyle::kLinear;
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 0), 1.0);    // no warmup: the first update uses max lr
}

TEST(GradClip, MegatronCoefficient) {
  EXPECT_FLOAT_EQ(clip_coefficient(2.0, 1.0), static_cast<float>(1.0 / (2.0 + 1e-6)));
  EXPECT_FLOAT_EQ(clip_coefficient(0.5, 1.0), 1.0f);
  EXPECT_FLOAT_EQ(clip_coefficient(100.0, 0.0), 1.0f);
}

ParamSpec spec(const char* name, std::vector<int64_t> shape) {
  ParamSpec s;
  s.name = name;
  s.global_shape = std::move(shape);
  s.weight_decay = s.global_shape.size() > 1;
  s.split = TensorSplit::kReplicated;
  return s;
}

TEST(AdamW, DecaysOnlyMatricesAndKeepsBf16CopyOfMaster) {
  Context ctx = Context::cpu(1);
  Arena arena(Device::kCpu, "test");
  ParamStore store({spec("w", {2, 3}), spec("b", {3})}, 0, 1, DType::kBFloat16, arena);
  Param& w = store.get("w");
  Param& b = store.get("b");
  for (int i = 0; i < 6; ++i) w.value.data_as<bf16>()[i] = bf16(0.5f + i);
  for (int i = 0; i < 3; ++i) b.value.data_as<bf16>()[i] = bf16(-1.0f + i);
  AdamW adam(ctx, store, {.beta1 = 0.9f, .beta2 = 0.99f, .epsilon = 1e-8f, .weight_decay = 0.5f}, arena);
  // Zero gradients: the only change is weight decay, p *= 1 - lr * wd, on the matrix alone.
  adam.step(ctx, 0.1f, 1.0f);
  for (int i = 0; i < 6; ++i) {
    const float master = adam.master().data_as<float>()[w.flat_offset + i];
    EXPECT_FLOAT_EQ(master, (0.5f + i) * (1.0f - 0.05f));
    EXPECT_EQ(w.value.data_as<bf16>()[i].bits, bf16(master).bits);
  }
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(b.value.data_as<bf16>()[i].to_float(), -1.0f + i);
  EXPECT_EQ(adam.steps_taken(), 1);
}

// One multi-tensor step is the per-parameter update it replaced, bit for bit, in FP32 (the master
// is the parameter) and BF16 (a separate master and a rounded copy).
TEST(AdamW, StepEqualsOneUpdatePerParameter) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Context ctx = Context::cpu(1);
    Arena arena(Device::kCpu, "test");
    ParamStore store({spec("w", {5, 7}), spec("b", {7}), spec("v", {3, 2})}, 0, 1, dtype, arena);
    store.initialize(7);
    const AdamWConfig config{.beta1 = 0.8f, .beta2 = 0.95f, .epsilon = 1e-6f, .weight_decay = 0.1f};
    AdamW adam(ctx, store, config, arena);
    // The reference: the state copied, then adamw_update on each parameter's range.
    const int64_t total = adam.master().numel();
    Tensor master = arena.allocate(DType::kFloat32, {total});
    Tensor m = arena.allocate_zeroed(DType::kFloat32, {total}), v = arena.allocate_zeroed(DType::kFloat32, {total});
    Tensor values = arena.allocate(dtype, {total});
    ops::copy(ctx, master, adam.master());
    ops::copy(ctx, values, store.flat_values());
    for (int step = 1; step <= 3; ++step) {
      for (int64_t i = 0; i < total; ++i) store.flat_grads().data_as<float>()[i] = std::sin(0.37f * i + step);
      adam.step(ctx, 1e-2f, 0.5f);
      for (const Param& param : store.params()) {
        auto range = [&](const Tensor& t) { return t.flat_range(param.flat_offset, param.numel()); };
        const ops::AdamWStep s{.learning_rate = 1e-2f, .beta1 = config.beta1, .beta2 = config.beta2,
                               .epsilon = config.epsilon, .weight_decay = param.spec->weight_decay ? 0.1f : 0.0f,
                               .step = step, .grad_scale = 0.5f};
        const bool separate = dtype != DType::kFloat32;
        ops::adamw_update(ctx, s, separate ? range(master) : range(values), range(store.flat_grads()), range(m), range(v),
                          separate ? range(values) : Tensor());
      }
    }
    const Tensor& reference_master = dtype == DType::kFloat32 ? values : master;
    EXPECT_EQ(std::memcmp(adam.master().data(), reference_master.data(), reference_master.bytes()), 0);
    EXPECT_EQ(std::memcmp(adam.exp_avg().data(), m.data(), m.bytes()), 0);
    EXPECT_EQ(std::memcmp(adam.exp_avg_sq().data(), v.data(), v.bytes()), 0);
    EXPECT_EQ(std::memcmp(store.flat_values().data(), values.data(), values.bytes()), 0);
  }
}

// --decoupled-lr: the parameters marked embedding_or_output (the word embedding, output_layer.weight)
// take the second rate, the others the first, each bit for bit the per-parameter update at its rate,
// with the state on the device and half of it offloaded (the host step splits the same way).
TEST(AdamW, DecoupledRateOnTheEmbeddingAndOutputParameters) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (double fraction : {0.0, 0.5}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " offload fraction " + std::to_string(fraction));
      Context ctx = Context::cpu(1);
      Arena arena(Device::kCpu, "test");
      std::vector<ParamSpec> specs = {spec("embedding", {4, 3}), spec("w", {5, 7}), spec("b", {7}), spec("output", {4, 3})};
      specs[0].embedding_or_output = specs[3].embedding_or_output = true;
      ParamStore store(specs, 0, 1, dtype, arena);
      store.initialize(7);
      const AdamWConfig config{.beta1 = 0.8f, .beta2 = 0.95f, .epsilon = 1e-6f, .weight_decay = 0.1f,
                               .offload_fraction = fraction};
      AdamW adam(ctx, store, config, arena);
      const int64_t total = store.flat_values().numel();
      Tensor master = arena.allocate(DType::kFloat32, {total});
      Tensor m = arena.allocate_zeroed(DType::kFloat32, {total}), v = arena.allocate_zeroed(DType::kFloat32, {total});
      Tensor values = arena.allocate(dtype, {total});
      ops::cast(ctx, master, store.flat_values());
      ops::copy(ctx, values, store.flat_values());
      constexpr float kRate = 1e-2f, kDecoupledRate = 3e-2f;
      for (int step = 1; step <= 3; ++step) {
        for (int64_t i = 0; i < total; ++i) store.flat_grads().data_as<float>()[i] = std::sin(0.37f * i + step);
        adam.step(ctx, kRate, kDecoupledRate, 0.5f);
        for (const Param& param : store.params()) {
          auto range = [&](const Tensor& t) { return t.flat_range(param.flat_offset, param.numel()); };
          const ops::AdamWStep s{.learning_rate = param.spec->embedding_or_output ? kDecoupledRate : kRate,
                                 .beta1 = config.beta1, .beta2 = config.beta2, .epsilon = config.epsilon,
                                 .weight_decay = param.spec->weight_decay ? 0.1f : 0.0f, .step = step,
                                 .grad_scale = 0.5f};
          const bool separate = dtype != DType::kFloat32;
          ops::adamw_update(ctx, s, separate ? range(master) : range(values), range(store.flat_grads()), range(m),
                            range(v), separate ? range(values) : Tensor());
        }
      }
      EXPECT_EQ(std::memcmp(store.flat_values().data(), values.data(), values.bytes()), 0);
    }
  }
}

// Offloading any fraction of the state to the host (the ranges split where the fraction ends, even
// inside a parameter) changes nothing: the parameters, the checkpoint pieces of the state and the
// parameter norm equal the device optimizer's bit for bit, in FP32 and BF16, and reset_from_params
// restarts both alike.
TEST(AdamW, OffloadedStateStepsBitIdentically) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (double fraction : {0.3, 0.5, 1.0}) {
      // --overlap-cpu-optimizer-d2h-h2d: the host parts (three owned ranges, like three buckets'
      // shards) pipelined, a part's copies while the host steps its neighbour.
      for (bool pipelined : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " fraction " + std::to_string(fraction) +
                     (pipelined ? " pipelined" : ""));
        Context ctx = Context::cpu(1);
        Arena arena(Device::kCpu, "test");
        const std::vector<ParamSpec> specs = {spec("w", {5, 7}), spec("b", {7}), spec("v", {3, 2})};
        ParamStore device_store(specs, 0, 1, dtype, arena), host_store(specs, 0, 1, dtype, arena);
        device_store.initialize(7);
        host_store.initialize(7);
        const AdamWConfig config{.beta1 = 0.8f, .beta2 = 0.95f, .epsilon = 1e-6f, .weight_decay = 0.1f};
        AdamWConfig offloaded = config;
        offloaded.offload_fraction = fraction;
        offloaded.overlap_host_copies = pipelined;
        const int64_t total = device_store.flat_values().numel();
        const std::vector<Range> owned = {{0, 9}, {9, 30}, {30, total}};
        AdamW on_device(ctx, device_store, config, arena, owned);
        AdamW on_host(ctx, host_store, offloaded, arena, owned);
        EXPECT_EQ(on_host.host_elements(), std::llround(fraction * static_cast<double>(total)));
        EXPECT_EQ(on_host.host_bytes_allocated(), AdamW::host_bytes(total, dtype, fraction));
        for (int step = 1; step <= 3; ++step) {
          for (ParamStore* store : {&device_store, &host_store}) {
            for (int64_t i = 0; i < total; ++i) store->flat_grads().data_as<float>()[i] = std::sin(0.37f * i + step);
          }
          on_device.step(ctx, 1e-2f, 0.5f);
          on_host.step(ctx, 1e-2f, 0.5f);
          if (step == 2) {
            on_device.reset_from_params(ctx);
            on_host.reset_from_params(ctx);
          }
        }
        EXPECT_EQ(std::memcmp(device_store.flat_values().data(), host_store.flat_values().data(),
                              device_store.flat_values().bytes()),
                  0);
        const std::vector<ShardedTensor> a = on_device.sharded_tensors(false), b = on_host.sharded_tensors(false);
        // The same elements under the same keys; pieces may be cut where the host part ends.
        std::map<std::string, std::vector<float>> by_key[2];
        for (int k = 0; k < 2; ++k) {
          for (const ShardedTensor& piece : k == 0 ? a : b) {
            std::vector<float>& values = by_key[k][piece.key];
            int64_t columns = piece.global_shape.size() == 2 ? piece.global_shape[1] : 1;
            values.resize(static_cast<size_t>(piece.global_shape[0] * columns), NAN);
            const int64_t piece_columns = piece.local_shape.size() == 2 ? piece.local_shape[1] : 1;
            for (int64_t e = 0; e < piece.data.numel(); ++e) {
              const int64_t row = piece.offsets[0] + e / piece_columns;
              const int64_t column = (piece.offsets.size() == 2 ? piece.offsets[1] : 0) + e % piece_columns;
              values[static_cast<size_t>(row * columns + column)] = piece.data.data_as<float>()[e];
            }
          }
        }
        EXPECT_EQ(by_key[0].size(), by_key[1].size());
        for (const auto& [key, values] : by_key[0]) {
          ASSERT_TRUE(by_key[1].count(key)) << key;
          EXPECT_EQ(std::memcmp(values.data(), by_key[1][key].data(), values.size() * sizeof(float)), 0) << key;
        }
        Tensor scratch = arena.allocate_zeroed(DType::kFloat32, {1});
        EXPECT_EQ(global_params_norm(ctx, device_store, on_device, scratch, {}),
                  global_params_norm(ctx, host_store, on_host, scratch, {}));
      }
    }
  }
}

TEST(GradNorm, CountsTensorParallelDuplicatesOnce) {
  Context ctx = Context::cpu(1);
  Arena arena(Device::kCpu, "test");
  ParamSpec split = spec("split", {4, 2});
  split.split = TensorSplit::kRows;
  // TP rank 1 of 2: the replicated parameter is a duplicate and must not count.
  ParamStore store({split, spec("replicated", {3})}, 1, 2, DType::kFloat32, arena);
  for (int i = 0; i < 4; ++i) store.get("split").grad.data_as<float>()[i] = 1.0f;
  for (int i = 0; i < 3; ++i) store.get("replicated").grad.data_as<float>()[i] = 10.0f;
  Tensor scratch = arena.allocate(DType::kFloat32, {1});
  EXPECT_DOUBLE_EQ(global_grad_norm(ctx, store, scratch, {}), 2.0);
}

// --log-params-norm and --log-num-zeros-in-grad against hand-computed values: TP duplicates do not
// count, the alignment padding between parameters is not counted as zeros, and with owned ranges
// (a ZeRO shard) only the owned elements count, read from the BF16 run's FP32 master copy.
TEST(LogNorms, ParamsNormAndZeroGradientsCountWhatTheRankOwns) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Context ctx = Context::cpu(1);
    Arena arena(Device::kCpu, "test");
    ParamSpec split = spec("split", {4, 2});
    split.split = TensorSplit::kRows;
    // TP rank 1 of 2: "split" holds rows 2-3 (4 elements), "replicated" is a duplicate.
    ParamStore store({split, spec("replicated", {3}), spec("split_bias", {5})}, 1, 2, dtype, arena);
    Param& mine = store.get("split");
    store.get("split_bias").counts_in_grad_norm = true;  // counted as if it were split (a second counted parameter)
    auto set = [&](Param& param, std::vector<float> values) {
      for (size_t i = 0; i < values.size(); ++i) {
        if (dtype == DType::kFloat32) param.value.data_as<float>()[i] = values[i];
        else param.value.data_as<bf16>()[i] = bf16(values[i]);
      }
    };
    set(mine, {1, 2, 2, 4});
    set(store.get("replicated"), {100, 100, 100});
    set(store.get("split_bias"), {0, 0, 0, 0, 0});
    Tensor scratch = arena.allocate(DType::kFloat32, {1});
    Tensor count = arena.allocate(DType::kInt64, {1});
    {
      AdamW adam(ctx, store, {}, arena);
      EXPECT_DOUBLE_EQ(global_params_norm(ctx, store, adam, scratch, {}), 5.0);  // sqrt(1 + 4 + 4 + 16)
    }
    // Gradients: two zeros in "split", all zeros in the duplicate (not counted), one zero in the bias.
    const float split_grads[4] = {0, 1, 0, 3};
    const float bias_grads[5] = {1, 1, 0, 1, 1};
    for (int i = 0; i < 4; ++i) mine.grad.data_as<float>()[i] = split_grads[i];
    for (int i = 0; i < 3; ++i) store.get("replicated").grad.data_as<float>()[i] = 0;
    for (int i = 0; i < 5; ++i) store.get("split_bias").grad.data_as<float>()[i] = bias_grads[i];
    EXPECT_EQ(count_zero_gradients(ctx, store, {}, count, {}), 3);
    // A shard owning "split"'s last two elements and the bias's first three.
    const int64_t split_at = mine.flat_offset, bias_at = store.get("split_bias").flat_offset;
    const std::vector<Range> owned = {{split_at + 2, split_at + 4}, {bias_at, bias_at + 3}};
    EXPECT_EQ(count_zero_gradients(ctx, store, owned, count, {}), 2);
    AdamW sharded(ctx, store, {}, arena, owned);
    EXPECT_DOUBLE_EQ(global_params_norm(ctx, store, sharded, scratch, {}), std::sqrt(4.0 + 16.0));
  }
}

}  // namespace
}  // namespace gpt

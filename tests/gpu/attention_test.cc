// cuDNN's fused flash attention against the CPU reference attention (FP32 math on the same BF16
// inputs): causal masks, odd sequence lengths, head dims 32/64/128, forward output, softmax
// statistics and every input gradient; the deterministic backward reruns bit for bit; the default
// dispatch of ops::attention_* is the cuDNN path. The GPU reference kernels against the CPU with
// grouped-query attention and attention dropout (the same mask), their backward rerunning bit for
// bit, and the dispatch falling back to them for GQA or dropout. GPU outputs are poisoned (NaN)
// before each run.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "core/float16.h"
#include "core/memory.h"
#include "gpu/gpu_test_util.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/ops.h"

namespace gpt {
namespace {

class AttentionGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GPT_REQUIRE_GPU();
    gpu_ = std::make_unique<Context>(Context::gpu(0));
  }

  // A host tensor of random values and its GPU copy.
  std::pair<Tensor, Tensor> random(DType dtype, Shape shape, float stddev) {
    Tensor host = host_.allocate(dtype, shape), device = device_.allocate(dtype, shape);
    std::normal_distribution<float> normal(0.0f, stddev);
    for (int64_t i = 0; i < host.numel(); ++i) {
      if (dtype == DType::kBFloat16) host.data_as<bf16>()[i] = bf16(normal(rng_));
      else if (dtype == DType::kFloat16) host.data_as<fp16>()[i] = fp16(normal(rng_));
      else host.data_as<float>()[i] = normal(rng_);
    }
    copy_bytes(Device::kCuda, device.data(), Device::kCpu, host.data(), host.bytes());
    return {host, device};
  }
  // A GPU tensor filled with NaN (all-ones bytes), so that unwritten elements fail the comparison.
  Tensor poisoned(DType dtype, Shape shape) {
    Tensor device = device_.allocate(dtype, shape);
    std::vector<uint8_t> poison(device.bytes(), 0xff);
    copy_bytes(Device::kCuda, device.data(), Device::kCpu, poison.data(), poison.size());
    return device;
  }
  std::vector<float> download(const Tensor& device) {
    gpu_->synchronize();
    std::vector<uint8_t> bytes(device.bytes());
    copy_bytes(Device::kCpu, bytes.data(), Device::kCuda, device.data(), bytes.size());
    std::vector<float> values(static_cast<size_t>(device.numel()));
    for (size_t i = 0; i < values.size(); ++i) {
      if (is_float16_dtype(device.dtype())) {
        uint16_t bits;
        std::memcpy(&bits, bytes.data() + 2 * i, 2);
        values[i] = device.dtype() == DType::kFloat16 ? fp16_bits_to_float(bits) : bf16_bits_to_float(bits);
      } else {
        std::memcpy(&values[i], bytes.data() + 4 * i, 4);
      }
    }
    return values;
  }
  static float host_value(const Tensor& t, int64_t i) {
    if (t.dtype() == DType::kFloat16) return t.data_as<fp16>()[i].to_float();
    return t.dtype() == DType::kBFloat16 ? t.data_as<bf16>()[i].to_float() : t.data_as<float>()[i];
  }
  // ||gpu - cpu|| / ||cpu||; infinite when any GPU value is not finite.
  double error(const Tensor& device, const Tensor& host) {
    const std::vector<float> ours = download(device);
    double difference = 0, reference = 0;
    for (int64_t i = 0; i < host.numel(); ++i) {
      if (!std::isfinite(ours[static_cast<size_t>(i)])) return INFINITY;
      const double d = ours[static_cast<size_t>(i)] - host_value(host, i);
      difference += d * d;
      reference += static_cast<double>(host_value(host, i)) * host_value(host, i);
    }
    return std::sqrt(difference / reference);
  }
  std::vector<uint8_t> raw(const Tensor& device) {
    gpu_->synchronize();
    std::vector<uint8_t> bytes(device.bytes());
    copy_bytes(Device::kCpu, bytes.data(), Device::kCuda, device.data(), bytes.size());
    return bytes;
  }

  Context cpu_ = Context::cpu(2);
  std::unique_ptr<Context> gpu_;
  Arena host_{Device::kCpu, "host"};
  Arena device_{Device::kCuda, "device"};
  std::mt19937 rng_{20261123};
};

class CudnnAttentionTest : public AttentionGpuTest {
 protected:
  void SetUp() override {
    GPT_REQUIRE_GPU();
    if (cuda_ops::cudnn_version() == 0) GTEST_SKIP() << "this build has no cuDNN";
    AttentionGpuTest::SetUp();
  }
};

using ReferenceAttentionTest = AttentionGpuTest;

TEST_F(CudnnAttentionTest, MatchesTheCpuReferenceWithCausalMaskAndOddLengths) {
  std::printf("cuDNN %d\n", cuda_ops::cudnn_version());
  // Both 16-bit types cuDNN's graphs take (BF16 and FP16).
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    for (auto [s, b, heads, d] : {std::tuple{1, 2, 2, 64}, std::tuple{37, 2, 3, 64}, std::tuple{129, 1, 2, 128},
                                  std::tuple{256, 2, 4, 64}, std::tuple{301, 3, 2, 32}, std::tuple{1024, 1, 2, 64}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(t) << " s=" << s << " b=" << b << " heads=" << heads
                                      << " d=" << d);
      const float scale = 1.0f / std::sqrt(static_cast<float>(d));
      auto [qkv_cpu, qkv_gpu] = random(t, {s, b, heads, 3 * d}, 1.0f);
      Tensor out_cpu = host_.allocate(t, {s, b, heads, d});
      Tensor lse_cpu = host_.allocate(DType::kFloat32, {b, heads, s});
      Tensor out_gpu = poisoned(t, {s, b, heads, d});
      Tensor lse_gpu = poisoned(DType::kFloat32, {b, heads, s});
      ASSERT_TRUE(cuda_ops::cudnn_attention_applies(qkv_gpu, out_gpu, ops::DropoutMask{}));
      ops::attention_forward(cpu_, out_cpu, lse_cpu, qkv_cpu, scale, ops::DropoutMask{});
      cuda_ops::cudnn_attention_forward(*gpu_, out_gpu, lse_gpu, qkv_gpu, scale);
      EXPECT_LE(error(out_gpu, out_cpu), 1e-2);
      EXPECT_LE(error(lse_gpu, lse_cpu), 1e-3);

      auto [dout_cpu, dout_gpu] = random(t, {s, b, heads, d}, 1.0f);
      Tensor dqkv_cpu = host_.allocate(t, {s, b, heads, 3 * d});
      ops::attention_backward(cpu_, dqkv_cpu, dout_cpu, qkv_cpu, out_cpu, lse_cpu, scale, ops::DropoutMask{});
      for (bool deterministic : {false, true}) {
        gpu_->set_options({.deterministic = deterministic, .fused_attention = true});
        Tensor dqkv_gpu = poisoned(t, {s, b, heads, 3 * d});
        cuda_ops::cudnn_attention_backward(*gpu_, dqkv_gpu, dout_gpu, qkv_gpu, out_gpu, lse_gpu, scale);
        EXPECT_LE(error(dqkv_gpu, dqkv_cpu), 2e-2) << "deterministic=" << deterministic;
      }
    }
  }
}

TEST_F(CudnnAttentionTest, DeterministicBackwardRerunsBitForBit) {
  const int64_t s = 512, b = 2, heads = 4, d = 64;
  const float scale = 0.125f;
  auto qkv = random(DType::kBFloat16, {s, b, heads, 3 * d}, 1.0f).second;
  auto dout = random(DType::kBFloat16, {s, b, heads, d}, 1.0f).second;
  Tensor out = poisoned(DType::kBFloat16, {s, b, heads, d}), lse = poisoned(DType::kFloat32, {b, heads, s});
  gpu_->set_options({.deterministic = true, .fused_attention = true});
  cuda_ops::cudnn_attention_forward(*gpu_, out, lse, qkv, scale);
  Tensor first = poisoned(DType::kBFloat16, {s, b, heads, 3 * d});
  Tensor second = poisoned(DType::kBFloat16, {s, b, heads, 3 * d});
  cuda_ops::cudnn_attention_backward(*gpu_, first, dout, qkv, out, lse, scale);
  cuda_ops::cudnn_attention_backward(*gpu_, second, dout, qkv, out, lse, scale);
  EXPECT_EQ(raw(first), raw(second));
}

TEST_F(CudnnAttentionTest, OpsDispatchUsesCudnnForBf16AndTheReferenceWhenAsked) {
  const int64_t s = 200, b = 2, heads = 2, d = 64;
  const float scale = 0.125f;
  auto qkv = random(DType::kBFloat16, {s, b, heads, 3 * d}, 1.0f).second;
  Tensor direct = poisoned(DType::kBFloat16, {s, b, heads, d}), lse = poisoned(DType::kFloat32, {b, heads, s});
  Tensor dispatched = poisoned(DType::kBFloat16, {s, b, heads, d});
  cuda_ops::cudnn_attention_forward(*gpu_, direct, lse, qkv, scale);
  ops::attention_forward(*gpu_, dispatched, lse, qkv, scale, ops::DropoutMask{});
  EXPECT_EQ(raw(direct), raw(dispatched)) << "the default dispatch is not the cuDNN path";
  gpu_->set_options({.deterministic = false, .fused_attention = false});
  Tensor reference = poisoned(DType::kBFloat16, {s, b, heads, d});
  ops::attention_forward(*gpu_, reference, lse, qkv, scale, ops::DropoutMask{});
  cuda_ops::reference_attention_forward(*gpu_, dispatched, lse, qkv, scale, ops::DropoutMask{});
  EXPECT_EQ(raw(reference), raw(dispatched)) << "fused_attention=false must run the reference kernel";
}

// qkv [s, b, groups, (q + 2) d] and out [s, b, groups q, d].
struct GqaShape {
  int64_t s, b, groups, q, d;
  Shape qkv() const { return {s, b, groups, (q + 2) * d}; }
  Shape out() const { return {s, b, groups * q, d}; }
  Shape lse() const { return {b, groups * q, s}; }
};

ops::DropoutMask attention_dropout(float probability) {
  return {.probability = probability,
          .key = ops::dropout_key(42, 3, 5, ops::DropoutSite::kAttentionProbabilities),
          .sample_offset = 6,
          .row_offset = 4};
}

TEST_F(ReferenceAttentionTest, GroupedQueriesAndDropoutMatchTheCpu) {
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    for (const GqaShape sh : {GqaShape{37, 2, 2, 4, 64}, GqaShape{65, 1, 1, 4, 32}, GqaShape{29, 2, 3, 1, 16},
                              GqaShape{1, 2, 2, 2, 8}}) {
      for (const float p : {0.0f, 0.1f, 0.5f}) {
        SCOPED_TRACE(testing::Message() << (t == DType::kBFloat16 ? "bf16" : "fp32") << " s=" << sh.s
                                        << " b=" << sh.b << " groups=" << sh.groups << " q=" << sh.q
                                        << " d=" << sh.d << " p=" << p);
        const ops::DropoutMask mask = attention_dropout(p);
        const float scale = 1.0f / std::sqrt(static_cast<float>(sh.d));
        auto [qkv_cpu, qkv_gpu] = random(t, sh.qkv(), 1.0f);
        Tensor out_cpu = host_.allocate(t, sh.out()), lse_cpu = host_.allocate(DType::kFloat32, sh.lse());
        Tensor out_gpu = poisoned(t, sh.out()), lse_gpu = poisoned(DType::kFloat32, sh.lse());
        ops::attention_forward(cpu_, out_cpu, lse_cpu, qkv_cpu, scale, mask);
        cuda_ops::reference_attention_forward(*gpu_, out_gpu, lse_gpu, qkv_gpu, scale, mask);
        const double out_error = error(out_gpu, out_cpu), lse_error = error(lse_gpu, lse_cpu);
        EXPECT_LE(out_error, t == DType::kBFloat16 ? 1e-2 : 1e-5);
        EXPECT_LE(lse_error, 1e-5);
        auto [dout_cpu, dout_gpu] = random(t, sh.out(), 1.0f);
        Tensor dqkv_cpu = host_.allocate(t, sh.qkv()), dqkv_gpu = poisoned(t, sh.qkv());
        ops::attention_backward(cpu_, dqkv_cpu, dout_cpu, qkv_cpu, out_cpu, lse_cpu, scale, mask);
        cuda_ops::reference_attention_backward(*gpu_, dqkv_gpu, dout_gpu, qkv_gpu, out_gpu, lse_gpu, scale, mask);
        const double grad_error = error(dqkv_gpu, dqkv_cpu);
        EXPECT_LE(grad_error, t == DType::kBFloat16 ? 2e-2 : 1e-4);
        std::printf("%s s=%lld groups=%lld q=%lld d=%lld p=%.1f: out %.2e lse %.2e dqkv %.2e\n",
                    t == DType::kBFloat16 ? "bf16" : "fp32", static_cast<long long>(sh.s),
                    static_cast<long long>(sh.groups), static_cast<long long>(sh.q), static_cast<long long>(sh.d), p,
                    out_error, lse_error, grad_error);
      }
    }
  }
}

TEST_F(ReferenceAttentionTest, GroupedBackwardWithDropoutRerunsBitForBit) {
  const GqaShape sh{300, 2, 2, 4, 64};
  const ops::DropoutMask mask = attention_dropout(0.1f);
  auto qkv = random(DType::kBFloat16, sh.qkv(), 1.0f).second;
  auto dout = random(DType::kBFloat16, sh.out(), 1.0f).second;
  Tensor out = poisoned(DType::kBFloat16, sh.out()), lse = poisoned(DType::kFloat32, sh.lse());
  cuda_ops::reference_attention_forward(*gpu_, out, lse, qkv, 0.125f, mask);
  Tensor first = poisoned(DType::kBFloat16, sh.qkv()), second = poisoned(DType::kBFloat16, sh.qkv());
  cuda_ops::reference_attention_backward(*gpu_, first, dout, qkv, out, lse, 0.125f, mask);
  cuda_ops::reference_attention_backward(*gpu_, second, dout, qkv, out, lse, 0.125f, mask);
  EXPECT_EQ(raw(first), raw(second));
}

// With fused attention allowed, grouped queries or dropout still run the reference kernels.
TEST_F(ReferenceAttentionTest, OpsDispatchFallsBackForGroupedQueriesAndDropout) {
  gpu_->set_options({.deterministic = false, .fused_attention = true});
  for (const auto& [sh, p] : {std::pair{GqaShape{200, 2, 2, 2, 64}, 0.0f}, std::pair{GqaShape{200, 2, 4, 1, 64}, 0.1f},
                              std::pair{GqaShape{200, 2, 2, 2, 64}, 0.1f}}) {
    SCOPED_TRACE(testing::Message() << "q=" << sh.q << " p=" << p);
    const ops::DropoutMask mask = attention_dropout(p);
    auto qkv = random(DType::kBFloat16, sh.qkv(), 1.0f).second;
    auto dout = random(DType::kBFloat16, sh.out(), 1.0f).second;
    Tensor dispatched = poisoned(DType::kBFloat16, sh.out()), reference = poisoned(DType::kBFloat16, sh.out());
    Tensor lse = poisoned(DType::kFloat32, sh.lse()), reference_lse = poisoned(DType::kFloat32, sh.lse());
    EXPECT_FALSE(cuda_ops::cudnn_attention_applies(qkv, dispatched, mask));
    ops::attention_forward(*gpu_, dispatched, lse, qkv, 0.125f, mask);
    cuda_ops::reference_attention_forward(*gpu_, reference, reference_lse, qkv, 0.125f, mask);
    EXPECT_EQ(raw(dispatched), raw(reference));
    EXPECT_EQ(raw(lse), raw(reference_lse));
    Tensor grad = poisoned(DType::kBFloat16, sh.qkv()), reference_grad = poisoned(DType::kBFloat16, sh.qkv());
    ops::attention_backward(*gpu_, grad, dout, qkv, dispatched, lse, 0.125f, mask);
    cuda_ops::reference_attention_backward(*gpu_, reference_grad, dout, qkv, reference, reference_lse, 0.125f, mask);
    EXPECT_EQ(raw(grad), raw(reference_grad));
  }
}

}  // namespace
}  // namespace gpt

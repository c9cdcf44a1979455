// The reductions FP16 loss scaling and FP8 scaling read on the GPU, against the CPU backend on the
// same values: count_non_finite (the loss scaler's overflow check of the main gradients),
// count_zeros (--log-num-zeros-in-grad) and amax (FP8 scaling's amax, FP32 and BF16 inputs). The
// results are counts and a maximum, so GPU and CPU must agree exactly; sizes cover one block, many
// blocks and a tail, with the special values placed at both ends.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "core/float16.h"
#include "core/memory.h"
#include "gpu/gpu_test_util.h"
#include "kernels/ops.h"

namespace gpt {
namespace {

class ReductionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GPT_REQUIRE_GPU();
    gpu_ = std::make_unique<Context>(Context::gpu(0));
  }

  // `values` on the GPU, as FP32 or rounded to BF16.
  Tensor upload(const std::vector<float>& values, DType dtype) {
    Tensor t = device_.allocate(dtype, {static_cast<int64_t>(values.size())});
    if (dtype == DType::kFloat32) {
      copy_bytes(Device::kCuda, t.data(), Device::kCpu, values.data(), t.bytes());
    } else {
      std::vector<bf16> rounded;
      for (float v : values) rounded.push_back(bf16(v));
      copy_bytes(Device::kCuda, t.data(), Device::kCpu, rounded.data(), t.bytes());
    }
    return t;
  }
  Tensor host_copy(const std::vector<float>& values, DType dtype) {
    Tensor t = host_.allocate(dtype, {static_cast<int64_t>(values.size())});
    for (size_t i = 0; i < values.size(); ++i) {
      if (dtype == DType::kFloat32) t.data_as<float>()[i] = values[i];
      else t.data_as<bf16>()[i] = bf16(values[i]);
    }
    return t;
  }
  // One scalar result of `op` on both backends: `start` is the accumulator's initial value.
  template <typename T, typename Op>
  std::pair<T, T> both(const std::vector<float>& values, DType dtype, DType result, T start, Op op) {
    Tensor cpu_out = host_.allocate(result, {1}), gpu_out = device_.allocate(result, {1});
    *cpu_out.template data_as<T>() = start;
    copy_bytes(Device::kCuda, gpu_out.data(), Device::kCpu, &start, sizeof(T));
    op(cpu_, cpu_out, host_copy(values, dtype));
    op(*gpu_, gpu_out, upload(values, dtype));
    gpu_->synchronize();
    T back{};
    copy_bytes(Device::kCpu, &back, Device::kCuda, gpu_out.data(), sizeof(T));
    return {*cpu_out.template data_as<T>(), back};
  }

  std::vector<float> random(int64_t n, float scale) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng_);
    return v;
  }

  Context cpu_ = Context::cpu(1);
  std::unique_ptr<Context> gpu_;
  Arena host_{Device::kCpu, "host"};
  Arena device_{Device::kCuda, "device"};
  std::mt19937 rng_{46};
};

const int64_t kSizes[] = {1, 7, 1000, 65536 + 5, 1 << 20};

TEST_F(ReductionsTest, CountNonFiniteAndZerosAgreeExactly) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    std::vector<float> v = random(n, 1.0f);
    const auto count = [](Context& ctx, const Tensor& out, const Tensor& x) { ops::count_non_finite(ctx, out, x); };
    const auto zeros = [](Context& ctx, const Tensor& out, const Tensor& x) { ops::count_zeros(ctx, out, x); };
    auto [cpu_clean, gpu_clean] = both<int64_t>(v, DType::kFloat32, DType::kInt64, int64_t{0}, count);
    EXPECT_EQ(cpu_clean, 0);
    EXPECT_EQ(gpu_clean, 0);
    // Overflow at both ends and in the middle, a NaN, a negative infinity; zeros every 13th element.
    v.front() = inf;
    v.back() = -inf;
    v[v.size() / 2] = nan;
    for (size_t i = 3; i < v.size(); i += 13) v[i] = (i % 2) ? 0.0f : -0.0f;
    auto [cpu_bad, gpu_bad] = both<int64_t>(v, DType::kFloat32, DType::kInt64, int64_t{5}, count);
    EXPECT_EQ(gpu_bad, cpu_bad);
    EXPECT_EQ(cpu_bad, 5 + std::count_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); }));
    auto [cpu_zeros, gpu_zeros] = both<int64_t>(v, DType::kFloat32, DType::kInt64, int64_t{0}, zeros);
    EXPECT_EQ(gpu_zeros, cpu_zeros);
    EXPECT_EQ(cpu_zeros, std::count(v.begin(), v.end(), 0.0f));
  }
}

TEST_F(ReductionsTest, AmaxOfFp32AndBf16WithInfinityAndNan) {
  const auto amax = [](Context& ctx, const Tensor& out, const Tensor& x) { ops::amax(ctx, out, x); };
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n=" << n);
      std::vector<float> v = random(n, 3.0f);
      v.back() = -1e4f;  // the largest magnitude, negative, last
      auto [cpu, gpu] = both<float>(v, dtype, DType::kFloat32, 0.0f, amax);
      EXPECT_EQ(gpu, cpu);
      EXPECT_EQ(cpu, dtype == DType::kFloat32 ? 1e4f : bf16(1e4f).to_float());
      // The accumulator's earlier maximum stays when it is larger.
      auto [cpu_kept, gpu_kept] = both<float>(v, dtype, DType::kFloat32, 2e4f, amax);
      EXPECT_EQ(cpu_kept, 2e4f);
      EXPECT_EQ(gpu_kept, 2e4f);
      v.front() = -std::numeric_limits<float>::infinity();
      auto [cpu_inf, gpu_inf] = both<float>(v, dtype, DType::kFloat32, 0.0f, amax);
      EXPECT_EQ(cpu_inf, std::numeric_limits<float>::infinity());
      EXPECT_EQ(gpu_inf, cpu_inf);
      v[v.size() / 2] = std::numeric_limits<float>::quiet_NaN();
      auto [cpu_nan, gpu_nan] = both<float>(v, dtype, DType::kFloat32, 0.0f, amax);
      EXPECT_TRUE(std::isnan(cpu_nan));
      EXPECT_TRUE(std::isnan(gpu_nan)) << "NaN in the input must give NaN (delayed scaling then keeps its scale)";
    }
  }
}

}  // namespace
}  // namespace gpt

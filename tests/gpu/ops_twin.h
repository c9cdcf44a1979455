// The CUDA op tests' fixture: tensors held twice (host and GPU) with the same random contents,
// outputs poisoned with NaN on both sides, and the error of the GPU result against the CPU
// reference (||gpu - cpu|| / ||cpu||). Shared by ops_test.cc and rope_activation_test.cc.
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/arena.h"
#include "core/memory.h"
#include "gpu/gpu_test_util.h"
#include "kernels/ops.h"

namespace gpt::gpu_test {

// A tensor held twice, on the host and on the GPU, with the same contents.
struct Twin {
  Tensor cpu, gpu;
};

class OpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GPT_REQUIRE_GPU();
    gpu_ = std::make_unique<Context>(Context::gpu(0));
  }

  Twin make(DType dtype, Shape shape, float scale = 1.0f, float offset = 0.0f) {
    Twin t{host_.allocate(dtype, shape), device_.allocate(dtype, shape)};
    std::normal_distribution<float> normal(offset, scale);
    for (int64_t i = 0; i < t.cpu.numel(); ++i) {
      const float v = normal(rng_);
      if (dtype == DType::kFloat32) t.cpu.data_as<float>()[i] = v;
      else if (dtype == DType::kFloat16) t.cpu.data_as<fp16>()[i] = fp16(v);
      else t.cpu.data_as<bf16>()[i] = bf16(v);
    }
    upload(t);
    return t;
  }
  Twin tokens(Shape shape, int32_t low, int32_t high) {
    Twin t{host_.allocate(DType::kInt32, shape), device_.allocate(DType::kInt32, shape)};
    std::uniform_int_distribution<int32_t> uniform(low, high - 1);
    for (int64_t i = 0; i < t.cpu.numel(); ++i) t.cpu.data_as<int32_t>()[i] = uniform(rng_);
    upload(t);
    return t;
  }
  void upload(const Twin& t) { copy_bytes(Device::kCuda, t.gpu.data(), Device::kCpu, t.cpu.data(), t.cpu.bytes()); }
  // Output poisoned with NaN on both sides (all-ones bytes are NaN in float32, bfloat16 and float16).
  Twin output(DType dtype, Shape shape) {
    Twin t{host_.allocate(dtype, shape), device_.allocate(dtype, shape)};
    std::memset(t.cpu.data(), 0xff, t.cpu.bytes());
    std::vector<uint8_t> poison(t.cpu.bytes(), 0xff);
    copy_bytes(Device::kCuda, t.gpu.data(), Device::kCpu, poison.data(), poison.size());
    return t;
  }

  // Relative L2 error of the GPU result against the CPU result.
  double error(const Twin& t) {
    gpu_->synchronize();
    std::vector<uint8_t> back(t.gpu.bytes());
    copy_bytes(Device::kCpu, back.data(), Device::kCuda, t.gpu.data(), back.size());
    double difference = 0, reference = 0;
    for (int64_t i = 0; i < t.cpu.numel(); ++i) {
      float ours, ref;
      if (t.cpu.dtype() == DType::kFloat32) {
        ref = t.cpu.data_as<float>()[i];
        std::memcpy(&ours, back.data() + 4 * i, 4);
      } else {
        const bool half = t.cpu.dtype() == DType::kFloat16;
        ref = half ? t.cpu.data_as<fp16>()[i].to_float() : t.cpu.data_as<bf16>()[i].to_float();
        uint16_t bits;
        std::memcpy(&bits, back.data() + 2 * i, 2);
        ours = half ? fp16_bits_to_float(bits) : bf16_bits_to_float(bits);
      }
      if (!std::isfinite(ours)) return INFINITY;  // unwritten (poisoned) or broken
      difference += (ours - ref) * static_cast<double>(ours - ref);
      reference += static_cast<double>(ref) * ref;
    }
    return reference > 0 ? std::sqrt(difference / reference) : std::sqrt(difference);
  }

  static double tolerance(DType dtype) { return is_float16_dtype(dtype) ? 1e-2 : 1e-5; }

  // The GPU copy, read back.
  std::vector<uint8_t> download(const Tensor& gpu) {
    gpu_->synchronize();
    std::vector<uint8_t> back(gpu.bytes());
    copy_bytes(Device::kCpu, back.data(), Device::kCuda, gpu.data(), back.size());
    return back;
  }
  // The GPU result equals the CPU result bit for bit.
  bool identical(const Twin& t) {
    const std::vector<uint8_t> back = download(t.gpu);
    return std::memcmp(back.data(), t.cpu.data(), back.size()) == 0;
  }
  // Elements [offset, offset + shape.numel()) of both copies seen with `shape`: with an offset
  // that is not a multiple of the vector width, the views are misaligned (the scalar paths).
  static Twin part(const Twin& t, int64_t offset, Shape shape) {
    return {t.cpu.flat_range(offset, shape.numel()).view(shape), t.gpu.flat_range(offset, shape.numel()).view(shape)};
  }

  Context cpu_ = Context::cpu(1);
  std::unique_ptr<Context> gpu_;
  Arena host_{Device::kCpu, "host"};
  Arena device_{Device::kCuda, "device"};
  std::mt19937 rng_{1234};
};

inline constexpr DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

}  // namespace gpt::gpu_test

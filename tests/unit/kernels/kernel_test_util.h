// Helpers for the op tests: tensors filled from a seeded RNG, read back as double, and the
// relative L2 error ||got - want|| / ||want|| the tests assert on.
#pragma once

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/arena.h"
#include "core/float16.h"
#include "core/tensor.h"

namespace gpt::testing_util {

class TensorFactory {
 public:
  explicit TensorFactory(uint32_t seed = 1) : rng_(seed) {}

  // Normal(mean, std) values, stored in `dtype` (BF16 rounded to nearest even).
  Tensor random(DType dtype, Shape shape, double std = 1.0, double mean = 0.0) {
    Tensor t = arena_.allocate(dtype, shape);
    std::normal_distribution<double> normal(mean, std);
    for (int64_t i = 0; i < t.numel(); ++i) set(t, i, normal(rng_));
    return t;
  }
  // Filled with NaN, to catch elements an op fails to write.
  Tensor poisoned(DType dtype, Shape shape) {
    Tensor t = arena_.allocate(dtype, shape);
    for (int64_t i = 0; i < t.numel(); ++i) set(t, i, std::nan(""));
    return t;
  }
  Tensor ints(Shape shape, int32_t low, int32_t high) {
    Tensor t = arena_.allocate(DType::kInt32, shape);
    std::uniform_int_distribution<int32_t> uniform(low, high - 1);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<int32_t>()[i] = uniform(rng_);
    return t;
  }
  Tensor copy(const Tensor& source) {
    Tensor t = arena_.allocate(source.dtype(), source.shape());
    std::memcpy(t.data(), source.data(), source.bytes());
    return t;
  }

  static void set(const Tensor& t, int64_t i, double v) {
    if (t.dtype() == DType::kFloat32) t.data_as<float>()[i] = static_cast<float>(v);
    else if (t.dtype() == DType::kFloat16) t.data_as<fp16>()[i] = fp16(static_cast<float>(v));
    else t.data_as<bf16>()[i] = bf16(static_cast<float>(v));
  }

 private:
  std::mt19937 rng_;
  Arena arena_{Device::kCpu, "test"};
};

inline double at(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::kFloat16) return t.data_as<fp16>()[i].to_float();
  return t.dtype() == DType::kFloat32 ? t.data_as<float>()[i] : t.data_as<bf16>()[i].to_float();
}

inline std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = at(t, i);
  return v;
}

// Relative L2 error; infinite when `got` holds a non-finite value (unwritten, poisoned).
inline double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double difference = 0, reference = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    difference += (got[i] - want[i]) * (got[i] - want[i]);
    reference += want[i] * want[i];
  }
  return reference > 0 ? std::sqrt(difference / reference) : std::sqrt(difference);
}
inline double relative_error(const Tensor& got, const std::vector<double>& want) { return relative_error(values(got), want); }

// FP32 storage: only FP32 rounding; BF16 or FP16 storage: the output rounding dominates (FP16 has
// three more mantissa bits than BF16, so the same bound holds with room).
inline double tolerance(DType dtype) { return is_float16_dtype(dtype) ? 1e-2 : 1e-5; }

}  // namespace gpt::testing_util

// Non-owning tensor views: a pointer, a dtype, a row-major contiguous shape of up to 4 dims and
// the device the memory lives on. Memory is owned by Buffers and Arenas (core/arena.h).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace gpt {

class Shape {
 public:
  static constexpr int kMaxRank = 4;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int axis) const;
  int64_t numel() const;
  // Product of all dims but the last: the row count when the tensor is seen as a matrix.
  int64_t rows() const { return rank_ == 0 ? 1 : numel() / dims_[rank_ - 1]; }
  int64_t cols() const { return rank_ == 0 ? 1 : dims_[rank_ - 1]; }
  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }
  std::string to_string() const;

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, DType dtype, Shape shape, Device device)
      : data_(data), dtype_(dtype), shape_(shape), device_(device) {}

  bool defined() const { return data_ != nullptr; }
  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t size(int axis) const { return shape_[axis]; }
  int64_t numel() const { return shape_.numel(); }
  int64_t rows() const { return shape_.rows(); }
  int64_t cols() const { return shape_.cols(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  // Typed pointer; fatal if the dtype differs.
  template <typename T>
  T* data_as() const {
    GPT_CHECK(dtype_ == dtype_of<T>()) << "tensor is " << dtype_name(dtype_) << ", asked for "
                                       << dtype_name(dtype_of<T>());
    return static_cast<T*>(data_);
  }

  // Same memory, another shape with the same element count.
  Tensor view(Shape shape) const;
  // Rows [begin, end) along dim 0 (contiguous).
  Tensor slice(int64_t begin, int64_t end) const;
  // Elements [begin, begin + count) of the flattened tensor, as a 1-D view.
  Tensor flat_range(int64_t begin, int64_t count) const;
  // The tensor seen as a [rows, cols] matrix (all leading dims folded into rows).
  Tensor as_matrix() const { return view({rows(), cols()}); }

  std::string to_string() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kFloat32;
  Shape shape_;
  Device device_ = Device::kCpu;
};

}  // namespace gpt

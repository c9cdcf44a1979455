#include "core/tensor.h"

#include <sstream>

namespace gpt {

Shape::Shape(std::initializer_list<int64_t> dims) {
  GPT_CHECK_LE(static_cast<int>(dims.size()), kMaxRank);
  for (int64_t d : dims) {
    GPT_CHECK_GE(d, 0) << "negative dimension";
    dims_[rank_++] = d;
  }
}

int64_t Shape::operator[](int axis) const {
  if (axis < 0) axis += rank_;
  GPT_CHECK(axis >= 0 && axis < rank_) << "axis " << axis << " of shape " << to_string();
  return dims_[axis];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i] != other.dims_[i]) return false;
  }
  return true;
}

std::string Shape::to_string() const {
  std::ostringstream out;
  out << "[";
  for (int i = 0; i < rank_; ++i) out << (i ? ", " : "") << dims_[i];
  out << "]";
  return out.str();
}

Tensor Tensor::view(Shape shape) const {
  GPT_CHECK_EQ(shape.numel(), numel()) << "view " << shape.to_string() << " of " << to_string();
  return Tensor(data_, dtype_, shape, device_);
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  GPT_CHECK(rank() >= 1 && begin >= 0 && begin <= end && end <= size(0))
      << "slice [" << begin << ", " << end << ") of " << to_string();
  const int64_t row_elements = size(0) == 0 ? 0 : numel() / size(0);
  Shape shape;
  switch (rank()) {
    case 1: shape = Shape({end - begin}); break;
    case 2: shape = Shape({end - begin, size(1)}); break;
    case 3: shape = Shape({end - begin, size(1), size(2)}); break;
    default: shape = Shape({end - begin, size(1), size(2), size(3)}); break;
  }
  auto* base = static_cast<char*>(data_) + begin * row_elements * dtype_size(dtype_);
  return Tensor(base, dtype_, shape, device_);
}

Tensor Tensor::flat_range(int64_t begin, int64_t count) const {
  GPT_CHECK(begin >= 0 && count >= 0 && begin + count <= numel())
      << "range [" << begin << ", " << begin + count << ") of " << to_string();
  auto* base = static_cast<char*>(data_) + begin * dtype_size(dtype_);
  return Tensor(base, dtype_, Shape({count}), device_);
}

std::string Tensor::to_string() const {
  std::ostringstream out;
  out << "Tensor(" << dtype_name(dtype_) << shape_.to_string() << ", " << device_name(device_) << ")";
  return out.str();
}

}  // namespace gpt

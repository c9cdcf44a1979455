// NumPy .npy files (format version 1.0, little-endian, C order) for the cached dataset indices, so
// that they can be inspected with numpy.load and are the files numpy.save writes (Megatron's cache).
// 1-D and 2-D int32, int64 and uint32 arrays; a reader asks for one element type and refuses others.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace gpt {

template <typename T>
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<T> values;
};

// Written to a temporary name and renamed, so a reader never sees a partial file; a failed write
// removes the temporary.
template <typename T>
absl::Status write_npy(const std::string& path, const std::vector<int64_t>& shape, const std::vector<T>& values);
template <typename T>
absl::StatusOr<NpyArray<T>> read_npy(const std::string& path);

}  // namespace gpt

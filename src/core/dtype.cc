#include "core/dtype.h"

namespace gpt {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "unknown";
}

std::string_view device_name(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

}  // namespace gpt

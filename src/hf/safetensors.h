// Reading and writing safetensors files (Hugging Face's format: an 8-byte little-endian header
// length, a JSON header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {string: string}}, then the data). The reader trusts nothing in the header: every entry's dtype
// must be known, its byte range must lie inside the file's data, match its shape and dtype size
// exactly and overlap no other entry; any violation is an error naming the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace gpt {

struct SafetensorsEntry {
  std::string dtype;  // "F32", "BF16", "F16", "F64"
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte range in the data section
};

class SafetensorsFile {
 public:
  // Reads and checks the header (the data is read on demand).
  static absl::StatusOr<SafetensorsFile> open(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's values widened to FP32 (exactly, for F32 / BF16 / F16).
  absl::StatusOr<std::vector<float>> read_float32(const std::string& name) const;

 private:
  std::string path_;
  int64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// One FP32 tensor to write.
struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Writes FP32 tensors (in the given order, data 8-byte aligned) to `path` + ".tmp" and renames it.
absl::Status write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                               const std::map<std::string, std::string>& metadata);

// JSON string literal.
std::string json_quote(const std::string& text);

}  // namespace gpt

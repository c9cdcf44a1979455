// A small RAII layer over the HDF5 C API: files, float32 / int32 / int64 datasets with shapes,
// and scalar attributes. Errors opening or reading a file are absl::Status naming the file and
// the dataset (a user can fix them); HDF5's own error stack printing is silenced.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace gpt {

template <typename T>
struct HostArray {
  std::vector<int64_t> shape;
  std::vector<T> values;
};

class Hdf5File {
 public:
  static absl::StatusOr<Hdf5File> create(const std::string& path);  // truncates
  static absl::StatusOr<Hdf5File> open_read_only(const std::string& path);
  Hdf5File(Hdf5File&& other) noexcept;
  Hdf5File& operator=(Hdf5File&& other) noexcept;
  Hdf5File(const Hdf5File&) = delete;
  Hdf5File& operator=(const Hdf5File&) = delete;
  ~Hdf5File();

  const std::string& path() const { return path_; }

  // Datasets; `name` may contain '/' (intermediate groups are created).
  absl::Status write(const std::string& name, const std::vector<int64_t>& shape, const float* values);
  absl::Status write(const std::string& name, const std::vector<int64_t>& shape, const int32_t* values);
  absl::Status write(const std::string& name, const std::vector<int64_t>& shape, const int64_t* values);
  absl::StatusOr<HostArray<float>> read_float(const std::string& name) const;
  absl::StatusOr<HostArray<int32_t>> read_int32(const std::string& name) const;
  absl::StatusOr<HostArray<int64_t>> read_int64(const std::string& name) const;
  bool contains(const std::string& name) const;

  // Scalar attributes on the root group.
  absl::Status set_attribute(const std::string& name, double value);
  absl::Status set_attribute(const std::string& name, int64_t value);
  absl::Status set_attribute(const std::string& name, const std::string& value);
  absl::StatusOr<double> attribute_double(const std::string& name) const;
  absl::StatusOr<int64_t> attribute_int(const std::string& name) const;
  absl::StatusOr<std::string> attribute_string(const std::string& name) const;

 private:
  Hdf5File(std::string path, int64_t handle) : path_(std::move(path)), handle_(handle) {}
  std::string path_;
  int64_t handle_ = -1;  // hid_t
};

}  // namespace gpt

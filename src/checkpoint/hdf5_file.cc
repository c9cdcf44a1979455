#include "checkpoint/hdf5_file.h"

#include <hdf5.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace gpt {
namespace {

void silence_hdf5_errors() {
  static const bool silenced = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)silenced;
}

// Closes an HDF5 identifier with the matching close function at scope exit.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() {
    if (id_ >= 0) closer_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  Closer closer_;
};

absl::Status write_dataset(hid_t file, const std::string& path, const std::string& name,
                           const std::vector<int64_t>& shape, hid_t file_type, hid_t memory_type, const void* data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space(shape.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose);
  Handle link_properties(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(link_properties.get(), 1);
  Handle dataset(H5Dcreate2(file, name.c_str(), file_type, space.get(), link_properties.get(), H5P_DEFAULT, H5P_DEFAULT),
                 H5Dclose);
  if (!dataset.ok()) return absl::InternalError(absl::StrCat(path, ": cannot create dataset '", name, "'"));
  if (H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    return absl::InternalError(absl::StrCat(path, ": cannot write dataset '", name, "'"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<HostArray<T>> read_dataset(hid_t file, const std::string& path, const std::string& name,
                                          hid_t memory_type) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0) {
    return absl::NotFoundError(absl::StrCat(path, ": no dataset '", name, "'"));
  }
  Handle dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dataset.ok()) return absl::DataLossError(absl::StrCat(path, ": cannot open dataset '", name, "'"));
  Handle space(H5Dget_space(dataset.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) return absl::DataLossError(absl::StrCat(path, ": bad dataspace for '", name, "'"));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  HostArray<T> result;
  int64_t count = 1;
  for (hsize_t d : dims) {
    result.shape.push_back(static_cast<int64_t>(d));
    count *= static_cast<int64_t>(d);
  }
  result.values.resize(static_cast<size_t>(count));
  if (count > 0 && H5Dread(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, result.values.data()) < 0) {
    return absl::DataLossError(absl::StrCat(path, ": cannot read dataset '", name, "' (corrupt or truncated file?)"));
  }
  return result;
}

absl::Status write_attribute(hid_t file, const std::string& path, const std::string& name, hid_t type,
                             const void* value) {
  if (H5Aexists(file, name.c_str()) > 0) H5Adelete(file, name.c_str());
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attribute(H5Acreate2(file, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attribute.ok() || H5Awrite(attribute.get(), type, value) < 0) {
    return absl::InternalError(absl::StrCat(path, ": cannot write attribute '", name, "'"));
  }
  return absl::OkStatus();
}

absl::Status read_attribute(hid_t file, const std::string& path, const std::string& name, hid_t type, void* value) {
  if (H5Aexists(file, name.c_str()) <= 0) return absl::NotFoundError(absl::StrCat(path, ": no attribute '", name, "'"));
  Handle attribute(H5Aopen(file, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!attribute.ok() || H5Aread(attribute.get(), type, value) < 0) {
    return absl::DataLossError(absl::StrCat(path, ": cannot read attribute '", name, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Hdf5File> Hdf5File::create(const std::string& path) {
  silence_hdf5_errors();
  const hid_t handle = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (handle < 0) return absl::PermissionDeniedError(absl::StrCat("cannot create HDF5 file ", path));
  return Hdf5File(path, handle);
}

absl::StatusOr<Hdf5File> Hdf5File::open_read_only(const std::string& path) {
  silence_hdf5_errors();
  const hid_t handle = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (handle < 0) return absl::NotFoundError(absl::StrCat("cannot open HDF5 file ", path, " (missing or not HDF5)"));
  return Hdf5File(path, handle);
}

Hdf5File::Hdf5File(Hdf5File&& other) noexcept : path_(std::move(other.path_)), handle_(std::exchange(other.handle_, -1)) {}

Hdf5File& Hdf5File::operator=(Hdf5File&& other) noexcept {
  if (this != &other) {
    if (handle_ >= 0) H5Fclose(handle_);
    path_ = std::move(other.path_);
    handle_ = std::exchange(other.handle_, -1);
  }
  return *this;
}

Hdf5File::~Hdf5File() {
  if (handle_ >= 0) H5Fclose(handle_);
}

absl::Status Hdf5File::write(const std::string& name, const std::vector<int64_t>& shape, const float* values) {
  return write_dataset(handle_, path_, name, shape, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, values);
}
absl::Status Hdf5File::write(const std::string& name, const std::vector<int64_t>& shape, const int32_t* values) {
  return write_dataset(handle_, path_, name, shape, H5T_STD_I32LE, H5T_NATIVE_INT32, values);
}
absl::Status Hdf5File::write(const std::string& name, const std::vector<int64_t>& shape, const int64_t* values) {
  return write_dataset(handle_, path_, name, shape, H5T_STD_I64LE, H5T_NATIVE_INT64, values);
}

absl::StatusOr<HostArray<float>> Hdf5File::read_float(const std::string& name) const {
  return read_dataset<float>(handle_, path_, name, H5T_NATIVE_FLOAT);
}
absl::StatusOr<HostArray<int32_t>> Hdf5File::read_int32(const std::string& name) const {
  return read_dataset<int32_t>(handle_, path_, name, H5T_NATIVE_INT32);
}
absl::StatusOr<HostArray<int64_t>> Hdf5File::read_int64(const std::string& name) const {
  return read_dataset<int64_t>(handle_, path_, name, H5T_NATIVE_INT64);
}

bool Hdf5File::contains(const std::string& name) const { return H5Lexists(handle_, name.c_str(), H5P_DEFAULT) > 0; }

absl::Status Hdf5File::set_attribute(const std::string& name, double value) {
  return write_attribute(handle_, path_, name, H5T_NATIVE_DOUBLE, &value);
}
absl::Status Hdf5File::set_attribute(const std::string& name, int64_t value) {
  return write_attribute(handle_, path_, name, H5T_NATIVE_INT64, &value);
}
absl::Status Hdf5File::set_attribute(const std::string& name, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), value.empty() ? 1 : value.size());
  return write_attribute(handle_, path_, name, type.get(), value.empty() ? "" : value.data());
}

absl::StatusOr<double> Hdf5File::attribute_double(const std::string& name) const {
  double value = 0;
  GPT_RETURN_IF_ERROR(read_attribute(handle_, path_, name, H5T_NATIVE_DOUBLE, &value));
  return value;
}
absl::StatusOr<int64_t> Hdf5File::attribute_int(const std::string& name) const {
  int64_t value = 0;
  GPT_RETURN_IF_ERROR(read_attribute(handle_, path_, name, H5T_NATIVE_INT64, &value));
  return value;
}
absl::StatusOr<std::string> Hdf5File::attribute_string(const std::string& name) const {
  if (H5Aexists(handle_, name.c_str()) <= 0) return absl::NotFoundError(absl::StrCat(path_, ": no attribute '", name, "'"));
  Handle attribute(H5Aopen(handle_, name.c_str(), H5P_DEFAULT), H5Aclose);
  Handle type(H5Aget_type(attribute.get()), H5Tclose);
  const size_t size = H5Tget_size(type.get());
  std::string value(size, '\0');
  if (H5Aread(attribute.get(), type.get(), value.data()) < 0) {
    return absl::DataLossError(absl::StrCat(path_, ": cannot read attribute '", name, "'"));
  }
  while (!value.empty() && value.back() == '\0') value.pop_back();
  return value;
}

}  // namespace gpt

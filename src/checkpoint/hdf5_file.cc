#include "checkpoint/hdf5_file.h"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <cstring>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/fletcher32.h"

namespace gpt {
namespace {

// HDF5's automatic error-stack printing off, for the calling thread: a thread-safe HDF5 keeps the
// setting per thread, so the --async-save writer thread needs its own (without it a full disk
// printed a 125-line stack before the one error line).
//
// And no clean-up by HDF5 at exit (H5dont_atexit, before the library starts): every file this
// program keeps is closed and synced explicitly (close_and_sync), while HDF5's exit-time clean-up
// of a file a failed write left behind (a full disk) flushed it again and died with SIGSEGV after
// the error had been reported; the process must exit with the error's status instead.
void silence_hdf5_errors() {
  static const bool no_atexit = [] {
    H5dont_atexit();
    return true;
  }();
  (void)no_atexit;
  thread_local const bool silenced = [] {
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
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, -1)), closer_(other.closer_) {}
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


// The file type of a dtype: little-endian IEEE types, and BF16 as the upper half of an IEEE
// single (see the header). The caller closes a BF16 type; the predefined ones must not be closed,
// so this returns a Handle that closes only what it created.
hid_t make_bf16_type() {
  const hid_t type = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(type, 15, 7, 8, 0, 7);
  H5Tset_offset(type, 0);
  H5Tset_precision(type, 16);
  H5Tset_size(type, 2);
  H5Tset_ebias(type, 127);
  return type;
}

// FP16: IEEE binary16 (sign 15, exponent 10..14 with bias 15, mantissa 0..9), built the same way
// (HDF5 before 1.14.4 has no predefined half type).
hid_t make_fp16_type() {
  const hid_t type = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(type, 15, 10, 5, 0, 10);
  H5Tset_offset(type, 0);
  H5Tset_precision(type, 16);
  H5Tset_size(type, 2);
  H5Tset_ebias(type, 15);
  return type;
}

herr_t close_nothing(hid_t) { return 0; }

Handle file_type_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return Handle(H5T_IEEE_F32LE, close_nothing);
    case DType::kBFloat16: return Handle(make_bf16_type(), H5Tclose);
    case DType::kFloat16: return Handle(make_fp16_type(), H5Tclose);
    case DType::kInt32: return Handle(H5T_STD_I32LE, close_nothing);
    case DType::kInt64: return Handle(H5T_STD_I64LE, close_nothing);
  }
  return Handle(-1, close_nothing);
}

// In memory the same layouts in native byte order (x86 and aarch64 are little-endian, so the
// file types serve; BF16 needs its own type either way).
Handle memory_type_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return Handle(H5T_NATIVE_FLOAT, close_nothing);
    case DType::kBFloat16: return Handle(make_bf16_type(), H5Tclose);
    case DType::kFloat16: return Handle(make_fp16_type(), H5Tclose);
    case DType::kInt32: return Handle(H5T_NATIVE_INT32, close_nothing);
    case DType::kInt64: return Handle(H5T_NATIVE_INT64, close_nothing);
  }
  return Handle(-1, close_nothing);
}

absl::StatusOr<DType> dtype_of_type(hid_t type) {
  const H5T_class_t type_class = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (type_class == H5T_FLOAT && size == 4) return DType::kFloat32;
  if (type_class == H5T_FLOAT && size == 2 && H5Tget_ebias(type) == 127) return DType::kBFloat16;
  if (type_class == H5T_FLOAT && size == 2 && H5Tget_ebias(type) == 15) return DType::kFloat16;
  if (type_class == H5T_INTEGER && size == 4 && H5Tget_sign(type) == H5T_SGN_2) return DType::kInt32;
  if (type_class == H5T_INTEGER && size == 8 && H5Tget_sign(type) == H5T_SGN_2) return DType::kInt64;
  return absl::DataLossError("unsupported element type");
}

std::vector<hsize_t> to_hsize(const std::vector<int64_t>& values) { return {values.begin(), values.end()}; }

// Chunks of at most about 2^20 elements (4 MiB of FP32), whole rows at a time and dividing the
// rows evenly (HDF5 allocates whole chunks, so a last chunk mostly empty would waste disk): large
// enough that the checksum and chunk index cost nothing measurable, small enough that a slice
// reads little extra.
std::vector<hsize_t> chunk_shape(const std::vector<int64_t>& shape) {
  constexpr int64_t kChunkElements = int64_t{1} << 20;
  std::vector<hsize_t> chunk(shape.size(), 1);
  int64_t inner = 1;
  for (size_t d = shape.size(); d-- > 1;) {
    chunk[d] = static_cast<hsize_t>(std::max<int64_t>(shape[d], 1));
    inner *= std::max<int64_t>(shape[d], 1);
  }
  if (!shape.empty()) {
    const int64_t rows = std::max<int64_t>(shape[0], 1);
    const int64_t rows_per_chunk = std::max<int64_t>(kChunkElements / inner, 1);
    const int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
    chunk[0] = static_cast<hsize_t>((rows + chunks - 1) / chunks);
  }
  return chunk;
}

std::string shape_text(const std::vector<int64_t>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) absl::StrAppend(&text, i ? ", " : "", values[i]);
  return text + "]";
}

// Selects [offsets, offsets + counts) of the dataset's space; an error if it is not inside.
absl::Status select_slab(hid_t space, const std::string& path, const std::string& name,
                         const std::vector<int64_t>& offsets, const std::vector<int64_t>& counts) {
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  bool inside = offsets.size() == dims.size() && counts.size() == dims.size();
  for (size_t d = 0; inside && d < dims.size(); ++d) {
    inside = offsets[d] >= 0 && counts[d] >= 0 && static_cast<hsize_t>(offsets[d] + counts[d]) <= dims[d];
  }
  if (!inside) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": slice at ", shape_text(offsets), " of ", shape_text(counts),
                                                   " is not inside dataset '", name, "'"));
  }
  if (dims.empty()) return absl::OkStatus();
  const std::vector<hsize_t> start = to_hsize(offsets), count = to_hsize(counts);
  if (H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0) {
    return absl::InternalError(absl::StrCat(path, ": cannot select a slice of '", name, "'"));
  }
  return absl::OkStatus();
}

// A dataset opened for reading or writing a slice: it exists and holds `dtype`, the slice is
// selected in its file space, and the memory side describes a dense row-major buffer.
struct Slab {
  Handle dataset, file_space, memory_space, memory_type;
};

absl::StatusOr<Slab> open_slab(hid_t file, const std::string& path, const std::string& name,
                               const std::vector<int64_t>& offsets, const std::vector<int64_t>& counts, DType dtype) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0) {
    return absl::NotFoundError(absl::StrCat(path, ": no dataset '", name, "'"));
  }
  Handle dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dataset.ok()) return absl::DataLossError(absl::StrCat(path, ": cannot open dataset '", name, "'"));
  Handle stored_type(H5Dget_type(dataset.get()), H5Tclose);
  const absl::StatusOr<DType> stored = dtype_of_type(stored_type.get());
  if (!stored.ok() || *stored != dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": dataset '", name, "' is not of type ", std::string(dtype_name(dtype))));
  }
  Handle file_space(H5Dget_space(dataset.get()), H5Sclose);
  GPT_RETURN_IF_ERROR(select_slab(file_space.get(), path, name, offsets, counts));
  const std::vector<hsize_t> count = to_hsize(counts);
  Handle memory_space(count.empty() ? H5Screate(H5S_SCALAR)
                                    : H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr),
                      H5Sclose);
  return Slab{std::move(dataset), std::move(file_space), std::move(memory_space), memory_type_of(dtype)};
}

// Appends the full paths of the datasets under `group` (recursively).
herr_t collect_dataset(hid_t, const char* name, const H5O_info_t* info, void* out) {
  if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
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

absl::StatusOr<Hdf5File> Hdf5File::open_read_write(const std::string& path) {
  silence_hdf5_errors();
  const hid_t handle = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (handle < 0) return absl::NotFoundError(absl::StrCat("cannot open HDF5 file ", path, " for writing"));
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

absl::Status Hdf5File::create_dataset(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                                      bool checksum) {
  const std::vector<hsize_t> dims = to_hsize(shape);
  Handle space(shape.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose);
  Handle link_properties(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(link_properties.get(), 1);
  Handle create_properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  // Filters need a chunked layout, and chunks need a non-empty, non-scalar shape.
  if (checksum && !shape.empty() && numel > 0) {
    const std::vector<hsize_t> chunk = chunk_shape(shape);
    H5Pset_chunk(create_properties.get(), static_cast<int>(chunk.size()), chunk.data());
    H5Pset_fletcher32(create_properties.get());
  }
  const Handle type = file_type_of(dtype);
  Handle dataset(H5Dcreate2(handle_, name.c_str(), type.get(), space.get(), link_properties.get(),
                            create_properties.get(), H5P_DEFAULT),
                 H5Dclose);
  if (!dataset.ok()) return absl::InternalError(absl::StrCat(path_, ": cannot create dataset '", name, "'"));
  return absl::OkStatus();
}

absl::Status Hdf5File::write_checksummed(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                                         const void* values, int threads) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (shape.empty() || shape.size() > 2 || numel == 0) {
    GPT_RETURN_IF_ERROR(create_dataset(name, dtype, shape, /*checksum=*/true));
    if (numel == 0) return absl::OkStatus();
    return write_slab(name, std::vector<int64_t>(shape.size(), 0), shape, dtype, values);
  }
  GPT_RETURN_IF_ERROR(create_dataset(name, dtype, shape, /*checksum=*/true));
  Handle dataset(H5Dopen2(handle_, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dataset.ok()) return absl::NotFoundError(absl::StrCat(path_, ": no dataset '", name, "'"));
  const std::vector<hsize_t> chunk = chunk_shape(shape);
  const int64_t rows = shape[0];
  const int64_t row_bytes = static_cast<int64_t>(dtype_size(dtype)) * (shape.size() == 2 ? shape[1] : 1);
  const int64_t chunk_rows = static_cast<int64_t>(chunk[0]);
  const int64_t chunk_bytes = chunk_rows * row_bytes;  // a partial last chunk is padded with zeros
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  const auto* source = static_cast<const unsigned char*>(values);
  // Groups of chunks: prepared (copy + checksum) in parallel, then written in order.
  const int64_t group = std::max<int64_t>(1, 4 * threads);
  std::vector<std::vector<unsigned char>> buffers(static_cast<size_t>(std::min(group, chunks)));
  for (int64_t first = 0; first < chunks; first += group) {
    const int64_t count = std::min(group, chunks - first);
    std::atomic<int64_t> next{0};
    auto prepare = [&] {
      for (int64_t i = next++; i < count; i = next++) {
        const int64_t c = first + i;
        const int64_t valid = std::min(chunk_rows, rows - c * chunk_rows) * row_bytes;
        std::vector<unsigned char>& buffer = buffers[static_cast<size_t>(i)];
        buffer.assign(static_cast<size_t>(chunk_bytes + 4), 0);
        std::memcpy(buffer.data(), source + c * chunk_rows * row_bytes, static_cast<size_t>(valid));
        const uint32_t checksum = fletcher32(buffer.data(), static_cast<size_t>(chunk_bytes));
        for (int b = 0; b < 4; ++b) buffer[static_cast<size_t>(chunk_bytes + b)] = static_cast<unsigned char>(checksum >> (8 * b));
      }
    };
    std::vector<std::thread> workers;
    for (int w = 1; w < std::min<int64_t>(threads, count); ++w) workers.emplace_back(prepare);
    prepare();
    for (std::thread& worker : workers) worker.join();
    for (int64_t i = 0; i < count; ++i) {
      hsize_t offset[2] = {static_cast<hsize_t>((first + i) * chunk_rows), 0};
      const std::vector<unsigned char>& buffer = buffers[static_cast<size_t>(i)];
      if (H5Dwrite_chunk(dataset.get(), H5P_DEFAULT, 0, offset, buffer.size(), buffer.data()) < 0) {
        return absl::DataLossError(absl::StrCat(path_, ": cannot write dataset '", name, "' (disk full?)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Hdf5File::write_slab(const std::string& name, const std::vector<int64_t>& offsets,
                                  const std::vector<int64_t>& counts, DType dtype, const void* values) {
  GPT_ASSIGN_OR_RETURN(const Slab slab, open_slab(handle_, path_, name, offsets, counts, dtype));
  if (H5Dwrite(slab.dataset.get(), slab.memory_type.get(), slab.memory_space.get(), slab.file_space.get(), H5P_DEFAULT,
               values) < 0) {
    return absl::DataLossError(absl::StrCat(path_, ": cannot write dataset '", name, "' (disk full?)"));
  }
  return absl::OkStatus();
}

absl::Status Hdf5File::read_slab(const std::string& name, const std::vector<int64_t>& offsets,
                                 const std::vector<int64_t>& counts, DType dtype, void* out) const {
  GPT_ASSIGN_OR_RETURN(const Slab slab, open_slab(handle_, path_, name, offsets, counts, dtype));
  if (H5Dread(slab.dataset.get(), slab.memory_type.get(), slab.memory_space.get(), slab.file_space.get(), H5P_DEFAULT,
              out) < 0) {
    return absl::DataLossError(absl::StrCat(path_, ": cannot read dataset '", name,
                                            "': checksum mismatch or truncated file"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Hdf5File::DatasetInfo> Hdf5File::dataset_info(const std::string& name) const {
  if (H5Lexists(handle_, name.c_str(), H5P_DEFAULT) <= 0) {
    return absl::NotFoundError(absl::StrCat(path_, ": no dataset '", name, "'"));
  }
  Handle dataset(H5Dopen2(handle_, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dataset.ok()) return absl::DataLossError(absl::StrCat(path_, ": cannot open dataset '", name, "'"));
  DatasetInfo info;
  Handle type(H5Dget_type(dataset.get()), H5Tclose);
  const absl::StatusOr<DType> dtype = dtype_of_type(type.get());
  if (!dtype.ok()) return absl::DataLossError(absl::StrCat(path_, ": dataset '", name, "' has an unsupported type"));
  info.dtype = *dtype;
  Handle space(H5Dget_space(dataset.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  info.shape.assign(dims.begin(), dims.end());
  Handle properties(H5Dget_create_plist(dataset.get()), H5Pclose);
  const H5D_layout_t layout = H5Pget_layout(properties.get());
  info.is_virtual = layout == H5D_VIRTUAL;
  if (layout == H5D_CHUNKED) {
    for (int f = 0; f < H5Pget_nfilters(properties.get()); ++f) {
      unsigned flags = 0;
      size_t elements = 0;
      unsigned filter_config = 0;
      if (H5Pget_filter2(properties.get(), static_cast<unsigned>(f), &flags, &elements, nullptr, 0, nullptr,
                         &filter_config) == H5Z_FILTER_FLETCHER32) {
        info.checksummed = true;
      }
    }
  }
  return info;
}

absl::StatusOr<Hdf5File::ChunkIndex> Hdf5File::chunk_index(const std::string& name) const {
  GPT_ASSIGN_OR_RETURN(const DatasetInfo info, dataset_info(name));
  Handle dataset(H5Dopen2(handle_, name.c_str(), H5P_DEFAULT), H5Dclose);
  Handle properties(H5Dget_create_plist(dataset.get()), H5Pclose);
  if (info.shape.empty() || info.shape.size() > 2 || H5Pget_layout(properties.get()) != H5D_CHUNKED) {
    return absl::NotFoundError(absl::StrCat(path_, ": '", name, "' is not chunked in rows"));
  }
  hsize_t chunk[2] = {0, 0};
  H5Pget_chunk(properties.get(), 2, chunk);
  ChunkIndex index;
  index.dtype = info.dtype;
  index.rows = info.shape[0];
  index.columns = info.shape.size() == 2 ? info.shape[1] : 1;
  index.chunk_rows = static_cast<int64_t>(chunk[0]);
  index.fletcher32 = info.checksummed;
  if (info.shape.size() == 2 && static_cast<int64_t>(chunk[1]) != index.columns) {
    return absl::NotFoundError(absl::StrCat(path_, ": '", name, "' is not chunked in whole rows"));
  }
  Handle space(H5Dget_space(dataset.get()), H5Sclose);
  hsize_t count = 0;
  if (H5Dget_num_chunks(dataset.get(), space.get(), &count) < 0) {
    return absl::DataLossError(absl::StrCat(path_, ": cannot index the chunks of '", name, "'"));
  }
  const int64_t expected = index.chunk_rows > 0 ? (index.rows + index.chunk_rows - 1) / index.chunk_rows : 0;
  if (static_cast<int64_t>(count) != expected) {
    return absl::DataLossError(absl::StrCat(path_, ": '", name, "' has ", count, " chunks stored of ", expected));
  }
  index.addresses.assign(static_cast<size_t>(count), 0);
  index.sizes.assign(static_cast<size_t>(count), 0);
  for (hsize_t c = 0; c < count; ++c) {
    hsize_t offset[2] = {0, 0};
    unsigned filter_mask = 0;
    haddr_t address = 0;
    hsize_t size = 0;
    if (H5Dget_chunk_info(dataset.get(), space.get(), c, offset, &filter_mask, &address, &size) < 0 ||
        filter_mask != 0 || offset[0] % chunk[0] != 0) {
      return absl::DataLossError(absl::StrCat(path_, ": cannot index the chunks of '", name, "'"));
    }
    const size_t slot = static_cast<size_t>(offset[0] / chunk[0]);
    if (slot >= index.addresses.size()) {
      return absl::DataLossError(absl::StrCat(path_, ": a chunk of '", name, "' lies outside it"));
    }
    index.addresses[slot] = address;
    index.sizes[slot] = size;
  }
  return index;
}

std::vector<std::string> Hdf5File::dataset_names() const {
  std::vector<std::string> names;
  H5Ovisit(handle_, H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &names);
  return names;
}

absl::Status Hdf5File::create_virtual(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                                      const std::vector<VirtualPiece>& pieces) {
  const std::vector<hsize_t> dims = to_hsize(shape);
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const Handle type = file_type_of(dtype);
  if (is_float_dtype(dtype)) {
    // Gaps read as NaN rather than a plausible zero.
    const float fill = std::numeric_limits<float>::quiet_NaN();
    Handle fill_type(H5Tcopy(H5T_NATIVE_FLOAT), H5Tclose);
    std::vector<unsigned char> fill_bytes(H5Tget_size(type.get()) > 4 ? H5Tget_size(type.get()) : 4);
    std::memcpy(fill_bytes.data(), &fill, sizeof(fill));
    if (H5Tconvert(fill_type.get(), type.get(), 1, fill_bytes.data(), nullptr, H5P_DEFAULT) >= 0) {
      H5Pset_fill_value(properties.get(), type.get(), fill_bytes.data());
    }
  }
  for (const VirtualPiece& piece : pieces) {
    Handle virtual_space(H5Scopy(space.get()), H5Sclose);
    GPT_RETURN_IF_ERROR(select_slab(virtual_space.get(), path_, name, piece.offsets, piece.counts));
    const std::vector<hsize_t> count = to_hsize(piece.counts);
    Handle source_space(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose);
    if (H5Pset_virtual(properties.get(), virtual_space.get(), piece.file.c_str(), piece.dataset.c_str(),
                       source_space.get()) < 0) {
      return absl::InternalError(absl::StrCat(path_, ": cannot map '", piece.file, ":", piece.dataset, "' into '", name, "'"));
    }
  }
  Handle link_properties(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(link_properties.get(), 1);
  Handle dataset(H5Dcreate2(handle_, name.c_str(), type.get(), space.get(), link_properties.get(), properties.get(),
                            H5P_DEFAULT),
                 H5Dclose);
  if (!dataset.ok()) return absl::InternalError(absl::StrCat(path_, ": cannot create virtual dataset '", name, "'"));
  return absl::OkStatus();
}

absl::Status Hdf5File::write_text(const std::string& name, const std::string& text) {
  return write_dataset(handle_, path_, name, {static_cast<int64_t>(text.size())}, H5T_STD_U8LE, H5T_NATIVE_UCHAR,
                       text.data());
}

absl::StatusOr<std::string> Hdf5File::read_text(const std::string& name) const {
  GPT_ASSIGN_OR_RETURN(HostArray<unsigned char> bytes, read_dataset<unsigned char>(handle_, path_, name, H5T_NATIVE_UCHAR));
  return std::string(bytes.values.begin(), bytes.values.end());
}

absl::Status Hdf5File::close_and_sync() {
  if (handle_ < 0) return absl::OkStatus();
  if (H5Fflush(handle_, H5F_SCOPE_GLOBAL) < 0) {
    return absl::DataLossError(absl::StrCat(path_, ": cannot flush (disk full?)"));
  }
  void* descriptor = nullptr;
  int fd = -1;
  if (H5Fget_vfd_handle(handle_, H5P_DEFAULT, &descriptor) >= 0 && descriptor != nullptr) {
    fd = ::dup(*static_cast<int*>(descriptor));
  }
  const herr_t closed = H5Fclose(std::exchange(handle_, -1));
  const bool synced = fd >= 0 && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  if (closed < 0 || !synced) return absl::DataLossError(absl::StrCat(path_, ": cannot close and sync (disk full?)"));
  return absl::OkStatus();
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

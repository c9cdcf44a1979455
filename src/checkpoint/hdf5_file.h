// A small RAII layer over the HDF5 C API: files, float32 / bfloat16 / int32 / int64 datasets with
// shapes, slices of them (hyperslabs), checksummed chunked datasets, virtual datasets over other
// files, and scalar attributes. Errors opening or reading a file are absl::Status naming the file
// and the dataset (a user can fix them); HDF5's own error stack printing is silenced.
//
// BF16 is stored as an HDF5 floating-point type of 16 bits (sign 15, exponent 7..14 with bias 127,
// mantissa 0..6): the upper half of an IEEE single, so HDF5 tools convert it to float correctly.
// FP16 is IEEE half (sign 15, exponent 10..14 with bias 15, mantissa 0..9), which h5py reads as
// numpy's float16.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
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
  static absl::StatusOr<Hdf5File> open_read_write(const std::string& path);  // tests edit files with it
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

  // Chunked datasets for slices and checksums. `checksum` adds HDF5's Fletcher-32 filter: every
  // chunk read is verified, and a damaged chunk is an error naming the file and dataset.
  absl::Status create_dataset(const std::string& name, DType dtype, const std::vector<int64_t>& shape, bool checksum);
  // A whole checksummed dataset (as create_dataset(..., checksum = true) makes it) written chunk by
  // chunk with H5Dwrite_chunk: the Fletcher-32 checksums are computed here on `threads` threads
  // (HDF5's own filter runs on one thread at about 250 MB/s), the bytes are what HDF5 would write.
  absl::Status write_checksummed(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                                 const void* values, int threads);
  // The slice [offsets, offsets + counts) of a dataset, row-major, in the dataset's own dtype
  // (`dtype` must match it: conversions are the caller's, so that rounding is ours).
  absl::Status write_slab(const std::string& name, const std::vector<int64_t>& offsets,
                          const std::vector<int64_t>& counts, DType dtype, const void* values);
  absl::Status read_slab(const std::string& name, const std::vector<int64_t>& offsets,
                         const std::vector<int64_t>& counts, DType dtype, void* out) const;
  struct DatasetInfo {
    DType dtype = DType::kFloat32;
    std::vector<int64_t> shape;
    bool checksummed = false;
    bool is_virtual = false;
  };
  absl::StatusOr<DatasetInfo> dataset_info(const std::string& name) const;
  // Where a chunked dataset's chunks lie in the file, for readers that fetch and verify them
  // without the library (checkpoint loads, on several threads). Chunks of whole rows only (as
  // create_dataset makes them); a rank-1 dataset counts as rows of one element.
  struct ChunkIndex {
    DType dtype = DType::kFloat32;
    int64_t rows = 0, columns = 0;  // the dataset as [rows, columns]
    int64_t chunk_rows = 0;         // rows per chunk (the last may hold fewer valid rows)
    bool fletcher32 = false;        // each chunk's data is followed by its 4-byte checksum
    std::vector<uint64_t> addresses;  // chunk c (rows [c * chunk_rows, ...)) starts here in the file
    std::vector<uint64_t> sizes;      // stored bytes of chunk c, checksum included
  };
  // NotFound for a dataset that is not chunked in whole rows (read it with read_slab).
  absl::StatusOr<ChunkIndex> chunk_index(const std::string& name) const;

  // Every dataset in the file, by full path without the leading '/', in name order.
  std::vector<std::string> dataset_names() const;

  // A virtual dataset of `shape` whose pieces live in other files (paths relative to this file's
  // directory); h5py and h5dump read it as one tensor. Elements no piece covers read as NaN
  // (floats) or 0.
  struct VirtualPiece {
    std::string file;
    std::string dataset;
    std::vector<int64_t> offsets;
    std::vector<int64_t> counts;
  };
  absl::Status create_virtual(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                              const std::vector<VirtualPiece>& pieces);

  // Text (tables, argument lists) as a 1-D dataset of bytes: no attribute size limit.
  absl::Status write_text(const std::string& name, const std::string& text);
  absl::StatusOr<std::string> read_text(const std::string& name) const;

  // Flushes, fsyncs and closes the file: after an OK return its bytes are on the disk.
  absl::Status close_and_sync();

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

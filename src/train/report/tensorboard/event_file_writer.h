// A TensorBoard event file: TFRecord records (length, masked CRC-32C of the length, an Event
// message, masked CRC-32C of the message) in <dir>/events.out.tfevents.<seconds>.<host>.<pid>,
// the first record the file-version event. Each run writes a new file in the directory, as
// PyTorch's SummaryWriter (which Megatron uses) does; TensorBoard reads them as one run.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpt::tensorboard {

// TFRecord's masked CRC: the CRC-32C rotated right by 15 bits plus 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);
// One TFRecord around `payload`.
std::string tfrecord(const std::string& payload);

class EventFileWriter {
 public:
  // Creates `dir` (and its parents) when missing and the event file in it; an error names the path
  // and the reason.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> open(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // A scalar summary (Summary.Value.simple_value, a float as in TensorBoard) at `step`.
  void add_scalar(const std::string& tag, double value, int64_t step);
  // Writes what is buffered; a failed write is reported once on stderr and training goes on (the
  // events are a by-product, not the job).
  void flush();
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  void write_record(const std::string& payload);

  std::FILE* file_;
  std::string path_;
  bool failed_ = false;
};

}  // namespace gpt::tensorboard

#include "train/report/tensorboard/event_file_writer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/crc32c.h"
#include "train/report/tensorboard/event.pb.h"

namespace gpt::tensorboard {

namespace {

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& payload) {
  std::string length;
  append_le(length, payload.size(), 8);
  std::string record = length;
  append_le(record, masked_crc32c(length.data(), length.size()), 4);
  record += payload;
  append_le(record, masked_crc32c(payload.data(), payload.size()), 4);
  return record;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::open(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::FailedPreconditionError(absl::StrCat("--tensorboard-dir ", dir, ": ", error.message()));
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const std::string path = (std::filesystem::path(dir) /
                            absl::StrCat("events.out.tfevents.", static_cast<int64_t>(wall_time()), ".", host, ".",
                                         static_cast<int64_t>(getpid()), ".0"))
                               .string();
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("--tensorboard-dir: cannot create ", path, ": ",
                                                      std::strerror(errno)));
  }
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(file, path));
  Event event;
  event.set_wall_time(wall_time());
  event.set_file_version("brain.Event:2");
  writer->write_record(event.SerializeAsString());
  writer->flush();
  return writer;
}

EventFileWriter::~EventFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  Event event;
  event.set_wall_time(wall_time());
  event.set_step(step);
  SummaryValue* summary_value = event.mutable_summary()->add_value();
  summary_value->set_tag(tag);
  summary_value->set_simple_value(static_cast<float>(value));
  write_record(event.SerializeAsString());
}

void EventFileWriter::write_record(const std::string& payload) {
  const std::string record = tfrecord(payload);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() && !failed_) {
    std::fprintf(stderr, "warning: writing %s failed (%s); TensorBoard events stop here\n", path_.c_str(),
                 std::strerror(errno));
    failed_ = true;
  }
}

void EventFileWriter::flush() {
  if (std::fflush(file_) != 0 && !failed_) {
    std::fprintf(stderr, "warning: writing %s failed (%s); TensorBoard events stop here\n", path_.c_str(),
                 std::strerror(errno));
    failed_ = true;
  }
}

}  // namespace gpt::tensorboard

// The FP8 scaling state (delayed scaling's scales and amax histories) as checkpoint records, so
// that a resumed run casts with the scales the uninterrupted run would have used.
#pragma once

#include "model/fp8_scaling.h"
#include "train/checkpoint_records.h"

namespace gpt {

class Fp8CheckpointRecords : public CheckpointRecords {
 public:
  explicit Fp8CheckpointRecords(Fp8Scaling& scaling) : scaling_(scaling) {}
  void save_records(std::map<std::string, std::string>& records) const override { scaling_.save_records(records); }
  absl::Status load_records(const std::map<std::string, std::string>& records) override {
    return scaling_.load_records(records);
  }

 private:
  Fp8Scaling& scaling_;
};

}  // namespace gpt

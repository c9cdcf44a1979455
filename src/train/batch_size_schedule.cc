#include "train/batch_size_schedule.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/check.h"

namespace gpt {
namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// Megatron's _parse_numeric_value: int(float(value) * multiplier), K/M/B/T (any case) suffixes.
absl::StatusOr<int64_t> parse_number(const std::string& entry, const std::string& text) {
  std::string value = text;
  double multiplier = 1.0;
  if (!value.empty()) {
    switch (std::toupper(static_cast<unsigned char>(value.back()))) {
      case 'T': multiplier = 1e12; break;
      case 'B': multiplier = 1e9; break;
      case 'M': multiplier = 1e6; break;
      case 'K': multiplier = 1e3; break;
      default: break;
    }
    if (multiplier != 1.0) value.pop_back();
  }
  char* end = nullptr;
  const double number = value.empty() ? NAN : std::strtod(value.c_str(), &end);
  const bool whole = !value.empty() && end == value.c_str() + value.size() && !std::isspace(value.front());
  const double scaled = number * multiplier;
  // Python's int() of inf or nan fails, and 2^63 is past any int64_t.
  if (!whole || !std::isfinite(scaled) || std::fabs(scaled) >= 9.2e18) {
    return invalid(absl::StrCat("--step-batch-size-schedule: \"", text, "\" in entry \"", entry,
                                "\" is not a number (digits with an optional K, M, B or T suffix)"));
  }
  return static_cast<int64_t>(scaled);  // truncation toward zero, as Python's int()
}

int64_t floor_divide(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0); }

}  // namespace

BatchSizeSchedule BatchSizeSchedule::constant(int64_t global_batch_size) {
  BatchSizeSchedule s;
  s.kind_ = Kind::kConstant;
  s.global_batch_size_ = global_batch_size;
  return s;
}

absl::StatusOr<BatchSizeSchedule> BatchSizeSchedule::ramp_up(int64_t start, int64_t increment, int64_t ramp_samples,
                                                             int64_t global_batch_size) {
  if (start <= 0) return invalid(absl::StrCat("--rampup-batch-size: the start batch size must be positive (got ", start, ")"));
  if (increment <= 0) {
    return invalid(absl::StrCat("--rampup-batch-size: the batch size increment must be positive (got ", increment, ")"));
  }
  // Megatron asserts >= 0, then divides 0 by 0.0 at the first sample (ZeroDivisionError).
  if (ramp_samples <= 0) {
    return invalid(absl::StrCat("--rampup-batch-size: the ramp-up samples must be positive (got ", ramp_samples, ")"));
  }
  const int64_t difference = global_batch_size - start;
  if (difference < 0) {
    return invalid(absl::StrCat("--rampup-batch-size: expected the global batch size (", global_batch_size,
                                ") to be greater than or equal to the start batch size (", start, ")"));
  }
  if (difference % increment != 0) {
    return invalid(absl::StrCat("--rampup-batch-size: expected the global batch size interval (", difference,
                                ") to be divisible by the batch size increment (", increment, ")"));
  }
  // Megatron divides the ramp-up samples by the number of increments: none is a ZeroDivisionError there.
  if (difference == 0) {
    return invalid(absl::StrCat("--rampup-batch-size: the start batch size equals the global batch size (",
                                global_batch_size, "): there is nothing to ramp (give --global-batch-size only)"));
  }
  BatchSizeSchedule s;
  s.kind_ = Kind::kRampUp;
  s.global_batch_size_ = global_batch_size;
  s.start_ = start;
  s.increment_ = increment;
  s.ramp_samples_ = ramp_samples;
  s.samples_per_increment_ = static_cast<double>(ramp_samples) / static_cast<double>(difference / increment);
  return s;
}

absl::StatusOr<BatchSizeSchedule> BatchSizeSchedule::steps(const std::string& text, int64_t seq_length) {
  GPT_CHECK_GT(seq_length, 0);
  BatchSizeSchedule s;
  s.kind_ = Kind::kSteps;
  s.text_ = text;
  for (const std::string& entry : std::vector<std::string>(absl::StrSplit(text, absl::ByAnyChar(" ,\t\n"), absl::SkipEmpty()))) {
    const size_t colon = entry.find(':');
    if (colon == std::string::npos) {
      return invalid(absl::StrCat("--step-batch-size-schedule: invalid entry \"", entry,
                                  "\" (expected THRESHOLD:BATCH_SIZE)"));
    }
    GPT_ASSIGN_OR_RETURN(const int64_t tokens, parse_number(entry, entry.substr(0, colon)));
    GPT_ASSIGN_OR_RETURN(const int64_t batch, parse_number(entry, entry.substr(colon + 1)));
    s.steps_.emplace_back(floor_divide(tokens, seq_length), batch);
  }
  if (s.steps_.empty()) return invalid("--step-batch-size-schedule: the schedule must have at least one entry");
  std::stable_sort(s.steps_.begin(), s.steps_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  if (s.steps_.front().first != 0) {
    return invalid(absl::StrCat("--step-batch-size-schedule: the first entry must have threshold 0, got ",
                                s.steps_.front().first, " samples"));
  }
  for (size_t i = 1; i < s.steps_.size(); ++i) {
    if (s.steps_[i].first <= s.steps_[i - 1].first) {
      return invalid(absl::StrCat("--step-batch-size-schedule: thresholds must be strictly increasing in samples "
                                  "(tokens / --seq-length ",
                                  seq_length, "), got ", s.steps_[i - 1].first, " before ", s.steps_[i].first));
    }
  }
  for (const auto& [threshold, batch] : s.steps_) {
    if (batch <= 0) return invalid(absl::StrCat("--step-batch-size-schedule: batch size must be positive, got ", batch));
  }
  s.global_batch_size_ = s.steps_.back().second;
  return s;
}

int64_t BatchSizeSchedule::batch_size_at(int64_t consumed_samples) const {
  switch (kind_) {
    case Kind::kConstant: return global_batch_size_;
    case Kind::kRampUp: {
      if (consumed_samples > ramp_samples_) return global_batch_size_;
      const auto steps = static_cast<int64_t>(static_cast<double>(consumed_samples) / samples_per_increment_);
      const int64_t batch = start_ + steps * increment_;
      GPT_CHECK_LE(batch, global_batch_size_) << "ramp-up past the global batch size at " << consumed_samples;
      return batch;
    }
    case Kind::kSteps: {
      int64_t batch = steps_.front().second;
      for (const auto& [threshold, size] : steps_) {
        if (consumed_samples < threshold) break;
        batch = size;
      }
      return batch;
    }
  }
  return global_batch_size_;
}

int64_t BatchSizeSchedule::next_change(int64_t consumed_samples) const {
  switch (kind_) {
    case Kind::kConstant: return -1;
    case Kind::kRampUp: return consumed_samples > ramp_samples_ ? -1 : consumed_samples + 1;
    case Kind::kSteps:
      for (const auto& [threshold, size] : steps_) {
        if (threshold > consumed_samples) return threshold;
      }
      return -1;
  }
  return -1;
}

int64_t BatchSizeSchedule::iterations_before(int64_t consumed_samples, int64_t limit) const {
  const int64_t batch = batch_size_at(consumed_samples);
  const int64_t change = next_change(consumed_samples);
  if (change < 0) return limit;
  // Iterations that start below `change` all use `batch`: ceil((change - c) / batch).
  return std::min(limit, (change - consumed_samples + batch - 1) / batch);
}

int64_t BatchSizeSchedule::iterations_for_samples(int64_t train_samples) const {
  int64_t iterations = 0, consumed = 0;
  switch (kind_) {
    case Kind::kConstant: return train_samples / global_batch_size_;
    case Kind::kRampUp:
      // Megatron's update_train_iters with ramp-up: the ramp iterations while at most the ramp's
      // (and the run's) samples were consumed, then whole final batches (a partial one dropped).
      while (consumed <= ramp_samples_ && consumed <= train_samples) {
        consumed += batch_size_at(consumed);
        ++iterations;
      }
      if (train_samples > consumed) iterations += (train_samples - consumed) / global_batch_size_;
      return iterations;
    case Kind::kSteps:
      // With a step schedule: iterations until the samples are reached (the last batch whole),
      // counted a constant stretch at a time.
      while (consumed < train_samples) {
        const int64_t batch = batch_size_at(consumed);
        const int64_t to_end = (train_samples - consumed + batch - 1) / batch;
        const int64_t run = std::max<int64_t>(1, iterations_before(consumed, to_end));
        consumed += run * batch;
        iterations += run;
      }
      return iterations;
  }
  return iterations;
}

// A run of `run` iterations of `batch` samples from `consumed` passes the largest int64: only
// hostile flags get there, and check_derived_counts refuses them naming the flags, so the walks
// below saturate instead of overflowing.
static bool passes_int64(int64_t consumed, int64_t run, int64_t batch) {
  return batch > 0 && run > (std::numeric_limits<int64_t>::max() - consumed) / batch;
}

int64_t BatchSizeSchedule::samples_after(int64_t consumed_samples, int64_t iterations) const {
  while (iterations > 0) {
    const int64_t run = std::max<int64_t>(1, iterations_before(consumed_samples, iterations));
    const int64_t batch = batch_size_at(consumed_samples);
    if (passes_int64(consumed_samples, run, batch)) return std::numeric_limits<int64_t>::max();
    consumed_samples += run * batch;
    iterations -= run;
  }
  return consumed_samples;
}

std::vector<std::pair<int64_t, int64_t>> BatchSizeSchedule::changes(int64_t consumed_samples,
                                                                    int64_t iterations) const {
  std::vector<std::pair<int64_t, int64_t>> out;
  while (iterations > 0) {
    const int64_t batch = batch_size_at(consumed_samples);
    if (out.empty() || out.back().second != batch) out.emplace_back(consumed_samples, batch);
    const int64_t run = std::max<int64_t>(1, iterations_before(consumed_samples, iterations));
    if (passes_int64(consumed_samples, run, batch)) break;  // no later batch within int64
    consumed_samples += run * batch;
    iterations -= run;
  }
  return out;
}

std::vector<int64_t> BatchSizeSchedule::batch_sizes() const {
  std::vector<int64_t> sizes;
  switch (kind_) {
    case Kind::kConstant: sizes.push_back(global_batch_size_); break;
    case Kind::kRampUp:
      for (int64_t b = start_; b <= global_batch_size_; b += increment_) sizes.push_back(b);
      break;
    case Kind::kSteps:
      for (const auto& [threshold, batch] : steps_) sizes.push_back(batch);
      std::sort(sizes.begin(), sizes.end());
      sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
      break;
  }
  return sizes;
}

std::string BatchSizeSchedule::describe(int64_t micro_batch_times_data_parallel, int64_t seq_length) const {
  switch (kind_) {
    case Kind::kConstant: return "";
    case Kind::kRampUp:
      return absl::StrCat("> batch size ramp-up (--rampup-batch-size): from global batch size ", start_, " to ",
                          global_batch_size_, " in increments of ", increment_, " over ", ramp_samples_,
                          " samples (", samples_per_increment_, " samples per increment)\n");
    case Kind::kSteps: {
      std::string out = absl::StrCat("> using step batch size schedule: ", text_, "\n");
      absl::StrAppend(&out, "  step batch size schedule (", steps_.size(), " steps, thresholds in tokens / ",
                      seq_length, "):\n");
      for (const auto& [threshold, batch] : steps_) {
        absl::StrAppend(&out, "  >= ", threshold * seq_length, " tokens (", threshold, " samples) -> batch_size=",
                        batch, ", num_microbatches=", batch / micro_batch_times_data_parallel, "\n");
      }
      return out;
    }
  }
  return "";
}

}  // namespace gpt

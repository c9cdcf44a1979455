#include "model/fp8_scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "core/context.h"
#include "core/tensor.h"
#include "parallel/comm/communicator.h"

namespace gpt {
namespace {

constexpr const char* kLinearNames[Fp8Scaling::kLinearsPerLayer] = {"linear_qkv", "linear_proj", "linear_fc1",
                                                                    "linear_fc2"};
constexpr const char* kRoleNames[3] = {"input", "weight", "grad_output"};
constexpr int kRoles = 3;

std::string record_key(int64_t layer, int linear, int role) {
  return absl::StrCat("fp8/layer", layer, ".", kLinearNames[linear], ".", kRoleNames[role]);
}

// Floats as text that reads back to the same bits ("%.9g"), space separated.
std::string floats_text(float first, const std::vector<float>& rest) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.9g", first);
  std::string text = buffer;
  for (float v : rest) {
    std::snprintf(buffer, sizeof(buffer), " %.9g", v);
    text += buffer;
  }
  return text;
}

}  // namespace

Fp8Scaling::Fp8Scaling(const Fp8Config& config, int64_t num_layers)
    : config_(config), num_layers_(num_layers), entries_(static_cast<size_t>(num_layers * kLinearsPerLayer * kRoles)) {
  GPT_CHECK(config.amax_history_len >= 1) << "fp8 amax history length " << config.amax_history_len;
  for (Entry& e : entries_) e.history.assign(static_cast<size_t>(config.amax_history_len), 0.0f);
}

Fp8Scaling::Entry& Fp8Scaling::entry(int64_t layer, int linear, Fp8Role role) {
  GPT_CHECK(layer >= 0 && layer < num_layers_ && linear >= 0 && linear < kLinearsPerLayer)
      << "fp8 state of layer " << layer << " linear " << linear;
  return entries_[static_cast<size_t>((layer * kLinearsPerLayer + linear) * kRoles + static_cast<int>(role))];
}

float Fp8Scaling::scale_for(float amax, Fp8Format format, int margin, float previous) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return previous;
  return fp8_limits(format).max_finite / amax / std::ldexp(1.0f, margin);
}

float Fp8Scaling::scale(int64_t layer, int linear, Fp8Role role, float amax) {
  Entry& e = entry(layer, linear, role);
  if (config_.recipe == Fp8Recipe::kTensorwise) return scale_for(amax, format(role), 0, 1.0f);
  if (recording_) e.step_amax = std::isnan(amax) || std::isnan(e.step_amax) ? NAN : std::max(e.step_amax, amax);
  return e.scale;
}

void Fp8Scaling::begin_step() {
  recording_ = true;
  for (Entry& e : entries_) e.step_amax = 0.0f;
}

void Fp8Scaling::end_step(Context& ctx, Communicator& world) {
  recording_ = false;
  if (config_.recipe != Fp8Recipe::kDelayed) return;
  // Every rank's amaxes (0 for layers it does not hold), maximum over the world: host memory,
  // as the CPU backend's communicators take it (FP8 runs on the CPU backend only).
  std::vector<float>& amaxes = step_amaxes_;  // kept between steps: no allocation per step
  amaxes.resize(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) amaxes[i] = entries_[i].step_amax;
  world.all_reduce(ctx, Tensor(amaxes.data(), DType::kFloat32, Shape{static_cast<int64_t>(amaxes.size())}, Device::kCpu),
                   ReduceOp::kMax);
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    std::rotate(e.history.rbegin(), e.history.rbegin() + 1, e.history.rend());
    e.history.front() = amaxes[i];
    float amax = e.history.front();
    if (config_.amax_history_max) {
      for (float v : e.history) amax = std::isnan(v) || std::isnan(amax) ? NAN : std::max(amax, v);
    }
    const Fp8Role role = static_cast<Fp8Role>(i % kRoles);
    e.scale = scale_for(amax, format(role), config_.margin, e.scale);
  }
}

void Fp8Scaling::save_records(std::map<std::string, std::string>& records) const {
  if (config_.recipe != Fp8Recipe::kDelayed) return;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const int64_t layer = static_cast<int64_t>(i) / (kLinearsPerLayer * kRoles);
    const int linear = static_cast<int>(i / kRoles % kLinearsPerLayer), role = static_cast<int>(i % kRoles);
    records[record_key(layer, linear, role)] = floats_text(entries_[i].scale, entries_[i].history);
  }
}

absl::Status Fp8Scaling::load_records(const std::map<std::string, std::string>& records) {
  if (config_.recipe != Fp8Recipe::kDelayed) return absl::OkStatus();
  const bool any = std::any_of(records.begin(), records.end(),
                               [](const auto& kv) { return kv.first.rfind("fp8/", 0) == 0; });
  if (!any) return absl::OkStatus();  // a checkpoint of a run without delayed FP8: scales start at 1
  for (size_t i = 0; i < entries_.size(); ++i) {
    const int64_t layer = static_cast<int64_t>(i) / (kLinearsPerLayer * kRoles);
    const int linear = static_cast<int>(i / kRoles % kLinearsPerLayer), role = static_cast<int>(i % kRoles);
    const std::string key = record_key(layer, linear, role);
    const auto found = records.find(key);
    if (found == records.end()) return absl::InvalidArgumentError(absl::StrCat("checkpoint record ", key, " is missing"));
    std::vector<float> values;
    for (absl::string_view part : absl::StrSplit(found->second, ' ', absl::SkipEmpty())) {
      float v = 0.0f;
      if (!absl::SimpleAtof(part, &v)) {
        return absl::InvalidArgumentError(absl::StrCat("checkpoint record ", key, ": '", part, "' is not a number"));
      }
      values.push_back(v);
    }
    if (values.size() != entries_[i].history.size() + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint record ", key, " holds an amax history of ", values.size() - std::min<size_t>(values.size(), 1),
          " steps; this run's --fp8-amax-history-len is ", entries_[i].history.size()));
    }
    entries_[i].scale = values.front();
    std::copy(values.begin() + 1, values.end(), entries_[i].history.begin());
  }
  return absl::OkStatus();
}

}  // namespace gpt

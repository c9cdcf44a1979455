// config.json of a Hugging Face model directory, as hf_checkpoint.cc's import reads it.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace gpt {

// A parsed config.json with typed look-ups whose errors name the file and the field.
class JsonConfig {
 public:
  static absl::StatusOr<JsonConfig> read(const std::string& path) {
    JsonConfig config;
    config.path_ = path;
    simdjson::padded_string text;
    if (simdjson::padded_string::load(path).get(text) != simdjson::SUCCESS) {
      return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
    }
    config.parser_ = std::make_shared<simdjson::dom::parser>();
    if (config.parser_->parse(text).get(config.root_) != simdjson::SUCCESS || !config.root_.is_object()) {
      return absl::DataLossError(absl::StrCat(path, ": not a JSON object"));
    }
    return config;
  }
  bool has(const char* key) const {
    simdjson::dom::element e;
    return root_[key].get(e) == simdjson::SUCCESS && !e.is_null();
  }
  absl::StatusOr<int64_t> integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      return absl::DataLossError(absl::StrCat(path_, ": no \"", key, "\""));
    }
    int64_t v = 0;
    if (root_[key].get_int64().get(v) != simdjson::SUCCESS || v < 0) {
      return absl::DataLossError(absl::StrCat(path_, ": \"", key, "\" is not a non-negative integer"));
    }
    return v;
  }
  absl::StatusOr<double> number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    double v = 0;
    if (root_[key].get_double().get(v) != simdjson::SUCCESS) {
      int64_t i = 0;
      if (root_[key].get_int64().get(i) != simdjson::SUCCESS) {
        return absl::DataLossError(absl::StrCat(path_, ": \"", key, "\" is not a number"));
      }
      v = static_cast<double>(i);
    }
    return v;
  }
  absl::StatusOr<bool> boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    bool v = false;
    if (root_[key].get_bool().get(v) != simdjson::SUCCESS) {
      return absl::DataLossError(absl::StrCat(path_, ": \"", key, "\" is not true or false"));
    }
    return v;
  }
  // An integer or a list of integers (HF's eos_token_id may be either); empty when absent or null.
  absl::StatusOr<std::vector<int64_t>> integers(const char* key) const {
    std::vector<int64_t> values;
    if (!has(key)) return values;
    int64_t v = 0;
    if (root_[key].get_int64().get(v) == simdjson::SUCCESS) {
      values.push_back(v);
      return values;
    }
    simdjson::dom::array list;
    const bool ok = root_[key].get_array().get(list) == simdjson::SUCCESS;
    // (A default array is not to be iterated: only a parsed one.)
    if (ok) {
      for (simdjson::dom::element e : list) {
        if (e.get_int64().get(v) != simdjson::SUCCESS) break;
        values.push_back(v);
      }
    }
    if (!ok || values.size() != list.size()) {
      return absl::DataLossError(absl::StrCat(path_, ": \"", key, "\" is neither an integer nor a list of integers"));
    }
    return values;
  }
  std::string text(const char* key, const std::string& fallback) const {
    std::string_view v;
    if (root_[key].get_string().get(v) != simdjson::SUCCESS) return fallback;
    return std::string(v);
  }
  // The object under `key` (its errors name "FILE: key"), none when absent or null, an error when
  // it is something else.
  absl::StatusOr<std::optional<JsonConfig>> object(const char* key) const {
    if (!has(key)) return std::optional<JsonConfig>();
    JsonConfig inner;
    if (root_[key].get(inner.root_) != simdjson::SUCCESS || !inner.root_.is_object()) {
      return absl::DataLossError(absl::StrCat(path_, ": \"", key, "\" is not an object"));
    }
    inner.parser_ = parser_;
    inner.path_ = absl::StrCat(path_, ": ", key);
    return std::optional<JsonConfig>(std::move(inner));
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::shared_ptr<simdjson::dom::parser> parser_;  // shared with the objects inside (object())
  simdjson::dom::element root_;
};

}  // namespace gpt
